"""SIGTERM in a cluster with writers and workers attached: a follower, then
the leader, each exits 0 well within the HTTP server's grace (its peers'
replication streams are closed, not waited for), and the others keep a
leader (docs/operations.md "Stopping")."""

import signal
import time

from .conftest import Cluster, Node, Workload

# The goal is 2 s; the bound asserted leaves room for a loaded machine, and
# stays far below the 10 s the server would otherwise wait.
exit_s_max = 5.0


def _sigterm(node: Node) -> float:
    signalled_at = time.monotonic()
    node.signal(signal.SIGTERM)
    code = node.proc.wait(timeout=20)
    exit_s = time.monotonic() - signalled_at
    assert code == 0, f"{node.id} exited {code} on SIGTERM:\n{node.log_tail(60)}"
    return exit_s


def test_sigterm_of_a_follower_then_the_leader_exits_fast(make_cluster):
    cluster: Cluster = make_cluster()
    work = Workload(cluster).start(writers=2, workers=2)
    work.wait_acked(30, timeout_s=20)
    leader = cluster.wait_leader()
    follower = cluster.others(leader)[0]
    follower_s = _sigterm(follower)
    assert cluster.wait_leader(among=cluster.others(follower), timeout_s=5) is leader
    work.wait_acked(len(work.acked) + 20, timeout_s=20)
    follower.start()
    cluster.wait_ready([follower])
    leader_s = _sigterm(leader)
    new = cluster.wait_leader(among=cluster.others(leader), timeout_s=5)
    work.wait_acked(len(work.acked) + 20, timeout_s=20)
    print(f"SIGTERM with workers attached: follower {follower.id} exited in {follower_s:.2f} s, "
          f"leader {leader.id} in {leader_s:.2f} s ({new.id} leads)")
    for node, exit_s in ((follower, follower_s), (leader, leader_s)):
        assert exit_s < exit_s_max, f"{node.id} took {exit_s:.2f} s:\n{node.log_tail(60)}"
    assert "stopping: handing over leadership" in leader.log_tail(400)
    assert "stopped in" in follower.log_tail(400)
    leader.start()
    cluster.wait_ready([leader])
    work.drain()
    cluster.check(work)
