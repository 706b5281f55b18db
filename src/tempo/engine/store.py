"""The storage engine: tempo's tables in one LMDB environment, and `apply`.

`Store.apply_entry` is the state machine. It takes one log entry (a batch of
commands) and applies it in one write transaction that also records the
applied index, so after a crash the tables and the index agree. It reads no
clock and no random source: two stores fed the same entries hold byte-identical
tables. It is called off the trio thread (the write transaction ends with an
fsync); reads run on any thread against LMDB's snapshots and never wait for it.

This is the only module that imports lmdb.
"""

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import lmdb
import msgspec

from tempo import errors, ids, limits
from tempo.engine import keys
from tempo.engine.commands import (
    Command,
    CreateJobs,
    DeleteJob,
    NewJob,
    PauseJob,
    ResumeJob,
    TriggerJob,
    decode_entry,
)
from tempo.engine.records import Event, Job, RequestKeyEntry, Run

_TABLES = ("meta", "jobs", "jobs_by_owner", "runs", "runs_by_job", "request_keys", "events")
_U64 = struct.Struct(">Q")
_APPLIED_INDEX = b"applied_index"

_enc = msgspec.msgpack.Encoder()
_job_dec = msgspec.msgpack.Decoder(Job)
_run_dec = msgspec.msgpack.Decoder(Run)
_reqkey_dec = msgspec.msgpack.Decoder(RequestKeyEntry)
_event_dec = msgspec.msgpack.Decoder(Event)


@dataclass(frozen=True, slots=True)
class Created:
    job: Job
    new: bool  # False: the request key named an existing job with the same body


# What apply answers for one command: a value, or the operating error the
# request gets. Errors are returned, not raised, so one bad command in a batch
# leaves the others (and the transaction) alone.
Outcome = Created | Job | Run | None | errors.TempoError


class Store:
    def __init__(self, path: str, *, map_bytes: int = limits.lmdb_map_bytes):
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.env = lmdb.open(
            path,
            map_size=map_bytes,
            max_dbs=limits.lmdb_max_dbs,
            sync=True,
            metasync=True,
            subdir=True,
            readahead=False,
        )
        self.db = {name: self.env.open_db(name.encode()) for name in _TABLES}

    def close(self) -> None:
        self.env.close()

    # -- the state machine -------------------------------------------------

    def applied_index(self) -> int:
        with self.env.begin() as txn:
            raw = txn.get(_APPLIED_INDEX, db=self.db["meta"])
        return 0 if raw is None else _U64.unpack(raw)[0]

    def apply_entry(self, index: int, data: bytes) -> list[Outcome]:
        """Applies the log entry at `index`; an entry at or below the applied
        index was applied before (a replay after a crash) and changes nothing."""
        commands = decode_entry(data)
        try:
            return self._apply_commands(index, commands)
        except lmdb.MapFullError:
            raise errors.Overloaded("the data file is full") from None

    def _apply_commands(self, index: int, commands: list[Command]) -> list[Outcome]:
        with self.env.begin(write=True) as txn:
            raw = txn.get(_APPLIED_INDEX, db=self.db["meta"])
            applied = 0 if raw is None else _U64.unpack(raw)[0]
            if index <= applied:
                return [errors.Conflict("already applied")] * len(commands)
            assert index == applied + 1, f"entry {index} after applied {applied}: a gap"
            tx = _Tx(txn, self.db)
            outcomes = [tx.apply(command) for command in commands]
            txn.put(_APPLIED_INDEX, _U64.pack(index), db=self.db["meta"])
        return outcomes

    # -- reads ---------------------------------------------------------------

    def get_job(self, owner: str, job_id: str) -> Job:
        with self.env.begin() as txn:
            job = _Tx(txn, self.db).job(owner, job_id)
        if job is None:
            raise errors.NotFound(f"no job {job_id}")
        return job

    def list_jobs(self, owner: str, limit: int, cursor: str | None) -> tuple[list[Job], str | None]:
        """The owner's jobs, newest first; `cursor` is the last job ID seen."""
        prefix = keys.owner_prefix(owner)
        start = prefix + (keys.job_key(cursor) if cursor else b"\xff")
        jobs: list[Job] = []
        with self.env.begin() as txn:
            by_owner = txn.cursor(db=self.db["jobs_by_owner"])
            jobs_db = self.db["jobs"]
            found = by_owner.set_range(start)
            found = by_owner.prev() if found else by_owner.last()
            while found and len(jobs) <= limit:
                key = by_owner.key()
                if not key.startswith(prefix):
                    break
                jobs.append(_job_dec.decode(txn.get(key[len(prefix) :], db=jobs_db)))
                found = by_owner.prev()
        if len(jobs) > limit:
            return jobs[:limit], jobs[limit - 1].id
        return jobs, None

    def get_run(self, owner: str, run_id_text: str) -> tuple[Run, Job]:
        parsed = ids.parse_run_id(run_id_text)
        with self.env.begin() as txn:
            tx = _Tx(txn, self.db)
            job = tx.job(owner, parsed[0]) if parsed else None
            run = tx.run_at_slot(parsed[0], parsed[1]) if job and parsed else None
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
        """Runs with nominal time in [since, until), newest first; `cursor_ms`
        is the nominal time of the last run seen."""
        upper = min(x for x in (until_ms, cursor_ms, 1 << 63) if x is not None)
        lower = since_ms if since_ms is not None else 0
        runs: list[Run] = []
        with self.env.begin() as txn:
            tx = _Tx(txn, self.db)
            if tx.job(owner, job_id) is None:
                raise errors.NotFound(f"no job {job_id}")
            for _, runs_key in tx.slots_desc(job_id, lower, upper):
                runs.append(_run_dec.decode(txn.get(runs_key, db=self.db["runs"])))
                if len(runs) > limit:
                    break
        if len(runs) > limit:
            return runs[:limit], runs[limit - 1].nominal_ms
        return runs, None

    def dump(self) -> dict[str, list[tuple[bytes, bytes]]]:
        """Every table's rows in key order, for comparing replicas in tests."""
        with self.env.begin() as txn:
            return {name: list(txn.cursor(db=db)) for name, db in self.db.items()}

    def scan_runs(self, minute_lo: int, minute_hi: int) -> Iterator[tuple[bytes, Run]]:
        """Runs whose due minute is in [minute_lo, minute_hi), in key order."""
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.db["runs"])
            hi = keys.minute_prefix(minute_hi)
            if not cur.set_range(keys.minute_prefix(minute_lo)):
                return
            for key, value in cur:
                if key >= hi:
                    return
                yield key, _run_dec.decode(value)


