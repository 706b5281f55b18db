"""Run the whole-node simulator: python -m tests.sim.node [--seed N | --seeds N [--start S]] [--bug NAME]."""

from __future__ import annotations

import argparse
import sys

from .node_cluster import NodeSimulator
from .node_invariants import NodeSimFailure
from .node_planted import PLANTED
from .runner import run_seeds, seed_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.node")
    seed_arguments(parser, PLANTED, "tests/sim/node_planted.py")
    parser.add_argument("--no-core-checks", action="store_true",
                        help="judge by the end-to-end invariants only, not the dispatcher core's own")
    parser.add_argument("--before-1970", action="store_true",
                        help="backfills before 1970 and in year 1 too, before validation refuses them "
                             "(tests/sim/node_workload.py)")
    args = parser.parse_args(argv)
    return run_seeds(
        args,
        lambda seed: NodeSimulator(seed, args.bug, args.verbose, core_checks=not args.no_core_checks,
                                   before_1970=args.before_1970 or None),
        NodeSimFailure,
    )


if __name__ == "__main__":
    sys.exit(main())
