"""What every rule shares about a job's schedule (docs/semantics.md "End
conditions", "Cancelling a run"): the run of its slot made, adopted or
revived; the schedule handed on to the next slot; a claimed run asked to
stop; a job with nothing left to run completed."""

from tempo import ids, limits
from tempo.engine import keys
from tempo.engine.commands import Claim
from tempo.engine.records import Event, Job, Run
from tempo.engine.rules import catchup, history
from tempo.engine.tables import Tables
from tempo.engine.tables.layout import OPEN


def held_ahead(run: Run, at_ms: int) -> bool:
    """Whether `run` was claimed ahead of its due time (pre-dispatch,
    docs/semantics.md "Pre-dispatch") and a pause, cancel or patch stamped
    `at_ms` still stops it: stamped more than `limits.predispatch_stop_ms`
    before its due time. Its worker starts it only after asking the leader
    (`POST /v1/starts`), which answers no earlier than that and only once
    every command stamped before is applied. A run claimed at or after its
    due time (its `started_ms`, the claim's stamp) never is held ahead."""
    return (
        run.status == "claimed"
        and run.started_ms is not None
        and run.started_ms < run.due_ms
        and at_ms < run.due_ms - limits.predispatch_stop_ms
    )


def past_end(job: Job, slot_ms: int, pending: int = 0) -> bool:
    """Whether a repeating job's end conditions leave `slot_ms` unplanned:
    it lies after `schedule.end_at`, or the job ran `schedule.max_runs`
    slots already, counting `pending` runs its overlap policy buffered,
    which run yet."""
    sched = job.schedule
    if sched.end_at_ms is not None and slot_ms > sched.end_at_ms:
        return True
    return sched.max_runs is not None and job.runs_done + pending >= sched.max_runs


def end_reason(job: Job) -> str:
    """Why a repeating job's schedule ended, from the job as replicated:
    `max_runs` when it ran them all, else `end_at` when it has one (the
    node that planned found no slot up to it), else `no_slot_left`."""
    sched = job.schedule
    if sched.max_runs is not None and job.runs_done >= sched.max_runs:
        return "max_runs"
    return "no_slot_left" if sched.end_at_ms is None else "end_at"


def mark_taken(job: Job, nominal_ms: int) -> bool:
    """A run of the job's slot `nominal_ms` is in its history, or was
    triggered there (`Job.taken_until_ms`); answers whether the job
    changed (the caller writes it)."""
    if job.taken_until_ms is not None and job.taken_until_ms >= nominal_ms:
        return False
    job.taken_until_ms = nominal_ms
    return True


def is_slot_run(job: Job, run: Run) -> bool:
    """Whether `run` is the waiting run of an active repeating job's
    schedule slot: cancelling it hands the schedule on to the next slot."""
    return job.schedule.repeating and not run.triggered and job.state == "active" and job.slot_ms == run.nominal_ms


def complete(t: Tables, job: Job, at_ms: int, run: Run | None = None, job_key: bytes | None = None) -> None:
    """A job with nothing left to run is `completed`, with its event.
    A one-off's detail names how its run ended; a repeating job's names
    why its schedule ended (`end_reason`), and the status of its last
    run when that run's end completed it. `job_key` is
    `keys.job_key(job.id)` when the caller has it."""
    t.set_state(job, "completed")
    job.paused = None
    job.next_run_at_ms = None
    t.put_job(job, job_key)
    detail: dict[str, object] = {} if run is None else {"status": run.status}
    if job.schedule.repeating:
        detail["reason"] = end_reason(job)
    run_id = None if run is None else ids.run_id(job.id, run.nominal_ms)
    t.append_event(job.owner, Event("job.completed", at_ms, job.id, run_id, detail))


