"""Calendars (docs/semantics.md "Calendars"): an owner's calendars put and
deleted, the calendar a job uses, and a claim's calendar decision taken
at the epoch it was made at.

Apply does no time-zone arithmetic and asks no holidays library: the
node that took the request resolved the holidays to dates, and the node
that proposed a claim placed the run. Apply checks that the decision was
made at the owner's current calendar epoch (`tables/calendars.py`): at
another, the run stays waiting and goes back to the dispatcher, which
decides it again with the calendars as they are now."""

from tempo import errors, ids, limits
from tempo.engine.commands import CalendarClaim, CalendarReplan, DeleteCalendar, PutCalendar
from tempo.engine.records import Calendar, CalendarUse, Event, Job, Run
from tempo.engine.tables import Tables
from tempo.engine.tables import calendars as rows


def put_calendar(t: Tables, cmd: PutCalendar) -> Calendar | errors.TempoError:
    """Creates or replaces the calendar (`If-Match`: `cmd.if_version`),
    its base checked as it is now: there, of the same owner, no cycle,
    at most limits.calendar_base_depth_max below it."""
    cal = cmd.calendar
    old = rows.calendar(t, cal.owner, cal.name)
    if cmd.if_version is not None and (0 if old is None else old.version) != cmd.if_version:
        have = "no such calendar" if old is None else f"the calendar is at version {old.version}"
        return errors.VersionMismatch(f"If-Match names version {cmd.if_version}: {have}")
    if old is None and len(rows.calendars_of(t, cal.owner, limit=limits.calendars_per_owner_max)) >= (
        limits.calendars_per_owner_max
    ):
        return errors.Invalid.at("name", f"an owner has at most {limits.calendars_per_owner_max} calendars")
    fault = base_fault(t, cal.owner, cal.name, cal.base)
    if fault is not None:
        return fault
    cal.version = 1 if old is None else old.version + 1
    cal.created_at_ms = cmd.at_ms if old is None else old.created_at_ms
    cal.updated_at_ms = cmd.at_ms
    rows.put_calendar(t, cal)
    _raise(t, cal.owner)
    for item in cmd.replans:
        _replan(t, cal.owner, item)
    return cal


def _replan(t: Tables, owner: str, item: CalendarReplan) -> None:
    """The job's waiting slot run, due where the node that took the `PUT`
    placed it under the new calendar, if it is still the run it read:
    the job's slot, waiting, at its first attempt, due at `from_due_ms`."""
    job = t.job(owner, item.job_id)
    if job is None or job.state != "active" or job.slot_ms != item.slot_ms:
        return
    found = t.slot_run(job.id, item.slot_ms)
    if found is None:
        return
    runs_key, run = found
    if run.status != "waiting" or run.attempt != 0 or run.buffered or run.due_ms != item.from_due_ms:
        return
    move(t, job, run, runs_key, item.to_due_ms)


def base_fault(t: Tables, owner: str, name: str, base: str | None) -> errors.TempoError | None:
    """Why `base` cannot be the base of `name`, or None."""
    depth = 0
    at = base
    while at is not None:
        if at == name:
            return errors.Invalid.at("base", f"calendar {base!r} leads back to {name!r}: a cycle")
        depth += 1
        if depth > limits.calendar_base_depth_max:
            return errors.Invalid.at("base", f"more than {limits.calendar_base_depth_max} calendars below this one")
        found = rows.calendar(t, owner, at)
        if found is None:
            return errors.Invalid.at("base", f"no calendar {at!r}")
        at = found.base  # decoded whole: puts are rare, and a chain is at most 5
    return None


def delete_calendar(t: Tables, cmd: DeleteCalendar) -> errors.TempoError | None:
    """Deletes a calendar no job uses and no calendar names as its base."""
    old = rows.calendar(t, cmd.owner, cmd.name)
    if old is None:
        return errors.NotFound(f"no calendar {cmd.name}")
    if cmd.if_version is not None and old.version != cmd.if_version:
        return errors.VersionMismatch(f"the calendar is at version {old.version}")
    users = rows.users(t, cmd.owner, cmd.name, limits.calendar_users_named_max)
    if users:
        return errors.InUse(f"calendar {cmd.name} is used by jobs {', '.join(users)}", [("jobs", " ".join(users))])
    based = [c.name for c in rows.calendars_of(t, cmd.owner) if c.base == cmd.name]
    if based:
        return errors.InUse(f"calendar {cmd.name} is the base of {', '.join(based)}", [("calendars", " ".join(based))])
    rows.drop_calendar(t, cmd.owner, cmd.name)
    _raise(t, cmd.owner)
    return None


def use_fault(t: Tables, owner: str, use: CalendarUse | None) -> errors.TempoError | None:
    """A job's calendar that is not there (deleted since it was checked)."""
    if use is None or rows.exists(t, owner, use.name):
        return None
    return errors.Invalid.at("schedule.calendar", f"no calendar {use.name!r}")


def bind(t: Tables, job: Job, use: CalendarUse | None, *, changed: bool = False) -> None:
    """The job's calendar is `use` (None: none). `changed`: it may have
    had another, whose claims in flight are decided anew."""
    if use is None:
        if rows.unbind(t, job.owner, job.id):
            t.changes.calendar_jobs.append((job.id, None))
            _raise(t, job.owner)
        return
    rows.bind(t, job.owner, job.id, use)
    t.changes.calendar_jobs.append((job.id, use))
    if changed:
        _raise(t, job.owner)


def patched(t: Tables, job: Job, sets: bool, use: CalendarUse | None) -> None:
    """A patch's calendar (`sets`: the patch named one, or none)."""
    if sets:
        bind(t, job, use, changed=True)


def unbind(t: Tables, job: Job) -> None:
    """A deleted job uses no calendar."""
    if rows.unbind(t, job.owner, job.id):
        t.changes.calendar_jobs.append((job.id, None))


def _raise(t: Tables, owner: str) -> None:
    """Every claim of the owner's calendar jobs decided before is decided anew."""
    t.changes.calendar_epochs.append((owner, rows.raise_epoch(t, owner)))


def current(t: Tables, job: Job, decision: CalendarClaim) -> bool:
    """Whether the claim's calendar decision was made at the owner's
    epoch; if not, the run goes back to the dispatcher as waiting (its
    row does not move: the change feed names it again)."""
    return rows.epoch(t, job.owner) == decision.epoch


def move(t: Tables, job: Job, run: Run, runs_key: bytes, move_ms: int) -> None:
    """The run of an excluded slot waits on, due at the moved time."""
    run.due_ms = move_ms
    t.put_run(run, runs_key, "waiting", job)
    if job.slot_ms == run.nominal_ms:
        job.next_run_at_ms = move_ms
        t.put_job(job)


def skip(t: Tables, job: Job, run: Run, runs_key: bytes, decision: CalendarClaim, at_ms: int) -> None:
    """The run of an excluded slot, and the excluded slots after it up
    to `decision.until_ms`, as one `skipped` row (reason `calendar`) and
    a `run.skipped` event naming why."""
    run.status = "skipped"
    run.reason = "calendar"
    run.finished_ms = at_ms
    run.due_ms = run.nominal_ms
    run.missed_until_ms = decision.until_ms
    run.missed_count = decision.count
    run.error = decision.why
    t.finish_run(run, runs_key, "waiting", at_ms, job=job)
    t.changes.skipped += 1
    detail: dict[str, object] = {"reason": "calendar", "why": decision.why, "count": decision.count}
    t.append_event(job.owner, Event("run.skipped", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))
