"""One transaction's view of the tables, for reading: the databases, one
cursor a table on the claim and result paths, and the lookups the rules
and the store's reads share. `Tables` (tables/writes.py) adds the writes."""

import heapq
from collections.abc import Iterator
from typing import TypeVar, overload

import lmdb

from tempo import ids, limits
from tempo.engine import keys
from tempo.engine.records import Job, Run
from tempo.engine.tables.layout import (
    DAY,
    HIST_EVENT,
    HIST_RUN,
    SLOT,
    U64,
    is_held,
    job_dec,
    job_head_dec,
    present,
    run_dec,
)

T = TypeVar("T")
# A history bucket: the rules hold one between a lookup and a write.
Bucket = lmdb._Database


class Cursors(dict[lmdb._Database, "lmdb.Cursor[bytes]"]):
    """A transaction's one cursor on each table of the claim and result
    paths, for gets, puts and deletes by key: `cursors[db]`, made when first
    used. A batch's runs sit near each other, and LMDB finds a key on the
    cursor's page without a walk from the root. A walk opens its own
    (`txn.cursor`): a lookup between its steps would move this one.

    A dict, so a cursor already made is found without a Python call (the
    claim and result paths look one up several times per run)."""

    __slots__ = ("txn",)

    def __init__(self, txn: "lmdb.Transaction[bytes]"):
        super().__init__()
        self.txn = txn

    def __missing__(self, db: lmdb._Database) -> "lmdb.Cursor[bytes]":
        cur = self[db] = self.txn.cursor(db=db)
        return cur