def settle(t: Tables, job: Job, run: Run, at_ms: int, job_key: bytes | None = None) -> None:
    """A job whose last scheduled run ended is completed: a one-off's
    one run, or the run of a repeating job's slot when its claim
    planned no slot after it (an end condition, or no slot left; the
    job's slot is still that run's then). While slots' runs of the job
    wait buffered, the last of them to end completes it instead
    (docs/semantics.md "Overlap": they were due before the end).
    `job_key` is `keys.job_key(job.id)` when the caller has it (a result)."""
    if run.triggered or run.backfill or job.state == "completed":
        return
    if job.slot_ms != run.nominal_ms:
        if _ran_after_last_slot(t, job, run):
            complete(t, job, at_ms, run)
        return
    if job.schedule.repeating and job.next_run_at_ms is not None:
        return
    if job.schedule.repeating and job.overlap is not None and _slots_buffered(t, job, run.nominal_ms):
        return
    complete(t, job, at_ms, run, job_key)


def end_schedule(t: Tables, job: Job, at_ms: int) -> None:
    """A cancel of the job's waiting run found no slot left: the job is
    completed, unless slots' runs of it wait buffered, which run yet
    (docs/semantics.md "Overlap"); the last of them to end completes it."""
    if job.overlap is not None and _slots_buffered(t, job, None):
        job.next_run_at_ms = None
        t.put_job(job)
        return
    complete(t, job, at_ms)


def _slots_buffered(t: Tables, job: Job, but_ms: int | None) -> bool:
    """Whether a slot's run of the job, but the run of `but_ms`, waits
    buffered (its overlap policy held it back; a retry held back is not
    a slot's run)."""
    return any(
        r.status == "waiting" and r.buffered and r.attempt == 0 and not r.triggered and not r.backfill
        for _, r in t.held_runs(job, but_ms)
    )


def _ran_after_last_slot(t: Tables, job: Job, run: Run) -> bool:
    """Whether `run`, a slot's run that ended, was the last open one of
    those its overlap policy buffered before the job's schedule ended: the
    job's last slot ended (skipped, missed, cancelled) with no slot planned
    after it (`settle` left the job active for them), and no other slot's
    run is open, buffered, released (a patch to a policy that does not
    buffer releases them all) or running. Reads the job's open runs only
    in that state."""
    if not (
        job.schedule.repeating and job.state == "active" and job.next_run_at_ms is None
        and job.slot_ms is not None and run.nominal_ms < job.slot_ms
        and t.run_key_at_slot(job.id, job.slot_ms) is None
    ):
        return False
    for _, runs_key in t.slots_desc(job.id, 0, job.slot_ms):
        other = t.run_at(runs_key)
        if not other.triggered and not other.backfill:
            return False
    return True


def adopt(t: Tables, job: Job, run: Run, runs_key: bytes) -> None:
    """An open run at the slot the job's schedule is planted on is that
    slot's run: one a trigger (or a backfill) made on the very
    millisecond that a one-off's `at` was moved to, as one slot never
    has two runs. Its end then ends the one-off."""
    if (run.triggered or run.backfill) and run.status in OPEN:
        if run.backfill and run.status == "claimed" and job.overlap is not None:  # now a run its policy looks at
            t.hold_row(job.id, run.nominal_ms)
        run.triggered = run.backfill = False
        t.put_run_in_place(run, runs_key, run.status, job)


def wake_slot(t: Tables, job: Job, slot_ms: int, due_ms: int | None, at_ms: int) -> int | None:
    """Makes the run of `slot_ms` waiting: the one pause cancelled, or a new
    one. Answers its due time, or None when the slot's run is past waiting
    (claimed before the pause, or finished)."""
    runs_key = t.run_key_at_slot(job.id, slot_ms)
    if runs_key is None:
        held = t.history_run(job.id, slot_ms)
        if held is not None:
            return history.revive(t, job, held[0], held[1], at_ms)
        # A new run, or a one-off's whose cancelled run was dropped with
        # its history bucket (an entry from before one-offs carried
        # `due_ms` gets the due time resume gives: at once if past).
        due_ms = max(slot_ms, at_ms) if due_ms is None else due_ms
        t.put_run(Run(job.id, slot_ms, due_ms, "waiting"), job=job)
        return due_ms
    run = t.run_at(runs_key)
    if run.status != "cancelled":
        adopt(t, job, run, runs_key)
        return run.due_ms if run.status == "waiting" else None
    run.status = "waiting"
    run.due_ms = max(run.due_ms, at_ms)
    run.triggered = run.backfill = False  # the slot's run now, as `history.revive` makes it
    if run.buffered:  # a fresh wait: the policy decides on it again when it falls due
        run.buffered = False
        run.due_ms = at_ms
    t.put_run(run, runs_key, "cancelled", job)
    return run.due_ms


