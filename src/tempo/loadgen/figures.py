"""The numbers of a run, from what the workers reported (docs/operations.md "The load generator").

Lateness = the arrival of each run's first claim answer − the run's planned
time, its `nominal_at` plus the jitter its run ID gives it (`ids.jitter_ms`;
none without `--jitter-s`), i.e. the instant the job was created for. Not its
`due_at`: an expired lease resets that to the expiry, and a run whose first
claim died with a leader would look on time when its re-delivery comes.
`late_over_5s` counts the runs whose first claim came more than `late_bound_s`
after their planned time. drain = last claim − the due instant; runs/s =
claims / drain. A job is lost when none of its runs was claimed by
`due + timeout`; duplicated counts every extra hand-out of one (run ID,
attempt) plus every extra run ID of one job. Lateness is one figure per run;
the claims per second count every hand-out, re-deliveries too. Percentiles
are nearest-rank on the sorted sample, the same formula as
the first spike measurements, so the two agree.

Steady mode: a job is lost when none of its runs was claimed within
`--timeout-s` of its own planned time; drain is last claim − last due time;
runs/s = claims / (last claim − first due time); the per-second series counts
from the first due time.
"""

import math
import os
import ssl
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import httpx

from tempo import ids
from tempo.loadgen.failover import Failover
from tempo.loadgen.options import Options, steady_lead_s
from tempo.net.tls import client_context

# The report: JSON-able figures, as written to the report file.
Figures = dict[str, Any]
# One worker message: ("claims", rows) | ("results", run IDs, UNIX time) | ("done", counts).
Message = tuple[Any, ...]

due_cache_entries_max = 100_000
# A run whose first claim came more than this long after its planned time is
# counted in `late_over_5s`.
late_bound_s = 5.0
# Answers that arrive this soon after the SIGKILL were written by the dying
# leader (loopback delivers in well under a millisecond; no follower even
# starts an election within its 1 s election timeout), so they do not count
# as the first claim or result after it.
dying_answer_window_s = 0.1
# A SIGKILL later than asked by more than this is said in the report: the
# leader is looked up a second ahead, and a busy leader can answer late.
kill_late_bound_s = 0.1
# The charts' histogram of claims: the span from the first claim to the last
# gets at least `chart_bins_min` bins of a round width (1, 2 or 5 × 10^k s),
# no narrower than `chart_bin_s_min` (a claim's arrival is timed to the
# millisecond or so); so 40 to 100 bins, whether the drain took 0.3 s or 60.
chart_bins_min = 40
chart_bin_s_min = 0.001
# The lateness CDF keeps at most this many points of the sorted sample.
cdf_points_max = 1000
scrape_timeout_s = 5.0


@dataclass
class Claim:
    """One run handed to a worker: UNIX times of the run's `due_at` as this
    claim reported it, of the claim answer's arrival, and of the run's planned
    time (`nominal_at` plus its jitter), which no re-delivery moves."""

    run_id: str
    job_id: str
    attempt: int
    due_at_s: float
    claimed_at_s: float
    planned_s: float


@dataclass
class Tally:
    claims: list[Claim] = field(default_factory=list)
    reported_at_s: dict[str, float] = field(default_factory=dict)
    worker_counts: dict[str, int] = field(default_factory=dict)
    workers_done: int = 0
    due_cache: dict[str, float] = field(default_factory=dict)
    # The jobs' `jitter_s`: a run's planned time is its nominal time plus the
    # jitter its run ID gives it.
    jitter_s: int = 0
    # Pre-dispatch: (run ID, start lateness at the worker in s) of each start.
    starts: list[tuple[str, float]] = field(default_factory=list)


