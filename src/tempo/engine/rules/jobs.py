"""Jobs (docs/semantics.md "Pause, resume, delete", "Changing a job"):
create, pause, resume, patch, delete and trigger."""

import msgspec

from tempo import errors, limits
from tempo.engine import keys
from tempo.engine.commands import DeleteJob, NewJob, PatchJob, PauseJob, ResumeJob, TriggerJob
from tempo.engine.records import Event, Job, Paused, RequestKeyEntry, RetryKept, Run
from tempo.engine.rules import calendars, catchup, deps, history, overlap, slots
from tempo.engine.tables import NewRows, Tables


class Created(msgspec.Struct, frozen=True, gc=False):
    """A create's answer. A struct, not a frozen dataclass: apply makes one
    per job of a batch, and a frozen dataclass's __init__ sets each field
    through object.__setattr__ (0.27 µs against 0.04)."""

    job: Job
    new: bool  # False: the request key named an existing job with the same body


def create_jobs(t: Tables, items: list[NewJob]) -> list[Created | errors.TempoError]:
    """One command's new jobs. Their rows, their runs' rows and the two
    indexes are gathered and put per table with `putmulti` at the end,
    one call rather than four per job. A request key naming a job of
    this command flushes them first, as its answer reads them. The
    tables end as with one `put` a row."""
    rows = NewRows()
    outcomes = [_create_job(t, item, rows) for item in items]
    rows.put(t)
    return outcomes


def _create_job(t: Tables, item: NewJob, rows: NewRows) -> Created | errors.TempoError:
    job = item.job
    fault = _key_fault(job)
    if fault is not None:
        return fault
    if job.request_key is not None:
        req_key = keys.request_key(job.owner, job.request_key)
        entry = t.request_key_entry(req_key)
        if entry is not None:
            if entry.body_hash != item.body_hash:
                return errors.RequestKeyReused(
                    f"request key {job.request_key!r} was used for another body"
                )
            rows.put(t)
            existing = t.fresh(t.job(job.owner, entry.job_id))
            assert existing is not None, "a request key outlived its job"
            return Created(existing, new=False)
    calendar_fault = calendars.use_fault(t, job.owner, item.calendar)
    if calendar_fault is not None:
        return calendar_fault
    if item.deps is not None:
        fault = deps.check(t, job, item.deps)
        if fault is not None:
            return fault
        deps.set_edges(t, job, item.deps)
    if job.request_key is not None:
        t.put_request_key(keys.request_key(job.owner, job.request_key), RequestKeyEntry(job.id, item.body_hash))
    rows.add(t, job, item.first_due_ms)
    if item.calendar is not None:
        calendars.bind(t, job, item.calendar)
    return Created(job, new=True)


def _key_fault(job: Job) -> errors.TempoError | None:
    """The error outcome of a new job whose keys would not fit LMDB (an
    entry logged before the edge checked bounds in bytes); it depends on the
    command alone, so every replica answers alike."""
    if not keys.owner_fits(job.owner):
        return errors.Invalid(
            f"the owner name is {len(job.owner.encode())} bytes in UTF-8, past the {limits.owner_bytes_max} "
            "the config allows: shorten it there"
        )
    if job.request_key is not None and not keys.request_key_fits(job.owner, job.request_key):
        return errors.Invalid.at("request_key", f"at most {limits.request_key_bytes_max} bytes in UTF-8")
    return None


def _job(t: Tables, owner: str, job_id: str) -> Job | errors.NotFound:
    """The job, or the 404 a command on one job answers without it."""
    job = t.job(owner, job_id)
    return errors.NotFound(f"no job {job_id}") if job is None else job


