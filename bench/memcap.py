"""The dispatcher's memory shared out between owners (docs/operations.md
"Fairness between owners"), in one process: a store in a temporary directory,
the committer and the dispatcher, driven by a clock this script sets (no
server, no sleeping).

Run: python bench/memcap.py [--spike-runs 25000] [--backlog-runs 40000]

1. spike: one owner's runs due at one instant, created 10 s ahead in
   batches of 1000 (so through the change feed), made ready by one tick and
   claimed 1000 at a time. Prints the dispatcher's own time: in the change
   feed, in the tick, and taking runs for the claims (the commits aside).
2. backlog: the bounds scaled down by 5 (memory 20,000 runs, a share of
   5,000, low water 2,500). Owner A has `--backlog-runs` runs over four
   overdue minutes and at most 10 in flight; owner B has 100 runs due two
   minutes later. Prints how many of B's runs a claim gets at their due
   time, the most runs memory held, and the time to drain A afterwards
   (claims of 1000 with results), with the ticks' share of it (the
   loader's reads and re-reads are in the ticks).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import trio

from tempo import clock, limits
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine.commands import Result
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.schema import JobCreate, ScheduleIn

T0_MS = 1_800_000_000_000  # a minute boundary
BATCH = 1000


class Timed:
    """Sums the time spent in one method of an object."""

    def __init__(self, obj: object, name: str):
        self.total_s = 0.0
        inner = getattr(obj, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.total_s += time.perf_counter() - start

        setattr(obj, name, wrapper)


class Rig:
    def __init__(self, path: str):
        self.now_ms = T0_MS
        self.store = Store(path)
        self.committer = Committer(self.store)
        self.jobs = Jobs(self.store, self.committer, now_ms=lambda: self.now_ms)
        self.dispatcher = Dispatcher(self.store, self.committer, now_ms=lambda: self.now_ms)

    async def create(self, owner: str, dues_ms: list[int]) -> None:
        for lo in range(0, len(dues_ms), BATCH):
            bodies = [
                JobCreate(target="queue:work", schedule=ScheduleIn(at=clock.datetime_from_ms(due_ms)), lease_s=3600)
                for due_ms in dues_ms[lo : lo + BATCH]
            ]
            await self.jobs.create(owner, bodies, from_msgpack=False)

    async def claim_all(self, owner: str, count: int) -> int:
        claimed = 0
        while claimed < count:
            got = await self.dispatcher.claim([f"{owner}\x00work"], "w", BATCH, 0)
            if not got:
                self.now_ms += limits.dispatch_tick_ms
                self.dispatcher.tick(self.now_ms)
                continue
            results = [Result(c.run.job_id, c.run.nominal_ms, c.run.attempt, True, None, None) for c in got]
            await self.dispatcher.report(owner, results)
            claimed += len(got)
        return claimed


async def spike(runs: int) -> None:
    with tempfile.TemporaryDirectory() as path:
        rig = Rig(path)
        d = rig.dispatcher
        async with trio.open_nursery() as nursery:
            await nursery.start(rig.committer.run)
            d.load(rig.now_ms)
            feed = Timed(d, "on_changes")
            rig.committer.listeners[:] = [d.on_changes]
            due_ms = T0_MS + 10_000
            await rig.create("spike", [due_ms] * runs)
            rig.now_ms = due_ms
            start = time.perf_counter()
            d.tick(rig.now_ms)
            tick_s = time.perf_counter() - start
            take = Timed(d, "_take")
            start = time.perf_counter()
            assert await rig.claim_all("spike", runs) == runs
            claims_s = time.perf_counter() - start
            nursery.cancel_scope.cancel()
        rig.store.close()
    print(f"spike of {runs:,} runs of one owner")
    print(f"  change feed     {feed.total_s * 1e3:8.1f} ms  ({feed.total_s / runs * 1e6:.2f} us/run)")
    print(f"  tick (ready)    {tick_s * 1e3:8.1f} ms")
    print(f"  taking runs     {take.total_s * 1e3:8.1f} ms  ({take.total_s / runs * 1e6:.2f} us/run)")
    print(f"  claims+results  {claims_s * 1e3:8.1f} ms  (commits included)")


async def backlog(runs: int) -> None:
    limits.dispatch_memory_runs_max = 20_000
    if hasattr(limits, "dispatch_owner_runs_max"):
        limits.dispatch_owner_runs_max = 5_000
        limits.dispatch_owner_low_water_runs = 2_500
    per_minute = runs // 4
    with tempfile.TemporaryDirectory() as path:
        rig = Rig(path)
        d = rig.dispatcher
        d.core.limits_of = lambda owner: OwnerLimits(runs_in_flight_max=10) if owner == "a" else UNLIMITED
        async with trio.open_nursery() as nursery:
            await nursery.start(rig.committer.run)
            # Created before the loader reads anything, as if after an outage.
            a_dues = [T0_MS + m * 60_000 + i * 60_000 // per_minute for m in range(4) for i in range(per_minute)]
            b_due_ms = T0_MS + 6 * 60_000
            await rig.create("a", a_dues)
            await rig.create("b", [b_due_ms] * 100)
            rig.now_ms = T0_MS + 5 * 60_000
            d.load(rig.now_ms)
            peak = len(d.core.queue_of)
            held = await d.claim(["a\x00work"], "w", BATCH, 0)
            while rig.now_ms < b_due_ms:
                rig.now_ms += 1000
                d.tick(rig.now_ms)
                peak = max(peak, len(d.core.queue_of))
            b_claimed = len(await d.claim(["b\x00work"], "w", BATCH, 0))
            d.core.limits_of = lambda owner: UNLIMITED
            await d.report("a", [Result(c.run.job_id, c.run.nominal_ms, c.run.attempt, True, None, None) for c in held])
            ticks = Timed(d, "tick")
            start = time.perf_counter()
            drained = len(held) + await rig.claim_all("a", runs - len(held))
            drain_s = time.perf_counter() - start
            peak = max(peak, len(d.core.queue_of))
            nursery.cancel_scope.cancel()
        rig.store.close()
    print(f"backlog: A {runs:,} overdue runs (10 in flight), B 100 runs due 1 min after now")
    print(f"  B's runs claimed at their due time  {b_claimed} of 100")
    print(f"  most runs in memory                 {peak:,} (bound {limits.dispatch_memory_runs_max:,})")
    print(f"  A drained afterwards                {drained:,} runs in {drain_s:.2f} s")
    print(f"  ticks while draining (with loads)   {ticks.total_s * 1e3:.1f} ms, re-reads {d.core.counters['rereads']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spike-runs", type=int, default=25_000)
    ap.add_argument("--backlog-runs", type=int, default=40_000)
    args = ap.parse_args()
    trio.run(spike, args.spike_runs)
    trio.run(backlog, args.backlog_runs)


if __name__ == "__main__":
    main()
