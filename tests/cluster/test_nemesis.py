"""Random faults, one node at a time, from one seed (printed, and passed on to
the workload): cut off, SIGKILL and restart, SIGSTOP and SIGCONT, or a slow
link. Between two faults the cluster is whole again. Then the invariants of
`Cluster.check`."""

import os
import random
import time

from .conftest import Cluster, Node, Workload

faults_s = 15.0
hold_s_min = 1.0
hold_s_max = 3.0
FAULTS = ("isolate", "kill", "pause", "slow")


def inject(cluster: Cluster, node: Node, fault: str, rng: random.Random) -> None:
    if fault == "isolate":
        cluster.isolate(node)
    elif fault == "kill":
        node.kill()
    elif fault == "pause":
        node.pause()
    else:
        node.proxy.delay_s = rng.uniform(0.05, 0.3)


def undo(cluster: Cluster, node: Node, fault: str) -> None:
    if fault == "isolate":
        cluster.heal()
    elif fault == "kill":
        node.start()
        cluster.wait_ready([node])
    elif fault == "pause":
        node.resume()
    else:
        node.proxy.delay_s = 0.0


def test_random_faults_one_node_at_a_time(make_cluster):
    seed = int(os.environ.get("TEMPO_NEMESIS_SEED", random.randrange(1 << 32)))
    print(f"nemesis seed {seed} (TEMPO_NEMESIS_SEED={seed} replays the faults)")
    rng = random.Random(seed)
    cluster: Cluster = make_cluster()
    work = Workload(cluster, seed=seed).start(writers=3, workers=2)
    work.wait_acked(30, timeout_s=20)
    done: list[str] = []
    deadline_s = time.monotonic() + faults_s
    while time.monotonic() < deadline_s:
        node, fault, hold_s = rng.choice(cluster.nodes), rng.choice(FAULTS), rng.uniform(hold_s_min, hold_s_max)
        leader = cluster.wait_leader(timeout_s=10)
        role = "leader" if node is leader else "follower"
        done.append(f"{fault} {node.id} ({role}) {hold_s:.1f} s")
        print(f"fault {len(done)}: {done[-1]}", flush=True)
        inject(cluster, node, fault, rng)
        time.sleep(hold_s)
        undo(cluster, node, fault)
        cluster.wait_leader(timeout_s=10)
    work.wait_acked(len(work.acked) + 30, timeout_s=20)
    drain_s = work.drain()
    print(f"faults: {done}; drained in {drain_s:.2f} s")
    cluster.check(work)
