"""Core API behaviour: limits, ReadIndex, membership, Ready contract, codecs."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tempo.raft import (
    MESSAGE_DECODER,
    MESSAGE_ENCODER,
    AppendRequest,
    ConfChange,
    ConfChangeOp,
    ConfChangeRejected,
    Config,
    Entry,
    EntryKind,
    Heartbeat,
    MemoryStorage,
    NotLeader,
    RawNode,
    ReadIndexDropped,
    Role,
    UncommittedBytesExceeded,
    VoteRequest,
    limits,
)

from .transcript import ELECTION_TICKS, Cluster


def test_proposals_are_refused_beyond_the_uncommitted_bytes_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "UNCOMMITTED_BYTES_MAX", 100)
    c = Cluster(3)
    c.elect(1)
    c.isolate(1)  # nothing commits now
    for _ in range(10):
        c.propose(1, b"x" * 10)
    with pytest.raises(UncommittedBytesExceeded):
        c.propose(1, b"x")
    c.heal()
    c.tick(1)
    c.settle()
    assert c.commit(1) == c.nodes[1].log.last_index()
    c.propose(1, b"x" * 10)  # room again once committed


def test_a_single_proposal_above_the_bound_is_accepted_when_nothing_is_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "UNCOMMITTED_BYTES_MAX", 100)
    c = Cluster(3)
    c.elect(1)
    c.propose(1, b"x" * 1000)  # otherwise it could never be proposed
    with pytest.raises(UncommittedBytesExceeded):
        c.propose(1, b"y")


def test_followers_refuse_proposals_and_name_the_leader() -> None:
    c = Cluster(3)
    c.elect(1)
    with pytest.raises(NotLeader) as refused:
        c.nodes[2].propose(b"x")
    assert refused.value.leader_id == 1


def test_read_index_waits_for_a_quorum_and_reports_the_commit_index() -> None:
    c = Cluster(3)
    c.run_election(1)
    assert c.role(1) == Role.LEADER
    with pytest.raises(ReadIndexDropped):  # its no-op is not committed yet
        c.nodes[1].read_index(b"early")
    c.settle()
    c.propose(1, b"a")
    c.settle()
    c.nodes[1].read_index(b"r1")
    c.process(1)
    assert c.read_states[1] == []  # leadership not confirmed yet
    c.deliver(dst=2)
    c.deliver(src=2)  # one follower + the leader are a quorum of 3
    assert [(s.index, s.context) for s in c.read_states[1]] == [(c.commit(1), b"r1")]


def test_a_follower_forwards_read_index_to_its_leader() -> None:
    c = Cluster(3)
    c.elect(1)
    c.propose(1, b"a")
    c.settle()
    c.nodes[2].read_index(b"r2")
    c.process(2)
    c.settle()
    assert [(s.index, s.context) for s in c.read_states[2]] == [(c.commit(1), b"r2")]
    c.isolate(3)
    c.tick(3, 3 * ELECTION_TICKS)  # S3 lost its leader: nobody to forward to
    with pytest.raises(ReadIndexDropped):
        c.nodes[3].read_index(b"r3")


def test_a_deposed_leader_never_answers_a_read() -> None:
    c = Cluster(3)
    c.elect(1)
    c.isolate(1)
    c.nodes[1].read_index(b"stale")
    c.process(1)
    c.tick(1, 2 * ELECTION_TICKS)
    assert c.role(1) == Role.FOLLOWER
    assert c.read_states[1] == []


# The planted bug (tests/sim/planted.py) answers without a quorum: this test catches it.
PLANTED_READ_BUG = pytest.param("read_without_quorum", marks=pytest.mark.xfail(strict=True, raises=AssertionError))


@pytest.mark.parametrize("test_bug", ["", PLANTED_READ_BUG])
def test_a_read_index_round_cut_off_from_quorum_never_confirms(test_bug: str) -> None:
    """The old leader of a partition, still believing it leads, starts a
    round while the majority elects a new leader and commits a write: the
    round never confirms, not in the cut, nor once the heal lets its stale
    heartbeats through (the others answer with their later term), so the
    old leader never reads a state older than that write."""
    c = Cluster(3, check_quorum=False, test_bug=test_bug)  # it must not step down on its own
    c.elect(1)
    c.propose(1, b"before")
    c.settle()
    c.isolate(1)
    c.nodes[1].read_index(b"old")
    c.process(1)
    c.tick(1, 3 * ELECTION_TICKS)  # heartbeats for the round, all lost
    c.run_election(2)
    c.settle()
    c.propose(2, b"after")
    c.settle()
    assert c.role(2) == Role.LEADER and c.applied_data(2)[-1] == b"after"
    assert c.role(1) == Role.LEADER  # it does not know it was deposed
    assert c.read_states[1] == []
    c.heal()
    c.tick(1)
    c.settle()
    assert c.role(1) == Role.FOLLOWER and c.term(1) == c.term(2)
    assert c.read_states[1] == []


def test_add_then_remove_replaces_a_node_one_change_at_a_time() -> None:
    c = Cluster(3)
    c.elect(1)
    c.propose(1, b"a")
    c.settle()
    c.add_node(4)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeOp.ADD, 4))
    with pytest.raises(ConfChangeRejected):  # one change at a time
        c.nodes[1].propose_conf_change(ConfChange(ConfChangeOp.REMOVE, 3))
    c.process(1)
    c.settle()
    c.tick_all(2)
    assert c.nodes[4].voters == (1, 2, 3, 4)
    assert c.applied_data(4) == [b"a"]
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeOp.REMOVE, 3))
    c.process(1)
    c.settle()
    assert c.nodes[1].voters == (1, 2, 4)
    c.crash(3)
    c.propose(1, b"b")  # commits with 2 of the new 3 voters
    c.isolate(2)
    c.settle()
    assert c.applied_data(1) == [b"a", b"b"]


def test_a_removed_leader_steps_down_once_its_removal_commits() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeOp.REMOVE, 1))
    c.process(1)
    # It still leads (without counting itself) until the change commits.
    assert c.role(1) == Role.LEADER
    c.settle()
    assert c.role(1) == Role.FOLLOWER
    assert c.nodes[2].voters == (2, 3)
    for _ in range(3 * ELECTION_TICKS):
        c.tick(2)
        c.tick(3)
        c.settle()
    assert c.leader() in (2, 3)
    c.tick(1, 5 * ELECTION_TICKS)  # not a voter: it never campaigns
    assert c.role(1) == Role.FOLLOWER


def test_invalid_config_changes_are_rejected() -> None:
    c = Cluster(3)
    c.elect(1)
    with pytest.raises(ConfChangeRejected):
        c.nodes[1].propose_conf_change(ConfChange(ConfChangeOp.ADD, 2))
    with pytest.raises(ConfChangeRejected):
        c.nodes[1].propose_conf_change(ConfChange(ConfChangeOp.REMOVE, 9))


def test_ready_syncs_votes_and_entries_but_not_a_commit_alone() -> None:
    storage = MemoryStorage((1, 2, 3))
    node = RawNode(Config(2), storage, random.Random(0))
    node.step(VoteRequest(1, 1, 2, last_index=1, last_term=0))
    ready = node.ready()
    assert ready.hard_state is not None
    assert ready.hard_state.vote == 1
    assert ready.must_sync
    storage.set_hard_state(ready.hard_state)
    node.advance(ready)
    entry = Entry(1, 2, EntryKind.NORMAL, b"a")
    node.step(AppendRequest(1, 1, 2, prev_index=1, prev_term=0, entries=[entry], commit=0))
    ready = node.ready()
    assert ready.entries == [entry]
    assert ready.must_sync
    storage.append(ready.entries)
    node.advance(ready)
    node.step(AppendRequest(1, 1, 2, prev_index=2, prev_term=1, entries=[], commit=2))
    ready = node.ready()
    assert ready.hard_state is not None
    assert ready.hard_state.commit == 2
    assert not ready.must_sync
    assert ready.committed_entries == [entry]


def test_a_restarted_node_keeps_its_term_vote_and_log() -> None:
    c = Cluster(3)
    c.elect(1)
    c.propose(1, b"a")
    c.settle()
    term, vote, last = c.term(2), c.nodes[2].vote, c.nodes[2].log.last_index()
    c.crash(2)
    c.restart(2)
    assert (c.term(2), c.nodes[2].vote, c.nodes[2].log.last_index()) == (term, vote, last)
    c.tick_all(1)
    assert c.applied_data(2) == [b"a"]  # re-applied from the log after restart


entries = st.builds(
    Entry,
    term=st.integers(0, 2**40),
    index=st.integers(1, 2**40),
    kind=st.sampled_from([EntryKind.NORMAL, EntryKind.CONF_CHANGE]),
    data=st.binary(max_size=64),
)


@given(
    term=st.integers(0, 2**40),
    prev_index=st.integers(0, 2**40),
    batch=st.lists(entries, max_size=5),
)
def test_messages_round_trip_through_msgpack(term: int, prev_index: int, batch: list[Entry]) -> None:
    message = AppendRequest(term, 1, 2, prev_index, term, batch, prev_index)
    assert MESSAGE_DECODER.decode(MESSAGE_ENCODER.encode(message)) == message


def test_memory_storage_contract() -> None:
    storage = MemoryStorage((1, 2, 3))
    assert storage.first_index() == 2
    assert storage.last_index() == 1
    assert storage.term(1) == 0
    batch = [Entry(1, i, EntryKind.NORMAL, b"x" * 10) for i in range(2, 7)]
    storage.append(batch)
    assert storage.entries(2, 7, 1 << 20) == batch
    assert storage.entries(2, 7, 25) == batch[:2]  # the bytes bound
    assert storage.entries(2, 7, 0) == batch[:1]  # always at least one entry
    storage.append([Entry(2, 4)])  # truncates 4..6
    assert storage.last_index() == 4
    assert storage.term(4) == 2
    snapshot = storage.snapshot()
    from tempo.raft import Snapshot, SnapshotMeta

    storage.compact(Snapshot(SnapshotMeta(3, 1, snapshot.meta.conf), b"state"))
    assert storage.first_index() == 4
    assert storage.term(3) == 1
    assert storage.entries(4, 5, 1 << 20) == [Entry(2, 4)]


def test_pipelining_stops_at_the_in_flight_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "INFLIGHT_MESSAGES_MAX", 4)
    c = Cluster(3)
    c.elect(1)
    c.propose(1, b"warm-up")
    c.settle()  # S2 and S3 are in the replicate state now
    c.isolate(3)  # S3 hears nothing more, answers nothing more
    for k in range(20):
        c.propose(1, b"x%d" % k)  # one message per proposal: nothing batches them
    to_3 = [m for m in c.pending if isinstance(m, AppendRequest) and m.dst == 3 and m.entries]
    assert len(to_3) == 4


def test_an_append_request_respects_the_bytes_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MESSAGE_BYTES_MAX", 100)
    c = Cluster(3)
    c.elect(1)
    c.crash(3)
    for k in range(50):
        c.propose(1, b"%09d" % k)  # 10 entries of 10 bytes fill a message
    c.settle()
    c.restart(3)
    c.tick_all(3)
    appends = [m for m in c.sent if isinstance(m, AppendRequest) and m.dst == 3 and m.entries]
    assert appends
    assert max(sum(len(e.data) for e in m.entries) for m in appends) <= 100
    assert c.applied_data(3) == [b"%09d" % k for k in range(50)]


def test_heartbeats_carry_the_leaders_commit_index_to_a_lagging_follower() -> None:
    """`commit` is capped at the follower's match; `leader_commit` is not, so
    a follower that lags can tell how far behind it is."""
    c = Cluster(3)
    c.elect(1)
    c.isolate(3)
    for k in range(5):
        c.propose(1, b"x%d" % k)
    c.settle()
    c.heal()
    c.drop()
    c.tick(1)
    beats = [m for m in c.pending if isinstance(m, Heartbeat) and m.dst == 3]
    assert beats and all(m.leader_commit == c.commit(1) > m.commit for m in beats)
