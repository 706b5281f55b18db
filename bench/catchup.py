#!/usr/bin/env python3
"""Catch-up after a day's downtime of N minutely cron jobs.

    python bench/catchup.py                          # 10,000 jobs: engine figures, then a real server
    python bench/catchup.py --jobs 10000 --no-server

(a) Engine level, per policy (and time zone): N jobs `* * * * *` are
created at T in a temporary store (fsync on, as `tempo serve` opens it);
at T + 1 day each job's waiting run is claimed as the dispatcher claims it,
in claim commands of 1,000. Figures: the catch-up decisions (engine/plan.py
`catch_up`: the catch-up slot, the missed ranges and their counts), the
apply of the claim entries that create the catch-up runs and write the
`run.missed` records, and their sum, the time to create the catch-up runs.

(b) A real `tempo serve` under libfaketime (Debian package `faketime`): N
such jobs are created through the API, the server is stopped, its clock is
moved a day ahead, and it is started again; one worker claims 1,000 at a
time until it has every job's catch-up run. Figures: the time from the
restart's readiness until the first catch-up run is handed out, that run's
lateness (its claim's `started_at` minus its `due_at`, both the server's),
and the time until all N catch-up runs are handed out.
"""

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

import httpx

from _server import Node, table
from tempo.engine.commands import Claim, ClaimRuns, CreateJobs, encode_entry
from tempo.engine.jobs import Jobs
from tempo.engine.plan import catch_up
from tempo.engine.store import Store
from tempo.schema import CatchupIn, JobCreate, ScheduleIn

OWNER = "bench"
DAY_MS = 86_400_000
T_MS = 1_798_761_600_000 + 30_000  # 2027-01-01T00:00:30Z
BATCH = 1000
_LIBFAKETIME = glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") + glob.glob("/usr/lib/faketime/libfaketimeMT.so.1")


def engine_round(root: str, jobs_n: int, policy: str, timezone: str) -> tuple[float, float, int, int]:
    """(decisions s, apply s, catch-up runs made, missed records) of one round."""
    path = tempfile.mkdtemp(dir=root)
    store = Store(path)
    try:
        maker = Jobs(store, None, now_ms=lambda: T_MS)  # type: ignore[arg-type]  # new_job commits nothing
        body = JobCreate(
            target="queue:cu", schedule=ScheduleIn(cron="* * * * *", timezone=timezone), lease_s=3600,
            catchup=None if policy == "latest" else CatchupIn(policy=policy),  # type: ignore[arg-type]
        )
        items = [maker.new_job(OWNER, body, T_MS, from_msgpack=False) for _ in range(jobs_n)]
        index = store.applied_index()
        for i in range(0, jobs_n, BATCH):
            index += 1
            store.apply_entry(index, encode_entry([CreateJobs(T_MS, items[i : i + BATCH])]))
        now_ms = T_MS + DAY_MS
        started = time.perf_counter()
        claims = []
        records = 0
        for item in items:
            job = item.job
            assert job.slot_ms is not None
            found = catch_up(job, job.slot_ms, now_ms)
            assert found is not None
            records += len(found.missed)
            claims.append(Claim(job.id, job.slot_ms, now_ms + job.lease_s * 1000, found.slot_ms, found.due_ms,
                                missed=found.missed, catchup_until_ms=found.until_ms,
                                catchup_decided_ms=found.decided_ms))
        decided_s = time.perf_counter() - started
        started = time.perf_counter()
        made = 0
        for i in range(0, jobs_n, BATCH):
            index += 1
            _, changes = store.apply_entry(index, encode_entry([ClaimRuns(now_ms, "w", claims[i : i + BATCH])]))
            made += sum(1 for _, run, _ in changes.woken if run.nominal_ms > T_MS + 60_000)
        applied_s = time.perf_counter() - started
        return decided_s, applied_s, made, records
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def server_round(root: str, jobs_n: int) -> dict[str, float]:
    fake_path = Path(root) / "faketime"
    fake_path.write_text("+0\n")
    env = {"LD_PRELOAD": _LIBFAKETIME[0], "FAKETIME_TIMESTAMP_FILE": str(fake_path), "FAKETIME_NO_CACHE": "1",
           "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    node = Node(Path(root) / "data", env=env)
    try:
        node.start()
        node.wait_ready(60)
        with httpx.Client(base_url=node.url, timeout=60) as http:
            body = {"target": "queue:cu", "schedule": {"cron": "* * * * *"}, "lease_s": 3600}
            for i in range(0, jobs_n, BATCH):
                r = http.post("/v1/jobs/batch", json={"jobs": [body] * min(BATCH, jobs_n - i)})
                assert r.status_code == 200, r.text
            created_ms = int(time.time() * 1000)
        node.stop()
        fake_path.write_text("+86400\n")  # a day of downtime
        started = time.monotonic()
        node.start()
        node.wait_ready(120)
        ready = time.monotonic()
        first_s = lateness_ms = None
        catch_up_runs = 0
        with httpx.Client(base_url=node.url, timeout=60) as http:
            while catch_up_runs < jobs_n and time.monotonic() - ready < 120:
                r = http.post("/v1/claim", json={"worker": "w", "queues": ["cu"], "max_runs": BATCH, "wait_s": 1})
                assert r.status_code == 200, r.text
                for run in r.json()["runs"]:
                    if ms(run["nominal_at"]) < created_ms + DAY_MS - 120_000:
                        continue  # a run that was waiting before the downtime
                    catch_up_runs += 1
                    if first_s is None:
                        first_s = time.monotonic() - ready
                        lateness_ms = ms(run["started_at"]) - ms(run["due_at"])
            all_s = time.monotonic() - ready
        return {"ready_s": ready - started, "first_s": first_s or -1.0, "lateness_ms": lateness_ms or -1,
                "all_s": all_s, "runs": catch_up_runs}
    finally:
        node.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--no-server", action="store_true", help="engine figures only")
    parser.add_argument("--no-engine", action="store_true", help="server figures only")
    parser.add_argument("--dir", default=None, help="where the temporary stores go")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tempo-catchup-", dir=args.dir)
    try:
        rows = []
        rounds = () if args.no_engine else (("latest", "UTC"), ("all", "UTC"), ("none", "UTC"), ("latest", "Europe/Berlin"))
        for policy, timezone in rounds:
            decided_s, applied_s, made, records = engine_round(root, args.jobs, policy, timezone)
            rows.append((policy, timezone, f"{decided_s * 1000:.0f}", f"{applied_s * 1000:.0f}",
                         f"{(decided_s + applied_s) * 1000:.0f}", made, records))
        if rows:
            print(f"(a) engine: {args.jobs:,} minutely cron jobs, claimed one day later (fsync on)")
            print(table(rows, ("policy", "zone", "decide ms", "apply ms", "total ms", "catch-up runs", "missed records")))
        if args.no_server:
            return 0
        if not _LIBFAKETIME:
            print("(b) skipped: libfaketime not found (Debian package faketime)")
            return 0
        got = server_round(root, args.jobs)
        print(f"(b) tempo serve, {args.jobs:,} minutely cron jobs, restarted a day later (libfaketime):")
        print(f"  ready after restart:                 {got['ready_s']:.2f} s")
        print(f"  first catch-up run handed out after: {got['first_s']:.2f} s from ready")
        print(f"  its lateness (started_at - due_at):  {got['lateness_ms']} ms")
        print(f"  all {got['runs']:,} catch-up runs handed out after: {got['all_s']:.2f} s from ready")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
