"""`Tables`: one write transaction's tables, and the typed operations apply's
rules (engine/rules/) change them with. Each keeps the indexes in step with
the rows: a run's row moving between due times, statuses and the history
buckets moves its rows of the runs-by-job, runs-by-status and held-runs
indexes, the open-minute counts, its job's outcome and the dispatcher's
change feed (`Changes`) with it."""

import bisect
from dataclasses import dataclass, field

import lmdb

from tempo import limits
from tempo.engine import keys
from tempo.engine.records import CalendarUse, Event, Job, JobOutcome, JobState, Run
from tempo.engine.tables.buckets import Buckets
from tempo.engine.tables.layout import (
    EVENT_SEQ,
    FINISHED,
    HIST_EVENT,
    HIST_RUN,
    HIST_STATUS,
    MINUTE,
    OPEN,
    U64,
    add_to_outcome,
    enc,
    index_ms,
    is_held,
    job_count_key,
    label_keys,
    may_be_held,
    must,
    outcome_dec,
    run_dec,
    status_key_of,
)


@dataclass(slots=True)
class Changes:
    """What an entry did to the set of open runs, for the dispatcher's memory.

    Derived from the state alone, so it is as deterministic as the tables."""

    # Runs key, run and (where apply had it at hand) job of each run that
    # became waiting or moved while waiting.
    woken: list[tuple[bytes, Run, Job | None]]
    left: list[bytes]  # runs keys that stopped being waiting
    gone: list[bytes]  # runs keys of claimed runs that finished, expired or were deleted
    event_owners: set[str]  # owners with new events
    members: bool = False  # a member's URL was set
    # (job ID, nominal ms) of claimed runs asked to stop in this entry
    # (rules/slots.py `request_cancel`): their leases stop growing with
    # heartbeats, and heartbeats answer `cancel: requested`.
    stopping: list[tuple[str, int]] = field(default_factory=list)
    # The highest command stamp applied so far (the store's `stamp_ms`).
    stamp_ms: int = 0
    # Runs the overlap policy of their job skipped in this entry (rules/overlap.py `skip`).
    skipped: int = 0
    # Jobs given a calendar (or none) in this entry, and owners whose
    # calendar epoch rose, with the new one (rules/calendars.py): the
    # store's memory of them, which a claim reads (`Store.calendar_of`).
    calendar_jobs: list[tuple[str, CalendarUse | None]] = field(default_factory=list)
    calendar_epochs: list[tuple[str, int]] = field(default_factory=list)


def _delete_at(cur: "lmdb.Cursor[bytes]", key: bytes, missing: str = "a row apply deletes is there") -> None:
    """Deletes the row at `key`, which must be there, through `cur`."""
    found = cur.set_key(key)
    assert found, missing
    cur.delete()


