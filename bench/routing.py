#!/usr/bin/env python3
"""Route matching's CPU per request: `Api.route` on the paths workers hit.

    python bench/routing.py                   # 200,000 lookups per path, best of 5
    python bench/routing.py --lookups 50000 --rounds 3

Finds the route of each path as `Api.__call__` does (net/routes.py's
`Router`, built from the route table as the Api builds it), in one process,
without a store or sockets; prints the best of `--rounds` in nanoseconds
per lookup. The hot paths are the claims, the batched heartbeats and
results, and one run's heartbeat and result (a path with a parameter).
"""

import argparse
import time

from tempo.net.api import Api
from tempo.net.asgi import Request

PATHS = (
    ("POST", "/v1/claim"),
    ("POST", "/v1/results"),
    ("POST", "/v1/heartbeats"),
    ("POST", "/v1/runs/r_01JEXAMPLE0000000000000000/heartbeat"),
    ("POST", "/v1/runs/r_01JEXAMPLE0000000000000000/result"),
    ("GET", "/v1/jobs/j_01JEXAMPLE0000000000000000"),
    ("GET", "/healthz"),
)


def _api() -> Api:
    """An Api with nothing behind it: routing reads only its handlers."""
    api = object.__new__(Api)
    try:
        from tempo.net.routes import ROUTES, Router, bind  # absent before the route table
    except ImportError:
        return api
    api.router = Router(bind(ROUTES, api))
    return api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lookups", type=int, default=200_000, help="lookups per path per round")
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    api = _api()
    for method, path in PATHS:
        request = Request(method=method, path=path, query={}, headers={})
        best_ns = float("inf")
        for _ in range(opts.rounds):
            started = time.perf_counter_ns()
            for _ in range(opts.lookups):
                api.route(request)
            best_ns = min(best_ns, (time.perf_counter_ns() - started) / opts.lookups)
        print(f"{method:6} {path:55} {best_ns:7.0f} ns")


if __name__ == "__main__":
    main()
