"""Dependencies (docs/semantics.md "Dependencies"): a job whose runs are
made by its parents' ends (`schedule.after`), decided here, in the commit
that records the parent's ending result, so a failover can neither lose
a child's run nor make two.

The edges live in the `deps` table (engine/tables/deps.py): a parent's
dependents in one range of keys, so an ending result of a job with none
costs one lookup, and one with dependents reads at most
`limits.deps_dependents_max` of them. A cycle is refused here as well as
at the edge, so two racing creates or patches cannot close one."""

from tempo import errors, ids, limits
from tempo.engine import keys
from tempo.engine.commands import Claim
from tempo.engine.records import Cause, DepOn, DepState, Event, Job, Missed, Run, Schedule
from tempo.engine.rules import catchup, slots
from tempo.engine.tables import Tables
from tempo.engine.tables import deps as table
from tempo.engine.tables.reads import Reads


def is_after(sched: Schedule) -> bool:
    """Whether a job's schedule is `after` (no clock of its own): its edges
    are in the `deps` table, its record's schedule has no at, cron or every_s."""
    return sched.at_ms is None and sched.cron is None and sched.every_s is None


def counts(on: DepOn, status: str) -> bool:
    """Whether a parent's run that ended `status` counts for `on`: `done`
    for succeeded, `failed` (for good) for failed, either for finished."""
    if on == "finished":
        return status in ("done", "failed")
    return status == ("done" if on == "succeeded" else "failed")


def _loc(found: DepState) -> str:
    return "schedule.after.jobs" if found.after is not None else "schedule.requires.jobs"


# -- edges ---------------------------------------------------------------------


def check(t: Reads, job: Job, found: DepState) -> errors.TempoError | None:
    """The fault of `job`'s edges as `found` names them, or None: each
    parent is a job of the same owner (another owner's is refused as a
    missing one is, so its existence is not told), not the job itself,
    with room for one more dependent; and no cycle closes through them."""
    loc = _loc(found)
    old = set(table.parents_of(table.state(t, job.id)))
    for parent_id in table.parents_of(found):
        if parent_id == job.id:
            return errors.Invalid.at(loc, f"a job cannot depend on itself ({job.id})")
        if t.job(job.owner, parent_id) is None:
            return errors.Invalid.at(loc, f"no job {parent_id}")
        if parent_id not in old and _full(t, parent_id):
            return errors.Invalid.at(
                loc, f"job {parent_id} has {limits.deps_dependents_max} dependents, the most a job may have"
            )
    return _cycle(t, job.id, table.parents_of(found), loc)


def _full(t: Reads, parent_id: str) -> bool:
    return sum(1 for _ in table.dependents(t, parent_id, limits.deps_dependents_max)) >= limits.deps_dependents_max


def _cycle(t: Reads, job_id: str, parents: tuple[str, ...], loc: str) -> errors.TempoError | None:
    """A cycle the edges from `parents` to `job_id` would close: a walk
    upstream from the parents that reaches `job_id`, named parent first
    (`j_C -> j_A -> j_B -> j_C`: j_A runs after j_C, ...). At most
    `limits.deps_walk_max` jobs are visited; a graph bigger is refused."""
    # The job each visited one was reached from (downstream of it).
    came_from: dict[str, str] = dict.fromkeys(parents, job_id)
    queue = list(dict.fromkeys(parents))
    while queue:
        if len(came_from) > limits.deps_walk_max:
            return errors.Invalid.at(loc, f"the jobs upstream are more than {limits.deps_walk_max}: too many to check")
        now = queue.pop(0)
        if now == job_id:
            path = [job_id]
            step = came_from[job_id]
            while step != job_id and len(path) <= limits.deps_walk_max:
                path.append(step)
                step = came_from[step]
            path.append(job_id)
            return errors.Invalid.at(loc, "the edges would close a cycle: " + " -> ".join(path))
        for upstream in table.parents_of(table.state(t, now)):
            if upstream not in came_from:
                came_from[upstream] = now
                queue.append(upstream)
    return None


def set_edges(t: Tables, job: Job, found: DepState | None) -> None:
    """Stores the job's edges as `found` names them (None: it has none),
    moving its rows in its parents' dependents; the ends held for
    parents it keeps stay."""
    old = table.state(t, job.id)
    before, after = set(table.parents_of(old)), set(table.parents_of(found))
    for parent_id in sorted(before - after):
        table.unlink(t, parent_id, job.id)
    for parent_id in sorted(after - before):
        table.link(t, parent_id, job.id)
    if found is not None and old is not None:
        found.ends = [end for end in old.ends if end.job_id in after]
    table.put_state(t, job.id, found)


