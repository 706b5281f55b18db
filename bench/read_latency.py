"""GET latency on a real server: one node, or the leader of three.

    python bench/read_latency.py --nodes 3 --gets 2000

Creates one job, then reads it `--gets` times in a row with httpx (one
connection, no redirects followed) from the leader, and prints the median,
p90, p99 and the mean. With `?stale=true` too (`--stale`), the local read
without the leader's ReadIndex round (docs/semantics.md "Reads")."""

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

import httpx

from tempo.loadgen.spawn import Cluster


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gets", type=int, default=2000)
    parser.add_argument("--stale", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(root, args.nodes)
        try:
            cluster.start()
            leader, _ = cluster.leader() if args.nodes > 1 else (cluster.nodes[0], 0)
            due = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
            with httpx.Client(base_url=leader.url, timeout=10.0) as http:
                r = http.post("/v1/jobs", json={"target": "queue:q", "schedule": {"at": due}})
                r.raise_for_status()
                path = f"/v1/jobs/{r.json()['id']}" + ("?stale=true" if args.stale else "")
                for _ in range(100):  # warm up
                    http.get(path).raise_for_status()
                took_ms = []
                for _ in range(args.gets):
                    started = time.perf_counter()
                    http.get(path).raise_for_status()
                    took_ms.append((time.perf_counter() - started) * 1000)
        finally:
            cluster.cleanup()
    q = statistics.quantiles(took_ms, n=100)
    print(f"{args.nodes} node(s){' stale' if args.stale else ''}: {args.gets} GETs, median {q[49]:.2f} ms, "
          f"p90 {q[89]:.2f} ms, p99 {q[98]:.2f} ms, mean {statistics.fmean(took_ms):.2f} ms")


if __name__ == "__main__":
    main()
