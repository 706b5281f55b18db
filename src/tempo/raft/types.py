"""Wire and storage types of the consensus core.

All are msgspec structs so a transport can send messages as msgpack frames
(`MESSAGE_ENCODER`/`MESSAGE_DECODER`, made once) and storage can persist
entries and hard state the same way. Node ids are positive ints; 0 means none.
"""

from __future__ import annotations

import enum

import msgspec

NONE = 0  # "no node": no vote, no known leader.


class EntryKind(enum.IntEnum):
    NORMAL = 0  # application data; empty data is the leader's no-op
    CONF_CHANGE = 1  # data is an encoded ConfChange


class Entry(msgspec.Struct, array_like=True, frozen=True):
    term: int
    index: int
    kind: int = EntryKind.NORMAL
    data: bytes = b""


class ConfChangeOp(enum.IntEnum):
    ADD = 0
    REMOVE = 1


class ConfChange(msgspec.Struct, array_like=True, frozen=True):
    """A single-server change; a replace is an ADD followed by a REMOVE."""

    op: int
    node_id: int


class HardState(msgspec.Struct, array_like=True, frozen=True):
    """What must be durable before any message reflecting it is sent."""

    term: int = 0
    vote: int = NONE
    commit: int = 0


class ConfState(msgspec.Struct, array_like=True, frozen=True):
    voters: tuple[int, ...] = ()


class SnapshotMeta(msgspec.Struct, array_like=True, frozen=True):
    index: int = 0
    term: int = 0
    conf: ConfState = ConfState()


class Snapshot(msgspec.Struct, array_like=True, frozen=True):
    meta: SnapshotMeta = SnapshotMeta()
    data: bytes = b""


class ReadState(msgspec.Struct, array_like=True, frozen=True):
    """A read with `context` is linearizable once applied index >= `index`."""

    index: int
    context: bytes


# Messages. `term` is the sender's term; `src` and `dst` are node ids.


class VoteRequest(msgspec.Struct, tag="vote", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    last_index: int
    last_term: int
    pre_vote: bool = False
    # Set for a campaign started by TimeoutNow: it overrides the leader lease.
    transfer: bool = False


class VoteResponse(msgspec.Struct, tag="vote_r", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    granted: bool
    pre_vote: bool = False


class AppendRequest(msgspec.Struct, tag="app", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    prev_index: int
    prev_term: int
    entries: list[Entry]
    commit: int


class AppendResponse(msgspec.Struct, tag="app_r", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    # Accepted: the follower's log matches the leader's through `index`.
    # Rejected: `index` is the rejected prev_index, and (hint_index,
    # hint_term) is the follower's last entry at or below it, so the leader
    # can skip a whole term of mismatching entries at once.
    index: int
    reject: bool = False
    hint_index: int = 0
    hint_term: int = 0


class Heartbeat(msgspec.Struct, tag="hb", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    commit: int
    context: bytes = b""


class HeartbeatResponse(msgspec.Struct, tag="hb_r", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    context: bytes = b""


class SnapshotChunk(msgspec.Struct, tag="snap", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    meta: SnapshotMeta
    offset: int
    data: bytes
    done: bool


class SnapshotResponse(msgspec.Struct, tag="snap_r", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    index: int  # the snapshot's index
    # The offset the follower expects next; with `done` the snapshot is installed.
    offset: int
    done: bool = False


class TimeoutNow(msgspec.Struct, tag="timeout_now", array_like=True, frozen=True):
    term: int
    src: int
    dst: int


class ReadIndexRequest(msgspec.Struct, tag="read", array_like=True, frozen=True):
    """A follower forwards a client's ReadIndex request to its leader."""

    term: int
    src: int
    dst: int
    context: bytes


class ReadIndexResponse(msgspec.Struct, tag="read_r", array_like=True, frozen=True):
    term: int
    src: int
    dst: int
    context: bytes
    index: int


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
