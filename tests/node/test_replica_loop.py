"""The replica loop (node/replica.py) against a fake transport, driven on the
test's own thread: one node of three, the other two played by the test.

The transport notes, for each batch of messages, how far this node's log
and hard state were durable when the batch went out (`RaftLog`'s mirror
moves only once a write transaction is durable)."""

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trio.testing

from tempo import errors
from tempo.engine.commands import SetMember, encode_entry
from tempo.engine.raftlog import RaftLog
from tempo.engine.store import Changes, Store
from tempo.node.replica import Notify, Phase, Replica, Write
from tempo.raft import (
    AppendRequest,
    AppendResponse,
    Entry,
    HardState,
    Message,
    Role,
    VoteRequest,
    VoteResponse,
)

ME, PEER, OTHER = 1, 2, 3
# Everything here happens at once; a request never answered fails after this.
ANSWER_WAIT_S = 10.0


@dataclass(frozen=True)
class Sent:
    message: Message
    durable_index: int  # the last log index on this node's disk then
    durable_hard_state: HardState


class FakeTransport:
    def __init__(self) -> None:
        self.raft_log: RaftLog | None = None
        self.sent: list[Sent] = []

    def send(self, messages: list[Message]) -> None:
        assert self.raft_log is not None
        for message in messages:
            self.sent.append(Sent(message, self.raft_log.last_index(), self.raft_log.hard_state()))

    def take(self) -> list[Sent]:
        sent, self.sent = self.sent, []
        return sent


@dataclass
class Node:
    replica: Replica
    store: Store
    transport: FakeTransport
    changes: list[Changes]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    store = Store(str(tmp_path / "d"), map_bytes=1 << 26)
    raft_log = RaftLog(store, (ME, PEER, OTHER))
    transport = FakeTransport()
    transport.raft_log = raft_log
    replica = Replica(store, raft_log, ME, transport.send, rng=random.Random(7))
    changes: list[Changes] = []
    replica.listeners.append(changes.append)
    yield Node(replica, store, transport, changes)
    store.close()


def member_entry(term: int, index: int, node_id: str) -> Entry:
    return Entry(term, index, data=encode_entry([SetMember(node_id, f"http://{node_id}.test:8700")]))


def full_disk(work: object) -> object:
    """`Store.write` on a full disk."""
    raise errors.StorageFault("the disk is full")


def elect(node: Node) -> None:
    """Makes this node the leader of term 1, the peers granting every vote
    it asks for (the pre-vote, then the vote)."""
    replica = node.replica
    replica.node.campaign()
    replica.run_now()
    while replica.node.role != Role.LEADER:
        requests = [s for s in node.transport.take() if isinstance(s.message, VoteRequest)]
        assert requests, "the election stalled"
        for sent in requests:
            request = sent.message
            assert isinstance(request, VoteRequest)
            if not request.pre_vote:
                # A candidate's new term and its own vote were on its disk
                # before it asked for votes: a leader too persists first then.
                durable = sent.durable_hard_state
                assert (durable.term, durable.vote) == (request.term, ME)
            replica.step(VoteResponse(request.term, request.dst, ME, granted=True, pre_vote=request.pre_vote))
        replica.run_now()


async def test_a_follower_persists_what_it_acknowledges_before_it_sends(node: Node) -> None:
    replica = node.replica
    replica.step(AppendRequest(1, PEER, ME, 1, 0, [member_entry(1, 2, "n4"), member_entry(1, 3, "n5")], 1))
    replica.run_now()
    [ack] = node.transport.take()
    assert isinstance(ack.message, AppendResponse) and not ack.message.reject
    assert ack.message.index == 3
    # Sent once the entries and the new term were on its disk.
    assert ack.durable_index == 3
    assert ack.durable_hard_state.term == 1
    assert replica.phase is Phase.FOLLOWER and replica.leader_id == PEER

    # The leader commits them and sends one more, in the same term (so no
    # new term or vote to persist either): the new entry is on disk before
    # its acknowledgement goes, and the two committed ones are applied.
    assert node.store.members() == {}
    replica.step(AppendRequest(1, PEER, ME, 3, 1, [member_entry(1, 4, "n6")], 3))
    replica.run_now()
    [ack] = node.transport.take()
    assert isinstance(ack.message, AppendResponse) and ack.message.index == 4
    assert ack.durable_index == 4
    assert replica.applied_index == node.store.applied_index() == 3
    assert node.store.members() == {"n4": "http://n4.test:8700", "n5": "http://n5.test:8700"}
    assert [c.members for c in node.changes] == [True, True]


