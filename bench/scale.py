"""One node holding many jobs: bulk loading, size, restart, and a spike among them.

    .venv/bin/python bench/scale.py [--jobs 1000000] [--days 30] [--spike 25000] [--data-dir DIR]

Stores N one-off jobs due over the next D days through the batch API (4
clients, each reading only the items' statuses of a reply: bench/_batch.py)
and prints, each beside its target (docs/performance.md):

- the storing rate over all N and over the last million (the last tenth
  below 10 million jobs): target >= 50,000 jobs/s to the last million;
- bytes of `data.mdb` per job, as LMDB's pages in use (`last_pgno` of the
  environment, read after the server stopped) and as the file's size:
  target <= 400;
- after SIGTERM and a start: seconds until /readyz answers 200 (target
  <= 5 s) and the resident memory, VmRSS of /proc/PID/status (target
  <= 300 MiB);
- with `--spike K` (default 25,000; 0: none): the p99 lateness of K
  one-off runs due at one instant, drained by `tempo loadgen` with 4
  workers, on an empty node first and then on the node holding the N jobs:
  target within 10 % of the empty node's.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import httpx
import lmdb
import msgspec
import trio

sys.path.insert(0, os.path.dirname(__file__))
from _batch import iso, spread_at_ms, statuses
from _server import Node, dir_mib, rss_mib, rss_split, start, stop_timeout_s, table, tempo_command

READY_TARGET_S = 5.0
RSS_TARGET_MIB = 300.0
RATE_TARGET_JOBS_S = 50_000.0
BYTES_TARGET_PER_JOB = 400.0
SPIKE_TARGET_RATIO = 1.10
# The storing rate is also given over the last this many jobs (the last
# tenth when fewer than ten times as many are stored).
TAIL_JOBS = 1_000_000
BATCH = 1000
CONCURRENCY = 4
_enc = msgspec.json.Encoder()


def _no_extra(i: int) -> dict:
    return {}


async def fill(
    url: str, jobs: int, days: float, start_in_s: float, extra=_no_extra, marks: list[tuple[int, float]] | None = None
) -> float:
    """Stores `jobs` one-off jobs due over `days` from `start_in_s` ahead;
    `extra(i)` adds or replaces fields of the i-th job (bench/ui.py).
    `marks`, when given, gets (jobs stored so far, seconds since the start)
    after every batch answered."""
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
                        "schedule": {"at": iso(spread_at_ms(i, jobs, start_ms, span_ms))},
                        **extra(i),
                    }
                    for i in range(k * BATCH, min(jobs, (k + 1) * BATCH))
                ]
                r = await http.post("/v1/jobs/batch", content=_enc.encode({"jobs": items}), headers={"content-type": "application/json"})
                assert r.status_code == 200, r.text
                assert all(status == 201 for status in statuses(r.content)), r.text[:500]
                if marks is not None:
                    marks.append(((marks[-1][0] if marks else 0) + len(items), time.monotonic() - started))
                if time.monotonic() - last_report > 10:
                    last_report = time.monotonic()
                    print(f"  {min(jobs, (k + 1) * BATCH):,} jobs stored", flush=True)

    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(CONCURRENCY):
            nursery.start_soon(client)
    return time.monotonic() - started


def tail_rate(marks: list[tuple[int, float]], tail_jobs: int) -> float:
    """Jobs per second over the last `tail_jobs` jobs stored."""
    total, end_s = marks[-1]
    # The last mark at or before the tail's start (the start itself if none).
    before = [(n, t) for n, t in marks if n <= total - tail_jobs] or [(0, 0.0)]
    n0, t0 = before[-1]
    return (total - n0) / (end_s - t0)


def data_mdb_bytes(data_dir: str) -> tuple[int, int]:
    """(bytes of LMDB's pages in use, bytes of the file) of the node's
    `data.mdb`; read with the server stopped."""
    env = lmdb.open(data_dir, readonly=True, lock=False, max_dbs=0)
    try:
        used = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    finally:
        env.close()
    return used, os.path.getsize(os.path.join(data_dir, "data.mdb"))


def spike_p99_s(url: str, runs: int) -> float:
    """The p99 lateness, in seconds, of `runs` one-off runs due at one
    instant, as `tempo loadgen` measures it with 4 worker processes."""
    out = subprocess.run(
        [*tempo_command(), "loadgen", "--url", url, "--jobs", str(runs), "--workers", "4",
         "--no-report", "--no-progress"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    found = re.search(r"^lateness p99\s+([0-9.]+) s", out, re.MULTILINE)
    assert found, out
    lost = re.search(r"^lost\s+(\d+)", out, re.MULTILINE)
    duplicated = re.search(r"^duplicated\s+(\d+)", out, re.MULTILINE)
    assert lost and lost.group(1) == "0" and duplicated and duplicated.group(1) == "0", out
    return float(found.group(1))


def empty_spike_p99_s(runs: int) -> float:
    """The spike on a fresh node of its own, removed after."""
    tmp = tempfile.mkdtemp(prefix="tempo-scale-empty-")
    node = Node(os.path.join(tmp, "data"))
    try:
        start(node)
        return spike_p99_s(node.url, runs)
    finally:
        node.stop(timeout_s=stop_timeout_s)
        node.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument(
        "--start-in-s", type=float, default=3600.0,
        help="the first job is due this far ahead (default 3600: nothing falls due during the bench); "
        "a negative value stores an overdue backlog, which a restart loads at once",
    )
    parser.add_argument("--spike", type=int, default=25_000, help="runs of the spike, on an empty node and among the jobs (0: none)")
    parser.add_argument("--data-dir", help="keep the data here (default: a temporary dir, removed)")
    args = parser.parse_args()
    empty_p99_s = empty_spike_p99_s(args.spike) if args.spike else None
    marks: list[tuple[int, float]] = []
    tail_jobs = min(TAIL_JOBS, max(1, args.jobs // 10))
    tmp = None if args.data_dir else tempfile.mkdtemp(prefix="tempo-scale-")
    data_dir = args.data_dir or os.path.join(tmp, "data")
    server = Node(data_dir)
    try:
        start(server)
        fill_s = trio.run(fill, server.url, args.jobs, args.days, args.start_in_s, _no_extra, marks)
        rss_before = rss_mib(server)
        split_before = rss_split(server)
        stop_started = time.monotonic()
        code = server.stop(timeout_s=stop_timeout_s)
        stop_s = time.monotonic() - stop_started
        assert code == 0, f"SIGTERM exit {code}"
        used_bytes, file_bytes = data_mdb_bytes(data_dir)
        ready_s = start(server)
        time.sleep(0.5)  # let start-up work that follows readiness settle
        rss_after = rss_mib(server)
        split_after = rss_split(server)
        some = httpx.get(f"{server.url}/v1/jobs", params={"limit": 1}).json()["jobs"]
        assert some, "no job after the restart"
        stored_p99_s = spike_p99_s(server.url, args.spike) if args.spike else None
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
    tail = tail_rate(marks, tail_jobs)
    rows = [
        ("store jobs (batched)", f"{fill_s:.1f} s", f"{args.jobs / fill_s:,.0f} jobs/s", "-", "-"),
        (f"store the last {tail_jobs:,}", "-", f"{tail:,.0f} jobs/s", f">= {RATE_TARGET_JOBS_S:,.0f} jobs/s",
         verdict(tail >= RATE_TARGET_JOBS_S)),
        ("data.mdb pages in use", f"{used_bytes / (1 << 20):.0f} MiB", f"{used_bytes / args.jobs:.0f} B/job",
         f"<= {BYTES_TARGET_PER_JOB:g} B/job", verdict(used_bytes / args.jobs <= BYTES_TARGET_PER_JOB)),
        ("data.mdb file", f"{file_bytes / (1 << 20):.0f} MiB", f"{file_bytes / args.jobs:.0f} B/job", "-", "-"),
        ("SIGTERM to exit", f"{stop_s:.2f} s", "-", "-", "-"),
        ("restart to /readyz 200", f"{ready_s:.2f} s", "-", f"<= {READY_TARGET_S:g} s", "ok" if ready_s <= READY_TARGET_S else "MISSED"),
        ("RSS before restart", f"{rss_before:.0f} MiB", "-", "-", "-"),
        ("RSS after restart", f"{rss_after:.0f} MiB", "-", f"<= {RSS_TARGET_MIB:g} MiB", "ok" if rss_after <= RSS_TARGET_MIB else "MISSED"),
        ("data dir on disk", f"{size:.0f} MiB", "-", "-", "-"),
    ]
    if empty_p99_s is not None and stored_p99_s is not None:
        rows += [
            (f"spike of {args.spike:,}, empty node", f"p99 {empty_p99_s:.3f} s", "-", "-", "-"),
            (f"spike of {args.spike:,}, among the jobs", f"p99 {stored_p99_s:.3f} s",
             f"{stored_p99_s / empty_p99_s:.2f} x", f"<= {SPIKE_TARGET_RATIO:.2f} x",
             verdict(stored_p99_s <= SPIKE_TARGET_RATIO * empty_p99_s)),
        ]
    print(table(rows, ("measure", "value", "rate", "target", "verdict")))
    print(f"RSS before restart: {split_before}; after: {split_after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
