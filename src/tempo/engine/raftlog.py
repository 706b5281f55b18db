"""The Raft log and hard state of a cluster node, in the node's LMDB
environment beside the state tables (docs/design.md "Data").

`RaftLog` is the `tempo.raft.Storage` the consensus core reads through. Its
write side works inside a write transaction the replica opens with
`Store.write`, so one Ready's log entries, hard state and applied entries are
one transaction and one fsync. The in-memory mirror (terms, the snapshot, a
tail of recent entries) changes only in `committed`, called on the trio thread
after that transaction is durable: until then the core still holds those
entries in its own unstable tail.

Snapshots live in files `snapshot/<index>.snap` (written and fsynced before the
transaction that records them), because the core sends them to followers in
chunks and a copy of every table does not belong in a table itself.
"""

import contextlib
import os
import struct
from collections import deque

import lmdb
import msgspec

from tempo.engine import datadir, records
from tempo.engine.store import Changes, Outcome, Store
from tempo.raft import (
    ConfState,
    Entry,
    EntryKind,
    HardState,
    Ready,
    Snapshot,
    SnapshotMeta,
    TermsBeside,
)

_U64 = struct.Struct(">Q")
_HARD_STATE = b"hard_state"
_SNAPSHOT_META = datadir.SNAPSHOT_META_KEY
# The newest entries stay in memory, for sending to followers without a read:
# at most this many, and this many payload bytes.
_TAIL_ENTRIES_MAX = 8192
_TAIL_BYTES_MAX = 64 << 20

_enc = msgspec.msgpack.Encoder()
# Stored raft state that does not decode (or breaks the types' bounds) is
# records.Corrupt: the node stops with a clear message.
_entry_dec: records.Decoder[Entry] = records.Decoder(Entry)
_hard_dec: records.Decoder[HardState] = records.Decoder(HardState)
_meta_dec: records.Decoder[SnapshotMeta] = records.Decoder(SnapshotMeta)

# What applying one committed entry gave: its commands' outcomes, and its
# changes for the dispatcher.
Applied = tuple[list[Outcome], Changes]


