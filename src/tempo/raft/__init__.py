"""tempo's Raft consensus core: a pure state machine (no I/O, no clock).

See docs/raft.md. Drive a RawNode with tick/step/propose, and loop:
ready() -> persist -> send -> apply -> advance(ready).
"""

from . import limits
from ._core import TEST_BUGS, Config, RawNode
from ._progress import ProgressState
from .errors import (
    ConfChangeRejected,
    NotLeader,
    ProposalDropped,
    RaftError,
    ReadIndexDropped,
    TransferInProgress,
    UncommittedBytesExceeded,
)
from .storage import MemoryStorage, Storage
from .types import (
    CONF_CHANGE_DECODER,
    MESSAGE_DECODER,
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

__all__ = [
    "CONF_CHANGE_DECODER",
    "MESSAGE_DECODER",
    "MESSAGE_ENCODER",
    "NONE",
    "TEST_BUGS",
    "AppendRequest",
    "AppendResponse",
    "ConfChange",
    "ConfChangeOp",
    "ConfChangeRejected",
    "ConfState",
    "Config",
    "Entry",
    "EntryKind",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "MemoryStorage",
    "Message",
    "NotLeader",
    "ProgressState",
    "ProposalDropped",
    "RaftError",
    "RawNode",
    "ReadIndexDropped",
    "ReadState",
    "Ready",
    "Role",
    "Snapshot",
    "SnapshotChunk",
    "SnapshotMeta",
    "SnapshotResponse",
    "Storage",
    "TimeoutNow",
    "TransferInProgress",
    "UncommittedBytesExceeded",
    "VoteRequest",
    "VoteResponse",
    "limits",
]
