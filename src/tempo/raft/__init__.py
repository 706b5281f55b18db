"""tempo's Raft consensus core: a pure state machine (no I/O, no clock).

See docs/raft.md. Drive a RawNode with tick/step/propose, and loop:
ready() -> persist -> send -> apply -> advance(ready).
"""

from . import limits, types
from ._core import Config, RawNode
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
from .storage import MemoryStorage, Storage, TermsBeside
from .types import *  # noqa: F403 (the messages and records: types.__all__)

__all__ = [
    *types.__all__,
    "ConfChangeRejected",
    "Config",
    "MemoryStorage",
    "NotLeader",
    "ProgressState",
    "ProposalDropped",
    "RaftError",
    "RawNode",
    "ReadIndexDropped",
    "Storage",
    "TermsBeside",
    "TransferInProgress",
    "UncommittedBytesExceeded",
    "limits",
]
