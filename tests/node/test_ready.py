"""Readiness of a cluster member: a follower that lags its leader is not
ready, though it has applied all it knows is committed; a node with a few
committed entries still to apply is ready, one with many is not."""

from types import SimpleNamespace

import trio

from tempo import limits
from tempo.node import ClusterMember, Member, raft_id_of
from tempo.node.replica import Phase, Replica
from tempo.raft import AppendRequest, Heartbeat, ProgressState, Role, SnapshotResponse

N1, N2, N3 = (Member(n, f"http://127.0.0.1:870{k}", raft_id_of(n)) for k, n in enumerate(("n1", "n2", "n3"), 1))


def member(**replica) -> ClusterMember:
    fields = {"phase": Phase.FOLLOWER, "leader_id": N2.raft_id, "applied_index": 34, "commit_index": 34,
              "leader_commit_index": 34, "voters": ()} | replica
    return ClusterMember(SimpleNamespace(**fields), N1, [N1, N2, N3])


def test_a_follower_far_behind_its_leaders_commit_index_is_not_ready() -> None:
    # The follower has applied what it knows is committed (34), but its
    # leader has committed far more.
    lagging = member(leader_commit_index=34 + limits.follower_lag_entries_max + 36)
    assert not lagging.ready()
    assert lagging.not_ready() == (f"{limits.follower_lag_entries_max + 36} entries behind the leader n2 "
                                   f"(applied index 34, the leader's commit index {70 + limits.follower_lag_entries_max})")
    assert member(leader_commit_index=34 + limits.follower_lag_entries_max).ready()
    assert member().not_ready() is None


def test_the_other_reasons_to_be_not_ready_are_named() -> None:
    assert member(leader_id=0).not_ready() == "no leader known"
    behind = 34 - limits.follower_lag_entries_max - 1
    assert member(applied_index=behind).not_ready() == (
        f"applying: applied index {behind}, commit index 34 "
        f"(over {limits.follower_lag_entries_max} committed entries to apply)")
    assert member(leader_id=N1.raft_id, phase=Phase.ELECTED).not_ready() == "elected; no entry of its own term applied yet"
    # A leader knows its own commit index: no lag to measure.
    assert member(leader_id=N1.raft_id, phase=Phase.LEADING, leader_commit_index=0).ready()


def test_a_node_applying_a_few_committed_entries_is_ready() -> None:
    # At a steady load a committed entry often waits to be applied for a
    # moment; that is no reason to answer 503 (docs/operations.md "Readiness
    # and health"): only a backlog over the bound, or a stall, is.
    assert member(applied_index=33).ready()
    assert member(applied_index=34 - limits.follower_lag_entries_max).ready()
    assert member(leader_id=N1.raft_id, phase=Phase.LEADING, applied_index=33, leader_commit_index=0).ready()


def _replica(term: int, leader: int) -> Replica:
    replica = Replica.__new__(Replica)  # only what leader_commit_index uses
    replica.node = SimpleNamespace(term=term, leader_id=leader, role=Role.FOLLOWER, step=lambda m: None)
    replica._leader_commit = ((0, 0), 0)
    replica._wake = SimpleNamespace(set=lambda: None)
    return replica


def test_the_leaders_commit_index_comes_from_its_appends_and_heartbeats() -> None:
    replica = _replica(term=5, leader=2)
    assert replica.leader_commit_index == 0
    # A heartbeat's `commit` is what this follower may commit (at most its
    # match); `leader_commit` is how far the leader is.
    replica.step(Heartbeat(5, 2, 1, 34, b"", 70))
    assert replica.leader_commit_index == 70
    replica.step(AppendRequest(5, 2, 1, 34, 5, [], 72))
    assert replica.leader_commit_index == 72
    replica.step(Heartbeat(5, 2, 1, 34, b"", 71))  # reordered: the index never falls within a term
    assert replica.leader_commit_index == 72
    replica.step(Heartbeat(4, 3, 1, 34, b"", 90))  # an old leader's: not this node's leader
    assert replica.leader_commit_index == 72
    replica.node.term, replica.node.leader_id = 6, 3  # a new leader: nothing known of it yet
    assert replica.leader_commit_index == 0
    replica.step(Heartbeat(6, 3, 1, 34, b"", 60))
    assert replica.leader_commit_index == 60


def _leader_replica(progress: dict) -> Replica:
    replica = Replica.__new__(Replica)  # only what the compaction policy uses
    replica.node = SimpleNamespace(role=Role.LEADER, progress=progress, term=3, leader_id=1,
                                   step=lambda m: None)
    replica._snapshot_answered_at_s = -limits.snapshot_transfer_idle_s
    replica._transfers = {}
    replica._leader_commit = ((0, 0), 0)
    replica._wake = SimpleNamespace(set=lambda: None)
    return replica


def _sending(index: int) -> SimpleNamespace:
    return SimpleNamespace(state=ProgressState.SNAPSHOT, snapshot=SimpleNamespace(meta=SimpleNamespace(index=index)))


async def test_a_leader_defers_compaction_while_a_snapshot_transfer_moves(autojump_clock) -> None:
    replicating = SimpleNamespace(state=ProgressState.REPLICATE, snapshot=None)
    replica = _leader_replica({2: replicating, 3: replicating})
    assert not replica._sending_snapshot()
    replica.node.progress[3] = _sending(500)
    assert replica._sending_snapshot()  # a transfer that has just started
    await trio.sleep(limits.snapshot_transfer_idle_s / 2)
    replica.step(SnapshotResponse(3, 3, 1, 500, 65536))  # the follower answers a chunk
    await trio.sleep(limits.snapshot_transfer_idle_s * 0.9)
    assert replica._sending_snapshot()
    # The follower went quiet: compaction goes on rather than wait for ever.
    await trio.sleep(limits.snapshot_transfer_idle_s * 0.2)
    assert not replica._sending_snapshot()
    # A new transfer (another snapshot) counts as moving again.
    replica.node.progress[3] = _sending(800)
    assert replica._sending_snapshot()
    replica.node.role = Role.FOLLOWER
    assert not replica._sending_snapshot()
