#!/usr/bin/env python3
"""How fast a stop reaches a running handler, and how exactly a timeout ends
its attempt, against one local `tempo serve` (docs/semantics.md "Cancelling
a run", "Run timeouts").

    .venv/bin/python bench/stop_latency.py [--runs 20] [--lease-s 300]

Starts a node (temporary data dir, free loopback port) and one worker of the
`tempo.worker` library whose handler sleeps until cancelled. Then, `--runs`
times each:

- cancel: a one-off job (`lease_s` of `--lease-s`) is claimed, and once its
  handler runs, `POST /v1/runs/{id}/cancel`; measured from the cancel's
  answer to the handler's cancellation (the worker's signals poll);
- timeout: a one-off job with `timeout_s` 1 is claimed; measured, on the
  server's own clock, from the attempt's `timeout_at` to its recorded end
  (`attempts[0].ended_at`).

Targets: every cancel reaches its handler within 1 s, whatever `lease_s`;
every timeout ends its attempt within 100 ms of `timeout_at`. Prints p50,
p99 and max of each; exit status 0 when both are met, 1 when not, 2 when the
node could not run.
"""

import argparse
import statistics
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import Node, SpawnError, start, table
from tempo.worker import Worker

cancel_target_s = 1.0
timeout_target_s = 0.1
wait_s = 30.0


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def _one(http: httpx.AsyncClient, queue: str, cancelled: dict[str, trio.Event], **fields: object) -> dict:
    body = {"target": f"queue:{queue}", "schedule": {"at": datetime.now(UTC).isoformat()},
            "retry": {"max_attempts": 1, "backoff_s": [0]}} | fields
    job = (await http.post("/v1/jobs", json=body)).raise_for_status().json()
    with trio.fail_after(wait_s):
        while True:
            runs = (await http.get(f"/v1/jobs/{job['id']}/runs")).json()["runs"]
            if runs and runs[0]["status"] == "claimed" and runs[0]["id"] in cancelled:
                return runs[0]
            await trio.sleep(0.01)


async def measure(url: str, runs: int, lease_s: int) -> tuple[list[float], list[float]]:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    cancelled: dict[str, trio.Event] = {}

    async def handler(run: dict) -> None:
        event = cancelled.setdefault(run["id"], trio.Event())
        try:
            await trio.sleep(3600)
        finally:
            event.set()

    cancel_s: list[float] = []
    timeout_late_s: list[float] = []
    worker = Worker([url], "bench-stop", {queue: handler}, wait_s=1, concurrency=4)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http, trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for _ in range(runs):
            run = await _one(http, queue, cancelled, lease_s=lease_s)
            await trio.sleep(0.3)  # its signals poll is waiting by now
            (await http.post(f"/v1/runs/{run['id']}/cancel")).raise_for_status()
            asked_s = trio.current_time()
            with trio.fail_after(wait_s):
                await cancelled[run["id"]].wait()
            cancel_s.append(trio.current_time() - asked_s)
        for _ in range(runs):
            run = await _one(http, queue, cancelled, lease_s=lease_s, timeout_s=1)
            with trio.fail_after(wait_s):
                while not (attempts := (await http.get(f"/v1/runs/{run['id']}")).json()["attempts"])[0]["ended_at"]:
                    await trio.sleep(0.05)
            timeout_late_s.append((_at(attempts[0]["ended_at"]) - _at(run["timeout_at"])).total_seconds())
        await worker.stop(grace_s=1)
    return cancel_s, timeout_late_s


def _row(name: str, values: list[float], target_s: float) -> tuple:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (name, f"{statistics.median(ordered) * 1000:.1f}", f"{p99 * 1000:.1f}", f"{ordered[-1] * 1000:.1f}",
            f"{target_s * 1000:.0f}", "met" if ordered[-1] <= target_s else "MISSED")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="cancels and timeouts measured, each (default 20)")
    parser.add_argument("--lease-s", type=int, default=300, help="the jobs' lease_s (default 300)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tempo-bench-stop-") as tmp:
        node = Node(Path(tmp) / "data")
        try:
            start(node)
            cancel_s, timeout_late_s = trio.run(measure, node.url, args.runs, args.lease_s)
        except (SpawnError, httpx.HTTPError, trio.TooSlowError) as exc:
            print(f"bench/stop_latency.py: could not run: {exc!r}", file=sys.stderr)
            return 2
        finally:
            node.cleanup()
    rows = [_row("cancel -> handler cancelled", cancel_s, cancel_target_s),
            _row("timeout_at -> attempt ended", timeout_late_s, timeout_target_s)]
    print(table(rows, ("what (ms)", "p50", "p99", "max", "target", "")))
    return 0 if all(row[-1] == "met" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
