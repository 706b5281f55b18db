"""The storage engine: tempo's tables in one LMDB environment, and `apply`.

`Store.apply_entry` is the state machine. It takes one log entry (a batch of
commands) and applies it in one write transaction that also records the
applied index, so after a crash the tables and the index agree. It reads no
clock and no random source: two stores fed the same entries hold byte-identical
tables. It is called off the trio thread (the write transaction ends with an
fsync); reads run on any thread against LMDB's snapshots and never wait for it.

It and the raft log beside it (raftlog.py, which writes inside the
transactions this module opens) are the only modules that import lmdb: an
import contract in pyproject.toml keeps it so.
"""

import errno
import hashlib
import heapq
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, overload

import lmdb
import msgspec

from tempo import clock, errors, ids, limits
from tempo.engine import datadir, keys, records
from tempo.engine.commands import (
    BackfillJob,
    CancelRun,
    Claim,
    ClaimKey,
    ClaimRuns,
    Command,
    CreateJobs,
    DeleteJob,
    DropHistory,
    ExpireLeases,
    Expiry,
    NewJob,
    NotifyCursor,
    OverlapRuns,
    PatchJob,
    PauseJob,
    ReportResults,
    Result,
    ResumeJob,
    SetMember,
    TriggerJob,
    decode_entry,
)
from tempo.engine.records import (
    Attempt,
    ClaimKeyEntry,
    Event,
    Job,
    JobOutcome,
    Missed,
    Paused,
    RequestKeyEntry,
    RetryKept,
    Run,
    Taken,
)
from tempo.metrics import Histogram

_TABLES = (
    "meta",
    "jobs",
    "jobs_by_owner",
    "runs",
    "runs_by_job",
    "request_keys",
    "events",
    "open_minutes",
    "members",
    "history_days",
    "claim_keys",
    "runs_by_status",
    "job_outcomes",
    "jobs_by_label",
    "runs_held",
)
# Tables a later version added: created in an existing store that lacks them.
# `runs_by_status` and `job_outcomes` (`_RUN_INDEX_TABLES`) are built at open
# from the other tables (`_build_run_index`): the runs index by owner and
# status of open runs, and each job's outcome. The index rows of finished
# runs live in the history bucket of the run, at b"s" + `keys.status_key(...)`,
# so they go with it.
_RUN_INDEX_TABLES = ("runs_by_status", "job_outcomes")
_ADDED_TABLES = ("claim_keys", *_RUN_INDEX_TABLES, "jobs_by_label", "runs_held")
_HIST_STATUS = b"s"
# In `meta`: present once the tables above and the b"s" rows are complete.
_RUN_INDEX = b"run_index"
# In `meta`: present once `jobs_by_label` holds a row for each label of each
# job (`_build_label_index`, at open, for a store of a version without it).
_LABEL_INDEX = b"label_index"
# In `meta`: present once `runs_held` holds a row (at the runs-by-job key)
# for each open run an overlap policy looks at: claimed, or waiting
# buffered, and not a backfill run (`_is_held`). The policy's decisions read
# these rows, not every open run of the job (`_build_held_index`, at open,
# for a store of a version without it).
_HELD_INDEX = b"held_index"
_OPEN = ("waiting", "claimed")
_FINISHED = ("done", "failed", "cancelled", "missed", "skipped")  # `missed`: a row record_missed writes
# Overlap policies that hold a slot's run back while an earlier run runs.
_BUFFERING = ("buffer_one", "buffer_all")
_U64 = struct.Struct(">Q")
_MINUTE = struct.Struct(">I")
# History buckets (limits.py "Retention"): finished runs and events, in a ring
# of databases `hist:000`... A bucket's slot is its day mod the ring's size;
# `history_days` maps each slot in use (u16) to the day it holds (u32). In a
# bucket, a run is at b"r" + runs-by-job key, an event at b"e" + events key.
_SLOT = struct.Struct(">H")
_DAY = struct.Struct(">I")
_HIST_RUN = b"r"
_HIST_EVENT = b"e"
assert len(_HIST_EVENT) == limits.event_key_head_bytes, "the event key layout limits.py bounds"
# lmdb errors that say tempo used LMDB wrongly (a key past its bound, a
# handle or transaction misused), not that the machine failed: programmer
# errors, raised as they are. Every other lmdb error is a `StorageFault`.
_MISUSE = (
    lmdb.BadValsizeError, lmdb.BadDbiError, lmdb.BadTxnError, lmdb.BadRslotError, lmdb.InvalidParameterError,
    lmdb.KeyExistsError, lmdb.NotFoundError,
)
# LMDB's own word that the environment can no longer be used (a failed meta
# page write): every later transaction fails the same way, so refusing
# writes and trying again would never clear. It stops the node instead.
_FATAL = (lmdb.PanicError,)
_APPLIED_INDEX = b"applied_index"
_EVENT_SEQ = b"event_seq"
# The last event sequence the notifier handled (`NotifyCursor`).
_NOTIFY_CURSOR = b"notify_cursor"
# Written and deleted in one transaction by `Store.probe`: never in the tables.
_PROBE = b"\x00probe"
# What a file system answers when the disk is full or failing (a snapshot
# file's write, engine/raftlog.py); LMDB's own are its exceptions below.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})
# The highest command stamp applied (UNIX ms): the floor of the clock of
# whichever node stamps commands next (clock.py).
_STAMP = b"stamp_ms"
T = TypeVar("T")
log = logging.getLogger("tempo.store")

_enc = msgspec.msgpack.Encoder()
# Decoders that raise records.Corrupt, and only it, for a damaged record.
_job_dec = records.Decoder(Job)
_job_head_dec = records.Decoder(records.JobHead, "Job")
_run_dec = records.Decoder(Run)
_reqkey_dec = records.Decoder(RequestKeyEntry)
_claimkey_dec: records.Decoder[ClaimKeyEntry] = records.Decoder(ClaimKeyEntry)
_event_dec = records.Decoder(Event)
_outcome_dec = records.Decoder(JobOutcome)
_snapshot_dec = records.Decoder(list[tuple[str, list[tuple[bytes, bytes]]]], "snapshot")


def bucket_name(slot: int) -> str:
    return f"hist:{slot:03d}"


class Created(msgspec.Struct, frozen=True, gc=False):
    """A create's answer. A struct, not a frozen dataclass: apply makes one
    per job of a batch, and a frozen dataclass's __init__ sets each field
    through object.__setattr__ (0.27 µs against 0.04)."""

    job: Job
    new: bool  # False: the request key named an existing job with the same body


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
    # (`_Tx.request_cancel`): their leases stop growing with heartbeats,
    # and heartbeats answer `cancel: requested`.
    stopping: list[tuple[str, int]] = field(default_factory=list)
    # The highest command stamp applied so far (the store's `stamp_ms`).
    stamp_ms: int = 0
    # Runs the overlap policy of their job skipped in this entry (`skip_run`).
    skipped: int = 0


# What apply answers for one command: a value, or the operating error the
# request gets. Errors are returned, not raised, so one bad command in a batch
# leaves the others (and the transaction) alone.
Outcome = (
    Created | Job | Run | None | errors.TempoError | ClaimKeyEntry
    | list[Created | errors.TempoError] | list[Run | None] | list[Run | errors.TempoError] | list[Run] | list[bool]
)