class _Tx:
    """One transaction's view of the tables, with the apply functions."""

    __slots__ = ("txn", "jobs", "by_owner", "runs", "by_job", "reqkeys", "events", "meta")

    def __init__(self, txn: lmdb.Transaction, db: dict[str, lmdb._Database]):
        self.txn = txn
        self.jobs = db["jobs"]
        self.by_owner = db["jobs_by_owner"]
        self.runs = db["runs"]
        self.by_job = db["runs_by_job"]
        self.reqkeys = db["request_keys"]
        self.events = db["events"]
        self.meta = db["meta"]

    # -- reads inside the transaction ----------------------------------------

    def job(self, owner: str, job_id: str) -> Job | None:
        if not ids.is_job_id(job_id):
            return None
        raw = self.txn.get(keys.job_key(job_id), db=self.jobs)
        if raw is None:
            return None
        job = _job_dec.decode(raw)
        return job if job.owner == owner else None

    def run_key_at_slot(self, job_id: str, slot_ms: int) -> bytes | None:
        return self.txn.get(keys.by_job_key(job_id, slot_ms), db=self.by_job)

    def run_at_slot(self, job_id: str, slot_ms: int) -> Run | None:
        runs_key = self.run_key_at_slot(job_id, slot_ms)
        return None if runs_key is None else _run_dec.decode(self.txn.get(runs_key, db=self.runs))

    def slots_desc(self, job_id: str, lower_ms: int, upper_ms: int) -> Iterator[tuple[int, bytes]]:
        """(nominal ms, runs key) of the job's runs in [lower, upper), newest first."""
        cur = self.txn.cursor(db=self.by_job)
        prefix = keys.job_key(job_id)
        found = cur.set_range(keys.by_job_key(job_id, upper_ms))
        found = cur.prev() if found else cur.last()
        while found:
            key = cur.key()
            if not key.startswith(prefix):
                return
            _, nominal_ms = keys.parse_by_job_key(key)
            if nominal_ms < lower_ms:
                return
            yield nominal_ms, cur.value()
            found = cur.prev()

    # -- writes ----------------------------------------------------------------

    def put_job(self, job: Job) -> None:
        self.txn.put(keys.job_key(job.id), _enc.encode(job), db=self.jobs)

    def put_run(self, run: Run, old_key: bytes | None = None) -> bytes:
        """Writes `run` at the key of its due time, moving its row when the due
        time changed, and keeps the runs-by-job index pointing at it."""
        key = keys.run_key(run.job_id, run.nominal_ms, run.due_ms)
        if old_key is not None and old_key != key:
            assert self.txn.delete(old_key, db=self.runs)
        self.txn.put(key, _enc.encode(run), db=self.runs)
        if old_key != key:
            self.txn.put(keys.by_job_key(run.job_id, run.nominal_ms), key, db=self.by_job)
        return key

    def append_event(self, owner: str, event: Event) -> None:
        seq_key = b"event_seq"
        raw = self.txn.get(seq_key, db=self.meta)
        seq = 1 if raw is None else _U64.unpack(raw)[0] + 1
        self.txn.put(seq_key, _U64.pack(seq), db=self.meta)
        self.txn.put(keys.event_key(owner, seq), _enc.encode(event), db=self.events)

    # -- apply ---------------------------------------------------------------

    def apply(self, command: Command) -> Outcome:
        match command:
            case CreateJobs():
                return [self.create_job(item) for item in command.jobs]  # type: ignore[return-value]
            case PauseJob():
                return self.pause_job(command)
            case ResumeJob():
                return self.resume_job(command)
            case DeleteJob():
                return self.delete_job(command)
            case TriggerJob():
                return self.trigger_job(command)
        raise AssertionError(f"unknown command {type(command).__name__}")

    def create_job(self, item: NewJob) -> Created | errors.TempoError:
        job = item.job
        if job.request_key is not None:
            req_key = keys.request_key(job.owner, job.request_key)
            raw = self.txn.get(req_key, db=self.reqkeys)
            if raw is not None:
                entry = _reqkey_dec.decode(raw)
                if entry.body_hash != item.body_hash:
                    return errors.RequestKeyReused(
                        f"request key {job.request_key!r} was used for another body"
                    )
                existing = self.job(job.owner, entry.job_id)
                assert existing is not None, "a request key outlived its job"
                return Created(existing, new=False)
            self.txn.put(req_key, _enc.encode(RequestKeyEntry(job.id, item.body_hash)), db=self.reqkeys)
        key = keys.job_key(job.id)
        assert self.txn.get(key, db=self.jobs) is None, f"job ID {job.id} drawn twice"
        if item.first_due_ms is not None:
            assert job.slot_ms is not None
            self.put_run(Run(job.id, job.slot_ms, item.first_due_ms, "waiting"))
        self.put_job(job)
        self.txn.put(keys.owner_job_key(job.owner, job.id), b"", db=self.by_owner)
        return Created(job, new=True)

    def pause_job(self, cmd: PauseJob) -> Job | errors.TempoError:
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        if job.state != "active":
            return job  # paused already, or completed: nothing waits
        if job.slot_ms is not None:
            runs_key = self.run_key_at_slot(job.id, job.slot_ms)
            run = None if runs_key is None else _run_dec.decode(self.txn.get(runs_key, db=self.runs))
            if run is not None and run.status == "waiting":
                run.status = "cancelled"
                self.put_run(run, runs_key)
        job.state = "paused"
        job.next_run_at_ms = None
        self.put_job(job)
        return job

    def resume_job(self, cmd: ResumeJob) -> Job | errors.TempoError:
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        if job.state != "paused":
            return job
        job.state = "active"
        job.next_run_at_ms = None
        if job.schedule.repeating:
            slot_ms, due_ms = cmd.slot_ms, cmd.due_ms
        else:
            slot_ms, due_ms = job.slot_ms, None
        if slot_ms is None:
            job.state = "completed"  # the schedule has no occurrence left
        else:
            job.next_run_at_ms = self._wake_slot(job, slot_ms, due_ms, cmd.at_ms)
        job.slot_ms = slot_ms if job.schedule.repeating else job.slot_ms
        self.put_job(job)
        return job

    def _wake_slot(self, job: Job, slot_ms: int, due_ms: int | None, at_ms: int) -> int | None:
        """Makes the run of `slot_ms` waiting: the one pause cancelled, or a new
        one. Answers its due time, or None when the slot's run is past waiting
        (claimed before the pause, or finished)."""
        runs_key = self.run_key_at_slot(job.id, slot_ms)
        if runs_key is None:
            assert due_ms is not None
            self.put_run(Run(job.id, slot_ms, due_ms, "waiting"))
            return due_ms
        run = _run_dec.decode(self.txn.get(runs_key, db=self.runs))
        if run.status != "cancelled":
            return run.due_ms if run.status == "waiting" else None
        run.status = "waiting"
        run.due_ms = max(run.due_ms, at_ms)
        self.put_run(run, runs_key)
        return run.due_ms

    def delete_job(self, cmd: DeleteJob) -> None | errors.TempoError:
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        by_job = self.txn.cursor(db=self.by_job)
        prefix = keys.job_key(job.id)
        found = by_job.set_range(prefix)
        while found and by_job.key().startswith(prefix):
            assert self.txn.delete(by_job.value(), db=self.runs)
            found = by_job.delete()
        assert self.txn.delete(keys.job_key(job.id), db=self.jobs)
        assert self.txn.delete(keys.owner_job_key(job.owner, job.id), db=self.by_owner)
        if job.request_key is not None:
            # Deleting a job releases its request key: a later create with that
            # key makes a new job rather than answering with a deleted one.
            self.txn.delete(keys.request_key(job.owner, job.request_key), db=self.reqkeys)
        return None

    def trigger_job(self, cmd: TriggerJob) -> Run | errors.TempoError:
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        for slot_ms in range(cmd.at_ms, cmd.at_ms + limits.trigger_slot_probe_max):
            if self.run_key_at_slot(job.id, slot_ms) is None:
                run = Run(job.id, slot_ms, slot_ms, "waiting", triggered=True)
                self.put_run(run)
                return run
        return errors.Conflict(f"job {job.id} has no free run slot near {cmd.at_ms}")
