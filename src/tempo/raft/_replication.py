"""Replication: what a leader sends (entries, heartbeats, snapshots in
chunks), what a follower does with it, and what a leader makes of the
answers (match indexes, the commit index, read confirmations); a part of
`RawNode` (_core.py), which sets up the state it names.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from . import limits
from ._conf import Configuration
from ._progress import Progress, ProgressState
from .errors import (
    NotLeader,
    ReadIndexDropped,
    TransferInProgress,
)
from .types import (
    NONE,
    AppendRequest,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
    ReadIndexRequest,
    ReadIndexResponse,
    ReadState,
    Role,
    Snapshot,
    SnapshotChunk,
    SnapshotMeta,
    SnapshotResponse,
    TimeoutNow,
)


class _ReadRequest:
    __slots__ = ("acks", "context", "index", "origin")

    def __init__(self, index: int, context: bytes, acks: set[int], origin: int) -> None:
        self.index = index
        self.context = context
        self.acks = acks
        # The node whose client asked: the leader itself or a forwarding follower.
        self.origin = origin


class Replication(Configuration):
    """The log from leader to followers, and the commit index."""

    # Set up by `RawNode.__init__`, or a method of another part.
    _bcast_pending: bool
    _become_follower: Callable[[int, int], None]
    _election_elapsed_ticks: int
    _msgs: list[Message]
    _quorum_size: Callable[[], int]
    _read_states: list[ReadState]
    _reads: deque[_ReadRequest]
    _reads_by_context: dict[bytes, _ReadRequest]
    _release_read: Callable[[_ReadRequest], None]
    _snapshot_receiving: tuple[SnapshotMeta, bytearray] | None
    _start_read: Callable[[bytes, int], None]
    _transferee: int
    _uncommitted: deque[tuple[int, int]]
    _uncommitted_bytes: int
    leader_id: int
    term: int

    def _send(self, m: Message) -> None:
        self._msgs.append(m)

    def _flush(self) -> None:
        if self._bcast_pending:
            self._bcast_pending = False
            if self.role == Role.LEADER:
                self._bcast_append(allow_empty=False)

    def _bcast_append(self, allow_empty: bool) -> None:
        for peer, progress in self.progress.items():
            self._send_append(peer, progress, allow_empty)

    def _bcast_heartbeat(self, context: bytes) -> None:
        committed = self.log.committed
        for peer, progress in self.progress.items():
            # Never tell a follower to commit past what it is known to match.
            commit = min(progress.match, committed)
            self._send(Heartbeat(self.term, self.id, peer, commit, context, committed))

    def _send_append(self, peer: int, progress: Progress, allow_empty: bool) -> None:
        if progress.paused():
            return
        log = self.log
        prev_index = progress.next - 1
        prev_term = log.term(prev_index)
        if prev_term is None:
            assert prev_index < log.first_index(), "progress.next beyond the log"
            self._start_snapshot(peer, progress)
            return
        last_index = log.last_index()
        hi = min(last_index + 1, progress.next + limits.ENTRIES_PER_MESSAGE_MAX)
        entries = log.slice(progress.next, hi, limits.MESSAGE_BYTES_MAX)
        probing = progress.state == ProgressState.PROBE
        if not entries and not allow_empty and not probing:
            return
        self._send(AppendRequest(self.term, self.id, peer, prev_index, prev_term, entries, log.committed))
        if probing:
            progress.probe_sent = True
        elif entries:
            last = entries[-1].index
            progress.next = last + 1
            progress.inflight.append(last)

    def _start_snapshot(self, peer: int, progress: Progress) -> None:
        log = self.log
        snapshot = log.pending_snapshot or log.storage.snapshot()
        assert snapshot.meta.index >= progress.next - 1
        progress.become_snapshot(snapshot)
        self._send_snapshot_chunk(peer, progress)

    def _send_snapshot_chunk(self, peer: int, progress: Progress) -> None:
        snapshot = progress.snapshot
        assert snapshot is not None
        offset = progress.snapshot_offset
        data = snapshot.data[offset : offset + limits.SNAPSHOT_CHUNK_BYTES]
        done = offset + len(data) >= len(snapshot.data)
        progress.snapshot_elapsed_ticks = 0
        self._send(SnapshotChunk(self.term, self.id, peer, snapshot.meta, offset, data, done))

    def _follow(self, m: AppendRequest | Heartbeat | SnapshotChunk) -> None:
        if self.role != Role.FOLLOWER:
            self._become_follower(self.term, m.src)
        assert self.role == Role.FOLLOWER
        self.leader_id = m.src
        self._election_elapsed_ticks = 0

    def _on_append(self, m: AppendRequest) -> None:
        assert self.role != Role.LEADER or m.src == self.id, "two leaders in one term"
        self._follow(m)
        log = self.log
        if m.prev_index < log.committed:
            self._send(AppendResponse(self.term, self.id, m.src, log.committed))
            return
        result = log.maybe_append(m.prev_index, m.prev_term, m.entries)
        if result is None:
            hint_index = self._find_conflict(min(m.prev_index, log.last_index()), m.prev_term)
            hint_term = log.term(hint_index)
            assert hint_term is not None
            self._send(
                AppendResponse(
                    self.term, self.id, m.src, m.prev_index, True, hint_index, hint_term
                )
            )
            return
        last_new, rewritten = result
        if rewritten:
            self._truncate_conf(rewritten)
            self._apply_conf_entries(rewritten, m.entries[rewritten - m.prev_index - 1 :])
        log.commit_to(min(m.commit, last_new))
        self._send(AppendResponse(self.term, self.id, m.src, last_new))

    def _on_heartbeat(self, m: Heartbeat) -> None:
        assert self.role != Role.LEADER, "two leaders in one term"
        self._follow(m)
        self.log.commit_to(m.commit)
        self._send(HeartbeatResponse(self.term, self.id, m.src, m.context))

    def _on_snapshot_chunk(self, m: SnapshotChunk) -> None:
        assert self.role != Role.LEADER, "two leaders in one term"
        self._follow(m)
        meta = m.meta
        if meta.index <= self.log.committed:
            self._send(SnapshotResponse(self.term, self.id, m.src, meta.index, m.offset, done=True))
            return
        receiving = self._snapshot_receiving
        if m.offset == 0:
            receiving = (meta, bytearray())
        if receiving is None or receiving[0] != meta or len(receiving[1]) != m.offset:
            expected = len(receiving[1]) if receiving is not None and receiving[0] == meta else 0
            self._send(SnapshotResponse(self.term, self.id, m.src, meta.index, expected))
            return
        receiving[1].extend(m.data)
        if not m.done:
            self._snapshot_receiving = receiving
            self._send(SnapshotResponse(self.term, self.id, m.src, meta.index, len(receiving[1])))
            return
        self._snapshot_receiving = None
        self._install_snapshot(Snapshot(meta, bytes(receiving[1])))
        self._send(SnapshotResponse(self.term, self.id, m.src, meta.index, m.offset, done=True))

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        meta = snapshot.meta
        if self.log.match_term(meta.index, meta.term):
            # We hold the entries already: only the commit index moves.
            self.log.commit_to(meta.index)
            return
        self.log.restore(snapshot)
        self._conf_history = [(meta.index, meta.conf.voters)]

    def _on_append_response(self, m: AppendResponse) -> None:
        progress = self.progress.get(m.src)
        if self.role != Role.LEADER or progress is None:
            return
        progress.recent_active = True
        if m.reject:
            self._on_append_rejected(m, progress)
            return
        progress.probe_sent = False
        updated = progress.update(m.index)
        if progress.state == ProgressState.PROBE:
            progress.become_replicate()
        elif progress.state == ProgressState.SNAPSHOT:
            assert progress.snapshot is not None
            if progress.match >= progress.snapshot.meta.index:
                progress.become_probe()
        else:
            progress.free_to(m.index)
        if updated and self._maybe_commit():
            self._bcast_append(allow_empty=True)
        else:
            self._send_append(m.src, progress, allow_empty=False)
        if m.src == self._transferee and progress.match == self.log.last_index():
            self._send(TimeoutNow(self.term, self.id, m.src))

    def _on_append_rejected(self, m: AppendResponse, progress: Progress) -> None:
        if progress.state == ProgressState.SNAPSHOT or m.index <= progress.match:
            return  # stale
        if progress.state == ProgressState.PROBE and m.index != progress.next - 1:
            return  # an answer to an older probe
        # Probing lower than needed is always safe; the hint may point past
        # our snapshot if we compacted since sending.
        conflict = min(self._find_conflict(m.hint_index, m.hint_term), m.index - 1)
        progress.become_probe()
        progress.next = max(progress.match + 1, conflict + 1)
        assert progress.next <= m.index, "a rejection must move next back"
        self._send_append(m.src, progress, allow_empty=True)

    def _find_conflict(self, index: int, term: int) -> int:
        """The last index <= index whose term is <= term. A follower answers a
        rejected AppendRequest with it (for the leader's prev_term), and the
        leader applies it again to the follower's hint, so a whole term of
        mismatching entries is skipped per round trip (dissertation §5.3)."""
        log = self.log
        index = min(index, log.last_index())
        floor = log.snapshot_index()
        while index > floor:
            entry_term = log.term(index)
            assert entry_term is not None
            if entry_term <= term:
                return index
            index -= 1
        floor_term = log.term(floor)
        if index == floor and floor_term is not None and floor_term > term:
            # Only the leader gets here: the follower differs at our snapshot
            # index, so it needs the snapshot.
            return floor - 1
        return index

    def _on_heartbeat_response(self, m: HeartbeatResponse) -> None:
        progress = self.progress.get(m.src)
        if self.role != Role.LEADER or progress is None:
            return
        progress.recent_active = True
        progress.probe_sent = False
        if progress.state == ProgressState.REPLICATE and progress.paused():
            # A lost AppendRequest must not stall the window forever.
            progress.inflight.popleft()
        if progress.match < self.log.last_index():
            # Even with nothing new to send: an empty AppendRequest after a
            # lost one is rejected, which moves the follower back to probing.
            self._send_append(m.src, progress, allow_empty=True)
        if m.context:
            self._on_read_ack(m.src, m.context)

    def _on_read_ack(self, src: int, context: bytes) -> None:
        request = self._reads_by_context.get(context)
        if request is None:
            return
        request.acks.add(src)
        voters = self.voters
        if sum(1 for v in request.acks if v in voters) < self._quorum_size():
            return
        # Reads are acknowledged in order: a quorum for this one confirms
        # leadership for every earlier one too.
        while self._reads:
            done = self._reads.popleft()
            del self._reads_by_context[done.context]
            self._release_read(done)
            if done is request:
                break

    def _on_read_index_request(self, m: ReadIndexRequest) -> None:
        if self.role != Role.LEADER:
            return  # dropped: the follower's client times out and retries
        try:
            self._start_read(m.context, m.src)
        except ReadIndexDropped:
            return

    def _on_read_index_response(self, m: ReadIndexResponse) -> None:
        self._read_states.append(ReadState(m.index, m.context))

    def _on_snapshot_response(self, m: SnapshotResponse) -> None:
        progress = self.progress.get(m.src)
        if self.role != Role.LEADER or progress is None:
            return
        progress.recent_active = True
        snapshot = progress.snapshot
        if progress.state != ProgressState.SNAPSHOT or snapshot is None:
            return
        if snapshot.meta.index != m.index:
            return
        if m.done:
            progress.update(m.index)
            progress.become_probe()
            self._send_append(m.src, progress, allow_empty=True)
        elif m.offset > progress.snapshot_offset:
            # Progress: send the next chunk now (only progress triggers a send,
            # so duplicated responses cannot multiply the chunk stream).
            progress.snapshot_offset = m.offset
            self._send_snapshot_chunk(m.src, progress)
        else:
            # The follower lost or skipped data: resume there on the retry tick.
            progress.snapshot_offset = m.offset

    def _self_persisted_index(self) -> int:
        log = self.log
        if log.pending_snapshot is not None:
            return 0
        return log.unstable_offset - 1

    def _maybe_commit(self) -> bool:
        """Raft §5.3-5.4: commit the highest index stored on a quorum, but
        only through an entry of the current term (Figure 8)."""
        log = self.log
        matches = []
        for voter in self.voters:
            if voter == self.id:
                matches.append(self._self_persisted_index())
            else:
                matches.append(self.progress[voter].match)
        matches.sort(reverse=True)
        index = matches[len(matches) // 2]
        if index <= log.committed:
            return False
        if not self._commits_through(index):
            return False
        log.commit_to(index)
        uncommitted = self._uncommitted
        while uncommitted and uncommitted[0][0] <= index:
            self._uncommitted_bytes -= uncommitted.popleft()[1]
        if self.id not in self.voters and self._conf_history[-1][0] <= index:
            # Our removal committed: step down (dissertation §4.2.2).
            self._become_follower(self.term, NONE)
        return True

    def _commits_through(self, index: int) -> bool:
        """Whether a quorum's match at `index` commits it: only an entry of
        the current term commits by counting replicas; older ones commit
        with it (Raft §5.4.2, Figure 8)."""
        return self.log.term(index) == self.term

    def _check_proposable(self) -> None:
        if self.role != Role.LEADER:
            raise NotLeader(self.leader_id)
        if self._transferee != NONE:
            raise TransferInProgress(f"transferring to {self._transferee}")


# The messages this part handles, each filed under its type (RawNode.step
# dispatches through this table and elections', _core.py).
REPLICATION_HANDLERS: dict[type[Message], Callable[[Replication, Any], None]] = {
    AppendRequest: Replication._on_append,
    AppendResponse: Replication._on_append_response,
    Heartbeat: Replication._on_heartbeat,
    HeartbeatResponse: Replication._on_heartbeat_response,
    SnapshotChunk: Replication._on_snapshot_chunk,
    SnapshotResponse: Replication._on_snapshot_response,
    ReadIndexRequest: Replication._on_read_index_request,
    ReadIndexResponse: Replication._on_read_index_response,
}
