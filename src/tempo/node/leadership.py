"""What the replica tells of its place in raft and takes from the
transport and the operator: messages, the leader's commit index, a
leadership transfer, a voter change, and readiness (whether work waits
without progress); a part of `Replica` (node/replica.py), which sets up the
state it names.
"""

import logging
from collections.abc import Callable

import trio

from tempo import errors, limits
from tempo.engine import (
    Intake,
    RaftLog,
    Waiter,
)
from tempo.node.steps import Phase
from tempo.raft import (
    AppendRequest,
    ConfChange,
    ConfChangeRejected,
    Heartbeat,
    Message,
    ProposalDropped,
    RawNode,
    Role,
    SnapshotResponse,
)

log = logging.getLogger("tempo.replica")


class Leadership:
    """The replica's inputs from outside the loop, and its readiness."""

    # Set up by `Replica.__init__`.
    node: RawNode
    phase: Phase
    applied_index: int
    raft_log: RaftLog
    name_of: Callable[[int], str]
    _wake: trio.Event
    _intake: Intake
    _proposed: dict[int, tuple[int, list[Waiter]]]
    _leader_commit: tuple[tuple[int, int], int]
    _snapshot_answered_at_s: float
    _progress_at_s: float
    _progress_index: int

    def step(self, message: Message) -> None:
        self.node.step(message)
        self._note_leader_commit(message)
        if isinstance(message, SnapshotResponse):
            self._snapshot_answered_at_s = trio.current_time()
        self._wake.set()

    def _note_leader_commit(self, m: Message) -> None:
        if isinstance(m, AppendRequest):
            index = m.commit
        elif isinstance(m, Heartbeat):
            index = m.leader_commit
        else:
            return
        key = (m.term, m.src)
        if key != (self.node.term, self.node.leader_id):
            return  # stale, or not from the leader this node follows
        (known_key, known) = self._leader_commit
        self._leader_commit = (key, max(known, index) if known_key == key else index)

    @property
    def leader_commit_index(self) -> int:
        """The commit index of the leader this node follows, as far as its
        messages told; 0 when it has heard none in this term."""
        key, index = self._leader_commit
        return index if key == (self.node.term, self.node.leader_id) else 0

    def stop_campaigning(self) -> None:
        """This node is stopping: it never campaigns nor takes leadership
        again (a transfer to it is ignored), and still votes and replicates."""
        self.node.stop_campaigning()
        self._wake.set()

    def transfer_leadership(self) -> bool:
        """Hands leadership to the most caught-up other voter; False if this
        node does not lead or there is nobody to hand it to."""
        if self.node.role != Role.LEADER:
            return False
        others = [(p.match, peer) for peer, p in self.node.progress.items() if peer != self.node.id]
        if not others:
            return False
        target = max(others)[1]
        try:
            self.node.transfer_leader(target)
        except ProposalDropped:
            return False
        log.warning("%s: handing leadership over to %s", self.name_of(self.node.id), self.name_of(target))
        self._wake.set()
        return True

    async def change_voter(self, change: ConfChange) -> None:
        """Adds or removes one voter; returns once the change is applied here."""
        if self.phase is not Phase.LEADING:
            raise errors.NotLeader("this node is not the leader")
        try:
            index = self.node.propose_conf_change(change)
        except ConfChangeRejected as exc:
            raise errors.Conflict(f"the cluster cannot change now: {exc}") from None
        except ProposalDropped:
            raise errors.NotLeader("this node is not the leader") from None
        waiter = Waiter()
        self._proposed[index] = (self.node.term, [waiter])
        self._wake.set()
        await waiter.answer()

    @property
    def voters(self) -> tuple[int, ...]:
        return self.node.voters

    @property
    def term(self) -> int:
        return self.node.term

    @property
    def commit_index(self) -> int:
        return self.node.hard_state().commit

    def _pending(self) -> str | None:
        """The work this node waits on, or None: a leader's own proposals
        not yet applied; a follower's entries that its leader has not
        committed, or committed entries not yet applied here."""
        applied = self.applied_index
        if self.node.role == Role.LEADER:
            waiting = len(self._proposed) + len(self._intake.pending)
            return f"{waiting} of its own writes waiting, applied index {applied}" if waiting else None
        last, leader_commit = self.raft_log.last_index(), self.leader_commit_index
        if last > applied or leader_commit > applied:
            leader = self.name_of(self.node.leader_id) if self.node.leader_id else "none"
            return (f"the leader ({leader}) has not committed what it holds: log index {last}, "
                    f"the leader's commit index {leader_commit}, applied index {applied}")
        return None

    def _note_progress(self) -> None:
        """Each tick: progress is no work pending, or the applied index moved."""
        if self.applied_index != self._progress_index or self._pending() is None:
            self._progress_index = self.applied_index
            self._progress_at_s = trio.current_time()

    def stalled(self) -> str | None:
        """Why this node is not ready although it knows a leader: work has
        been pending for `limits.progress_stall_s` without its applied index
        moving (docs/operations.md "Readiness and health"); None when it moves."""
        stalled_s = trio.current_time() - self._progress_at_s
        if stalled_s < limits.progress_stall_s:
            return None
        pending = self._pending()
        if pending is None:
            return None
        return f"no progress for {stalled_s:.1f} s: {pending}"
