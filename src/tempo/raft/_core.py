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
from typing import Any, get_args

from . import limits
from ._elections import ELECTION_HANDLERS, Elections
from ._log import RaftLog
from ._progress import Progress
from ._replication import REPLICATION_HANDLERS, Replication, _ReadRequest
from .errors import (
    ConfChangeRejected,
    NotLeader,
    ProposalDropped,
    ReadIndexDropped,
    UncommittedBytesExceeded,
)
from .storage import Storage
from .types import (
    MESSAGE_ENCODER,
    NONE,
    ConfChange,
    ConfChangeOp,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    Message,
    ReadIndexRequest,
    ReadIndexResponse,
    ReadState,
    Ready,
    Role,
    Snapshot,
    SnapshotMeta,
    TimeoutNow,
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


class RawNode(Elections, Replication):
    """The core: its state (set up here), its public API, and its parts,
    elections (_elections.py), replication (_replication.py) and the
    configuration (_conf.py)."""

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


# Each handler takes the one message type it is filed under; each part files
# the messages it handles, and every message has exactly one handler.
_HANDLERS: dict[type[Message], Callable[[RawNode, Any], None]] = {
    **ELECTION_HANDLERS,
    **REPLICATION_HANDLERS,
}
assert ELECTION_HANDLERS.keys().isdisjoint(REPLICATION_HANDLERS), "a message with two handlers"
assert set(_HANDLERS) == set(get_args(Message)), "a message without a handler"
