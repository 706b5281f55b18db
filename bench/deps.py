#!/usr/bin/env python3
"""Dependencies against one local `tempo serve` (docs/semantics.md
"Dependencies"): runs made by parents' ends, in the commit of the result.

    .venv/bin/python bench/deps.py [--fan-out 1000] [--fan-in 1000] [--chain 100]

Starts a node (temporary data dir, free loopback port, fsync on, as
shipped), then:

- fan-out: one parent with `--fan-out` dependents (`after` it). Its run is
  claimed and its result reported; measured: the result's round trip (the
  commit that makes every child run), each child run's `due_at` minus the
  parent's `finished_at` (server stamps), and, from the result's answer,
  when each child run was handed out by claims made as fast as they answer
  (the dispatcher's pick-up). Target: every child run due within 100 ms
  of the parent's result, p99.
- fan-in: `--fan-in` parents into one child. A job names at most 32
  parents (`limits.deps_parents_max`), so the parents feed 32 middle jobs
  (`all`), which feed the child (`all`): each parent's result is reported
  (in batches of 100), then each middle's; measured: the results' round
  trips, and from the last middle's result to the child's run.
- chain: `--chain` jobs, each after the one before; a worker loop claims
  and reports each run as it comes; measured: from the first result to the
  last run, and per link.

Prints the figures; exit status 0 when the fan-out target is met, 1 when
not, 2 when the node could not run.
"""

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import Node, SpawnError, start, table

due_target_ms = 100.0
PAST = "2020-01-01T00:00:00Z"


def _ms(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _create(http: httpx.Client, bodies: list[dict]) -> list[str]:
    made: list[str] = []
    for start_at in range(0, len(bodies), 1000):
        answer = http.post("/v1/jobs/batch", json={"jobs": bodies[start_at:start_at + 1000]})
        answer.raise_for_status()
        for item in answer.json()["results"]:
            assert item["status"] in (200, 201), item
            made.append(item["job"]["id"])
    return made


def _claim(http: httpx.Client, queue: str, runs_max: int = 1000, wait_s: float = 5) -> list[dict]:
    answer = http.post("/v1/claim", json={"worker": "bench", "queues": [queue], "max_runs": runs_max, "wait_s": wait_s})
    answer.raise_for_status()
    return answer.json()["runs"]


def _report(http: httpx.Client, runs: list[dict]) -> float:
    """Reports each run done in one batch; its round trip in ms."""
    started = time.perf_counter()
    answer = http.post("/v1/results", json={"results": [
        {"run_id": r["id"], "attempt": r["attempt"], "ok": True} for r in runs]})
    answer.raise_for_status()
    return (time.perf_counter() - started) * 1000


def fan_out(http: httpx.Client, children: int) -> tuple[list[tuple], bool]:
    [parent] = _create(http, [{"target": "queue:fo-parent", "schedule": {"at": PAST}}])
    _create(http, [{"target": "queue:fo-child", "schedule": {"after": {"jobs": [parent]}}}] * children)
    [run] = _claim(http, "fo-parent", 1)
    started = time.perf_counter()
    ended = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": True})
    ended.raise_for_status()
    acked_s = time.perf_counter()
    result_ms = (acked_s - started) * 1000
    finished_ms = _ms(ended.json()["finished_at"])
    picked_ms: list[float] = []
    dues: list[float] = []
    while len(picked_ms) < children:
        got = _claim(http, "fo-child", 1000, 2)
        now_s = time.perf_counter()
        if not got:
            break
        picked_ms += [(now_s - acked_s) * 1000] * len(got)
        dues += [_ms(r["due_at"]) - finished_ms for r in got]
    met = len(dues) == children and _q(dues, 0.99) <= due_target_ms
    rows = [
        ("result round trip (makes the child runs)", f"{result_ms:.1f}", "", ""),
        ("child due_at - parent finished_at", f"{_q(dues, 0.5):.1f}", f"{_q(dues, 0.99):.1f}", f"{max(dues):.1f}"),
        ("result answered -> child run handed out", f"{_q(picked_ms, 0.5):.1f}", f"{_q(picked_ms, 0.99):.1f}",
         f"{max(picked_ms):.1f}"),
    ]
    print(f"\nfan-out: 1 parent, {children} dependents; child runs handed out: {len(dues)}")
    print(table(rows, ("ms", "p50", "p99", "max")))
    return rows, met


def fan_in(http: httpx.Client, parents: int) -> None:
    width = 32
    parent_ids = _create(http, [{"target": "queue:fi-parent", "schedule": {"at": PAST}}] * parents)
    groups = [parent_ids[i::width] for i in range(width)]
    middles = _create(http, [{"target": "queue:fi-middle", "schedule": {"after": {"jobs": g}}} for g in groups if g])
    [child] = _create(http, [{"target": "queue:fi-child", "schedule": {"after": {"jobs": middles}}}])
    trips: list[float] = []
    done = 0
    while done < parents:
        runs = _claim(http, "fi-parent", 100)
        trips.append(_report(http, runs))
        done += len(runs)
    middle_runs: list[dict] = []
    while len(middle_runs) < len(middles):
        middle_runs += _claim(http, "fi-middle", 100)
    last_s = time.perf_counter()
    trips.append(_report(http, middle_runs))
    [child_run] = _claim(http, "fi-child", 1)
    to_child_ms = (time.perf_counter() - last_s) * 1000
    caused = http.get(f"/v1/runs/{child_run['id']}").json()["caused_by"]
    print(f"\nfan-in: {parents} parents -> {len(middles)} middle jobs -> 1 child ({child}); "
          f"the child's run names {len(caused)} middle ends")
    print(table([
        ("result batch round trip (100 results)", f"{statistics.median(trips):.1f}", f"{_q(trips, 0.99):.1f}",
         f"{max(trips):.1f}"),
        ("last middle result -> child run handed out", f"{to_child_ms:.1f}", "", ""),
    ], ("ms", "p50", "p99", "max")))


def chain(http: httpx.Client, length: int) -> None:
    ids = _create(http, [{"target": "queue:ch", "schedule": {"at": PAST}}])
    for _ in range(length - 1):
        ids += _create(http, [{"target": "queue:ch", "schedule": {"after": {"jobs": [ids[-1]]}}}])
    started_s = time.perf_counter()
    links: list[float] = []
    for _ in range(length):
        link_s = time.perf_counter()
        [run] = _claim(http, "ch", 1)
        _report(http, [run])
        links.append((time.perf_counter() - link_s) * 1000)
    total_s = time.perf_counter() - started_s
    print(f"\nchain of {length}: all runs done in {total_s * 1000:.0f} ms")
    print(table([("claim + result per link", f"{statistics.median(links):.1f}", f"{_q(links, 0.99):.1f}",
                  f"{max(links):.1f}")], ("ms", "p50", "p99", "max")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fan-out", type=int, default=1000)
    parser.add_argument("--fan-in", type=int, default=1000)
    parser.add_argument("--chain", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tempo-bench-deps-") as tmp:
        node = Node(Path(tmp) / "data")
        try:
            start(node)
        except SpawnError as exc:
            print(f"bench/deps.py: could not run: {exc!r}", file=sys.stderr)
            return 2
        try:
            with httpx.Client(base_url=node.url, timeout=60) as http:
                print(f"bench/deps.py at {datetime.now(UTC).isoformat(timespec='seconds')}")
                _, met = fan_out(http, args.fan_out)
                fan_in(http, args.fan_in)
                chain(http, args.chain)
        finally:
            node.cleanup()
    print(f"\nfan-out target (child due within {due_target_ms:.0f} ms of the parent's result, p99): "
          f"{'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
