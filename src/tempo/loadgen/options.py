"""What a `tempo loadgen` run is asked to do, and the failures that end it
with exit status 2."""

from dataclasses import dataclass

from tempo import limits
from tempo.net.tls import TlsError, client_context

spawn_nodes_allowed = (1, 3, 5)
restart_after_s_default = 3.0
kill_lease_s_default = 10
steady_jobs_max = 2_000_000
# Steady mode's first due time is this long after the workers start; each
# creation span is sent this long before its own first due time.
steady_lead_s = 4.0


class CannotRun(Exception):
    """Exit status 2: no server, creation failed or overran."""


class CreationOverran(CannotRun):
    """Creation was still going at the instant its jobs fall due."""


def first_failure(raised: BaseException) -> BaseException:
    """The first exception of a nursery's group (nested or not), or `raised`
    itself: the one a message names."""
    while isinstance(raised, BaseExceptionGroup):
        raised = raised.exceptions[0]
    return raised


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
    # False: the workers claim without claim keys, as a server from before
    # them needs (bench/compare.py against an old baseline).
    claim_keys: bool = True
    # Pre-dispatch (docs/semantics.md "Pre-dispatch"): the workers claim
    # runs due within this many ms, hold them and start each at its due
    # time; the report has start lateness at the workers beside claim lateness.
    ahead_ms: int = 0
    # The workers are the simplest client loop, over JSON: claim, report,
    # then claim again (loadgen/workers.py `_plain_process`).
    plain: bool = False

    def job_lease_s(self) -> int | None:
        """The `lease_s` the jobs get, or None for the server's default."""
        if self.lease_s is not None:
            return self.lease_s
        return kill_lease_s_default if self.kill_leader_at_s is not None else None

    def steady(self) -> bool:
        return self.rate > 0 or self.duration_s > 0

    def steady_jobs(self) -> int:
        return round(self.rate * self.duration_s)


def check(opts: Options) -> str | None:
    """Why these options cannot run, or None."""
    return _check_cluster(opts) or _check_load(opts) or _check_ca_file(opts)


def _check_cluster(opts: Options) -> str | None:
    """The servers: spawned, killed, and how long their leases run."""
    if opts.spawn and opts.spawn not in spawn_nodes_allowed:
        return f"--spawn: one of {', '.join(map(str, spawn_nodes_allowed))} nodes"
    if opts.kill_leader_at_s is not None:
        if opts.spawn < 3:
            return "--kill-leader-at-s needs a spawned cluster: --spawn 3"
        # Before the due instant too (pre-dispatch: runs held by workers
        # through the failover), but not before the jobs are created.
        if opts.kill_leader_at_s < -opts.due_in_s / 2 or opts.restart_after_s < 0:
            return "--kill-leader-at-s: seconds ≥ -(--due-in-s)/2; --restart-after-s: seconds ≥ 0"
    if not 0 <= opts.ahead_ms <= limits.claim_ahead_ms_max:
        return f"--ahead-ms: 0..{limits.claim_ahead_ms_max}"
    if opts.plain and opts.ahead_ms:
        return "--plain workers claim due runs only: not with --ahead-ms"
    if opts.lease_s is not None and not 1 <= opts.lease_s <= limits.lease_s_max:
        return f"--lease-s: 1..{limits.lease_s_max}"
    if opts.work_dir is not None and not opts.spawn:
        return "--work-dir goes with --spawn"
    return None


def _check_load(opts: Options) -> str | None:
    """The load: a spike or a steady stream, in batches, to workers."""
    if opts.steady() and opts.jobs:
        return "give either --jobs N (the spike) or --rate R --duration-s D (steady), not both"
    if opts.steady() and not (opts.rate > 0 and opts.duration_s > 0 and 1 <= opts.steady_jobs() <= steady_jobs_max):
        return f"steady mode needs --rate R > 0 and --duration-s D > 0, with R × D in 1..{steady_jobs_max}"
    if not opts.steady() and opts.jobs < 1:
        return "need --jobs ≥ 1 (the spike), or --rate R --duration-s D (steady)"
    if not 1 <= opts.batch <= limits.batch_jobs_max or opts.workers < 1:
        return f"need --workers ≥ 1 and --batch in 1..{limits.batch_jobs_max}"
    return None


def _check_ca_file(opts: Options) -> str | None:
    if opts.ca_file is not None:
        try:
            client_context(opts.ca_file)
        except TlsError as exc:
            return f"--ca-file: {exc}"
    return None