def schedule_at(t: Tables, job: Job, slot_ms: int, due_ms: int, at_ms: int) -> int | None:
    """The run of the job's next slot, which a claim or a cancel hands
    the schedule on to: a new waiting run, due at `due_ms`; or the run a
    pause or a patch cancelled there, waiting again. A slot that holds
    another run keeps it (the node that made the command stepped over
    such slots; it holds one only when the command raced a change).
    Answers the scheduled run's due time, None when none waits. Open
    runs only, unless the slot is at or before `taken_until_ms`: the
    claim of a slot run reads no history."""
    runs_key = t.run_key_at_slot(job.id, slot_ms)
    if runs_key is not None:
        run = t.run_at(runs_key)
        return run.due_ms if run.status == "waiting" and not run.triggered else None
    held = None
    if job.taken_until_ms is not None and slot_ms <= job.taken_until_ms:
        held = t.history_run(job.id, slot_ms)
    if held is None:
        t.put_run(Run(job.id, slot_ms, due_ms, "waiting"), job=job)
        return due_ms
    return history.revive(t, job, held[0], held[1], at_ms, due_ms)


def hand_on(t: Tables, job: Job, run: Run, claim: Claim, at_ms: int, pending: int = 0) -> bool:
    """The slot run of `job` leaves waiting (claimed, skipped or
    buffered): the schedule moves on to the claim's next slot, whose
    run is made in the same commit, unless an end condition leaves it
    unplanned (`past_end`, counting `pending` buffered runs that will
    run yet). Answers whether `job` changed (not for a retry, a
    re-delivery, a triggered or a backfill run: the schedule moved on
    already)."""
    if job.slot_ms != run.nominal_ms or run.triggered or run.backfill:
        return False
    next_slot_ms = claim.next_slot_ms
    if next_slot_ms is not None and past_end(job, next_slot_ms, pending):
        # The run just claimed (or buffered) is the job's last: its end
        # completes the job (`settle`). Decided here from `runs_done`
        # as replicated, so every replica, and the next leader, agree on it.
        next_slot_ms = None
    if job.schedule.repeating and job.state == "active" and next_slot_ms is not None:
        assert claim.next_due_ms is not None and next_slot_ms > run.nominal_ms
        job.slot_ms = next_slot_ms
        job.next_run_at_ms = schedule_at(t, job, next_slot_ms, claim.next_due_ms, at_ms)
        for missed in claim.missed:
            catchup.record_missed(t, job, missed, at_ms)
        job.catchup_until_ms = claim.catchup_until_ms
        job.catchup_decided_ms = claim.catchup_decided_ms
    else:
        if claim.next_slot_ms is None:
            # No slot is left to plan (a triggered run took the latest one
            # the catch-up decided on): the ranges it decided still stand.
            # (A command that planned a slot past an end condition records
            # none, as it always has.)
            for missed in claim.missed:
                catchup.record_missed(t, job, missed, at_ms)
        job.next_run_at_ms = None
    return True


def request_cancel(t: Tables, job: Job, run: Run, runs_key: bytes) -> None:
    """Asks the claimed `run` (of `job`, stored at `runs_key`) to stop:
    the next heartbeat of its attempt answers `cancel: requested`, its
    lease no longer grows, and the result that follows, or the end of
    its lease, ends it `cancelled` with no retry. Idempotent. Nothing of
    the request is timed or written as an event: the run's end is
    (`run.cancelled`)."""
    assert run.status == "claimed" and run.job_id == job.id
    assert keys.due_of(runs_key) == run.due_ms, "the run is stored at runs_key"
    if run.cancel == "requested":
        return
    run.cancel = "requested"
    t.put_run_in_place(run, runs_key, "claimed", job)
    t.changes.stopping.append((run.job_id, run.nominal_ms))
