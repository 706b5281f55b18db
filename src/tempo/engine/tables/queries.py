"""The store's reads: jobs, runs, outcomes, events and the dispatcher's
scans, each in one read transaction against an LMDB snapshot (any thread;
they never wait for a write). `Store` (engine/store.py) has them."""

import heapq
from collections.abc import Callable, Iterator, Sequence

import lmdb

from tempo import errors, ids, limits
from tempo.engine import keys
from tempo.engine.records import ClaimKeyEntry, Event, Job, JobOutcome, Run
from tempo.engine.tables.layout import (
    COUNTS_BUILT,
    DAY,
    EVENT_SEQ,
    HIST_RUN,
    HIST_STATUS,
    JOB_STATES,
    MINUTE,
    NOTIFY_CURSOR,
    OPEN,
    U64,
    claimkey_dec,
    event_dec,
    event_head_dec,
    job_count_key,
    job_dec,
    outcome_dec,
    parse_job_count_key,
    present,
    run_dec,
)
from tempo.engine.tables.reads import Reads, first


class Queries:
    """Reads of the tables, for `Store`, which opens `env` and its databases."""

    env: lmdb.Environment
    db: dict[str, lmdb._Database]
    buckets: list[lmdb._Database]

    def get_job(self, owner: str, job_id: str) -> Job:
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            job = tx.fresh(tx.job(owner, job_id))
        if job is None:
            raise errors.NotFound(f"no job {job_id}")
        return job

    def list_jobs(
        self,
        owner: str,
        limit: int,
        cursor: str | None,
        match: Callable[[Job], bool] | None = None,
        labels: Sequence[tuple[str, str]] = (),
    ) -> tuple[list[Job], str | None]:
        """The owner's jobs, newest first; `cursor` is the last job ID seen.
        With `match` (a filter), only the jobs it holds for, reading at most
        `limits.jobs_filter_rows_max` jobs: past that the page ends with
        what it found (maybe nothing) and the cursor of the last job read.
        With `labels` (key, value pairs), only the jobs that carry them all,
        found through the jobs-by-label index: the jobs read are those
        that carry them, never the owner's others."""
        if labels:
            return self._list_labelled([owner], limit, cursor, match, labels)
        prefix = keys.owner_prefix(owner)
        start = prefix + (keys.job_key(cursor) if cursor else b"\xff")
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            by_owner = txn.cursor(db=self.db["jobs_by_owner"])
            jobs_db = self.db["jobs"]
            found = by_owner.set_range(start)
            found = by_owner.prev() if found else by_owner.last()

            def rows() -> Iterator[bytes]:
                nonlocal found
                while found:
                    key = by_owner.key()
                    if not key.startswith(prefix):
                        return
                    yield present(txn.get(key[len(prefix) :], db=jobs_db))
                    found = by_owner.prev()

            return _page_of_jobs(tx, rows(), limit, match)

    def job_counts(self, owner: str | None) -> dict[str, int]:
        """How many jobs `owner` (None: every owner) has in each state, from
        `job_counts`, which apply keeps: one read a state for an owner, one
        pass over the owners' rows for all."""
        counts = dict.fromkeys(JOB_STATES, 0)
        with self.env.begin() as txn:
            if owner is not None:
                for state in JOB_STATES:
                    raw = txn.get(job_count_key(owner, state), db=self.db["job_counts"])
                    counts[state] = 0 if raw is None else U64.unpack(raw)[0]
                return counts
            for key, raw in txn.cursor(db=self.db["job_counts"]):
                if key != COUNTS_BUILT:
                    counts[parse_job_count_key(key)[1]] += U64.unpack(raw)[0]
        return counts

    def list_all_jobs(
        self,
        limit: int,
        cursor: str | None,
        match: Callable[[Job], bool] | None = None,
        labels: Sequence[tuple[str, str]] = (),
    ) -> tuple[list[Job], str | None]:
        """Every owner's jobs, newest first (an admin's listing): the jobs
        table itself, whose keys are job IDs, which sort by creation time;
        `cursor` is the last job ID seen; `match` and `labels` as for
        `list_jobs` (with labels, each owner's part of the index, merged)."""
        if labels:
            with self.env.begin() as txn:
                owners = _owners_of_jobs(txn, self.db["jobs_by_owner"])
            return self._list_labelled(owners, limit, cursor, match, labels)
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            table = txn.cursor(db=self.db["jobs"])
            if cursor:
                found = table.set_range(keys.job_key(cursor))
                found = table.prev() if found else table.last()
            else:
                found = table.last()

            def rows() -> Iterator[bytes]:
                nonlocal found
                while found:
                    yield table.value()
                    found = table.prev()

            return _page_of_jobs(tx, rows(), limit, match)

    def _list_labelled(
        self,
        owners: list[str],
        limit: int,
        cursor: str | None,
        match: Callable[[Job], bool] | None,
        labels: Sequence[tuple[str, str]],
    ) -> tuple[list[Job], str | None]:
        """`list_jobs` with labels, over the jobs of `owners`: per owner, the
        job keys every label's part of the index holds (`_all_labelled`),
        merged newest first. Each job's own labels are checked as well, so a
        collision of label hashes lists no job that lacks a label."""
        wanted = dict(labels)
        if len(wanted) < len(set(labels)):
            return [], None  # one key asked with two values: no job has both
        upper = keys.job_key(cursor) if cursor else None

        def carries(job: Job) -> bool:
            held = job.labels or {}
            return all(held.get(name) == value for name, value in wanted.items()) and (match is None or match(job))

        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            db, jobs_db = self.db["jobs_by_label"], self.db["jobs"]
            sources = [
                _all_labelled(txn, db, [keys.label_prefix(owner, name, value) for name, value in wanted.items()], upper)
                for owner in owners
                if keys.owner_fits(owner)
            ]
            if not sources:
                return [], None
            found = sources[0] if len(sources) == 1 else heapq.merge(*sources, reverse=True)
            rows = (present(txn.get(job_key, db=jobs_db)) for job_key in found)
            return _page_of_jobs(tx, rows, limit, carries)

    def get_run(self, owner: str, run_id_text: str) -> tuple[Run, Job]:
        parsed = ids.parse_run_id(run_id_text)
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            job = tx.job(owner, parsed[0]) if parsed else None
            run = tx.run_anywhere(parsed[0], parsed[1]) if job and parsed else None
        if run is None or job is None:
            raise errors.NotFound(f"no run {run_id_text}")
        return run, job

    def list_runs(
        self,
        owner: str,
        job_id: str,
        *,
        since_ms: int | None,
        until_ms: int | None,
        limit: int,
        cursor_ms: int | None,
    ) -> tuple[list[Run], int | None]:
        """Runs with nominal time in [since, until), newest first, open and
        finished alike; `cursor_ms` is the nominal time of the last run seen."""
        upper = min(x for x in (until_ms, cursor_ms, 1 << 63) if x is not None)
        lower = since_ms if since_ms is not None else 0
        runs: list[Run] = []
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            if tx.job(owner, job_id) is None:
                raise errors.NotFound(f"no job {job_id}")
            for run in tx.runs_desc(job_id, lower, upper):
                runs.append(run)
                if len(runs) > limit:
                    break
        if len(runs) > limit:
            return runs[:limit], runs[limit - 1].nominal_ms
        return runs, None

    # -- outcomes and the runs index (docs/api.md "Outcomes", "GET /v1/runs") --

    def job_outcome(self, job_id: str) -> JobOutcome | None:
        """What the job's runs came to; None for a job none of whose runs
        has ended (or for no such job)."""
        return self.job_outcomes([job_id]).get(job_id)

    def job_outcomes(self, job_ids: list[str]) -> dict[str, JobOutcome]:
        """The outcomes of those of `job_ids` that have one, in one read."""
        found: dict[str, JobOutcome] = {}
        with self.env.begin() as txn:
            db = self.db["job_outcomes"]
            for job_id in job_ids:
                raw = txn.get(keys.job_key(job_id), db=db) if ids.is_job_id(job_id) else None
                if raw is not None:
                    found[job_id] = outcome_dec.decode(raw)
        return found

    def list_owner_runs(
        self,
        owner: str | None,
        *,
        status: str | None,
        limit: int,
        cursor: bytes | None,
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> tuple[list[Run], bytes | None]:
        """Runs of the owner's jobs (every owner's for None) with `status`
        (any for None) listed at a time in [since, until), newest first, by
        (time, job ID, nominal time): the runs-by-status index, merged over
        the statuses asked, the open table and the history buckets; never a
        scan of runs. `cursor` is the order key of the last run seen
        (`keys.order_tail`), and so is the next cursor."""
        upper = keys.order_tail(min(until_ms, 1 << 63) if until_ms is not None else (1 << 64) - 1, "j_" + "0" * 26, 0)
        if cursor is not None:
            assert len(cursor) == keys.ORDER_TAIL_BYTES
            upper = min(upper, cursor)
        lower_ms = 0 if since_ms is None else since_ms
        codes = [*range(len(keys.STATUSES)), keys.OTHER_STATUS_CODE] if status is None else [keys.STATUS_CODE[status]]
        runs: list[Run] = []
        tails: list[bytes] = []
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            owners = [owner] if owner is not None else _owners_of_jobs(txn, self.db["jobs_by_owner"])
            sources = _status_sources(tx, owners, codes, upper, lower_ms)
            last = None
            for tail, held_in in heapq.merge(*sources, key=first, reverse=True):
                if tail == last:
                    continue  # one row per run, even if two places held one
                last = tail
                if len(runs) == limit:
                    return runs, tails[-1]
                job_id, nominal_ms = _slot_of_tail(tail)
                raw = None if held_in is None else txn.get(HIST_RUN + keys.by_job_key(job_id, nominal_ms), db=held_in)
                run = run_dec.decode(raw) if raw is not None else tx.run_anywhere(job_id, nominal_ms)
                assert run is not None, "a runs-by-status row without its run"
                runs.append(run)
                tails.append(tail)
        return runs, None

    def members(self) -> dict[str, str]:
        """Member URLs set by `SetMember` since the cluster was founded ("" for
        a removed member)."""
        with self.env.begin() as txn:
            return {k.decode(): v.decode() for k, v in txn.cursor(db=self.db["members"])}

    def dump(self) -> dict[str, list[tuple[bytes, bytes]]]:
        """Every table's rows in key order, for comparing replicas in tests."""
        with self.env.begin() as txn:
            return {name: list(txn.cursor(db=db)) for name, db in self.db.items()}

    def open_minutes(self, minute_lo: int, minute_hi: int, count_max: int) -> list[int]:
        """Up to `count_max` due minutes in [minute_lo, minute_hi) that hold a
        waiting or claimed run, oldest first: where a loader goes next, so
        nothing is skipped after a restart and finished history is never read."""
        found: list[int] = []
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.db["open_minutes"])
            if not cur.set_range(MINUTE.pack(minute_lo)):
                return found
            for key in cur.iternext(keys=True, values=False):
                minute = MINUTE.unpack(key)[0]
                if minute >= minute_hi or len(found) >= count_max:
                    break
                found.append(minute)
        return found

    def scan_minute(self, minute: int, lo_ms: int, hi_ms: int) -> list[tuple[bytes, Run, Job]]:
        """Open runs of one due minute with due time in [lo_ms, hi_ms), across
        its 64 shards, with their jobs; by due time, then job ID (not by
        shard): runs due in one instant are claimed in that order, so a
        batch of claims, and later of results, touches neighbouring rows of
        the jobs, runs-by-job and history tables rather than pages all over
        them (fewer pages for each commit to write). Decoded in that order
        too, so the dispatcher walks its memory in the order it was made."""
        out: list[tuple[bytes, Run, Job]] = []
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.db["runs"])
            jobs_db = self.db["jobs"]
            jobs: dict[str, Job] = {}
            prefix = keys.minute_prefix(minute)
            if not cur.set_range(prefix):
                return out
            rows: list[tuple[bytes, bytes]] = []
            for key, value in cur:
                if not key.startswith(prefix):
                    break
                if lo_ms <= keys.due_of(key) < hi_ms:
                    rows.append((key, value))
            rows.sort(key=_after_shard)
            for key, value in rows:
                run = run_dec.decode(value)
                assert run.due_ms == keys.due_of(key), "a run's row is at its due time"
                if run.status not in OPEN:
                    continue
                job = jobs.get(run.job_id)
                if job is None:
                    job = jobs[run.job_id] = job_dec.decode(present(txn.get(keys.job_key(run.job_id), db=jobs_db)))
                out.append((key, run, job))
        return out

    def get_job_any(self, job_id: str) -> Job | None:
        """The job whoever owns it: for the dispatcher, which serves all owners."""
        with self.env.begin() as txn:
            raw = txn.get(keys.job_key(job_id), db=self.db["jobs"]) if ids.is_job_id(job_id) else None
        return None if raw is None else job_dec.decode(raw)

    def get_run_any(self, job_id: str, nominal_ms: int) -> Run | None:
        with self.env.begin() as txn:
            return Reads(txn, self.db, self.buckets).run_anywhere(job_id, nominal_ms)

    def claim_key_entry(self, owner: str, key: str, now_ms: int) -> ClaimKeyEntry | None:
        """What the claim key took, if it is recorded and not expired by
        `now_ms` (UNIX ms); None otherwise."""
        if not keys.owner_fits(owner) or not keys.claim_key_fits(owner, key):
            return None
        with self.env.begin() as txn:
            raw = txn.get(keys.claim_key(owner, key), db=self.db["claim_keys"])
        if raw is None:
            return None
        entry = claimkey_dec.decode(raw)
        return entry if entry.expires_ms > now_ms else None

    def list_events(self, owner: str, after_seq: int, limit: int) -> list[tuple[int, Event]]:
        """The owner's events after `after_seq`, oldest first: merged by
        sequence from the history buckets (and the `events` table, which
        holds those written before events moved to the buckets)."""
        out: list[tuple[int, Event]] = []
        with self.env.begin() as txn:
            for seq, raw in Reads(txn, self.db, self.buckets).events_after(owner, after_seq):
                if len(out) >= limit:
                    break
                out.append((seq, event_dec.decode(raw)))
        return out

    def list_events_desc(
        self, owner: str | None, before_seq: int | None, limit: int, job_id: str | None = None,
    ) -> tuple[list[tuple[str, int, Event]], int | None]:
        """(owner, sequence, event) of `owner`'s events (None: every
        owner's, merged by sequence) before `before_seq` (None: from the
        newest), newest first, at most `limit`; and the cursor to go on
        from: the sequence below which the next page starts, None when
        the oldest event kept was read. With `job_id`, only that job's
        events, reading at most `limits.events_filter_rows_max` events:
        past that the page ends with what it found (maybe nothing) and the
        sequence of the last event read, as a filtered page of jobs does."""
        upper = (1 << 64) - 1 if before_seq is None else before_seq
        out: list[tuple[str, int, Event]] = []
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            owners = [owner] if owner is not None else sorted(tx.event_owners())
            rows = heapq.merge(
                *(_owned(who, tx.events_before(who, upper)) for who in owners), key=first, reverse=True,
            )
            read = 0
            for seq, who, raw in rows:
                if len(out) >= limit:
                    return out, out[-1][1]
                if job_id is not None:
                    read += 1
                    if read > limits.events_filter_rows_max:
                        return out, seq + 1
                    if event_head_dec.decode(raw).job_id != job_id:
                        continue
                out.append((who, seq, event_dec.decode(raw)))
        return out, None

    def event_seq(self) -> int:
        """The sequence of the last event written (0: none yet)."""
        with self.env.begin() as txn:
            raw = txn.get(EVENT_SEQ, db=self.db["meta"])
        return 0 if raw is None else U64.unpack(raw)[0]

    def notify_cursor(self) -> int | None:
        """The notifier's committed cursor (`NotifyCursor`); None before the first."""
        with self.env.begin() as txn:
            raw = txn.get(NOTIFY_CURSOR, db=self.db["meta"])
        return None if raw is None else U64.unpack(raw)[0]

    def events_of_all(self, after_seq: int, limit: int) -> list[tuple[str, int, Event]]:
        """(owner, sequence, event) of every owner's events after `after_seq`,
        oldest first, at most `limit`: for the notifier, which serves all
        owners. Each owner's first `limit` are read and merged, so the cost
        grows with the owners that have events, not with the events kept."""
        found: list[tuple[str, int, bytes]] = []
        with self.env.begin() as txn:
            tx = Reads(txn, self.db, self.buckets)
            for owner in tx.event_owners():
                for n, (seq, raw) in enumerate(tx.events_after(owner, after_seq)):
                    if n >= limit:
                        break
                    found.append((owner, seq, raw))
            found.sort(key=_second)
            return [(owner, seq, event_dec.decode(raw)) for owner, seq, raw in found[:limit]]

    def history_days(self) -> list[int]:
        """The days (since the epoch, UTC) of the history buckets in use, oldest first."""
        with self.env.begin() as txn:
            return sorted(DAY.unpack(v)[0] for v in txn.cursor(db=self.db["history_days"]).iternext(keys=False))