class Store:
    def __init__(
        self,
        path: str,
        *,
        map_bytes: int | None = None,
        map_grows: bool | None = None,
        identity: datadir.Identity | None = None,
    ):
        """Opens (or creates) the store in the directory `path`, checked
        first (engine/datadir.py): damage, a foreign environment or an
        `identity` other than the directory's raise `datadir.DataDirError`.
        With `identity` None (tests and tools) the identity is neither
        checked nor written.

        `map_bytes`: the LMDB map's size (the most the data file may hold);
        None sizes it to the disk (`disk_map_bytes`). The map grows
        (`grow_map`) if `map_grows`, by default when it was sized to the disk."""
        meta = datadir.check_files(path)
        self.path = path
        self.map_grows = map_bytes is None if map_grows is None else map_grows
        # Seconds each write transaction's commit took: LMDB writes the dirty
        # pages and fsyncs there (`sync=True`), so this is the fsync latency.
        self.txn_commit_seconds = Histogram()
        self.map_grown = 0  # times `grow_map` grew the map
        # Held by reads off the trio thread (`snapshot_data`, `digest`) while
        # their transaction is open, and by `grow_map`: a remap invalidates
        # every open transaction of the process.
        self._remap = threading.Lock()
        try:
            os.makedirs(path, exist_ok=True)
            self.env = lmdb.open(
                path,
                map_size=self.disk_map_bytes() if map_bytes is None else map_bytes,
                max_dbs=limits.lmdb_max_dbs,
                sync=True,
                metasync=True,
                subdir=True,
                readahead=False,
            )
        except (OSError, lmdb.Error) as exc:
            raise datadir.DataDirError(f"--data-dir {path}: cannot open it: {exc}") from None
        # The key bounds of limits.py are derived from this (a liblmdb
        # built with a smaller MDB_MAXKEYSIZE could not hold tempo's keys).
        assert self.env.max_key_size() >= limits.lmdb_key_bytes_max, "LMDB's key bound"
        try:
            self.identity, self.adopted = self._open_tables(meta, identity)
        except lmdb.Error as exc:
            self.env.close()
            raise datadir.DataDirError(f"{path}: the data is damaged ({exc}): restore it from a backup") from None
        except BaseException:
            self.env.close()
            raise

    def _open_tables(
        self, meta: datadir.Meta | None, wanted: datadir.Identity | None
    ) -> tuple[datadir.Identity | None, bool]:
        """Opens every database, in one transaction, and never closes them:
        readers on other threads use the handles without opening any. First
        it checks the names already there and the identity record; nothing
        is created in an environment that is not tempo's or not this
        start's. Returns (the directory's identity, whether it was adopted
        from an earlier version now)."""
        with self.env.begin(write=True) as txn:
            names = {name for name, _ in txn.cursor()}
            existing = datadir.check_tables(self.path, names, meta, _TABLES, _ADDED_TABLES)
            self.db = {name: self.env.open_db(name.encode(), txn=txn) for name in _TABLES}
            self.buckets = [
                self.env.open_db(bucket_name(slot).encode(), txn=txn) for slot in range(limits.history_buckets)
            ]
            applied = txn.get(_APPLIED_INDEX, db=self.db["meta"])
            if applied is not None and len(applied) != _U64.size:
                raise datadir.DataDirError(
                    f"{self.path}: the applied index is {len(applied)} bytes, not 8: the data is damaged; "
                    "restore it from a backup"
                )
            identity_db = self.env.open_db(datadir.IDENTITY_DB, txn=txn)
            raw = txn.get(datadir.IDENTITY_KEY, db=identity_db)
            stored = None if raw is None else datadir.decode_identity(self.path, raw)
            adopted = False
            if stored is None and existing and wanted is not None:
                # An earlier version's directory: tempo's tables, no record.
                # A member's has founded or joined: its raft state says so.
                raft_meta = self.env.open_db(datadir.RAFT_META_DB, txn=txn) if datadir.RAFT_META_DB in names else None
                member = raft_meta is not None and txn.get(datadir.SNAPSHOT_META_KEY, db=raft_meta) is not None
                adopted = member == (wanted.mode == "cluster")
                stored = wanted if adopted else datadir.earlier_identity(member)
            if stored is not None and wanted is not None:
                datadir.check_identity(self.path, stored, wanted)
            if raw is None and wanted is not None:
                txn.put(datadir.IDENTITY_KEY, datadir.encode_identity(wanted), db=identity_db)
                stored = wanted
            if txn.get(_RUN_INDEX, db=self.db["meta"]) is None:
                _build_run_index(txn, self.db, self.buckets)
            if txn.get(_LABEL_INDEX, db=self.db["meta"]) is None:
                _build_label_index(txn, self.db)
            if txn.get(_HELD_INDEX, db=self.db["meta"]) is None:
                _build_held_index(txn, self.db)
        self.db.update((bucket_name(slot), db) for slot, db in enumerate(self.buckets))
        return stored, adopted

    def close(self) -> None:
        self.env.close()

    def usage(self) -> tuple[int, int, int]:
        """(bytes of the data file, bytes in use, bytes of the map): cheap,
        no transaction."""
        info, page_bytes = self.env.info(), self.env.stat()["psize"]
        file_bytes = os.stat(os.path.join(self.path, "data.mdb")).st_size
        return file_bytes, (info["last_pgno"] + 1) * page_bytes, info["map_size"]

    # -- room: the disk, the map -----------------------------------------------

    def free_bytes(self) -> int:
        """Bytes free for this process on the data directory's file system."""
        fs = os.statvfs(self.path)
        return fs.f_bavail * fs.f_frsize

    def disk_map_bytes(self) -> int:
        """A map as large as the disk allows: the data file and the free
        space beside it, in whole MiB, within the limits."""
        try:
            file_bytes = os.stat(os.path.join(self.path, "data.mdb")).st_size
        except FileNotFoundError:
            file_bytes = 0
        wanted = (file_bytes + self.free_bytes()) >> 20 << 20
        return min(max(wanted, limits.lmdb_map_bytes_min), limits.lmdb_map_bytes_max)

    def grow_map(self) -> bool:
        """Grows the map to what the disk allows now, if that is more by at
        least `lmdb_map_grow_bytes_min`; False if it did not. Only on the
        trio thread with no write transaction open (the committer or the
        replica loop between its writes): LMDB remaps, and every open
        transaction of the process must be closed. The trio thread holds
        none between its awaits; reads on other threads hold `_remap`."""
        if not self.map_grows:
            return False
        before = self.env.info()["map_size"]
        wanted = self.disk_map_bytes()
        if wanted < before + limits.lmdb_map_grow_bytes_min:
            return False
        if not self._remap.acquire(blocking=False):
            return False  # a snapshot or digest is reading: the next try
        try:
            self.env.set_mapsize(wanted)
        finally:
            self._remap.release()
        self.map_grown += 1
        log.warning("the LMDB map was full: grown from %d to %d MiB", before >> 20, wanted >> 20)
        return True

    def probe(self) -> errors.StorageFault | None:
        """Whether a write would fit now (worker thread, as a write): the
        disk has `storage_probe_bytes` free, the map as much room past its
        pages in use (a sixteenth of it at most), and a small transaction
        commits. None if so. The probe allocates no more than a write of a
        row does: pages a transaction takes and gives back are never
        written, and past the end of the file they would leave it shorter
        than its meta page says."""
        if self.free_bytes() < limits.storage_probe_bytes:
            return errors.StorageFault("the disk is full")
        _, used_bytes, map_bytes = self.usage()
        if map_bytes - used_bytes < min(limits.storage_probe_bytes, map_bytes // 16):
            return errors.StorageFault(f"the data file is full: its map of {map_bytes >> 20} MiB", map_full=True)

        def work(txn: "lmdb.Transaction[bytes]") -> None:
            txn.put(_PROBE, b"", db=self.db["meta"])
            txn.delete(_PROBE, db=self.db["meta"])

        try:
            self.write(work)
        except errors.StorageFault as fault:
            return fault
        return None

    def fault_of(self, exc: BaseException) -> errors.StorageFault | None:
        """The fault of the machine `exc` is, or None if it is none. LMDB
        reports a full map as MapFullError, ENOSPC as DiskError, and a short
        write or a failed fsync at commit as EIO, which py-lmdb raises as its
        plain Error (it has no class for EIO); its answers to tempo's own
        misuse (`_MISUSE`) and a panicked environment (`_FATAL`) are none.
        An OSError is one when its errno says
        the disk is full or failing (a snapshot file's write)."""
        if isinstance(exc, lmdb.MapFullError):
            map_bytes = self.env.info()["map_size"]
            return errors.StorageFault(f"the data file is full: its map of {map_bytes >> 20} MiB", map_full=True)
        if isinstance(exc, _MISUSE + _FATAL):
            return None
        if not isinstance(exc, lmdb.Error | MemoryError) and not (
            isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS
        ):
            return None
        if self.free_bytes() < limits.storage_probe_bytes:
            return errors.StorageFault("the disk is full")
        return errors.StorageFault(f"the store could not write: {exc}")

    # -- the state machine -------------------------------------------------

    def applied_index(self) -> int:
        with self.env.begin() as txn:
            raw = txn.get(_APPLIED_INDEX, db=self.db["meta"])
        return 0 if raw is None else _U64.unpack(raw)[0]

    def stamp_ms(self) -> int:
        """The highest command stamp applied (UNIX ms; 0 for none): a node's
        clock starts from it (clock.py)."""
        with self.env.begin() as txn:
            raw = txn.get(_STAMP, db=self.db["meta"])
        return 0 if raw is None else _U64.unpack(raw)[0]

    def apply_entry(self, index: int, data: bytes) -> tuple[list[Outcome], Changes]:
        """Applies the log entry at `index`; an entry at or below the applied
        index was applied before (a replay after a crash) and changes nothing."""
        return self.write(lambda txn: self.apply_in(txn, index, data))

    def write(self, work: Callable[["lmdb.Transaction[bytes]"], T]) -> T:
        """Runs `work` in one write transaction (one fsync at its end): the
        replica persists raft state and applies entries together this way.

        A failure of the machine (an I/O error, the disk or the map full, out
        of memory) raises `errors.StorageFault` with the transaction aborted:
        nothing of the work is stored, and an entry it applied is not
        applied (the caller applies it again, never skips it). A command's
        own faults never get here: apply answers them as outcomes."""
        txn = self.env.begin(write=True)
        try:
            result = work(txn)
        except BaseException as exc:
            txn.abort()
            fault = self.fault_of(exc)
            if fault is None:
                raise  # tempo's own mistake, not the machine's: it stops the node
            raise fault from exc
        started = time.perf_counter()
        try:
            # A commit that fails aborts the transaction; the meta page is
            # written last, so the store is as the last commit left it.
            txn.commit()
        except (lmdb.Error, MemoryError) as exc:
            fault = self.fault_of(exc)
            if fault is None:
                raise
            raise fault from exc
        self.txn_commit_seconds.observe(time.perf_counter() - started)
        return result

    def apply_commands(self, index: int, commands: list[Command]) -> tuple[list[Outcome], Changes]:
        """`apply_entry` of the entry that holds `commands`, for a caller
        that made them and keeps no log: a node alone. Its group commit
        would otherwise encode every batch only for apply to decode it
        again, about a tenth of the server's CPU per created job. The tables
        end as `apply_entry(index, encode_entry(commands))` leaves them
        (tests/engine/test_create_batch.py), since commands hold only
        what their encoding holds."""
        return self.write(lambda txn: self.apply_decoded(txn, index, commands))

    def apply_in(self, txn: "lmdb.Transaction[bytes]", index: int, data: bytes) -> tuple[list[Outcome], Changes]:
        """`apply_entry` inside the caller's write transaction. Empty `data`
        (a raft no-op or configuration entry) only records the index."""
        return self.apply_decoded(txn, index, decode_entry(data) if data else [])

    def apply_decoded(
        self, txn: "lmdb.Transaction[bytes]", index: int, commands: list[Command]
    ) -> tuple[list[Outcome], Changes]:
        raw = txn.get(_APPLIED_INDEX, db=self.db["meta"])
        applied = 0 if raw is None else _U64.unpack(raw)[0]
        tx = _Tx(txn, self.db, self.buckets)
        if index <= applied:
            return [errors.Conflict("already applied")] * len(commands), tx.changes
        assert index == applied + 1, f"entry {index} after applied {applied}: a gap"
        raw = txn.get(_STAMP, db=self.db["meta"])
        stored_ms = stamp_ms = 0 if raw is None else _U64.unpack(raw)[0]
        outcomes = []
        for command in commands:
            outcomes.append(tx.apply(command))
            # The highest stamp, carried in the tables: the floor of the
            # clock of whichever node leads next (clock.py).
            at_ms = getattr(command, "at_ms", 0)
            if at_ms > stamp_ms:
                stamp_ms = at_ms
        tx.flush()
        txn.put(_APPLIED_INDEX, _U64.pack(index), db=self.db["meta"])
        if stamp_ms != stored_ms:
            txn.put(_STAMP, _U64.pack(stamp_ms), db=self.db["meta"])
        tx.changes.stamp_ms = stamp_ms
        return outcomes, tx.changes

    # -- snapshots (a cluster's log compaction) -------------------------------

    def snapshot_data(self) -> tuple[int, bytes]:
        """Every table at one applied index, from one read transaction, so the
        copy is consistent whatever is applied meanwhile: (index, data)."""
        with self._remap, self.env.begin() as txn:
            raw = txn.get(_APPLIED_INDEX, db=self.db["meta"])
            index = 0 if raw is None else _U64.unpack(raw)[0]
            tables = [[name, list(txn.cursor(db=db))] for name, db in self.db.items()]
        return index, _enc.encode(tables)

    def restore_in(self, txn: "lmdb.Transaction[bytes]", index: int, data: bytes) -> None:
        """Replaces every table with a snapshot's copy, inside the caller's
        transaction: a crash leaves the old state or the new, never a mix."""
        tables = _snapshot_dec.decode(data) if data else []
        unknown = {name for name, _ in tables} - set(self.db)
        if unknown:
            raise records.Corrupt(f"a snapshot names tables this node does not have: {sorted(unknown)}")
        for db in self.db.values():
            txn.drop(db, delete=False)
        for name, rows in tables:
            db = self.db[name]
            cur = txn.cursor(db=db)
            cur.putmulti(rows, append=True)
        txn.put(_APPLIED_INDEX, _U64.pack(index), db=self.db["meta"])
        if txn.get(_RUN_INDEX, db=self.db["meta"]) is None:
            _build_run_index(txn, self.db, self.buckets)  # a snapshot of a version without it
        if txn.get(_LABEL_INDEX, db=self.db["meta"]) is None:
            _build_label_index(txn, self.db)
        if txn.get(_HELD_INDEX, db=self.db["meta"]) is None:
            _build_held_index(txn, self.db)

    def digest(self) -> tuple[int, str]:
        """(applied index, SHA-256 of every table at it): equal on replicas
        that applied the same entries."""
        sha = hashlib.sha256()
        with self._remap, self.env.begin() as txn:
            raw = txn.get(_APPLIED_INDEX, db=self.db["meta"])
            index = 0 if raw is None else _U64.unpack(raw)[0]
            for name, db in self.db.items():
                sha.update(name.encode() + b"\0")
                for key, value in txn.cursor(db=db):
                    sha.update(_U64.pack(len(key)) + key + _U64.pack(len(value)) + value)
        return index, sha.hexdigest()

    # -- reads ---------------------------------------------------------------

    def get_job(self, owner: str, job_id: str) -> Job:
        with self.env.begin() as txn:
            tx = _Tx(txn, self.db, self.buckets)
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
            tx = _Tx(txn, self.db, self.buckets)
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
                    yield _present(txn.get(key[len(prefix) :], db=jobs_db))
                    found = by_owner.prev()

            return _page_of_jobs(tx, rows(), limit, match)

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
            tx = _Tx(txn, self.db, self.buckets)
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
            tx = _Tx(txn, self.db, self.buckets)
            db, jobs_db = self.db["jobs_by_label"], self.db["jobs"]
            sources = [
                _all_labelled(txn, db, [keys.label_prefix(owner, name, value) for name, value in wanted.items()], upper)
                for owner in owners
                if keys.owner_fits(owner)
            ]
            if not sources:
                return [], None
            found = sources[0] if len(sources) == 1 else heapq.merge(*sources, reverse=True)
            rows = (_present(txn.get(job_key, db=jobs_db)) for job_key in found)
            return _page_of_jobs(tx, rows, limit, carries)

    def get_run(self, owner: str, run_id_text: str) -> tuple[Run, Job]:
        parsed = ids.parse_run_id(run_id_text)
        with self.env.begin() as txn:
            tx = _Tx(txn, self.db, self.buckets)
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
            tx = _Tx(txn, self.db, self.buckets)
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
                    found[job_id] = _outcome_dec.decode(raw)
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
            tx = _Tx(txn, self.db, self.buckets)
            owners = [owner] if owner is not None else _owners_of_jobs(txn, self.db["jobs_by_owner"])
            sources = _status_sources(tx, owners, codes, upper, lower_ms)
            last = None
            for tail, held_in in heapq.merge(*sources, key=_first, reverse=True):
                if tail == last:
                    continue  # one row per run, even if two places held one
                last = tail
                if len(runs) == limit:
                    return runs, tails[-1]
                job_id, nominal_ms = _slot_of_tail(tail)
                raw = None if held_in is None else txn.get(_HIST_RUN + keys.by_job_key(job_id, nominal_ms), db=held_in)
                run = _run_dec.decode(raw) if raw is not None else tx.run_anywhere(job_id, nominal_ms)
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
            if not cur.set_range(_MINUTE.pack(minute_lo)):
                return found
            for key in cur.iternext(keys=True, values=False):
                minute = _MINUTE.unpack(key)[0]
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
                run = _run_dec.decode(value)
                assert run.due_ms == keys.due_of(key), "a run's row is at its due time"
                if run.status not in _OPEN:
                    continue
                job = jobs.get(run.job_id)
                if job is None:
                    job = jobs[run.job_id] = _job_dec.decode(_present(txn.get(keys.job_key(run.job_id), db=jobs_db)))
                out.append((key, run, job))
        return out

    def get_job_any(self, job_id: str) -> Job | None:
        """The job whoever owns it: for the dispatcher, which serves all owners."""
        with self.env.begin() as txn:
            raw = txn.get(keys.job_key(job_id), db=self.db["jobs"]) if ids.is_job_id(job_id) else None
        return None if raw is None else _job_dec.decode(raw)

    def get_run_any(self, job_id: str, nominal_ms: int) -> Run | None:
        with self.env.begin() as txn:
            return _Tx(txn, self.db, self.buckets).run_anywhere(job_id, nominal_ms)

    def claim_key_entry(self, owner: str, key: str, now_ms: int) -> ClaimKeyEntry | None:
        """What the claim key took, if it is recorded and not expired by
        `now_ms` (UNIX ms); None otherwise."""
        if not keys.owner_fits(owner) or not keys.claim_key_fits(owner, key):
            return None
        with self.env.begin() as txn:
            raw = txn.get(keys.claim_key(owner, key), db=self.db["claim_keys"])
        if raw is None:
            return None
        entry = _claimkey_dec.decode(raw)
        return entry if entry.expires_ms > now_ms else None

    def list_events(self, owner: str, after_seq: int, limit: int) -> list[tuple[int, Event]]:
        """The owner's events after `after_seq`, oldest first: merged by
        sequence from the history buckets (and the `events` table, which
        holds those written before events moved to the buckets)."""
        out: list[tuple[int, Event]] = []
        with self.env.begin() as txn:
            for seq, raw in _Tx(txn, self.db, self.buckets).events_after(owner, after_seq):
                if len(out) >= limit:
                    break
                out.append((seq, _event_dec.decode(raw)))
        return out

    def event_seq(self) -> int:
        """The sequence of the last event written (0: none yet)."""
        with self.env.begin() as txn:
            raw = txn.get(_EVENT_SEQ, db=self.db["meta"])
        return 0 if raw is None else _U64.unpack(raw)[0]

    def notify_cursor(self) -> int | None:
        """The notifier's committed cursor (`NotifyCursor`); None before the first."""
        with self.env.begin() as txn:
            raw = txn.get(_NOTIFY_CURSOR, db=self.db["meta"])
        return None if raw is None else _U64.unpack(raw)[0]

    def events_of_all(self, after_seq: int, limit: int) -> list[tuple[str, int, Event]]:
        """(owner, sequence, event) of every owner's events after `after_seq`,
        oldest first, at most `limit`: for the notifier, which serves all
        owners. Each owner's first `limit` are read and merged, so the cost
        grows with the owners that have events, not with the events kept."""
        found: list[tuple[str, int, bytes]] = []
        with self.env.begin() as txn:
            tx = _Tx(txn, self.db, self.buckets)
            for owner in tx.event_owners():
                for n, (seq, raw) in enumerate(tx.events_after(owner, after_seq)):
                    if n >= limit:
                        break
                    found.append((owner, seq, raw))
            found.sort(key=_second)
            return [(owner, seq, _event_dec.decode(raw)) for owner, seq, raw in found[:limit]]

    def history_days(self) -> list[int]:
        """The days (since the epoch, UTC) of the history buckets in use, oldest first."""
        with self.env.begin() as txn:
            return sorted(_DAY.unpack(v)[0] for v in txn.cursor(db=self.db["history_days"]).iternext(keys=False))


class _NewRows:
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

    def put(self, tx: "_Tx") -> None:
        """Puts what is gathered and empties the lists. Every key is new (it
        holds the job's fresh ID), so each row adds one: a job ID drawn
        twice stops the node here."""
        for rows, db in (
            (self.jobs, tx.jobs), (self.runs, tx.runs), (self.by_job, tx.by_job), (self.by_owner, tx.by_owner),
            (self.by_status, tx.by_status), (self.by_label, tx.by_label),
        ):
            if rows:
                with tx.txn.cursor(db=db) as cursor:
                    consumed, added = cursor.putmulti(rows, overwrite=False)
                assert consumed == added == len(rows), "a new job's row existed"
                rows.clear()
        # Each event goes to the bucket of its day: one `putmulti` a day
        # (a command's jobs share its stamp, so one in all).
        days: dict[int, tuple[int, list[tuple[bytes, bytes]]]] = {}
        for at_ms, row in self.events:
            days.setdefault(at_ms // limits.day_ms, (at_ms, []))[1].append(row)
        for at_ms, day_rows in days.values():
            consumed, added = tx.history_cursor(at_ms, _HIST_EVENT).putmulti(day_rows, overwrite=False)
            assert consumed == added == len(day_rows), "an event's sequence number was taken"
        self.events.clear()


class _Tx:
    """One transaction's view of the tables, with the apply functions."""

    __slots__ = (
        "_bucket_of_day", "_by_job_cur", "_by_status_cur", "_held_cur", "_hist_curs", "_history", "_jobs_cur", "_outcomes_cur",
        "_owners", "_runs_cur", "buckets", "by_job", "by_label", "by_owner", "by_status",
        "changes", "claim_keys", "event_seq", "events", "held", "hist_days", "jobs", "members", "meta",
        "open", "open_deltas", "outcome_counts", "outcomes", "reqkeys", "runs", "txn",
    )

    def __init__(self, txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database], buckets: list[lmdb._Database]):
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
        self._owners: dict[str, str] = {}  # job ID -> owner, read once per transaction
        # Within one transaction: the buckets in use, and the bucket of each
        # day a run finished in, looked up once.
        self._history: list[tuple[int, lmdb._Database]] | None = None
        self._bucket_of_day: dict[int, lmdb._Database] = {}
        self.changes = Changes([], [], [], set())
        # Open-run counts per due minute and the event sequence change many
        # times in one entry; they are written once, in `flush`.
        self.open_deltas: dict[int, int] = {}
        self.event_seq: int | None = None
        # Job outcomes (by job key) that runs finishing in this transaction
        # counted into, read once each and written once, in `flush`.
        self.outcome_counts: dict[bytes, JobOutcome] = {}
        # One cursor a table on the claim and result paths, made when first
        # used: a batch's runs sit near each other, and LMDB finds a key on
        # the cursor's page without a walk from the root.
        self._runs_cur: lmdb.Cursor[bytes] | None = None
        self._by_job_cur: lmdb.Cursor[bytes] | None = None
        self._by_status_cur: lmdb.Cursor[bytes] | None = None
        self._held_cur: lmdb.Cursor[bytes] | None = None
        self._jobs_cur: lmdb.Cursor[bytes] | None = None
        self._outcomes_cur: lmdb.Cursor[bytes] | None = None
        # History: one cursor per (day, part of the bucket: runs, their
        # status rows, events); forgotten when a bucket is dropped.
        self._hist_curs: dict[tuple[int, bytes], lmdb.Cursor[bytes]] = {}

    def runs_cursor(self) -> "lmdb.Cursor[bytes]":
        if self._runs_cur is None:
            self._runs_cur = self.txn.cursor(db=self.runs)
        return self._runs_cur

    def by_job_cursor(self) -> "lmdb.Cursor[bytes]":
        if self._by_job_cur is None:
            self._by_job_cur = self.txn.cursor(db=self.by_job)
        return self._by_job_cur

    def by_status_cursor(self) -> "lmdb.Cursor[bytes]":
        if self._by_status_cur is None:
            self._by_status_cur = self.txn.cursor(db=self.by_status)
        return self._by_status_cur

    def held_cursor(self) -> "lmdb.Cursor[bytes]":
        if self._held_cur is None:
            self._held_cur = self.txn.cursor(db=self.held)
        return self._held_cur

    def outcomes_cursor(self) -> "lmdb.Cursor[bytes]":
        if self._outcomes_cur is None:
            self._outcomes_cur = self.txn.cursor(db=self.outcomes)
        return self._outcomes_cur

    def history_cursor(self, at_ms: int, part: bytes) -> "lmdb.Cursor[bytes]":
        """A cursor on the history bucket of the day of `at_ms` (`bucket_for`),
        for the rows whose keys start with `part`."""
        found = (at_ms // limits.day_ms, part)
        cur = self._hist_curs.get(found)
        if cur is None:
            cur = self._hist_curs[found] = self.txn.cursor(db=self.bucket_for(at_ms))
        return cur

    def jobs_cursor(self) -> "lmdb.Cursor[bytes]":
        if self._jobs_cur is None:
            self._jobs_cur = self.txn.cursor(db=self.jobs)
        return self._jobs_cur

    # -- reads inside the transaction ----------------------------------------

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
        return None if runs_key is None else _run_dec.decode(_present(self.txn.get(runs_key, db=self.runs)))

    def slots_desc(self, job_id: str, lower_ms: int, upper_ms: int) -> Iterator[tuple[int, bytes]]:
        """(nominal ms, runs key) of the job's open runs in [lower, upper), newest first."""
        return _by_job_desc(self.txn.cursor(db=self.by_job), b"", job_id, lower_ms, upper_ms)

    def runs_desc(self, job_id: str, lower_ms: int, upper_ms: int) -> Iterator[Run]:
        """The job's runs in [lower, upper), open and finished, newest first."""
        live = ((nominal_ms, _present(self.txn.get(key, db=self.runs))) for nominal_ms, key in self.slots_desc(
            job_id, lower_ms, upper_ms
        ))
        sources = [live] + [
            _by_job_desc(self.txn.cursor(db=db), _HIST_RUN, job_id, lower_ms, upper_ms) for _, db in self.history()
        ]
        last_ms = None
        for nominal_ms, raw in heapq.merge(*sources, key=_first, reverse=True):
            if nominal_ms != last_ms:  # one row per run ID, even if two places held one
                last_ms = nominal_ms
                yield _run_dec.decode(raw)

    # -- history ---------------------------------------------------------------

    def history(self) -> list[tuple[int, lmdb._Database]]:
        """(day, bucket) of every history bucket in use, newest first."""
        if self._history is None:
            rows = [(_DAY.unpack(v)[0], self.buckets[_SLOT.unpack(k)[0]]) for k, v in self.txn.cursor(db=self.hist_days)]
            rows.sort(key=_first, reverse=True)
            self._history = rows
        return self._history

    def history_run(self, job_id: str, nominal_ms: int) -> tuple[lmdb._Database, Run] | None:
        """A finished run and its bucket; one lookup per bucket in use."""
        key = _HIST_RUN + keys.by_job_key(job_id, nominal_ms)
        for _, db in self.history():
            raw = self.txn.get(key, db=db)
            if raw is not None:
                return db, _run_dec.decode(raw)
        return None

    def run_anywhere(self, job_id: str, nominal_ms: int) -> Run | None:
        """A run whether open or finished (and not dropped yet)."""
        run = self.run_at_slot(job_id, nominal_ms)
        if run is None:
            found = self.history_run(job_id, nominal_ms)
            run = None if found is None else found[1]
        return run

    def slot_taken(self, job_id: str, nominal_ms: int) -> bool:
        return self.run_key_at_slot(job_id, nominal_ms) is not None or self.history_run(job_id, nominal_ms) is not None

    def events_after(self, owner: str, after_seq: int) -> Iterator[tuple[int, bytes]]:
        """(sequence, event) of the owner's events after `after_seq`, oldest first."""
        sources = [_events_from(self.txn.cursor(db=self.events), b"", owner, after_seq)] + [
            _events_from(self.txn.cursor(db=db), _HIST_EVENT, owner, after_seq) for _, db in self.history()
        ]
        return heapq.merge(*sources, key=_first)

    def event_owners(self) -> set[str]:
        """The owners with an event kept: one seek per owner and source."""
        owners: set[str] = set()
        sources = [(self.events, b"")] + [(db, _HIST_EVENT) for _, db in self.history()]
        for db, head in sources:
            cur = self.txn.cursor(db=db)
            found = cur.set_range(head)
            while found and cur.key().startswith(head):
                owner, _ = keys.parse_event_key(cur.key()[len(head) :])
                owners.add(owner)
                # The next owner's first key: past every key of this one.
                found = cur.set_range(head + owner.encode() + b"\x01")
        return owners

    def bucket_for(self, at_ms: int) -> lmdb._Database:
        """The history bucket of the day of `at_ms`, taken into use if new."""
        day = at_ms // limits.day_ms
        db = self._bucket_of_day.get(day)
        if db is not None:
            return db
        slot = day % limits.history_buckets
        key = _SLOT.pack(slot)
        raw = self.txn.get(key, db=self.hist_days)
        held = None if raw is None else _DAY.unpack(raw)[0]
        if held is None or held < day:
            if held is not None:
                # The slot holds a day at least `history_buckets` days older,
                # past any retention period (the leader's drop is late): it
                # goes now rather than mix with this day.
                self.txn.drop(self.buckets[slot], delete=False)
                self._hist_curs.clear()
            self.txn.put(key, _DAY.pack(day), db=self.hist_days)
            self._history = None
        # `held > day`: `at_ms` is that far behind a day stored already (a
        # clock set far back); the rows join that newer day's bucket.
        db = self._bucket_of_day[day] = self.buckets[slot]
        return db

    # -- writes ----------------------------------------------------------------

    def put_job(self, job: Job, job_key: bytes | None = None) -> None:
        """`job_key` is `keys.job_key(job.id)` when the caller has it."""
        self.jobs_cursor().put(keys.job_key(job.id) if job_key is None else job_key, _enc.encode(job))

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
            _must(self.txn.delete(old_key, db=self.runs), "a run moves from the row it had")
        self.txn.put(key, _enc.encode(run), db=self.runs)
        if old_key != key:
            self.txn.put(keys.by_job_key_of(job_key, run.nominal_ms), key, db=self.by_job)
        self._count_open(old_key if old_status in _OPEN else None, key if run.status in _OPEN else None)
        old_row = (old_status, keys.due_of(old_key)) if old_status in _OPEN and old_key is not None else None
        new_row = (run.status, run.due_ms) if run.status in _OPEN else None
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
        assert old_status in _OPEN and run.status in _OPEN
        assert keys.due_of(runs_key) == run.due_ms, "the due time is in the key"
        self.runs_cursor().put(runs_key, _enc.encode(run))
        if old_status != run.status:
            self._move_open_row(run, (old_status, run.due_ms), (run.status, run.due_ms), job, job_key=job_key)
        if old_status == "waiting" and run.status != "waiting":
            self.changes.left.append(runs_key)
        if run.status == "waiting" and old_status != "waiting":
            self.changes.woken.append((runs_key, run, None))
        if old_status == "claimed" and run.status != "claimed":
            self.changes.gone.append(runs_key)

    def drop_run(self, runs_key: bytes, run: Run, job: Job | None = None) -> None:
        _must(self.txn.delete(runs_key, db=self.runs), "a run dropped has its row")
        self._count_open(runs_key if run.status in _OPEN else None, None)
        if run.status in _OPEN:
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
        assert run.status in _FINISHED and old_status in _OPEN
        if run.buffered:
            # Cancelled while buffered (a pause, a cancel): it never fell
            # due, and is listed at when it ended, not at the far due time.
            run.buffered = False
            run.due_ms = at_ms
        if by_job_key is None:
            by_job_key = keys.by_job_key(run.job_id, run.nominal_ms)
        _delete_at(self.runs_cursor(), runs_key)
        _delete_at(self.by_job_cursor(), by_job_key)
        self.history_cursor(at_ms, _HIST_RUN).put(_HIST_RUN + by_job_key, _enc.encode(run))
        self._count_open(runs_key, None)
        owner = self._owner_of(run.job_id, job)
        job_key = by_job_key[: keys.JOB_KEY_BYTES]
        self._move_open_row(run, (old_status, keys.due_of(runs_key)), None, job, owner, job_key)
        status_key = keys.status_key_of(owner, keys.status_code(run.status), _index_ms(run), job_key, run.nominal_ms)
        self.history_cursor(at_ms, _HIST_STATUS).put(_HIST_STATUS + status_key, b"")
        self._count_outcome(job_key, run)
        if old_status == "waiting":
            self.changes.left.append(runs_key)
        else:
            self.changes.gone.append(runs_key)

    def _owner_of(self, job_id: str, job: Job | None) -> str:
        """The owner of a run's job: `job`'s when the caller has it at hand,
        else read once per transaction (a one-off's claim reads no job)."""
        if job is not None:
            return job.owner
        owner = self._owners.get(job_id)
        if owner is None:
            raw = self.jobs_cursor().get(keys.job_key(job_id))
            assert raw is not None, f"run of a missing job {job_id}"
            owner = self._owners[job_id] = _job_head_dec.decode(raw).owner
        return owner

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
            owner = self._owner_of(run.job_id, job)
        if job_key is None:
            job_key = keys.job_key(run.job_id)
        cur = self.by_status_cursor()
        if old is not None:
            old_key = keys.status_key_of(owner, keys.STATUS_CODE[old[0]], old[1], job_key, run.nominal_ms)
            _delete_at(cur, old_key, "an open run had no runs-by-status row")
        if new is not None:
            new_key = keys.status_key_of(owner, keys.STATUS_CODE[new[0]], new[1], job_key, run.nominal_ms)
            cur.put(new_key, b"")
        # The held-runs index, of jobs with an overlap policy only (a job
        # without one has no rows: `_hold_rows` when a patch changes that).
        # `run` is the new state; of the old one only (status, due) is
        # known, which tells whether it may have been held. A caller
        # without the job at hand is one whose run becomes held only for a
        # job without a policy (a one-off's claim).
        if job is not None and job.overlap is None:
            return
        if new is not None and job is not None and _is_held(run):
            self.held_cursor().put(keys.by_job_key_of(job_key, run.nominal_ms), b"")
        elif old is not None and _may_be_held(*old):
            held = self.held_cursor()
            if held.set_key(keys.by_job_key_of(job_key, run.nominal_ms)):
                held.delete()

    def _count_outcome(self, job_key: bytes, run: Run) -> None:
        """Counts a run that just finished into its job's outcome, kept in
        `outcome_counts` until `flush`: a job's outcome is read and written
        once a transaction however many of its runs finish in it."""
        outcome = self.outcome_counts.get(job_key)
        if outcome is None:
            raw = self.outcomes_cursor().get(job_key)
            outcome = self.outcome_counts[job_key] = JobOutcome() if raw is None else _outcome_dec.decode(raw)
        _add_to_outcome(outcome, run)

    def _uncount_cancelled(self, job_key: bytes) -> None:
        """A cancelled run of the job came back to waiting (a resume): it
        no longer counts in the job's `cancelled`, so a cancel after it
        counts it once."""
        outcome = self.outcome_counts.get(job_key)
        if outcome is None:
            raw = self.outcomes_cursor().get(job_key)
            assert raw is not None, "a cancelled run was counted"
            outcome = self.outcome_counts[job_key] = _outcome_dec.decode(raw)
        assert outcome.cancelled > 0, "a cancelled run was counted"
        outcome.cancelled -= 1

    def _count_open(self, old_key: bytes | None, new_key: bytes | None) -> None:
        old_minute = None if old_key is None else _MINUTE.unpack(old_key[:4])[0]
        new_minute = None if new_key is None else _MINUTE.unpack(new_key[:4])[0]
        if old_minute == new_minute:
            return
        if old_minute is not None:
            self._add_open(old_minute, -1)
        if new_minute is not None:
            self._add_open(new_minute, 1)

    def _add_open(self, minute: int, delta: int) -> None:
        self.open_deltas[minute] = self.open_deltas.get(minute, 0) + delta

    def flush(self) -> None:
        """Writes what the entry accumulated; called once, before the commit."""
        for minute, delta in self.open_deltas.items():
            if delta == 0:
                continue
            key = _MINUTE.pack(minute)
            raw = self.txn.get(key, db=self.open)
            count = (0 if raw is None else _U64.unpack(raw)[0]) + delta
            assert count >= 0, f"open runs of minute {minute} below zero"
            if count == 0:
                self.txn.delete(key, db=self.open)
            else:
                self.txn.put(key, _U64.pack(count), db=self.open)
        if self.event_seq is not None:
            self.txn.put(_EVENT_SEQ, _U64.pack(self.event_seq), db=self.meta)
        if self.outcome_counts:
            cur = self.outcomes_cursor()
            for job_key in sorted(self.outcome_counts):
                cur.put(job_key, _enc.encode(self.outcome_counts[job_key]))
            self.outcome_counts.clear()

    def append_event(self, owner: str, event: Event) -> None:
        self.history_cursor(event.at_ms, _HIST_EVENT).put(*self.event_row(owner, event))

    def event_row(self, owner: str, event: Event) -> tuple[bytes, bytes]:
        """The next event's key and value in its day's history bucket, its
        sequence number taken; the caller puts them (`append_event`, or
        `_NewRows.put` for a batch's `job.created`, in one `putmulti`)."""
        if self.event_seq is None:
            raw = self.txn.get(_EVENT_SEQ, db=self.meta)
            self.event_seq = 0 if raw is None else _U64.unpack(raw)[0]
        self.event_seq += 1
        self.changes.event_owners.add(owner)
        return _HIST_EVENT + keys.event_key(owner, self.event_seq), _enc.encode(event)

    # -- apply ---------------------------------------------------------------

    def apply(self, command: Command) -> Outcome:
        match command:
            case CreateJobs() | PauseJob() | ResumeJob() | DeleteJob() | TriggerJob():
                return self.apply_to_jobs(command)
            case ClaimRuns() | ReportResults() | ExpireLeases() | OverlapRuns():
                return self.apply_to_runs(command)
            case PatchJob():
                return self._fresh_outcome(self.patch_job(command))
            case CancelRun():
                return self.cancel_run(command)
            case SetMember():
                self.txn.put(command.node_id.encode(), command.url.encode(), db=self.members)
                self.changes.members = True
                return None
            case DropHistory():
                self.drop_history(command)
                return None
            case NotifyCursor():
                raw = self.txn.get(_NOTIFY_CURSOR, db=self.meta)
                if raw is None or _U64.unpack(raw)[0] < command.seq:
                    self.txn.put(_NOTIFY_CURSOR, _U64.pack(command.seq), db=self.meta)
                return None
            case BackfillJob():
                return self.backfill_job(command)
        raise AssertionError(f"unknown command {type(command).__name__}")

    def apply_to_jobs(self, command: CreateJobs | PauseJob | ResumeJob | DeleteJob | TriggerJob) -> Outcome:
        match command:
            case CreateJobs():
                return self.create_jobs(command.jobs)
            case PauseJob():
                return self._fresh_outcome(self.pause_job(command))
            case ResumeJob():
                return self._fresh_outcome(self.resume_job(command))
            case DeleteJob():
                return self.delete_job(command)
            case TriggerJob():
                return self.trigger_job(command)
        raise AssertionError(f"unknown job command {type(command).__name__}")

    def apply_to_runs(self, command: ClaimRuns | ReportResults | ExpireLeases | OverlapRuns) -> Outcome:
        match command:
            case OverlapRuns():
                return [self.overlap_due(command.at_ms, claim) for claim in command.runs]
            case ClaimRuns():
                if command.key is not None:
                    return self.claim_keyed(command, command.key)
                return self.claim_runs(command)
            case ReportResults():
                return [self.report_result(command, result) for result in command.results]
            case ExpireLeases():
                return [self.expire_lease(command.at_ms, expiry) for expiry in command.expiries]
        raise AssertionError(f"unknown run command {type(command).__name__}")

    def drop_history(self, cmd: DropHistory) -> None:
        """Drops whole buckets: LMDB frees a database's pages walking its
        branch pages only (leaf pages too where values overflowed a page), so
        the cost does not grow with the rows in it."""
        for key, value in list(self.txn.cursor(db=self.hist_days)):
            if _DAY.unpack(value)[0] < cmd.before_day:
                self.txn.drop(self.buckets[_SLOT.unpack(key)[0]], delete=False)
                _must(self.txn.delete(key, db=self.hist_days), "a day read from the index has its row")
        self._history = None
        self._bucket_of_day.clear()
        self._hist_curs.clear()

    def _fresh_outcome(self, outcome: Job | errors.TempoError) -> Job | errors.TempoError:
        return self.fresh(outcome) if isinstance(outcome, Job) else outcome

    def create_jobs(self, items: list[NewJob]) -> list[Created | errors.TempoError]:
        """One command's new jobs. Their rows, their runs' rows and the two
        indexes are gathered and put per table with `putmulti` at the end,
        one call rather than four per job. A request key naming a job of
        this command flushes them first, as its answer reads them. The
        tables end as with one `put` a row."""
        rows = _NewRows()
        outcomes = [self.create_job(item, rows) for item in items]
        rows.put(self)
        return outcomes

    def create_job(self, item: NewJob, rows: _NewRows) -> Created | errors.TempoError:
        job = item.job
        fault = _key_fault(job)
        if fault is not None:
            return fault
        if job.request_key is not None:
            req_key = keys.request_key(job.owner, job.request_key)
            raw = self.txn.get(req_key, db=self.reqkeys)
            if raw is not None:
                entry = _reqkey_dec.decode(raw)
                if entry.body_hash != item.body_hash:
                    return errors.RequestKeyReused(
                        f"request key {job.request_key!r} was used for another body"
                    )
                rows.put(self)
                existing = self.fresh(self.job(job.owner, entry.job_id))
                assert existing is not None, "a request key outlived its job"
                return Created(existing, new=False)
            self.txn.put(req_key, _enc.encode(RequestKeyEntry(job.id, item.body_hash)), db=self.reqkeys)
        key = keys.job_key(job.id)
        rows.jobs.append((key, _enc.encode(job)))
        if item.first_due_ms is not None:
            # `put_run` of a new waiting run (no old row), spelled out.
            assert job.slot_ms is not None
            run = Run(job.id, job.slot_ms, item.first_due_ms, "waiting")
            runs_key, by_job_key = keys.new_run_keys(key, job.id, job.slot_ms, item.first_due_ms)
            rows.runs.append((runs_key, _enc.encode(run)))
            rows.by_job.append((by_job_key, runs_key))
            rows.by_status.append((_status_key_of(job.owner, run), b""))
            minute = item.first_due_ms // limits.minute_ms
            self.open_deltas[minute] = self.open_deltas.get(minute, 0) + 1
            self.changes.woken.append((runs_key, run, job))
        rows.by_owner.append((keys.owner_prefix(job.owner) + key, b""))
        if job.labels:
            rows.by_label += [(k, b"") for k in _label_keys(job, key)]
        # `created_at_ms` is the command's stamp (docs/api.md "Events").
        event = Event("job.created", job.created_at_ms, job.id, None, {"version": job.version})
        rows.events.append((event.at_ms, self.event_row(job.owner, event)))
        return Created(job, new=True)

    def pause_job(self, cmd: PauseJob) -> Job | errors.TempoError:
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        if job.state != "active":
            return job  # paused already, or completed
        # Every waiting run of the job: its scheduled one, retries of earlier
        # runs and triggered runs alike, so a paused job runs nothing it did
        # not run already (a trigger after the pause still runs).
        waiting: list[tuple[bytes, Run]] = []
        for _, runs_key in self.slots_desc(job.id, 0, 1 << 63):
            run = _run_dec.decode(_present(self.txn.get(runs_key, db=self.runs)))
            if run.status == "waiting":
                waiting.append((runs_key, run))
        for runs_key, run in waiting:
            run.status = "cancelled"
            self.finish_run(run, runs_key, "waiting", cmd.at_ms, job=job)
            _mark_taken(job, run.nominal_ms)
        job.state = "paused"
        job.next_run_at_ms = None
        by_owner = cmd.owner if cmd.by_owner is None else cmd.by_owner
        job.paused = Paused(cmd.at_ms, by_owner, cmd.by_role, cmd.note)
        self.put_job(job)
        detail = {"version": job.version, "note": cmd.note, "by": {"owner": by_owner, "role": cmd.by_role}}
        self.append_event(job.owner, Event("job.paused", cmd.at_ms, job.id, None, detail))
        return job

    def resume_job(self, cmd: ResumeJob) -> Job | errors.TempoError:
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        if job.state != "paused":
            return job
        job.state = "active"
        job.paused = None
        job.next_run_at_ms = None
        self.append_event(job.owner, Event("job.resumed", cmd.at_ms, job.id, None, {"version": job.version}))
        for missed in cmd.missed:
            self.record_missed(job, missed, cmd.at_ms)
        # An `all` catch-up under way at the pause ends with it: the slots it
        # did not run yet passed while paused.
        job.catchup_until_ms = job.catchup_decided_ms = None
        if job.schedule.repeating:
            slot_ms, due_ms = cmd.slot_ms, cmd.due_ms
            if slot_ms is not None and _past_end(job, slot_ms):
                slot_ms = due_ms = None
            if slot_ms is None and self._last_run_open(job):
                # The last run goes on: its end completes the job (`_settle`).
                self.put_job(job)
                return job
        else:
            slot_ms, due_ms = job.slot_ms, cmd.due_ms
        if slot_ms is None:
            self._complete(job, cmd.at_ms)  # the schedule has no occurrence left
            return job
        job.next_run_at_ms = self._wake_slot(job, slot_ms, due_ms, cmd.at_ms)
        job.slot_ms = slot_ms if job.schedule.repeating else job.slot_ms
        self.put_job(job)
        return job

    def _last_run_open(self, job: Job) -> bool:
        """Whether the run of the job's slot is claimed still: a repeating
        job whose schedule planned nothing after it (its last run)."""
        found = None if job.slot_ms is None else self._slot_run(job.id, job.slot_ms)
        return found is not None and found[1].status == "claimed"

    def _complete(self, job: Job, at_ms: int, run: Run | None = None) -> None:
        """A job with nothing left to run is `completed`, with its event.
        A one-off's detail names how its run ended; a repeating job's names
        why its schedule ended (`_end_reason`), and the status of its last
        run when that run's end completed it."""
        job.state = "completed"
        job.paused = None
        job.next_run_at_ms = None
        self.put_job(job)
        detail: dict[str, object] = {} if run is None else {"status": run.status}
        if job.schedule.repeating:
            detail["reason"] = _end_reason(job)
        run_id = None if run is None else ids.run_id(job.id, run.nominal_ms)
        self.append_event(job.owner, Event("job.completed", at_ms, job.id, run_id, detail))

    def _wake_slot(self, job: Job, slot_ms: int, due_ms: int | None, at_ms: int) -> int | None:
        """Makes the run of `slot_ms` waiting: the one pause cancelled, or a new
        one. Answers its due time, or None when the slot's run is past waiting
        (claimed before the pause, or finished)."""
        runs_key = self.run_key_at_slot(job.id, slot_ms)
        if runs_key is None:
            held = self.history_run(job.id, slot_ms)
            if held is not None:
                return self._revive(job, held[0], held[1], at_ms)
            # A new run, or a one-off's whose cancelled run was dropped with
            # its history bucket (an entry from before one-offs carried
            # `due_ms` gets the due time resume gives: at once if past).
            due_ms = max(slot_ms, at_ms) if due_ms is None else due_ms
            self.put_run(Run(job.id, slot_ms, due_ms, "waiting"), job=job)
            return due_ms
        run = _run_dec.decode(_present(self.txn.get(runs_key, db=self.runs)))
        if run.status != "cancelled":
            self._adopt(job, run, runs_key)
            return run.due_ms if run.status == "waiting" else None
        run.status = "waiting"
        run.due_ms = max(run.due_ms, at_ms)
        run.triggered = run.backfill = False  # the slot's run now, as `_revive` makes it
        if run.buffered:  # a fresh wait: the policy decides on it again when it falls due
            run.buffered = False
            run.due_ms = at_ms
        self.put_run(run, runs_key, "cancelled", job)
        return run.due_ms

    def _adopt(self, job: Job, run: Run, runs_key: bytes) -> None:
        """An open run at the slot the job's schedule is planted on is that
        slot's run: one a trigger (or a backfill) made on the very
        millisecond that a one-off's `at` was moved to, as one slot never
        has two runs. Its end then ends the one-off."""
        if (run.triggered or run.backfill) and run.status in _OPEN:
            if run.backfill and run.status == "claimed" and job.overlap is not None:  # now a run its policy looks at
                self.held_cursor().put(keys.by_job_key(job.id, run.nominal_ms), b"")
            run.triggered = run.backfill = False
            self.put_run_in_place(run, runs_key, run.status, job)

    def _revive(
        self, job: Job, bucket: lmdb._Database, run: Run, at_ms: int, due_ms: int | None = None
    ) -> int | None:
        """A finished run of the slot a resume or a re-plan wakes: the run a
        pause or a patch cancelled comes back from its history bucket as
        waiting (due at `due_ms`, else when it was due, not before
        `at_ms`). One its owner cancelled stays, unless the job is a
        one-off (a patch gave it that `at` again)."""
        if run.status != "cancelled" or (run.owner_cancelled and job.schedule.repeating):
            return None
        _must(self.txn.delete(_HIST_RUN + keys.by_job_key(run.job_id, run.nominal_ms), db=bucket),
              "a cancelled run in history has its row")
        _must(self.txn.delete(_HIST_STATUS + _status_key_of(job.owner, run), db=bucket),
              "a cancelled run in history has its status row")
        self._uncount_cancelled(keys.job_key(job.id))
        run.status = "waiting"
        run.owner_cancelled = False
        run.finished_ms = None
        # The slot's run now, whoever made it (a one-off's `at` moved onto
        # the millisecond of a triggered run a pause cancelled).
        run.triggered = run.backfill = False
        run.due_ms = max(run.due_ms, at_ms) if due_ms is None else due_ms
        if run.buffered:  # a fresh wait: the policy decides on it again when it falls due
            run.buffered = False
            run.due_ms = at_ms
        self.put_run(run, job=job)
        return run.due_ms

    def _schedule_at(self, job: Job, slot_ms: int, due_ms: int, at_ms: int) -> int | None:
        """The run of the job's next slot, which a claim or a cancel hands
        the schedule on to: a new waiting run, due at `due_ms`; or the run a
        pause or a patch cancelled there, waiting again. A slot that holds
        another run keeps it (the node that made the command stepped over
        such slots; it holds one only when the command raced a change).
        Answers the scheduled run's due time, None when none waits. Open
        runs only, unless the slot is at or before `taken_until_ms`: the
        claim of a slot run reads no history."""
        runs_key = self.run_key_at_slot(job.id, slot_ms)
        if runs_key is not None:
            run = _run_dec.decode(_present(self.txn.get(runs_key, db=self.runs)))
            return run.due_ms if run.status == "waiting" and not run.triggered else None
        held = None
        if job.taken_until_ms is not None and slot_ms <= job.taken_until_ms:
            held = self.history_run(job.id, slot_ms)
        if held is None:
            self.put_run(Run(job.id, slot_ms, due_ms, "waiting"), job=job)
            return due_ms
        return self._revive(job, held[0], held[1], at_ms, due_ms)

    def patch_job(self, cmd: PatchJob) -> Job | errors.TempoError:
        """A job changed in place (docs/semantics.md "Changing a job"). Runs
        that are claimed go on as they are; every waiting run is handed to
        the dispatcher again with the new job (its target may have moved);
        with `replan`, the waiting run of the job's schedule slot moves to
        the new slot (cancelled, in history, when the slot changes)."""
        old = self.job(cmd.owner, cmd.job_id)
        if old is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        if old.version != cmd.base_version:
            return errors.VersionMismatch(f"job {old.id} is at version {old.version}, not {cmd.base_version}")
        new = cmd.job
        # What the patch may not change comes from the stored job.
        job = msgspec.structs.replace(
            old, name=new.name, target=new.target, payload=new.payload, schedule=new.schedule,
            max_attempts=new.max_attempts, backoff_s=new.backoff_s, lease_s=new.lease_s, jitter_s=new.jitter_s,
            catchup=new.catchup, version=old.version + 1, labels=new.labels,
            notify=new.notify if cmd.sets_notify else old.notify, timeout_s=new.timeout_s, overlap=new.overlap,
        )
        if old.labels != job.labels:
            self._relabel(old, job)
        if cmd.replan:
            # A catch-up under way was decided on the old schedule's slots.
            job.catchup_until_ms = job.catchup_decided_ms = None
            self._replan(old, job, cmd)
        self._repolicy(old, job, cmd.at_ms)
        fed = {runs_key for runs_key, _, with_job in self.changes.woken if with_job is job}
        kept = RetryKept(old.max_attempts, old.backoff_s)
        waiting: list[tuple[bytes, Run]] = []
        for _, runs_key in self.slots_desc(job.id, 0, 1 << 63):
            run = _run_dec.decode(_present(self.txn.get(runs_key, db=self.runs)))
            if run.status == "waiting" and runs_key not in fed:
                waiting.append((runs_key, run))
            elif run.status == "claimed" and run.retry_kept is None and kept != RetryKept(job.max_attempts, job.backoff_s):
                run.retry_kept = kept  # the attempt goes on under the policy it was claimed with
                self.put_run_in_place(run, runs_key, "claimed", job)
        for runs_key, run in waiting:
            self.changes.left.append(runs_key)
            self.changes.woken.append((runs_key, run, job))
        self.put_job(job)
        detail = {"old_version": old.version, "new_version": job.version, "changed": _changed_fields(old, job)}
        self.append_event(job.owner, Event("job.updated", cmd.at_ms, job.id, None, detail))
        return job

    def _relabel(self, old: Job, job: Job) -> None:
        """Moves the job's rows of the jobs-by-label index from `old`'s labels to `job`'s."""
        job_key = keys.job_key(job.id)
        before, after = set(_label_keys(old, job_key)), set(_label_keys(job, job_key))
        for key in sorted(before - after):
            _must(self.txn.delete(key, db=self.by_label), "a labelled job had its index row")
        for key in sorted(after - before):
            self.txn.put(key, b"", db=self.by_label)

    def _replan(self, old: Job, job: Job, cmd: PatchJob) -> None:
        """Moves the waiting run of `old`'s schedule slot to the command's
        slot: a paused job only remembers a one-off's new slot; a completed
        job becomes active when the new slot lies after the command."""
        if job.state == "paused":
            # A paused job remembers a one-off's new slot; and a one-off's
            # that became repeating moves off its one slot, so that slot's
            # run ending (it was claimed) does not complete the job: its
            # resume plans the schedule's slots.
            if (not job.schedule.repeating or not old.schedule.repeating) and cmd.slot_ms is not None:
                job.slot_ms = cmd.slot_ms
            return
        # An end condition the patch reached leaves nothing to plan
        # (docs/semantics.md "End conditions"): decided here, from the
        # replicated count of runs, not by the node that made the command.
        ended = job.schedule.repeating and (cmd.slot_ms is None or _past_end(job, cmd.slot_ms))
        if job.state == "completed":
            if ended or cmd.slot_ms is None or cmd.slot_ms <= cmd.at_ms:
                return
            job.state = "active"
        elif old.slot_ms is not None and (old.slot_ms != cmd.slot_ms or ended):
            self._cancel_slot(job, old.slot_ms, cmd.at_ms)
        if ended:
            job.slot_ms = cmd.slot_ms
            self._complete(job, cmd.at_ms)
            return
        self._plant(job, cmd)

    def _plant(self, job: Job, cmd: PatchJob) -> None:
        """The job's scheduled waiting run at the command's slot: a new one,
        or the one waiting there already (due anew unless it is a retry);
        none when a run of that slot is claimed or finished."""
        job.slot_ms = cmd.slot_ms
        job.next_run_at_ms = None
        if cmd.slot_ms is None:
            job.state = "completed"  # no occurrence left
            return
        assert cmd.due_ms is not None
        found = self._slot_run(job.id, cmd.slot_ms)
        if found is None:
            # A `missed` row at the slot is history of slots that got no
            # run, not a run: the slot's run takes its place, as a
            # backfill's does.
            self._drop_missed_row(job, cmd.slot_ms)
            held = self.history_run(job.id, cmd.slot_ms)
            if held is None:
                self.put_run(Run(job.id, cmd.slot_ms, cmd.due_ms, "waiting"), job=job)
                job.next_run_at_ms = cmd.due_ms
            else:
                # The run an earlier re-plan (or a pause) cancelled at this
                # slot waits again: one slot never has two runs.
                job.next_run_at_ms = self._revive(job, held[0], held[1], cmd.at_ms, cmd.due_ms)
            return
        runs_key, run = found
        self._adopt(job, run, runs_key)
        if run.status == "waiting":
            if run.attempt == 0 and not run.buffered:  # a buffered run waits for its release
                run.due_ms = cmd.due_ms
                self.put_run(run, runs_key, "waiting", job)
            job.next_run_at_ms = run.due_ms

    def _cancel_slot(self, job: Job, slot_ms: int, at_ms: int) -> None:
        """The scheduled run of `slot_ms` is cancelled if it waits (into
        history, as a pause leaves it); a claimed one goes on."""
        found = self._slot_run(job.id, slot_ms)
        if found is not None and found[1].status == "waiting" and not found[1].triggered:
            runs_key, run = found
            run.status = "cancelled"
            run.finished_ms = at_ms
            self.finish_run(run, runs_key, "waiting", at_ms, job=job)
            _mark_taken(job, slot_ms)

    def delete_job(self, cmd: DeleteJob) -> errors.TempoError | None:
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        by_job = self.txn.cursor(db=self.by_job)
        prefix = keys.job_key(job.id)
        found = by_job.set_range(prefix)
        while found and by_job.key().startswith(prefix):
            runs_key = by_job.value()
            self.drop_run(runs_key, _run_dec.decode(_present(self.txn.get(runs_key, db=self.runs))), job)
            found = by_job.delete()
        head = _HIST_RUN + prefix
        for _, db in self.history():
            cur = self.txn.cursor(db=db)
            found = cur.set_range(head)
            while found and cur.key().startswith(head):
                held = _run_dec.decode(cur.value())
                _must(self.txn.delete(_HIST_STATUS + _status_key_of(job.owner, held), db=db),
                      "a run in history has its status row")
                found = cur.delete()
        self.outcome_counts.pop(keys.job_key(job.id), None)  # its runs' counts go with it
        self.txn.delete(keys.job_key(job.id), db=self.outcomes)
        _must(self.txn.delete(keys.job_key(job.id), db=self.jobs), "a job deleted has its row")
        _must(self.txn.delete(keys.owner_job_key(job.owner, job.id), db=self.by_owner),
              "a job deleted has its row in its owner's index")
        for key in _label_keys(job, keys.job_key(job.id)):
            _must(self.txn.delete(key, db=self.by_label), "a labelled job had its index row")
        if job.request_key is not None:
            # Deleting a job releases its request key: a later create with that
            # key makes a new job rather than answering with a deleted one.
            self.txn.delete(keys.request_key(job.owner, job.request_key), db=self.reqkeys)
        self.append_event(job.owner, Event("job.deleted", cmd.at_ms, job.id, None, {"version": job.version}))
        return None

    def trigger_job(self, cmd: TriggerJob) -> Run | errors.TempoError:
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        for slot_ms in range(cmd.at_ms, cmd.at_ms + limits.trigger_slot_probe_max):
            if not self.slot_taken(job.id, slot_ms):
                run = Run(job.id, slot_ms, slot_ms, "waiting", triggered=True)
                self.put_run(run, job=job)
                if _mark_taken(job, slot_ms):
                    self.put_job(job)
                return run
        return errors.Conflict(f"job {job.id} has no free run slot near {cmd.at_ms}")

    def record_missed(self, job: Job, missed: Missed, at_ms: int) -> None:
        """A range of the job's slots that got no run, as a `run.missed`
        event of its owner: in the history of the day it was decided, kept
        and dropped with it (docs/semantics.md "Catch-up after missed slots")."""
        assert missed.from_ms < missed.until_ms
        detail = {
            "reason": missed.reason,
            "missed_from": clock.iso_from_ms(missed.from_ms),
            "missed_until": clock.iso_from_ms(missed.until_ms),
            "count": missed.count,
        }
        self.append_event(job.owner, Event("run.missed", at_ms, job.id, None, detail))
        # The same range as a row of the job's run history, at the run ID of
        # its first slot: in the bucket of the day it was decided, with its
        # runs-by-status row, so retention drops both with the event. A slot
        # that holds a run already (a triggered run that took that very
        # millisecond) keeps it; the event still tells of the range.
        # A range whose first slot is past the bounds of a stored time (an
        # entry no leader makes) has its event only.
        if not 0 <= missed.from_ms <= limits.time_ms_max or self.slot_taken(job.id, missed.from_ms):
            return
        row = Run(
            job.id, missed.from_ms, missed.from_ms, "missed", finished_ms=at_ms,
            reason=missed.reason, missed_until_ms=missed.until_ms, missed_count=missed.count,
        )
        bucket = self.bucket_for(at_ms)
        self.txn.put(_HIST_RUN + keys.by_job_key(job.id, missed.from_ms), _enc.encode(row), db=bucket)
        self.txn.put(_HIST_STATUS + _status_key_of(job.owner, row), b"", db=bucket)

    def _drop_missed_row(self, job: Job, slot_ms: int) -> None:
        """Drops the `missed` row at `slot_ms`, if there is one, with its
        runs-by-status row: a backfill is about to run that slot."""
        held = self.history_run(job.id, slot_ms)
        if held is None or held[1].status != "missed":
            return
        bucket, row = held
        _must(self.txn.delete(_HIST_RUN + keys.by_job_key(job.id, slot_ms), db=bucket), "a missed run read has its row")
        _must(self.txn.delete(_HIST_STATUS + _status_key_of(job.owner, row), db=bucket),
              "a missed run read has its status row")

    def backfill_job(self, cmd: BackfillJob) -> list[Run] | errors.TempoError:
        """A waiting run, due at `cmd.at_ms` and marked `backfill`, for each
        slot of the command that has no run, open or in history; answers
        the runs made. A slot at or after the job's scheduled slot is left
        out: its run is the schedule's to make (the job moved on since the
        slots were computed)."""
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound(f"no job {cmd.job_id}")
        made: list[Run] = []
        for slot_ms in cmd.slots_ms:
            if job.slot_ms is not None and job.schedule.repeating and slot_ms >= job.slot_ms:
                break  # the slots are ascending
            # The first slot of a missed range holds the range's history
            # row, not a run: the backfill's run takes its place.
            self._drop_missed_row(job, slot_ms)
            if self.slot_taken(job.id, slot_ms):
                continue
            run = Run(job.id, slot_ms, cmd.at_ms, "waiting", backfill=True)
            self.put_run(run, job=job)
            made.append(run)
        return made

    # -- dispatch ----------------------------------------------------------------

    def _slot_run(self, job_id: str, nominal_ms: int, by_job_key: bytes | None = None) -> tuple[bytes, Run] | None:
        """The open run of a slot and its runs key; `by_job_key` is
        `keys.by_job_key(job_id, nominal_ms)` when the caller has it."""
        if by_job_key is None:
            by_job_key = keys.by_job_key(job_id, nominal_ms)
        runs_key = self.by_job_cursor().get(by_job_key)
        if runs_key is None:
            return None
        return runs_key, _run_dec.decode(_present(self.runs_cursor().get(runs_key)))

    def _job_any(self, job_id: str, job_key: bytes | None = None) -> Job:
        raw = self.jobs_cursor().get(keys.job_key(job_id) if job_key is None else job_key)
        assert raw is not None, f"run of a missing job {job_id}"
        return _job_dec.decode(raw)

    def claim_runs(self, cmd: ClaimRuns) -> list[Run | None]:
        """Each of the command's claims (`claim_run`). A run claimed here and
        then asked to stop by a later claim of the same command (its job's
        policy is `cancel_other`) is handed out asked to stop, as it is
        stored: the dispatcher makes its lease, and its heartbeats' answer,
        from these outcomes."""
        outcomes = [self.claim_run(cmd, claim) for claim in cmd.claims]
        if self.changes.stopping:
            stopping = set(self.changes.stopping)
            for run in outcomes:
                if run is not None and (run.job_id, run.nominal_ms) in stopping:
                    run.cancel = "requested"
        return outcomes

    def claim_run(self, cmd: ClaimRuns, claim: Claim) -> Run | None:
        """Claims a run that is still waiting and due; None when it is not any
        more (paused, deleted or claimed since the dispatcher picked it), or
        when the job's overlap policy holds it back (`_overlap_holds`:
        skipped or buffered instead)."""
        job_key = keys.job_key(claim.job_id)
        found = self._slot_run(claim.job_id, claim.nominal_ms, keys.by_job_key_of(job_key, claim.nominal_ms))
        if found is None or found[1].status != "waiting" or found[1].due_ms > cmd.at_ms or found[1].buffered:
            return None
        runs_key, run = found
        # A one-off's claim reads no job; nor does its policy hold anything back.
        job = None if claim.one_off else self._job_any(run.job_id, job_key)
        if job is not None and _misses_itself(job, run, claim):
            self._miss(job, run, runs_key, claim, cmd.at_ms)
            return None
        if job is not None and job.overlap is not None:
            buffered = self._overlap_holds(job, run, runs_key, cmd.at_ms)
            if buffered is not None:
                self._held(job, run, claim, cmd.at_ms, buffered)
                return None
        run.status = "claimed"
        run.attempt += 1
        run.worker = cmd.worker
        run.lease_expires_ms = claim.lease_expires_ms
        run.started_ms = cmd.at_ms
        run.cancel = None  # a new attempt: what ended the last one is past
        run.timeout_at_ms = claim.timeout_at_ms
        if job is None:
            self.put_run_in_place(run, runs_key, "waiting", job_key=job_key)
            # The job's `next_run_at` still names this run's due time; reads
            # show it only while the run waits (`_Tx.fresh`).
            return run
        self.put_run_in_place(run, runs_key, "waiting", job, job_key)
        counted = job.schedule.repeating and run.attempt == 1 and not run.triggered and not run.backfill
        if counted:
            # The first claim of a slot's run (`schedule.max_runs`): the
            # schedule's own run, or one its overlap policy buffered.
            job.runs_done += 1
        if self._hand_on(job, run, claim, cmd.at_ms) or counted:
            self.put_job(job, job_key)
        return run

    def _miss(self, job: Job, run: Run, runs_key: bytes, claim: Claim, at_ms: int) -> None:
        """The slot run the claim's catch-up decision does not run (its first
        range starts at the run's slot: `_misses_itself`): the run becomes
        that range's `missed` row, with its reason, and the schedule moves
        on as a claim moves it, recording the ranges and making the next
        run. A slot after which none is planned completes the job."""
        missed = claim.missed[0]
        run.status = "missed"
        run.reason = missed.reason
        run.finished_ms = at_ms
        run.due_ms = run.nominal_ms  # as every missed row shows it
        run.missed_until_ms = missed.until_ms
        run.missed_count = missed.count
        self.finish_run(run, runs_key, "waiting", at_ms, job=job)
        # The range's row is this run's now; `record_missed` adds its event.
        if self._hand_on(job, run, claim, at_ms):
            self.put_job(job)
        self._settle(job, run, at_ms)

    def _held(self, job: Job, run: Run, claim: Claim, at_ms: int, buffered: int) -> None:
        """A run the job's overlap policy held back (skipped, or buffered:
        `run.buffered`), of which the job now has `buffered`: the slot is
        over for the schedule as a claim would end it. A skipped slot
        after which no slot is planned completes the job (`_settle`)."""
        if run.attempt == 0 and self._hand_on(job, run, claim, at_ms, buffered):
            self.put_job(job)
        if run.status == "skipped":
            self._settle(job, run, at_ms)

    def _hand_on(self, job: Job, run: Run, claim: Claim, at_ms: int, pending: int = 0) -> bool:
        """The slot run of `job` leaves waiting (claimed, skipped or
        buffered): the schedule moves on to the claim's next slot, whose
        run is made in the same commit, unless an end condition leaves it
        unplanned (`_past_end`, counting `pending` buffered runs that will
        run yet). Answers whether `job` changed (not for a retry, a
        re-delivery, a triggered or a backfill run: the schedule moved on
        already)."""
        if job.slot_ms != run.nominal_ms or run.triggered or run.backfill:
            return False
        next_slot_ms = claim.next_slot_ms
        if next_slot_ms is not None and _past_end(job, next_slot_ms, pending):
            # The run just claimed (or buffered) is the job's last: its end
            # completes the job (`_settle`). Decided here from `runs_done`
            # as replicated, so every replica, and the next leader, agree on it.
            next_slot_ms = None
        if job.schedule.repeating and job.state == "active" and next_slot_ms is not None:
            assert claim.next_due_ms is not None and next_slot_ms > run.nominal_ms
            job.slot_ms = next_slot_ms
            job.next_run_at_ms = self._schedule_at(job, next_slot_ms, claim.next_due_ms, at_ms)
            for missed in claim.missed:
                self.record_missed(job, missed, at_ms)
            job.catchup_until_ms = claim.catchup_until_ms
            job.catchup_decided_ms = claim.catchup_decided_ms
        else:
            job.next_run_at_ms = None
        return True

    # -- overlap (docs/semantics.md "Overlap") -----------------------------------

    def overlap_state(self, job: Job, but_ms: int | None = None) -> tuple[list[tuple[bytes, Run]], list[tuple[bytes, Run]]]:
        """The job's running runs (claimed: an attempt under way) and its
        buffered runs (slots' runs, and retries held back), each with its
        runs key, oldest slot first; the run of slot `but_ms` and backfill
        runs (which the policy neither holds back nor is held by) left out.
        A run waiting for its next attempt is neither: its lease or timeout
        (or a failed result) ended the attempt. Reads the job's rows of the
        held-runs index (`runs_held`), not all its open runs."""
        running: list[tuple[bytes, Run]] = []
        buffered: list[tuple[bytes, Run]] = []
        job_key = keys.job_key(job.id)
        cur = self.txn.cursor(db=self.held)
        found = cur.set_range(job_key)
        while found and cur.key().startswith(job_key):
            by_job_key = bytes(cur.key())
            found = cur.next()
            if _U64.unpack(by_job_key[keys.JOB_KEY_BYTES :])[0] == but_ms:
                continue
            runs_key = _present(self.txn.get(by_job_key, db=self.by_job))
            run = _run_dec.decode(_present(self.txn.get(runs_key, db=self.runs)))
            assert _is_held(run), "a held row of a run no policy holds"
            (running if run.status == "claimed" else buffered).append((runs_key, run))
        return running, buffered

    def _overlap_holds(self, job: Job, run: Run, runs_key: bytes, at_ms: int) -> int | None:
        """Whether the policy of `job` (not `allow`) holds `run` back: None
        when its claim goes ahead, else how many slots' runs of the job wait
        buffered now (this one too, when it was buffered rather than
        skipped). A backfill run always goes ahead. A retry or re-delivery
        (attempt > 0) is no new slot: it is never skipped, and while another
        run of the job runs it waits buffered (whatever the policy), to be
        released as that one ends. Any other run of a job with a running
        run is skipped or buffered, as the policy says, or (`cancel_other`)
        the running runs are asked to stop and it goes ahead. Decided here,
        from the replicated tables, so a new leader decides alike."""
        if run.backfill or not job.schedule.repeating:
            return None
        running, buffered = self.overlap_state(job, run.nominal_ms)
        slots = sum(1 for _, one in buffered if one.attempt == 0)
        if run.attempt > 0:
            if not running:
                return None
            self._buffer(job, run, runs_key)
            return slots
        policy = job.overlap
        if policy in _BUFFERING:
            # Buffered runs run in slot order: one older than this run holds it back too.
            ahead = [one for one in buffered if one[1].nominal_ms < run.nominal_ms]
            if not running and not ahead:
                return None
            room = 1 if policy == "buffer_one" else limits.overlap_buffered_runs_max
            if slots >= room:
                self.skip_run(job, run, runs_key, at_ms)
                return slots
            self._buffer(job, run, runs_key)
            return slots + 1
        if not running:
            return None
        if policy == "skip":
            self.skip_run(job, run, runs_key, at_ms)
            return slots
        assert policy == "cancel_other", f"an overlap policy: {policy}"
        for other_key, other in running:
            self.request_cancel(job, other, other_key, at_ms)
        return None

    def _buffer(self, job: Job, run: Run, runs_key: bytes) -> None:
        """`run` waits buffered: out of the dispatcher's sight (a far due
        time) until a running run of its job ends (`_ended`)."""
        run.buffered = True
        run.due_ms = limits.overlap_buffered_due_ms
        self.put_run(run, runs_key, "waiting", job)

    def overlap_due(self, at_ms: int, claim: Claim) -> bool:
        """A due run the dispatcher set aside (`OverlapRuns`): True when it
        goes on to be claimed (its policy lets it run now: nothing of the
        job runs, or `cancel_other` asked the running runs to stop); False
        when the policy skipped or buffered it, or it is no longer waiting
        and due."""
        found = self._slot_run(claim.job_id, claim.nominal_ms)
        if found is None or found[1].status != "waiting" or found[1].due_ms > at_ms or found[1].buffered:
            return False
        runs_key, run = found
        job = self._job_any(run.job_id)
        buffered = None if job.overlap is None else self._overlap_holds(job, run, runs_key, at_ms)
        if buffered is None:
            return True
        self._held(job, run, claim, at_ms, buffered)
        return False

    def skip_run(self, job: Job, run: Run, runs_key: bytes, at_ms: int) -> None:
        """A waiting run its job's overlap policy does not run: a `skipped`
        row of the job's history (reason `overlap`) and a `run.skipped`
        event."""
        run.status = "skipped"
        run.reason = "overlap"
        run.finished_ms = at_ms
        self.finish_run(run, runs_key, "waiting", at_ms, job=job)
        self.changes.skipped += 1
        detail = {"reason": "overlap"}
        self.append_event(job.owner, Event("run.skipped", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))

    def _ended(self, job: Job, run: Run, at_ms: int) -> None:
        """A run that was running stopped running (it finished, or its
        attempt ended and it waits for the next): the oldest buffered run
        of its job, if any, is due at `at_ms` once no other run of the job
        is running; on a paused job too, where only a run triggered after
        the pause can be buffered (the pause cancelled the others), and it
        still runs."""
        if job.overlap is None or run.attempt == 0 or run.backfill:
            return
        running, buffered = self.overlap_state(job)
        if not running and buffered:
            self._release(job, buffered[0][1], buffered[0][0], at_ms)

    def _release_all(self, job: Job, at_ms: int) -> None:
        """A patch took the job's policy away from buffering: nothing holds
        its buffered runs (or held retries) back any more, and they are due
        at `at_ms` (the new policy decides on each as it is claimed)."""
        for runs_key, run in self.overlap_state(job)[1]:
            self._release(job, run, runs_key, at_ms)

    def _repolicy(self, old: Job, job: Job, at_ms: int) -> None:
        """What a patch that may change the overlap policy from `old`'s to
        `job`'s does: a policy that no longer buffers releases the runs it
        held back; the held-runs index follows the job having a policy."""
        if old.overlap is not None and job.overlap not in _BUFFERING:
            # Buffered slots' runs, and retries any policy held back.
            self._release_all(job, at_ms)
        if (old.overlap is None) != (job.overlap is None):
            self._hold_rows(job)

    def _hold_rows(self, job: Job) -> None:
        """The job's rows of the held-runs index after a patch gave it an
        overlap policy (a row for each run it holds: its claimed runs, read
        from all its open runs once) or took its policy away (none)."""
        job_key = keys.job_key(job.id)
        cur = self.held_cursor()
        while cur.set_range(job_key) and cur.key().startswith(job_key):
            cur.delete()
        if job.overlap is None:
            return
        for nominal_ms, runs_key in self.slots_desc(job.id, 0, 1 << 63):
            if _is_held(_run_dec.decode(_present(self.txn.get(runs_key, db=self.runs)))):
                cur.put(keys.by_job_key_of(job_key, nominal_ms), b"")

    def _release(self, job: Job, run: Run, runs_key: bytes, at_ms: int) -> None:
        """A buffered run becomes due at `at_ms`: the dispatcher gets it."""
        assert run.buffered and run.status == "waiting"
        run.buffered = False
        run.due_ms = at_ms
        self.put_run(run, runs_key, "waiting", job)
        if (job.state == "active" and job.slot_ms == run.nominal_ms and run.attempt == 0 and not run.triggered
                and job.next_run_at_ms != at_ms):
            # The first run of the job's own slot (its last, when the
            # schedule planned none after it): the job's next run is this
            # one. (A retry is not: a repeating job's next run is a slot's.)
            job.next_run_at_ms = at_ms
            self.put_job(job)

    def claim_keyed(self, cmd: ClaimRuns, key: ClaimKey) -> list[Run | None] | ClaimKeyEntry | errors.TempoError:
        """A claim that carries a key (docs/semantics.md "Idempotent claims").
        A key recorded and not expired at the command's stamp takes nothing
        and answers its record (the retry of a claim, or a claim that raced
        its own retry to the log); one recorded for another worker or other
        queues is `ClaimKeyReused`. Otherwise the runs are claimed as
        without a key, and what they took is recorded, if anything. Expired
        records go first, a bounded number a command."""
        if not keys.owner_fits(key.owner) or not keys.claim_key_fits(key.owner, key.key):
            return errors.Invalid.at("claim_key", f"at most {limits.claim_key_bytes_max} bytes")
        self.drop_claim_keys(cmd.at_ms)
        record_key = keys.claim_key(key.owner, key.key)
        raw = self.txn.get(record_key, db=self.claim_keys)
        if raw is not None:
            entry = _claimkey_dec.decode(bytes(raw))
            if entry.expires_ms > cmd.at_ms:
                if entry.worker != cmd.worker or entry.queues_hash != key.queues_hash:
                    return errors.ClaimKeyReused(
                        f"claim key {key.key!r} was used by another worker or for other queues"
                    )
                return entry
            # Expired, not yet dropped: a new claim may use the key again.
            self._drop_claim_key(record_key, entry.expires_ms)
        outcomes = self.claim_runs(cmd)
        taken = [Taken(run.job_id, run.nominal_ms, run.attempt) for run in outcomes if run is not None]
        # A record that would expire by its own stamp would never answer.
        if taken and key.expires_ms > cmd.at_ms:
            entry = ClaimKeyEntry(cmd.worker, key.queues_hash, key.expires_ms, taken)
            self.txn.put(record_key, _enc.encode(entry), db=self.claim_keys)
            self.txn.put(keys.claim_key_expiry(key.expires_ms, key.owner, key.key), b"", db=self.claim_keys)
        return outcomes

    def drop_claim_keys(self, at_ms: int) -> None:
        """Drops up to `limits.claim_keys_dropped_per_claim` records that
        expired by `at_ms`, soonest first: from the command's stamp alone,
        so every replica drops the same ones."""
        cur = self.txn.cursor(db=self.claim_keys)
        found = cur.set_range(keys.CLAIM_KEY_EXPIRY_HEAD)
        expired: list[tuple[bytes, int]] = []
        while found and len(expired) < limits.claim_keys_dropped_per_claim:
            index_key = bytes(cur.key())
            if not index_key.startswith(keys.CLAIM_KEY_EXPIRY_HEAD):
                break
            expires_ms, record_key = keys.parse_claim_key_expiry(index_key)
            if expires_ms > at_ms:
                break
            expired.append((record_key, expires_ms))
            found = cur.next()
        for record_key, expires_ms in expired:
            self._drop_claim_key(record_key, expires_ms)

    def _drop_claim_key(self, record_key: bytes, expires_ms: int) -> None:
        """A record and its expiry index entry."""
        index_key = keys.claim_key_expiry_of(expires_ms, record_key)
        _must(self.txn.delete(index_key, db=self.claim_keys), "a claim key's record has its expiry entry")
        raw = self.txn.get(record_key, db=self.claim_keys)
        # The record under that key may be a later one (the key used again
        # after it expired): only the one that expires then goes.
        if raw is not None and _claimkey_dec.decode(bytes(raw)).expires_ms == expires_ms:
            self.txn.delete(record_key, db=self.claim_keys)

    def report_result(self, cmd: ReportResults, result: Result) -> Run | errors.TempoError:
        job_key = keys.job_key(result.job_id)
        by_job_key = keys.by_job_key_of(job_key, result.nominal_ms)
        found: tuple[bytes | None, Run] | None = self._slot_run(result.job_id, result.nominal_ms, by_job_key)
        if found is None:
            # Not open: a repeat of the result that finished it, or stale.
            held = self.history_run(result.job_id, result.nominal_ms)
            found = None if held is None else (None, held[1])
        job = None if found is None else self._job_any(result.job_id, job_key)
        if found is None or job is None or (cmd.owner is not None and job.owner != cmd.owner):
            return errors.NotFound("no such run")
        runs_key, run = found
        if run.attempt != result.attempt:
            return errors.StaleAttempt(f"attempt {result.attempt} is not the current one ({run.attempt})")
        if run.status != "claimed":
            return _repeat_or_stale(run, result)
        assert runs_key is not None, "a claimed run is open"
        if run.timeout_at_ms is not None and cmd.at_ms >= run.timeout_at_ms:
            # The attempt ended at its timeout, whether or not the lease
            # check has committed that yet; its expiry records it
            # (docs/semantics.md "Run timeouts").
            return errors.StaleAttempt(f"attempt {result.attempt} ended by its timeout")
        _keep_attempt(run, cmd.at_ms, result.ok, result.output, result.error)
        run.lease_expires_ms = None
        run.output = result.output
        run.error = result.error
        if run.cancel == "requested" and not result.ok:
            # A run asked to stop that did not succeed ends cancelled, with
            # no retry; one that succeeded before the stop reached it is
            # done, as it happened (docs/semantics.md "Cancelling a run").
            self._end_cancelled(job, run, runs_key, cmd.at_ms, by_job_key)
            return run
        if result.ok:
            run.status = "done"
            run.finished_ms = cmd.at_ms
            self.finish_run(run, runs_key, "claimed", cmd.at_ms, by_job_key, job)
            if job.failed_runs > 0:
                self._recovered(job, run, cmd.at_ms, job_key)
            self._settle(job, run, cmd.at_ms, job_key)
            self._ended(job, run, cmd.at_ms)
            return run
        backoff_s = job.backoff_s if run.retry_kept is None else run.retry_kept.backoff_s
        gap_s = backoff_s[min(run.attempt - 1, len(backoff_s) - 1)]
        self._end_attempt(job, run, runs_key, cmd.at_ms, cmd.at_ms + gap_s * 1000)
        return run

    def expire_lease(self, at_ms: int, expiry: Expiry) -> Run | None:
        """An attempt the dispatcher found ended: its lease ran out, or its
        timeout passed (`expiry.reason`). A run asked to stop ends
        cancelled either way; a timeout is a failed attempt, retried after
        its backoff as a failed result is; an expired lease is re-delivered
        at once."""
        found = self._slot_run(expiry.job_id, expiry.nominal_ms)
        if found is None or found[1].status != "claimed" or found[1].attempt != expiry.attempt:
            return None  # finished or re-claimed since the lease was found expired
        runs_key, run = found
        job = self._job_any(run.job_id)
        error = "timeout" if expiry.reason == "timeout" else "lease expired"
        _keep_attempt(run, at_ms, False, None, error)
        run.lease_expires_ms = None
        run.error = error
        if run.cancel == "requested":
            self._end_cancelled(job, run, runs_key, at_ms)
            return run
        if expiry.reason == "timeout":
            run.cancel = "timeout"
            backoff_s = job.backoff_s if run.retry_kept is None else run.retry_kept.backoff_s
            gap_s = backoff_s[min(run.attempt - 1, len(backoff_s) - 1)]
            self._end_attempt(job, run, runs_key, at_ms, at_ms + gap_s * 1000)
            return run
        # A re-delivery after an expired lease is due at once, without jitter.
        self._end_attempt(job, run, runs_key, at_ms, at_ms)
        return run

    # -- cancelling a run (docs/semantics.md "Cancelling a run") ---------------

    def cancel_run(self, cmd: CancelRun) -> Run | errors.TempoError:
        """A waiting run is cancelled at once; a claimed one is asked to stop
        (`request_cancel`); one cancelled already is answered as it is; any
        other finished run is `RunFinished`."""
        job = self.job(cmd.owner, cmd.job_id)
        if job is None:
            return errors.NotFound("no such run")
        found = self._slot_run(job.id, cmd.nominal_ms)
        if found is None:
            held = self.history_run(job.id, cmd.nominal_ms)
            if held is None:
                return errors.NotFound(f"no run {ids.run_id(job.id, cmd.nominal_ms)}")
            run = held[1]
            if run.status == "cancelled":
                return run
            return errors.RunFinished(f"run {ids.run_id(job.id, cmd.nominal_ms)} finished already ({run.status})")
        runs_key, run = found
        if run.status == "claimed":
            self.request_cancel(job, run, runs_key, cmd.at_ms)
            return run
        assert run.status == "waiting", "an open run waits or is claimed"
        if _is_slot_run(job, run) and not cmd.planned:
            return errors.Conflict("the job's schedule moved while the cancel was made: send it again")
        self._cancel_waiting(job, run, runs_key, cmd)
        return run

    def request_cancel(self, job: Job, run: Run, runs_key: bytes, at_ms: int) -> None:
        """Asks the claimed `run` (of `job`, stored at `runs_key`) to stop:
        the next heartbeat of its attempt answers `cancel: requested`, its
        lease no longer grows, and the result that follows, or the end of
        its lease, ends it `cancelled` with no retry. Idempotent. `at_ms`
        is the command's stamp (the request is not written as an event:
        the run's end is, `run.cancelled`)."""
        assert run.status == "claimed" and run.job_id == job.id
        assert keys.due_of(runs_key) == run.due_ms, "the run is stored at runs_key"
        del at_ms  # nothing of the request is timed: its end is
        if run.cancel == "requested":
            return
        run.cancel = "requested"
        self.put_run_in_place(run, runs_key, "claimed", job)
        self.changes.stopping.append((run.job_id, run.nominal_ms))

    def _cancel_waiting(self, job: Job, run: Run, runs_key: bytes, cmd: CancelRun) -> None:
        """A waiting run cancelled into history. The waiting run of a
        repeating job's schedule slot hands the schedule on to the next
        slot (the command's), so the job keeps one waiting run; a
        one-off's ends the job (`_settle`: completed)."""
        slot_run = _is_slot_run(job, run)
        run.status = "cancelled"
        run.owner_cancelled = True
        run.finished_ms = cmd.at_ms
        self.finish_run(run, runs_key, "waiting", cmd.at_ms, job=job)
        self._cancelled_event(job, run, cmd.at_ms)
        if not slot_run:
            self._settle(job, run, cmd.at_ms)
            self._ended(job, run, cmd.at_ms)
            return
        if cmd.next_slot_ms is None or _past_end(job, cmd.next_slot_ms):
            self._complete(job, cmd.at_ms)  # the schedule has no occurrence left
            return
        assert cmd.next_due_ms is not None and cmd.next_slot_ms > run.nominal_ms
        _mark_taken(job, run.nominal_ms)
        job.slot_ms = cmd.next_slot_ms
        job.next_run_at_ms = self._schedule_at(job, cmd.next_slot_ms, cmd.next_due_ms, cmd.at_ms)
        for missed in cmd.missed:
            self.record_missed(job, missed, cmd.at_ms)
        job.catchup_until_ms = cmd.catchup_until_ms
        job.catchup_decided_ms = cmd.catchup_decided_ms
        self.put_job(job)

    def _end_cancelled(
        self, job: Job, run: Run, runs_key: bytes, at_ms: int, by_job_key: bytes | None = None
    ) -> None:
        """A claimed run asked to stop ends `cancelled` (its attempt kept by
        the caller): by its result, or by the end of its lease."""
        run.status = "cancelled"
        run.owner_cancelled = True
        run.finished_ms = at_ms
        run.retry_kept = None
        self.finish_run(run, runs_key, "claimed", at_ms, by_job_key, job)
        self._cancelled_event(job, run, at_ms)
        self._settle(job, run, at_ms)
        self._ended(job, run, at_ms)

    def _cancelled_event(self, job: Job, run: Run, at_ms: int) -> None:
        detail = {"attempt": run.attempt, "claimed": run.attempt > 0 and run.cancel == "requested"}
        self.append_event(job.owner, Event("run.cancelled", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))

    def _end_attempt(self, job: Job, run: Run, runs_key: bytes, at_ms: int, retry_due_ms: int) -> None:
        """A failed or expired attempt: wait for the next one, or fail for good
        (by the retry policy the attempt was claimed under: `Run.retry_kept`)."""
        max_attempts = job.max_attempts if run.retry_kept is None else run.retry_kept.max_attempts
        run.retry_kept = None  # the next attempt is claimed under the job's policy
        if run.attempt < max_attempts and job.state == "paused" and not run.triggered:
            # A paused job has no run waiting: the retry is cancelled as the
            # pause cancelled the job's waiting runs, due when it would have
            # been, and a resume of a one-off brings it back.
            run.status = "cancelled"
            run.due_ms = retry_due_ms
            run.finished_ms = at_ms
            self.finish_run(run, runs_key, "claimed", at_ms, job=job)
            if _mark_taken(job, run.nominal_ms):
                self.put_job(job)
            self._ended(job, run, at_ms)
            return
        if run.attempt < max_attempts:
            run.status = "waiting"
            run.due_ms = retry_due_ms
            self.put_run(run, runs_key, "claimed", job)
            if job.slot_ms == run.nominal_ms and not job.schedule.repeating and not run.triggered:
                job.next_run_at_ms = run.due_ms
                self.put_job(job)
            self._ended(job, run, at_ms)  # waiting for its next attempt, it runs no more
            return
        run.status = "failed"
        run.finished_ms = at_ms
        self.finish_run(run, runs_key, "claimed", at_ms, job=job)
        detail = {"attempt": run.attempt, "error": run.error}
        self.append_event(job.owner, Event("run.failed", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))
        job.failed_runs += 1
        self.put_job(job)
        self._settle(job, run, at_ms)
        self._ended(job, run, at_ms)

    def _recovered(self, job: Job, run: Run, at_ms: int, job_key: bytes) -> None:
        """A run ended done after `job.failed_runs` runs that failed for good."""
        assert run.status == "done" and job.failed_runs > 0
        detail = {"failed_runs": job.failed_runs}
        job.failed_runs = 0
        self.put_job(job, job_key)
        self.append_event(job.owner, Event("job.recovered", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))

    def _settle(self, job: Job, run: Run, at_ms: int, job_key: bytes | None = None) -> None:
        """A job whose last scheduled run ended is completed: a one-off's
        one run, or the run of a repeating job's slot when its claim
        planned no slot after it (an end condition, or no slot left; the
        job's slot is still that run's then)."""
        if run.triggered or run.backfill or job.slot_ms != run.nominal_ms or job.state == "completed":
            return
        if job.schedule.repeating and job.next_run_at_ms is not None:
            return
        self._complete(job, at_ms, run)


def _misses_itself(job: Job, run: Run, claim: Claim) -> bool:
    """Whether the claim's catch-up decision, taken from the stamped time
    of the command, leaves the run of the job's own slot without a run:
    its first missed range starts at that slot (engine/jobs.py
    `catch_up`; an entry written before such ranges existed has none)."""
    return (
        bool(claim.missed) and claim.missed[0].from_ms == run.nominal_ms and job.slot_ms == run.nominal_ms
        and run.attempt == 0 and not run.triggered and not run.backfill and job.state == "active"
    )


def _past_end(job: Job, slot_ms: int, pending: int = 0) -> bool:
    """Whether a repeating job's end conditions leave `slot_ms` unplanned:
    it lies after `schedule.end_at`, or the job ran `schedule.max_runs`
    slots already (docs/semantics.md "End conditions"), counting `pending`
    runs its overlap policy buffered, which run yet."""
    sched = job.schedule
    if sched.end_at_ms is not None and slot_ms > sched.end_at_ms:
        return True
    return sched.max_runs is not None and job.runs_done + pending >= sched.max_runs


def _end_reason(job: Job) -> str:
    """Why a repeating job's schedule ended, from the job as replicated:
    `max_runs` when it ran them all, else `end_at` when it has one (the
    node that planned found no slot up to it), else `no_slot_left`."""
    sched = job.schedule
    if sched.max_runs is not None and job.runs_done >= sched.max_runs:
        return "max_runs"
    return "no_slot_left" if sched.end_at_ms is None else "end_at"


def _mark_taken(job: Job, nominal_ms: int) -> bool:
    """A run of the job's slot `nominal_ms` is in its history, or was
    triggered there (`Job.taken_until_ms`); answers whether the job
    changed (the caller writes it)."""
    if job.taken_until_ms is not None and job.taken_until_ms >= nominal_ms:
        return False
    job.taken_until_ms = nominal_ms
    return True


def _is_slot_run(job: Job, run: Run) -> bool:
    """Whether `run` is the waiting run of an active repeating job's
    schedule slot: cancelling it hands the schedule on to the next slot."""
    return job.schedule.repeating and not run.triggered and job.state == "active" and job.slot_ms == run.nominal_ms


def _key_fault(job: Job) -> errors.TempoError | None:
    """The error outcome of a new job whose keys would not fit LMDB (an
    entry logged before the edge checked bounds in bytes); it depends on the
    command alone, so every replica answers alike."""
    if not keys.owner_fits(job.owner):
        return errors.Invalid(
            f"the owner name is {len(job.owner.encode())} bytes in UTF-8, past the {limits.owner_bytes_max} "
            "the config allows: shorten it there"
        )
    if job.request_key is not None and not keys.request_key_fits(job.owner, job.request_key):
        return errors.Invalid.at("request_key", f"at most {limits.request_key_bytes_max} bytes in UTF-8")
    return None


def _must(done: bool, why: str) -> None:
    """An invariant of a call that does work, such as a row delete: checked
    with `if`, never inside `assert`, which `python -O` drops together with
    the call it holds (docs/operations.md "Running under python -O").
    Raises AssertionError, as an assert would, under either flag."""
    if not done:
        raise AssertionError(why)


# A job's record fields a patch may change, by the name of the body's
# field that sets them (`retry` sets two), for `job.updated`'s `changed`.
_PATCHED_FIELDS = (
    ("backoff_s", "retry"), ("catchup", "catchup"), ("jitter_s", "jitter_s"), ("labels", "labels"),
    ("lease_s", "lease_s"), ("max_attempts", "retry"), ("name", "name"), ("notify", "notify"),
    ("overlap", "overlap"), ("payload", "payload"), ("schedule", "schedule"), ("target", "target"),
    ("timeout_s", "timeout_s"),
)


def _changed_fields(old: Job, job: Job) -> list[str]:
    """The body's fields whose values `job` changed from `old`, sorted."""
    return sorted({name for attr, name in _PATCHED_FIELDS if getattr(old, attr) != getattr(job, attr)})


def _delete_at(cur: "lmdb.Cursor[bytes]", key: bytes, missing: str = "a row apply deletes is there") -> None:
    """Deletes the row at `key`, which must be there, through `cur`."""
    found = cur.set_key(key)
    assert found, missing
    cur.delete()


def _present(raw: bytes | None) -> bytes:
    """A row an index entry or a record points at: the transaction that
    wrote the pointer wrote the row, so a missing one is a bug."""
    assert raw is not None, "an index entry points at a missing row"
    return raw


def _index_ms(run: Run) -> int:
    """The time a run is listed at (docs/api.md "GET /v1/runs"): its end
    for `done` and `failed`, when it was recorded for a `missed` row, else
    its due time. Read from the run alone, so
    an index built from the tables equals one kept by apply."""
    if run.status in ("done", "failed", "missed", "skipped") and run.finished_ms is not None:
        return run.finished_ms
    return run.due_ms


def _status_key_of(owner: str, run: Run) -> bytes:
    return keys.status_key(owner, keys.status_code(run.status), _index_ms(run), run.job_id, run.nominal_ms)


def _count_outcome(txn: "lmdb.Transaction[bytes]", db: lmdb._Database, job_key: bytes, run: Run) -> None:
    """Counts a run that just finished into its job's outcome. The last run
    is the one with the latest (end, nominal time), whatever order the runs
    are counted in, so `_build_run_index` comes to the same bytes."""
    raw = txn.get(job_key, db=db)
    outcome = JobOutcome() if raw is None else _outcome_dec.decode(raw)
    _add_to_outcome(outcome, run)
    txn.put(job_key, _enc.encode(outcome), db=db)


def _add_to_outcome(outcome: JobOutcome, run: Run) -> None:
    """`_count_outcome` on the decoded outcome, in place."""
    if run.status == "done":
        outcome.done += 1
    elif run.status == "failed":
        outcome.failed += 1
    elif run.status == "cancelled":
        outcome.cancelled += 1
    elif run.status == "skipped":
        outcome.skipped += 1
    if run.status in ("done", "failed") and run.finished_ms is not None and (
        outcome.last_finished_ms is None
        or (run.finished_ms, run.nominal_ms) >= (outcome.last_finished_ms, outcome.last_nominal_ms or 0)
    ):
        outcome.last_nominal_ms = run.nominal_ms
        outcome.last_status = run.status
        outcome.last_attempt = run.attempt
        outcome.last_finished_ms = run.finished_ms
        outcome.last_error = run.error


def _repeat_or_stale(run: Run, result: Result) -> Run | errors.TempoError:
    """A result for an attempt that ended: the same report as the one that
    ended it again is harmless (the run as it is); any other one for an
    attempt that ended (by a result, an expired lease or its timeout) is
    stale."""
    if run.cancel == "timeout":
        return errors.StaleAttempt(f"attempt {result.attempt} ended by its timeout")
    if run.status == "cancelled":
        # Asked to stop, a failed result ended it (an ok one would have
        # made it done); else a failed one did (its job was paused).
        same = not result.ok and (run.cancel == "requested" or not run.owner_cancelled)
    else:
        same = run.status == "done" if result.ok else run.status in ("waiting", "failed")
    repeat = same and run.attempt >= 1 and (run.output, run.error) == (result.output, result.error)
    return run if repeat else errors.StaleAttempt(f"attempt {result.attempt} already ended")


def _keep_attempt(run: Run, at_ms: int, ok: bool, output: str | None, error: str | None) -> None:
    """Records the attempt of a claimed run that ends at `at_ms`, keeping
    the newest `limits.run_attempts_kept_max`."""
    assert run.status == "claimed"
    kept = (*run.attempts, Attempt(run.started_ms, run.worker, at_ms, ok, output, error))
    run.attempts = kept[-limits.run_attempts_kept_max:]


def _build_run_index(txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database], buckets: list[lmdb._Database]) -> None:
    """Builds the runs-by-status index and the job outcomes from the runs
    and history tables, as apply would have kept them, and marks them
    built: a store of a version without them, or a snapshot of one. An
    outcome so built counts the runs still kept, not those retention
    dropped before."""
    txn.drop(db["runs_by_status"], delete=False)
    txn.drop(db["job_outcomes"], delete=False)
    owners = {keys.job_id_of(key[-keys.JOB_KEY_BYTES :]): key[: -keys.JOB_KEY_BYTES - 1].decode()
              for key in txn.cursor(db=db["jobs_by_owner"]).iternext(values=False)}
    for _, raw in txn.cursor(db=db["runs"]):
        run = _run_dec.decode(raw)
        owner = owners.get(run.job_id)
        if owner is not None and run.status in _OPEN:
            txn.put(_status_key_of(owner, run), b"", db=db["runs_by_status"])
    used = {_SLOT.unpack(k)[0] for k in txn.cursor(db=db["history_days"]).iternext(values=False)}
    for slot in sorted(used):
        bucket = buckets[slot]
        cur = txn.cursor(db=bucket)
        stale = []
        found = cur.set_range(_HIST_STATUS)
        while found and cur.key().startswith(_HIST_STATUS):
            stale.append(cur.key())
            found = cur.next()
        for key in stale:
            txn.delete(key, db=bucket)
        rows = []
        found = cur.set_range(_HIST_RUN)
        while found and cur.key().startswith(_HIST_RUN):
            rows.append((cur.key(), cur.value()))
            found = cur.next()
        for key, raw in rows:
            run = _run_dec.decode(raw)
            owner = owners.get(run.job_id)
            if owner is None or run.status not in _FINISHED:
                continue
            txn.put(_HIST_STATUS + _status_key_of(owner, run), b"", db=bucket)
            _count_outcome(txn, db["job_outcomes"], key[len(_HIST_RUN) : len(_HIST_RUN) + keys.JOB_KEY_BYTES], run)
    txn.put(_RUN_INDEX, b"1", db=db["meta"])


def _label_keys(job: Job, job_key: bytes) -> list[bytes]:
    """The job's rows of the jobs-by-label index, one per label."""
    if not job.labels or not keys.owner_fits(job.owner):
        return []
    return [keys.label_key(job.owner, name, value, job_key) for name, value in job.labels.items()]


def _is_held(run: Run) -> bool:
    """Whether `run` has a row in `runs_held`: an open run an overlap
    policy looks at (`Tx.overlap_state`), claimed or waiting buffered, not
    a backfill run."""
    return not run.backfill and (run.status == "claimed" or (run.status == "waiting" and run.buffered))


def _may_be_held(status: str, due_ms: int) -> bool:
    """Whether an open run in `status`, due at `due_ms`, may have a row in
    `runs_held`: claimed, or waiting at the far due time `_buffer` parks a
    buffered run at (a run due then by its schedule has none)."""
    return status == "claimed" or (status == "waiting" and due_ms == limits.overlap_buffered_due_ms)


def _build_held_index(txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database]) -> None:
    """Builds the held-runs index from the runs table, as apply would have
    kept it, and marks it built: a store of a version without it."""
    txn.drop(db["runs_held"], delete=False)
    # Which jobs have a policy: only their runs have rows.
    policy = {job.id: job.overlap is not None for job in (_job_dec.decode(raw) for _, raw in txn.cursor(db=db["jobs"]))}
    for _, raw in txn.cursor(db=db["runs"]):
        run = _run_dec.decode(raw)
        if _is_held(run) and policy.get(run.job_id, False):
            txn.put(keys.by_job_key(run.job_id, run.nominal_ms), b"", db=db["runs_held"])
    txn.put(_HELD_INDEX, b"1", db=db["meta"])


