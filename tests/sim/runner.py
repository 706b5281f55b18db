"""The seed loop both simulators' command lines share."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from typing import Any


def seed_arguments(parser: argparse.ArgumentParser, planted: Iterable[str], planted_module: str) -> None:
    """The flags both command lines take: which seeds, which planted bug."""
    parser.add_argument("--seed", type=int, help="replay one seed and print its trace hash")
    parser.add_argument("--seeds", type=int, default=500, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--bug", default="", choices=sorted(planted), help=f"plant a bug ({planted_module})")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every event")


def run_seeds(args: argparse.Namespace, make: Callable[[int], Any], failure: type[Exception]) -> int:
    """Runs `make(seed).run()` for each seed `args` names; prints each
    failure, a replayed seed's trace, and a summary. Exit status 1 if any failed."""
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    started_s = time.perf_counter()
    failures = 0
    for seed in seeds:
        sim = make(seed)
        try:
            digest = sim.run()
        except failure as e:
            failures += 1
            print(f"FAIL {e}", flush=True)
            continue
        if args.seed is not None:
            print(f"seed {seed}: ok, params {sim.params}\n  trace {digest}")
    elapsed_s = time.perf_counter() - started_s
    print(f"{len(seeds)} seeds, {failures} failed, {elapsed_s:.1f} s")
    return 1 if failures else 0
