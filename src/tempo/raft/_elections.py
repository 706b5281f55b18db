"""Terms, roles, ticks and elections (pre-vote, check quorum, leadership
transfer); a part of `RawNode` (_core.py), which sets up the state it names.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from . import limits
from ._conf import Configuration
from ._progress import Progress, ProgressState
from ._replication import _ReadRequest
from .types import (
    NONE,
    AppendRequest,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    Message,
    Role,
    SnapshotChunk,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

if TYPE_CHECKING:
    from ._core import Config


class _BcastAppend(Protocol):
    """`Replication._bcast_append`, which is called by keyword."""

    def __call__(self, allow_empty: bool) -> None: ...


class Elections(Configuration):
    """Who leads, and when a node campaigns."""

    # Set up by `RawNode.__init__`, or a method of another part.
    _bcast_append: _BcastAppend
    _bcast_heartbeat: Callable[[bytes], None]
    _election_elapsed_ticks: int
    _election_timeout_ticks: int
    _heartbeat_elapsed_ticks: int
    _reads: deque[_ReadRequest]
    _reads_by_context: dict[bytes, _ReadRequest]
    _rng: random.Random
    _send: Callable[[Message], None]
    _send_snapshot_chunk: Callable[[int, Progress], None]
    _stopping: bool
    _transfer_elapsed_ticks: int
    _transferee: int
    _uncommitted: deque[tuple[int, int]]
    _uncommitted_bytes: int
    _votes: dict[int, bool]
    config: Config
    leader_id: int
    term: int
    vote: int

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


# The messages this part handles, each filed under its type (RawNode.step
# dispatches through this table and replication's, _core.py).
ELECTION_HANDLERS: dict[type[Message], Callable[[Elections, Any], None]] = {
    VoteRequest: Elections._on_vote_request,
    VoteResponse: Elections._on_vote_response,
    TimeoutNow: Elections._on_timeout_now,
}