class RaftLog(TermsBeside):
    def __init__(self, store: Store, voters: tuple[int, ...]):
        """Opens (or founds, with `voters`, on first start) the raft state in
        `store`'s environment."""
        self.env = store.env
        self.log_db = store.env.open_db(b"raft_log")
        self.meta_db = store.env.open_db(datadir.RAFT_META_DB)
        self.dir = os.path.join(store.path, "snapshot")
        os.makedirs(self.dir, exist_ok=True)
        with self.env.begin(write=True) as txn:
            raw = txn.get(_SNAPSHOT_META, db=self.meta_db)
            if raw is None:
                # A founding member: the bootstrap config is a snapshot at
                # index 1, term 0, the same on every founder.
                meta = SnapshotMeta(1 if voters else 0, 0, ConfState(tuple(sorted(voters))))
                if store.applied_index() != 0:
                    raise ValueError(f"{store.path} holds a single node's data; a cluster node needs its own data dir")
                txn.put(_SNAPSHOT_META, _enc.encode(meta), db=self.meta_db)
                # The state tables start at the bootstrap snapshot's index.
                store.restore_in(txn, meta.index, b"")
            else:
                meta = _meta_dec.decode(raw)
            raw = txn.get(_HARD_STATE, db=self.meta_db)
            self._hard_state = HardState() if raw is None else _hard_dec.decode(raw)
            self._terms: list[int] = []
            self._tail: deque[Entry] = deque()
            self._tail_bytes = 0
            cur = txn.cursor(db=self.log_db)
            for key, value in cur:
                index = _U64.unpack(key)[0]
                entry = _entry_dec.decode(value)
                assert index == meta.index + 1 + len(self._terms), "a gap in the raft log"
                self._terms.append(entry.term)
                self._push_tail([entry])
        try:
            data = self._read_snapshot_file(meta.index) if meta.index > 1 else b""
        except OSError as exc:
            raise datadir.DataDirError(
                f"{store.path}: the raft snapshot at index {meta.index} cannot be read ({exc.strerror}): the data "
                "is damaged; restore the data directory from a backup, or replace this member with an empty one "
                '(docs/operations.md "Corrupt data")'
            ) from None
        self._snapshot = Snapshot(meta, data)
        self._remove_snapshot_files(keep=meta.index, keep_newer=False)

    # -- Storage (read side) ---------------------------------------------------

    # hard_state, snapshot, first_index, last_index and term: TermsBeside.

    def entries(self, lo: int, hi: int, bytes_max: int) -> list[Entry]:
        assert self.first_index() <= lo < hi <= self.last_index() + 1, f"entries({lo}, {hi}) outside the log"
        tail_first = self._tail[0].index if self._tail else hi
        out: list[Entry] = []
        size_bytes = 0
        if lo < tail_first:
            with self.env.begin() as txn:
                cur = txn.cursor(db=self.log_db)
                cur.set_key(_U64.pack(lo))
                for _, value in cur:
                    entry = _entry_dec.decode(value)
                    if entry.index >= min(hi, tail_first):
                        break
                    size_bytes += len(entry.data)
                    if size_bytes > bytes_max and out:
                        return out
                    out.append(entry)
            lo = tail_first
        for k in range(lo - tail_first, hi - tail_first):
            entry = self._tail[k]
            size_bytes += len(entry.data)
            if size_bytes > bytes_max and out:
                return out
            out.append(entry)
        return out

    # -- write side, inside the replica's transaction -----------------------------

    def append_in(
        self, txn: "lmdb.Transaction[bytes]", entries: list[Entry], installed: Snapshot | None = None
    ) -> None:
        """Appends, first dropping stored entries at and after the first new
        one. `installed`: the snapshot this same transaction installed
        (`install_in`), which the entries follow: the log is empty then,
        and the mirror does not know it until `committed`."""
        first = entries[0].index
        if installed is not None:
            assert first == installed.meta.index + 1, "append leaves a gap"
        else:
            assert self.first_index() <= first <= self.last_index() + 1, "append leaves a gap"
        cur = txn.cursor(db=self.log_db)
        if installed is None and first <= self.last_index() and cur.set_key(_U64.pack(first)):
            while cur.delete():
                pass
        cur.putmulti(((_U64.pack(e.index), _enc.encode(e)) for e in entries), append=True)

    def set_hard_state_in(self, txn: "lmdb.Transaction[bytes]", hard_state: HardState) -> None:
        txn.put(_HARD_STATE, _enc.encode(hard_state), db=self.meta_db)

    def write_snapshot_file(self, index: int, data: bytes) -> None:
        """Writes and fsyncs a snapshot's file (before the transaction that
        records it): a crash before that transaction leaves a stray file,
        removed at the next start."""
        path = self._path(index)
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            # A full disk: what was written of it goes, to leave the space.
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.replace(tmp, path)
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def install_in(self, txn: "lmdb.Transaction[bytes]", snapshot: Snapshot) -> None:
        """A snapshot from the leader replaces the whole log."""
        txn.drop(self.log_db, delete=False)
        txn.put(_SNAPSHOT_META, _enc.encode(snapshot.meta), db=self.meta_db)

    def compact_in(self, txn: "lmdb.Transaction[bytes]", snapshot: Snapshot) -> None:
        """A local snapshot: drop the entries it covers."""
        cur = txn.cursor(db=self.log_db)
        if cur.first():
            while cur.key() and _U64.unpack(cur.key())[0] <= snapshot.meta.index:
                if not cur.delete():
                    break
        txn.put(_SNAPSHOT_META, _enc.encode(snapshot.meta), db=self.meta_db)

    # -- after the transaction is durable (trio thread) ---------------------------

    def committed(
        self,
        hard_state: HardState | None,
        entries: list[Entry],
        snapshot: Snapshot | None,
        compaction: Snapshot | None,
    ) -> None:
        """Brings the mirror up to what the last transaction made durable."""
        if snapshot is not None:
            self._snapshot = snapshot
            self._terms = []
            self._tail.clear()
            self._tail_bytes = 0
        if compaction is not None and compaction.meta.index > self._snapshot.meta.index:
            cut = compaction.meta.index - self._snapshot.meta.index
            del self._terms[:cut]
            while self._tail and self._tail[0].index <= compaction.meta.index:
                self._tail_bytes -= len(self._tail.popleft().data)
            self._snapshot = compaction
        if entries:
            first = entries[0].index
            keep = first - self.first_index()
            del self._terms[keep:]
            while self._tail and self._tail[-1].index >= first:
                self._tail_bytes -= len(self._tail.pop().data)
            self._terms.extend(e.term for e in entries)
            self._push_tail(entries)
        if hard_state is not None:
            self._hard_state = hard_state
        if snapshot is not None or compaction is not None:
            self._remove_snapshot_files(keep=self._snapshot.meta.index, keep_newer=True)

    def _push_tail(self, entries: list[Entry]) -> None:
        self._tail.extend(entries)
        self._tail_bytes += sum(len(e.data) for e in entries)
        while len(self._tail) > _TAIL_ENTRIES_MAX or (self._tail_bytes > _TAIL_BYTES_MAX and len(self._tail) > 1):
            self._tail_bytes -= len(self._tail.popleft().data)

    # -- snapshot files ------------------------------------------------------------

    def _path(self, index: int) -> str:
        return os.path.join(self.dir, f"{index:020d}.snap")

    def _read_snapshot_file(self, index: int) -> bytes:
        with open(self._path(index), "rb") as f:
            return f.read()

    def _remove_snapshot_files(self, keep: int, keep_newer: bool) -> None:
        """Removes superseded files (and, at start, strays: any but `keep`);
        while running, a newer file may be a compaction not yet recorded."""
        for name in os.listdir(self.dir):
            stem = name.split(".", 1)[0]
            index = int(stem) if stem.isdigit() else -1
            if index == keep and name.endswith(".snap"):
                continue
            if keep_newer and (index > keep or name.endswith(".tmp")):
                continue  # a compaction being written, or written and not yet recorded
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.dir, name))