def _at_most(cur: "lmdb.Cursor[bytes]", prefix: bytes, job_key: bytes | None, *, below: bool) -> bytes | None:
    """The greatest job key under `prefix` at most `job_key` (below it with
    `below`; None: no bound), or None when there is none."""
    target = prefix + (b"\xff" if job_key is None else job_key)
    found = cur.set_range(target)
    if found and cur.key() == target and not below:
        return job_key
    found = cur.prev() if found else cur.last()
    if not found:
        return None
    key = cur.key()
    return key[len(prefix) :] if key.startswith(prefix) else None


def _all_labelled(
    txn: "lmdb.Transaction[bytes]", db: lmdb._Database, prefixes: list[bytes], upper: bytes | None
) -> Iterator[bytes]:
    """Job keys below `upper` (None: no bound) held under every one of
    `prefixes` (one per label: a job that carries them all), newest first.
    A leapfrog join: each part of the index in turn seeks to the greatest
    key at most the current candidate, so a step skips the jobs one label
    holds and another lacks; the cost grows with the jobs the rarest label
    holds, not with the owner's jobs."""
    curs = [txn.cursor(db=db) for _ in prefixes]
    count = len(prefixes)
    candidate = _at_most(curs[0], prefixes[0], upper, below=True)
    agreed, i = 1, 1 % count
    while candidate is not None:
        if agreed == count:
            yield candidate
            candidate = _at_most(curs[i], prefixes[i], candidate, below=True)
            agreed = 1
        else:
            found = _at_most(curs[i], prefixes[i], candidate, below=False)
            if found == candidate:
                agreed += 1
            else:
                candidate, agreed = found, 1
        i = (i + 1) % count


