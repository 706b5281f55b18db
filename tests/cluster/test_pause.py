"""A node frozen with SIGSTOP for a few seconds (a long GC pause, a VM
stall), then thawed with SIGCONT: a follower, and separately the leader."""

import time

from .conftest import Cluster, Workload

pause_s = 4.0


def test_follower_paused_then_resumed(make_cluster):
    cluster: Cluster = make_cluster()
    work = Workload(cluster).start(writers=3, workers=2)
    work.wait_acked(40, timeout_s=20)
    leader = cluster.wait_leader()
    follower = cluster.others(leader)[0]
    follower.pause()
    paused_at = time.monotonic()
    acked_at_pause = len(work.acked)
    # A majority is left, with its leader: writes go on.
    assert cluster.wait_leader(among=cluster.others(follower), timeout_s=3) is leader
    time.sleep(max(0.0, pause_s - (time.monotonic() - paused_at)))
    acked_in_pause = len(work.acked) - acked_at_pause
    follower.resume()
    assert cluster.wait_leader(timeout_s=10) is leader
    work.wait_acked(len(work.acked) + 30, timeout_s=20)
    drain_s = work.drain()
    print(f"{follower.id} paused {pause_s} s: {acked_in_pause} jobs acknowledged meanwhile; drained in {drain_s:.2f} s")
    assert acked_in_pause > 0
    cluster.check(work)


def test_leader_paused_then_resumed(make_cluster):
    cluster: Cluster = make_cluster()
    work = Workload(cluster).start(writers=3, workers=2)
    work.wait_acked(40, timeout_s=20)
    old = cluster.wait_leader()
    old.pause()
    paused_at = time.monotonic()
    new = cluster.wait_leader(among=cluster.others(old), timeout_s=8)
    elected_s = time.monotonic() - paused_at
    time.sleep(max(0.0, pause_s - (time.monotonic() - paused_at)))
    old.resume()
    # Thawed, it hears of the newer term and follows.
    stepped_s = cluster.wait_stepped_down(old, timeout_s=5)
    leader = cluster.wait_leader(timeout_s=10)
    work.wait_acked(len(work.acked) + 30, timeout_s=20)
    drain_s = work.drain()
    print(f"{old.id} paused {pause_s} s: {new.id} led after {elected_s:.2f} s; thawed {old.id} followed "
          f"after {stepped_s:.2f} s; leader now {leader.id}; drained in {drain_s:.2f} s")
    assert new is not old
    cluster.check(work)
