#!/usr/bin/env python3
"""Pages of the job and run listings over a big store: p50/p99/max latency
of one page of each list and filter path (docs/api.md "GET /v1/jobs",
"GET /v1/runs").

    python bench/listing.py                          # 1,000,000 jobs and their runs, fill within 120 s
    python bench/listing.py --jobs 200000 --fill-s 40 --pages 200

The store is filled at the engine level, as apply fills it, without HTTP:
`CreateJobs` entries of 1,000 one-off jobs due in the past (one waiting run
each) across `--owners` owners, then `ClaimRuns` and `ReportResults` entries
that finish runs, alternately done and failed, and `PauseJob` entries that
cancel some; until `--jobs` jobs are made or `--fill-s` seconds have passed
(then it says how many fit). One job in `--label-every` carries the label
`team=payments`, and one in ten of those `env=prod` besides, for the label
filter (docs/api.md "Labels"), which goes through the jobs-by-label index.
The store is on /dev/shm when there is one, so
fsyncs cost nothing and the fill measures apply's work. A page is what the
handler does for it: the store's read, the job outcomes and the views, and
the JSON encoding, without the socket. Each path is walked from its first
page on, following `next_cursor`, for `--pages` pages.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
# The tests' store hooks (tests/engine/store_hooks.py): forgetting an index is
# what only a test or a benchmark does to a store.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import msgspec

from engine.store_hooks import forget_label_index, forget_run_index
from tempo import ids
from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    CreateJobs,
    NewJob,
    PauseJob,
    ReportResults,
    Result,
)
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.net import views
from tempo.schema import JobCreate, JobsPage, RunsPage

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
BATCH = 1000
_json = msgspec.json.Encoder()


class Filler:
    def __init__(self, store: Store, owners: int, label_every: int):
        self.store = store
        self.label_every = label_every
        self.labelled = 0
        self.owners = [f"owner-{k}" for k in range(owners)]
        self.index = 0
        self.made = 0
        self.finished = 0
        self.paused = 0
        body = msgspec.json.decode(b'{"target":"queue:q","schedule":{"at":"2027-01-15T07:00:00Z"},"retry":{"max_attempts":1}}', type=JobCreate)
        self.template = Jobs(None, None).new_job("x", body, T0, from_msgpack=False)  # type: ignore[arg-type]

    def apply(self, *commands: object) -> list:
        self.index += 1
        return self.store.apply_commands(self.index, list(commands))[0]  # type: ignore[arg-type]

    def create(self, at_ms: int) -> list[tuple[str, int, str]]:
        """A batch of one-offs of one owner; (job ID, slot, owner) of each."""
        # Two batches in a row share an owner: one finished, one paused (`fill`).
        owner = self.owners[(self.made // BATCH // 2) % len(self.owners)]
        items, made = [], []
        for k, job_id in enumerate(ids.job_ids_from_int(at_ms, self.made * 7919, BATCH)):
            job = msgspec.structs.replace(
                self.template.job, id=job_id, owner=owner, created_at_ms=at_ms,
                name=f"report-{(self.made + k) % 1000:03d}", target=f"queue:q{(self.made + k) % 10}",
            )
            n = self.made + k
            if n % self.label_every == 0:
                job.labels = {"env": "prod", "team": "payments"} if n % (10 * self.label_every) == 0 else {"team": "payments"}
                self.labelled += 1
            items.append(NewJob(job, self.template.first_due_ms, b""))
            made.append((job_id, job.slot_ms, owner))
        self.apply(CreateJobs(at_ms, items))
        self.made += BATCH
        return made

    def finish(self, batch: list[tuple[str, int, str]], at_ms: int) -> None:
        """Claims the batch's runs and reports half done, half failed; pauses
        a tenth of the next batch's jobs instead (their runs are cancelled)."""
        claims = [Claim(job_id, slot_ms, at_ms + 60_000, one_off=True) for job_id, slot_ms, _ in batch]
        self.apply(ClaimRuns(at_ms, "w", claims))
        results = [
            Result(job_id, slot_ms, 1, k % 2 == 0, None if k % 2 else "out", "boom" if k % 2 else None)
            for k, (job_id, slot_ms, _) in enumerate(batch)
        ]
        self.apply(ReportResults(at_ms + 1, None, results))
        self.finished += len(batch)

    def pause(self, batch: list[tuple[str, int, str]], at_ms: int) -> None:
        self.apply(*[PauseJob(at_ms, owner, job_id) for job_id, _, owner in batch[::10]])
        self.paused += len(batch[::10])


def fill(store: Store, args: argparse.Namespace) -> Filler:
    filler = Filler(store, args.owners, args.label_every)
    started = time.perf_counter()
    at_ms = T0
    while filler.made < args.jobs and time.perf_counter() - started < args.fill_s:
        at_ms += 7
        batch = filler.create(at_ms)
        # Runs finished: `--finished` of them (a fraction), the rest waiting.
        if filler.finished < args.finished * filler.made:
            filler.finish(batch, at_ms + 3)
        else:
            filler.pause(batch, at_ms + 3)
    fill_s = time.perf_counter() - started
    print(f"filled in {fill_s:.1f} s: {filler.made:,} jobs and as many runs ({filler.finished:,} finished "
          f"done/failed, {filler.paused:,} cancelled by a pause, the rest waiting), {args.owners} owners"
          + ("" if filler.made >= args.jobs else f" (of {args.jobs:,} asked: the --fill-s budget ended first)"))
    print(f"{filler.labelled:,} jobs labelled team=payments (1 in {args.label_every}), a tenth of them env=prod too")
    return filler