class Reads:
    """The databases of one transaction, with lookups. Within the
    transaction, owners and the buckets in use are read once."""

    __slots__ = (
        "_bucket_of_day", "_hist_curs", "_history", "_owners", "buckets", "by_job", "by_label", "by_owner", "by_status",
        "calendars", "claim_keys", "cursors", "deps", "deps_used", "events", "held", "hist_days", "job_counts", "jobs",
        "members", "meta", "open", "outcomes", "reqkeys", "runs", "txn",
    )

    def __init__(
        self,
        txn: "lmdb.Transaction[bytes]",
        db: dict[str, lmdb._Database],
        buckets: list[lmdb._Database],
        owners: dict[str, str] | None = None,
    ):
        self.txn = txn
        self.jobs = db["jobs"]
        self.by_owner = db["jobs_by_owner"]
        self.runs = db["runs"]
        self.by_job = db["runs_by_job"]
        self.reqkeys = db["request_keys"]
        self.events = db["events"]
        self.meta = db["meta"]
        self.open = db["open_minutes"]
        self.members = db["members"]
        self.hist_days = db["history_days"]
        self.claim_keys = db["claim_keys"]
        self.buckets = buckets
        self.by_status = db["runs_by_status"]
        self.outcomes = db["job_outcomes"]
        self.by_label = db["jobs_by_label"]
        self.held = db["runs_held"]
        self.job_counts = db["job_counts"]
        self.deps = db["deps"]
        # Whether the `deps` table holds a row, read once per transaction
        # (engine/rules/deps.py `gate`: the claim path of a job with no gate).
        self.deps_used: bool | None = None
        self.calendars = db["calendars"]
        # Job ID -> owner, read once: per transaction, or for as long as the
        # store lives when it passes its own (`Store.owners`; a job's owner
        # never changes and job IDs are never reused, so what is remembered
        # stays true, whatever is applied, aborted or restored since).
        self._owners: dict[str, str] = {} if owners is None else owners
        # Within one transaction: the buckets in use, and the bucket of each
        # day a run finished in, looked up once.
        self._history: list[tuple[int, lmdb._Database]] | None = None
        self._bucket_of_day: dict[int, lmdb._Database] = {}
        # One cursor a table on the claim and result paths (`Cursors`).
        self.cursors = Cursors(txn)
        # History: one cursor per (day, part of the bucket: runs, their
        # status rows, events); forgotten when a bucket is dropped.
        self._hist_curs: dict[tuple[int, bytes], lmdb.Cursor[bytes]] = {}
        self._start()

    def _start(self) -> None:
        """Called last by `__init__`, so a subclass keeps one signature: the
        state it adds for the transaction (`Tables`: its counts and change
        feed). One call per transaction, never per run."""

    # -- jobs ------------------------------------------------------------------

    @overload
    def fresh(self, job: Job) -> Job: ...
    @overload
    def fresh(self, job: None) -> None: ...
    def fresh(self, job: Job | None) -> Job | None:
        """The job as the API shows it: a one-off's `next_run_at` only while
        its run is waiting (a claim does not rewrite the job)."""
        if job is None or job.schedule.repeating or job.next_run_at_ms is None or job.slot_ms is None:
            return job
        run = self.run_at_slot(job.id, job.slot_ms)
        if run is None or run.status != "waiting":
            job.next_run_at_ms = None
        return job

    def job(self, owner: str, job_id: str) -> Job | None:
        """The owner's job; None for no such job or another owner's."""
        if not ids.is_job_id(job_id):
            return None
        raw = self.txn.get(keys.job_key(job_id), db=self.jobs)
        if raw is None:
            return None
        job = job_dec.decode(raw)
        return job if job.owner == owner else None

    def job_any(self, job_id: str, job_key: bytes | None = None) -> Job:
        """The job of a run, whoever owns it; it must be there."""
        raw = self.cursors[self.jobs].get(keys.job_key(job_id) if job_key is None else job_key)
        assert raw is not None, f"run of a missing job {job_id}"
        return job_dec.decode(raw)

    def owner_of(self, job_id: str, job: Job | None) -> str:
        """The owner of a run's job: `job`'s when the caller has it at hand,
        else read once per transaction (a one-off's claim reads no job)."""
        if job is not None:
            return job.owner
        owner = self._owners.get(job_id)
        if owner is None:
            raw = self.cursors[self.jobs].get(keys.job_key(job_id))
            assert raw is not None, f"run of a missing job {job_id}"
            owner = job_head_dec.decode(raw).owner
            self.remember_owner(job_id, owner)
        return owner

    def remember_owner(self, job_id: str, owner: str) -> None:
        """For `owner_of`: at most `limits.owners_remembered_max`, all
        forgotten at once past that."""
        owners = self._owners
        if len(owners) >= limits.owners_remembered_max:
            owners.clear()
        owners[job_id] = owner

    # -- open runs ---------------------------------------------------------------

    def run_key_at_slot(self, job_id: str, slot_ms: int) -> bytes | None:
        return self.txn.get(keys.by_job_key(job_id, slot_ms), db=self.by_job)

    def run_at(self, runs_key: bytes) -> Run:
        """The open run stored at `runs_key`, which an index pointed at."""
        return run_dec.decode(present(self.txn.get(runs_key, db=self.runs)))

    def run_at_slot(self, job_id: str, slot_ms: int) -> Run | None:
        runs_key = self.run_key_at_slot(job_id, slot_ms)
        return None if runs_key is None else self.run_at(runs_key)

    def slot_run(self, job_id: str, nominal_ms: int, by_job_key: bytes | None = None) -> tuple[bytes, Run] | None:
        """The open run of a slot and its runs key, through the cursors of
        the claim and result paths; `by_job_key` is
        `keys.by_job_key(job_id, nominal_ms)` when the caller has it."""
        if by_job_key is None:
            by_job_key = keys.by_job_key(job_id, nominal_ms)
        runs_key = self.cursors[self.by_job].get(by_job_key)
        if runs_key is None:
            return None
        raw = self.cursors[self.runs].get(runs_key)
        assert raw is not None, "an index entry points at a missing row"  # `present`, inline: once per claim and result
        return runs_key, run_dec.decode(raw)

    def slots_desc(self, job_id: str, lower_ms: int, upper_ms: int) -> Iterator[tuple[int, bytes]]:
        """(nominal ms, runs key) of the job's open runs in [lower, upper), newest first."""
        return by_job_desc(self.txn.cursor(db=self.by_job), b"", job_id, lower_ms, upper_ms)

    def open_runs(self, job_id: str) -> list[tuple[bytes, Run]]:
        """(runs key, run) of every open run of the job, newest first."""
        return [(runs_key, self.run_at(runs_key)) for _, runs_key in self.slots_desc(job_id, 0, 1 << 63)]

    def held_runs(self, job: Job, but_ms: int | None) -> Iterator[tuple[bytes, Run]]:
        """(runs key, run) of the job's rows of the held-runs index, oldest
        slot first, but the run of slot `but_ms`."""
        job_key = keys.job_key(job.id)
        cur = self.txn.cursor(db=self.held)
        found = cur.set_range(job_key)
        while found and cur.key().startswith(job_key):
            by_job_key = bytes(cur.key())
            found = cur.next()
            if U64.unpack(by_job_key[keys.JOB_KEY_BYTES :])[0] == but_ms:
                continue
            runs_key = present(self.txn.get(by_job_key, db=self.by_job))
            run = self.run_at(runs_key)
            assert is_held(run), "a held row of a run no policy holds"
            yield runs_key, run

    # -- history -----------------------------------------------------------------

    def history(self) -> list[tuple[int, lmdb._Database]]:
        """(day, bucket) of every history bucket in use, newest first."""
        if self._history is None:
            rows = [(DAY.unpack(v)[0], self.buckets[SLOT.unpack(k)[0]]) for k, v in self.txn.cursor(db=self.hist_days)]
            rows.sort(key=first, reverse=True)
            self._history = rows
        return self._history

    def history_run(self, job_id: str, nominal_ms: int) -> tuple[Bucket, Run] | None:
        """A finished run and its bucket; one lookup per bucket in use."""
        key = HIST_RUN + keys.by_job_key(job_id, nominal_ms)
        for _, db in self.history():
            raw = self.txn.get(key, db=db)
            if raw is not None:
                return db, run_dec.decode(raw)
        return None

    def run_anywhere(self, job_id: str, nominal_ms: int) -> Run | None:
        """A run whether open or finished (and not dropped yet)."""
        run = self.run_at_slot(job_id, nominal_ms)
        if run is None:
            found = self.history_run(job_id, nominal_ms)
            run = None if found is None else found[1]
        return run

    def runs_desc(self, job_id: str, lower_ms: int, upper_ms: int) -> Iterator[Run]:
        """The job's runs in [lower, upper), open and finished, newest first."""
        live = ((nominal_ms, present(self.txn.get(key, db=self.runs))) for nominal_ms, key in self.slots_desc(
            job_id, lower_ms, upper_ms
        ))
        sources = [live] + [
            by_job_desc(self.txn.cursor(db=db), HIST_RUN, job_id, lower_ms, upper_ms) for _, db in self.history()
        ]
        last_ms = None
        for nominal_ms, raw in heapq.merge(*sources, key=first, reverse=True):
            if nominal_ms != last_ms:  # one row per run ID, even if two places held one
                last_ms = nominal_ms
                yield run_dec.decode(raw)

    def slot_taken(self, job_id: str, nominal_ms: int) -> bool:
        return self.run_key_at_slot(job_id, nominal_ms) is not None or self.history_run(job_id, nominal_ms) is not None

    def events_after(self, owner: str, after_seq: int) -> Iterator[tuple[int, bytes]]:
        """(sequence, event) of the owner's events after `after_seq`, oldest first."""
        sources = [events_from(self.txn.cursor(db=self.events), b"", owner, after_seq)] + [
            events_from(self.txn.cursor(db=db), HIST_EVENT, owner, after_seq) for _, db in self.history()
        ]
        return heapq.merge(*sources, key=first)

    def events_before(self, owner: str, before_seq: int) -> Iterator[tuple[int, bytes]]:
        """(sequence, event) of the owner's events before `before_seq`, newest first."""
        sources = [events_back(self.txn.cursor(db=self.events), b"", owner, before_seq)] + [
            events_back(self.txn.cursor(db=db), HIST_EVENT, owner, before_seq) for _, db in self.history()
        ]
        return heapq.merge(*sources, key=first, reverse=True)

    def event_owners(self) -> set[str]:
        """The owners with an event kept: one seek per owner and source."""
        owners: set[str] = set()
        sources = [(self.events, b"")] + [(db, HIST_EVENT) for _, db in self.history()]
        for db, head in sources:
            cur = self.txn.cursor(db=db)
            found = cur.set_range(head)
            while found and cur.key().startswith(head):
                owner, _ = keys.parse_event_key(cur.key()[len(head) :])
                owners.add(owner)
                # The next owner's first key: past every key of this one.
                found = cur.set_range(head + owner.encode() + b"\x01")
        return owners