class Tables(Buckets):
    """One write transaction's tables. Counts that change many times in
    one entry (open runs per minute, the event sequence, job outcomes)
    are kept here and written once, by `flush`."""

    __slots__ = ("changes", "event_seq", "job_count_deltas", "open_deltas", "outcome_counts", "status_rows")

    def _start(self) -> None:
        self.changes = Changes([], [], [], set())
        self.open_deltas: dict[int, int] = {}
        self.event_seq: int | None = None
        # Job outcomes (by job key) that runs finishing in this transaction
        # counted into, read once each and written once, in `flush`.
        self.outcome_counts: dict[bytes, JobOutcome] = {}
        # Jobs in each (owner, state) gained or lost in this transaction,
        # written to `job_counts` once each, in `flush`.
        self.job_count_deltas: dict[tuple[str, str], int] = {}
        # Rows of the runs-by-status index that open runs moved in this
        # transaction, written in key order by `flush` (`_move_open_row`):
        # True, put; False, deleted (it must be there); None, deleted if
        # there (a row put earlier in this transaction, then deleted).
        # Nothing reads this index inside apply.
        self.status_rows: dict[bytes, bool | None] = {}

    # -- jobs ----------------------------------------------------------------------

    def put_job(self, job: Job, job_key: bytes | None = None) -> None:
        """`job_key` is `keys.job_key(job.id)` when the caller has it."""
        self.cursors[self.jobs].put(keys.job_key(job.id) if job_key is None else job_key, enc.encode(job))

    def set_state(self, job: Job, state: JobState) -> None:
        """`job.state = state`, counted in `job_counts` (the caller puts
        the job). Every change of a stored job's state goes through here."""
        if job.state != state:
            # `count_job` twice, inline: once per one-off's result.
            deltas = self.job_count_deltas
            was, now = (job.owner, job.state), (job.owner, state)
            deltas[was] = deltas.get(was, 0) - 1
            deltas[now] = deltas.get(now, 0) + 1
            job.state = state

    def count_job(self, owner: str, state: str, delta: int) -> None:
        """A job of `owner` in `state` came (1) or went (-1)."""
        found = (owner, state)
        self.job_count_deltas[found] = self.job_count_deltas.get(found, 0) + delta

    def relabel(self, old: Job, job: Job) -> None:
        """Moves the job's rows of the jobs-by-label index from `old`'s labels to `job`'s."""
        job_key = keys.job_key(job.id)
        before, after = set(label_keys(old, job_key)), set(label_keys(job, job_key))
        for key in sorted(before - after):
            must(self.txn.delete(key, db=self.by_label), "a labelled job had its index row")
        for key in sorted(after - before):
            self.txn.put(key, b"", db=self.by_label)

    def delete_job_rows(self, job: Job) -> None:
        """Every row of the job: its open runs, its runs in history, its
        outcome, its own row and its index rows, and its request key
        (a later create with that key makes a new job rather than
        answering with a deleted one). Its events stay."""
        by_job = self.txn.cursor(db=self.by_job)
        prefix = keys.job_key(job.id)
        found = by_job.set_range(prefix)
        while found and by_job.key().startswith(prefix):
            runs_key = by_job.value()
            self.drop_run(runs_key, self.run_at(runs_key), job)
            found = by_job.delete()
        head = HIST_RUN + prefix
        for _, db in self.history():
            cur = self.txn.cursor(db=db)
            found = cur.set_range(head)
            while found and cur.key().startswith(head):
                held = run_dec.decode(cur.value())
                must(self.txn.delete(HIST_STATUS + status_key_of(job.owner, held), db=db),
                     "a run in history has its status row")
                found = cur.delete()
        self.outcome_counts.pop(prefix, None)  # its runs' counts go with it
        self.txn.delete(prefix, db=self.outcomes)
        must(self.txn.delete(prefix, db=self.jobs), "a job deleted has its row")
        self.count_job(job.owner, job.state, -1)
        must(self.txn.delete(keys.owner_job_key(job.owner, job.id), db=self.by_owner),
             "a job deleted has its row in its owner's index")
        for key in label_keys(job, prefix):
            must(self.txn.delete(key, db=self.by_label), "a labelled job had its index row")
        if job.request_key is not None:
            self.txn.delete(keys.request_key(job.owner, job.request_key), db=self.reqkeys)

    # -- runs --------------------------------------------------------------------

    def put_run(
        self,
        run: Run,
        old_key: bytes | None = None,
        old_status: str | None = None,
        job: Job | None = None,
        *,
        job_key: bytes | None = None,
    ) -> bytes:
        """Writes `run` at the key of its due time, moving its row when the due
        time changed; keeps the runs-by-job index, the open-minute counts and
        the change feed in step. `old_status` is the status stored at `old_key`;
        `job_key` is `keys.job_key(run.job_id)` when the caller has it."""
        assert (old_key is None) == (old_status is None)
        if job_key is None:
            job_key = keys.job_key(run.job_id)
        key = keys.run_key_of(job_key, run.job_id, run.nominal_ms, run.due_ms)
        if old_key is not None and old_key != key:
            must(self.txn.delete(old_key, db=self.runs), "a run moves from the row it had")
        self.txn.put(key, enc.encode(run), db=self.runs)
        if old_key != key:
            self.txn.put(keys.by_job_key_of(job_key, run.nominal_ms), key, db=self.by_job)
        self._count_open(old_key if old_status in OPEN else None, key if run.status in OPEN else None)
        old_row = (old_status, keys.due_of(old_key)) if old_status in OPEN and old_key is not None else None
        new_row = (run.status, run.due_ms) if run.status in OPEN else None
        if old_row != new_row:
            self._move_open_row(run, old_row, new_row, job)
        moved = old_key != key
        if old_key is not None and old_status == "waiting" and (run.status != "waiting" or moved):
            self.changes.left.append(old_key)
        if run.status == "waiting" and (old_status != "waiting" or moved):
            self.changes.woken.append((key, run, job))
        if old_key is not None and old_status == "claimed" and run.status != "claimed":
            self.changes.gone.append(old_key)
        return key

    def put_run_in_place(
        self, run: Run, runs_key: bytes, old_status: str, job: Job | None = None, job_key: bytes | None = None
    ) -> None:
        """`put_run` for a run whose due time did not change (a claim): its row
        stays at `runs_key`, so the runs-by-job index and the open-minute
        counts stay as they are; the change feed and the runs-by-status
        index move. `job_key` is `keys.job_key(run.job_id)` when the caller
        has it."""
        assert old_status in OPEN and run.status in OPEN
        assert keys.due_of(runs_key) == run.due_ms, "the due time is in the key"
        self.cursors[self.runs].put(runs_key, enc.encode(run))
        if old_status != run.status:
            self._move_open_row(run, (old_status, run.due_ms), (run.status, run.due_ms), job, job_key=job_key)
        if old_status == "waiting" and run.status != "waiting":
            self.changes.left.append(runs_key)
        if run.status == "waiting" and old_status != "waiting":
            self.changes.woken.append((runs_key, run, None))
        if old_status == "claimed" and run.status != "claimed":
            self.changes.gone.append(runs_key)

    def send_back(self, runs_key: bytes, run: Run, job: Job) -> None:
        """A waiting run a claim took but did not claim, whose row does not
        move: the change feed names it again, so the dispatcher, which took
        it out of memory for the claim, holds it again."""
        self.changes.woken.append((runs_key, run, job))

    def drop_run(self, runs_key: bytes, run: Run, job: Job | None = None) -> None:
        must(self.txn.delete(runs_key, db=self.runs), "a run dropped has its row")
        self._count_open(runs_key if run.status in OPEN else None, None)
        if run.status in OPEN:
            self._move_open_row(run, (run.status, keys.due_of(runs_key)), None, job)
        if run.status == "waiting":
            self.changes.left.append(runs_key)
        elif run.status == "claimed":
            self.changes.gone.append(runs_key)

    def finish_run(
        self,
        run: Run,
        runs_key: bytes,
        old_status: str,
        at_ms: int,
        by_job_key: bytes | None = None,
        job: Job | None = None,
    ) -> None:
        """Moves a run that just finished (or was cancelled) at `at_ms` out of
        the open tables into the history bucket of that day: two deletes and
        one put, whatever the history holds. `by_job_key` is
        `keys.by_job_key(run.job_id, run.nominal_ms)` when the caller has it."""
        assert run.status in FINISHED and old_status in OPEN
        if run.buffered:
            # Cancelled while buffered (a pause, a cancel): it never fell
            # due, and is listed at when it ended, not at the far due time.
            run.buffered = False
            run.due_ms = at_ms
        if by_job_key is None:
            by_job_key = keys.by_job_key(run.job_id, run.nominal_ms)
        # Once per run that finishes (a result): the calls of `_delete_at`,
        # `_count_open` and `status_key_of` spelled out.
        cur = self.cursors[self.runs]
        found = cur.set_key(runs_key)
        assert found, "a finished run had its row"
        cur.delete()
        cur = self.cursors[self.by_job]
        found = cur.set_key(by_job_key)
        assert found, "a finished run had its runs-by-job row"
        cur.delete()
        self.history_cursor(at_ms, HIST_RUN).put(HIST_RUN + by_job_key, enc.encode(run))
        minute = MINUTE.unpack_from(runs_key)[0]
        self.open_deltas[minute] = self.open_deltas.get(minute, 0) - 1
        owner = job.owner if job is not None else self.owner_of(run.job_id, None)
        job_key = by_job_key[: keys.JOB_KEY_BYTES]
        self._move_open_row(run, (old_status, keys.due_of(runs_key)), None, job, owner, job_key)
        status_key = keys.status_head(owner) + keys.STATUS_TAIL.pack(
            keys.status_code(run.status), index_ms(run), job_key, run.nominal_ms
        )
        self.history_cursor(at_ms, HIST_STATUS).put(HIST_STATUS + status_key, b"")
        self._count_outcome(job_key, run)
        if old_status == "waiting":
            self.changes.left.append(runs_key)
        else:
            self.changes.gone.append(runs_key)

    # -- indexes and counts ------------------------------------------------------

    def _move_open_row(
        self,
        run: Run,
        old: tuple[str, int] | None,
        new: tuple[str, int] | None,
        job: Job | None,
        owner: str | None = None,
        job_key: bytes | None = None,
    ) -> None:
        """Moves an open run's row of the runs-by-status index from (status,
        due ms) `old` to `new` (None: no row). `owner` and `job_key` are the
        job's owner and `keys.job_key(run.job_id)` when the caller has them."""
        if owner is None:
            owner = self.owner_of(run.job_id, job)
        if job_key is None:
            job_key = keys.job_key(run.job_id)
        # Kept for `flush`, which writes a claim's or a result's thousand
        # moves in key order: one cursor walking the index's pages in
        # order, rather than a descent from the root to a random page for
        # each (half the cost a row). The keys are `keys.status_key_of`'s.
        rows = self.status_rows
        head, tail, code = keys.status_head(owner), keys.STATUS_TAIL, keys.STATUS_CODE
        if old is not None:
            old_key = head + tail.pack(code[old[0]], old[1], job_key, run.nominal_ms)
            rows[old_key] = None if rows.get(old_key) else False
        if new is not None:
            rows[head + tail.pack(code[new[0]], new[1], job_key, run.nominal_ms)] = True
        # The held-runs index, of jobs with an overlap policy only (a job
        # without one has no rows: `reset_held_rows` when a patch changes
        # that). `run` is the new state; of the old one only (status, due)
        # is known, which tells whether it may have been held. A caller
        # without the job at hand is one whose run becomes held only for a
        # job without a policy (a one-off's claim).
        if job is not None and job.overlap is None:
            return
        if new is not None and job is not None and is_held(run):
            self.cursors[self.held].put(keys.by_job_key_of(job_key, run.nominal_ms), b"")
        elif old is not None and may_be_held(*old):
            held = self.cursors[self.held]
            if held.set_key(keys.by_job_key_of(job_key, run.nominal_ms)):
                held.delete()

    def hold_row(self, job_id: str, nominal_ms: int) -> None:
        """A row of the held-runs index for a run that became one its
        job's policy looks at without moving (a backfill run adopted)."""
        self.cursors[self.held].put(keys.by_job_key(job_id, nominal_ms), b"")

    def reset_held_rows(self, job: Job) -> None:
        """The job's rows of the held-runs index after a patch gave it an
        overlap policy (a row for each run it holds, read from all its open
        runs once) or took its policy away (none)."""
        job_key = keys.job_key(job.id)
        cur = self.cursors[self.held]
        while cur.set_range(job_key) and cur.key().startswith(job_key):
            cur.delete()
        if job.overlap is None:
            return
        for nominal_ms, runs_key in self.slots_desc(job.id, 0, 1 << 63):
            if is_held(self.run_at(runs_key)):
                cur.put(keys.by_job_key_of(job_key, nominal_ms), b"")

    def _count_outcome(self, job_key: bytes, run: Run) -> None:
        """Counts a run that just finished into its job's outcome, kept in
        `outcome_counts` until `flush`: a job's outcome is read and written
        once a transaction however many of its runs finish in it."""
        outcome = self.outcome_counts.get(job_key)
        if outcome is None:
            raw = self.cursors[self.outcomes].get(job_key)
            outcome = self.outcome_counts[job_key] = JobOutcome() if raw is None else outcome_dec.decode(raw)
        add_to_outcome(outcome, run)

    def uncount_cancelled(self, job_key: bytes) -> None:
        """A cancelled run of the job came back to waiting (a resume): it
        no longer counts in the job's `cancelled`, so a cancel after it
        counts it once."""
        outcome = self.outcome_counts.get(job_key)
        if outcome is None:
            raw = self.cursors[self.outcomes].get(job_key)
            assert raw is not None, "a cancelled run was counted"
            outcome = self.outcome_counts[job_key] = outcome_dec.decode(raw)
        assert outcome.cancelled > 0, "a cancelled run was counted"
        outcome.cancelled -= 1

    def _count_open(self, old_key: bytes | None, new_key: bytes | None) -> None:
        old_minute = None if old_key is None else MINUTE.unpack(old_key[:4])[0]
        new_minute = None if new_key is None else MINUTE.unpack(new_key[:4])[0]
        if old_minute == new_minute:
            return
        if old_minute is not None:
            self.add_open(old_minute, -1)
        if new_minute is not None:
            self.add_open(new_minute, 1)

    def _flush_status_rows(self) -> None:
        """The runs-by-status rows `_move_open_row` kept, in key order."""
        cur = self.cursors[self.by_status]
        for key in sorted(self.status_rows):
            put = self.status_rows[key]
            if put:
                cur.put(key, b"")
            elif cur.set_key(key):
                cur.delete()
            else:
                assert put is None, "an open run had no runs-by-status row"
        self.status_rows.clear()

    def add_open(self, minute: int, delta: int) -> None:
        self.open_deltas[minute] = self.open_deltas.get(minute, 0) + delta

    def flush(self) -> None:
        """Writes what the entry accumulated; called once, before the commit."""
        if self.status_rows:
            self._flush_status_rows()
        for minute, delta in self.open_deltas.items():
            if delta != 0:
                self._add_to_count(self.open, MINUTE.pack(minute), delta, f"open runs of minute {minute}")
        if self.event_seq is not None:
            self.txn.put(EVENT_SEQ, U64.pack(self.event_seq), db=self.meta)
        if self.outcome_counts:
            cur = self.cursors[self.outcomes]
            for job_key in sorted(self.outcome_counts):
                cur.put(job_key, enc.encode(self.outcome_counts[job_key]))
            self.outcome_counts.clear()
        self._flush_job_counts()

    def _flush_job_counts(self) -> None:
        for (owner, state), delta in sorted(self.job_count_deltas.items()):
            if delta != 0:
                self._add_to_count(self.job_counts, job_count_key(owner, state), delta, f"jobs of {owner!r} {state}")
        self.job_count_deltas.clear()

    def _add_to_count(self, db: lmdb._Database, key: bytes, delta: int, what: str) -> None:
        """Adds `delta` to the count at `key` (a U64; no row: 0); a count
        of 0 has no row."""
        raw = self.txn.get(key, db=db)
        count = (0 if raw is None else U64.unpack(raw)[0]) + delta
        assert count >= 0, f"{what} below zero"
        if count == 0:
            self.txn.delete(key, db=db)
        else:
            self.txn.put(key, U64.pack(count), db=db)

    # -- events ------------------------------------------------------------------

    def append_event(self, owner: str, event: Event) -> None:
        self.history_cursor(event.at_ms, HIST_EVENT).put(*self.event_row(owner, event))

    def event_row(self, owner: str, event: Event) -> tuple[bytes, bytes]:
        """The next event's key and value in its day's history bucket, its
        sequence number taken; the caller puts them (`append_event`, or
        `NewRows.put` for a batch's `job.created`, in one `putmulti`)."""
        if self.event_seq is None:
            raw = self.txn.get(EVENT_SEQ, db=self.meta)
            self.event_seq = 0 if raw is None else U64.unpack(raw)[0]
        self.event_seq += 1
        self.changes.event_owners.add(owner)
        # `keys.event_key`, spelled out: once per event.
        return HIST_EVENT + keys.owner_prefix(owner) + U64.pack(self.event_seq), enc.encode(event)