def _build_label_index(txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database]) -> None:
    """Builds the jobs-by-label index from the jobs table, as apply would
    have kept it, and marks it built: a store of a version without it."""
    txn.drop(db["jobs_by_label"], delete=False)
    for key, raw in txn.cursor(db=db["jobs"]):
        job = _job_dec.decode(raw)
        for row in _label_keys(job, bytes(key)):
            txn.put(row, b"", db=db["jobs_by_label"])
    txn.put(_LABEL_INDEX, b"1", db=db["meta"])


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


def _first(row: tuple[T, object]) -> T:
    return row[0]


def _second(row: tuple[object, int, object]) -> int:
    return row[1]


def _after_shard(row: tuple[bytes, bytes]) -> bytes:
    """A row's runs key from its due time on: (due ms, job ID, nominal ms)."""
    return row[0][keys.DUE_AT :]


def _by_job_desc(cur: "lmdb.Cursor[bytes]", head: bytes, job_id: str, lower_ms: int, upper_ms: int) -> Iterator[tuple[int, bytes]]:
    """(nominal ms, value) of rows keyed `head` + runs-by-job key of one job
    with nominal time in [lower, upper), newest first."""
    prefix = head + keys.job_key(job_id)
    found = cur.set_range(head + keys.by_job_key(job_id, upper_ms))
    found = cur.prev() if found else cur.last()
    while found:
        key = cur.key()
        if not key.startswith(prefix):
            return
        _, nominal_ms = keys.parse_by_job_key(key[len(head) :])
        if nominal_ms < lower_ms:
            return
        yield nominal_ms, cur.value()
        found = cur.prev()


