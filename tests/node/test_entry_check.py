"""What a leader proposes, every follower applies (issue 26 finding 2): a
command that the log's decoder refuses is answered 400 by the leader before
it is proposed, never appended, and the writes around it commit. And a
leader whose own writes stop committing says so in its readiness.

The leader here is the replica loop of node/replica.py; its two followers
are played by the test (tests/node/test_replica_loop.py), which decodes
every entry they are sent as a follower's transport does."""

import logging

import pytest
import trio
import trio.testing

from tempo import errors, ids, limits
from tempo.engine.commands import BackfillJob, SetMember
from tempo.net.api import _entry_problem
from tempo.node.replica import Phase
from tempo.raft import AppendRequest, AppendResponse, EntryKind

from . import test_replica_loop as loop
from .test_replica_loop import ME, PEER, Node, elect, member_entry

node = loop.node  # the fixture: one replica, its two peers played by the test

JOB = ids.job_id_from_int(1_800_000_000_000, 7)
# What the edge let through before issue 26: a backfill slot before 1970.
# msgspec encodes it; the decoder of every node refuses it (records.py `Ms`).
PLANTED = BackfillJob(1_800_000_000_000, "default", JOB, [-3_600_000])


def lead(node: Node) -> None:
    elect(node)
    node.replica.step(AppendResponse(1, PEER, ME, node.replica.raft_log.last_index()))
    node.replica.run_now()
    assert node.replica.phase is Phase.LEADING
    node.transport.take()


def sent_entries(node: Node) -> list:
    """The normal entries the leader sent, each checked by the check a
    follower's transport makes (net/api.py `_entry_problem`)."""
    appends = [sent.message for sent in node.transport.take() if isinstance(sent.message, AppendRequest)]
    return [
        (entry, _entry_problem(entry.data))
        for message in appends for entry in message.entries
        if entry.kind == EntryKind.NORMAL and entry.data
    ]


async def sample(replica) -> None:
    """What the replica loop's ticker does for readiness, without raft's
    ticks (no election timer runs out while the test holds the peers)."""
    while True:
        replica._note_progress()
        await trio.sleep(limits.raft_tick_ms / 1000)


async def test_the_leader_refuses_an_entry_its_followers_would_and_stays_writable(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    replica = node.replica
    lead(node)
    before = replica.raft_log.last_index()
    with caplog.at_level(logging.ERROR, logger="tempo.commit"):
        planted = replica.submit_now(PLANTED)
        good = replica.submit_now(SetMember("n4", "http://n4.test:8700"))
        replica.run_now()
    # Refused at the leader, with a 400 and one log line; the write beside it goes on.
    assert planted.done.is_set() and isinstance(planted.outcome, errors.Invalid), planted.outcome
    assert "outside what tempo stores" in planted.outcome.detail
    assert [r.levelname for r in caplog.records if "refused a BackfillJob" in r.message] == ["ERROR"]
    assert replica.commands_undecodable == 1
    entries = sent_entries(node)
    assert entries, "the good write was proposed"
    assert all(problem is None for _, problem in entries), "an entry a follower refuses was sent"
    assert replica.raft_log.last_index() == before + 1  # one entry: the good write alone
    # A follower acknowledges it: it commits and is answered.
    replica.step(AppendResponse(1, PEER, ME, replica.raft_log.last_index()))
    replica.run_now()
    assert good.done.is_set() and good.outcome is None
    assert node.store.members() == {"n4": "http://n4.test:8700"}
    # And the next write commits too.
    after = replica.submit_now(SetMember("n5", "http://n5.test:8700"))
    replica.run_now()
    assert all(problem is None for _, problem in sent_entries(node))
    replica.step(AppendResponse(1, PEER, ME, replica.raft_log.last_index()))
    replica.run_now()
    assert after.done.is_set() and after.outcome is None


async def test_a_batch_of_only_refused_commands_proposes_nothing(node: Node) -> None:
    replica = node.replica
    lead(node)
    before = replica.raft_log.last_index()
    waiters = [replica.submit_now(PLANTED) for _ in range(3)]
    replica.run_now()
    assert all(isinstance(w.outcome, errors.Invalid) for w in waiters)
    assert replica.raft_log.last_index() == before and sent_entries(node) == []
    assert replica.commands_undecodable == 3


async def test_a_leader_whose_writes_do_not_commit_is_stalled_after_the_bound(
    node: Node, autojump_clock: trio.abc.Clock
) -> None:
    replica = node.replica
    lead(node)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample, replica)
        await trio.sleep(1.0)
        assert replica.stalled() is None  # nothing pending: idle is no stall
        replica.submit_now(SetMember("n4", "http://n4.test:8700"))
        replica.run_now()  # proposed and sent; no follower answers
        await trio.sleep(limits.progress_stall_s - 0.5)
        assert replica.stalled() is None
        await trio.sleep(1.0)
        reason = replica.stalled()
        assert reason is not None and reason.startswith("no progress for 3.")
        assert "1 of its own writes waiting" in reason
        # The follower answers: it commits, and the node is ready again.
        replica.step(AppendResponse(1, PEER, ME, replica.raft_log.last_index()))
        replica.run_now()
        await trio.sleep(0.3)
        assert replica.stalled() is None
        nursery.cancel_scope.cancel()


async def test_a_follower_whose_leader_does_not_commit_what_it_holds_is_stalled(
    node: Node, autojump_clock: trio.abc.Clock
) -> None:
    replica = node.replica
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample, replica)
        # The leader sends an entry and never says it committed.
        replica.step(AppendRequest(1, PEER, ME, 1, 0, [member_entry(1, 2, "n4")], 1))
        replica.run_now()
        assert replica.raft_log.last_index() == 2 and replica.applied_index == 1
        await trio.sleep(limits.progress_stall_s + 0.5)
        reason = replica.stalled()
        assert reason is not None and "has not committed what it holds: log index 2" in reason
        replica.step(AppendRequest(1, PEER, ME, 2, 1, [], 2))  # committed at last
        replica.run_now()
        await trio.sleep(0.3)
        assert replica.stalled() is None
        nursery.cancel_scope.cancel()
