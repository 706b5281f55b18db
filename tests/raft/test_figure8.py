"""Figure 8 of the Raft paper: a leader must not commit an entry of an earlier
term by counting replicas; only an entry of its own term commits earlier ones.

Index 1 is the bootstrap config and every new leader appends a no-op, so the
indexes are one higher and the terms one lower than in the figure. One entry
per AppendRequest, so "a majority holds index 3 but not index 4" can happen.
"""

from __future__ import annotations

import pytest

from tempo.raft import limits

from .transcript import Cluster


@pytest.fixture(autouse=True)
def one_entry_per_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "ENTRIES_PER_MESSAGE_MAX", 1)


def figure_8_until_c(c: Cluster) -> None:
    # (a) S1 leads term 1 (votes of S2, S3) and replicates its no-op and x
    # (index 2 and 3) to S2 only.
    c.isolate(4)
    c.isolate(5)
    c.run_election(1)
    assert c.leader() == 1
    c.propose(1, b"x")
    c.drop(dst=3)
    c.exchange(1, 2)
    assert c.log_terms(1) == [1, 1]
    assert c.log_terms(2) == [1, 1]
    assert c.log_terms(3) == []
    # (b) S1 crashes. S5 leads term 2 with S3 and S4 (its first try, term 1,
    # fails: S3 voted for S1 in term 1) and appends a no-op nobody gets.
    c.crash(1)
    c.heal()
    c.isolate(2)
    c.run_election(5)
    c.run_election(5)
    assert c.leader() == 5
    assert c.term(5) == 2
    c.drop(src=5)
    assert c.log_terms(5) == [2]
    # (c) S5 crashes. S1 restarts and leads term 3 with S2 and S3. S2 gets
    # the term-3 no-op (index 4); S3 gets index 2 and 3 (term 1) but not 4.
    c.crash(5)
    c.heal()
    c.isolate(4)
    c.restart(1)
    c.run_election(1)
    c.run_election(1)
    assert c.leader() == 1
    assert c.term(1) == 3
    c.exchange(1, 2)
    assert c.log_terms(2) == [1, 1, 3]
    c.deliver_one(1, 3)  # probe at index 4: rejected, S3's log is empty
    c.deliver_one(3, 1)
    c.deliver_one(1, 3)  # index 2
    c.deliver_one(3, 1)
    c.deliver_one(1, 3)  # index 3
    c.deliver_one(3, 1)
    c.drop(dst=3)  # index 4 is lost
    assert c.log_terms(3) == [1, 1]


def test_leader_does_not_commit_an_old_term_entry_by_counting_replicas() -> None:
    c = Cluster(5, pre_vote=False, check_quorum=False)
    figure_8_until_c(c)
    # Index 3 is on S1, S2 and S3, but it is of term 1: S1 (term 3) must not commit it.
    assert c.commit(1) < 3
    # (e) Once the term-3 no-op is on a majority, it commits x with it.
    c.tick(1)  # heartbeat: S3 asks for index 4 again
    c.settle()
    assert c.commit(1) == 4
    assert c.applied_data(1) == [b"x"]


def test_with_the_rule_broken_a_committed_entry_is_overwritten() -> None:
    c = Cluster(5, pre_vote=False, check_quorum=False, test_bug="commit_old_term")
    figure_8_until_c(c)
    assert c.commit(1) == 3  # the planted bug commits x, applies it, acknowledges it
    assert c.applied_data(1) == [b"x"]
    # (d) S1 crashes. S5 (last term 2) wins term 4 with S3 and S4 although
    # it lacks x, and commits its own entries at the indexes S1 committed.
    c.crash(1)
    c.heal()
    c.isolate(2)
    c.restart(5)
    c.run_election(5)
    c.run_election(5)
    assert c.leader() == 5
    c.settle()
    s1_applied = {e.index: e for e in c.applied[1]}
    s5_applied = {e.index: e for e in c.applied[5]}
    assert s5_applied[2] != s1_applied[2]  # state machine safety is broken
    assert b"x" not in [e.data for e in c.nodes[5].log.slice(2, 4, 1 << 20)]
