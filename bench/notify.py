#!/usr/bin/env python3
"""Notification delivery: how fast notices follow the events they announce.

    .venv/bin/python bench/notify.py [--runs 2000] [--timeout-s 60]

Starts one node with a `[notify]` table and a local HTTP endpoint that
answers 204 at once, creates RUNS one-off jobs (due now, one attempt, a
`notify` for `run.failed`), claims them and reports each failed in batches,
then waits until every notice arrived. Prints the notices per second (from
the first result to the last notice) and the lag of a notice (its arrival
minus its event's `at`, one clock) at p50, p99 and max.

Exit status 0 when every notice arrived, 1 when some did not within
--timeout-s, 2 when the node could not run.
"""

import argparse
import http.server
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from _server import Node, SpawnError, start, stop_timeout_s, table

batch_jobs = 1000


class Arrivals:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lag_s: dict[str, float] = {}
        self.last_s = 0.0

    def record(self, body: bytes) -> None:
        notice = json.loads(body)
        at_s = datetime.fromisoformat(notice["at"].replace("Z", "+00:00")).timestamp()
        now_s = time.time()
        with self.lock:
            self.lag_s.setdefault(notice["id"], now_s - at_s)
            self.last_s = now_s


def endpoint(arrivals: Arrivals) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            arrivals.record(self.rfile.read(int(self.headers.get("content-length", "0"))))
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def fail_all(url: str, runs: int, hook: str) -> float:
    """Creates the jobs, fails their runs; the wall time of the first result."""
    job = {"target": "queue:bench-notify", "schedule": {"at": "2020-01-01T00:00:00Z"},
           "retry": {"max_attempts": 1, "backoff_s": [0]}, "notify": {"url": hook, "events": ["run.failed"]}}
    first_s = 0.0
    with httpx.Client(base_url=url, timeout=60) as client:
        for start_at in range(0, runs, batch_jobs):
            count = min(batch_jobs, runs - start_at)
            answer = client.post("/v1/jobs/batch", json={"jobs": [job] * count})
            answer.raise_for_status()
        failed = 0
        while failed < runs:
            claimed = client.post("/v1/claim", json={"worker": "bench", "queues": ["bench-notify"],
                                                     "max_runs": 1000, "wait_s": 5}).json()["runs"]
            if not claimed:
                raise SystemExit(f"only {failed} of {runs} runs were claimed")
            results = [{"run_id": r["id"], "attempt": r["attempt"], "ok": False, "error": "bench"} for r in claimed]
            first_s = first_s or time.time()
            client.post("/v1/results", json={"results": results}).raise_for_status()
            failed += len(claimed)
    return first_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--timeout-s", type=float, default=60.0)
    args = parser.parse_args()
    arrivals = Arrivals()
    httpd = endpoint(arrivals)
    hook = f"http://127.0.0.1:{httpd.server_address[1]}/hook"
    with tempfile.TemporaryDirectory(prefix="tempo-bench-notify-") as root:
        config = Path(root) / "tempo.toml"
        config.write_text('[notify]\nsecret = "' + "b" * 40 + '"\n')
        node = Node(Path(root) / "data", extra_args=("--config", str(config)))
        try:
            start(node)
            first_s = fail_all(node.url, args.runs, hook)
            deadline_s = time.monotonic() + args.timeout_s
            while len(arrivals.lag_s) < args.runs and time.monotonic() < deadline_s:
                time.sleep(0.05)
        except SpawnError as exc:
            print(f"bench/notify: {exc}", file=sys.stderr)
            return 2
        finally:
            node.stop(timeout_s=stop_timeout_s)
            node.cleanup()
            httpd.shutdown()
    lags = sorted(arrivals.lag_s.values())
    got = len(lags)
    if not got:
        print(f"no notice of {args.runs} arrived within {args.timeout_s:g} s")
        return 1
    span_s = max(arrivals.last_s - first_s, 1e-9)
    print(table([(args.runs, got, f"{got / span_s:.0f}", f"{lags[got // 2] * 1000:.0f}",
                  f"{lags[min(got - 1, got * 99 // 100)] * 1000:.0f}", f"{lags[-1] * 1000:.0f}")],
                ("runs failed", "notices", "notices/s", "lag p50 ms", "lag p99 ms", "lag max ms")))
    return 0 if got == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
