#!/usr/bin/env python3
"""Leader failover of a local 3-node cluster: the time from the leader's SIGKILL
to the first acknowledged write, and how late the runs falling due meanwhile are.

    .venv/bin/python bench/failover.py [--rounds 5] [--workers 2] [--writers 4]
                                       [--every-ms 100] [--before-s 1] [--after-s 5]
                                       [--restart-after-s 2] [--timeout-s 30]

Starts three nodes (temporary data dirs, free loopback ports), W worker
processes (`tempo.loadgen.start_workers`: the worker library over all three
URLs) and K writer threads that keep sending small creates (`POST /v1/jobs`,
due in 2099, a queue nobody claims) round-robin over the nodes, redirects
followed, 1 s timeout each, `--write-gap-ms` apart while they succeed. Then,
each round:

1. find the leader: the node whose own `GET /v1/cluster` names itself;
2. create one-off jobs (`lease_s` 10) due every `--every-ms` from `--before-s`
   before the planned kill to `--after-s` after it, for the workers to claim;
3. SIGKILL the leader; failover = the first 2xx write answered by another
   node after the signal, minus the signal's time;
4. `--restart-after-s` after the signal, start the node again (same data dir,
   same arguments);
5. wait until every job of the round is claimed (lost: not within
   `--timeout-s` of the window's end) and every node answers /readyz 200.

Lateness is the arrival of each run's first claim answer minus the time the
job was created due at, as in `tempo loadgen` (not the claimed run's `due_at`,
which a lease expiry resets); late > 5 s counts the runs whose first claim came
more than `loadgen.late_bound_s` after it. A claim the dead leader committed but could not answer
comes back when its lease runs out (attempt 2): counted as redelivered, not
duplicated. Duplicated: one (run ID, attempt) handed out twice, or one job
with two run IDs.

Target: median failover ≤ 3 s, 0 lost, 0 duplicated. Exit status 0; 1 when a
run was lost or duplicated; 2 when the cluster could not run; 3 when the
failover target was missed.
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from _server import Cluster, Node, SpawnError, ready_timeout_s, stop_timeout_s, table
from tempo import loadgen
from tempo.loadgen.failover import create_once

FAILOVER_TARGET_S = 3.0
write_timeout_s = 1.0
write_retry_gap_s = 0.01
first_write_timeout_s = 30.0
job_lease_s = 10
create_lead_s = 0.5


@dataclass
class Writes:
    """2xx answers of the writers: (UNIX arrival time, URL that answered)."""

    ok: list[tuple[float, str]] = field(default_factory=list)
    failed: int = 0
    stop: threading.Event = field(default_factory=threading.Event)


def writer(urls: list[str], writes: Writes, index: int, gap_s: float) -> None:
    body = {"target": "queue:failover-writes", "schedule": {"at": "2099-01-01T00:00:00Z"}}
    k = index
    with httpx.Client(timeout=write_timeout_s, follow_redirects=True) as http:
        while not writes.stop.is_set():
            written = create_once(http, urls[k % len(urls)], body | {"request_key": f"w{index}-{uuid.uuid4().hex}"})
            if written is not None:
                writes.ok.append(written)
                time.sleep(gap_s)
                continue
            writes.failed += 1
            k += 1  # this node did not take it: the next one
            time.sleep(write_retry_gap_s)


def create_window(leader: Node, queue_name: str, due_times_s: list[float], tag: str) -> list[str]:
    jobs = [
        {"target": f"queue:{queue_name}", "schedule": {"at": loadgen.iso(at_s)}, "lease_s": job_lease_s,
         "request_key": f"{tag}-{i}"}
        for i, at_s in enumerate(due_times_s)
    ]
    answer = httpx.post(f"{leader.url}/v1/jobs/batch", json={"jobs": jobs}, timeout=30, follow_redirects=True)
    answer.raise_for_status()
    results = answer.json()["results"]
    assert all(r["status"] in (200, 201) for r in results), results
    return [r["job"]["id"] for r in results]


def collector(out, tally: loadgen.Tally, stop: threading.Event) -> None:
    import queue as queue_mod

    while not stop.is_set():
        try:
            loadgen.take(tally, out.get(timeout=0.1))
        except queue_mod.Empty:
            continue


def round_figures(due_s_of: dict[str, float], tally: loadgen.Tally, killed_at_s: float) -> dict:
    """`due_s_of`: each job of the round and the time it was created due at.
    Lateness is measured from that time, not from the claimed run's `due_at`,
    which a lease expiry resets to the expiry."""
    wanted = set(due_s_of)
    claims = [c for c in list(tally.claims) if c.job_id in wanted]
    first: dict[str, loadgen.Claim] = {}
    for c in claims:
        if c.job_id not in first or c.claimed_at_s < first[c.job_id].claimed_at_s:
            first[c.job_id] = c
    lateness = [c.claimed_at_s - due_s_of[c.job_id] for c in first.values()]
    pairs = [(c.run_id, c.attempt) for c in claims]
    runs_of_job: dict[str, set[str]] = {}
    for c in claims:
        runs_of_job.setdefault(c.job_id, set()).add(c.run_id)
    after = [c.claimed_at_s - killed_at_s for c in claims if c.claimed_at_s > killed_at_s]
    # A redelivery after a claim the workers received means that attempt was
    # given up (no heartbeat through within the lease) or its result refused;
    # after an accepted result it would mean an acknowledged result was lost.
    again = [c for c in claims if c.attempt > 1]
    received = {(c.run_id, c.attempt) for c in claims}
    after_claim = [c for c in again if (c.run_id, c.attempt - 1) in received]
    after_result = [c for c in after_claim if tally.reported_at_s.get(c.run_id, c.claimed_at_s) < c.claimed_at_s]
    return {
        "runs": len(wanted),
        "claimed": len(first),
        "lost": len(wanted - set(first)),
        "duplicated": (len(pairs) - len(set(pairs))) + sum(len(r) - 1 for r in runs_of_job.values()),
        "redelivered": len(again),
        "redelivered_after_claim": len(after_claim),
        "redelivered_after_result": len(after_result),
        "redelivered_runs": [(c.run_id, c.attempt, round(c.claimed_at_s - killed_at_s, 3)) for c in again],
        "p50": loadgen.pct(lateness, 50),
        "p99": loadgen.pct(lateness, 99),
        "max": max(lateness, default=None),
        "late_over_5s": sum(1 for late_s in lateness if late_s > loadgen.late_bound_s),
        "first_claim_s": min(after, default=None),
        "lateness": lateness,
    }


def one_round(k: int, args: argparse.Namespace, cluster: Cluster, writes: Writes, tally: loadgen.Tally,
              queue_name: str) -> dict:
    leader, term = cluster.leader()
    kill_at_s = time.time() + create_lead_s + args.before_s
    count = round((args.before_s + args.after_s) * 1000 / args.every_ms)
    due_times_s = [kill_at_s - args.before_s + i * args.every_ms / 1000 for i in range(count)]
    job_ids = create_window(leader, queue_name, due_times_s, f"round{k}-{uuid.uuid4().hex[:8]}")
    due_s_of = dict(zip(job_ids, due_times_s, strict=True))
    assert time.time() < due_times_s[0], "creating the window took longer than create_lead_s"
    time.sleep(max(0.0, kill_at_s - time.time()))
    seen_writes = len(writes.ok)
    killed_at_s = leader.kill()
    restart_at_s = killed_at_s + args.restart_after_s
    window_end_s = due_times_s[-1]
    restarted_at_s = first_write = None
    while True:
        now_s = time.time()
        if restarted_at_s is None and now_s >= restart_at_s:
            leader.start()
            restarted_at_s = time.time()
        if first_write is None:
            first_write = next(((t, u) for t, u in writes.ok[seen_writes:] if t > killed_at_s and u != leader.url), None)
        done = round_figures(due_s_of, tally, killed_at_s)["lost"] == 0 and now_s > window_end_s
        timed_out = now_s > max(window_end_s, killed_at_s + first_write_timeout_s) + args.timeout_s
        if (restarted_at_s is not None and first_write is not None and done) or timed_out:
            break
        time.sleep(0.02)
    if restarted_at_s is None:
        leader.start()
        restarted_at_s = time.time()
    ready_at_s, views = wait_ready_watching(leader, killed_at_s)
    cluster.wait_ready(cluster.nodes, ready_timeout_s)
    fig = round_figures(due_s_of, tally, killed_at_s)
    by = next((s.id for s in cluster.nodes if first_write and s.url == first_write[1]), None)
    return fig | {
        "round": k, "killed": leader.id, "term": term,
        "failover_s": None if first_write is None else first_write[0] - killed_at_s, "by": by,
        "restart_s": restarted_at_s - killed_at_s, "ready_s": ready_at_s - killed_at_s, "views": views,
    }


def wait_ready_watching(server: Node, killed_at_s: float) -> tuple[float, list[str]]:
    """Waits for the restarted node's /readyz 200; its `/v1/cluster` view
    whenever it changes meanwhile (seconds after the SIGKILL), to show why
    readiness took long if it did."""
    views: list[str] = []
    last = None
    deadline_s = time.monotonic() + 120
    while time.monotonic() < deadline_s:
        view = server.view()
        shown = None if view is None else {k: view.get(k) for k in ("leader", "term", "commit_index", "applied_index")}
        if shown != last and shown is not None:
            views.append(f"+{time.time() - killed_at_s:.1f} s {shown}")
            last = shown
        if server.ready():
            return time.time(), views
        time.sleep(0.1)
    raise SpawnError(f"{server.id} not ready 120 s after its restart:\n{server.log_tail()}")


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--write-gap-ms", dest="write_gap_ms", type=float, default=20.0)
    ap.add_argument("--every-ms", dest="every_ms", type=float, default=100.0)
    ap.add_argument("--before-s", dest="before_s", type=float, default=1.0)
    ap.add_argument("--after-s", dest="after_s", type=float, default=5.0)
    ap.add_argument("--restart-after-s", dest="restart_after_s", type=float, default=2.0)
    ap.add_argument("--timeout-s", dest="timeout_s", type=float, default=30.0)
    args = ap.parse_args()
    if args.rounds < 1 or args.every_ms < 10 or args.before_s < 0 or args.after_s <= 0:
        ap.error("need --rounds ≥ 1, --every-ms ≥ 10, --before-s ≥ 0, --after-s > 0")
    return args


def report(rows: list[dict], all_lateness: list[float], writes: Writes, stopped: dict[str, int | None]) -> int:
    """Prints the table and the summary; the exit status."""
    print()
    print(table([(r["round"], r["killed"], r["by"], fmt(r["failover_s"]), fmt(r["first_claim_s"]),
                  f"{r['claimed']}/{r['runs']}", fmt(r["p50"]), fmt(r["p99"]), fmt(r["max"]), r["late_over_5s"],
                  r["lost"], r["duplicated"], r["redelivered"]) for r in rows],
                ("round", "killed", "new", "failover_s", "1st_claim_s", "claimed", "late_p50", "late_p99",
                 "late_max", "late_5s", "lost", "dup", "redeliv")))
    times = [r["failover_s"] for r in rows if r["failover_s"] is not None]
    median_s = statistics.median(times) if len(times) == len(rows) else None
    lost, dup = sum(r["lost"] for r in rows), sum(r["duplicated"] for r in rows)
    ok = median_s is not None and median_s <= FAILOVER_TARGET_S
    print(f"failover median {fmt(median_s)} s (target ≤ {FAILOVER_TARGET_S:g} s: {'ok' if ok else 'MISSED'}); "
          f"min {fmt(min(times, default=None))}, max {fmt(max(times, default=None))} s over {len(rows)} rounds")
    print(f"window runs, all rounds: lateness p50 {fmt(loadgen.pct(all_lateness, 50))} "
          f"p99 {fmt(loadgen.pct(all_lateness, 99))} max {fmt(max(all_lateness, default=None))} s, "
          f"late > {loadgen.late_bound_s:g} s {sum(1 for x in all_lateness if x > loadgen.late_bound_s)}; "
          f"lost {lost}, duplicated {dup}; writes acknowledged {len(writes.ok)}, refused or failed {writes.failed}")
    if any(code != 0 for code in stopped.values()):
        print(f"bench/failover.py: exit status on SIGTERM: {stopped} (docs/operations.md: 0)", file=sys.stderr)
    for r in rows:
        if r["ready_s"] - r["restart_s"] > 5:
            print(f"round {r['round']}: {r['killed']} took {r['ready_s'] - r['restart_s']:.1f} s from restart to "
                  f"ready; its /v1/cluster meanwhile: " + "; ".join(r["views"][:12]))
        if r["redelivered_runs"]:
            print(f"round {r['round']} redelivered (run, attempt, s after SIGKILL): {r['redelivered_runs']}")
    if sum(r["redelivered_after_result"] for r in rows):
        print("bench/failover.py: a run was handed out again after its result was accepted", file=sys.stderr)
    if lost or dup:
        return 1
    return 0 if ok else 3



def main() -> int:
    args = parse_args()
    rows = []
    all_lateness: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tempo-failover-") as tmp:
        cluster = Cluster(tmp, 3)
        writes = Writes()
        tally = loadgen.Tally()
        collect_stop = threading.Event()
        procs: list = []
        try:
            try:
                cluster.start(ready_timeout_s)
            except SpawnError as exc:
                print(f"bench/failover.py: {exc}", file=sys.stderr)
                for server in cluster.nodes:
                    print(f"--- {server.log_path}\n{server.log_tail()}", file=sys.stderr)
                return 2
            queue_name = f"failover-{uuid.uuid4().hex[:8]}"
            procs, out, stop = loadgen.start_workers(cluster.urls, queue_name, args.workers)
            threads = [threading.Thread(target=writer, args=(cluster.urls, writes, i, args.write_gap_ms / 1000),
                                        daemon=True) for i in range(args.writers)]
            threads.append(threading.Thread(target=collector, args=(out, tally, collect_stop), daemon=True))
            for thread in threads:
                thread.start()
            time.sleep(1.0)  # workers connected, writers in their stride
            print(f"3 nodes {', '.join(cluster.urls)}; {args.workers} workers, {args.writers} writers; "
                  f"runs due every {args.every_ms:g} ms from {args.before_s:g} s before to {args.after_s:g} s "
                  f"after each kill; restart {args.restart_after_s:g} s after it", flush=True)
            for k in range(1, args.rounds + 1):
                r = one_round(k, args, cluster, writes, tally, queue_name)
                all_lateness += r["lateness"]
                rows.append(r)
                print(f"round {k}: SIGKILL {r['killed']} (term {r['term']}); first write {fmt(r['failover_s'])} s "
                      f"later (on {r['by']}); first claim {fmt(r['first_claim_s'])} s; {r['claimed']}/{r['runs']} "
                      f"runs claimed, lateness p50 {fmt(r['p50'])} p99 {fmt(r['p99'])} max {fmt(r['max'])} s, "
                      f"late > {loadgen.late_bound_s:g} s {r['late_over_5s']}; "
                      f"lost {r['lost']}, duplicated {r['duplicated']}, redelivered {r['redelivered']}"
                      f" ({r['redelivered_after_claim']} after a received claim, "
                      f"{r['redelivered_after_result']} after an accepted result); "
                      f"restarted +{r['restart_s']:.1f} s, ready +{r['ready_s']:.1f} s", flush=True)
            collect_stop.set()
            loadgen.stop_workers(procs, out, stop, tally)
            writes.stop.set()
            stopped = cluster.stop(stop_timeout_s)
        finally:
            writes.stop.set()
            collect_stop.set()
            for proc in procs:
                if proc.is_alive():
                    proc.kill()
            cluster.cleanup()
    return report(rows, all_lateness, writes, stopped)


if __name__ == "__main__":
    sys.exit(main())
