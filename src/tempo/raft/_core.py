"""RawNode: the Raft consensus core as a pure state machine.

Inputs: tick(), step(message), propose(data), read_index(context),
transfer_leader(target), propose_conf_change(change), compact(index, data).
Output: ready() -> Ready, handled by the application, then advance(ready).
No I/O, no clock (time is ticks), no global random (an injected Random).

Config changes follow the Raft dissertation §4.1: one server added or removed
at a time, each node uses the latest config in its log (committed or not), a
leader appends a change only after the previous one committed and after an
entry of its own term committed.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable
from typing import Any

from . import limits
from ._log import RaftLog
from ._progress import Progress, ProgressState
from .errors import (
    ConfChangeRejected,
    NotLeader,
    ProposalDropped,
    ReadIndexDropped,
    TransferInProgress,
    UncommittedBytesExceeded,
)
from .storage import Storage
from .types import (
    CONF_CHANGE_DECODER,
    MESSAGE_ENCODER,
    NONE,
    AppendRequest,
    AppendResponse,
    ConfChange,
    ConfChangeOp,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    Message,
    ReadIndexRequest,
    ReadIndexResponse,
    ReadState,
    Ready,
    Role,
    Snapshot,
    SnapshotChunk,
    SnapshotMeta,
    SnapshotResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)


@dataclasses.dataclass(frozen=True)
class Config:
    node_id: int
    election_ticks: int = 10
    heartbeat_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    # The application's applied index on restart (state machine durable
    # through it, entries through it still stored or in the snapshot); at
    # least the storage snapshot's index is assumed.
    applied: int = 0

    def __post_init__(self) -> None:
        assert self.node_id > 0, "node_id must be positive"
        assert self.heartbeat_ticks >= 1
        assert self.election_ticks > self.heartbeat_ticks


class _ReadRequest:
    __slots__ = ("acks", "context", "index", "origin")

    def __init__(self, index: int, context: bytes, acks: set[int], origin: int) -> None:
        self.index = index
        self.context = context
        self.acks = acks
        # The node whose client asked: the leader itself or a forwarding follower.
        self.origin = origin


class RawNode:
    def __init__(self, config: Config, storage: Storage, rng: random.Random) -> None:
        self.config = config
        self.id = config.node_id
        self._rng = rng
        hard_state = storage.hard_state()
        snapshot = storage.snapshot()
        applied = max(config.applied, snapshot.meta.index)
        assert applied <= storage.last_index(), "applied beyond the stored log"
        # Only committed entries are ever applied, so the applied index is a
        # commit index too, even if the last commit-only HardState was lost.
        committed = max(hard_state.commit, applied)
        self.log = RaftLog(storage, committed, applied)
        self.term = hard_state.term
        self.vote = hard_state.vote
        self.role = Role.FOLLOWER
        self.leader_id = NONE
        # (index, voters) of every config in the log after the snapshot's,
        # oldest first; the last one is in force (dissertation §4.1).
        self._conf_history: list[tuple[int, tuple[int, ...]]] = [
            (snapshot.meta.index, snapshot.meta.conf.voters)
        ]
        self._scan_conf(self.log.first_index(), self.log.last_index() + 1)
        self.progress: dict[int, Progress] = {}
        self._votes: dict[int, bool] = {}
        self._msgs: list[Message] = []
        self._read_states: list[ReadState] = []
        self._reads: deque[_ReadRequest] = deque()
        self._reads_by_context: dict[bytes, _ReadRequest] = {}
        self._election_elapsed_ticks = 0
        self._heartbeat_elapsed_ticks = 0
        self._election_timeout_ticks = self._random_timeout()
        self._transferee = NONE
        self._transfer_elapsed_ticks = 0
        self._uncommitted: deque[tuple[int, int]] = deque()
        self._uncommitted_bytes = 0
        self._prev_hard_state = hard_state
        self._compaction: Snapshot | None = None
        self._bcast_pending = False
        self._snapshot_receiving: tuple[SnapshotMeta, bytearray] | None = None
        self._ready_out = False
        # Set by stop_campaigning: never promotable again.
        self._stopping = False

    # ----- public API -----

    @property
    def voters(self) -> tuple[int, ...]:
        return self._conf_history[-1][1]

    @property
    def conf_index(self) -> int:
        """Index of the config entry in force (the snapshot's if none since)."""
        return self._conf_history[-1][0]

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def tick(self) -> None:
        if self.role == Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def stop_campaigning(self) -> None:
        """This node is stopping: from now on it never campaigns (its election
        timeout passes, a TimeoutNow is ignored), so it never takes leadership
        again. It still votes and replicates, so the others keep a quorum."""
        self._stopping = True
        if self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE):
            # An election it started is given up: later answers are not counted.
            self._become_follower(self.term, NONE)

    def campaign(self) -> None:
        """Start an election now, as if the election timeout had fired."""
        if self.role != Role.LEADER:
            self._campaign(transfer=False)

    def propose(self, data: bytes) -> int:
        """Append data to the log; returns its index. Raises ProposalDropped."""
        self._check_proposable()
        size_bytes = len(data)
        if (
            self._uncommitted_bytes > 0
            and self._uncommitted_bytes + size_bytes > limits.UNCOMMITTED_BYTES_MAX
        ):
            raise UncommittedBytesExceeded(f"uncommitted_bytes={self._uncommitted_bytes}")
        index = self.log.last_index() + 1
        self.log.append([Entry(self.term, index, EntryKind.NORMAL, data)])
        self._uncommitted.append((index, size_bytes))
        self._uncommitted_bytes += size_bytes
        # Broadcast lazily in ready(): proposals arriving together share messages.
        self._bcast_pending = True
        return index

    def propose_conf_change(self, change: ConfChange) -> int:
        self._check_proposable()
        if self._conf_history[-1][0] > self.log.committed:
            raise ConfChangeRejected("a config change is pending")
        if self.log.term(self.log.committed) != self.term:
            raise ConfChangeRejected("no entry of this term committed yet")
        voters = set(self.voters)
        if change.op == ConfChangeOp.ADD and change.node_id in voters:
            raise ConfChangeRejected(f"node {change.node_id} is a voter already")
        if change.op == ConfChangeOp.REMOVE and (change.node_id not in voters or len(voters) == 1):
            raise ConfChangeRejected(f"cannot remove node {change.node_id}")
        index = self.log.last_index() + 1
        data = MESSAGE_ENCODER.encode(change)
        self.log.append([Entry(self.term, index, EntryKind.CONF_CHANGE, data)])
        self._apply_conf_entries(index, [self.log.slice(index, index + 1, 1 << 62)[0]])
        self._bcast_pending = True
        return index

    def read_index(self, context: bytes) -> None:
        """Request a linearizable read (Raft dissertation §6.4); a ReadState
        with this context appears in a later Ready once the leader confirmed
        its leadership. A follower forwards the request to its leader; if
        either loses it, no ReadState ever comes (the client times out)."""
        if self.role != Role.LEADER:
            if self.leader_id == NONE:
                raise ReadIndexDropped("no leader known")
            self._send(ReadIndexRequest(self.term, self.id, self.leader_id, context))
            return
        self._start_read(context, self.id)

    def _start_read(self, context: bytes, origin: int) -> None:
        if self.log.term(self.log.committed) != self.term:
            raise ReadIndexDropped("no entry of this term committed yet")
        if len(self._reads) >= limits.READ_REQUESTS_MAX:
            raise ReadIndexDropped("too many pending reads")
        if context in self._reads_by_context:
            raise ReadIndexDropped("read context already pending")
        request = _ReadRequest(self.log.committed, context, {self.id}, origin)
        if self._leads_alone():
            self._release_read(request)
            return
        self._reads.append(request)
        self._reads_by_context[context] = request
        self._bcast_heartbeat(context)

    def _leads_alone(self) -> bool:
        """A single voter is its own quorum: its leadership needs no
        confirmation from the others before it answers a read (§6.4)."""
        return self._quorum_size() == 1 and self.id in self.voters

    def _release_read(self, request: _ReadRequest) -> None:
        if request.origin == self.id:
            self._read_states.append(ReadState(request.index, request.context))
        else:
            self._send(
                ReadIndexResponse(
                    self.term, self.id, request.origin, request.context, request.index
                )
            )

    def transfer_leader(self, target: int) -> None:
        if self.role != Role.LEADER:
            raise NotLeader(self.leader_id)
        if target == self.id or target == self._transferee:
            return
        progress = self.progress.get(target)
        if progress is None:
            raise ProposalDropped(f"transfer target {target} is not a voter")
        self._transferee = target
        self._transfer_elapsed_ticks = 0
        if progress.match == self.log.last_index():
            self._send(TimeoutNow(self.term, self.id, target))
        else:
            self._send_append(target, progress, allow_empty=True)

    def compact(self, index: int, data: bytes) -> None:
        """The application's state through `index` is `data`: save it as a
        snapshot and drop the log it covers (in the next Ready)."""
        assert index <= self.log.applied, "compact() beyond applied"
        if index <= self.log.snapshot_index():
            return
        term = self.log.term(index)
        assert term is not None
        conf = ConfState(self._conf_at(index))
        self._compaction = Snapshot(SnapshotMeta(index, term, conf), data)

    def has_ready(self) -> bool:
        self._flush()
        log = self.log
        return bool(
            self._msgs
            or log.unstable
            or log.pending_snapshot is not None
            or self._compaction is not None
            or self._read_states
            or (log.committed > log.applied and log.pending_snapshot is None)
            or self.hard_state() != self._prev_hard_state
        )

    def ready(self) -> Ready:
        assert not self._ready_out, "ready() twice without advance()"
        self._flush()
        log = self.log
        hard_state = self.hard_state()
        prev = self._prev_hard_state
        changed = hard_state != prev
        entries = list(log.unstable)
        snapshot = log.pending_snapshot
        committed = [] if snapshot is not None else log.next_committed(limits.COMMITTED_ENTRIES_PER_READY_MAX)
        must_sync = bool(
            entries or snapshot is not None or hard_state.term != prev.term or hard_state.vote != prev.vote
        )
        msgs, self._msgs = self._msgs, []
        reads, self._read_states = self._read_states, []
        self._ready_out = True
        return Ready(
            hard_state=hard_state if changed else None,
            entries=entries,
            must_sync=must_sync,
            messages=msgs,
            committed_entries=committed,
            snapshot=snapshot,
            compaction=self._compaction,
            read_states=reads,
            leader_id=self.leader_id,
            role=self.role,
        )

    def advance(self, ready: Ready) -> None:
        assert self._ready_out, "advance() without ready()"
        self._ready_out = False
        log = self.log
        if ready.snapshot is not None:
            log.stable_snapshot_to(ready.snapshot.meta.index)
            log.applied_to(max(log.applied, ready.snapshot.meta.index))
        if ready.entries:
            last = ready.entries[-1]
            log.stable_to(last.index, last.term)
        if ready.committed_entries:
            log.applied_to(ready.committed_entries[-1].index)
        if ready.hard_state is not None:
            self._prev_hard_state = ready.hard_state
        if ready.compaction is not None and ready.compaction is self._compaction:
            self._compaction = None
            self._trim_conf_history(ready.compaction.meta.index)
        if self.role == Role.LEADER and self._maybe_commit():
            self._bcast_append(allow_empty=True)

    def step(self, m: Message) -> None:
        if m.term > self.term:
            if not self._step_higher_term(m):
                return
        elif m.term < self.term:
            self._step_lower_term(m)
            return
        handler = _HANDLERS[type(m)]
        handler(self, m)

    # ----- terms and roles -----

    def _step_higher_term(self, m: Message) -> bool:
        """Handle a message from a later term; False means drop it."""
        if isinstance(m, VoteRequest):
            if self._in_lease() and not m.transfer:
                # CheckQuorum's leader lease: we heard from a live leader less
                # than an election timeout ago, so this candidate is disruptive.
                return False
            if not m.pre_vote:
                self._become_follower(m.term, NONE)
            return True
        if isinstance(m, VoteResponse) and m.pre_vote and m.granted:
            # A granted pre-vote carries the term we would campaign in.
            return True
        if isinstance(m, AppendRequest | Heartbeat | SnapshotChunk):
            self._become_follower(m.term, m.src)
        else:
            self._become_follower(m.term, NONE)
        return True

    def _step_lower_term(self, m: Message) -> None:
        if isinstance(m, AppendRequest | Heartbeat | SnapshotChunk):
            # Tell a stale leader our term so it steps down; with PreVote and
            # CheckQuorum it would otherwise never learn it.
            self._send(HeartbeatResponse(self.term, self.id, m.src))
        elif isinstance(m, VoteRequest) and m.pre_vote:
            self._send(VoteResponse(self.term, self.id, m.src, granted=False, pre_vote=True))

    def _in_lease(self) -> bool:
        return (
            self.config.check_quorum
            and self.leader_id != NONE
            and self._election_elapsed_ticks < self.config.election_ticks
        )

    def _random_timeout(self) -> int:
        ticks = self.config.election_ticks
        return ticks + self._rng.randrange(ticks)

    def _reset(self, term: int) -> None:
        assert term >= self.term, "term never decreases"
        if term != self.term:
            self.term = term
            self.vote = NONE
        self.leader_id = NONE
        self._election_elapsed_ticks = 0
        self._heartbeat_elapsed_ticks = 0
        self._election_timeout_ticks = self._random_timeout()
        self._votes = {}
        self.progress = {}
        self._transferee = NONE
        self._reads.clear()
        self._reads_by_context.clear()
        self._uncommitted.clear()
        self._uncommitted_bytes = 0

    def _become_follower(self, term: int, leader_id: int) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id

    def _become_leader(self) -> None:
        assert self.role == Role.CANDIDATE
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader_id = self.id
        next_index = self.log.last_index() + 1
        for voter in self.voters:
            if voter != self.id:
                self.progress[voter] = Progress(next_index)
        # Raft §5.4.2 / §8: an entry of our term makes the earlier ones
        # committable and lets ReadIndex start.
        self.log.append([Entry(self.term, next_index)])
        self._bcast_append(allow_empty=True)

    def _promotable(self) -> bool:
        return not self._stopping and self.id in self.voters and self.log.pending_snapshot is None

    def _quorum_size(self) -> int:
        return len(self.voters) // 2 + 1

    def _campaign(self, transfer: bool) -> None:
        if not self._promotable():
            return
        if not self.config.pre_vote or transfer:
            self._start_real_campaign(transfer)
            return
        # PreVote (dissertation §9.6): ask first, without raising our term, so
        # a node that cannot win never disrupts the cluster.
        self._reset(self.term)
        self.role = Role.PRE_CANDIDATE
        self._votes = {self.id: True}
        if self._tally_votes(pre_vote=True):
            return
        self._send_vote_requests(self.term + 1, pre_vote=True, transfer=False)

    def _start_real_campaign(self, transfer: bool) -> None:
        self._reset(self.term + 1)
        self.role = Role.CANDIDATE
        self.vote = self.id
        self._votes = {self.id: True}
        if self._tally_votes(pre_vote=False):
            return
        self._send_vote_requests(self.term, pre_vote=False, transfer=transfer)

    def _send_vote_requests(self, term: int, pre_vote: bool, transfer: bool) -> None:
        last_index = self.log.last_index()
        last_term = self.log.last_term()
        for voter in self.voters:
            if voter != self.id:
                self._send(
                    VoteRequest(term, self.id, voter, last_index, last_term, pre_vote, transfer)
                )

    def _tally_votes(self, pre_vote: bool) -> bool:
        """Count votes; True if the election ended (won or lost)."""
        voters = self.voters
        granted = sum(1 for v in voters if self._votes.get(v) is True)
        rejected = sum(1 for v in voters if self._votes.get(v) is False)
        quorum = self._quorum_size()
        if granted >= quorum:
            if pre_vote:
                self._start_real_campaign(transfer=False)
            else:
                self._become_leader()
            return True
        if rejected >= quorum:
            self._become_follower(self.term, NONE)
            return True
        return False

    # ----- ticks -----

    def _tick_election(self) -> None:
        self._election_elapsed_ticks += 1
        if self._election_elapsed_ticks >= self._election_timeout_ticks and self._promotable():
            self._election_elapsed_ticks = 0
            self._campaign(transfer=False)

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed_ticks += 1
        self._election_elapsed_ticks += 1
        if self._election_elapsed_ticks >= self.config.election_ticks:
            self._election_elapsed_ticks = 0
            if self.config.check_quorum and not self._quorum_active():
                self._become_follower(self.term, NONE)
                return
        if self._transferee != NONE:
            self._transfer_elapsed_ticks += 1
            if self._transfer_elapsed_ticks >= self.config.election_ticks:
                self._transferee = NONE
        for peer, progress in self.progress.items():
            if progress.state == ProgressState.SNAPSHOT:
                progress.snapshot_elapsed_ticks += 1
                if progress.snapshot_elapsed_ticks >= limits.SNAPSHOT_RETRY_TICKS:
                    self._send_snapshot_chunk(peer, progress)
        if self._heartbeat_elapsed_ticks >= self.config.heartbeat_ticks:
            self._heartbeat_elapsed_ticks = 0
            context = self._reads[-1].context if self._reads else b""
            self._bcast_heartbeat(context)

    def _quorum_active(self) -> bool:
        """CheckQuorum: did a quorum talk to us during the last election timeout?"""
        active = 0
        for voter in self.voters:
            if voter == self.id:
                active += 1
                continue
            progress = self.progress.get(voter)
            if progress is not None and progress.recent_active:
                active += 1
        for progress in self.progress.values():
            progress.recent_active = False
        return active >= self._quorum_size()

    # ----- sending -----

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

    # ----- elections -----

    def _on_vote_request(self, m: VoteRequest) -> None:
        can_vote = (
            self.vote == m.src
            or (self.vote == NONE and self.leader_id == NONE)
            or (m.pre_vote and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(m.last_index, m.last_term):
            self._send(VoteResponse(m.term, self.id, m.src, granted=True, pre_vote=m.pre_vote))
            if not m.pre_vote:
                self.vote = m.src
                self._election_elapsed_ticks = 0
        else:
            self._send(VoteResponse(self.term, self.id, m.src, granted=False, pre_vote=m.pre_vote))

    def _on_vote_response(self, m: VoteResponse) -> None:
        if m.pre_vote:
            if self.role != Role.PRE_CANDIDATE:
                return
        elif self.role != Role.CANDIDATE:
            return
        if m.src not in self.voters:
            return
        self._votes[m.src] = m.granted
        self._tally_votes(m.pre_vote)

    def _on_timeout_now(self, m: TimeoutNow) -> None:
        if self.role == Role.LEADER:
            return
        # Leadership transfer (dissertation §3.10): campaign at once, skipping
        # PreVote and overriding the others' leader lease.
        self._campaign(transfer=True)

    # ----- replication, follower side -----

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

    # ----- replication, leader side -----

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

    # ----- configuration -----

    def _scan_conf(self, lo: int, hi: int) -> None:
        while lo < hi:
            batch = self.log.slice(lo, min(hi, lo + limits.ENTRIES_PER_MESSAGE_MAX), 1 << 62)
            self._apply_conf_entries(lo, batch)
            lo += len(batch)

    def _apply_conf_entries(self, first_index: int, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.kind != EntryKind.CONF_CHANGE:
                continue
            change = CONF_CHANGE_DECODER.decode(entry.data)
            voters = set(self.voters)
            if change.op == ConfChangeOp.ADD:
                voters.add(change.node_id)
            else:
                voters.discard(change.node_id)
            self._conf_history.append((entry.index, tuple(sorted(voters))))
            if self.role == Role.LEADER:
                self._sync_progress()

    def _sync_progress(self) -> None:
        voters = self.voters
        for peer in list(self.progress):
            if peer not in voters:
                del self.progress[peer]
        next_index = self.log.last_index() + 1
        for voter in voters:
            if voter != self.id and voter not in self.progress:
                self.progress[voter] = Progress(next_index)

    def _truncate_conf(self, first_index: int) -> None:
        history = self._conf_history
        while len(history) > 1 and history[-1][0] >= first_index:
            history.pop()
        assert history[-1][0] < first_index or len(history) == 1

    def _conf_at(self, index: int) -> tuple[int, ...]:
        for conf_index, voters in reversed(self._conf_history):
            if conf_index <= index:
                return voters
        raise AssertionError("no config at or below index")

    def _trim_conf_history(self, index: int) -> None:
        voters = self._conf_at(index)
        newer = [(i, v) for i, v in self._conf_history if i > index]
        self._conf_history = [(index, voters), *newer]


# Each handler takes the one message type it is filed under.
_HANDLERS: dict[type[Message], Callable[[RawNode, Any], None]] = {
    VoteRequest: RawNode._on_vote_request,
    VoteResponse: RawNode._on_vote_response,
    AppendRequest: RawNode._on_append,
    AppendResponse: RawNode._on_append_response,
    Heartbeat: RawNode._on_heartbeat,
    HeartbeatResponse: RawNode._on_heartbeat_response,
    SnapshotChunk: RawNode._on_snapshot_chunk,
    SnapshotResponse: RawNode._on_snapshot_response,
    TimeoutNow: RawNode._on_timeout_now,
    ReadIndexRequest: RawNode._on_read_index_request,
    ReadIndexResponse: RawNode._on_read_index_response,
}
