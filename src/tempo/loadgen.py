"""`tempo loadgen`: the spike — N one-off jobs due at one instant, W workers —
or, with `--rate R --duration-s D`, a steady stream of R runs/s falling due.

Phases, in order:

1. (`--spawn 1`) start a `tempo serve` on a free loopback port in a temp dir;
   (`--spawn 3`) start a 3-node cluster the same way (every node gets the same
   `--peers`, its own entry included) and wait until every node is ready.
2. Start W worker processes (multiprocessing, `spawn` start method: nothing of
   the parent's trio state is inherited). Each runs a `tempo.worker.Worker`
   with a no-op handler, `max_runs=1000`, `wait_s=1`, reporting every claim
   answer (run ID, job ID, attempt, due time, arrival time) to the parent.
3. Create N jobs due at `start + D` with `POST /v1/jobs/batch` (B per request,
   a few requests in flight, MessagePack). Request keys are
   `<queue>-<index>`, so a batch retried after a lost answer creates nothing
   twice. Creation that is still going at the due instant is an overrun:
   exit 2.
4. Wait until every created job has a claimed run, or `--timeout-s` past the
   due instant, then 2 s more so a late duplicate claim shows up (as
   shared/tools/spike_tempo.py does), and stop the workers.

Figures (API.md "Command line"): lateness = claim answer's arrival − the run's
`due_at`; drain = last claim − the due instant; runs/s = claims / drain. A job
is lost when none of its runs was claimed by `due + timeout`; duplicated counts
every extra hand-out of one (run ID, attempt) plus every extra run ID of one
job. Percentiles are nearest-rank on the sorted sample, the same formula as
spike_tempo.py, so the two agree.

Steady mode (`--rate R --duration-s D`): R × D jobs, job i due at
`first + i / R`, `first` being 4 s after the workers start. A thread creates
them span by span (each span 0.5 s of due times, sent 4 s before its first due
time); a request not yet sent at its first due time is an overrun: exit 2. A job
is lost when none of its runs was claimed within `--timeout-s` of its own due
time; drain is last claim − last due time; runs/s = claims / (last claim −
first due time); the per-second series counts from the first due time.

Failover (`--spawn 3 --kill-leader-at-s T`): T seconds after the due instant
(steady mode: the first due time) the leader, as its own `GET /v1/cluster`
said a second before, gets SIGKILL; `--restart-after-s` (default 3) after that it is started
again with the same data dir and arguments. From the SIGKILL on, a probe sends
small creates (into a queue nobody claims, due in 2099) round-robin over all
URLs until one is answered 2xx: the time to the first write. The time to the
first claim and the first accepted result after the SIGKILL come from the
workers. Workers and creators retry over every URL (`tempo.worker.Transport`).
A claim the dead leader had committed but could not answer is handed out again
only when its lease runs out, so in this mode jobs get `lease_s` of
`--lease-s` (default 10, not the server's 60) and claims with attempt > 1 are
counted as `redelivered`. The killed node is started again and must be ready
before the cluster is stopped.

Report files: `--report FILE` (default `tempo-loadgen-YYYYMMDD-HHMMSS.json` in
the current directory) gets the figures as JSON, and FILE's stem + `.html` a
self-contained page: the summary table and two inline SVG charts (claims per
second; lateness p50/p99 per second) drawn here from the JSON's series. The
same two charts, under a caption with the headline figures, go to FILE's stem
+ `.svg`, an image that stands alone (a README shows it).
"""

import html
import json
import math
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from tempo import limits
from tempo.net.tls import TlsError, certificate_refused, client_context

create_requests_in_flight = 4
create_request_timeout_s = 60.0
# A spawned server gets time to start; a given URL should already answer.
spawn_ready_timeout_s = 30.0
url_ready_timeout_s = 5.0
duplicate_window_s = 2.0
worker_stop_timeout_s = 15.0
server_stop_timeout_s = 20.0
progress_every_s = 1.0
claim_max_runs = 1000
claim_wait_s = 1
due_cache_entries_max = 100_000
spawn_nodes_allowed = (1, 3, 5)
leader_lookup_timeout_s = 15.0
leader_lookup_ahead_s = 1.0
probe_request_timeout_s = 1.0
probe_gap_s = 0.01
probe_timeout_s = 60.0
restart_after_s_default = 3.0
restart_ready_timeout_s = 30.0
kill_lease_s_default = 10
log_tail_lines = 15
# Answers that arrive this soon after the SIGKILL were written by the dying
# leader (loopback delivers in well under a millisecond; no follower even
# starts an election within its 1 s election timeout), so they do not count
# as the first claim or result after it.
dying_answer_window_s = 0.1


class CannotRun(Exception):
    """Exit status 2: no server, creation failed or overran."""


@dataclass
class Options:
    urls: list[str]
    jobs: int = 0
    rate: float = 0.0
    duration_s: float = 0.0
    due_in_s: float = 10.0
    workers: int = 4
    batch: int = 1000
    jitter_s: int = 0
    timeout_s: float = 60.0
    report: str | None = None
    no_report: bool = False
    progress: bool = True
    spawn: int = 0
    kill_leader_at_s: float | None = None
    restart_after_s: float = restart_after_s_default
    lease_s: int | None = None
    work_dir: str | None = None
    # PEM file of the CA that the servers' certificates come from (https:// URLs).
    ca_file: str | None = None

    def job_lease_s(self) -> int | None:
        """The `lease_s` the jobs get, or None for the server's default."""
        if self.lease_s is not None:
            return self.lease_s
        return kill_lease_s_default if self.kill_leader_at_s is not None else None


@dataclass
class Claim:
    run_id: str
    job_id: str
    attempt: int
    due_at_s: float
    claimed_at_s: float


@dataclass
class Tally:
    claims: list[Claim] = field(default_factory=list)
    reported_at_s: dict[str, float] = field(default_factory=dict)
    worker_counts: dict[str, int] = field(default_factory=dict)
    workers_done: int = 0
    due_cache: dict[str, float] = field(default_factory=dict)


