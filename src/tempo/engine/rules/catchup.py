"""Catch-up and backfill (docs/semantics.md "Catch-up after missed slots",
"Backfill"): ranges of a job's slots that got no run, recorded as an
event and a `missed` row of its history; and backfill runs for past slots."""

from tempo import clock, errors, limits
from tempo.engine.commands import BackfillJob, Claim
from tempo.engine.records import Event, Job, Missed, Run
from tempo.engine.tables import Tables


def record_missed(t: Tables, job: Job, missed: Missed, at_ms: int) -> None:
    """A range of the job's slots that got no run, as a `run.missed`
    event of its owner: in the history of the day it was decided, kept
    and dropped with it."""
    assert missed.from_ms < missed.until_ms
    detail = {
        "reason": missed.reason,
        "missed_from": clock.iso_from_ms(missed.from_ms),
        "missed_until": clock.iso_from_ms(missed.until_ms),
        "count": missed.count,
    }
    t.append_event(job.owner, Event("run.missed", at_ms, job.id, None, detail))
    # The same range as a row of the job's run history, at the run ID of
    # its first slot: in the bucket of the day it was decided, with its
    # runs-by-status row, so retention drops both with the event. A slot
    # that holds a run already (a triggered run that took that very
    # millisecond) keeps it; the event still tells of the range.
    # A range whose first slot is past the bounds of a stored time (an
    # entry no leader makes) has its event only.
    if not 0 <= missed.from_ms <= limits.time_ms_max or t.slot_taken(job.id, missed.from_ms):
        return
    row = Run(
        job.id, missed.from_ms, missed.from_ms, "missed", finished_ms=at_ms,
        reason=missed.reason, missed_until_ms=missed.until_ms, missed_count=missed.count,
    )
    t.put_missed_row(job.owner, row, at_ms)


def drop_missed_row(t: Tables, job: Job, slot_ms: int) -> None:
    """Drops the `missed` row at `slot_ms`, if there is one, with its
    runs-by-status row: a run is about to take that slot."""
    held = t.history_run(job.id, slot_ms)
    if held is not None and held[1].status == "missed":
        t.unfinish(held[0], job.owner, held[1])


def misses_itself(job: Job, run: Run, claim: Claim) -> bool:
    """Whether the claim's catch-up decision, taken from the stamped time
    of the command, leaves the run of the job's own slot without a run:
    its first missed range starts at that slot (engine/jobs.py
    `catch_up`; an entry written before such ranges existed has none)."""
    return (
        bool(claim.missed) and claim.missed[0].from_ms == run.nominal_ms and job.slot_ms == run.nominal_ms
        and run.attempt == 0 and not run.triggered and not run.backfill and job.state == "active"
    )


def backfill(t: Tables, cmd: BackfillJob) -> list[Run] | errors.TempoError:
    """A waiting run, due at `cmd.at_ms` and marked `backfill`, for each
    slot of the command that has no run, open or in history; answers
    the runs made. A slot at or after the job's scheduled slot is left
    out: its run is the schedule's to make (the job moved on since the
    slots were computed)."""
    job = t.job(cmd.owner, cmd.job_id)
    if job is None:
        return errors.NotFound(f"no job {cmd.job_id}")
    made: list[Run] = []
    for slot_ms in cmd.slots_ms:
        if job.slot_ms is not None and job.schedule.repeating and slot_ms >= job.slot_ms:
            break  # the slots are ascending
        # The first slot of a missed range holds the range's history
        # row, not a run: the backfill's run takes its place.
        drop_missed_row(t, job, slot_ms)
        if t.slot_taken(job.id, slot_ms):
            continue
        run = Run(job.id, slot_ms, cmd.at_ms, "waiting", backfill=True)
        t.put_run(run, job=job)
        made.append(run)
    return made