def _owned(owner: str, rows: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, str, bytes]]:
    for seq, raw in rows:
        yield seq, owner, raw


def _second(row: tuple[object, int, object]) -> int:
    return row[1]


def _after_shard(row: tuple[bytes, bytes]) -> bytes:
    """A row's runs key from its due time on: (due ms, job ID, nominal ms)."""
    return row[0][keys.DUE_AT :]


def _page_of_jobs(
    tx: Reads, rows: Iterator[bytes], limit: int, match: Callable[[Job], bool] | None
) -> tuple[list[Job], str | None]:
    """A page of the jobs of `rows` (newest first) that `match` holds for,
    and the next cursor; a filter reads at most `jobs_filter_rows_max` rows."""
    jobs: list[Job] = []
    last_id = None
    for read, raw in enumerate(rows):
        job = job_dec.decode(raw)
        if len(jobs) == limit:
            return jobs, jobs[-1].id if match is None else last_id
        if match is not None and read == limits.jobs_filter_rows_max:
            return jobs, last_id
        last_id = job.id
        if match is None or match(job):
            fresh = tx.fresh(job)
            assert fresh is not None
            jobs.append(fresh)
    return jobs, None


def _owners_of_jobs(txn: "lmdb.Transaction[bytes]", db: lmdb._Database) -> list[str]:
    """Every owner with a job, one seek each (an admin's listing)."""
    owners: list[str] = []
    cur = txn.cursor(db=db)
    found = cur.first()
    while found:
        owner = cur.key().partition(b"\x00")[0]
        owners.append(owner.decode())
        found = cur.set_range(owner + b"\x01")
    return owners


