"""Run the whole-node simulator: python -m tests.sim.node [--seed N | --seeds N [--start S]] [--bug NAME]."""

from __future__ import annotations

import argparse
import sys
import time

from .node_cluster import NodeSimulator
from .node_invariants import NodeSimFailure
from .node_planted import PLANTED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.node")
    parser.add_argument("--seed", type=int, help="replay one seed and print its trace hash")
    parser.add_argument("--seeds", type=int, default=500, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--bug", default="", choices=sorted(PLANTED), help="plant a bug (tests/sim/node_planted.py)")
    parser.add_argument("--no-core-checks", action="store_true",
                        help="judge by the end-to-end invariants only, not the dispatcher core's own")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every event")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    started_s = time.perf_counter()
    failures = 0
    for seed in seeds:
        sim = NodeSimulator(seed, args.bug, args.verbose, core_checks=not args.no_core_checks)
        try:
            digest = sim.run()
        except NodeSimFailure as e:
            failures += 1
            print(f"FAIL {e}", flush=True)
            continue
        if args.seed is not None:
            print(f"seed {seed}: ok, params {sim.params}\n  trace {digest}")
    elapsed_s = time.perf_counter() - started_s
    print(f"{len(seeds)} seeds, {failures} failed, {elapsed_s:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