def parse_time_s(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def iso(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def pct(values: list[float], p: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _due_s(tally: Tally, text: str) -> float:
    at_s = tally.due_cache.get(text)
    if at_s is None:
        if len(tally.due_cache) >= due_cache_entries_max:
            tally.due_cache.clear()
        at_s = tally.due_cache[text] = parse_time_s(text)
    return at_s


def take(tally: Tally, message: Message) -> None:
    """One worker message into the tally."""
    kind = message[0]
    if kind == "claims":
        # Times are parsed once per distinct string, so the spike's single due
        # instant costs one parse; the parent's CPU is the server's too.
        tally.claims += [
            Claim(r, j, a, _due_s(tally, d), t, _due_s(tally, n) + ids.jitter_ms(r, tally.jitter_s) / 1000)
            for r, j, a, d, n, t in message[1]
        ]
    elif kind == "starts":
        tally.starts += message[1]
    elif kind == "results":
        for run_id in message[1]:
            tally.reported_at_s.setdefault(run_id, message[2])
    else:
        tally.workers_done += 1
        for k, v in message[1].items():
            tally.worker_counts[k] = tally.worker_counts.get(k, 0) + v


# -- the run's figures -----------------------------------------------------------


def tempo_version() -> str:
    try:
        return metadata.version("tempo")
    except metadata.PackageNotFoundError:  # run from a source tree not installed
        return "0+unknown"


def command_line(opts: Options) -> str:
    """The `tempo loadgen` command that repeats this run, defaults spelled out."""
    words = ["tempo", "loadgen", *(["--spawn", str(opts.spawn)] if opts.spawn else ["--url", ",".join(opts.urls)])]
    if opts.steady():
        words += ["--rate", f"{opts.rate:g}", "--duration-s", f"{opts.duration_s:g}"]
    else:
        words += ["--jobs", str(opts.jobs), "--due-in-s", f"{opts.due_in_s:g}"]
    words += ["--workers", str(opts.workers), "--batch", str(opts.batch), "--timeout-s", f"{opts.timeout_s:g}"]
    if opts.jitter_s:
        words += ["--jitter-s", str(opts.jitter_s)]
    if opts.kill_leader_at_s is not None:
        words += ["--kill-leader-at-s", f"{opts.kill_leader_at_s:g}", "--restart-after-s", f"{opts.restart_after_s:g}"]
    if opts.lease_s is not None:
        words += ["--lease-s", str(opts.lease_s)]
    if opts.ahead_ms:
        words += ["--ahead-ms", str(opts.ahead_ms)]
    if opts.plain:
        words += ["--plain"]
    return " ".join(words)


def about_run(opts: Options, started_s: float) -> Figures:
    """What a reader of the report needs to weigh its figures: when it ran,
    which tempo, with which parameters, on how many CPUs how busy."""
    try:
        load_1m: float | None = round(os.getloadavg()[0], 2)
    except OSError:  # no load average on this OS
        load_1m = None
    return {
        "started_at": iso(started_s),
        "tempo_version": tempo_version(),
        "command": command_line(opts),
        "parameters": {
            "spawn": opts.spawn, "jobs": opts.jobs, "rate": opts.rate, "duration_s": opts.duration_s,
            "due_in_s": opts.due_in_s, "workers": opts.workers, "batch": opts.batch, "jitter_s": opts.jitter_s,
            "timeout_s": opts.timeout_s, "lease_s": opts.job_lease_s(), "kill_leader_at_s": opts.kill_leader_at_s,
            "restart_after_s": opts.restart_after_s, "ahead_ms": opts.ahead_ms, "plain": opts.plain,
        },
        "host": {"cpus": os.cpu_count(), "load_1m": load_1m},
    }



def figures(opts: Options, job_ids: list[str], create_s: float, due_s: float, tally: Tally,
            *, last_due_s: float | None = None) -> Figures:
    """The report. `due_s` is the spike's due instant, or steady mode's first due
    time (with `last_due_s` its last): the origin of the per-second series."""
    steady = last_due_s is not None
    if steady:
        in_time = [c for c in tally.claims if c.claimed_at_s - c.planned_s <= opts.timeout_s]
    else:
        in_time = [c for c in tally.claims if c.claimed_at_s <= due_s + opts.timeout_s]
    wanted = set(job_ids)
    claimed_jobs = {c.job_id for c in in_time} & wanted
    pairs = [(c.run_id, c.attempt) for c in tally.claims]
    runs_of_job: dict[str, set[str]] = {}
    for c in tally.claims:
        runs_of_job.setdefault(c.job_id, set()).add(c.run_id)
    duplicated = (len(pairs) - len(set(pairs))) + sum(len(r) - 1 for r in runs_of_job.values())
    firsts = first_claims(tally.claims)
    lateness = [c.claimed_at_s - c.planned_s for c in firsts]
    last_claim_s = max((c.claimed_at_s for c in tally.claims), default=None)
    # Spike: drain is from the due instant; steady: from the last due time.
    drain_s = None if last_claim_s is None else last_claim_s - (last_due_s if last_due_s is not None else due_s)
    claiming_s = None if last_claim_s is None else last_claim_s - due_s
    first_claim: dict[str, float] = {}
    for c in tally.claims:
        first_claim.setdefault(c.run_id, c.claimed_at_s)
    result_lag = [t - first_claim[r] for r, t in tally.reported_at_s.items() if r in first_claim]
    counts = tally.worker_counts
    fig: Figures = {
        "mode": "steady" if steady else "spike",
        "jobs": opts.steady_jobs() if steady else opts.jobs,
        "created": len(job_ids),
        "create_s": round(create_s, 3),
        "created_per_s": round(len(job_ids) / create_s) if create_s > 0 else None,
        "claimed": len(tally.claims),
        "lateness_p50_s": rounded(pct(lateness, 50)),
        "lateness_p90_s": rounded(pct(lateness, 90)),
        "lateness_p99_s": rounded(pct(lateness, 99)),
        "lateness_max_s": rounded(max(lateness, default=None)),
        "late_over_5s": sum(1 for late_s in lateness if late_s > late_bound_s),
        "drain_s": rounded(drain_s),
        "runs_per_s": round(len(tally.claims) / claiming_s) if claiming_s and claiming_s > 0 else None,
        "result_lag_p99_s": rounded(pct(result_lag, 99)),
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
        "series": per_bin(tally.claims, due_s),
        "lateness_cdf": lateness_cdf(lateness),
    }
    fig |= chart_bins(tally.claims, due_s)
    if opts.ahead_ms:
        fig |= start_figures(tally.starts)
    if steady:
        fig |= {"rate": opts.rate, "duration_s": opts.duration_s}
    return fig


def start_figures(starts: list[tuple[str, float]]) -> Figures:
    """Pre-dispatch: how late after its `due_at` each run started at its
    worker (the first start of each run), and the runs started twice."""
    first: dict[str, float] = {}
    for run_id, late_s in starts:
        first.setdefault(run_id, late_s)
    late = list(first.values())
    return {
        "started": len(first), "start_duplicated": len(starts) - len(first),
        "start_lateness_p50_s": rounded(pct(late, 50)), "start_lateness_p90_s": rounded(pct(late, 90)),
        "start_lateness_p99_s": rounded(pct(late, 99)), "start_lateness_max_s": rounded(max(late, default=None)),
        "start_early": sum(1 for late_s in late if late_s < 0),
    }


def first_claims(claims: list[Claim]) -> list[Claim]:
    """The earliest claim of each run (the one that counts for lateness)."""
    first: dict[str, Claim] = {}
    for c in claims:
        seen = first.get(c.run_id)
        if seen is None or c.claimed_at_s < seen.claimed_at_s:
            first[c.run_id] = c
    return list(first.values())


def per_bin(claims: list[Claim], origin_s: float, bin_s: float = 1.0) -> list[dict[str, Any]]:
    """Claims per `bin_s` of claim time after `origin_s` (whole seconds by
    default), every hand-out counted, and the lateness of the runs whose
    first claim fell in that bin; `t_s` is the start of each bin."""

    def bin_of(c: Claim) -> int:
        return math.floor((c.claimed_at_s - origin_s) / bin_s)

    counts: dict[int, int] = {}
    for c in claims:
        counts[bin_of(c)] = counts.get(bin_of(c), 0) + 1
    late: dict[int, list[float]] = {}
    for c in first_claims(claims):
        late.setdefault(bin_of(c), []).append(c.claimed_at_s - c.planned_s)
    # Bins without claims between the first and the last are there with 0
    # claims and no lateness, so a chart shows a stall as a stall.
    return [
        {"t_s": round(k * bin_s, 6) if bin_s != 1.0 else k, "claims": counts.get(k, 0),
         "lateness_p50_s": rounded(pct(xs, 50)), "lateness_p90_s": rounded(pct(xs, 90)),
         "lateness_p99_s": rounded(pct(xs, 99)), "lateness_max_s": rounded(max(xs, default=None))}
        for k in range(min(counts, default=0), max(counts, default=-1) + 1)
        for xs in [late.get(k, [])]
    ]


def chart_bin_s(span_s: float) -> float:
    """The widest round bin (1, 2 or 5 × 10^k s) that cuts `span_s` into at
    least `chart_bins_min` bins, and no narrower than `chart_bin_s_min`."""
    wanted_s = span_s / chart_bins_min
    if wanted_s <= chart_bin_s_min:
        return chart_bin_s_min
    magnitude_s = 10.0 ** math.floor(math.log10(wanted_s))
    width_s = max(m * magnitude_s for m in (1, 2, 5) if m * magnitude_s <= wanted_s * (1 + 1e-9))
    assert span_s / width_s >= chart_bins_min * (1 - 1e-9)
    return float(f"{width_s:.6g}")


def chart_bins(claims: list[Claim], origin_s: float) -> Figures:
    """The charts' histogram: `bins` of `bin_s` each (`chart_bin_s` of the
    span from the first claim to the last), counted from `origin_s`."""
    times_s = [c.claimed_at_s for c in claims]
    bin_s = chart_bin_s(max(times_s, default=0.0) - min(times_s, default=0.0))
    return {"bin_s": bin_s, "bins": per_bin(claims, origin_s, bin_s)}


def lateness_cdf(lateness: list[float]) -> list[list[float]]:
    """The empirical CDF of the runs' lateness, as [lateness_s, share of runs
    at most that late] pairs: every point of a sample of up to
    `cdf_points_max` runs, evenly spaced ranks of a larger one, the largest
    always last (share 1.0)."""
    ordered = sorted(lateness)
    n = len(ordered)
    points = min(n, cdf_points_max)
    cdf: list[list[float]] = []
    for k in range(1, points + 1):
        rank = math.ceil(k * n / points)  # 1-based: the share of runs at most this late is rank / n
        cdf.append([round(ordered[rank - 1], 4), round(rank / n, 6)])
    return cdf


def failover_figures(plan: Failover, tally: Tally, origin_s: float) -> Figures:
    """Seconds, all but `kill_at_s` (after the due instant) counted from the
    SIGKILL; the first claim and result are the first answers that arrived
    more than `dying_answer_window_s` after it."""
    killed = plan.killed_at_s

    def after(at_s: float | None) -> float | None:
        return None if at_s is None or killed is None else rounded(at_s - killed)

    claims_after: list[float] = []
    results_after: list[float] = []
    if killed is not None:
        claims_after = [c.claimed_at_s for c in tally.claims if c.claimed_at_s > killed + dying_answer_window_s]
        results_after = [t for t in tally.reported_at_s.values() if t > killed + dying_answer_window_s]
    return {
        "node": plan.node,
        "term": plan.term,
        "kill_at_s": None if killed is None else rounded(killed - origin_s),
        "first_write_s": after(plan.first_write_at_s),
        "first_write_by": plan.first_write_by,
        "first_claim_s": after(min(claims_after, default=None)),
        "first_result_s": after(min(results_after, default=None)),
        "restart_s": after(plan.restarted_at_s),
        "ready_again_s": after(plan.ready_again_at_s),
        "error": plan.error,
        **kill_timing(plan, tally, origin_s),
    }


def kill_timing(plan: Failover, tally: Tally, origin_s: float) -> Figures:
    """Whether the SIGKILL came when asked and while runs were still being
    claimed. A kill after the last claim tested nothing of the load (a
    5,000-run spike drains in a fraction of a second, before
    `--kill-leader-at-s 1`); the report says so rather than nothing.
    With pre-dispatch, runs held through the kill start after it: the
    last start (the due instant plus its lateness) counts as a claim."""
    killed = plan.killed_at_s
    last_s = max((c.claimed_at_s for c in tally.claims), default=None)
    if tally.starts and last_s is not None:
        last_s = max(last_s, origin_s + max(late_s for _, late_s in tally.starts))
    drained = None if killed is None or last_s is None or last_s >= killed else rounded(killed - last_s)
    late = None if killed is None else rounded(killed - plan.kill_at_s)
    warnings = []
    if drained is not None and last_s is not None and killed is not None:
        warnings.append(
            f"the load had drained {drained:.2f} s before the SIGKILL (last claim or start at {last_s - origin_s:+.2f} s, "
            f"the SIGKILL at {killed - origin_s:+.2f} s): the failover tested nothing of it; give a "
            f"--kill-leader-at-s below {last_s - origin_s:.2f}, or more jobs")
    if late is not None and late > kill_late_bound_s:
        warnings.append(f"the SIGKILL came {late:.2f} s later than asked (at {plan.kill_at_s - origin_s:+.2f} s)")
    return {"kill_late_s": late, "drained_before_kill_s": drained, "warnings": warnings}


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
    scraped: dict[str, Pauses] = {}
    verify: ssl.SSLContext | bool = True if ca_file is None else client_context(ca_file)
    with httpx.Client(timeout=scrape_timeout_s, verify=verify) as client:
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


def pause_figures(before: dict[str, Pauses], after: dict[str, Pauses]) -> Figures:
    """Event-loop lag p99 and max and GC pauses between two scrapes, the
    worst over the nodes (docs/operations.md "Event-loop lag")."""
    lag_p99s: list[float] = []
    lag_maxes: list[float] = []
    gc_maxes = [0.0]
    gcs = 0
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
        "loop_lag_p99_s": rounded(max(lag_p99s)),
        "loop_lag_max_s": rounded(max(lag_maxes)),
        "gc_pause_max_s": rounded(max(gc_maxes)),
        "gc_pauses": gcs,
    }
