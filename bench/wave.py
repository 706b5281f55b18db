#!/usr/bin/env python3
"""How long one process takes to wake a wave of held tasks, as the worker
library wakes the runs it holds for one due instant (tempo/worker_ahead.py):
N trio tasks wait on one event; it is set; each records when it ran and
yields once more, as a held run's task does after its handler.

    python bench/wave.py                  # 25,000 tasks, 3 rounds
    python bench/wave.py --tasks 100000 --collector-on

Prints, per round, the time from the set to the first and the last task's
step, and per task. With the cycle collector held off (the default, as the
worker library holds it while a wave wakes) or on (`--collector-on`).
What it measures is trio's wake and switch, the floor under a wave's start
lateness (docs/performance.md "Pre-dispatch").
"""

import argparse
import gc
import statistics
import time

import trio


async def one_round(tasks: int, collector_on: bool) -> tuple[float, float]:
    go = trio.Event()
    started: list[float] = []

    async def held() -> None:
        await go.wait()
        started.append(time.perf_counter())
        await trio.lowlevel.cancel_shielded_checkpoint()

    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(held)
        await trio.sleep(0.2)
        if not collector_on:
            gc.disable()
        set_at = time.perf_counter()
        go.set()
    gc.enable()
    return min(started) - set_at, max(started) - set_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--collector-on", action="store_true", help="leave the cycle collector on during the wake")
    args = parser.parse_args()
    lasts = []
    for n in range(args.rounds):
        first_s, last_s = trio.run(one_round, args.tasks, args.collector_on)
        lasts.append(last_s)
        print(f"round {n + 1}: first task {first_s * 1000:.1f} ms, last {last_s * 1000:.1f} ms after the set, "
              f"{last_s / args.tasks * 1e6:.2f} µs a task")
    collector = "on" if args.collector_on else "held off"
    print(f"{args.tasks:,} tasks, collector {collector}: last task {statistics.median(lasts) * 1000:.1f} ms "
          f"after the set (median of {args.rounds})")


if __name__ == "__main__":
    main()