# -- one Ready, written (a worker thread) -------------------------------------------


def write_ready(store: Store, log: RaftLog, rd: Ready, *, apply: bool) -> list[Applied]:
    """Step 1 of a Ready (raft/types.py): the snapshot it installs (its file
    first), the compaction it records, its new entries and its hard state,
    in one transaction and one fsync; with its committed entries applied in
    that same transaction if `apply`. A write that does not fit raises
    `errors.StorageFault`, with nothing of it written. `log.committed` is
    the caller's, on the trio thread, once this returned."""
    if rd.snapshot is not None:
        try:
            log.write_snapshot_file(rd.snapshot.meta.index, rd.snapshot.data)
        except OSError as exc:
            fault = store.fault_of(exc)
            if fault is None:
                raise
            raise fault from None

    def work(txn: "lmdb.Transaction[bytes]") -> list[Applied]:
        if rd.snapshot is not None:
            log.install_in(txn, rd.snapshot)
            store.restore_in(txn, rd.snapshot.meta.index, rd.snapshot.data)
        if rd.compaction is not None:
            log.compact_in(txn, rd.compaction)
        if rd.entries:
            log.append_in(txn, rd.entries, rd.snapshot)
        if rd.hard_state is not None:
            log.set_hard_state_in(txn, rd.hard_state)
        return _apply_in(store, txn, rd.committed_entries) if apply else []

    return store.write(work)


def apply_entries(store: Store, entries: list[Entry]) -> list[Applied]:
    """Committed entries applied in one transaction of their own."""
    return store.write(lambda txn: _apply_in(store, txn, entries))


def _apply_in(store: Store, txn: "lmdb.Transaction[bytes]", entries: list[Entry]) -> list[Applied]:
    # A configuration entry's data is the core's; to the tables it is empty
    # (`Store.apply_in` records the index only).
    return [store.apply_in(txn, e.index, e.data if e.kind == EntryKind.NORMAL else b"") for e in entries]
