"""One `tempo loadgen` run, phase by phase:

1. (`--spawn 1`) start a `tempo serve` on a free loopback port in a temp dir;
   (`--spawn 3`) start a 3-node cluster the same way (`spawn.Cluster`) and
   wait until every node is ready. Given `--url`s, wait until one is ready.
2. Start W worker processes (`workers.py`).
3. Create N jobs due at `start + D` (`create.py`). Creation that is still
   going at the due instant is an overrun: exit 2.
4. Wait until every created job has a claimed run, or `--timeout-s` past the
   due instant, then 2 s more so a late duplicate claim shows up (as
   the first spike measurements did), and stop the workers.
5. Print the summary, write the report files (`report.py`) and stop the
   nodes it started with SIGTERM.

Steady mode (`--rate R --duration-s D`) creates R × D jobs while it collects;
`--kill-leader-at-s` runs `failover.py` beside either.
"""

import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from multiprocessing.queues import Queue

import httpx

from tempo.loadgen import failover
from tempo.loadgen.create import Stream, create_spike, create_stream, steady_due_s
from tempo.loadgen.figures import (
    Claim,
    Figures,
    Message,
    Pauses,
    Tally,
    about_run,
    failover_figures,
    figures,
    iso,
    pause_figures,
    scrape_pauses,
)
from tempo.loadgen.options import CannotRun, Options, check, steady_lead_s
from tempo.loadgen.report import chart_path, charts_hint, report_paths, summary, write_reports
from tempo.loadgen.spawn import Cluster, SpawnError
from tempo.loadgen.workers import kill_workers, receive, start_workers, stop_workers
from tempo.net.tls import certificate_refused, client_context

# A spawned server gets time to start; a given URL should already answer.
spawn_ready_timeout_s = 30.0
url_ready_timeout_s = 5.0
url_probe_timeout_s = 1.0
url_poll_gap_s = 0.1
duplicate_window_s = 2.0
progress_every_s = 1.0
steady_stop_timeout_s = 10.0


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


def wait_for_urls(urls: list[str], ca_file: str | None = None) -> None:
    """A given URL: any one of them answering /readyz 200 will do."""
    deadline_s = time.monotonic() + url_ready_timeout_s
    verify = client_context(ca_file)
    while time.monotonic() < deadline_s:
        for url in urls:
            try:
                if httpx.get(url + "/readyz", timeout=url_probe_timeout_s, verify=verify).status_code == 200:
                    return
            except httpx.HTTPError as exc:
                if certificate_refused(exc):
                    raise CannotRun(f"{url}: certificate refused ({exc}); is --ca-file the CA that signed it?") from None
        time.sleep(url_poll_gap_s)
    raise CannotRun(f"no server answered /readyz at {', '.join(urls)} within {url_ready_timeout_s:g} s")


def _receive(out: "Queue[Message]", tally: Tally, seen: set[str], counts: Callable[[Claim], bool]) -> None:
    """One worker message into the tally; the jobs of its claims for which
    `counts` holds are seen (not lost)."""
    before = len(tally.claims)
    receive(out, tally)
    seen.update(c.job_id for c in tally.claims[before:] if counts(c))


def collect(opts: Options, out: "Queue[Message]", job_ids: list[str], due_s: float, say: Say, tally: Tally) -> None:
    """Takes the workers' messages until every job was claimed (or the
    deadline passed), and `duplicate_window_s` more. With pre-dispatch
    (`--ahead-ms`) the runs start at the due instant, after their claims:
    the window counts from the due instant at the earliest, so a
    `--kill-leader-at-s` before it still comes while runs are held."""
    wanted = set(job_ids)
    seen: set[str] = set()
    deadline_s = due_s + opts.timeout_s
    next_say_s = 0.0
    quiet_until_s: float | None = None
    while True:
        now_s = time.time()
        if quiet_until_s is None and (len(seen) >= len(wanted) or now_s > deadline_s):
            quiet_until_s = min(now_s, deadline_s) + duplicate_window_s
            if opts.ahead_ms:
                quiet_until_s = max(quiet_until_s, due_s + duplicate_window_s)
        if quiet_until_s is not None and now_s > quiet_until_s:
            return
        _receive(out, tally, seen, lambda c: c.claimed_at_s <= deadline_s)
        if now_s >= next_say_s:
            next_say_s = now_s + progress_every_s
            phase = f"due in {due_s - now_s:.1f} s" if now_s < due_s else f"+{now_s - due_s:.1f} s"
            say(f"claimed: {len(seen & wanted)}/{len(wanted)} jobs ({phase})", live=True)


def collect_stream(opts: Options, out: "Queue[Message]", stream: Stream, first_due_s: float, say: Say,
                   tally: Tally) -> None:
    """Like `collect`, but the wanted set grows while jobs are created, and a
    job counts as claimed when its claim came within `--timeout-s` of its own due time."""
    last_due_s = steady_due_s(first_due_s, opts.rate, opts.steady_jobs() - 1)
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
        _receive(out, tally, seen, lambda c: c.claimed_at_s - c.planned_s <= opts.timeout_s)
        if now_s >= next_say_s:
            next_say_s = now_s + progress_every_s
            phase = f"first due in {first_due_s - now_s:.1f} s" if now_s < first_due_s else f"+{now_s - first_due_s:.1f} s"
            say(f"created: {len(stream.job_ids)}/{opts.steady_jobs()}, claimed: {len(seen)} ({phase})", live=True)


