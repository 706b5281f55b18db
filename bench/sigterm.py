#!/usr/bin/env python3
"""SIGTERM-and-restart cycles of a local 3-node cluster with workers attached
and a steady trickle of writes: how long each SIGTERM takes to exit, and how
long each restarted node takes to catch up.

    .venv/bin/python bench/sigterm.py [--rounds 10] [--workers 2] [--write-gap-ms 20] [--seed N]

Starts three nodes (temporary data dirs, free loopback ports), W worker
processes (`tempo.loadgen.start_workers`: the worker library over all three
URLs, long-polling claims) and one writer thread that keeps sending small
creates round-robin over the nodes, redirects followed. Then, each round:

1. pick a node at random (seeded), note whether it leads;
2. SIGTERM it; exit = the process's exit minus the signal's time;
3. start it again (same data dir and arguments); catch-up = from that start
   until its own `GET /v1/cluster` shows an `applied_index` at least the
   leader's `commit_index` read just after the start.

Targets (docs/operations.md "Stopping"): every exit 0 within 2 s, every
catch-up within 10 s. Exit status 0 when met; 1 when one was missed; 2 when
the cluster could not run.
"""

import argparse
import os
import random
import sys
import tempfile
import threading
import time
import uuid

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from _server import Cluster, Node, SpawnError, ready_timeout_s, stop_timeout_s, table
from tempo import loadgen

EXIT_TARGET_S = 2.0
CATCH_UP_TARGET_S = 10.0
write_timeout_s = 1.0


def writer(urls: list[str], stop: threading.Event, gap_s: float, acked: list[int]) -> None:
    body = {"target": "queue:sigterm-writes", "schedule": {"at": "2099-01-01T00:00:00Z"}}
    k = 0
    with httpx.Client(timeout=write_timeout_s, follow_redirects=True) as http:
        while not stop.is_set():
            try:
                answer = http.post(urls[k % len(urls)] + "/v1/jobs", json=body | {"request_key": uuid.uuid4().hex})
                ok = 200 <= answer.status_code < 300
            except httpx.HTTPError:
                ok = False
            if ok:
                acked[0] += 1
            else:
                k += 1
            time.sleep(gap_s)


def catch_up_s(cluster: Cluster, node: Node, started: float) -> float:
    leader, _ = cluster.leader()
    view = leader.view() or {}
    target = int(view.get("commit_index", 0))
    deadline_s = started + 60
    while time.monotonic() < deadline_s:
        mine = node.view()
        if mine is not None and int(mine.get("applied_index", 0)) >= target:
            return time.monotonic() - started
        time.sleep(0.02)
    return float("inf")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--write-gap-ms", type=float, default=20)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}")
    with tempfile.TemporaryDirectory(prefix="tempo-sigterm-") as root:
        cluster = Cluster(root, 3)
        try:
            cluster.start(ready_timeout_s)
        except SpawnError as exc:
            print(exc)
            return 2
        procs, _, worker_stop = loadgen.start_workers(cluster.urls, "sigterm-bench", args.workers)
        stop = threading.Event()
        acked = [0]
        thread = threading.Thread(target=writer, args=(cluster.urls, stop, args.write_gap_ms / 1000, acked), daemon=True)
        thread.start()
        rows = []
        missed = False
        try:
            time.sleep(1.0)
            for n in range(1, args.rounds + 1):
                leader, _ = cluster.leader()
                node = rng.choice(cluster.nodes)
                role = "leader" if node is leader else "follower"
                signalled = time.monotonic()
                code = node.stop(timeout_s=30)
                exit_s = time.monotonic() - signalled
                started = time.monotonic()
                node.start()
                node.wait_ready(ready_timeout_s, since_s=started)
                caught_s = catch_up_s(cluster, node, started)
                missed |= code != 0 or exit_s > EXIT_TARGET_S or caught_s > CATCH_UP_TARGET_S
                rows.append((n, node.id, role, code, f"{exit_s:.2f}", f"{caught_s:.2f}", acked[0]))
                time.sleep(0.5)
        finally:
            stop.set()
            worker_stop.set()
            for proc in procs:
                proc.join(timeout=10)
            cluster.stop(stop_timeout_s)
        print(table(rows, ("round", "node", "was", "exit", "exit s", "catch-up s", "writes acked")))
        exits = sorted(float(r[4]) for r in rows)
        print(f"SIGTERM exit: max {exits[-1]:.2f} s, median {exits[len(exits) // 2]:.2f} s (target {EXIT_TARGET_S:g} s); "
              f"catch-up max {max(float(r[5]) for r in rows):.2f} s (target {CATCH_UP_TARGET_S:g} s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