def jobs_page(
    store: Store, owner: str | None, match: Callable | None, labels: tuple[tuple[str, str], ...] = ()
) -> Callable[[str | None], str | None]:
    def page(cursor: str | None) -> str | None:
        if owner is None:
            found, next_cursor = store.list_all_jobs(100, cursor, match, labels)
        else:
            found, next_cursor = store.list_jobs(owner, 100, cursor, match, labels)
        outcomes = store.job_outcomes([j.id for j in found])
        shared: dict = {}
        _json.encode(JobsPage([views.job_view(j, shared, outcomes.get(j.id)) for j in found], next_cursor))
        return next_cursor

    return page


def runs_page(store: Store, owner: str | None, status: str | None, **bounds: int) -> Callable:
    def page(cursor: bytes | None) -> bytes | None:
        found, next_tail = store.list_owner_runs(owner, status=status, limit=100, cursor=cursor, **bounds)
        _json.encode(RunsPage([views.run_view(r) for r in found], None if next_tail is None else next_tail.hex()))
        return next_tail

    return page


def walk(name: str, page: Callable, pages: int) -> None:
    seconds: list[float] = []
    cursor = None
    for _ in range(pages):
        started = time.perf_counter()
        cursor = page(cursor)
        seconds.append(time.perf_counter() - started)
        if cursor is None:
            break
    seconds.sort()
    p50 = seconds[len(seconds) // 2] * 1000
    p99 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))] * 1000
    print(f"{name:58s} pages {len(seconds):4d}  p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  max {seconds[-1] * 1000:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--fill-s", type=float, default=120.0, help="stop filling after this long")
    parser.add_argument("--finished", type=float, default=0.5, help="fraction of the runs finished (default 0.5)")
    parser.add_argument("--owners", type=int, default=4)
    parser.add_argument("--pages", type=int, default=200, help="pages walked per path")
    parser.add_argument("--label-every", dest="label_every", type=int, default=100,
                        help="one job in this many is labelled team=payments (default 100)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    store = Store(os.path.join(root, "data"), map_bytes=16 << 30)
    try:
        filler = fill(store, args)
        owner = filler.owners[0]
        mid_ms = T0 + (filler.made // BATCH) * 7 // 2
        print(f"one page = 100 items; owner {owner!r} holds about 1/{args.owners} of the store")
        walk("GET /v1/jobs", jobs_page(store, owner, None), args.pages)
        walk("GET /v1/jobs (admin: every owner)", jobs_page(store, None, None), args.pages)
        walk("GET /v1/jobs?state=completed", jobs_page(store, owner, lambda j: j.state == "completed"), args.pages)
        walk("GET /v1/jobs?state=paused (a tenth of half)", jobs_page(store, owner, lambda j: j.state == "paused"),
             args.pages)
        walk("GET /v1/jobs?name_prefix=report-007 (1 in 1000)",
             jobs_page(store, owner, lambda j: j.name is not None and j.name.startswith("report-007")), args.pages)
        walk("GET /v1/jobs?target=queue:q3", jobs_page(store, owner, lambda j: j.target == "queue:q3"), args.pages)
        payments = (("team", "payments"),)
        walk(f"GET /v1/jobs?label=team:payments (1 in {args.label_every})",
             jobs_page(store, owner, None, payments), args.pages)
        walk("GET /v1/jobs?label=team:payments&label=env:prod",
             jobs_page(store, owner, None, (*payments, ("env", "prod"))), args.pages)
        walk("GET /v1/jobs?label=team:payments&state=paused",
             jobs_page(store, owner, lambda j: j.state == "paused", payments), args.pages)
        walk("GET /v1/jobs?label=team:nobody (matches none)",
             jobs_page(store, owner, None, (("team", "nobody"),)), args.pages)
        walk("GET /v1/jobs?label=team:payments (admin: every owner)",
             jobs_page(store, None, None, payments), args.pages)
        walk("GET /v1/runs", runs_page(store, owner, None), args.pages)
        walk("GET /v1/runs (admin: every owner)", runs_page(store, None, None), args.pages)
        for status in ("failed", "done", "waiting", "cancelled"):
            walk(f"GET /v1/runs?status={status}", runs_page(store, owner, status), args.pages)
        walk("GET /v1/runs?status=failed&since=&until= (a window)",
             runs_page(store, owner, "failed", since_ms=T0, until_ms=mid_ms), args.pages)
        walk("GET /v1/runs?status=failed (admin: every owner)", runs_page(store, None, "failed"), args.pages)
        # A store of a version without the indexes builds them when first opened.
        forget_run_index(store)
        store.close()
        started = time.perf_counter()
        store = Store(os.path.join(root, "data"), map_bytes=16 << 30)
        print(f"building the index at first open (an upgraded store of this size): {time.perf_counter() - started:.1f} s")
        forget_label_index(store)
        store.close()
        started = time.perf_counter()
        store = Store(os.path.join(root, "data"), map_bytes=16 << 30)
        print(f"building the jobs-by-label index at first open: {time.perf_counter() - started:.1f} s")
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
