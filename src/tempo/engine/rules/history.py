"""History (docs/operations.md "Retention"): whole days of finished runs
and events dropped, and a finished run taken back out of its bucket."""

from tempo.engine import keys
from tempo.engine.commands import DropHistory
from tempo.engine.records import Job, Run
from tempo.engine.tables import Bucket, Tables


def drop(t: Tables, cmd: DropHistory) -> None:
    """Drops the history buckets of the days before the command's."""
    t.drop_history_before(cmd.before_day)


def revive(t: Tables, job: Job, bucket: Bucket, run: Run, at_ms: int, due_ms: int | None = None) -> int | None:
    """A finished run of the slot a resume or a re-plan wakes: the run a
    pause or a patch cancelled comes back from its history bucket as
    waiting (due at `due_ms`, else when it was due, not before `at_ms`).
    One its owner cancelled stays, unless the job is a one-off (a patch
    gave it that `at` again). Answers its due time, None if it stays."""
    if run.status != "cancelled" or (run.owner_cancelled and job.schedule.repeating):
        return None
    t.unfinish(bucket, job.owner, run)
    t.uncount_cancelled(keys.job_key(job.id))
    run.status = "waiting"
    run.owner_cancelled = False
    run.finished_ms = None
    # The slot's run now, whoever made it (a one-off's `at` moved onto
    # the millisecond of a triggered run a pause cancelled).
    run.triggered = run.backfill = False
    run.due_ms = max(run.due_ms, at_ms) if due_ms is None else due_ms
    if run.buffered:  # a fresh wait: the policy decides on it again when it falls due
        run.buffered = False
        run.due_ms = at_ms
    t.put_run(run, job=job)
    return run.due_ms