def pause_job(t: Tables, cmd: PauseJob) -> Job | errors.TempoError:
    job = _job(t, cmd.owner, cmd.job_id)
    if isinstance(job, errors.NotFound) or job.state != "active":
        return job  # paused already, or completed
    # Every waiting run of the job: its scheduled one, retries of earlier
    # runs and triggered runs alike, so a paused job runs nothing it did
    # not run already (a trigger after the pause still runs).
    for runs_key, run in t.open_runs(job.id):
        if run.status == "waiting" or slots.held_ahead(run, cmd.at_ms):
            # A run claimed ahead of its due time has not started: it is
            # cancelled as a waiting one (docs/semantics.md "Pre-dispatch").
            old_status = run.status
            run.status = "cancelled"
            run.lease_expires_ms = None
            t.finish_run(run, runs_key, old_status, cmd.at_ms, job=job)
            slots.mark_taken(job, run.nominal_ms)
    t.set_state(job, "paused")
    job.next_run_at_ms = None
    by_owner = cmd.owner if cmd.by_owner is None else cmd.by_owner
    job.paused = Paused(cmd.at_ms, by_owner, cmd.by_role, cmd.note)
    t.put_job(job)
    detail = {"version": job.version, "note": cmd.note, "by": {"owner": by_owner, "role": cmd.by_role}}
    t.append_event(job.owner, Event("job.paused", cmd.at_ms, job.id, None, detail))
    return job


def resume_job(t: Tables, cmd: ResumeJob) -> Job | errors.TempoError:
    job = _job(t, cmd.owner, cmd.job_id)
    if isinstance(job, errors.NotFound) or job.state != "paused":
        return job
    t.set_state(job, "active")
    job.paused = None
    job.next_run_at_ms = None
    t.append_event(job.owner, Event("job.resumed", cmd.at_ms, job.id, None, {"version": job.version}))
    for missed in cmd.missed:
        catchup.record_missed(t, job, missed, cmd.at_ms)
    # An `all` catch-up under way at the pause ends with it: the slots it
    # did not run yet passed while paused.
    job.catchup_until_ms = job.catchup_decided_ms = None
    if deps.is_after(job.schedule):
        t.put_job(job)  # no slot of its own: its parents' next ends make its runs
        return job
    if job.schedule.repeating:
        slot_ms, due_ms = cmd.slot_ms, cmd.due_ms
        if slot_ms is not None and slots.past_end(job, slot_ms):
            slot_ms = due_ms = None
        if slot_ms is None and _last_run_open(t, job):
            # The last run goes on: its end completes the job (`slots.settle`).
            t.put_job(job)
            return job
    else:
        slot_ms, due_ms = job.slot_ms, cmd.due_ms
    if slot_ms is None:
        slots.complete(t, job, cmd.at_ms)  # the schedule has no occurrence left
        return job
    job.next_run_at_ms = slots.wake_slot(t, job, slot_ms, due_ms, cmd.at_ms)
    job.slot_ms = slot_ms if job.schedule.repeating else job.slot_ms
    t.put_job(job)
    return job


def _last_run_open(t: Tables, job: Job) -> bool:
    """Whether the run of the job's slot is claimed still: a repeating
    job whose schedule planned nothing after it (its last run)."""
    found = None if job.slot_ms is None else t.slot_run(job.id, job.slot_ms)
    return found is not None and found[1].status == "claimed"


