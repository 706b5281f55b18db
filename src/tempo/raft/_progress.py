"""What a leader knows about one follower's log (Raft §5.3, etcd-style states)."""

from __future__ import annotations

import enum
from collections import deque

from . import limits
from .types import Snapshot


class ProgressState(enum.IntEnum):
    # One AppendRequest at a time until the follower's match is found.
    PROBE = 0
    # Match known: stream entries optimistically, up to INFLIGHT_MESSAGES_MAX.
    REPLICATE = 1
    # The follower needs entries we compacted: send the snapshot in chunks.
    SNAPSHOT = 2


class Progress:
    __slots__ = (
        "inflight",
        "match",
        "next",
        "probe_sent",
        "recent_active",
        "snapshot",
        "snapshot_elapsed_ticks",
        "snapshot_offset",
        "state",
    )

    def __init__(self, next_index: int) -> None:
        # Invariant: match < next.
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        # Last index of each AppendRequest in flight (replicate state only).
        self.inflight: deque[int] = deque()
        # Heard from since the last CheckQuorum round.
        self.recent_active = False
        self.snapshot: Snapshot | None = None
        self.snapshot_offset = 0
        self.snapshot_elapsed_ticks = 0

    def paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.probe_sent
        if self.state == ProgressState.REPLICATE:
            return len(self.inflight) >= limits.INFLIGHT_MESSAGES_MAX
        return True

    def update(self, index: int) -> bool:
        """The follower matches through index; True if that is news."""
        if index <= self.match:
            return False
        self.match = index
        self.next = max(self.next, index + 1)
        return True

    def become_probe(self) -> None:
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight.clear()
        self.next = self.match + 1
        self.snapshot = None

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.inflight.clear()
        self.next = self.match + 1

    def become_snapshot(self, snapshot: Snapshot) -> None:
        self.state = ProgressState.SNAPSHOT
        self.inflight.clear()
        self.snapshot = snapshot
        self.snapshot_offset = 0
        self.snapshot_elapsed_ticks = 0

    def free_to(self, index: int) -> None:
        inflight = self.inflight
        while inflight and inflight[0] <= index:
            inflight.popleft()