def drop_history(t: Tables, before_day: int) -> None:
    """A run's `caused_by` goes with the run (docs/operations.md
    "Retention"): when the run's own history row is dropped, never while
    the run is open or its row is kept (`table.drop_causes_before`)."""
    if _used(t):
        table.drop_causes_before(t, before_day)


def delete(t: Tables, job: Job) -> errors.TempoError | None:
    """A job's rows of the `deps` table go with it; `HasDependents` when
    other jobs depend on it (nothing is changed then)."""
    job_key = keys.job_key(job.id)
    if table.has_dependents(t, job_key):
        named = list(table.dependents(t, job.id, limits.deps_shown_max))
        return errors.HasDependents(f"job {job.id} has dependents: {', '.join(named)}; delete or change them first")
    if table.state(t, job.id) is not None:
        set_edges(t, job, None)
        table.drop_causes(t, job.id)
    return None


# -- ends ------------------------------------------------------------------------


def ended(t: Tables, job: Job, run: Run, at_ms: int, job_key: bytes) -> None:
    """A run of `job` ended `done` or `failed` (for good) at `at_ms`, in
    this commit: each dependent it counts for gets its run, or holds the
    end until its other parents' arrive. A job with no dependent costs
    one lookup (none when the `deps` table is empty: a check once per
    transaction). A dependent job that made its `max_runs` runs is
    completed when the last of them ends."""
    assert run.status in ("done", "failed")
    if is_after(job.schedule) and job.schedule.max_runs is not None and job.runs_done >= job.schedule.max_runs:
        _finish_when_idle(t, job, at_ms)
    if not _used(t) or not table.has_dependents(t, job_key):
        return
    cause = Cause(job.id, run.nominal_ms, run.attempt, "done" if run.status == "done" else "failed", at_ms)
    for child_id in list(table.dependents(t, job.id, limits.deps_dependents_max)):
        found = table.state(t, child_id)
        assert found is not None, "a dependent has its state"
        if found.after is not None and counts(found.after.on, run.status):
            _after_end(t, child_id, found, cause, at_ms)
        elif found.requires is not None and counts(found.requires.on, run.status):
            _gate_end(t, child_id, found, cause, at_ms)


def _after_end(t: Tables, child_id: str, found: DepState, cause: Cause, at_ms: int) -> None:
    after = found.after
    assert after is not None
    if not after.all:
        _make(t, t.job_any(child_id), [cause], at_ms)
        return
    ends = [end for end in found.ends if end.job_id != cause.job_id] + [cause]
    if after.within_s is not None:
        ends = [end for end in ends if at_ms - end.ended_ms <= after.within_s * 1000]
    by_parent = {end.job_id: end for end in ends}
    if all(parent in by_parent for parent in after.jobs):
        found.ends = []
        table.put_state(t, child_id, found)
        _make(t, t.job_any(child_id), [by_parent[parent] for parent in after.jobs], at_ms)
        return
    found.ends = ends
    table.put_state(t, child_id, found)


def _make(t: Tables, child: Job, causes: list[Cause], at_ms: int) -> None:
    """The dependent's run for `causes`, due at once plus its jitter
    (fixed by the run ID, as a scheduled run's is): at the first free
    millisecond from `at_ms` on. None for a completed job; a paused
    one's is a missed slot (`paused`); past `end_at` or `max_runs` the
    job is completed instead."""
    if child.state == "completed":
        return
    sched = child.schedule
    if (sched.end_at_ms is not None and at_ms > sched.end_at_ms) or (
        sched.max_runs is not None and child.runs_done >= sched.max_runs
    ):
        slots.complete(t, child, at_ms)
        return
    slot_ms = _free_slot(t, child, at_ms)
    if slot_ms is None:
        return  # `trigger_slot_probe_max` runs made on one millisecond: none is free
    slots.mark_taken(child, slot_ms)
    if child.state == "paused":
        catchup.record_missed(t, child, Missed("paused", slot_ms, slot_ms + 1, 1), at_ms)
        t.put_job(child)
        return
    jitter_ms = ids.jitter_ms(ids.run_id(child.id, slot_ms), child.jitter_s) if child.jitter_s else 0
    due_ms = min(slot_ms + jitter_ms, limits.stored_ms_max)
    t.put_run(Run(child.id, slot_ms, due_ms, "waiting", triggered=True), job=child)
    child.runs_done += 1
    t.put_job(child)
    table.put_causes(t, child.id, slot_ms, causes)
    detail = {"caused_by": [_cause_detail(cause) for cause in causes]}
    t.append_event(child.owner, Event("run.caused", at_ms, child.id, ids.run_id(child.id, slot_ms), detail))