def patch_job(t: Tables, cmd: PatchJob) -> Job | errors.TempoError:
    """A job changed in place (docs/semantics.md "Changing a job"). Runs
    that are claimed go on as they are; every waiting run is handed to
    the dispatcher again with the new job (its target may have moved);
    with `replan`, the waiting run of the job's schedule slot moves to
    the new slot (cancelled, in history, when the slot changes)."""
    old = t.job(cmd.owner, cmd.job_id)
    if old is None:
        return errors.NotFound(f"no job {cmd.job_id}")
    fault = _patch_fault(t, old, cmd) or _patch_edges(t, old, cmd)
    if fault is not None:
        return fault
    new = cmd.job
    # What the patch may not change comes from the stored job.
    job = msgspec.structs.replace(
        old, name=new.name, target=new.target, payload=new.payload, schedule=new.schedule,
        max_attempts=new.max_attempts, backoff_s=new.backoff_s, lease_s=new.lease_s, jitter_s=new.jitter_s,
        catchup=new.catchup, version=old.version + 1, labels=new.labels,
        notify=new.notify if cmd.sets_notify else old.notify, timeout_s=new.timeout_s, overlap=new.overlap,
    )
    if old.labels != job.labels:
        t.relabel(old, job)
    _replan_with_held(t, old, job, cmd)
    overlap.repolicy(t, old, job, cmd.at_ms)
    calendars.patched(t, job, cmd.sets_calendar, cmd.calendar)
    fed = {runs_key for runs_key, _, with_job in t.changes.woken if with_job is job}
    kept = RetryKept(old.max_attempts, old.backoff_s)
    waiting: list[tuple[bytes, Run]] = []
    for runs_key, run in t.open_runs(job.id):
        if run.status == "waiting" and runs_key not in fed:
            waiting.append((runs_key, run))
        elif run.status == "claimed" and run.retry_kept is None and kept != RetryKept(job.max_attempts, job.backoff_s):
            run.retry_kept = kept  # the attempt goes on under the policy it was claimed with
            t.put_run_in_place(run, runs_key, "claimed", job)
    for runs_key, run in waiting:
        t.changes.left.append(runs_key)
        t.changes.woken.append((runs_key, run, job))
    t.put_job(job)
    detail = {"old_version": old.version, "new_version": job.version, "changed": _changed_fields(old, job)}
    t.append_event(job.owner, Event("job.updated", cmd.at_ms, job.id, None, detail))
    return job


def _replan_with_held(t: Tables, old: Job, job: Job, cmd: PatchJob) -> None:
    """The runs claimed ahead of their due time and not started wait
    again first (`_hand_back_held`), so that a patch that moves the
    schedule (`replan`) treats them as the waiting runs they were before
    their claim (docs/semantics.md "Pre-dispatch"): pre-dispatch changes
    when a run is handed out, never which slots run."""
    woken_from, left_from = len(t.changes.woken), len(t.changes.left)
    held = _hand_back_held(t, job, cmd.at_ms)
    if cmd.replan:
        _replan(t, old, job, cmd)
        if job.state != "paused":
            _cancel_held_slots(t, job, held, cmd.at_ms)
    if held:
        _drop_superseded(t, woken_from, left_from)


def _hand_back_held(t: Tables, job: Job, at_ms: int) -> list[Run]:
    """The job's runs claimed ahead of their due time and not started
    (`slots.held_ahead` at the patch's stamp) wait again, for a claim of
    the patched job; each keeps its attempt number, a fencing token.
    Answers them."""
    held = []
    for runs_key, run in t.open_runs(job.id):
        if slots.held_ahead(run, at_ms):
            run.status = "waiting"
            run.worker = None
            run.lease_expires_ms = None
            run.timeout_at_ms = None
            t.put_run(run, runs_key, "claimed", job)
            held.append(run)
    return held


def _cancel_held_slots(t: Tables, job: Job, held: list[Run], at_ms: int) -> None:
    """After a patch moved the schedule: the runs of its slots that were
    held ahead, but the one of the new slot, are cancelled as the waiting
    run of the slot the schedule moves off is (`_cancel_slot`), so the
    old schedule's slots do not run. A patch-cancelled run does not hold
    its slot: if the new schedule has that slot, its run waits again
    when the schedule reaches it (`slots.schedule_at`). A retry, a
    triggered and a backfill run wait on: they are no slot's scheduled
    run."""
    for run in held:
        if run.triggered or run.backfill or run.attempts or run.nominal_ms == job.slot_ms:
            continue
        _cancel_slot(t, job, run.nominal_ms, at_ms)


def _drop_superseded(t: Tables, woken_from: int, left_from: int) -> None:
    """The change feed's entries for runs the patch handed back
    (`woken` from `woken_from`) that a later step of the same patch moved
    or cancelled (in `left` from `left_from`): the dispatcher takes
    `left` before `woken`, and would hold a run that waits no more."""
    gone = set(t.changes.left[left_from:])
    if gone:
        woken = t.changes.woken
        woken[woken_from:] = [w for w in woken[woken_from:] if w[0] not in gone]


