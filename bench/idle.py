#!/usr/bin/env python3
"""What an idle `tempo serve` costs: CPU and wake-ups, with no job and no client.

    python bench/idle.py                      # 3 rounds of 30 s
    python bench/idle.py --seconds 60 --rounds 5

Each round starts a fresh node (one process, an empty data dir), waits
until /readyz answers and `--warmup-s` more, then reads from /proc over
`--seconds`: the process's CPU (user + system) as a share of one core, and
its threads' voluntary context switches a second, which counts each time a
thread went to sleep: the event loop's wake-ups, mostly (its loops'
sleeps), and the commit thread's. Printed per round, then the medians.
Compare two trees in turns with PYTHONPATH (docs/performance.md "Idle").
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _server import Node, start
from threadcpu import TICKS_PER_S, stat_ticks


def cpu_ticks(pid: int) -> int:
    """The process's CPU, its ended threads' included (which a sum over
    `threadcpu.thread_ticks` would miss)."""
    with open(f"/proc/{pid}/stat") as f:
        return stat_ticks(f.read())[1]


def sleeps(pid: int) -> int:
    """The voluntary context switches of every thread of `pid`."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            continue  # the thread ended between the listing and the read
    return total


def one_round(seconds: float, warmup_s: float) -> tuple[float, float]:
    """(share of a core, sleeps a second) of one fresh idle node."""
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(os.path.join(tmp, "data"))
        start(node)
        try:
            time.sleep(warmup_s)
            pid = node.pid
            assert pid is not None
            ticks, switches, started = cpu_ticks(pid), sleeps(pid), time.monotonic()
            time.sleep(seconds)
            ticks, switches = cpu_ticks(pid) - ticks, sleeps(pid) - switches
            elapsed = time.monotonic() - started
        finally:
            node.stop()
    return ticks / TICKS_PER_S / elapsed, switches / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    args = parser.parse_args()
    shares, rates = [], []
    for n in range(args.rounds):
        share, rate = one_round(args.seconds, args.warmup_s)
        shares.append(share)
        rates.append(rate)
        print(f"round {n + 1}: {share:.2%} of a core, {rate:.0f} sleeps/s", flush=True)
    print(f"idle node over {args.seconds:.0f} s (median of {args.rounds}): "
          f"{statistics.median(shares):.2%} of a core, {statistics.median(rates):.0f} sleeps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
