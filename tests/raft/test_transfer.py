"""Leadership transfer (TimeoutNow) while clients keep proposing."""

from __future__ import annotations

import pytest

from tempo.raft import NotLeader, Role, TimeoutNow, TransferInProgress, VoteRequest

from .transcript import ELECTION_TICKS, Cluster


def test_leadership_transfer_under_load() -> None:
    c = Cluster(3)
    c.elect(1)
    acked: list[bytes] = []
    for k in range(50):
        c.propose(1, b"before-%d" % k)
        if k % 5 == 0:
            c.settle()
    # S3 lags: it missed the last proposals when the transfer starts.
    c.drop(dst=3)
    c.nodes[1].transfer_leader(3)
    # While transferring, the leader refuses proposals (they would be lost).
    with pytest.raises(TransferInProgress):
        c.nodes[1].propose(b"refused")
    c.process(1)
    # The leader first catches S3 up, then tells it to campaign at once.
    c.settle()
    assert any(isinstance(m, TimeoutNow) and m.dst == 3 for m in c.sent)
    assert c.leader() == 3
    with pytest.raises(NotLeader) as refused:
        c.nodes[1].propose(b"to the old leader")
    assert refused.value.leader_id == 3
    for k in range(20):
        c.propose(3, b"after-%d" % k)
    c.settle()
    c.tick_all(1)
    acked = [b"before-%d" % k for k in range(50)] + [b"after-%d" % k for k in range(20)]
    for i in (1, 2, 3):
        assert c.applied_data(i) == acked


def test_a_transfer_to_an_unreachable_node_is_abandoned() -> None:
    c = Cluster(3)
    c.elect(1)
    c.isolate(3)
    c.nodes[1].transfer_leader(3)
    with pytest.raises(TransferInProgress):
        c.nodes[1].propose(b"x")
    # After an election timeout the leader gives up and serves again.
    for _ in range(ELECTION_TICKS):
        c.tick(1)
        c.deliver(dst=2)
        c.deliver(src=2)
    assert c.leader() == 1
    c.propose(1, b"x")
    c.settle()
    assert c.applied_data(1) == [b"x"]


def test_a_node_that_is_stopping_never_campaigns() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[2].stop_campaigning()
    # The leader goes away: node 2's election timeout passes many times, and
    # it neither pre-votes nor campaigns; node 3 is elected instead.
    c.isolate(1)
    for _ in range(3 * ELECTION_TICKS):
        c.tick(2)
        c.settle()
    assert c.role(2) == Role.FOLLOWER
    assert not any(isinstance(m, VoteRequest) and m.src == 2 for m in c.sent)
    c.campaign(3)
    c.settle()
    assert c.leader() == 3
    # It still votes and replicates: the others keep their quorum.
    c.propose(3, b"x")
    c.settle()
    assert c.applied_data(2) == [b"x"]


def test_a_node_that_is_stopping_refuses_leadership() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[2].stop_campaigning()
    # A TimeoutNow (a transfer to it) does not make it campaign.
    c.nodes[2].step(TimeoutNow(c.term(1), 1, 2))
    c.process(2)
    c.settle()
    assert c.role(2) == Role.FOLLOWER
    assert c.leader() == 1
    assert not any(isinstance(m, VoteRequest) and m.src == 2 for m in c.sent)


def test_a_stopping_leader_hands_over_and_never_takes_leadership_back() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[1].stop_campaigning()
    c.nodes[1].transfer_leader(2)
    c.process(1)
    c.settle()
    assert c.leader() == 2
    # The new leader goes away: node 1 does not campaign again; node 3 does.
    c.isolate(2)
    for _ in range(3 * ELECTION_TICKS):
        c.tick(1)
        c.settle()
    assert c.role(1) == Role.FOLLOWER
    assert not any(isinstance(m, VoteRequest) and m.src == 1 and m.term > c.term(2) for m in c.sent)
    c.campaign(3)
    c.settle()
    assert c.leader() == 3


def test_a_candidate_told_to_stop_gives_its_election_up() -> None:
    c = Cluster(3, pre_vote=False)
    c.elect(1)
    c.isolate(1)
    c.campaign(2)
    assert c.role(2) == Role.CANDIDATE
    # Its vote requests are out; it is told to stop before the answers come.
    c.nodes[2].stop_campaigning()
    c.process(2)
    c.settle()
    assert c.role(2) == Role.FOLLOWER
    assert all(node.role != Role.LEADER for i, node in c.nodes.items() if i != 1)
