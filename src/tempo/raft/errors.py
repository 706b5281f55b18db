"""Operating errors of the consensus core (programmer errors are asserts)."""


class RaftError(Exception):
    """Base of every exception raft/ raises on purpose."""


class ProposalDropped(RaftError):
    """The proposal was not appended; the caller may retry elsewhere or later."""


class NotLeader(ProposalDropped):
    """Only the leader accepts proposals, reads, transfers and config changes."""

    def __init__(self, leader_id: int) -> None:
        super().__init__(f"not the leader (leader_id={leader_id})")
        # 0 means no leader is known.
        self.leader_id = leader_id


class UncommittedBytesExceeded(ProposalDropped):
    """The leader already holds UNCOMMITTED_BYTES_MAX of uncommitted payload."""


class TransferInProgress(ProposalDropped):
    """A leadership transfer is under way; proposals wait for the new leader."""


class ConfChangeRejected(ProposalDropped):
    """A config change is pending, the leader has not committed in its term,
    or the change is not a single-server change of the current config."""


class ReadIndexDropped(RaftError):
    """The leader cannot serve a linearizable read yet (no entry of its term
    committed) or holds READ_REQUESTS_MAX pending reads already."""
