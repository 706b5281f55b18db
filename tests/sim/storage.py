"""Simulated disk: writes land in a page cache until synced; a crash keeps the
durable state plus a random prefix (possibly empty) of the unsynced writes."""

from __future__ import annotations

import random

from tempo.raft import Entry, HardState, MemoryStorage, Snapshot


class SimStorage:
    """Storage for one node. `view` is what the running node reads (its page
    cache); `durable` is what survives a crash."""

    def __init__(self, voters: tuple[int, ...]) -> None:
        self.durable = MemoryStorage(voters)
        self.view = self.durable.copy()
        self._unsynced: list[tuple[str, object]] = []
        self.syncs = 0

    def append(self, entries: list[Entry]) -> None:
        self.view.append(entries)
        self._unsynced.append(("append", entries))

    def set_hard_state(self, hard_state: HardState) -> None:
        self.view.set_hard_state(hard_state)
        self._unsynced.append(("hard_state", hard_state))

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        self.view.apply_snapshot(snapshot)
        self._unsynced.append(("apply_snapshot", snapshot))

    def compact(self, snapshot: Snapshot) -> None:
        self.view.compact(snapshot)
        self._unsynced.append(("compact", snapshot))

    def sync(self) -> None:
        for op in self._unsynced:
            _replay(self.durable, op)
        self._unsynced.clear()
        self.syncs += 1

    def crash(self, rng: random.Random) -> int:
        """Lose the page cache; returns how many unsynced writes survived."""
        kept = rng.randrange(len(self._unsynced) + 1) if self._unsynced else 0
        for op in self._unsynced[:kept]:
            _replay(self.durable, op)
        self._unsynced.clear()
        self.view = self.durable.copy()
        return kept


def _replay(storage: MemoryStorage, op: tuple[str, object]) -> None:
    kind, arg = op
    if kind == "append":
        storage.append(arg)  # type: ignore[arg-type]
    elif kind == "hard_state":
        storage.set_hard_state(arg)  # type: ignore[arg-type]
    elif kind == "apply_snapshot":
        storage.apply_snapshot(arg)  # type: ignore[arg-type]
    elif kind == "compact":
        storage.compact(arg)  # type: ignore[arg-type]
    else:
        raise AssertionError(f"unknown storage op {kind}")