class NewRows:
    """Rows of new jobs, their runs and index entries, put per table in one
    call: py-lmdb's `putmulti` costs half what one `put` a row does."""

    __slots__ = ("by_job", "by_label", "by_owner", "by_status", "events", "jobs", "runs")

    def __init__(self) -> None:
        self.jobs: list[tuple[bytes, bytes]] = []
        self.runs: list[tuple[bytes, bytes]] = []
        self.by_job: list[tuple[bytes, bytes]] = []
        self.by_owner: list[tuple[bytes, bytes]] = []
        self.by_status: list[tuple[bytes, bytes]] = []
        self.by_label: list[tuple[bytes, bytes]] = []
        self.events: list[tuple[int, tuple[bytes, bytes]]] = []  # (at_ms, row): their `job.created`

    def add(self, t: Tables, job: Job, first_due_ms: int | None) -> None:
        """A new job's rows, with its first run's (waiting, due at
        `first_due_ms`) unless that is None, and its `job.created` event:
        `Tables.put_run` of a run with no old row, spelled out."""
        key = keys.job_key(job.id)
        self.jobs.append((key, enc.encode(job)))
        t.remember_owner(job.id, job.owner)  # its runs' claims need not read it (`Reads.owner_of`)
        if first_due_ms is not None:
            assert job.slot_ms is not None
            run = Run(job.id, job.slot_ms, first_due_ms, "waiting")
            runs_key, by_job_key = keys.new_run_keys(key, job.id, job.slot_ms, first_due_ms)
            self.runs.append((runs_key, enc.encode(run)))
            self.by_job.append((by_job_key, runs_key))
            self.by_status.append((status_key_of(job.owner, run), b""))
            minute = first_due_ms // limits.minute_ms  # `add_open`, inline: one call fewer a job
            t.open_deltas[minute] = t.open_deltas.get(minute, 0) + 1
            t.changes.woken.append((runs_key, run, job))
        self.by_owner.append((keys.owner_prefix(job.owner) + key, b""))
        t.count_job(job.owner, job.state, 1)
        if job.labels:
            self.by_label += [(k, b"") for k in label_keys(job, key)]
        # `created_at_ms` is the command's stamp (docs/api.md "Events").
        event = Event("job.created", job.created_at_ms, job.id, None, {"version": job.version})
        self.events.append((event.at_ms, t.event_row(job.owner, event)))

    def put(self, t: Tables) -> None:
        """Puts what is gathered and empties the lists. Every key is new (it
        holds the job's fresh ID), so each row adds one: a job ID drawn
        twice stops the node here."""
        for rows, db in (
            (self.jobs, t.jobs), (self.runs, t.runs), (self.by_job, t.by_job), (self.by_owner, t.by_owner),
            (self.by_status, t.by_status), (self.by_label, t.by_label),
        ):
            if rows:
                with t.txn.cursor(db=db) as cursor:
                    put_new(cursor, rows)
                rows.clear()
        # Each event goes to the bucket of its day: one `putmulti` a day
        # (a command's jobs share its stamp, so one in all).
        days: dict[int, tuple[int, list[tuple[bytes, bytes]]]] = {}
        for at_ms, row in self.events:
            days.setdefault(at_ms // limits.day_ms, (at_ms, []))[1].append(row)
        for at_ms, day_rows in days.values():
            put_new(t.history_cursor(at_ms, HIST_EVENT), day_rows)
        self.events.clear()


def put_new(cursor: "lmdb.Cursor[bytes]", rows: list[tuple[bytes, bytes]]) -> None:
    """Puts rows whose keys are all new to the cursor's table (a key that
    exists stops the node here), sorting `rows` in place.

    Sorted, a batch's rows walk the table's pages in order, and the ones
    past the table's last key go in with LMDB's append flag: a full leaf
    page then starts a new one rather than splitting in half. Put in the
    order they came, a batch of new IDs leaves those pages about
    two-thirds full (tests/engine/test_page_fill.py, docs/performance.md
    "Pages filled in key order")."""
    rows.sort()
    start = bisect.bisect_right(rows, cursor.key(), key=_key_of) if cursor.last() else 0
    if start:
        consumed, added = cursor.putmulti(rows[:start], overwrite=False)
        assert consumed == added == start, "a new row's key existed"
    if start < len(rows):
        consumed, added = cursor.putmulti(rows[start:], overwrite=False, append=True)
        assert consumed == added == len(rows) - start, "a new row's key existed"


def _key_of(row: tuple[bytes, bytes]) -> bytes:
    return row[0]
