"""Linearizable reads on the leader (node/replica.py `confirm_read`,
docs/semantics.md "Reads"): one node of three driven on the test's thread,
the other two played by the test, as in test_replica_loop.py."""

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from tempo import errors, limits
from tempo.engine.raftlog import RaftLog
from tempo.engine.store import Store
from tempo.node.replica import Phase, Replica
from tempo.raft import AppendResponse, Heartbeat, HeartbeatResponse

from .test_replica_loop import ME, OTHER, PEER, FakeTransport, Node, elect


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[Node]:
    """The leader of term 1, with its no-op applied (it serves)."""
    store = Store(str(tmp_path / "d"), map_bytes=1 << 26)
    raft_log = RaftLog(store, (ME, PEER, OTHER))
    transport = FakeTransport()
    transport.raft_log = raft_log
    node = Node(Replica(store, raft_log, ME, transport.send, rng=random.Random(7)), store, transport, [])
    elect(node)
    node.replica.step(AppendResponse(1, PEER, ME, raft_log.last_index()))
    node.replica.run_now()
    assert node.replica.phase is Phase.LEADING
    transport.take()
    yield node
    store.close()


def read_heartbeats(node: Node) -> list[Heartbeat]:
    """The heartbeats sent since the last look that start a ReadIndex round."""
    return [s.message for s in node.transport.take() if isinstance(s.message, Heartbeat) and s.message.context]


class Reads:
    """Reads started in a nursery, and how each ended."""

    def __init__(self, nursery: trio.Nursery, replica: Replica) -> None:
        self.nursery = nursery
        self.replica = replica
        self.ended: dict[str, BaseException | None] = {}

    def start(self, name: str) -> None:
        async def read() -> None:
            try:
                await self.replica.confirm_read()
            except errors.TempoError as exc:
                self.ended[name] = exc
                return
            self.ended[name] = None

        self.nursery.start_soon(read)


async def test_reads_wait_for_a_quorum_that_answered_a_round_begun_after_them(leader: Node) -> None:
    replica = leader.replica
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            reads = Reads(nursery, replica)
            reads.start("a")
            reads.start("b")
            await trio.testing.wait_all_tasks_blocked()
            replica.run_now()
            # Both reads share one round: one heartbeat to each peer, one context.
            first = read_heartbeats(leader)
            assert sorted(h.dst for h in first) == [PEER, OTHER]
            assert len({h.context for h in first}) == 1
            assert reads.ended == {}  # the leader alone is no quorum

            # A read that comes while that round is in flight waits for the next.
            reads.start("c")
            await trio.testing.wait_all_tasks_blocked()
            replica.run_now()
            assert read_heartbeats(leader) == []  # one round in flight at a time
            replica.step(HeartbeatResponse(1, PEER, ME, first[0].context))
            replica.run_now()
            await trio.testing.wait_all_tasks_blocked()
            assert reads.ended == {"a": None, "b": None}

            second = read_heartbeats(leader)  # the round of "c" started as the first ended
            assert sorted(h.dst for h in second) == [PEER, OTHER]
            assert second[0].context != first[0].context
            replica.step(HeartbeatResponse(1, OTHER, ME, first[0].context))  # the old round's: no use
            replica.run_now()
            await trio.testing.wait_all_tasks_blocked()
            assert "c" not in reads.ended
            replica.step(HeartbeatResponse(1, OTHER, ME, second[0].context))
            replica.run_now()
            await trio.testing.wait_all_tasks_blocked()
    assert reads.ended == {"a": None, "b": None, "c": None}


async def test_a_read_on_a_leader_that_is_deposed_fails_at_once(leader: Node) -> None:
    replica = leader.replica
    with trio.fail_after(limits.read_confirm_timeout_s / 2):
        async with trio.open_nursery() as nursery:
            reads = Reads(nursery, replica)
            reads.start("a")
            await trio.testing.wait_all_tasks_blocked()
            replica.run_now()
            assert read_heartbeats(leader)
            # A new leader's heartbeat of a later term: this node follows it.
            replica.step(Heartbeat(2, PEER, ME, 0, b"", 0))
            replica.run_now()
            await trio.testing.wait_all_tasks_blocked()
    assert replica.phase is Phase.FOLLOWER
    assert isinstance(reads.ended["a"], errors.NotLeader)
    with pytest.raises(errors.NotLeader):
        await replica.confirm_read()  # and later reads are refused


async def test_a_read_no_quorum_confirms_is_refused_within_its_bound(leader: Node, autojump_clock: object) -> None:
    replica = leader.replica
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        reads = Reads(nursery, replica)
        reads.start("a")
        await trio.testing.wait_all_tasks_blocked()
        replica.run_now()
        [old] = {h.context for h in read_heartbeats(leader)}
    failure = reads.ended["a"]
    assert isinstance(failure, errors.NoQuorum), failure
    assert "could not confirm" in failure.detail
    assert trio.current_time() - started == pytest.approx(limits.read_confirm_timeout_s)

    # It still leads (nothing told it otherwise). A later read waits for a
    # round of its own, begun once a quorum answered the one in flight.
    async with trio.open_nursery() as nursery:
        reads = Reads(nursery, replica)
        reads.start("b")
        await trio.testing.wait_all_tasks_blocked()
        replica.step(HeartbeatResponse(1, PEER, ME, old))
        replica.run_now()
        await trio.testing.wait_all_tasks_blocked()
        assert reads.ended == {}
        [new] = {h.context for h in read_heartbeats(leader)}
        replica.step(HeartbeatResponse(1, PEER, ME, new))
        replica.run_now()
        await trio.testing.wait_all_tasks_blocked()
    assert reads.ended == {"b": None}