def first(row: tuple[T, *tuple[object, ...]]) -> T:
    return row[0]


def _back(cur: "lmdb.Cursor[bytes]", start: bytes, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of the rows under `prefix` before the key `start`,
    newest first: the reverse prefix scan both backward reads share."""
    found = cur.set_range(start)
    found = cur.prev() if found else cur.last()
    while found:
        key = cur.key()
        if not key.startswith(prefix):
            return
        yield key, cur.value()
        found = cur.prev()


def by_job_desc(cur: "lmdb.Cursor[bytes]", head: bytes, job_id: str, lower_ms: int, upper_ms: int) -> Iterator[tuple[int, bytes]]:
    """(nominal ms, value) of rows keyed `head` + runs-by-job key of one job
    with nominal time in [lower, upper), newest first."""
    start = head + keys.by_job_key(job_id, upper_ms)
    for key, value in _back(cur, start, head + keys.job_key(job_id)):
        _, nominal_ms = keys.parse_by_job_key(key[len(head) :])
        if nominal_ms < lower_ms:
            return
        yield nominal_ms, value


def events_from(cur: "lmdb.Cursor[bytes]", head: bytes, owner: str, after_seq: int) -> Iterator[tuple[int, bytes]]:
    """(sequence, value) of rows keyed `head` + events key of one owner after
    `after_seq`, oldest first."""
    prefix = head + keys.owner_prefix(owner)
    if not cur.set_range(head + keys.event_key(owner, after_seq + 1)):
        return
    for key, value in cur:
        if not key.startswith(prefix):
            return
        yield keys.parse_event_key(key[len(head) :])[1], value


def events_back(cur: "lmdb.Cursor[bytes]", head: bytes, owner: str, before_seq: int) -> Iterator[tuple[int, bytes]]:
    """(sequence, value) of rows keyed `head` + events key of one owner
    before `before_seq`, newest first."""
    start = head + keys.event_key(owner, before_seq)
    for key, value in _back(cur, start, head + keys.owner_prefix(owner)):
        yield keys.parse_event_key(key[len(head) :])[1], value
