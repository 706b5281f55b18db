#!/usr/bin/env python3
"""What calendars cost (docs/semantics.md "Calendars"), in one process, no sockets.

    python bench/calendars.py                  # 1,000 jobs a side, 5 rounds
    python bench/calendars.py --jobs 5000 --rounds 7

1. Preview: `POST /v1/schedules/preview`'s planning of 1,000 slots of a
   minutely cron under a calendar of 10,000 dates (weekends out, holidays
   of DE-BY) with `include_excluded`, through the calendars service as
   the handler calls it, the calendar folded anew each round (the worst
   case: right after a change), in thread CPU. Goal: at most 50 ms.
2. Claim: CPU per claim of a repeating job's slot run, with and without
   a calendar (the leader's decision, `DispatchCore._claim_of`, and
   apply's, `Store.apply_commands` of one `ClaimRuns` of all the runs),
   thread CPU as bench/perrun.py counts it; the fsync's wait is not CPU.
   Goal: a calendar job's claim at most 5 us more than a plain one's.

Figures are medians of `--rounds` rounds, each on fresh data.
"""

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time
from pathlib import Path

import msgspec
import trio

from tempo.engine import keys
from tempo.engine.commands import ClaimRuns, Command, CreateJobs
from tempo.engine.dispatch_core import DispatchCore
from tempo.engine.jobs import Jobs, schedule_record
from tempo.engine.store import Store
from tempo.schema import CalendarIn, JobCreate, ScheduleIn

T0_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z, a Friday
OWNER = "bench"


class _Log:
    def __init__(self, store: Store):
        self.store = store
        self.index = 0

    def apply(self, *commands: Command) -> list[object]:
        self.index += 1
        return self.store.apply_commands(self.index, list(commands))[0]

    async def submit(self, command: Command) -> object:
        return self.apply(command)[0]


def _calendar_body() -> CalendarIn:
    first = dt.date(2027, 1, 18)  # Monday
    # 10,000 dates, every third day, none of them the claim's day (the
    # claim runs, as most do).
    dates = [(first + dt.timedelta(days=3 * n)).isoformat() for n in range(10_000)]
    body = {"timezone": "Europe/Berlin", "exclude_dates": dates, "exclude_weekdays": ["sat", "sun"],
            "holidays": {"country": "DE", "subdivision": "BY"}}
    return msgspec.json.decode(json.dumps(body), type=CalendarIn)


def _setup(path: Path) -> tuple[Store, _Log, Jobs]:
    store = Store(str(path), map_bytes=512 << 20)
    log = _Log(store)
    jobs = Jobs(store, log, now_ms=lambda: T0_MS)  # type: ignore[arg-type] - the log commits
    trio.run(jobs.calendars.put, OWNER, "work", _calendar_body(), None)
    return store, log, jobs


def preview_ms(rounds: int) -> list[float]:
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        store, _, jobs = _setup(Path(tmp) / "s")
        sched = schedule_record(ScheduleIn(cron="*/15 * * * *", timezone="Europe/Berlin"))
        for _ in range(rounds):
            store._calendar_views.clear()  # each round folds the calendar anew
            # Thread CPU, as bench/perrun.py counts: steadier than wall time
            # on a shared machine (the preview waits for nothing).
            start = time.thread_time()
            entries = trio.run(lambda: jobs.calendars.preview(
                OWNER, sched, "work", "next_business_day", T0_MS, 1000, include_excluded=True))
            found.append((time.thread_time() - start) * 1000)
            assert sum(not e.excluded for e in entries) == 1000
        store.close()
    return found


def claim_us(jobs_count: int, with_calendar: bool) -> tuple[float, float]:
    """(decision us, apply us) per claim, thread CPU."""
    with tempfile.TemporaryDirectory() as tmp:
        store, log, jobs = _setup(Path(tmp) / "s")
        schedule: dict[str, object] = {"every_s": 60}
        if with_calendar:
            schedule |= {"calendar": "work", "on_excluded": "next_business_day"}
        body = msgspec.json.decode(json.dumps({"target": "queue:q", "schedule": schedule}), type=JobCreate)
        items = [jobs.new_job(OWNER, body, T0_MS, from_msgpack=False) for _ in range(jobs_count)]
        for start in range(0, jobs_count, 1000):
            log.apply(CreateJobs(T0_MS, items[start : start + 1000]))
        now_ms = T0_MS + 60_000
        core = DispatchCore(store, now_ms)
        rows = []
        for item in items:
            job = item.job
            assert job.slot_ms is not None and job.next_run_at_ms is not None
            rows.append((keys.run_key_of(keys.job_key(job.id), job.id, job.slot_ms, job.next_run_at_ms), job))
        decide_s = apply_s = 0.0
        for start in range(0, jobs_count, 1000):
            part = rows[start : start + 1000]
            t0 = time.thread_time()
            claims = [core._claim_of(runs_key, job, {}, now_ms, claiming=True) for runs_key, job in part]
            decide_s += time.thread_time() - t0
            command = ClaimRuns(now_ms, "w", [c for c in claims if c is not None])
            t0 = time.thread_time()
            outcomes = log.apply(command)[0]
            apply_s += time.thread_time() - t0
            assert isinstance(outcomes, list) and all(o is not None for o in outcomes), "every run claimed"
            if with_calendar:
                assert all(c is not None and c.calendar is not None for c in claims)
        store.close()
    return decide_s / jobs_count * 1e6, apply_s / jobs_count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    previews = preview_ms(args.rounds)
    print(f"preview of 1,000 runs, 10,000-date calendar (folded anew each time), CPU: "
          f"median {statistics.median(previews):.1f} ms "
          f"(min {min(previews):.1f}, max {max(previews):.1f}; goal <= 50 ms)")
    sides: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for with_calendar in (False, True):
            sides[with_calendar].append(claim_us(args.jobs, with_calendar))
    medians = {}
    for with_calendar, found in sides.items():
        decide = statistics.median(d for d, _ in found)
        apply_ = statistics.median(a for _, a in found)
        medians[with_calendar] = decide + apply_
        name = "with calendar" if with_calendar else "no calendar  "
        print(f"claim, {name}: decide {decide:6.2f} us + apply {apply_:6.2f} us = {decide + apply_:6.2f} us per run")
    print(f"claim cost of a calendar: {medians[True] - medians[False]:+.2f} us per run (goal <= 5 us)")


if __name__ == "__main__":
    main()