def run_spike(opts: Options, queue_name: str, say: Say, cluster: Cluster | None) -> Figures:
    due_s = round(time.time() + opts.due_in_s, 3)
    procs, out, stop = start_workers(opts.urls, queue_name, opts.workers, opts.ca_file, opts.claim_keys, opts.ahead_ms, opts.plain)
    pauses_before = scrape_pauses(opts.urls, opts.ca_file)
    try:
        job_ids, create_s = create_spike(opts, queue_name, due_s, say)
    except CannotRun:
        kill_workers(procs)
        raise
    say(f"created {len(job_ids)} jobs in {create_s:.2f} s; due at {iso(due_s)}")
    tally = Tally(jitter_s=opts.jitter_s)
    try:
        plan = _beside_failover(opts, cluster, due_s, queue_name,
                                lambda: collect(opts, out, job_ids, due_s, say, tally))
    finally:
        stop_workers(procs, out, stop, tally)
    fig = figures(opts, job_ids, create_s, due_s, tally)
    return _add_pauses_and_failover(fig, opts, pauses_before, plan, tally, due_s)


def run_steady(opts: Options, queue_name: str, say: Say, cluster: Cluster | None) -> Figures:
    procs, out, stop = start_workers(opts.urls, queue_name, opts.workers, opts.ca_file, opts.claim_keys, opts.ahead_ms, opts.plain)
    pauses_before = scrape_pauses(opts.urls, opts.ca_file)
    first_due_s = round(time.time() + steady_lead_s, 3)
    say(f"steady: {opts.rate:g} runs/s for {opts.duration_s:g} s ({opts.steady_jobs()} jobs) from {iso(first_due_s)}")
    stream = Stream()
    creator = threading.Thread(target=create_stream, args=(opts, queue_name, first_due_s, stream), daemon=True)
    creator.start()
    tally = Tally(jitter_s=opts.jitter_s)
    try:
        plan = _beside_failover(opts, cluster, first_due_s, queue_name,
                                lambda: collect_stream(opts, out, stream, first_due_s, say, tally))
    finally:
        stream.stop.set()
        creator.join(timeout=steady_stop_timeout_s)
        stop_workers(procs, out, stop, tally)
    if stream.error is not None:
        raise CannotRun(stream.error)
    last_due_s = steady_due_s(first_due_s, opts.rate, opts.steady_jobs() - 1)
    fig = figures(opts, list(stream.job_ids), stream.create_s, first_due_s, tally, last_due_s=last_due_s)
    return _add_pauses_and_failover(fig, opts, pauses_before, plan, tally, first_due_s)


def _beside_failover(opts: Options, cluster: Cluster | None, origin_s: float, queue_name: str,
                     collect_all: Callable[[], None]) -> failover.Failover | None:
    """Runs `collect_all` while the leader is killed and restarted, when
    `--kill-leader-at-s` asks for it; what the failover did, or None."""
    plan, plan_stop, killer = failover.start_failover(opts, cluster, origin_s, queue_name)
    try:
        collect_all()
        failover.end_failover(plan, plan_stop, killer)
    finally:
        plan_stop.set()
    return plan


def _add_pauses_and_failover(fig: Figures, opts: Options, pauses_before: dict[str, Pauses],
                             plan: failover.Failover | None, tally: Tally, origin_s: float) -> Figures:
    fig |= pause_figures(pauses_before, scrape_pauses(opts.urls, opts.ca_file))
    if plan is not None:
        fig["failover"] = failover_figures(plan, tally, origin_s)
    return fig


def run(opts: Options) -> int:
    """The spike or the steady stream; returns the exit status (0, 1 lost/duplicated, 2 cannot run)."""
    say = Say(opts.progress and sys.stdout.isatty())
    started_s = time.time()
    problem = check(opts)
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
                cluster = Cluster(opts.work_dir or tmp, opts.spawn)
                opts.urls = list(cluster.urls)
                _start(cluster)
            else:
                wait_for_urls(opts.urls, opts.ca_file)
            say(f"server: {', '.join(opts.urls)}")
            queue_name = f"loadgen-{uuid.uuid4().hex[:12]}"
            fig = (run_steady if opts.steady() else run_spike)(opts, queue_name, say, cluster)
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
    fig |= about_run(opts, started_s)
    print(summary(fig))
    _warn(fig)
    if json_path is not None:
        written = write_reports(fig, json_path, html_path)
        print(f"report: {', '.join(written)}")
        if chart_path(html_path) not in written:
            print(f"charts: not drawn, matplotlib is missing. {charts_hint}")
    if fig["lost"] or fig["duplicated"]:
        return 1
    return 2 if fig.get("failover", {}).get("error") else 0


def _warn(fig: Figures) -> None:
    """The report's warnings on stderr too: a figure that measured less than
    asked (a SIGKILL after the load drained) must not pass unseen."""
    for warning in fig.get("failover", {}).get("warnings", []):
        print(f"tempo loadgen: warning: {warning}", file=sys.stderr)


def _start(cluster: Cluster) -> None:
    try:
        cluster.start(spawn_ready_timeout_s)
    except SpawnError as exc:
        raise CannotRun(str(exc)) from None


def _say_bad_exits(cluster: Cluster, stopped: dict[str, int | None]) -> None:
    """A node that did not exit 0 on SIGTERM (docs/operations.md "Stopping": it should) is shown with its log's tail."""
    for node in cluster.nodes:
        if node.id in stopped and stopped[node.id] != 0:
            print(f"tempo loadgen: node {node.id} exited with status {stopped.get(node.id)} on SIGTERM; "
                  f"{node.log_path} ends:\n{node.log_tail()}", file=sys.stderr)
