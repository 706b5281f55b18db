"""The API's views of the engine's records: what `tempo.schema`'s response
structs hold, built from `engine/records.py`'s `Job` and `Run`. The engine
answers with records; only net/ turns them into the shapes of docs/api.md.
"""

import functools
from typing import Any

import msgspec

from tempo import clock, ids, schedule
from tempo.engine import (
    CalendarUse,
    Catchup,
    Cause,
    DepState,
    Job,
    JobOutcome,
    MissedReason,
    Occurrence,
    Paused,
    Run,
    RunStatus,
    Schedule,
    SkippedReason,
)
from tempo.schema import (
    AfterOut,
    AttemptOut,
    CatchupOut,
    CauseOut,
    ClaimedRunOut,
    DependentsOut,
    DstOut,
    JobOut,
    LastRunOut,
    NotifyOut,
    OccurrenceOut,
    PausedByOut,
    PausedOut,
    RequiresOut,
    RetryOut,
    RunCountsOut,
    RunDetailOut,
    RunOut,
    ScheduleOut,
)


def schedule_view(sched: Schedule) -> ScheduleOut:
    return ScheduleOut(
        at=clock.iso_or_none(sched.at_ms),
        cron=sched.cron,
        timezone=sched.timezone,
        every_s=sched.every_s,
        start_at=clock.iso_or_none(sched.start_at_ms),
        end_at=clock.iso_or_none(sched.end_at_ms),
        max_runs=sched.max_runs,
        # Only a policy other than the default is shown, so the schedules
        # of clients that never name one read as they always did.
        dst=None if (sched.dst_gap, sched.dst_repeat) == ("shift", "first") else _dst_view(sched.dst_gap, sched.dst_repeat),
    )


@functools.lru_cache(maxsize=8)
def _dst_view(gap: schedule.DstGap, repeat: schedule.DstRepeat) -> DstOut:
    return DstOut(gap, repeat)


def occurrence_views(found: list[Occurrence], timezone: str) -> list[OccurrenceOut]:
    """Preview times with their wall clock in `timezone` (docs/api.md)."""
    views = []
    for at_ms, mark in found:
        offset_s = schedule.utc_offset_s(timezone, at_ms)
        views.append(OccurrenceOut(
            clock.iso_from_ms(at_ms), clock.local_iso_from_ms(at_ms + offset_s * 1000),
            clock.offset_text(offset_s), mark,
        ))
    return views


def job_view(
    job: Job, shared: dict[Any, Any] | None = None, outcome: JobOutcome | None = None,
    calendar: CalendarUse | None = None,
    next_run_ms: int | msgspec.UnsetType | None = msgspec.UNSET,
) -> JobOut:
    """`shared` lets the views of one response share the parts their jobs
    share (a batch's items mostly have one schedule and one retry policy).
    `outcome`: what its runs came to (None: no run has ended).
    `next_run_ms`: `next_run_at` as its calendar places it (unset: the
    job's own, the due time of its waiting slot run)."""
    if next_run_ms is msgspec.UNSET:
        next_run_ms = job.next_run_at_ms
    if shared is None:
        sched_out = schedule_view(job.schedule)
        retry_out = RetryOut(job.max_attempts, list(job.backoff_s))
    else:
        known_sched: ScheduleOut | None = shared.get(job.schedule)
        if known_sched is None:
            known_sched = shared[job.schedule] = schedule_view(job.schedule)
        sched_out = known_sched
        retry_key = (job.max_attempts, job.backoff_s)
        known_retry: RetryOut | None = shared.get(retry_key)
        if known_retry is None:
            known_retry = shared[retry_key] = RetryOut(job.max_attempts, list(job.backoff_s))
        retry_out = known_retry
    if calendar is not None:  # docs/semantics.md "Calendars": kept apart from the job's record
        sched_out = msgspec.structs.replace(sched_out, calendar=calendar.name, on_excluded=calendar.on_excluded)
    # Positional, in JobOut's field order: a batch reply makes 1,000.
    return JobOut(
        job.id,
        job.name,
        job.owner,
        job.target,
        job.payload,
        sched_out,
        retry_out,
        job.lease_s,
        job.jitter_s,
        job.state,
        clock.iso_from_ms(job.created_at_ms),
        None if next_run_ms is None else clock.iso_from_ms(next_run_ms),
        None if job.notify is None else NotifyOut(job.notify.url, list(job.notify.events)),
        *_outcome_fields(job, outcome),
        None if job.catchup is None else _catchup_view(job.catchup),
        version=job.version,
        labels=job.labels or {},
        timeout_s=job.timeout_s,
        paused=None if job.paused is None else _paused_view(job.paused),
        runs_left=None if job.schedule.max_runs is None else max(0, job.schedule.max_runs - job.runs_done),
        overlap=job.overlap or "allow",
    )


def with_deps(out: JobOut, found: tuple[DepState | None, list[str], int] | None) -> JobOut:
    """The job's view with its edges (`schedule.after`) and dependents
    (docs/semantics.md "Dependencies"); `found` as `Store.deps_views`
    answers it, None for a job with neither. The schedule's view may be
    shared by a page's jobs: it is copied, not changed."""
    if found is None:
        return out
    edges, dependents, count = found
    if edges is not None and edges.after is not None:
        after = edges.after
        out.schedule = msgspec.structs.replace(
            out.schedule, after=AfterOut(list(after.jobs), after.on, after.all, after.within_s)
        )
    if edges is not None and edges.requires is not None:
        gate = edges.requires
        out.schedule = msgspec.structs.replace(
            out.schedule, requires=RequiresOut(list(gate.jobs), gate.on, gate.within_s, gate.wait_s)
        )
    out.dependents = DependentsOut(dependents, count)
    return out


