"""Wire and storage types of the consensus core.

All are msgspec structs so a transport can send messages as msgpack frames
(`MESSAGE_ENCODER`/`MESSAGE_DECODER`, made once) and storage can persist
entries and hard state the same way. Node ids are positive ints; 0 means none.
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec
from msgspec import Meta

# What the package re-exports (raft/__init__.py): all but the bounds'
# aliases (Term, Index, ...) and the shared MessageHead.
__all__ = [
    "CONF_CHANGE_DECODER",
    "MESSAGE_DECODER",
    "MESSAGE_ENCODER",
    "NONE",
    "AppendRequest",
    "AppendResponse",
    "ConfChange",
    "ConfChangeOp",
    "ConfState",
    "Entry",
    "EntryKind",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "Message",
    "ReadIndexRequest",
    "ReadIndexResponse",
    "ReadState",
    "Ready",
    "Role",
    "Snapshot",
    "SnapshotChunk",
    "SnapshotMeta",
    "SnapshotResponse",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
    "malformed",
]

NONE = 0  # "no node": no vote, no known leader.

# Bounds checked when a message or a stored value is decoded (msgspec ignores
# them when a struct is made in code, so they cost the core nothing).
Term = Annotated[int, Meta(ge=0)]
Index = Annotated[int, Meta(ge=0)]
NodeId = Annotated[int, Meta(ge=1)]  # a real node: never NONE
Vote = Annotated[int, Meta(ge=0)]  # a node, or NONE


class EntryKind(enum.IntEnum):
    NORMAL = 0  # application data; empty data is the leader's no-op
    CONF_CHANGE = 1  # data is an encoded ConfChange


class Entry(msgspec.Struct, array_like=True, frozen=True):
    term: Term
    index: Annotated[int, Meta(ge=1)]
    kind: Annotated[int, Meta(ge=int(min(EntryKind)), le=int(max(EntryKind)))] = EntryKind.NORMAL
    data: bytes = b""


class ConfChangeOp(enum.IntEnum):
    ADD = 0
    REMOVE = 1


class ConfChange(msgspec.Struct, array_like=True, frozen=True):
    """A single-server change; a replace is an ADD followed by a REMOVE."""

    op: Annotated[int, Meta(ge=int(min(ConfChangeOp)), le=int(max(ConfChangeOp)))]
    node_id: NodeId


class HardState(msgspec.Struct, array_like=True, frozen=True):
    """What must be durable before any message reflecting it is sent."""

    term: Term = 0
    vote: Vote = NONE
    commit: Index = 0


class ConfState(msgspec.Struct, array_like=True, frozen=True):
    voters: tuple[NodeId, ...] = ()


class SnapshotMeta(msgspec.Struct, array_like=True, frozen=True):
    index: Index = 0
    term: Term = 0
    conf: ConfState = ConfState()


class Snapshot(msgspec.Struct, array_like=True, frozen=True):
    meta: SnapshotMeta = SnapshotMeta()
    data: bytes = b""


class ReadState(msgspec.Struct, array_like=True, frozen=True):
    """A read with `context` is linearizable once applied index >= `index`."""

    index: Index
    context: bytes


class MessageHead(msgspec.Struct, array_like=True, frozen=True):
    """The fields every message starts with: `term` is the sender's term;
    `src` and `dst` are node ids. Each message's own fields follow them on
    the wire, after its tag. A message inherits `array_like`; it says
    `frozen=True` again for mypy, which does not see it inherited."""

    term: Term
    src: NodeId
    dst: NodeId


class VoteRequest(MessageHead, tag="vote", frozen=True):
    last_index: Index
    last_term: Term
    pre_vote: bool = False
    # Set for a campaign started by TimeoutNow: it overrides the leader lease.
    transfer: bool = False


class VoteResponse(MessageHead, tag="vote_r", frozen=True):
    granted: bool
    pre_vote: bool = False


class AppendRequest(MessageHead, tag="app", frozen=True):
    prev_index: Index
    prev_term: Term
    entries: list[Entry]
    commit: Index


class AppendResponse(MessageHead, tag="app_r", frozen=True):
    # Accepted: the follower's log matches the leader's through `index`.
    # Rejected: `index` is the rejected prev_index, and (hint_index,
    # hint_term) is the follower's last entry at or below it, so the leader
    # can skip a whole term of mismatching entries at once.
    index: Index
    reject: bool = False
    hint_index: Index = 0
    hint_term: Term = 0


class Heartbeat(MessageHead, tag="hb", frozen=True):
    # What the follower may commit: at most what it is known to match.
    commit: Index
    context: bytes = b""
    # The leader's own commit index, so a follower that lags knows how far
    # (its readiness depends on it); `commit` may be far below it.
    leader_commit: Index = 0


class HeartbeatResponse(MessageHead, tag="hb_r", frozen=True):
    context: bytes = b""


class SnapshotChunk(MessageHead, tag="snap", frozen=True):
    meta: SnapshotMeta
    offset: Index
    data: bytes
    done: bool


class SnapshotResponse(MessageHead, tag="snap_r", frozen=True):
    index: Index  # the snapshot's index
    # The offset the follower expects next; with `done` the snapshot is installed.
    offset: Index
    done: bool = False


class TimeoutNow(MessageHead, tag="timeout_now", frozen=True):
    """A leader asks its transfer target to campaign at once."""


class ReadIndexRequest(MessageHead, tag="read", frozen=True):
    """A follower forwards a client's ReadIndex request to its leader."""

    context: bytes


