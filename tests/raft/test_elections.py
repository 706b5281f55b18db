"""Elections: PreVote keeps a rejoining node from disrupting a healthy leader;
CheckQuorum makes an isolated leader step down."""

from __future__ import annotations

from tempo.raft import Role

from .transcript import ELECTION_TICKS, Cluster


def test_a_partitioned_node_rejoins_without_disrupting_the_leader() -> None:
    c = Cluster(3, pre_vote=True, check_quorum=True)
    c.elect(1)
    c.propose(1, b"a")
    c.settle()
    # S3 is cut off and times out again and again; with PreVote it only
    # asks, never raising its term.
    c.isolate(3)
    c.tick(3, 10 * ELECTION_TICKS)
    assert c.role(3) == Role.PRE_CANDIDATE
    assert c.term(3) == c.term(1)
    # It rejoins: the leader keeps its term and its leadership.
    c.heal()
    c.tick_all(3 * ELECTION_TICKS)
    assert c.leader() == 1
    assert c.term(3) == c.term(1)
    assert c.role(3) == Role.FOLLOWER
    assert c.applied_data(3) == [b"a"]


def test_without_pre_vote_the_rejoining_node_disrupts_the_leader() -> None:
    c = Cluster(3, pre_vote=False, check_quorum=False)
    c.elect(1)
    term = c.term(1)
    c.isolate(3)
    c.tick(3, 10 * ELECTION_TICKS)
    assert c.term(3) > term + 5  # each timeout raised its term
    c.heal()
    c.tick_all(3 * ELECTION_TICKS)
    assert c.term(1) > term  # the leader was deposed by the higher term


def test_an_isolated_leader_steps_down_by_check_quorum() -> None:
    c = Cluster(3, pre_vote=True, check_quorum=True)
    c.elect(1)
    c.isolate(1)
    # After a full election timeout in which nobody answered, it steps down
    # (the first CheckQuorum round may still count the election's answers).
    c.tick(1, 2 * ELECTION_TICKS)
    assert c.role(1) == Role.FOLLOWER
    # The others elect a new leader among themselves.
    for _ in range(3 * ELECTION_TICKS):
        for i in (2, 3):
            c.tick(i)
        c.settle()
    new_leader = c.leader()
    assert new_leader in (2, 3)
    # The old leader rejoins and follows.
    c.heal()
    c.tick_all(2 * ELECTION_TICKS)
    assert c.leader() == new_leader
    assert c.nodes[1].leader_id == new_leader


def test_a_leader_ignores_a_stale_candidate_within_its_lease() -> None:
    c = Cluster(3, pre_vote=False, check_quorum=True)
    c.elect(1)
    term = c.term(1)
    c.tick_all(2)
    # S3 campaigns although it has a live leader (say, after a long GC pause):
    # S1 and S2 heard from the leader less than an election timeout ago and
    # ignore it, so the cluster keeps its leader.
    c.campaign(3)
    c.settle()
    assert c.leader() == 1
    assert c.term(1) == term


def test_a_leader_that_can_send_but_not_hear_steps_down_and_is_replaced() -> None:
    c = Cluster(5)
    c.elect(1)
    # One-way partition: S1's messages go out, nothing comes back to it.
    for j in (2, 3, 4, 5):
        c.cut.add((j, 1))
    c.tick_all(2 * ELECTION_TICKS)
    assert c.role(1) == Role.FOLLOWER  # CheckQuorum: no answers, no leadership
    c.tick_all(3 * ELECTION_TICKS)
    new_leader = c.leader()
    assert new_leader in (2, 3, 4, 5)
    c.propose(new_leader, b"after")
    c.settle()
    c.heal()
    c.tick_all(2 * ELECTION_TICKS)
    assert c.leader() == new_leader
    for i in (1, 2, 3, 4, 5):
        assert c.applied_data(i) == [b"after"]