def _status_desc(
    cur: "lmdb.Cursor[bytes]", head: bytes, prefix: bytes, upper: bytes, lower_ms: int, bucket: lmdb._Database | None
) -> Iterator[tuple[bytes, lmdb._Database | None]]:
    """(order tail, `bucket`) of the index rows keyed `head` + `prefix` +
    order tail with tail below `upper` and time at least `lower_ms`, newest first."""
    start = head + prefix
    found = cur.set_range(start + upper)
    found = cur.prev() if found else cur.last()
    while found:
        key = cur.key()
        if not key.startswith(start):
            return
        tail = key[len(start) :]
        if U64.unpack_from(tail)[0] < lower_ms:
            return
        yield tail, bucket
        found = cur.prev()


def _status_sources(
    tx: Reads, owners: list[str], codes: list[int], upper: bytes, lower_ms: int
) -> list[Iterator[tuple[bytes, lmdb._Database | None]]]:
    """`Store.list_owner_runs`'s index rows, one source per owner, status
    and place (the open table, each history bucket), each newest first."""
    txn = tx.txn
    sources = []
    for name in owners:
        if not keys.owner_fits(name):
            continue
        for code in codes:
            head = keys.status_prefix(name, code)
            kind = keys.STATUSES[code] if code < len(keys.STATUSES) else None
            if kind in OPEN:
                sources.append(_status_desc(txn.cursor(db=tx.by_status), b"", head, upper, lower_ms, None))
                continue
            for day, bucket in tx.history():
                # A done, failed or missed row is in the bucket of the day it
                # ended or a later one (bucket_for).
                if kind in ("done", "failed", "missed") and (day + 1) * limits.day_ms <= lower_ms:
                    continue
                sources.append(_status_desc(txn.cursor(db=bucket), HIST_STATUS, head, upper, lower_ms, bucket))
    return sources


def _slot_of_tail(tail: bytes) -> tuple[str, int]:
    """(job ID, nominal ms) of an order tail."""
    return keys.job_id_of(tail[8 : 8 + keys.JOB_KEY_BYTES]), U64.unpack_from(tail, 8 + keys.JOB_KEY_BYTES)[0]
