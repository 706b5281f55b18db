#!/usr/bin/env python3
"""Soak the whole-node simulator (tests/sim/node_cluster.py) with fresh seeds.

    python bench/sim_soak.py --minutes 10          # fresh seeds for 10 minutes
    python bench/sim_soak.py --minutes 60 --bug observe_keeps_reference

CI runs a fixed set of seeds (tests/sim/test_node_sim.py); this runs seeds
it has not, starting from a random one, until the time is up. Each failure
prints its seed, the invariant it broke and the command that replays it
(`python -m tests.sim.node --seed N`); the exit status is 1 if any failed.
docs/raft.md "The whole-node simulator" says what it runs and checks.
"""

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sim.node_cluster import NodeSimulator
from tests.sim.node_invariants import NodeSimFailure
from tests.sim.node_planted import PLANTED

# CI's seeds are 0 to TEMPO_SIM_NODE_SEEDS (500); fresh ones start far above.
FRESH_SEED_MIN = 1_000_000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, required=True, help="how long to run seeds")
    ap.add_argument("--start", type=int, default=None, help="first seed (default: a random one)")
    ap.add_argument("--bug", default="", choices=sorted(PLANTED), help="plant a bug (tests/sim/node_planted.py)")
    ap.add_argument("--stop-at-first", action="store_true", help="stop at the first failure")
    args = ap.parse_args(argv)
    seed = args.start if args.start is not None else random.randrange(FRESH_SEED_MIN, 1 << 40)
    first_seed = seed
    deadline_s = time.monotonic() + args.minutes * 60
    runs = failures = 0
    while time.monotonic() < deadline_s:
        try:
            NodeSimulator(seed, args.bug).run()
        except NodeSimFailure as failure:
            failures += 1
            print(f"FAIL {failure}", flush=True)
            if args.stop_at_first:
                runs += 1
                break
        runs += 1
        seed += 1
    print(f"{runs} seeds ({first_seed} to {first_seed + runs - 1}), {failures} failed, "
          f"{args.minutes:g} min")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
