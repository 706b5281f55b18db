"""Restart time and memory of one node holding many jobs.

    .venv/bin/python bench/scale.py [--jobs 1000000] [--days 30] [--data-dir DIR]

Stores N one-off jobs due over the next D days (batched), stops the server
with SIGTERM, starts it again, and prints seconds until /readyz answers 200
(target <= 5 s) and the restarted server's resident memory, VmRSS of
/proc/PID/status (target <= 300 MiB).
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import httpx
import msgspec
import trio

sys.path.insert(0, os.path.dirname(__file__))
from _server import Node, dir_mib, rss_mib, rss_split, start, stop_timeout_s, table

READY_TARGET_S = 5.0
RSS_TARGET_MIB = 300.0
BATCH = 1000
CONCURRENCY = 4
_enc = msgspec.json.Encoder()


def iso(at_ms: int) -> str:
    seconds, millis = divmod(at_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _no_extra(i: int) -> dict:
    return {}


async def fill(url: str, jobs: int, days: float, start_in_s: float, extra=_no_extra) -> float:
    """Stores `jobs` one-off jobs due over `days` from `start_in_s` ahead;
    `extra(i)` adds or replaces fields of the i-th job (bench/ui.py)."""
    start_ms = int(time.time() * 1000) + int(start_in_s * 1000)
    span_ms = int(days * 86_400_000)
    next_batch = 0
    batches = (jobs + BATCH - 1) // BATCH
    last_report = time.monotonic()

    async def client() -> None:
        nonlocal next_batch, last_report
        async with httpx.AsyncClient(base_url=url, timeout=300.0) as http:
            while next_batch < batches:
                k = next_batch
                next_batch += 1
                items = [
                    {
                        "target": f"queue:scale-{i % 64}",
                        "schedule": {"at": iso(start_ms + (i * 7919 % jobs) * span_ms // jobs)},
                        **extra(i),
                    }
                    for i in range(k * BATCH, min(jobs, (k + 1) * BATCH))
                ]
                r = await http.post("/v1/jobs/batch", content=_enc.encode({"jobs": items}), headers={"content-type": "application/json"})
                assert r.status_code == 200, r.text
                assert all(x["status"] == 201 for x in msgspec.json.decode(r.content)["results"])
                if time.monotonic() - last_report > 10:
                    last_report = time.monotonic()
                    print(f"  {min(jobs, (k + 1) * BATCH):,} jobs stored", flush=True)

    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(CONCURRENCY):
            nursery.start_soon(client)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument(
        "--start-in-s", type=float, default=3600.0,
        help="the first job is due this far ahead (default 3600: nothing falls due during the bench); "
        "a negative value stores an overdue backlog, which a restart loads at once",
    )
    parser.add_argument("--data-dir", help="keep the data here (default: a temporary dir, removed)")
    args = parser.parse_args()
    tmp = None if args.data_dir else tempfile.mkdtemp(prefix="tempo-scale-")
    data_dir = args.data_dir or os.path.join(tmp, "data")
    server = Node(data_dir)
    try:
        start(server)
        fill_s = trio.run(fill, server.url, args.jobs, args.days, args.start_in_s)
        rss_before = rss_mib(server)
        split_before = rss_split(server)
        stop_started = time.monotonic()
        code = server.stop(timeout_s=stop_timeout_s)
        stop_s = time.monotonic() - stop_started
        assert code == 0, f"SIGTERM exit {code}"
        ready_s = start(server)
        time.sleep(0.5)  # let start-up work that follows readiness settle
        rss_after = rss_mib(server)
        split_after = rss_split(server)
        some = httpx.get(f"{server.url}/v1/jobs", params={"limit": 1}).json()["jobs"]
        assert some, "no job after the restart"
        assert server.stop(timeout_s=stop_timeout_s) == 0
        size = dir_mib(data_dir)
    finally:
        server.cleanup()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"tempo scale: {args.jobs:,} one-off jobs over {args.days:g} days from now + {args.start_in_s:g} s, "
        f"1 node, {os.cpu_count()} CPUs"
    )
    rows = [
        ("store jobs (batched)", f"{fill_s:.1f} s", f"{args.jobs / fill_s:,.0f} jobs/s", "-", "-"),
        ("SIGTERM to exit", f"{stop_s:.2f} s", "-", "-", "-"),
        ("restart to /readyz 200", f"{ready_s:.2f} s", "-", f"<= {READY_TARGET_S:g} s", "ok" if ready_s <= READY_TARGET_S else "MISSED"),
        ("RSS before restart", f"{rss_before:.0f} MiB", "-", "-", "-"),
        ("RSS after restart", f"{rss_after:.0f} MiB", "-", f"<= {RSS_TARGET_MIB:g} MiB", "ok" if rss_after <= RSS_TARGET_MIB else "MISSED"),
        ("data dir on disk", f"{size:.0f} MiB", "-", "-", "-"),
    ]
    print(table(rows, ("measure", "value", "rate", "target", "verdict")))
    print(f"RSS before restart: {split_before}; after: {split_after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