class ReadIndexResponse(MessageHead, tag="read_r", frozen=True):
    context: bytes
    index: Index


Message = (
    VoteRequest
    | VoteResponse
    | AppendRequest
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | SnapshotChunk
    | SnapshotResponse
    | TimeoutNow
    | ReadIndexRequest
    | ReadIndexResponse
)

MESSAGE_ENCODER = msgspec.msgpack.Encoder()
MESSAGE_DECODER = msgspec.msgpack.Decoder(Message)
CONF_CHANGE_DECODER = msgspec.msgpack.Decoder(ConfChange)


def malformed(m: Message) -> str | None:
    """Why a decoded message could never have been sent by a correct node,
    or None. The transport drops such a message before `step`: the core
    asserts these facts, and a corrupt frame must not stop a node. (A well
    formed message that breaks the protocol, say a second leader in one term,
    still trips the core's assertions: Raft trusts its peers.)"""
    if m.src == m.dst:
        return "a message to its own sender"
    if isinstance(m, AppendRequest):
        return _malformed_entries(m)
    if isinstance(m, VoteRequest) and m.last_term > m.term:
        return "a last log term after the candidate's term"
    if isinstance(m, SnapshotChunk) and m.meta.term > m.term:
        return "a snapshot of a term after the sender's"
    return None


def _malformed_entries(m: AppendRequest) -> str | None:
    """Entries follow `prev_index` one by one, with terms that never fall
    (from `prev_term` on) and never pass the leader's term (Raft §5.3)."""
    index, term = m.prev_index, m.prev_term
    if term > m.term:
        return "a previous term after the leader's term"
    for entry in m.entries:
        if entry.index != index + 1:
            return f"entry {entry.index} after entry {index}"
        if not term <= entry.term <= m.term:
            return f"entry {entry.index} of term {entry.term} outside [{term}, {m.term}]"
        if entry.kind == EntryKind.CONF_CHANGE:
            try:
                CONF_CHANGE_DECODER.decode(entry.data)
            except msgspec.MsgspecError:
                return f"entry {entry.index} is no configuration change"
        index, term = entry.index, entry.term
    return None


class Role(enum.IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


class Ready(msgspec.Struct):
    """One batch of work for the application, handled in this order:

    1. persist `snapshot` (install), `compaction` (save, drop log <= its
       index), `entries` (append, truncating any stored entries at or after the
       first one) and `hard_state`; fsync if `must_sync`;
    2. send `messages`;
    3. apply `committed_entries` (after restoring the state machine from
       `snapshot` if set) and serve `read_states`;
    4. call `advance(ready)`.

    One exception to the order is allowed: when `role` is LEADER, `snapshot`
    is None and `hard_state` changes neither the term nor the vote, the
    messages may be sent before step 1, while the leader writes its own
    entries (Raft thesis §10.2.1). That is sound because the leader counts
    its own log in a quorum only up to what `advance` reported persisted:
    an entry commits once a majority has it on disk, never on the strength
    of the leader's write not yet done. Everything
    else, and always a follower's or a candidate's messages (an
    acknowledgement, a granted vote, its own vote request), goes out only
    after the state of the same Ready is durable. tempo's replica loop
    (node/replica.py `Replica.steps`) takes the exception.
    """

    hard_state: HardState | None
    entries: list[Entry]
    must_sync: bool
    messages: list[Message]
    committed_entries: list[Entry]
    snapshot: Snapshot | None
    compaction: Snapshot | None
    read_states: list[ReadState]
    leader_id: int
    role: int
