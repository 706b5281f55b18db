"""The `deps` table (docs/semantics.md "Dependencies"): a dependent job's
edges and fan-in state, the index from a parent to its dependents, and
what made each run a dependency made. Three kinds of row, by their
first byte:

- b"d" + child's job key -> `DepState` (its `after` or `requires`, and
  the parents' ends it holds);
- b"c" + parent's job key + child's job key -> b"" (the parent's
  dependents, in one range of keys: an ending result reads them with one
  cursor, and a parent with none costs one lookup);
- b"r" + the day the run was made (u32, days since the epoch) + the run's
  runs-by-job key -> `list[Cause]` (a run's `caused_by`): dropped with the
  run's own history row, never while the run can be read
  (`drop_causes_before`); a job's with the job.

Read by apply's rules (engine/rules/deps.py) and by the API's reads
(`deps_view`), over a read or a write transaction."""

import struct
from collections.abc import Iterator

import lmdb
import msgspec

from tempo import errors, limits
from tempo.engine import keys
from tempo.engine.records import Cause, Decoder, DepState
from tempo.engine.tables.reads import Reads
from tempo.engine.tables.writes import Tables

STATE = b"d"
CHILD = b"c"
CAUSE = b"r"
DAY = struct.Struct(">I")
_enc = msgspec.msgpack.Encoder()
_state_dec = Decoder(DepState)
_causes_dec: Decoder[list[Cause]] = Decoder(list[Cause], "caused_by")


def state(t: Reads, job_id: str) -> DepState | None:
    raw = t.txn.get(STATE + keys.job_key(job_id), db=t.deps)
    return None if raw is None else _state_dec.decode(raw)


def put_state(t: Tables, job_id: str, found: DepState | None) -> None:
    key = STATE + keys.job_key(job_id)
    if found is None:
        t.txn.delete(key, db=t.deps)
    else:
        t.txn.put(key, _enc.encode(found), db=t.deps)
        t.deps_used = True  # read once per transaction: a later command of it sees the row


def used(t: Reads) -> bool:
    """Whether the table holds any row (a store that never had an edge: none)."""
    return t.txn.cursor(db=t.deps).first()


def has_dependents(t: Reads, job_key: bytes) -> bool:
    """Whether the job (by its key) has a dependent: one cursor lookup,
    the whole cost of dependencies on an ending result of a job with none."""
    head = CHILD + job_key
    cur = t.txn.cursor(db=t.deps)
    return cur.set_range(head) and cur.key().startswith(head)


def dependents(t: Reads, job_id: str, limit: int) -> Iterator[str]:
    """The IDs of the job's dependents, at most `limit`, in key order."""
    head = CHILD + keys.job_key(job_id)
    cur = t.txn.cursor(db=t.deps)
    found = cur.set_range(head)
    for _ in range(limit):
        if not found or not cur.key().startswith(head):
            return
        yield keys.job_id_of(cur.key()[len(head):])
        found = cur.next()


def link(t: Tables, parent_id: str, child_id: str) -> None:
    t.txn.put(CHILD + keys.job_key(parent_id) + keys.job_key(child_id), b"", db=t.deps)
    t.deps_used = True


def unlink(t: Tables, parent_id: str, child_id: str) -> None:
    t.txn.delete(CHILD + keys.job_key(parent_id) + keys.job_key(child_id), db=t.deps)