def parse_time_s(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def iso(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def pct(values: list[float], p: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


# -- worker processes ---------------------------------------------------------


def _worker_process(
    urls: list[str], queue_name: str, index: int, out: Any, stop: Any, ca_file: str | None = None,
) -> None:
    import trio

    from tempo.worker import Worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop

    async def noop(run: dict[str, Any]) -> None:
        return None

    def claimed(runs: list[dict[str, Any]], at_s: float) -> None:
        out.put(("claims", [(r["id"], r["job_id"], r["attempt"], r["due_at"], at_s) for r in runs]))

    def reported(run_ids: list[str], at_s: float) -> None:
        out.put(("results", run_ids, at_s))

    async def main() -> None:
        worker = Worker(
            urls, f"loadgen-{os.getpid()}-{index}", {queue_name: noop},
            max_runs=claim_max_runs, concurrency=4 * claim_max_runs, wait_s=claim_wait_s,
            on_claimed=claimed, on_reported=reported, ca_file=ca_file,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while not stop.is_set():
                await trio.sleep(0.05)
            await worker.stop(grace_s=5)
        out.put(("done", worker.counts))

    trio.run(main)


def start_workers(
    urls: list[str], queue_name: str, count: int, ca_file: str | None = None,
) -> tuple[list[Any], Any, Any]:
    """`count` worker processes claiming from `queue_name` over all `urls`:
    (processes, the queue their messages come on — see `take` —, the stop event)."""
    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_worker_process, args=(list(urls), queue_name, i, out, stop, ca_file), daemon=True)
        for i in range(count)
    ]
    for proc in procs:
        proc.start()
    return procs, out, stop


def _start_workers(opts: Options, queue_name: str) -> tuple[list[Any], Any, Any]:
    return start_workers(opts.urls, queue_name, opts.workers, opts.ca_file)


def _due_s(tally: Tally, text: str) -> float:
    at_s = tally.due_cache.get(text)
    if at_s is None:
        if len(tally.due_cache) >= due_cache_entries_max:
            tally.due_cache.clear()
        at_s = tally.due_cache[text] = parse_time_s(text)
    return at_s


def _receive(out, tally, seen: set, counts) -> None:
    """Takes one worker message (waiting 0.1 s at most) into the tally; the
    jobs of its claims for which `counts` holds are seen (not lost)."""
    try:
        message = out.get(timeout=0.1)
    except queue_mod.Empty:
        return
    before = len(tally.claims)
    take(tally, message)
    seen.update(c.job_id for c in tally.claims[before:] if counts(c))


def take(tally: Tally, message: tuple) -> None:
    """One worker message into the tally."""
    kind = message[0]
    if kind == "claims":
        # due_at is parsed once per distinct string, so the spike's single due
        # instant costs one parse; the parent's CPU is the server's too.
        tally.claims += [Claim(r, j, a, _due_s(tally, d), t) for r, j, a, d, t in message[1]]
    elif kind == "results":
        for run_id in message[1]:
            tally.reported_at_s.setdefault(run_id, message[2])
    else:
        tally.workers_done += 1
        for k, v in message[1].items():
            tally.worker_counts[k] = tally.worker_counts.get(k, 0) + v


# -- creation ----------------------------------------------------------------


def _job_extras(opts: Options) -> dict[str, int]:
    extras = {}
    if opts.jitter_s:
        extras["jitter_s"] = opts.jitter_s
    if opts.job_lease_s() is not None:
        extras["lease_s"] = opts.job_lease_s()
    return extras


def _create(opts: Options, queue_name: str, due_s: float, say: Any) -> tuple[list[str], float]:
    """Job IDs created (index order) and the seconds creation took."""
    import trio

    from tempo.worker import Transport

    body = {"target": f"queue:{queue_name}", "schedule": {"at": iso(due_s)}} | _job_extras(opts)
    starts = list(range(0, opts.jobs, opts.batch))
    job_ids: list[str | None] = [None] * opts.jobs
    done = [0]

    async def one_batch(transport: Transport, start: int) -> None:
        items = [body | {"request_key": f"{queue_name}-{i}"} for i in range(start, min(start + opts.batch, opts.jobs))]
        status, answer = await transport.post(
            "/v1/jobs/batch", {"jobs": items}, timeout_s=create_request_timeout_s,
            deadline_s=trio.current_time() + max(0.0, due_s - time.time()),
        )
        if status != 200:
            raise CannotRun(f"POST /v1/jobs/batch answered {status}: {str(answer)[:300]}")
        for offset, result in enumerate(answer["results"]):
            if result["status"] not in (200, 201):
                raise CannotRun(f"job {start + offset} was refused: {str(result)[:300]}")
            job_ids[start + offset] = result["job"]["id"]
        done[0] += len(items)

    async def feeder(transport: Transport, todo: list[int]) -> None:
        while todo:
            if time.time() > due_s:
                raise CannotRun("creation overran")
            await one_batch(transport, todo.pop(0))

    async def main() -> float:
        transport = Transport(opts.urls, ca_file=opts.ca_file)
        started_s = time.time()
        todo = list(starts)
        try:
            with trio.fail_after(max(1.0, due_s - time.time())):
                async with trio.open_nursery() as nursery:
                    for _ in range(create_requests_in_flight):
                        nursery.start_soon(feeder, transport, todo)
                    while todo or done[0] < opts.jobs:
                        say(f"creating: {done[0]}/{opts.jobs} jobs", live=True)
                        await trio.sleep(0.2)
        except trio.TooSlowError:
            raise CannotRun("creation overran") from None
        finally:
            await transport.aclose()
        return time.time() - started_s

    try:
        create_s = trio.run(main)
    except CannotRun as exc:
        if "overran" in str(exc):
            raise CannotRun(
                f"creation overran the due instant: {done[0]}/{opts.jobs} jobs created in "
                f"{opts.due_in_s:g} s; give a larger --due-in-s"
            ) from None
        raise
    except Exception as exc:  # noqa: BLE001 - any transport failure means the spike cannot run
        raise CannotRun(f"creation failed: {exc!r}") from None
    if time.time() > due_s:
        raise CannotRun(
            f"creation overran the due instant: {opts.jobs} jobs took {create_s:.2f} s, "
            f"more than --due-in-s {opts.due_in_s:g}; give a larger --due-in-s"
        )
    assert all(j is not None for j in job_ids)
    return [j for j in job_ids if j is not None], create_s


# -- collecting --------------------------------------------------------------


def _collect(opts: Options, out: Any, job_ids: list[str], due_s: float, say: Any, tally: Tally) -> None:
    wanted = set(job_ids)
    seen: set[str] = set()
    deadline_s = due_s + opts.timeout_s
    next_say_s = 0.0
    quiet_until_s: float | None = None
    while True:
        now_s = time.time()
        if quiet_until_s is None and (len(seen) >= len(wanted) or now_s > deadline_s):
            quiet_until_s = min(now_s, deadline_s) + duplicate_window_s
        if quiet_until_s is not None and now_s > quiet_until_s:
            return
        _receive(out, tally, seen, lambda c: c.claimed_at_s <= deadline_s)
        if now_s >= next_say_s:
            next_say_s = now_s + progress_every_s
            phase = f"due in {due_s - now_s:.1f} s" if now_s < due_s else f"+{now_s - due_s:.1f} s"
            say(f"claimed: {len(seen & wanted)}/{len(wanted)} jobs ({phase})", live=True)


def stop_workers(procs: list[Any], out: Any, stop: Any, tally: Tally) -> None:
    """Stops the workers of `start_workers`, taking their last messages into the tally."""
    stop.set()
    # Drain the queue while waiting: a child blocked on a full pipe never exits.
    deadline_s = time.monotonic() + worker_stop_timeout_s
    while tally.workers_done < len(procs) and time.monotonic() < deadline_s:
        try:
            take(tally, out.get(timeout=0.1))
        except queue_mod.Empty:
            if not any(p.is_alive() for p in procs):
                break
    for proc in procs:
        proc.join(timeout=max(0.1, deadline_s - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)


# -- steady mode: a stream of one-off jobs -------------------------------------

# A creation span covers this many seconds of due times and is sent this long
# before its first due time, so the server sees a steady trickle of creates
# well ahead of the claims they feed.
steady_span_s = 0.5
steady_lead_s = 4.0
steady_jobs_max = 2_000_000
steady_stop_timeout_s = 10.0


@dataclass
class Stream:
    """What the creating thread shares with the collecting one. `job_ids` only
    grows; `finished` is set once every job is created or `error` is set."""

    job_ids: list[str] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    create_s: float = 0.0


def steady_due_s(first_due_s: float, rate: float, index: int) -> float:
    """Job `index`'s due time: R per second, evenly spread from `first_due_s`."""
    return first_due_s + index / rate


def steady_spans(jobs: int, rate: float) -> list[tuple[int, int]]:
    """Index ranges [lo, hi) of the creation spans, each `steady_span_s` of due times."""
    spans = []
    k = 0
    while (lo := min(jobs, round(k * steady_span_s * rate))) < jobs:
        spans.append((lo, min(jobs, round((k + 1) * steady_span_s * rate))))
        k += 1
    assert sum(hi - lo for lo, hi in spans) == jobs
    return spans


def _create_stream(opts: Options, queue_name: str, first_due_s: float, stream: Stream) -> None:
    """Runs in its own thread (and trio loop): creates each span `steady_lead_s`
    before its first due time. A request that would start after its first due
    time is an overrun."""
    import trio

    from tempo.worker import Transport

    base = {"target": f"queue:{queue_name}"} | _job_extras(opts)

    async def one_request(transport: Transport, lo: int, hi: int, limiter: trio.CapacityLimiter) -> None:
        async with limiter:
            first_s = steady_due_s(first_due_s, opts.rate, lo)
            if time.time() > first_s:
                raise CannotRun(f"creation overran: job {lo} was not yet sent at its due time")
            items = [base | {"request_key": f"{queue_name}-{i}",
                             "schedule": {"at": iso(steady_due_s(first_due_s, opts.rate, i))}} for i in range(lo, hi)]
            status, answer = await transport.post(
                "/v1/jobs/batch", {"jobs": items}, timeout_s=create_request_timeout_s,
                deadline_s=trio.current_time() + max(0.0, first_s - time.time()),
            )
        if status != 200:
            raise CannotRun(f"POST /v1/jobs/batch answered {status}: {str(answer)[:300]}")
        for offset, result in enumerate(answer["results"]):
            if result["status"] not in (200, 201):
                raise CannotRun(f"job {lo + offset} was refused: {str(result)[:300]}")
            stream.job_ids.append(result["job"]["id"])

    async def main() -> None:
        transport = Transport(opts.urls, ca_file=opts.ca_file)
        limiter = trio.CapacityLimiter(create_requests_in_flight)
        started_s = time.time()
        try:
            async with trio.open_nursery() as nursery:
                for lo, hi in steady_spans(steady_jobs(opts), opts.rate):
                    send_at_s = steady_due_s(first_due_s, opts.rate, lo) - steady_lead_s
                    await trio.sleep(max(0.0, send_at_s - time.time()))
                    if stream.stop.is_set():
                        nursery.cancel_scope.cancel()
                        return
                    for start in range(lo, hi, opts.batch):
                        nursery.start_soon(one_request, transport, start, min(start + opts.batch, hi), limiter)
        finally:
            stream.create_s = time.time() - started_s
            await transport.aclose()

    try:
        trio.run(main)
    except BaseException as exc:  # noqa: BLE001 - any failure ends the run with exit 2; the collector reports it
        while isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
        stream.error = str(exc) if isinstance(exc, CannotRun) else f"creation failed: {exc!r}"
    finally:
        stream.finished.set()


def steady_jobs(opts: Options) -> int:
    return round(opts.rate * opts.duration_s)


def _collect_stream(opts: Options, out: Any, stream: Stream, first_due_s: float, say: Any, tally: Tally) -> None:
    """Like `_collect`, but the wanted set grows while jobs are created, and a
    job counts as claimed when its claim came within `--timeout-s` of its own due time."""
    last_due_s = steady_due_s(first_due_s, opts.rate, steady_jobs(opts) - 1)
    deadline_s = last_due_s + opts.timeout_s
    seen: set[str] = set()
    next_say_s = 0.0
    quiet_until_s: float | None = None
    while stream.error is None:
        now_s = time.time()
        all_seen = stream.finished.is_set() and len(seen) >= len(stream.job_ids)
        if quiet_until_s is None and (all_seen or now_s > deadline_s):
            quiet_until_s = min(now_s, deadline_s) + duplicate_window_s
        if quiet_until_s is not None and now_s > quiet_until_s:
            return
        _receive(out, tally, seen, lambda c: c.claimed_at_s - c.due_at_s <= opts.timeout_s)
        if now_s >= next_say_s:
            next_say_s = now_s + progress_every_s
            phase = f"first due in {first_due_s - now_s:.1f} s" if now_s < first_due_s else f"+{now_s - first_due_s:.1f} s"
            say(f"created: {len(stream.job_ids)}/{steady_jobs(opts)}, claimed: {len(seen)} ({phase})", live=True)


def _run_steady(opts: Options, queue_name: str, say: Any, cluster: "Cluster | None") -> dict[str, Any]:
    procs, out, stop = _start_workers(opts, queue_name)
    pauses_before = scrape_pauses(opts.urls, opts.ca_file)
    first_due_s = round(time.time() + steady_lead_s, 3)
    say(f"steady: {opts.rate:g} runs/s for {opts.duration_s:g} s ({steady_jobs(opts)} jobs) from {iso(first_due_s)}")
    stream = Stream()
    creator = threading.Thread(target=_create_stream, args=(opts, queue_name, first_due_s, stream), daemon=True)
    creator.start()
    tally = Tally()
    plan, plan_stop, killer = _start_failover(opts, cluster, first_due_s, queue_name)
    try:
        _collect_stream(opts, out, stream, first_due_s, say, tally)
        _end_failover(plan, plan_stop, killer)
    finally:
        plan_stop.set()
        stream.stop.set()
        creator.join(timeout=steady_stop_timeout_s)
        stop_workers(procs, out, stop, tally)
    if stream.error is not None:
        raise CannotRun(stream.error)
    last_due_s = steady_due_s(first_due_s, opts.rate, steady_jobs(opts) - 1)
    fig = figures(opts, list(stream.job_ids), stream.create_s, first_due_s, tally, last_due_s=last_due_s)
    fig |= pause_figures(pauses_before, scrape_pauses(opts.urls, opts.ca_file))
    if plan is not None:
        fig["failover"] = failover_figures(plan, tally, first_due_s)
    return fig


# -- event-loop lag, from each node's /metrics ---------------------------------


@dataclass
class Pauses:
    """One scrape of a node's event-loop lag and GC pause histograms
    (cumulative counts by bound) and the longest of each since its start."""

    lag_buckets: dict[float, float] = field(default_factory=dict)
    lag_max_s: float = 0.0
    gc_buckets: dict[float, float] = field(default_factory=dict)
    gc_max_s: float = 0.0


_PAUSE_SERIES = {
    "tempo_event_loop_lag_seconds": ("lag_buckets", "lag_max_s"),
    "tempo_gc_pause_seconds": ("gc_buckets", "gc_max_s"),
}


def parse_pauses(text: str) -> Pauses:
    found = Pauses()
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        for family, (buckets, longest) in _PAUSE_SERIES.items():
            if name.startswith(f'{family}_bucket{{le="'):
                bound = name.split('"')[1]
                getattr(found, buckets)[math.inf if bound == "+Inf" else float(bound)] = float(value)
            elif name == family.replace("_seconds", "_max_seconds"):
                setattr(found, longest, float(value))
    return found


def scrape_pauses(urls: list[str], ca_file: str | None = None) -> dict[str, Pauses]:
    """Each answering node's pauses; a node that does not answer is left out."""
    scraped = {}
    verify: Any = True if ca_file is None else client_context(ca_file)
    with httpx.Client(timeout=5.0, verify=verify) as client:
        for url in urls:
            try:
                answer = client.get(f"{url}/metrics")
            except httpx.HTTPError:
                continue
            if answer.status_code == 200:
                scraped[url] = parse_pauses(answer.text)
    return scraped


def _window(start: dict[float, float], end: dict[float, float], max_before_s: float, max_after_s: float,
            ) -> tuple[float, float, float] | None:
    """(count, p99 bound, max) of the observations between two scrapes. The
    p99 is the bound of the bucket that holds it; a max that did not rise
    above the one before is known only to lie in the highest bucket used."""
    delta = {b: n - start.get(b, 0.0) for b, n in sorted(end.items())}
    total = delta.get(math.inf, 0.0)
    if total <= 0:
        return None
    p99 = next(b for b, n in delta.items() if n >= 0.99 * total)
    top = next(b for b, n in delta.items() if n >= total)
    longest = max_after_s if max_after_s > max_before_s else min(top, max_before_s)
    return total, p99, longest


def pause_figures(before: dict[str, Pauses], after: dict[str, Pauses]) -> dict[str, Any]:
    """Event-loop lag p99 and max and GC pauses between two scrapes, the
    worst over the nodes (docs/operations.md "Event-loop lag")."""
    lag_p99s, lag_maxes, gc_maxes, gcs = [], [], [0.0], 0
    for url, end in after.items():
        start = before.get(url, Pauses())
        lag = _window(start.lag_buckets, end.lag_buckets, start.lag_max_s, end.lag_max_s)
        if lag is not None:
            lag_p99s.append(lag[1])
            lag_maxes.append(lag[2])
        gc = _window(start.gc_buckets, end.gc_buckets, start.gc_max_s, end.gc_max_s)
        if gc is not None:
            gcs += int(gc[0])
            gc_maxes.append(gc[2])
    if not lag_p99s:
        return {}
    return {
        "loop_lag_p99_s": _r(max(lag_p99s)),
        "loop_lag_max_s": _r(max(lag_maxes)),
        "gc_pause_max_s": _r(max(gc_maxes)),
        "gc_pauses": gcs,
    }


# -- figures -----------------------------------------------------------------


def figures(opts: Options, job_ids: list[str], create_s: float, due_s: float, tally: Tally,
            *, last_due_s: float | None = None) -> dict[str, Any]:
    """The report. `due_s` is the spike's due instant, or steady mode's first due
    time (with `last_due_s` its last): the origin of the per-second series."""
    steady = last_due_s is not None
    if steady:
        in_time = [c for c in tally.claims if c.claimed_at_s - c.due_at_s <= opts.timeout_s]
    else:
        in_time = [c for c in tally.claims if c.claimed_at_s <= due_s + opts.timeout_s]
    wanted = set(job_ids)
    claimed_jobs = {c.job_id for c in in_time} & wanted
    pairs = [(c.run_id, c.attempt) for c in tally.claims]
    runs_of_job: dict[str, set[str]] = {}
    for c in tally.claims:
        runs_of_job.setdefault(c.job_id, set()).add(c.run_id)
    duplicated = (len(pairs) - len(set(pairs))) + sum(len(r) - 1 for r in runs_of_job.values())
    lateness = [c.claimed_at_s - c.due_at_s for c in tally.claims]
    last_claim_s = max((c.claimed_at_s for c in tally.claims), default=None)
    # Spike: drain is from the due instant; steady: from the last due time.
    drain_s = None if last_claim_s is None else last_claim_s - (last_due_s if steady else due_s)
    claiming_s = None if last_claim_s is None else last_claim_s - due_s
    first_claim = {}
    for c in tally.claims:
        first_claim.setdefault(c.run_id, c.claimed_at_s)
    result_lag = [t - first_claim[r] for r, t in tally.reported_at_s.items() if r in first_claim]
    counts = tally.worker_counts
    fig = {
        "mode": "steady" if steady else "spike",
        "jobs": steady_jobs(opts) if steady else opts.jobs,
        "created": len(job_ids),
        "create_s": round(create_s, 3),
        "created_per_s": round(len(job_ids) / create_s) if create_s > 0 else None,
        "claimed": len(tally.claims),
        "lateness_p50_s": _r(pct(lateness, 50)),
        "lateness_p90_s": _r(pct(lateness, 90)),
        "lateness_p99_s": _r(pct(lateness, 99)),
        "lateness_max_s": _r(max(lateness, default=None)),
        "drain_s": _r(drain_s),
        "runs_per_s": round(len(tally.claims) / claiming_s) if claiming_s and claiming_s > 0 else None,
        "result_lag_p99_s": _r(pct(result_lag, 99)),
        "reported": len(tally.reported_at_s),
        "lost": len(wanted - claimed_jobs),
        "duplicated": duplicated,
        "redelivered": sum(1 for c in tally.claims if c.attempt > 1),
        "failed": counts.get("failed", 0) + counts.get("rejected", 0) + counts.get("lost", 0),
        "workers": opts.workers,
        "urls": opts.urls,
        "due_in_s": steady_lead_s if steady else opts.due_in_s,
        "jitter_s": opts.jitter_s,
        "lease_s": opts.job_lease_s(),
        "series": per_second(tally.claims, due_s),
    }
    if not steady:
        fig |= fine_series(tally.claims, due_s)
    if steady:
        fig |= {"rate": opts.rate, "duration_s": opts.duration_s}
    return fig


def per_second(claims: list[Claim], origin_s: float, bin_s: float = 1.0) -> list[dict[str, Any]]:
    """Claims and their lateness per `bin_s` of claim time after `origin_s`
    (whole seconds by default); `t_s` is the start of each bin."""
    buckets: dict[int, list[float]] = {}
    for c in claims:
        buckets.setdefault(int((c.claimed_at_s - origin_s) // bin_s), []).append(c.claimed_at_s - c.due_at_s)
    # Bins without claims between the first and the last are there with 0
    # claims and no lateness, so a chart shows a stall as a stall.
    return [
        {"t_s": round(k * bin_s, 3) if bin_s != 1.0 else k, "claims": len(xs), "lateness_p50_s": _r(pct(xs, 50)),
         "lateness_p90_s": _r(pct(xs, 90)), "lateness_p99_s": _r(pct(xs, 99)), "lateness_max_s": _r(max(xs, default=None))}
        for k in range(min(buckets, default=0), max(buckets, default=-1) + 1)
        for xs in [buckets.get(k, [])]
    ]


def fine_series(claims: list[Claim], origin_s: float) -> dict[str, Any]:
    """A spike that drains in a few seconds is two or three points per second;
    the charts draw it from bins of `fine_bin_s` instead."""
    span_s = max((c.claimed_at_s for c in claims), default=origin_s) - origin_s
    if span_s > fine_span_s_max:
        return {}
    return {"fine_bin_s": fine_bin_s, "fine_series": per_second(claims, origin_s, fine_bin_s)}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def summary_rows(fig: dict[str, Any]) -> list[tuple[str, str]]:
    def s(v: Any) -> str:
        return "-" if v is None else (f"{v:.3f} s" if isinstance(v, float) else str(v))

    steady = [("stream", f"{fig['rate']:g} runs/s due for {fig['duration_s']:g} s")] if fig["mode"] == "steady" else []
    return [
        *steady,
        ("jobs", f"{fig['created']}/{fig['jobs']} created in {fig['create_s']:.2f} s"),
        ("create rate", f"{fig['created_per_s']} jobs/s"),
        ("lateness p50", s(fig["lateness_p50_s"])),
        ("lateness p90", s(fig["lateness_p90_s"])),
        ("lateness p99", s(fig["lateness_p99_s"])),
        ("lateness max", s(fig["lateness_max_s"])),
        ("drain", s(fig["drain_s"])),
        ("runs/s", s(fig["runs_per_s"])),
        ("claimed", s(fig["claimed"])),
        ("lost", s(fig["lost"])),
        ("duplicated", s(fig["duplicated"])),
        ("failed", s(fig["failed"])),
        *([("redelivered", s(fig["redelivered"]))] if fig.get("redelivered") else []),
        *pause_rows(fig, s),
        *failover_rows(fig.get("failover"), s),
    ]


def pause_rows(fig: dict[str, Any], s: Any) -> list[tuple[str, str]]:
    if fig.get("loop_lag_p99_s") is None:
        return []
    return [
        ("event-loop lag p99", "≤ " + s(fig["loop_lag_p99_s"])),
        ("event-loop lag max", s(fig["loop_lag_max_s"])),
        ("GC pause max", f"{s(fig['gc_pause_max_s'])} ({fig['gc_pauses']} collections)"),
    ]


def failover_rows(fail: dict[str, Any] | None, s: Any) -> list[tuple[str, str]]:
    if fail is None:
        return []
    if fail["kill_at_s"] is None:
        return [("leader killed", f"no: {fail['error']}")]
    by = f" (by {fail['first_write_by']})" if fail["first_write_by"] else ""
    rows = [
        ("leader killed", f"{fail['node']} (term {fail['term']}) at {fail['kill_at_s']:+.3f} s after the due instant"),
        ("first write after", s(fail["first_write_s"]) + by),
        ("first claim after", s(fail["first_claim_s"])),
        ("first result after", s(fail["first_result_s"])),
        ("restarted after", s(fail["restart_s"])),
        ("ready again after", s(fail["ready_again_s"])),
    ]
    if fail["error"]:
        rows.append(("failover error", fail["error"]))
    return rows


def summary(fig: dict[str, Any]) -> str:
    rows = summary_rows(fig)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


# -- report files --------------------------------------------------------------

# A spike drained within `fine_span_s_max` is charted in bins of `fine_bin_s`.
fine_bin_s = 0.1
fine_span_s_max = 5.0
chart_width_px = 720
chart_height_px = 260
chart_margin_px = {"left": 64, "right": 16, "top": 28, "bottom": 44}
chart_ticks_max = 8


def report_paths(report: str | None, now_s: float) -> tuple[str, str]:
    """The JSON and HTML paths: `--report FILE` and FILE's stem + `.html`, or a
    timestamped name in the current directory when no FILE was given. The
    charts alone go to FILE's stem + `.svg` (`chart_path`)."""
    if report is None:
        stamp = datetime.fromtimestamp(now_s).strftime("%Y%m%d-%H%M%S")
        report = f"tempo-loadgen-{stamp}.json"
    root, ext = os.path.splitext(report)
    if ext.lower() in (".html", ".svg"):
        raise CannotRun(f"--report {report}: the HTML page and the chart go beside the JSON file; name the JSON file")
    return report, root + ".html"


def chart_path(html_path: str) -> str:
    return os.path.splitext(html_path)[0] + ".svg"


def write_reports(fig: dict[str, Any], json_path: str, html_path: str) -> None:
    os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(fig, f, indent=2)
    with open(html_path, "w") as f:
        f.write(html_page(fig))
    with open(chart_path(html_path), "w") as f:
        f.write(chart_svg(fig))


def _nice_ticks(low: float, high: float) -> list[float]:
    """At most `chart_ticks_max` round ticks (1, 2, 5 × 10^k apart) covering low..high."""
    if high <= low:
        high = low + 1.0
    raw_step = (high - low) / (chart_ticks_max - 1)
    magnitude = 10 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw_step)
    first = math.floor(low / step) * step
    ticks = []
    k = 0
    while first + k * step <= high + step * 1e-9:
        ticks.append(round(first + k * step, 10))
        k += 1
    if ticks[-1] < high:
        ticks.append(round(first + k * step, 10))
    assert 2 <= len(ticks) <= chart_ticks_max + 2
    return ticks


def _fmt_tick(value: float) -> str:
    return f"{value:g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


def svg_chart(title: str, x_label: str, y_label: str, xs: list[float],
              lines: list[tuple[str, str, list[float | None]]],
              marks: list[tuple[float, str]] = ()) -> str:
    """A line chart as inline SVG: one polyline per (label, colour, ys), with
    axes, round ticks, axis labels and a legend. None in ys breaks no line; the
    point is skipped. Each (x, label) of `marks` inside the x range is a dashed
    vertical line (the leader's SIGKILL)."""
    w, h, m = chart_width_px, chart_height_px, chart_margin_px
    plot_w, plot_h = w - m["left"] - m["right"], h - m["top"] - m["bottom"]
    ys_all = [y for _, _, ys in lines for y in ys if y is not None]
    x_ticks = _nice_ticks(min(xs, default=0.0), max(xs, default=1.0))
    y_ticks = _nice_ticks(min(0.0, min(ys_all, default=0.0)), max(ys_all, default=1.0))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def px(x: float) -> float:
        return m["left"] + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return m["top"] + plot_h - (y - y0) / (y1 - y0) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           f'role="img" aria-label="{_esc(title)}">',
           f'<text x="{w / 2:.0f}" y="16" text-anchor="middle" class="title">{_esc(title)}</text>']
    for t in x_ticks:
        out.append(f'<line x1="{px(t):.1f}" y1="{m["top"]}" x2="{px(t):.1f}" y2="{m["top"] + plot_h}" class="grid"/>')
        out.append(f'<text x="{px(t):.1f}" y="{m["top"] + plot_h + 16}" text-anchor="middle">{_fmt_tick(t)}</text>')
    for t in y_ticks:
        out.append(f'<line x1="{m["left"]}" y1="{py(t):.1f}" x2="{m["left"] + plot_w}" y2="{py(t):.1f}" class="grid"/>')
        out.append(f'<text x="{m["left"] - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{_fmt_tick(t)}</text>')
    out.append(f'<line x1="{m["left"]}" y1="{m["top"] + plot_h}" x2="{m["left"] + plot_w}" y2="{m["top"] + plot_h}" class="axis"/>')
    out.append(f'<line x1="{m["left"]}" y1="{m["top"]}" x2="{m["left"]}" y2="{m["top"] + plot_h}" class="axis"/>')
    out.append(f'<text x="{m["left"] + plot_w / 2:.0f}" y="{h - 6}" text-anchor="middle">{_esc(x_label)}</text>')
    out.append(f'<text x="14" y="{m["top"] + plot_h / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {m["top"] + plot_h / 2:.0f})">{_esc(y_label)}</text>')
    for x, label in marks:
        if x0 <= x <= x1:
            out.append(f'<line x1="{px(x):.1f}" y1="{m["top"]}" x2="{px(x):.1f}" y2="{m["top"] + plot_h}" '
                       f'stroke="#444" stroke-dasharray="4 3" class="mark"/>')
            out.append(f'<text x="{px(x) + 4:.1f}" y="{m["top"] + 12}">{_esc(label)}</text>')
    for k, (label, colour, ys) in enumerate(lines):
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True) if y is not None)
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        for x, y in zip(xs, ys, strict=True):
            if y is not None:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{colour}"/>')
        lx = m["left"] + plot_w - 110
        ly = m["top"] + 10 + 16 * k
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 18}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 24}" y="{ly + 4}">{_esc(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


