"""The stable log the core reads through, and an in-memory implementation.

The core never writes storage: the application persists what a Ready hands it
(see `Ready`) and only then calls `advance`. Everything a Storage returns must
therefore be durable, or at least be what the application will make durable
before any message depending on it is sent.
"""

from __future__ import annotations

from typing import Protocol

from .types import ConfState, Entry, HardState, Snapshot, SnapshotMeta


class Storage(Protocol):
    """Read side of a node's stable raft state.

    Indexes: the log holds entries first_index() .. last_index() inclusive;
    first_index() == snapshot().meta.index + 1 always, and the log may be empty
    (last_index() == first_index() - 1).
    """

    def hard_state(self) -> HardState:
        """The last persisted HardState (all zero on a fresh node)."""
        ...

    def snapshot(self) -> Snapshot:
        """The latest persisted snapshot. A founding node starts with one at
        index 1, term 0, holding the bootstrap voters; a joiner with one at
        index 0 and no voters."""
        ...

    def first_index(self) -> int:
        """Index of the first entry still in the log: snapshot index + 1."""
        ...

    def last_index(self) -> int:
        """Index of the last entry, or snapshot index when the log is empty."""
        ...

    def term(self, index: int) -> int:
        """Term of the entry at `index`, for snapshot index <= index <=
        last_index() (at the snapshot index: the snapshot's term)."""
        ...

    def entries(self, lo: int, hi: int, bytes_max: int) -> list[Entry]:
        """Entries lo .. hi-1, for first_index() <= lo < hi <= last_index() + 1.
        Stops early once the payload would exceed bytes_max, but always returns
        at least the first entry."""
        ...


class TermsBeside:
    """The index side of a Storage that keeps its hard state, its latest
    snapshot and the term of every entry after it (`_terms[k]`: the entry
    at snapshot index + 1 + k) in memory, so that `term()` is one list
    index. A durable log (tempo's on LMDB) and `MemoryStorage` share it."""

    _hard_state: HardState
    _snapshot: Snapshot
    _terms: list[int]

    def hard_state(self) -> HardState:
        return self._hard_state

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def first_index(self) -> int:
        return self._snapshot.meta.index + 1

    def last_index(self) -> int:
        return self._snapshot.meta.index + len(self._terms)

    def term(self, index: int) -> int:
        offset = self._snapshot.meta.index
        if index == offset:
            return self._snapshot.meta.term
        assert index > offset, f"term({index}) below the snapshot"
        assert index <= offset + len(self._terms), f"term({index}) beyond the log"
        return self._terms[index - offset - 1]


class MemoryStorage(TermsBeside):
    """A Storage in a Python list, plus the write side the application uses.

    Everything written is taken as durable at once; the simulator wraps it to
    tell synced writes from unsynced ones.
    """

    def __init__(self, voters: tuple[int, ...] = ()) -> None:
        """A fresh node. With `voters` it is a founding member: the bootstrap
        config is a snapshot at index 1 (term 0), shared by all founders, so
        a later joiner (created with no voters, snapshot at index 0) learns
        the config the only way it can, from the leader's snapshot."""
        self._hard_state = HardState()
        bootstrap_index = 1 if voters else 0
        conf = ConfState(tuple(sorted(voters)))
        self._snapshot = Snapshot(SnapshotMeta(bootstrap_index, 0, conf), b"")
        # _entries[k] has index snapshot index + 1 + k.
        self._entries: list[Entry] = []
        # Term per entry beside the entries, so term() is one list index.
        self._terms: list[int] = []

    # Read side (Storage): hard_state .. term from TermsBeside.

    def entries(self, lo: int, hi: int, bytes_max: int) -> list[Entry]:
        offset = self._snapshot.meta.index + 1
        assert lo >= offset, "entries() below the snapshot"
        assert hi <= offset + len(self._entries), "entries() beyond the log"
        assert lo < hi
        out = self._entries[lo - offset : hi - offset]
        return _limit_bytes(out, bytes_max)

    def copy(self) -> MemoryStorage:
        """An independent copy (entries are immutable, so lists are shallow-copied)."""
        other = MemoryStorage()
        other._hard_state = self._hard_state
        other._snapshot = self._snapshot
        other._entries = list(self._entries)
        other._terms = list(self._terms)
        return other

    # Write side.

    def set_hard_state(self, hard_state: HardState) -> None:
        self._hard_state = hard_state

    def append(self, entries: list[Entry]) -> None:
        """Append entries, first dropping any stored entry at or after the
        first new index (the core only sends a truncation it may make)."""
        if not entries:
            return
        first = entries[0].index
        offset = self._snapshot.meta.index + 1
        assert first >= offset, "append() below the snapshot"
        assert first <= offset + len(self._entries), "append() leaves a gap"
        del self._entries[first - offset :]
        del self._terms[first - offset :]
        self._entries.extend(entries)
        self._terms.extend(e.term for e in entries)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Install a snapshot received from the leader: the log is replaced."""
        assert snapshot.meta.index >= self._snapshot.meta.index
        self._snapshot = snapshot
        self._entries = []
        self._terms = []

    def compact(self, snapshot: Snapshot) -> None:
        """Save a local snapshot and drop the entries it covers."""
        index = snapshot.meta.index
        if index <= self._snapshot.meta.index:
            return
        assert index <= self.last_index(), "compact() beyond the log"
        assert self.term(index) == snapshot.meta.term
        cut = index - self._snapshot.meta.index
        del self._entries[:cut]
        del self._terms[:cut]
        self._snapshot = snapshot


def _limit_bytes(entries: list[Entry], bytes_max: int) -> list[Entry]:
    size_bytes = 0
    for k, entry in enumerate(entries):
        size_bytes += len(entry.data)
        if size_bytes > bytes_max and k > 0:
            return entries[:k]
    return entries
