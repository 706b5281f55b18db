"""Render time of the web console's pages on one node holding many jobs.

    .venv/bin/python bench/ui.py [--jobs 1000000] [--requests 40] [--data-dir DIR]

Stores N one-off jobs (each with its one waiting run, so N runs too) in
batches, as bench/scale.py does, a tenth of them labelled, and fails a few
runs; then asks for every page of the console (docs/ui.md) `--requests`
times each, one at a time, and prints the p50/p95/max of the time from
request to the last byte of the answer, measured at the client over
loopback (an upper bound of the server's render). Target: p95 <= 100 ms.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import httpx
import trio

sys.path.insert(0, os.path.dirname(__file__))
from _server import Node, start, stop_timeout_s, table
from scale import fill

P95_TARGET_MS = 100.0


def extra(i: int) -> dict:
    """Every job named, on one of 16 queues; every tenth labelled `tier:gold`."""
    return {"name": f"job-{i:07d}", "target": f"queue:ui-{i % 16}", **({"labels": {"tier": "gold"}} if i % 10 == 0 else {})}


def failures(http: httpx.Client, count: int) -> tuple[str, str]:
    """`count` runs failed on their one attempt; a job and a run to show."""
    run_id = job_id = ""
    for i in range(count):
        job = http.post("/v1/jobs", json={"name": f"failing-{i}", "target": "queue:fail",
                                          "schedule": {"at": "2020-01-01T00:00:00Z"},
                                          "retry": {"max_attempts": 1, "backoff_s": [1]}}).json()
        run = http.post("/v1/claim", json={"worker": "bench", "queues": ["fail"], "wait_s": 5}).json()["runs"][0]
        http.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": False, "error": "boom " * 20})
        run_id, job_id = run["id"], job["id"]
    return job_id, run_id


def measure(http: httpx.Client, path: str, requests: int) -> list[float]:
    times_ms = []
    for _ in range(requests):
        began = time.perf_counter()
        answer = http.get(path)
        times_ms.append((time.perf_counter() - began) * 1000)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    return times_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--data-dir", help="keep the data here (default: a temporary dir, removed); "
                        "given and already filled, the fill is skipped")
    args = parser.parse_args()
    tmp = None if args.data_dir else tempfile.mkdtemp(prefix="tempo-ui-")
    data_dir = args.data_dir or os.path.join(tmp, "data")
    refill = not os.path.exists(os.path.join(data_dir, "data.mdb"))
    server = Node(data_dir)
    rows = []
    try:
        start(server)
        fill_s = trio.run(fill, server.url, args.jobs, 30.0, 3600.0, extra) if refill else 0.0
        with httpx.Client(base_url=server.url, timeout=60) as http:
            job_id, run_id = failures(http, 5)
            some = http.get("/v1/jobs", params={"limit": 1, "name_prefix": "job-"}).json()["jobs"][0]["id"]
            # The first job stored: its events are the oldest of the feed, so
            # its page reads the most events (limits.events_filter_rows_max).
            oldest = http.get("/v1/events", params={"limit": 1}).json()["events"][0]["job_id"]
            middle = http.get("/v1/events", params={"order": "desc", "limit": 1}).json()["events"][0]["cursor"]
            pages = [
                "/ui/", "/ui/counts", "/ui/jobs", "/ui/jobs?label=tier%3Agold", "/ui/jobs?state=active&name_prefix=job-00",
                f"/ui/jobs/{some}", f"/ui/jobs/{job_id}", f"/ui/jobs/{oldest}", "/ui/runs", "/ui/runs?status=failed",
                f"/ui/runs/{run_id}", "/ui/events", f"/ui/events?before={int(middle) // 2}", "/ui/cluster",
            ]
            names = {f"/ui/jobs/{some}": "/ui/jobs/{id} (a stored job)", f"/ui/jobs/{job_id}": "/ui/jobs/{id} (a failed one)",
                     f"/ui/jobs/{oldest}": "/ui/jobs/{id} (the first stored)", f"/ui/runs/{run_id}": "/ui/runs/{id}"}
            for path in pages:
                measure(http, path, 3)  # warm
                times = sorted(measure(http, path, args.requests))
                p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                rows.append((names.get(path, path), f"{statistics.median(times):.1f}", f"{p95:.1f}", f"{times[-1]:.1f}",
                             "ok" if p95 <= P95_TARGET_MS else "MISSED"))
        assert server.stop(timeout_s=stop_timeout_s) == 0
    finally:
        server.cleanup()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"tempo ui: {args.jobs:,} jobs and as many runs stored"
          + (f" in {fill_s:.0f} s" if refill else " (kept data dir)")
          + f", 1 node, {os.cpu_count()} CPUs, {args.requests} requests a page")
    print(table(rows, ("page", "p50 ms", "p95 ms", "max ms", f"p95 <= {P95_TARGET_MS:g} ms")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