def _cause_key(job_id: str, nominal_ms: int) -> bytes:
    """A run's `caused_by` row: its nominal time is when it was made."""
    return CAUSE + DAY.pack(nominal_ms // limits.day_ms) + keys.by_job_key(job_id, nominal_ms)


def put_causes(t: Tables, job_id: str, nominal_ms: int, causes: list[Cause]) -> None:
    t.txn.put(_cause_key(job_id, nominal_ms), _enc.encode(causes), db=t.deps)


def causes(t: Reads, job_id: str, nominal_ms: int) -> list[Cause]:
    raw = t.txn.get(_cause_key(job_id, nominal_ms), db=t.deps)
    return [] if raw is None else _causes_dec.decode(raw)


def drop_causes(t: Tables, job_id: str) -> None:
    """Every `caused_by` row of a job being deleted: one range a day kept."""
    job_key = keys.job_key(job_id)
    cur = t.txn.cursor(db=t.deps)
    found = cur.set_range(CAUSE)
    while found and cur.key().startswith(CAUSE):
        day = cur.key()[len(CAUSE):len(CAUSE) + DAY.size]
        head = CAUSE + day + job_key
        found = cur.set_range(head)
        while found and cur.key().startswith(head):
            found = cur.delete()
        found = cur.set_range(CAUSE + DAY.pack(DAY.unpack(day)[0] + 1))


def drop_causes_before(t: Tables, before_day: int) -> None:
    """The `caused_by` rows of runs made before `before_day`, with the
    history of those days (`DropHistory`, after the history buckets
    went), except those whose run can still be read: open, or finished
    on a day kept. Those stay, and are looked at again by a later drop:
    so a row goes with its run, whatever day it was made on. Each row
    of the days dropped costs a lookup in the open runs and one in each
    history day kept (at most `limits.history_buckets`), once a day; a
    row that stays (its run is open, or ended on a later day than it was
    made) is looked at again by each drop until its run goes."""
    end = CAUSE + DAY.pack(before_day)
    cur = t.txn.cursor(db=t.deps)
    found = cur.set_range(CAUSE)
    # `delete` moves to the next row; past the last, the key is empty.
    while found and CAUSE <= cur.key() < end:
        if t.run_anywhere(*keys.parse_by_job_key(cur.key()[len(CAUSE) + DAY.size:])) is None:
            found = cur.delete()
        else:
            found = cur.next()


class DepQueries:
    """The API's reads of the `deps` table, for `Store`, which opens `env`
    and its databases."""

    env: lmdb.Environment
    db: dict[str, lmdb._Database]
    buckets: list[lmdb._Database]

    def deps_state(self, job_id: str) -> DepState | None:
        with self.env.begin() as txn:
            return state(Reads(txn, self.db, self.buckets), job_id)

    def deps_views(self, job_ids: list[str]) -> dict[str, tuple[DepState | None, list[str], int]]:
        """`deps_view` of each of the jobs that has edges or dependents,
        in one transaction (a page of jobs)."""
        found: dict[str, tuple[DepState | None, list[str], int]] = {}
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            for job_id in job_ids:
                edges = state(tx, job_id)
                every = list(dependents(tx, job_id, limits.deps_dependents_max))
                if edges is not None or every:
                    found[job_id] = (edges, every[: limits.deps_shown_max], len(every))
        return found

    def caused_by(self, job_id: str, nominal_ms: int) -> list[Cause]:
        with self.env.begin() as txn:
            return causes(Reads(txn, self.db, self.buckets), job_id, nominal_ms)

    def deps_graph(
        self, owner: str, job_id: str, depth: int
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]], bool]:
        """The edges (parent, child) within `depth` steps upstream and
        downstream of the owner's job, at most `limits.deps_graph_edges_max`
        in all; True when more were left out. `NotFound` for no such job."""
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            if tx.job(owner, job_id) is None:
                raise errors.NotFound(f"no job {job_id}")
            up: dict[tuple[str, str], None] = {}
            down: dict[tuple[str, str], None] = {}
            cut = _walk(tx, job_id, depth, up, limits.deps_graph_edges_max, up=True)
            cut = _walk(tx, job_id, depth, down, limits.deps_graph_edges_max - len(up), up=False) or cut
        return list(up), list(down), cut


def _walk(tx: Reads, job_id: str, depth: int, edges: dict[tuple[str, str], None], room: int, *, up: bool) -> bool:
    """Adds the edges `depth` steps up (or down) from `job_id`; True when
    the bound on edges cut the walk."""
    level, seen = [job_id], {job_id}
    for _ in range(depth):
        nxt: list[str] = []
        for one in level:
            near = parents_of(state(tx, one)) if up else tuple(dependents(tx, one, limits.deps_dependents_max))
            for other in near:
                if len(edges) >= room:
                    return True
                edges[(other, one) if up else (one, other)] = None
                if other not in seen:
                    seen.add(other)
                    nxt.append(other)
        level = nxt
    return False


def parents_of(found: DepState | None) -> tuple[str, ...]:
    """The parents a job's edges name (`after` or `requires`)."""
    if found is None:
        return ()
    if found.after is not None:
        return found.after.jobs
    return () if found.requires is None else found.requires.jobs
