#!/usr/bin/env python3
"""CPU of each thread of a running process, every half second, from /proc.

    python bench/threadcpu.py PID                # until the process exits
    python bench/threadcpu.py PID --interval-s 0.25 --until-s 60

Beside a spike (`tempo loadgen --url ...` against a `tempo serve` whose PID
is given), it shows how much of a core each of the server's threads used:
the trio thread (HTTP, dispatcher, scheduling) and the commit thread
(apply and LMDB's commit). Their sum staying under one core while the
machine has another free is the interpreter's lock at work: moving work to
another thread of the same process would add no CPU (docs/performance.md
"What would use more cores"). Intervals in which the process used under 5 %
of a core are not printed.
"""

import argparse
import os
import sys
import time

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def stat_ticks(stat: str) -> tuple[str, int]:
    """(name, user + system CPU in clock ticks) of a /proc `stat` line, a
    process's or a thread's."""
    # The name is in parentheses and may hold spaces: split after it.
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    return name, int(fields[11]) + int(fields[12])


def thread_ticks(pid: int) -> dict[int, tuple[str, int]]:
    """Thread ID -> (its name, user + system CPU in clock ticks)."""
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                threads[int(tid)] = stat_ticks(f.read())
        except OSError:
            continue  # the thread ended between the listing and the read
    return threads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pid", type=int)
    parser.add_argument("--interval-s", type=float, default=0.5)
    parser.add_argument("--until-s", type=float, default=None, help="stop after this long (default: when it exits)")
    args = parser.parse_args()
    start = time.monotonic()
    before = thread_ticks(args.pid)
    while args.until_s is None or time.monotonic() - start < args.until_s:
        time.sleep(args.interval_s)
        try:
            now = thread_ticks(args.pid)
        except FileNotFoundError:
            return 0  # the process exited
        used = {tid: (name, (ticks - before.get(tid, (name, 0))[1]) / TICKS_PER_S / args.interval_s)
                for tid, (name, ticks) in now.items()}
        total = sum(share for _, share in used.values())
        if total >= 0.05:
            busy = sorted(used.items(), key=lambda item: -item[1][1])
            parts = " ".join(f"{name}[{tid}] {share:.0%}" for tid, (name, share) in busy if share >= 0.01)
            print(f"{time.monotonic() - start:6.1f} s  total {total:.0%}  {parts}", flush=True)
        before = now
    return 0


if __name__ == "__main__":
    sys.exit(main())