# How chart text and lines look; the same rules style the HTML page and the
# standalone chart file (an SVG shown as an image carries its own style).
_CHART_CSS = """svg { font: 11px system-ui, sans-serif; }
svg .title { font-size: 13px; font-weight: 600; }
svg .grid { stroke: #eee; }
svg .axis { stroke: #444; }"""


def _charts(fig: dict[str, Any]) -> tuple[str, str]:
    """The two charts drawn from `fig["series"]`: runs claimed per second, and
    lateness p50/p99 per second, with the leader's SIGKILL marked on both."""
    series, bin_s = fig.get("fine_series") or fig["series"], fig.get("fine_bin_s", 1.0)
    xs = [float(p["t_s"]) for p in series]
    origin = "the due instant" if fig.get("mode") == "spike" else "the first due time"
    fail = fig.get("failover") or {}
    marks = [(float(fail["kill_at_s"]), f"SIGKILL {fail['node']}")] if fail.get("kill_at_s") is not None else []
    claims_chart = svg_chart("runs claimed per second", f"seconds after {origin}", "runs claimed / s", xs,
                             [("claims", "#1f77b4", [p["claims"] / bin_s for p in series])], marks)
    per = "per second" if bin_s == 1.0 else f"per {bin_s:g} s"
    lateness_chart = svg_chart(f"lateness {per} (claim − due)", f"seconds after {origin}", "lateness (s)", xs,
                               [("p50", "#2ca02c", [p.get("lateness_p50_s") for p in series]),
                                ("p99", "#d62728", [p.get("lateness_p99_s") for p in series])], marks)
    return claims_chart, lateness_chart