def _page_of_jobs(
    tx: "_Tx", rows: Iterator[bytes], limit: int, match: Callable[[Job], bool] | None
) -> tuple[list[Job], str | None]:
    """A page of the jobs of `rows` (newest first) that `match` holds for,
    and the next cursor; a filter reads at most `jobs_filter_rows_max` rows."""
    jobs: list[Job] = []
    last_id = None
    for read, raw in enumerate(rows):
        job = _job_dec.decode(raw)
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
        if _U64.unpack_from(tail)[0] < lower_ms:
            return
        yield tail, bucket
        found = cur.prev()


def _status_sources(
    tx: _Tx, owners: list[str], codes: list[int], upper: bytes, lower_ms: int
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
            if kind in _OPEN:
                sources.append(_status_desc(txn.cursor(db=tx.by_status), b"", head, upper, lower_ms, None))
                continue
            for day, bucket in tx.history():
                # A done, failed or missed row is in the bucket of the day it
                # ended or a later one (bucket_for).
                if kind in ("done", "failed", "missed") and (day + 1) * limits.day_ms <= lower_ms:
                    continue
                sources.append(_status_desc(txn.cursor(db=bucket), _HIST_STATUS, head, upper, lower_ms, bucket))
    return sources


def _slot_of_tail(tail: bytes) -> tuple[str, int]:
    """(job ID, nominal ms) of an order tail."""
    return keys.job_id_of(tail[8 : 8 + keys.JOB_KEY_BYTES]), _U64.unpack_from(tail, 8 + keys.JOB_KEY_BYTES)[0]


def _events_from(cur: "lmdb.Cursor[bytes]", head: bytes, owner: str, after_seq: int) -> Iterator[tuple[int, bytes]]:
    """(sequence, value) of rows keyed `head` + events key of one owner after
    `after_seq`, oldest first."""
    prefix = head + keys.owner_prefix(owner)
    if not cur.set_range(head + keys.event_key(owner, after_seq + 1)):
        return
    for key, value in cur:
        if not key.startswith(prefix):
            return
        yield keys.parse_event_key(key[len(head) :])[1], value
