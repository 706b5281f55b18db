"""Overlap policies (docs/semantics.md "Overlap"): what a job's policy does
with a run that falls due while another of its runs runs (skip it, buffer
it, or ask the running ones to stop), and with its buffered runs when
the running one ends. Decided from the replicated tables, so a new leader
decides alike; the runs a policy looks at are the job's rows of the
held-runs index (`Tables.held_runs`), not all its open runs."""

from tempo import ids, limits
from tempo.engine.commands import Claim
from tempo.engine.records import Event, Job, Run
from tempo.engine.rules import slots
from tempo.engine.tables import Tables

# Overlap policies that hold a slot's run back while an earlier run runs.
BUFFERING = ("buffer_one", "buffer_all")


def state(t: Tables, job: Job, but_ms: int | None = None) -> tuple[list[tuple[bytes, Run]], list[tuple[bytes, Run]]]:
    """The job's running runs (claimed: an attempt under way) and its
    buffered runs (slots' runs, and retries held back), each with its
    runs key, oldest slot first; the run of slot `but_ms` and backfill
    runs (which the policy neither holds back nor is held by) left out.
    A run waiting for its next attempt is neither: its lease or timeout
    (or a failed result) ended the attempt."""
    running: list[tuple[bytes, Run]] = []
    buffered: list[tuple[bytes, Run]] = []
    for runs_key, run in t.held_runs(job, but_ms):
        (running if run.status == "claimed" else buffered).append((runs_key, run))
    return running, buffered


def holds(t: Tables, job: Job, run: Run, runs_key: bytes, at_ms: int) -> int | None:
    """Whether the policy of `job` (not `allow`) holds `run` back: None
    when its claim goes ahead, else how many slots' runs of the job wait
    buffered now (this one too, when it was buffered rather than
    skipped). A backfill run always goes ahead. A retry or re-delivery
    (attempt > 0) is no new slot: it is never skipped, and while another
    run of the job runs it waits buffered (whatever the policy), to be
    released as that one ends. Any other run of a job with a running
    run is skipped or buffered, as the policy says, or (`cancel_other`)
    the running runs are asked to stop and it goes ahead."""
    if run.backfill or not job.schedule.repeating:
        return None
    running, buffered = state(t, job, run.nominal_ms)
    slot_runs = sum(1 for _, one in buffered if one.attempt == 0)
    if run.attempt > 0:
        if not running:
            return None
        buffer(t, job, run, runs_key)
        return slot_runs
    policy = job.overlap
    if policy in BUFFERING:
        # Buffered runs run in slot order: one older than this run holds it back too.
        ahead = [one for one in buffered if one[1].nominal_ms < run.nominal_ms]
        if not running and not ahead:
            return None
        room = 1 if policy == "buffer_one" else limits.overlap_buffered_runs_max
        if slot_runs >= room:
            skip(t, job, run, runs_key, at_ms)
            return slot_runs
        buffer(t, job, run, runs_key)
        return slot_runs + 1
    if not running:
        return None
    if policy == "skip":
        skip(t, job, run, runs_key, at_ms)
        return slot_runs
    assert policy == "cancel_other", f"an overlap policy: {policy}"
    for other_key, other in running:
        slots.request_cancel(t, job, other, other_key)
    return None


def buffer(t: Tables, job: Job, run: Run, runs_key: bytes) -> None:
    """`run` waits buffered: out of the dispatcher's sight (a far due
    time) until a running run of its job ends (`ended`)."""
    run.buffered = True
    run.due_ms = limits.overlap_buffered_due_ms
    t.put_run(run, runs_key, "waiting", job)


def held(t: Tables, job: Job, run: Run, claim: Claim, at_ms: int, buffered: int) -> None:
    """A run the job's overlap policy held back (skipped, or buffered:
    `run.buffered`), of which the job now has `buffered`: the slot is
    over for the schedule as a claim would end it. A skipped slot
    after which no slot is planned completes the job (`slots.settle`)."""
    if run.attempt == 0 and slots.hand_on(t, job, run, claim, at_ms, buffered):
        t.put_job(job)
    if run.status == "skipped":
        slots.settle(t, job, run, at_ms)