def _caption(fig: dict[str, Any]) -> str:
    return (f"tempo loadgen, {fig.get('mode', 'spike')}: {fig.get('jobs')} jobs, {fig.get('nodes', 1)} node(s), "
            f"{fig.get('workers')} workers; lateness p50 {_r(fig.get('lateness_p50_s'))} s, "
            f"p99 {_r(fig.get('lateness_p99_s'))} s; lost {fig.get('lost')}, duplicated {fig.get('duplicated')}")


def chart_svg(fig: dict[str, Any]) -> str:
    """Both charts stacked in one self-contained SVG file under a caption with
    the headline figures, for a README or a ticket."""
    caption_px = 24
    w, h = chart_width_px, caption_px + 2 * chart_height_px
    claims_chart, lateness_chart = _charts(fig)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{_esc(_caption(fig))}">',
        f"<style>{_CHART_CSS}</style>",
        f'<rect width="{w}" height="{h}" fill="#fff"/>',
        f'<text x="{w / 2:.0f}" y="16" text-anchor="middle">{_esc(_caption(fig))}</text>',
        f'<g transform="translate(0 {caption_px})">{claims_chart}</g>',
        f'<g transform="translate(0 {caption_px + chart_height_px})">{lateness_chart}</g>',
        "</svg>",
    ])


