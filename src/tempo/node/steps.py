"""What the replica loop (node/replica.py) hands its driver and the API:
the node's phase, the steps of a Ready (a write, a notification) and of a
read, and a ReadIndex round."""

import enum
from collections.abc import Callable
from dataclasses import dataclass

import trio

from tempo import errors
from tempo.engine import (
    Applied,
    Changes,
)


class Phase(enum.Enum):
    """What this node may do, as the API sees it."""

    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    # Elected, but no entry of its term is applied yet: it cannot know the
    # state is complete, so it neither serves nor dispatches.
    ELECTED = "elected"
    LEADING = "leader"


@dataclass(slots=True)
class Write:
    """A step of a Ready: run `work` (one LMDB transaction and its fsync,
    blocking) until it commits, and set `result` to what it answers. While
    it fails, the driver reports each fault to `Replica.write_failed` and
    tries again; once it commits, to `Replica.write_succeeded`."""

    work: Callable[[], list[Applied]]
    result: list[Applied] | None = None


@dataclass(frozen=True, slots=True)
class Notify:
    """A step of a Ready: give the listeners one applied entry's changes
    (awaiting any that answers an awaitable) before its requests are
    answered, so a claim never sees a run the dispatcher has not heard of."""

    changes: Changes


Step = Write | Notify


@dataclass(frozen=True, slots=True)
class ReadWait:
    """A step of a read (`Replica.read_steps`): wait until `done` is set
    (its ReadIndex round ended) or until `deadline_s` (trio time), then go
    on."""

    done: trio.Event
    deadline_s: float


class _ReadRound:
    """One ReadIndex round (docs/semantics.md "Reads"): every read that
    arrived before it started waits on it. `index` is the commit index the
    leader had when it started, once a heartbeat quorum confirmed that it
    still led then; the round is done once `applied_index` reaches it, or
    failed (`failure`) when this node stops leading first."""

    __slots__ = ("context", "done", "failure", "index", "term")

    def __init__(self) -> None:
        self.context = b""
        self.term = 0  # the leader's term when the round started
        self.index: int | None = None
        self.failure: errors.TempoError | None = None
        self.done = trio.Event()