def _patch_fault(t: Tables, old: Job, cmd: PatchJob) -> errors.TempoError | None:
    """Why the patch cannot apply: the job is at another version, or the
    calendar it names is gone."""
    if old.version != cmd.base_version:
        return errors.VersionMismatch(f"job {old.id} is at version {old.version}, not {cmd.base_version}")
    return calendars.use_fault(t, old.owner, cmd.calendar) if cmd.sets_calendar else None


def _patch_edges(t: Tables, old: Job, cmd: PatchJob) -> errors.TempoError | None:
    """The patch's edges (docs/semantics.md "Dependencies"), checked here
    against the tables as they are (a cycle two racing patches would
    close is refused to the later) and stored; the fault, if any."""
    if not cmd.sets_deps:
        return None
    fault = None if cmd.deps is None else deps.check(t, old, cmd.deps)
    if fault is None:
        deps.set_edges(t, old, cmd.deps)
    return fault


def _unplan(t: Tables, old: Job, job: Job, at_ms: int) -> None:
    """A job patched to a dependent one (`schedule.after`) has no slot of
    its own: the waiting run of its old slot is cancelled, and a
    completed job is active again, for its parents' ends to run it. An
    `end_at` the patch put in the past completes it instead, as it
    completes a clock schedule (docs/semantics.md "Dependencies")."""
    if old.slot_ms is not None:
        _cancel_slot(t, job, old.slot_ms, at_ms)
    job.slot_ms = job.next_run_at_ms = None
    ended = job.schedule.end_at_ms is not None and job.schedule.end_at_ms < at_ms
    if job.state == "completed" and not ended:
        t.set_state(job, "active")
    elif job.state == "active" and ended:
        slots.complete(t, job, at_ms)


def _replan(t: Tables, old: Job, job: Job, cmd: PatchJob) -> None:
    """Moves the waiting run of `old`'s schedule slot to the command's
    slot: a paused job only remembers a one-off's new slot; a completed
    job becomes active when the new slot lies after the command. A
    catch-up under way was decided on the old schedule's slots: it ends."""
    job.catchup_until_ms = job.catchup_decided_ms = None
    if old.slot_ms is not None and not old.schedule.repeating and job.schedule.repeating:
        # The one-off's slot may hold a run that ended (its owner cancelled
        # it before its time): a claim or a cancel that hands the schedule
        # on to that slot reads it there and steps over it, as over any
        # slot whose run its owner cancelled (`plan.step_over_taken`).
        slots.mark_taken(job, old.slot_ms)
    if deps.is_after(job.schedule):
        _unplan(t, old, job, cmd.at_ms)
        return
    if job.state == "paused":
        # A paused job remembers a one-off's new slot; and a one-off's
        # that became repeating moves off its one slot, so that slot's
        # run ending (it was claimed) does not complete the job: its
        # resume plans the schedule's slots.
        if (not job.schedule.repeating or not old.schedule.repeating) and cmd.slot_ms is not None:
            job.slot_ms = cmd.slot_ms
        return
    # An end condition the patch reached leaves nothing to plan
    # (docs/semantics.md "End conditions"): decided here, from the
    # replicated count of runs, not by the node that made the command.
    ended = job.schedule.repeating and (cmd.slot_ms is None or slots.past_end(job, cmd.slot_ms))
    if job.state == "completed":
        if ended or cmd.slot_ms is None or cmd.slot_ms <= cmd.at_ms:
            return
        t.set_state(job, "active")
    elif old.slot_ms is not None and (old.slot_ms != cmd.slot_ms or ended):
        _cancel_slot(t, job, old.slot_ms, cmd.at_ms)
    if ended:
        job.slot_ms = cmd.slot_ms
        if job.overlap is not None:
            overlap.cancel_buffered(t, job, cmd.at_ms)
        slots.complete(t, job, cmd.at_ms)
        return
    _plant(t, job, cmd)


