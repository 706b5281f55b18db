"""The core's view of its log: the stable part in Storage, then the unstable
tail (entries and a received snapshot handed to the application in a Ready
but not yet persisted)."""

from __future__ import annotations

from .storage import Storage, _limit_bytes
from .types import Entry, Snapshot


class RaftLog:
    def __init__(self, storage: Storage, committed: int, applied: int) -> None:
        self.storage = storage
        # A snapshot received from the leader and not yet persisted. While it
        # is set, the storage's entries are stale and are never read.
        self.pending_snapshot: Snapshot | None = None
        # unstable[k] has index unstable_offset + k. Stored entries at or after
        # unstable_offset may be stale (about to be truncated) and are never read.
        self.unstable: list[Entry] = []
        self.unstable_offset = storage.last_index() + 1
        self.committed = committed
        self.applied = applied
        assert self.applied <= self.committed
        assert self.committed <= self.last_index()

    def snapshot_index(self) -> int:
        if self.pending_snapshot is not None:
            return self.pending_snapshot.meta.index
        return self.storage.first_index() - 1

    def first_index(self) -> int:
        return self.snapshot_index() + 1

    def last_index(self) -> int:
        if self.unstable:
            return self.unstable_offset + len(self.unstable) - 1
        if self.pending_snapshot is not None:
            return self.pending_snapshot.meta.index
        return self.storage.last_index()

    def last_term(self) -> int:
        term = self.term(self.last_index())
        assert term is not None
        return term

    def term(self, index: int) -> int | None:
        """Term at index, or None if compacted away or beyond the log."""
        k = index - self.unstable_offset
        if k >= 0:
            # With an empty tail, unstable_offset == last_index() + 1.
            return self.unstable[k].term if k < len(self.unstable) else None
        if self.pending_snapshot is not None:
            if index == self.pending_snapshot.meta.index:
                return self.pending_snapshot.meta.term
            return None
        if index < self.storage.first_index() - 1 or index > self.storage.last_index():
            return None
        return self.storage.term(index)

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: the other log is at least as up to date as ours."""
        my_last_term = self.last_term()
        if last_term != my_last_term:
            return last_term > my_last_term
        return last_index >= self.last_index()

    def slice(self, lo: int, hi: int, bytes_max: int) -> list[Entry]:
        """Entries lo .. hi-1 (lo >= first_index, hi <= last_index + 1)."""
        assert lo >= self.first_index()
        assert hi <= self.last_index() + 1
        if lo >= hi:
            return []
        out: list[Entry] = []
        if lo < self.unstable_offset:
            stable_hi = min(hi, self.unstable_offset)
            out = self.storage.entries(lo, stable_hi, bytes_max)
            if len(out) < stable_hi - lo or hi <= self.unstable_offset:
                return out
        start = max(lo, self.unstable_offset) - self.unstable_offset
        tail = self.unstable[start : hi - self.unstable_offset]
        if not out:
            return _limit_bytes(tail, bytes_max)
        return _limit_bytes(out + tail, bytes_max)

    def append(self, entries: list[Entry]) -> None:
        """Leader append: entries follow the last index directly."""
        assert entries[0].index == self.last_index() + 1
        self.unstable.extend(entries)

    def maybe_append(
        self, prev_index: int, prev_term: int, entries: list[Entry]
    ) -> tuple[int, int] | None:
        """Follower append (Raft §5.3). Returns (last new index, first index
        rewritten or 0), or None if the log does not contain prev."""
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        for k, entry in enumerate(entries):
            if self.term(entry.index) != entry.term:
                self._truncate_and_append(entries[k:])
                return last_new, entry.index
        return last_new, 0

    def _truncate_and_append(self, entries: list[Entry]) -> None:
        first = entries[0].index
        # Log Matching: a committed entry is never rewritten.
        assert first > self.committed, "truncating a committed entry"
        end = self.unstable_offset + len(self.unstable)
        if first == end:
            self.unstable.extend(entries)
        elif first <= self.unstable_offset:
            self.unstable_offset = first
            self.unstable = list(entries)
        else:
            del self.unstable[first - self.unstable_offset :]
            self.unstable.extend(entries)

    def commit_to(self, index: int) -> bool:
        if index <= self.committed:
            return False
        assert index <= self.last_index(), "commit beyond the log"
        self.committed = index
        return True

    def next_committed(self, count_max: int) -> list[Entry]:
        lo = self.applied + 1
        hi = min(self.committed + 1, lo + count_max)
        if lo >= hi:
            return []
        return self.slice(lo, hi, 1 << 62)

    def applied_to(self, index: int) -> None:
        assert index <= self.committed
        assert index >= self.applied
        self.applied = index

    def stable_to(self, index: int, term: int) -> None:
        """The application persisted entries through index (of term)."""
        k = index - self.unstable_offset
        if 0 <= k < len(self.unstable) and self.unstable[k].term == term:
            del self.unstable[: k + 1]
            self.unstable_offset = index + 1

    def stable_snapshot_to(self, index: int) -> None:
        if self.pending_snapshot is not None and self.pending_snapshot.meta.index == index:
            self.pending_snapshot = None

    def restore(self, snapshot: Snapshot) -> None:
        index = snapshot.meta.index
        assert index > self.committed
        self.pending_snapshot = snapshot
        self.unstable = []
        self.unstable_offset = index + 1
        self.committed = index