def html_page(fig: dict[str, Any]) -> str:
    """A self-contained page: the summary table and two inline SVG charts drawn
    from `fig["series"]` (no scripts, no network)."""
    claims_chart, lateness_chart = _charts(fig)
    rows = "\n".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>"
                     for k, v in summary_rows(fig))
    title = f"tempo loadgen — {fig.get('mode', 'spike')}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ padding: 3px 12px; border-bottom: 1px solid #ddd; text-align: left; }}
td {{ font-variant-numeric: tabular-nums; }}
svg {{ display: block; margin: 1em 0; }}
{_CHART_CSS}
</style></head><body>
<h1>{_esc(title)}</h1>
<p>{_esc(fig.get("nodes", 1))} node(s) at {_esc(", ".join(fig.get("urls", [])))}, {_esc(fig.get("workers"))} workers.</p>
<table>
{rows}
</table>
{claims_chart}
{lateness_chart}
</body></html>
"""


# -- spawning a server or a cluster -------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_probe_clients = threading.local()


def _probe_http() -> httpx.Client:
    """One keep-alive client per thread for /readyz and /v1/cluster: a fresh
    `httpx.get` builds a TLS context each time, tens of ms on a busy machine,
    which would delay the SIGKILL past the instant asked for."""
    client = getattr(_probe_clients, "client", None)
    if client is None:
        client = _probe_clients.client = httpx.Client(timeout=1.0)
    return client


class Node:
    """One `tempo serve` process; `start` after `kill` reuses its data dir,
    port and arguments, and appends to its log."""

    def __init__(self, node_id: str, port: int, data_dir: str, log_path: str, cluster_args: list[str]):
        self.id = node_id
        self.url = f"http://127.0.0.1:{port}"
        self.data_dir = data_dir
        self.log_path = log_path
        self.argv = [sys.executable, "-m", "tempo.cli", "serve", "--data-dir", data_dir,
                     "--listen", f"127.0.0.1:{port}", *cluster_args]
        self.proc: subprocess.Popen | None = None
        self._terminated = False

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"{self.id} is running"
        self._terminated = False
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(self.argv, stdout=log_file, stderr=subprocess.STDOUT)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> float:
        """SIGKILL; answers the UNIX time the signal was sent."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        killed_at_s = time.time()
        self.proc.wait(timeout=server_stop_timeout_s)
        return killed_at_s

    def terminate(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            self._terminated = True

    def stop(self) -> int | None:
        """SIGTERM (once) and wait; the exit status, or None when it had to be killed."""
        if self.proc is None:
            return None
        if self.proc.returncode is None and self.proc.poll() is None and not self._terminated:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=server_stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
            return None

    def ready(self) -> bool:
        try:
            return _probe_http().get(self.url + "/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def view(self) -> dict[str, Any] | None:
        """This node's own `GET /v1/cluster`, or None when it does not answer."""
        try:
            answer = _probe_http().get(self.url + "/v1/cluster")
        except httpx.HTTPError:
            return None
        return answer.json() if answer.status_code == 200 else None

    def log_tail(self, lines: int = log_tail_lines) -> str:
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Cluster:
    """`size` local nodes on free loopback ports under `root`: one plain
    `tempo serve` for size 1, else nodes n1..nK that all get the same `--peers`
    (own entry included), as API.md "Command line" has it."""

    def __init__(self, root: str, size: int):
        assert size in spawn_nodes_allowed, f"size: one of {spawn_nodes_allowed}"
        ports = [_free_port() for _ in range(size)]
        ids = [f"n{i + 1}" for i in range(size)]
        peers = ",".join(f"{node_id}=http://127.0.0.1:{port}" for node_id, port in zip(ids, ports, strict=True))
        self.nodes = [
            Node(node_id, port, os.path.join(root, node_id), os.path.join(root, f"{node_id}.log"),
                 ["--node", node_id, "--peers", peers] if size > 1 else [])
            for node_id, port in zip(ids, ports, strict=True)
        ]
        self.urls = [node.url for node in self.nodes]

    def start(self, ready_timeout_s: float = spawn_ready_timeout_s) -> None:
        for node in self.nodes:
            node.start()
        self.wait_ready(self.nodes, ready_timeout_s)

    def wait_ready(self, nodes: list[Node], timeout_s: float) -> None:
        """Until every one of `nodes` answers /readyz 200 (knows a leader and
        has applied what is committed)."""
        deadline_s = time.monotonic() + timeout_s
        waiting = list(nodes)
        while waiting:
            for node in waiting:
                if not node.running():
                    code = None if node.proc is None else node.proc.returncode
                    raise CannotRun(f"tempo serve {node.id} exited with status {code}:\n{node.log_tail()}")
            waiting = [node for node in waiting if not node.ready()]
            if waiting and time.monotonic() > deadline_s:
                names = ", ".join(f"{n.id} ({n.url})" for n in waiting)
                raise CannotRun(f"not ready within {timeout_s:g} s: {names}")
            if waiting:
                time.sleep(0.1)

    def by_url(self, url: str) -> Node | None:
        return next((node for node in self.nodes if node.url == url.rstrip("/")), None)

    def leader(self, timeout_s: float = leader_lookup_timeout_s) -> tuple[Node, int]:
        """The running node whose own `/v1/cluster` names itself leader (the
        highest term if several do), and that term."""
        deadline_s = time.monotonic() + timeout_s
        while True:
            claims = []
            for node in self.nodes:
                view = node.view() if node.running() else None
                if view is not None and view.get("leader") == node.id:
                    claims.append((int(view.get("term", 0)), node))
            if claims:
                term, node = max(claims, key=lambda c: c[0])
                return node, term
            if time.monotonic() > deadline_s:
                raise CannotRun(f"no node says it is the leader within {timeout_s:g} s")
            time.sleep(0.05)

    def stop(self) -> dict[str, int | None]:
        """SIGTERM to every running node at once, then each one's exit status
        (None: it had to be killed). A node that had exited before is left out."""
        running = [node for node in self.nodes if node.running()]
        for node in running:
            node.terminate()
        return {node.id: node.stop() for node in running}


def _wait_ready(urls: list[str], ca_file: str | None = None) -> None:
    """A given URL: any one of them answering /readyz 200 will do."""
    deadline_s = time.monotonic() + url_ready_timeout_s
    verify = client_context(ca_file)
    while time.monotonic() < deadline_s:
        for url in urls:
            try:
                if httpx.get(url + "/readyz", timeout=1.0, verify=verify).status_code == 200:
                    return
            except httpx.HTTPError as exc:
                if certificate_refused(exc):
                    raise CannotRun(f"{url}: certificate refused ({exc}); is --ca-file the CA that signed it?") from None
        time.sleep(0.1)
    raise CannotRun(f"no server answered /readyz at {', '.join(urls)} within {url_ready_timeout_s:g} s")


# -- killing the leader ----------------------------------------------------------


@dataclass
class Failover:
    """What `_fail_over` did and saw; UNIX times, None until it happened."""

    kill_at_s: float  # planned: the due instant + --kill-leader-at-s
    restart_after_s: float
    node: str | None = None
    term: int | None = None
    killed_at_s: float | None = None
    first_write_at_s: float | None = None
    first_write_by: str | None = None
    restarted_at_s: float | None = None
    ready_again_at_s: float | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


def first_write(urls: list[str], queue_name: str, deadline_s: float) -> tuple[float, str] | None:
    """Sends small creates round-robin over `urls` (redirects followed) until
    one is answered 2xx; its UNIX arrival time and the URL that answered it,
    or None at `deadline_s` (monotonic)."""
    body = {"target": f"queue:{queue_name}-probe", "schedule": {"at": "2099-01-01T00:00:00Z"}}
    k = 0
    with httpx.Client(timeout=probe_request_timeout_s, follow_redirects=True) as http:
        while time.monotonic() < deadline_s:
            url = urls[k % len(urls)]
            k += 1
            try:
                answer = http.post(url + "/v1/jobs", json=body | {"request_key": f"probe-{uuid.uuid4().hex}"})
            except httpx.HTTPError:
                answer = None
            if answer is not None and 200 <= answer.status_code < 300:
                final = httpx.URL(str(answer.url))
                return time.time(), f"{final.scheme}://{final.host}:{final.port}"
            time.sleep(probe_gap_s)
    return None


def _fail_over(cluster: Cluster, plan: Failover, queue_name: str, stop: threading.Event) -> None:
    """Thread: at `plan.kill_at_s` SIGKILL the leader, probe for the first
    write after it, restart the node `restart_after_s` after the SIGKILL and
    wait until it is ready again."""
    try:
        # The leader is looked up ahead of the instant: under a spike it can
        # take a busy leader most of a second to answer /v1/cluster.
        if stop.wait(max(0.0, plan.kill_at_s - leader_lookup_ahead_s - time.time())):
            return
        node, plan.term = cluster.leader()
        plan.node = node.id
        if stop.wait(max(0.0, plan.kill_at_s - time.time())):
            return
        plan.killed_at_s = node.kill()
        probe: list[tuple[float, str] | None] = [None]
        others = [u for u in cluster.urls if u != node.url]
        prober = threading.Thread(
            target=lambda: probe.__setitem__(0, first_write(others, queue_name, time.monotonic() + probe_timeout_s)),
            daemon=True,
        )
        prober.start()
        stop.wait(max(0.0, plan.killed_at_s + plan.restart_after_s - time.time()))
        node.start()
        plan.restarted_at_s = time.time()
        cluster.wait_ready([node], restart_ready_timeout_s)
        plan.ready_again_at_s = time.time()
        prober.join(timeout=probe_timeout_s)
        if probe[0] is None:
            plan.error = f"no write succeeded within {probe_timeout_s:g} s of killing the leader"
        else:
            plan.first_write_at_s, by_url = probe[0]
            answered = cluster.by_url(by_url)
            plan.first_write_by = answered.id if answered else by_url
    except CannotRun as exc:
        plan.error = str(exc)
    finally:
        plan.done.set()


def _start_failover(opts: Options, cluster: Cluster | None, origin_s: float,
                    queue_name: str) -> tuple[Failover | None, threading.Event, threading.Thread | None]:
    stop = threading.Event()
    if opts.kill_leader_at_s is None:
        return None, stop, None
    assert cluster is not None and len(cluster.nodes) >= 3
    plan = Failover(kill_at_s=origin_s + opts.kill_leader_at_s, restart_after_s=opts.restart_after_s)
    thread = threading.Thread(target=_fail_over, args=(cluster, plan, queue_name, stop), daemon=True)
    thread.start()
    return plan, stop, thread


def _end_failover(plan: Failover | None, stop: threading.Event, thread: threading.Thread | None) -> None:
    """Waits for the kill-restart cycle to finish (a collect that ended early
    does not cut it short: the restarted node must be ready before the cluster
    stops); stops it only if it has not started yet."""
    if plan is None or thread is None:
        return
    if plan.killed_at_s is None and time.time() < plan.kill_at_s:
        stop.set()
    thread.join(timeout=probe_timeout_s + restart_ready_timeout_s + leader_lookup_timeout_s)
    if plan.killed_at_s is None and plan.error is None:
        plan.error = "the run ended before the leader was killed; give a smaller --kill-leader-at-s"


def failover_figures(plan: Failover, tally: Tally, origin_s: float) -> dict[str, Any]:
    """Seconds, all but `kill_at_s` (after the due instant) counted from the
    SIGKILL; the first claim and result are the first answers that arrived
    more than `dying_answer_window_s` after it."""
    killed = plan.killed_at_s

    def after(at_s: float | None) -> float | None:
        return None if at_s is None or killed is None else _r(at_s - killed)

    claims_after: list[float] = []
    results_after: list[float] = []
    if killed is not None:
        claims_after = [c.claimed_at_s for c in tally.claims if c.claimed_at_s > killed + dying_answer_window_s]
        results_after = [t for t in tally.reported_at_s.values() if t > killed + dying_answer_window_s]
    return {
        "node": plan.node,
        "term": plan.term,
        "kill_at_s": None if killed is None else _r(killed - origin_s),
        "first_write_s": after(plan.first_write_at_s),
        "first_write_by": plan.first_write_by,
        "first_claim_s": after(min(claims_after, default=None)),
        "first_result_s": after(min(results_after, default=None)),
        "restart_s": after(plan.restarted_at_s),
        "ready_again_s": after(plan.ready_again_at_s),
        "error": plan.error,
    }


# -- the command ---------------------------------------------------------------


class Say:
    """Progress: a self-rewriting line on a terminal, plain lines otherwise."""

    def __init__(self, live: bool):
        self.live = live
        self._width = 0

    def __call__(self, text: str, *, live: bool = False) -> None:
        if live and not self.live:
            return
        if live:
            sys.stdout.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self.end()
            sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def end(self) -> None:
        if self._width:
            sys.stdout.write("\n")
            self._width = 0


def _check(opts: Options) -> str | None:
    """Why these options cannot run, or None."""
    if opts.spawn and opts.spawn not in spawn_nodes_allowed:
        return f"--spawn: one of {', '.join(map(str, spawn_nodes_allowed))} nodes"
    if opts.kill_leader_at_s is not None:
        if opts.spawn < 3:
            return "--kill-leader-at-s needs a spawned cluster: --spawn 3"
        if opts.kill_leader_at_s < 0 or opts.restart_after_s < 0:
            return "--kill-leader-at-s and --restart-after-s: seconds ≥ 0"
    if opts.lease_s is not None and not 1 <= opts.lease_s <= limits.lease_s_max:
        return f"--lease-s: 1..{limits.lease_s_max}"
    if opts.work_dir is not None and not opts.spawn:
        return "--work-dir goes with --spawn"
    steady = opts.rate > 0 or opts.duration_s > 0
    if steady and opts.jobs:
        return "give either --jobs N (the spike) or --rate R --duration-s D (steady), not both"
    if steady and not (opts.rate > 0 and opts.duration_s > 0 and 1 <= steady_jobs(opts) <= steady_jobs_max):
        return f"steady mode needs --rate R > 0 and --duration-s D > 0, with R × D in 1..{steady_jobs_max}"
    if not steady and opts.jobs < 1:
        return "need --jobs ≥ 1 (the spike), or --rate R --duration-s D (steady)"
    if not 1 <= opts.batch <= limits.batch_jobs_max or opts.workers < 1:
        return f"need --workers ≥ 1 and --batch in 1..{limits.batch_jobs_max}"
    if opts.ca_file is not None:
        try:
            client_context(opts.ca_file)
        except TlsError as exc:
            return f"--ca-file: {exc}"
    return None


def _run_spike(opts: Options, queue_name: str, say: Any, cluster: Cluster | None) -> dict[str, Any]:
    due_s = round(time.time() + opts.due_in_s, 3)
    procs, out, stop = _start_workers(opts, queue_name)
    pauses_before = scrape_pauses(opts.urls, opts.ca_file)
    try:
        job_ids, create_s = _create(opts, queue_name, due_s, say)
    except CannotRun:
        for proc in procs:
            proc.kill()
        raise
    say(f"created {len(job_ids)} jobs in {create_s:.2f} s; due at {iso(due_s)}")
    tally = Tally()
    plan, plan_stop, killer = _start_failover(opts, cluster, due_s, queue_name)
    try:
        _collect(opts, out, job_ids, due_s, say, tally)
        _end_failover(plan, plan_stop, killer)
    finally:
        plan_stop.set()
        stop_workers(procs, out, stop, tally)
    fig = figures(opts, job_ids, create_s, due_s, tally)
    fig |= pause_figures(pauses_before, scrape_pauses(opts.urls, opts.ca_file))
    if plan is not None:
        fig["failover"] = failover_figures(plan, tally, due_s)
    return fig


def run(opts: Options) -> int:
    """The spike or the steady stream; returns the exit status (0, 1 lost/duplicated, 2 cannot run)."""
    say = Say(opts.progress and sys.stdout.isatty())
    problem = _check(opts)
    try:
        if problem is not None:
            raise CannotRun(problem)
        json_path, html_path = (None, "") if opts.no_report else report_paths(opts.report, time.time())
    except CannotRun as exc:
        print(f"tempo loadgen: {exc}", file=sys.stderr)
        return 2
    cluster: Cluster | None = None
    stopped: dict[str, int | None] = {}
    with tempfile.TemporaryDirectory(prefix="tempo-loadgen-") as tmp:
        try:
            if opts.spawn:
                root = opts.work_dir or tmp
                os.makedirs(root, exist_ok=True)
                cluster = Cluster(root, opts.spawn)
                opts.urls = list(cluster.urls)
                cluster.start()
            else:
                _wait_ready(opts.urls, opts.ca_file)
            say(f"server: {', '.join(opts.urls)}")
            queue_name = f"loadgen-{uuid.uuid4().hex[:12]}"
            steady = opts.rate > 0
            fig = (_run_steady if steady else _run_spike)(opts, queue_name, say, cluster)
            say.end()
        except CannotRun as exc:
            say.end()
            print(f"tempo loadgen: {exc}", file=sys.stderr)
            return 2
        finally:
            if cluster is not None:
                stopped = cluster.stop()
                _say_bad_exits(cluster, stopped)
    if cluster is not None:
        fig["nodes"] = len(cluster.nodes)
        fig["node_exit_status"] = stopped
    print(summary(fig))
    if json_path is not None:
        write_reports(fig, json_path, html_path)
        print(f"report: {json_path}, {html_path}, {chart_path(html_path)}")
    if fig["lost"] or fig["duplicated"]:
        return 1
    return 2 if fig.get("failover", {}).get("error") else 0


def _say_bad_exits(cluster: Cluster, stopped: dict[str, int | None]) -> None:
    """A node that did not exit 0 on SIGTERM (API.md: it should) is shown with its log's tail."""
    for node in cluster.nodes:
        if node.id in stopped and stopped[node.id] != 0:
            print(f"tempo loadgen: node {node.id} exited with status {stopped.get(node.id)} on SIGTERM; "
                  f"{node.log_path} ends:\n{node.log_tail()}", file=sys.stderr)
