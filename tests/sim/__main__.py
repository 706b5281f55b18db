"""Run the simulator: python -m tests.sim [--seed N | --seeds N [--start S]] [--bug NAME]."""

from __future__ import annotations

import argparse
import sys

from .cluster import Simulator
from .invariants import SimFailure
from .planted import PLANTED
from .runner import run_seeds, seed_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim")
    seed_arguments(parser, PLANTED, "tests/sim/planted.py")
    args = parser.parse_args(argv)
    return run_seeds(args, lambda seed: Simulator(seed, args.bug, args.verbose), SimFailure)


if __name__ == "__main__":
    sys.exit(main())