def _plant(t: Tables, job: Job, cmd: PatchJob) -> None:
    """The job's scheduled waiting run at the command's slot: a new one,
    or the one waiting there already (due anew unless it is a retry);
    none when a run of that slot is claimed or finished."""
    job.slot_ms = cmd.slot_ms
    job.next_run_at_ms = None
    if cmd.slot_ms is None:
        t.set_state(job, "completed")  # no occurrence left
        return
    assert cmd.due_ms is not None
    found = t.slot_run(job.id, cmd.slot_ms)
    if found is None:
        # A `missed` row at the slot is history of slots that got no
        # run, not a run: the slot's run takes its place, as a
        # backfill's does.
        catchup.drop_missed_row(t, job, cmd.slot_ms)
        held = t.history_run(job.id, cmd.slot_ms)
        if held is None:
            t.put_run(Run(job.id, cmd.slot_ms, cmd.due_ms, "waiting"), job=job)
            job.next_run_at_ms = cmd.due_ms
        else:
            # The run an earlier re-plan (or a pause) cancelled at this
            # slot waits again: one slot never has two runs.
            job.next_run_at_ms = history.revive(t, job, held[0], held[1], cmd.at_ms, cmd.due_ms)
            if job.next_run_at_ms is None and not job.schedule.repeating:
                # A one-off's `at` moved onto a run that ended (done or
                # failed): its one slot has run, and nothing is left to
                # run, so it is completed rather than left active.
                slots.complete(t, job, cmd.at_ms, held[1])
        return
    runs_key, run = found
    slots.adopt(t, job, run, runs_key)
    if run.status == "waiting":
        if run.attempt == 0 and not run.buffered:  # a buffered run waits for its release
            run.due_ms = cmd.due_ms
            t.put_run(run, runs_key, "waiting", job)
        job.next_run_at_ms = run.due_ms


def _cancel_slot(t: Tables, job: Job, slot_ms: int, at_ms: int) -> None:
    """The scheduled run of `slot_ms` is cancelled if it waits (into
    history, as a pause leaves it); a claimed one goes on."""
    found = t.slot_run(job.id, slot_ms)
    if found is not None and found[1].status == "waiting" and not found[1].triggered:
        runs_key, run = found
        run.status = "cancelled"
        run.finished_ms = at_ms
        t.finish_run(run, runs_key, "waiting", at_ms, job=job)
        slots.mark_taken(job, slot_ms)


def delete_job(t: Tables, cmd: DeleteJob) -> errors.TempoError | None:
    job = t.job(cmd.owner, cmd.job_id)
    if job is None:
        return errors.NotFound(f"no job {cmd.job_id}")
    fault = deps.delete(t, job)
    if fault is not None:
        return fault
    t.delete_job_rows(job)
    calendars.unbind(t, job)
    t.append_event(job.owner, Event("job.deleted", cmd.at_ms, job.id, None, {"version": job.version}))
    return None


def trigger_job(t: Tables, cmd: TriggerJob) -> Run | errors.TempoError:
    job = t.job(cmd.owner, cmd.job_id)
    if job is None:
        return errors.NotFound(f"no job {cmd.job_id}")
    for slot_ms in range(cmd.at_ms, cmd.at_ms + limits.trigger_slot_probe_max):
        if not t.slot_taken(job.id, slot_ms):
            run = Run(job.id, slot_ms, slot_ms, "waiting", triggered=True)
            t.put_run(run, job=job)
            if slots.mark_taken(job, slot_ms):
                t.put_job(job)
            return run
    return errors.Conflict(f"job {job.id} has no free run slot near {cmd.at_ms}")


# A job's record fields a patch may change, by the name of the body's
# field that sets them (`retry` sets two), for `job.updated`'s `changed`.
_PATCHED_FIELDS = (
    ("backoff_s", "retry"), ("catchup", "catchup"), ("jitter_s", "jitter_s"), ("labels", "labels"),
    ("lease_s", "lease_s"), ("max_attempts", "retry"), ("name", "name"), ("notify", "notify"),
    ("overlap", "overlap"), ("payload", "payload"), ("schedule", "schedule"), ("target", "target"),
    ("timeout_s", "timeout_s"),
)


def _changed_fields(old: Job, job: Job) -> list[str]:
    """The body's fields whose values `job` changed from `old`, sorted."""
    return sorted({name for attr, name in _PATCHED_FIELDS if getattr(old, attr) != getattr(job, attr)})
