#!/usr/bin/env python3
"""Two ways to lay one-off jobs out in LMDB, measured at LMDB's level.

    .venv/bin/python bench/layout.py [--jobs 1000000] [--days 30] [--layout both]

No tempo code runs here but the store's way of putting new rows
(engine/tables/writes.py `put_new`): rows of the sizes tempo writes
(docs/performance.md "Pages filled in key order") are put in batches of
`--batch`, one fsynced transaction each, as a bulk load through
`POST /v1/jobs/batch` puts them.
The jobs are due over `--days`, in an order that scatters neighbours
(bench/_batch.py `spread_at_ms`). Prints, for each layout, the storing rate
(one thread, apply's LMDB work alone: tempo's own checks, events and views
come on top), bytes per job of the file's pages, and what a commit wrote
per job (`wchar` of /proc/self/io), and for `arrival` how fast the runs move into
due order afterwards.

- `today`: the store's format. A new one-off writes its job, its run (keyed
  by due time), the runs-by-job, runs-by-status and owner index rows, its
  `job.created` event, and its minute's count of open runs.
- `arrival`: what a format that keeps far-future runs by arrival would
  write. The job row carries its run's due time and status; an index
  keyed by the run's due day, then the job, replaces the runs, runs-by-job
  and runs-by-status rows and the minute count until the run comes near.
  Each day's runs move into due order once, in one pass when the day comes
  near (`promote`, timed apart), as sorted appends.
"""

import argparse
import os
import sys
import tempfile
import time

import lmdb

from tempo.engine.tables.writes import put_new

sys.path.insert(0, os.path.dirname(__file__))
from _batch import spread_at_ms

START_MS = 1_924_992_000_000
OWNER = b"default\x00"
JOB_VALUE = 141  # a one-off's Job record (msgpack), bytes
RUN_VALUE = 76  # its waiting Run record
EVENT_VALUE = 62  # its job.created Event
MINUTE_MS = 60_000
DAY_MS = 86_400_000


def job_key(n: int) -> bytes:
    # A 26-character ID that grows with n, as a batch's IDs do.
    return b"01M" + f"{n:023d}".encode()


def wchar() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("wchar")).split()[1])


def load(layout: str, jobs: int, days: float, batch: int) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="tempo-layout-")
    env = lmdb.open(tmp, map_size=64 << 30, max_dbs=16, sync=True, metasync=True, readahead=False)
    names = ("jobs", "by_owner", "events", "runs", "by_job", "by_status", "open", "later")
    db = {name: env.open_db(name.encode()) for name in names}
    job_value, run_value, event_value = b"j" * JOB_VALUE, b"r" * RUN_VALUE, b"e" * EVENT_VALUE
    span_ms = int(days * DAY_MS)
    written = wchar()
    started = time.perf_counter()
    for first in range(0, jobs, batch):
        rows: dict[str, list[tuple[bytes, bytes]]] = {name: [] for name in names}
        minutes: dict[int, int] = {}
        for n in range(first, min(jobs, first + batch)):
            key = job_key(n)
            due_ms = spread_at_ms(n, jobs, START_MS, span_ms)
            due = due_ms.to_bytes(8, "big")
            rows["by_owner"].append((OWNER + key, b""))
            rows["events"].append((b"e" + OWNER + n.to_bytes(8, "big"), event_value))
            if layout == "today":
                runs_key = (due_ms // MINUTE_MS).to_bytes(4, "big") + bytes((n % 64,)) + due + key + due
                rows["jobs"].append((key, job_value))
                rows["runs"].append((runs_key, run_value))
                rows["by_job"].append((key + due, runs_key))
                rows["by_status"].append((OWNER + b"\x01" + due + key + due, b""))
                minutes[due_ms // MINUTE_MS] = minutes.get(due_ms // MINUTE_MS, 0) + 1
            else:
                rows["jobs"].append((key, job_value + due + b"w"))
                rows["later"].append(((due_ms // DAY_MS).to_bytes(2, "big") + key, b""))
        with env.begin(write=True) as txn:
            for name, put in rows.items():
                if put:
                    with txn.cursor(db=db[name]) as cur:
                        put_new(cur, put)
            for minute, count in sorted(minutes.items()):
                raw = txn.get(minute.to_bytes(4, "big"), db=db["open"])
                txn.put(minute.to_bytes(4, "big"), (count + (0 if raw is None else int.from_bytes(raw, "big"))).to_bytes(8, "big"), db=db["open"])
    stored_s = time.perf_counter() - started
    figures = {"jobs/s": jobs / stored_s, "written B/job": (wchar() - written) / jobs}
    # Before any promotion: a store holding `days` of future jobs.
    figures["B/job"] = (env.info()["last_pgno"] + 1) * env.stat()["psize"] / jobs
    if layout == "arrival":
        figures["promote runs/s"] = promote(env, db)
    env.close()
    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)
    return figures


def promote(env: lmdb.Environment, db: dict) -> float:
    """Moves every day's runs into due order, a day at a time: each run
    read from the later index and its job, then put as a runs row, a
    runs-by-job row and a runs-by-status row. The days come in order, so
    the runs and runs-by-status rows are past their tables' last keys."""
    moved = 0
    started = time.perf_counter()
    with env.begin() as txn:
        days = sorted({key[:2] for key in txn.cursor(db=db["later"]).iternext(values=False)})
    for day in days:
        with env.begin(write=True) as txn:
            later = txn.cursor(db=db["later"])
            jobs_cur = txn.cursor(db=db["jobs"])
            runs, by_job, by_status = [], [], []
            found = later.set_range(day)
            while found and later.key()[:2] == day:
                key = later.key()[2:]
                value = jobs_cur.get(key)
                due = value[-9:-1]
                runs_key = (int.from_bytes(due, "big") // MINUTE_MS).to_bytes(4, "big") + b"\x00" + due + key + due
                runs.append((runs_key, b"r" * RUN_VALUE))
                by_job.append((key + due, runs_key))
                by_status.append((OWNER + b"\x01" + due + key + due, b""))
                found = later.delete()
            for name, put in (("runs", runs), ("by_job", by_job), ("by_status", by_status)):
                with txn.cursor(db=db[name]) as cur:
                    put_new(cur, put)
            moved += len(runs)
    return moved / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--layout", choices=("today", "arrival", "both"), default="both")
    args = ap.parse_args()
    layouts = ("today", "arrival") if args.layout == "both" else (args.layout,)
    for layout in layouts:
        figures = load(layout, args.jobs, args.days, args.batch)
        print(f"{layout:<8} " + "  ".join(f"{name} {value:,.0f}" for name, value in figures.items()), flush=True)


if __name__ == "__main__":
    main()