def due(t: Tables, at_ms: int, claim: Claim) -> bool:
    """A due run the dispatcher set aside (`OverlapRuns`): True when it
    goes on to be claimed (its policy lets it run now: nothing of the
    job runs, or `cancel_other` asked the running runs to stop); False
    when the policy skipped or buffered it, or it is no longer waiting
    and due."""
    found = t.slot_run(claim.job_id, claim.nominal_ms)
    if found is None or found[1].status != "waiting" or found[1].due_ms > at_ms or found[1].buffered:
        return False
    runs_key, run = found
    job = t.job_any(run.job_id)
    buffered = None if job.overlap is None else holds(t, job, run, runs_key, at_ms)
    if buffered is None:
        return True
    held(t, job, run, claim, at_ms, buffered)
    return False


def skip(t: Tables, job: Job, run: Run, runs_key: bytes, at_ms: int) -> None:
    """A waiting run its job's overlap policy does not run: a `skipped`
    row of the job's history (reason `overlap`) and a `run.skipped`
    event."""
    run.status = "skipped"
    run.reason = "overlap"
    run.finished_ms = at_ms
    t.finish_run(run, runs_key, "waiting", at_ms, job=job)
    t.changes.skipped += 1
    detail = {"reason": "overlap"}
    t.append_event(job.owner, Event("run.skipped", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))


def ended(t: Tables, job: Job, run: Run, at_ms: int) -> None:
    """A run that was running stopped running (it finished, or its
    attempt ended and it waits for the next), or one that waited
    unbuffered was cancelled before it ran (`rules/runs.py`
    `_cancel_waiting`: a run released from the buffer, which the
    buffered runs after it wait for): the oldest buffered run of its
    job, if any, is due at `at_ms` once no other run of the job is
    running; on a paused job too, where only a run triggered after the
    pause can be buffered (the pause cancelled the others), and it
    still runs."""
    if job.overlap is None or run.backfill:
        return
    running, buffered = state(t, job)
    if not running and buffered:
        release(t, job, buffered[0][1], buffered[0][0], at_ms)


def cancel_buffered(t: Tables, job: Job, at_ms: int) -> None:
    """A patch ended the job's schedule (docs/semantics.md "End
    conditions": it completes the job at once): the slots' runs its policy
    buffered are cancelled with it, as its waiting run is (a retry held
    back, or a triggered run, waits on for its release)."""
    for runs_key, run in state(t, job)[1]:
        if run.attempt == 0 and not run.triggered:
            run.status = "cancelled"
            run.finished_ms = at_ms
            t.finish_run(run, runs_key, "waiting", at_ms, job=job)
            slots.mark_taken(job, run.nominal_ms)


def repolicy(t: Tables, old: Job, job: Job, at_ms: int) -> None:
    """What a patch that may change the overlap policy from `old`'s to
    `job`'s does: a policy that no longer buffers releases the runs it
    held back (buffered slots' runs, and retries any policy held back),
    due at `at_ms` (the new policy decides on each as it is claimed);
    the held-runs index follows the job having a policy."""
    if old.overlap is not None and job.overlap not in BUFFERING:
        for runs_key, run in state(t, job)[1]:
            release(t, job, run, runs_key, at_ms)
    if (old.overlap is None) != (job.overlap is None):
        t.reset_held_rows(job)


def release(t: Tables, job: Job, run: Run, runs_key: bytes, at_ms: int) -> None:
    """A buffered run becomes due at `at_ms`: the dispatcher gets it."""
    assert run.buffered and run.status == "waiting"
    run.buffered = False
    run.due_ms = at_ms
    t.put_run(run, runs_key, "waiting", job)
    if (job.state == "active" and job.slot_ms == run.nominal_ms and run.attempt == 0 and not run.triggered
            and job.next_run_at_ms != at_ms):
        # The first run of the job's own slot (its last, when the
        # schedule planned none after it): the job's next run is this
        # one. (A retry is not: a repeating job's next run is a slot's.)
        job.next_run_at_ms = at_ms
        t.put_job(job)
