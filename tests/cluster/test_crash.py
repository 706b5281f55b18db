"""Crashes (SIGKILL) of one node, of all of them, and of a follower for long
enough that it must catch up by snapshot. After each: the invariants of
`Cluster.check` (conftest.py)."""

import random
import signal
import time

from .conftest import Cluster, Workload, client


def test_leader_sigkilled_during_burst_then_restarted(make_cluster):
    cluster: Cluster = make_cluster()
    work = Workload(cluster).start(writers=3, workers=2)
    work.wait_acked(60, timeout_s=20)
    leader = cluster.wait_leader()
    killed_at = time.monotonic()
    leader.kill()
    new = cluster.wait_leader(among=cluster.others(leader), timeout_s=8)
    failover_s = time.monotonic() - killed_at
    # The two left carry on: creates and claims are acknowledged without it.
    work.wait_acked(len(work.acked) + 60, timeout_s=20)
    leader.start()
    rejoin_s = cluster.wait_ready([leader])
    work.wait_acked(len(work.acked) + 30, timeout_s=20)
    drain_s = work.drain()
    print(f"killed {leader.id}; {new.id} led after {failover_s:.2f} s; restart ready in {rejoin_s:.2f} s; "
          f"drained in {drain_s:.2f} s")
    cluster.check(work)


def test_power_loss_keeps_every_acknowledged_job(make_cluster):
    cluster: Cluster = make_cluster()
    work = Workload(cluster).start(writers=3, workers=2)
    work.wait_acked(100, timeout_s=20)
    # All at once, as near as signals allow: no node gets to finish anything.
    for node in cluster.nodes:
        node.signal(signal.SIGKILL)
    for node in cluster.nodes:
        node.proc.wait(timeout=10)
    with work.lock:
        before = dict(work.acked)
    time.sleep(0.5)
    for node in cluster.nodes:
        node.start()
    ready_s = cluster.wait_ready(cluster.nodes)
    leader = cluster.wait_leader()
    work.wait_acked(len(work.acked) + 50, timeout_s=25)
    drain_s = work.drain()
    print(f"{len(before)} acknowledged before the power loss; ready again in {ready_s:.2f} s "
          f"(leader {leader.id}); drained in {drain_s:.2f} s")
    cluster.check(work)
    # The request keys survived too: the same body gives back the same job.
    rng = random.Random(work.seed)
    with client(5.0) as http:
        for job_id in rng.sample(sorted(before), 30):
            r = http.post(f"{leader.url}/v1/jobs", json=before[job_id])
            assert r.status_code == 200 and r.json()["id"] == job_id, (job_id, r.status_code, r.text[:300])


def test_follower_down_during_compaction_catches_up_by_snapshot(make_cluster):
    snapshot_entries = 50
    cluster: Cluster = make_cluster("--snapshot-entries", str(snapshot_entries))
    leader = cluster.wait_leader()
    follower = cluster.others(leader)[0]
    follower.kill()
    start_index = cluster.view(leader)["commit_index"]
    work = Workload(cluster).start(writers=3, workers=2)
    # Enough entries for several compactions past what the follower has.
    deadline_s = time.monotonic() + 60
    while cluster.view(leader)["commit_index"] < start_index + 6 * snapshot_entries:
        assert time.monotonic() < deadline_s, f"leader at {cluster.view(leader)}"
        time.sleep(0.2)
    drain_s = work.drain()
    target = cluster.view(leader)["commit_index"]
    follower.start()
    catch_up_s = cluster.wait_applied(follower, target, timeout_s=30)
    print(f"{follower.id} down from index {start_index} to {target} ({len(work.acked)} jobs); "
          f"caught up in {catch_up_s:.2f} s; drained in {drain_s:.2f} s")
    mentions = [line for line in follower.log_tail(400).splitlines() if "snapshot" in line.lower()]
    print(f"{follower.id} log lines naming a snapshot: {mentions[:5]}")
    cluster.check(work)


def test_leader_sigterm_hands_over_and_exits_0(make_cluster):
    cluster: Cluster = make_cluster()
    work = Workload(cluster).start(writers=3, workers=2)
    work.wait_acked(40, timeout_s=20)
    leader = cluster.wait_leader()
    signalled_at = time.monotonic()
    leader.signal(signal.SIGTERM)
    code = leader.proc.wait(timeout=20)
    exit_s = time.monotonic() - signalled_at
    assert code == 0, f"{leader.id} exited {code} on SIGTERM:\n{leader.log_tail(60)}"
    # It handed leadership over before it left: no election timeout to wait out.
    new = cluster.wait_leader(among=cluster.others(leader), timeout_s=1.0)
    led_s = time.monotonic() - signalled_at
    work.wait_acked(len(work.acked) + 30, timeout_s=20)
    leader.start()
    cluster.wait_ready([leader])
    drain_s = work.drain()
    print(f"SIGTERM to {leader.id}: exited 0 after {exit_s:.2f} s, {new.id} led {led_s:.2f} s after the signal; "
          f"drained in {drain_s:.2f} s")
    cluster.check(work)