def cause_views(causes: list[Cause]) -> list[CauseOut]:
    return [CauseOut(c.job_id, ids.run_id(c.job_id, c.nominal_ms), c.attempt, c.status) for c in causes]


def _paused_view(paused: Paused) -> PausedOut:
    return PausedOut(clock.iso_from_ms(paused.at_ms), PausedByOut(paused.by_owner, paused.by_role), paused.note)


def _outcome_fields(job: Job, outcome: JobOutcome | None) -> tuple[LastRunOut | None, RunCountsOut]:
    if outcome is None:
        return None, RunCountsOut()
    last = None
    if outcome.last_status is not None and outcome.last_nominal_ms is not None:
        last = LastRunOut(
            ids.run_id(job.id, outcome.last_nominal_ms),
            outcome.last_status,
            outcome.last_attempt,
            clock.iso_or_none(outcome.last_finished_ms),
            outcome.last_error,
        )
    return last, RunCountsOut(outcome.done, outcome.failed, outcome.cancelled, outcome.skipped)


def run_detail_view(run: Run, view: RunOut) -> RunDetailOut:
    """`view` (the run as `run_view` shows it) with every attempt: the
    ended ones the run keeps, and the one a worker holds now."""
    first = run.attempt - len(run.attempts) - (1 if run.status == "claimed" else 0) + 1
    attempts = [
        AttemptOut(first + i, clock.iso_or_none(a.claimed_ms), a.worker, clock.iso_from_ms(a.ended_ms), a.ok,
                   a.output, a.error)
        for i, a in enumerate(run.attempts)
    ]
    if run.status == "claimed":
        attempts.append(AttemptOut(run.attempt, clock.iso_or_none(run.started_ms), run.worker, None, None, None, None))
    detail = RunDetailOut(*_run_fields(run), **_stop_fields(run), attempts=attempts)
    detail.lease_expires_at = view.lease_expires_at  # as heartbeats extended it
    return detail


@functools.lru_cache(maxsize=64)
def _catchup_view(catchup: Catchup) -> CatchupOut:
    return CatchupOut(catchup.window_s, catchup.policy, catchup.max_runs)


# RunOut's fields: run ID, job ID, nominal and due time, status, attempt,
# worker, lease expiry, start, finish, output, error, backfill; a missed
# row's reason, first slot, first slot after and count.
_RunFields = tuple[
    str, str, str, str, RunStatus, int, str | None, str | None, str | None, str | None, str | None, str | None,
    bool, MissedReason | SkippedReason | None, str | None, str | None, int | None,
]


def _run_fields(run: Run) -> _RunFields:
    """A run's API fields, in `RunOut`'s order (`ClaimedRunOut` extends it)."""
    return (
        ids.run_id(run.job_id, run.nominal_ms),
        run.job_id,
        clock.iso_from_ms(run.nominal_ms),
        clock.iso_from_ms(run.due_ms),
        run.status,
        run.attempt,
        run.worker,
        clock.iso_or_none(run.lease_expires_ms),
        clock.iso_or_none(run.started_ms),
        clock.iso_or_none(run.finished_ms),
        run.output,
        run.error,
        run.backfill,
        run.reason,
        None if run.status != "missed" else clock.iso_from_ms(run.nominal_ms),
        clock.iso_or_none(run.missed_until_ms),
        run.missed_count,
    )


def _stop_fields(run: Run) -> dict[str, Any]:
    """What may stop a claimed run: a cancel asked of it, its timeout; and
    whether a waiting run is buffered (docs/semantics.md "Overlap")."""
    if run.buffered:
        return {"buffered": True}
    if run.status != "claimed":
        return {}
    return {"cancel_requested": run.cancel == "requested", "timeout_at": clock.iso_or_none(run.timeout_at_ms)}


def run_view(run: Run) -> RunOut:
    if run.buffered or (run.status == "claimed" and (run.cancel is not None or run.timeout_at_ms is not None)):
        return RunOut(*_run_fields(run), **_stop_fields(run))
    return RunOut(*_run_fields(run))


def claimed_view(run: Run, job: Job) -> ClaimedRunOut:
    """`run_view`'s fields and the job's target, payload and lease. A claim
    answers with up to 1,000 of these, so the fields are spelled out here
    rather than gathered through `_run_fields` and `iso_or_none`."""
    iso = clock.iso_from_ms
    return ClaimedRunOut(
        ids.run_id(run.job_id, run.nominal_ms),
        run.job_id,
        iso(run.nominal_ms),
        iso(run.due_ms),
        run.status,
        run.attempt,
        run.worker,
        None if run.lease_expires_ms is None else iso(run.lease_expires_ms),
        None if run.started_ms is None else iso(run.started_ms),
        None if run.finished_ms is None else iso(run.finished_ms),
        run.output,
        run.error,
        run.backfill,
        target=job.target,
        payload=job.payload,
        lease_s=job.lease_s,
        timeout_s=job.timeout_s,
        timeout_at=None if run.timeout_at_ms is None else iso(run.timeout_at_ms),
    )