async def test_a_follower_that_cannot_persist_sends_nothing_until_it_can(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    replica = node.replica
    replica.step(AppendRequest(1, PEER, ME, 1, 0, [member_entry(1, 2, "n4")], 1))
    rd = next(replica.readies_due())
    steps = replica.steps(rd)
    write = next(steps)
    assert isinstance(write, Write)
    monkeypatch.setattr(node.store, "write", full_disk)  # the disk fills
    with pytest.raises(errors.StorageFault):
        replica.write_now(write)  # not a map that can grow: refused
    assert replica.storage.refused is not None
    assert node.transport.take() == []  # no acknowledgement of what it could not write
    assert replica.raft_log.last_index() == 1

    monkeypatch.undo()  # room again: the same write goes again
    replica.write_now(write)
    assert next(steps, None) is None
    assert replica.storage.refused is None
    [ack] = node.transport.take()
    assert isinstance(ack.message, AppendResponse) and ack.message.index == 2
    assert ack.durable_index == 2


async def test_a_leader_sends_its_appends_before_its_own_write_and_answers_once_applied(node: Node) -> None:
    replica = node.replica
    elect(node)
    # Its no-op goes to the peers at once, before it is on this node's disk
    # (Raft thesis §10.2.1).
    appends = [s for s in node.transport.take() if isinstance(s.message, AppendRequest)]
    assert {s.message.dst for s in appends} == {PEER, OTHER}
    noop = appends[0].message.entries[-1]
    assert all(s.durable_index == noop.index - 1 for s in appends)
    assert replica.raft_log.last_index() == noop.index  # and written after
    assert replica.phase is Phase.ELECTED  # nothing of its term applied yet

    # One peer has it: with the leader's own write, a majority.
    replica.step(AppendResponse(1, PEER, ME, noop.index))
    replica.run_now()
    assert replica.phase is Phase.LEADING
    assert replica.applied_index == noop.index
    node.transport.take()

    answers: list[object] = []
    heard: list[int] = []  # commands answered when a listener heard of the entry
    replica.listeners.append(lambda changes: heard.append(replica.commands_committed))

    async def submit() -> None:
        answers.append(await replica.submit(SetMember("n4", "http://n4.test:8700")))

    with trio.fail_after(ANSWER_WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit)
            await trio.testing.wait_all_tasks_blocked()
            replica.run_now()
            appends = [s for s in node.transport.take() if isinstance(s.message, AppendRequest) and s.message.entries]
            assert appends
            [entry] = appends[0].message.entries
            assert all(s.durable_index == entry.index - 1 for s in appends)
            assert replica.raft_log.last_index() == entry.index
            assert answers == []  # not committed yet
            replica.step(AppendResponse(1, appends[0].message.dst, ME, entry.index))
            replica.run_now()
            await trio.testing.wait_all_tasks_blocked()
    assert answers == [None]  # what applying a SetMember answers
    assert heard == [0]  # the listeners heard before the request was answered
    assert node.store.members() == {"n4": "http://n4.test:8700"}
    assert (replica.batches_committed, replica.commands_committed) == (1, 1)


async def test_a_leader_that_cannot_persist_refuses_writes_and_stops_leading(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    replica = node.replica
    elect(node)
    replica.step(AppendResponse(1, PEER, ME, replica.raft_log.last_index()))
    replica.run_now()
    assert replica.phase is Phase.LEADING
    node.transport.take()
    monkeypatch.setattr(node.store, "write", full_disk)
    failures: list[BaseException] = []

    async def submit() -> None:
        try:
            await replica.submit(SetMember("n4", "http://n4.test:8700"))
        except errors.TempoError as exc:
            failures.append(exc)

    with trio.fail_after(ANSWER_WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(errors.StorageFault):
                replica.run_now()
    [failure] = failures
    assert isinstance(failure, errors.StorageFault) and failure.detail == "the disk is full"
    assert replica.storage.refused is not None
    # It neither serves nor dispatches: a new write is sent elsewhere.
    assert replica.phase is Phase.ELECTED
    with pytest.raises(errors.NotLeader):
        await replica.submit(SetMember("n5", "http://n5.test:8700"))


async def test_steps_come_in_the_order_persist_send_apply_advance(node: Node) -> None:
    replica = node.replica
    replica.step(AppendRequest(1, PEER, ME, 1, 0, [member_entry(1, 2, "n4")], 2))
    rd = next(replica.readies_due())
    assert rd.entries and rd.committed_entries and rd.messages
    steps = replica.steps(rd)
    first = next(steps)
    assert isinstance(first, Write) and node.transport.sent == []
    first.result = first.work()
    # New entries and older committed ones: acknowledged first, then applied
    # in a transaction of their own.
    second = next(steps)
    assert isinstance(second, Write) and len(node.transport.sent) == 1
    assert node.store.applied_index() == 1
    second.result = second.work()
    third = next(steps)
    assert isinstance(third, Notify) and third.changes.members
    assert replica.applied_index == 2
    assert replica.node.log.applied == 1  # not advanced yet
    assert next(steps, None) is None
    assert replica.node.log.applied == 2
