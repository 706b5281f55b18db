"""The storage engine: tempo's tables in one LMDB environment, and `apply`.

`Store.apply_entry` is the state machine. It takes one log entry (a batch of
commands) and applies it in one write transaction that also records the
applied index, so after a crash the tables and the index agree. Each
command goes to its rule (engine/apply.py, engine/rules/) over the tables
layer (engine/tables/). It reads no clock and no random source: two stores
fed the same entries hold byte-identical tables. It is called off the trio
thread (the write transaction ends with an fsync); reads run on any thread
against LMDB's snapshots and never wait for it.

It opens the environment and its databases, which the tables layer and the
raft log beside it (raftlog.py, which writes inside the transactions this
module opens) use: these are the only modules that import lmdb, and an
import contract in pyproject.toml keeps it so.
"""

import errno
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from typing import TypeVar

import lmdb
import msgspec

from tempo import calendars, errors, limits
from tempo.engine import datadir, records
from tempo.engine.apply import Outcome, apply
from tempo.engine.commands import Command, decode_entry
from tempo.engine.records import CalendarUse
from tempo.engine.rules.jobs import Created
from tempo.engine.tables import Changes, Tables
from tempo.engine.tables.build import complete_indexes
from tempo.engine.tables.calendar_queries import CalendarQueries
from tempo.engine.tables.deps import DepQueries
from tempo.engine.tables.layout import (
    ADDED_TABLES,
    APPLIED_INDEX,
    HASHED_WHEN_USED,
    STAMP,
    TABLES,
    U64,
    bucket_name,
)
from tempo.engine.tables.queries import Queries
from tempo.metrics import Histogram

__all__ = ["STORAGE_ERRNOS", "Changes", "Created", "Outcome", "Store", "bucket_name"]

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
# Written and deleted in one transaction by `Store.probe`: never in the tables.
_PROBE = b"\x00probe"
# What a file system answers when the disk is full or failing (a snapshot
# file's write, engine/raftlog.py); LMDB's own are its exceptions below.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})
T = TypeVar("T")
log = logging.getLogger("tempo.store")

_enc = msgspec.msgpack.Encoder()
_snapshot_dec = records.Decoder(list[tuple[str, list[tuple[bytes, bytes]]]], "snapshot")


class Store(Queries, DepQueries, CalendarQueries):
    """The environment, its databases, apply, snapshots and digests; the
    reads are `Queries`' (engine/tables/queries.py)."""

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
        self._calendar_views: dict[tuple[str, str], calendars.View] = {}
        self._calendar_uses: dict[str, CalendarUse] = {}
        self._calendar_epochs: dict[str, int] = {}
        self.map_grows = map_bytes is None if map_grows is None else map_grows
        # Seconds each write transaction's commit took: LMDB writes the dirty
        # pages and fsyncs there (`sync=True`), so this is the fsync latency.
        self.txn_commit_seconds = Histogram()
        self.map_grown = 0  # times `grow_map` grew the map
        # The owners of jobs apply created or read, for every write
        # transaction's tables (`Reads.owner_of`).
        self.owners: dict[str, str] = {}
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
            with self.env.begin() as txn:
                self.calendars_read(txn)
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
            existing = datadir.check_tables(self.path, names, meta, TABLES, ADDED_TABLES)
            self.db = {name: self.env.open_db(name.encode(), txn=txn) for name in TABLES}
            self.buckets = [
                self.env.open_db(bucket_name(slot).encode(), txn=txn) for slot in range(limits.history_buckets)
            ]
            applied = txn.get(APPLIED_INDEX, db=self.db["meta"])
            if applied is not None and len(applied) != U64.size:
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
            complete_indexes(txn, self.db, self.buckets)
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
            raw = txn.get(APPLIED_INDEX, db=self.db["meta"])
        return 0 if raw is None else U64.unpack(raw)[0]

    def stamp_ms(self) -> int:
        """The highest command stamp applied (UNIX ms; 0 for none): a node's
        clock starts from it (clock.py)."""
        with self.env.begin() as txn:
            raw = txn.get(STAMP, db=self.db["meta"])
        return 0 if raw is None else U64.unpack(raw)[0]

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
        raw = txn.get(APPLIED_INDEX, db=self.db["meta"])
        applied = 0 if raw is None else U64.unpack(raw)[0]
        t = Tables(txn, self.db, self.buckets, self.owners)
        if index <= applied:
            return [errors.Conflict("already applied")] * len(commands), t.changes
        assert index == applied + 1, f"entry {index} after applied {applied}: a gap"
        raw = txn.get(STAMP, db=self.db["meta"])
        stored_ms = stamp_ms = 0 if raw is None else U64.unpack(raw)[0]
        outcomes = []
        for command in commands:
            outcomes.append(apply(t, command))
            # The highest stamp, carried in the tables: the floor of the
            # clock of whichever node leads next (clock.py).
            at_ms = getattr(command, "at_ms", 0)
            if at_ms > stamp_ms:
                stamp_ms = at_ms
        t.flush()
        txn.put(APPLIED_INDEX, U64.pack(index), db=self.db["meta"])
        if stamp_ms != stored_ms:
            txn.put(STAMP, U64.pack(stamp_ms), db=self.db["meta"])
        t.changes.stamp_ms = stamp_ms
        if t.changes.calendar_jobs or t.changes.calendar_epochs:
            self.calendars_applied(t.changes.calendar_jobs, t.changes.calendar_epochs)
        return outcomes, t.changes

    # -- snapshots (a cluster's log compaction) -------------------------------

    def snapshot_data(self) -> tuple[int, bytes]:
        """Every table at one applied index, from one read transaction, so the
        copy is consistent whatever is applied meanwhile: (index, data)."""
        with self._remap, self.env.begin() as txn:
            raw = txn.get(APPLIED_INDEX, db=self.db["meta"])
            index = 0 if raw is None else U64.unpack(raw)[0]
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
        txn.put(APPLIED_INDEX, U64.pack(index), db=self.db["meta"])
        complete_indexes(txn, self.db, self.buckets)  # a snapshot of a version without some index
        self.calendars_read(txn)

    def digest(self, leave_out: Collection[str] = ()) -> tuple[int, str]:
        """(applied index, SHA-256 of every table at it but those named in
        `leave_out`): equal on replicas that applied the same entries. The
        recorded apply logs (tests/engine/apply_log.py) leave out the
        tables added after they were recorded."""
        sha = hashlib.sha256()
        with self._remap, self.env.begin() as txn:
            raw = txn.get(APPLIED_INDEX, db=self.db["meta"])
            index = 0 if raw is None else U64.unpack(raw)[0]
            for name, db in self.db.items():
                if name in leave_out or (name in HASHED_WHEN_USED and not txn.stat(db)["entries"]):
                    continue  # as the digest of a version without the table
                sha.update(name.encode() + b"\0")
                for key, value in txn.cursor(db=db):
                    sha.update(U64.pack(len(key)) + key + U64.pack(len(value)) + value)
        return index, sha.hexdigest()
