"""The replica's log compaction: a snapshot of the store written beside
the raft log, deferred while a follower is sent one; a part of `Replica`
(node/replica.py), which sets up the state it names.
"""

import logging

import trio

from tempo import limits
from tempo.engine import (
    STORAGE_ERRNOS,
    RaftLog,
    Store,
)
from tempo.raft import (
    ProgressState,
    RawNode,
    Role,
)

log = logging.getLogger("tempo.replica")


class Compaction:
    """When and how the raft log is compacted."""

    # Set up by `Replica.__init__`.
    store: Store
    node: RawNode
    raft_log: RaftLog
    applied_index: int
    snapshot_entries: int
    _wake: trio.Event
    _nursery: trio.Nursery | None
    _snapshotting: bool
    _snapshot_after: float
    _snapshot_answered_at_s: float
    _transfers: dict[tuple[int, int], float]

    def _maybe_snapshot(self) -> None:
        behind = self.applied_index - self.raft_log.snapshot().meta.index
        if self._snapshotting or behind < self.snapshot_entries or trio.current_time() < self._snapshot_after:
            return
        if self._sending_snapshot() and behind < self.snapshot_entries + limits.snapshot_defer_entries_max:
            return
        self._snapshotting = True
        assert self._nursery is not None, "compaction is the trio driver's (`run`)"
        self._nursery.start_soon(self._snapshot)

    def _sending_snapshot(self) -> bool:
        """This node leads and a follower is being sent a snapshot, which
        answered a chunk (or started) less than `snapshot_transfer_idle_s` ago.

        Compacting meanwhile would drop the entries that follow the snapshot
        being sent: once the follower has installed it, it would need the
        next snapshot, and under steady writes it would chase snapshots for
        ever instead of coming back to replicating by log (etcd defers its
        compaction while it sends a snapshot, for the same reason)."""
        progress = self.node.progress if self.node.role == Role.LEADER else {}
        now_s = trio.current_time()
        transfers = {
            (peer, p.snapshot.meta.index)
            for peer, p in progress.items()
            if p.state == ProgressState.SNAPSHOT and p.snapshot is not None
        }
        self._transfers = {t: self._transfers.get(t, now_s) for t in transfers}
        if not self._transfers:
            return False
        moved_s = max(self._snapshot_answered_at_s, *self._transfers.values())
        return now_s - moved_s < limits.snapshot_transfer_idle_s

    async def _snapshot(self) -> None:
        try:
            index, data = await trio.to_thread.run_sync(self.store.snapshot_data)
            # The store may be a Ready ahead of the core (applied, not yet
            # advanced); such a copy waits for the next round.
            if self.raft_log.snapshot().meta.index < index <= self.node.log.applied:
                await trio.to_thread.run_sync(self.raft_log.write_snapshot_file, index, data)
                self.node.compact(index, data)
                self._wake.set()
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            # The log is kept until a snapshot fits; writes go on meanwhile.
            self._snapshot_after = trio.current_time() + limits.snapshot_retry_s
            log.warning("a snapshot does not fit on the disk (%s); trying again in %g s", exc, limits.snapshot_retry_s)
        finally:
            self._snapshotting = False