def _free_slot(t: Tables, child: Job, at_ms: int) -> int | None:
    """The first millisecond from `at_ms` (or after the last one taken)
    that holds no run of the job."""
    start = at_ms if child.taken_until_ms is None else max(at_ms, child.taken_until_ms + 1)
    for slot_ms in range(start, start + limits.trigger_slot_probe_max):
        if not t.slot_taken(child.id, slot_ms):
            return slot_ms
    return None


def _finish_when_idle(t: Tables, job: Job, at_ms: int) -> None:
    """A dependent job that made its last run (`max_runs`) is completed
    once none of its runs is open."""
    if job.state != "completed" and not t.open_runs(job.id):
        slots.complete(t, job, at_ms)


def _cause_detail(cause: Cause) -> dict[str, object]:
    return {
        "job_id": cause.job_id, "run_id": ids.run_id(cause.job_id, cause.nominal_ms),
        "attempt": cause.attempt, "status": cause.status,
    }


# -- the gate on a clock schedule (`schedule.requires`) ------------------------------


def gate(t: Tables, job: Job, run: Run, runs_key: bytes, claim: Claim, at_ms: int) -> bool:
    """Whether the job's gate holds back the run of its slot that is being
    claimed: every parent must have had a counting end within `within_s`
    before the slot. Until `wait_s` after the slot the run waits (due at
    that deadline, or at once when the last missing end arrives:
    `_gate_end`); after it, the slot is skipped (reason `dependency`,
    naming the missing parents) and the schedule moves on as a claim
    moves it. A job without a gate costs nothing here but the check
    that the `deps` table holds a row, once per transaction."""
    # Any run of a schedule slot, the job's current one or one its
    # overlap policy buffered while the schedule moved on.
    if run.attempt or run.triggered or run.backfill or not _used(t):
        return False
    found = table.state(t, job.id)
    if found is None or found.requires is None:
        return False
    missing = _missing(found, run.nominal_ms)
    if not missing:
        if found.waiting_slot_ms is not None:
            found.waiting_slot_ms = None
            table.put_state(t, job.id, found)
        return False
    deadline_ms = min(run.nominal_ms + found.requires.wait_s * 1000, limits.stored_ms_max)
    if at_ms < deadline_ms:
        if run.due_ms != deadline_ms:
            run.due_ms = deadline_ms
            t.put_run(run, runs_key, "waiting", job)
            if job.slot_ms == run.nominal_ms:
                job.next_run_at_ms = deadline_ms
                t.put_job(job)
        else:
            # Waiting at its deadline already: a claim that looked ahead
            # (pre-dispatch) took it before it.
            t.send_back(runs_key, run, job)
        found.waiting_slot_ms = run.nominal_ms
        table.put_state(t, job.id, found)
        return True
    found.waiting_slot_ms = None
    table.put_state(t, job.id, found)
    run.status = "skipped"
    run.reason = "dependency"
    run.finished_ms = at_ms
    run.error = "no counting end of " + ", ".join(missing)
    t.finish_run(run, runs_key, "waiting", at_ms, job=job)
    detail = {"reason": "dependency", "missing": missing}
    t.append_event(job.owner, Event("run.skipped", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))
    if slots.hand_on(t, job, run, claim, at_ms):
        t.put_job(job)
    slots.settle(t, job, run, at_ms)
    return True


def _used(t: Tables) -> bool:
    if t.deps_used is None:
        t.deps_used = table.used(t)
    return t.deps_used


def _missing(found: DepState, slot_ms: int) -> list[str]:
    """The parents of a gate with no counting end within `within_s`
    before `slot_ms` (an end after the slot counts: it arrived while the
    slot waited)."""
    gate_of = found.requires
    assert gate_of is not None
    latest = {end.job_id: end.ended_ms for end in found.ends}
    floor_ms = None if gate_of.within_s is None else slot_ms - gate_of.within_s * 1000
    return [
        parent for parent in gate_of.jobs
        if parent not in latest or (floor_ms is not None and latest[parent] < floor_ms)
    ]


def _gate_end(t: Tables, child_id: str, found: DepState, cause: Cause, at_ms: int) -> None:
    """A counting end of a gate's parent: kept (the latest of each
    parent); a slot waiting for it is due at once when no parent is
    missing any more."""
    found.ends = [end for end in found.ends if end.job_id != cause.job_id] + [cause]
    table.put_state(t, child_id, found)
    slot_ms = found.waiting_slot_ms
    if slot_ms is None or _missing(found, slot_ms):
        return
    held = t.slot_run(child_id, slot_ms)
    if held is None or held[1].status != "waiting" or held[1].due_ms <= at_ms:
        return
    runs_key, run = held
    child = t.job_any(child_id)
    run.due_ms = at_ms
    t.put_run(run, runs_key, "waiting", child)
    if child.slot_ms == slot_ms:
        child.next_run_at_ms = at_ms
        t.put_job(child)
