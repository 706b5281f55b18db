"""Planted bugs: cores that each break one rule of Raft, to show that the
simulator (and the transcript tests of tests/raft) catch what they check.

Each is a subclass of the real `RawNode` that overrides the one method where
its rule is kept, so the production core carries no test branch. Named by
the `--bug` option of `python -m tests.sim`.
"""

from __future__ import annotations

from tempo.raft import NONE, HardState, RawNode


class VoteNotPersisted(RawNode):
    """A vote cast in the current term is never persisted: after a crash the
    node may vote again in that term (Raft §5.2, Figure 2 "persistent state")."""

    def hard_state(self) -> HardState:
        persisted = self._prev_hard_state
        vote = persisted.vote if persisted.term == self.term else NONE
        return HardState(self.term, vote, self.log.committed)


class CommitOldTerm(RawNode):
    """An entry of an earlier term commits by counting replicas: the
    leader-completeness break of Raft's Figure 8 (§5.4.2)."""

    def _commits_through(self, index: int) -> bool:
        return True


class ReadWithoutQuorum(RawNode):
    """A leader answers a read without confirming its leadership with a
    quorum: a deposed leader reads stale (Raft dissertation §6.4)."""

    def _leads_alone(self) -> bool:
        return True


PLANTED: dict[str, type[RawNode]] = {
    "": RawNode,
    "vote_not_persisted": VoteNotPersisted,
    "commit_old_term": CommitOldTerm,
    "read_without_quorum": ReadWithoutQuorum,
}
