"""The jobs service: checks a request beyond its shape (the checks are in
engine/request_checks.py), stamps it with the time and IDs, turns it into
commands, and answers with records (net/views.py turns those into the API's
views).

It runs on the node that accepted the request; the clock and the random source
are read here, never in `apply`.
"""

import functools
import os
from collections.abc import Callable, Sequence
from typing import TypeGuard, TypeVar

import trio

from tempo import clock, errors, ids, limits, targets
from tempo.config import notify_url_ok
from tempo.engine import calendars as calendar_service
from tempo.engine.commandlog import Answer, CommandLog
from tempo.engine.commands import (
    BackfillJob,
    CancelRun,
    CreateJobs,
    DeleteJob,
    NewJob,
    PatchJob,
    PauseJob,
    ResumeJob,
    TriggerJob,
)
from tempo.engine.plan import (
    Occurrence,
    catch_up,
    cron_rule,
    due_ms,
    first_slot_ms,
    paused_ranges,
    preview_slices,
    preview_timezone,
    slot_after_ms,
    step_over_taken,
)
from tempo.engine.records import (
    Job,
    Notify,
    Run,
    Schedule,
)
from tempo.engine.request_checks import (
    BackfillSpec,
    JobSpec,
    NotifySpec,
    PreviewSpec,
    backfill_range_ms,
    body_digest,
    catchup_record,
    check_json_value,
    check_policy,
    check_request_key,
    check_target,
    deps_record,
    instant_ms,
    json_encoder,
    labels_record,
    overlap_record,
    payloads_pass,
    schedule_record,
)
from tempo.engine.rules.deps import is_after
from tempo.engine.store import Created, Store

T = TypeVar("T")


# -- the service -------------------------------------------------------------------


async def preview_occurrences(body: PreviewSpec, now_ms: int) -> tuple[list[Occurrence], str]:
    """The times of `POST /v1/schedules/preview` and the time zone of their
    wall clock, checked and planned by `plan.preview_slices`, with a
    checkpoint after each slice, so a preview of 1,000 cron times never
    holds the trio thread for more than one slice."""
    sched = schedule_record(body.schedule)
    if is_after(sched):
        raise errors.Invalid.at("schedule.after", "a dependent job's runs have no times to preview: its parents' ends make them")
    after_ms = now_ms if body.after is None else instant_ms(body.after, "after")
    found: list[Occurrence] = []
    for part in preview_slices(sched, after_ms, body.count):
        found += part
        await trio.lowlevel.checkpoint()
    return found, preview_timezone(sched)


async def backfill_slots(job: Job, body: BackfillSpec, now_ms: int) -> list[int]:
    """The slots of `job` in [from, until), ascending, checked: at most
    limits.backfill_runs_max of them, none in the future nor at or after
    the job's scheduled slot (that run and the ones after it are the
    schedule's). Cron slots come in slices with a checkpoint between."""
    if is_after(job.schedule):
        raise errors.Invalid.at("", "a dependent job (schedule.after) has no slots of its own to backfill")
    from_ms, until_ms = backfill_range_ms(job, body, now_ms)
    sched = job.schedule
    if sched.end_at_ms is not None:
        until_ms = min(until_ms, sched.end_at_ms + 1)  # no slot after `end_at`
        if until_ms <= from_ms:
            return []
    cap = limits.backfill_runs_max
    slots: list[int] = []
    if sched.every_s is not None:
        first = slot_after_ms(sched, job.created_at_ms, from_ms, inclusive=True)
        period_ms = sched.every_s * 1000
        count = 0 if first is None or first >= until_ms else (until_ms - 1 - first) // period_ms + 1
        if count > cap:
            raise errors.Invalid.at("until", f"the range holds {count} slots, more than {cap}: split it")
        return [] if first is None else [first + k * period_ms for k in range(count)]
    rule = cron_rule(sched)
    after_ms = from_ms - 1
    while True:
        part = rule.times_ms(after_ms, limits.preview_slice_times)
        slots += [at_ms for at_ms in part if at_ms < until_ms]
        if len(slots) > cap:
            raise errors.Invalid.at("until", f"the range holds more than {cap} slots: split it")
        if len(part) < limits.preview_slice_times or part[-1] >= until_ms:
            return slots
        after_ms = part[-1]
        await trio.lowlevel.checkpoint()


class _JobIds:
    """ULIDs that increase within one millisecond too, so a batch lists in order."""

    def __init__(self, random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self._random_bytes = random_bytes
        self._last_ms = -1
        self._last_random = 0

    def take(self, at_ms: int, count: int) -> list[str]:
        if at_ms > self._last_ms:
            self._last_ms = at_ms
            # 79 random bits: room to count up within the millisecond.
            first = int.from_bytes(self._random_bytes(10), "big") >> 1
        else:
            first = self._last_random + 1
        self._last_random = first + count - 1
        return ids.job_ids_from_int(self._last_ms, first, count)


class Jobs:
    def __init__(
        self,
        store: Store,
        committer: CommandLog,
        *,
        now_ms: Callable[[], int] | None = None,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ):
        self.store = store
        self.committer = committer
        # Scheduler time (clock.py): the node's clock, a test's mock, or
        # else a clock of its own. Job IDs take their time from it too, so
        # newest first stays true after the wall clock steps back.
        self.now_ms = now_ms or clock.Clock().now_ms
        # Job IDs' random bits: injectable, so a seeded simulator replays
        # the same IDs (tests/sim/node_workload.py).
        self._ids = _JobIds(random_bytes)
        # Whether the server sends notifications (a `[notify]` config table):
        # without, a job that asks for them is refused at `notify`.
        self.notify_enabled = False
        # Where a job's http(s) target and notify URL may point (the server
        # sets it from its config; the default allows loopback, as a node
        # without tokens does).
        self.target_policy = targets.TargetPolicy()
        self.calendars = calendar_service.Calendars(store, committer, self.now_ms)

    def new_job(
        self,
        owner: str,
        body: JobSpec,
        at_ms: int,
        *,
        from_msgpack: bool,
        payload_passed: bool = False,
        job_id: str | None = None,
        patching: bool = False,
    ) -> NewJob:
        """Checks a decoded create body and builds its command item.
        `payload_passed`: `payloads_pass` found the payload good already.
        `job_id`: one drawn for it with the rest of its batch. `patching`:
        the body is a job after a patch, whose schedule may end before now
        (an `end_at` in the past completes the job, docs/semantics.md)."""
        check_target(body.target)
        if body.target[0] == "h":  # http:// or https://, which check_target passed
            check_policy(self.target_policy, body.target, "target")
        if body.request_key is not None:
            check_request_key(body.request_key)
        if not payload_passed:
            if from_msgpack:
                check_json_value(body.payload, "payload")
            if len(json_encoder.encode(body.payload)) > limits.payload_bytes_max:
                raise errors.TooLarge.at("payload", f"more than {limits.payload_bytes_max} bytes as JSON")
        sched = schedule_record(body.schedule)
        edges = deps_record(body.schedule)
        catchup = catchup_record(body.catchup, sched)
        backoff_s = body.retry.backoff_s
        notify = None if body.notify is None else self.notify_record(body.notify)
        labels = labels_record(body.labels)
        overlap = overlap_record(body.overlap, sched)
        digest = body_digest(body, sched, notify, catchup, labels, payload_passed=payload_passed, edges=edges)
        # Positional, in Job's field order (a batch makes 1,000): id, owner,
        # name, target, payload, schedule, max_attempts, backoff_s, lease_s,
        # jitter_s, state, created_at_ms, request_key, slot_ms, next_run_at_ms.
        job = Job(
            self._ids.take(at_ms, 1)[0] if job_id is None else job_id,
            owner, body.name, body.target, body.payload, sched, body.retry.max_attempts, backoff_s,
            body.lease_s, body.jitter_s, "active", at_ms, body.request_key, None, None, notify,
        )
        if catchup is not None:
            job.catchup = catchup
        if labels is not None:
            job.labels = labels
        if body.timeout_s is not None:
            job.timeout_s = body.timeout_s
        job.overlap = overlap
        if sched.at_ms is not None and body.jitter_s == 0:
            # `first_slot_ms` and `due_ms` of a one-off without jitter, inline.
            job.slot_ms = sched.at_ms
            job.next_run_at_ms = sched.at_ms if sched.at_ms > at_ms else at_ms
        else:
            _plan_first(job, at_ms, patching=patching)
        # A calendar (docs/semantics.md "Calendars"): engine/calendars.py.
        item = self.calendars.new_job(job, body.schedule.calendar, body.schedule.on_excluded, digest, at_ms)
        item.deps = edges
        return item

    def notify_record(self, body: NotifySpec) -> Notify:
        if not self.notify_enabled:
            raise errors.Invalid.at("notify", "this server sends no notifications: its config has no [notify] table")
        if not notify_url_ok(body.url):
            raise errors.Invalid.at(
                "notify.url", "an http:// or https:// URL of printable ASCII without spaces, with a host"
            )
        check_policy(self.target_policy, body.url, "notify.url")
        return Notify(body.url, tuple(dict.fromkeys(body.events)))

    async def create(
        self,
        owner: str,
        items: Sequence[JobSpec | errors.TempoError],
        *,
        from_msgpack: bool,
        rejected_keys_of: dict[int, str] | None = None,
    ) -> list[Created | errors.TempoError]:
        """Creates the valid items in one command; answers one outcome per item.

        An item that repeats the request key of an earlier item that was
        rejected gets that item's answer (docs/api.md "POST /v1/jobs/batch"):
        "earlier" is the first item with that key. `rejected_keys_of` names
        the request keys of items rejected before they got here (by the
        decoder), by their place in `items`."""
        at_ms = self.now_ms()
        outcomes, new_jobs, places = await self._new_jobs(
            owner, items, at_ms, from_msgpack=from_msgpack, rejected_keys_of=rejected_keys_of or {}
        )
        if new_jobs:
            applied = await self.committer.submit(CreateJobs(at_ms, new_jobs))
            assert _created_each(applied) and len(applied) == len(places)
            for i, outcome in zip(places, applied, strict=True):
                outcomes[i] = outcome
        created = [outcome for outcome in outcomes if outcome is not None]
        assert len(created) == len(outcomes), "every item has its outcome"
        return created

    async def _new_jobs(
        self,
        owner: str,
        items: Sequence[JobSpec | errors.TempoError],
        at_ms: int,
        *,
        from_msgpack: bool,
        rejected_keys_of: dict[int, str],
    ) -> tuple[list[Created | errors.TempoError | None], list[NewJob], list[int]]:
        """`create`'s checks: the outcome of each item rejected (None for the
        others), the new jobs of the valid items, and their places in `items`."""
        outcomes: list[Created | errors.TempoError | None] = [None] * len(items)
        # The problem of each key whose first item was rejected; every key seen.
        rejected_keys: dict[str, errors.TempoError] = {}
        seen_keys: set[str] = set()
        new_jobs: list[NewJob] = []
        places: list[int] = []
        passed = payloads_pass(
            [item.payload for item in items if not isinstance(item, errors.TempoError)], from_msgpack=from_msgpack
        )
        # One ID for every item, drawn at once; a rejected item's is not used.
        job_ids = self._ids.take(at_ms, len(items))
        for i, item in enumerate(items):
            if i and i % limits.batch_slice_items == 0:
                # A batch of 1,000 is checked in slices, so the event loop
                # serves others between them (docs/operations.md
                # "Event-loop lag"); nothing is committed yet.
                await trio.lowlevel.checkpoint()
            key = rejected_keys_of.get(i) if isinstance(item, errors.TempoError) else item.request_key
            if key is not None and key in rejected_keys:
                outcomes[i] = rejected_keys[key]
                continue
            first_of_key = key is not None and key not in seen_keys
            if key is not None:
                seen_keys.add(key)
            if isinstance(item, errors.TempoError):
                outcomes[i] = item
                if key is not None and first_of_key:
                    rejected_keys[key] = item
                continue
            try:
                new_jobs.append(
                    self.new_job(
                        owner, item, at_ms, from_msgpack=from_msgpack, payload_passed=passed, job_id=job_ids[i]
                    )
                )
            except errors.TempoError as exc:
                outcomes[i] = exc
                if key is not None and first_of_key:
                    rejected_keys[key] = exc
                continue
            places.append(i)
        return outcomes, new_jobs, places

    async def pause(
        self, owner: str, job_id: str, *, by: tuple[str, str] | None = None, note: str | None = None
    ) -> Job:
        """Pauses the job; `by`: who asks (owner and role), `note`: theirs."""
        by_owner, by_role = (None, None) if by is None else by
        return _ok(await self.committer.submit(PauseJob(self.now_ms(), owner, job_id, by_owner, by_role, note)), Job)

    async def resume(self, owner: str, job_id: str) -> Job:
        job = self.store.get_job(owner, job_id)
        at_ms = self.now_ms()
        slot_ms = next_due_ms = None
        ran_all = job.schedule.max_runs is not None and job.runs_done >= job.schedule.max_runs
        if is_after(job.schedule):
            # No slot of its own: its parents' ends make its runs.
            return _ok(await self.committer.submit(ResumeJob(at_ms, owner, job_id, None, None)), Job)
        if job.schedule.repeating:
            # Nothing to plan after max_runs (apply decides it again, from the job as replicated).
            slot_ms = None if ran_all else self._slot_not_cancelled(job, job.schedule, slot_after_ms(
                job.schedule, job.created_at_ms, at_ms, inclusive=False))
        else:
            slot_ms = job.slot_ms  # its one run, made anew if retention dropped the cancelled one
        next_due_ms = None if slot_ms is None else due_ms(job, slot_ms, at_ms)
        if job.schedule.repeating:  # where its calendar places it (docs/semantics.md "Calendars")
            next_due_ms = self.calendars.placed_due(job, self.store.calendar_use(job.id), slot_ms, next_due_ms, at_ms)
        # Slots after the job's last run are not the job's: none of them is missed.
        missed = paused_ranges(job, at_ms, slot_ms) if job.state == "paused" and not ran_all else []
        return _ok(await self.committer.submit(ResumeJob(at_ms, owner, job_id, slot_ms, next_due_ms, missed)), Job)

    async def backfill(self, owner: str, job_id: str, body: BackfillSpec) -> tuple[int, int]:
        """`POST /v1/jobs/{id}/backfill`: (runs made, slots that had one)."""
        job = self.store.get_job(owner, job_id)
        at_ms = self.now_ms()
        slots = await backfill_slots(job, body, at_ms)
        made = _ok(await self.committer.submit(BackfillJob(at_ms, owner, job_id, slots)), list)
        return len(made), len(slots) - len(made)

    async def patch(self, job: Job, body: JobSpec, *, from_msgpack: bool, keep_notify: bool = False) -> Job:
        """Changes `job` (as read at its current version) to what `body`, the
        job after the merge patch, asks for: checked as a create would be,
        and its waiting run re-planned from now when the schedule or the
        jitter changed (docs/semantics.md "Changing a job"). A body that
        changes nothing is no change: `job` is answered as it is.
        `keep_notify`: the patch does not name `notify`, which stays the job's.
        `VersionMismatch` when the job changed since it was read."""
        at_ms = self.now_ms()
        item = self.new_job(job.owner, body, at_ms, from_msgpack=from_msgpack, job_id=job.id, patching=True)
        made = item.job
        if keep_notify:
            made.notify = job.notify  # the patch left it out: kept, never checked again
        stored = self.store.deps_state(job.id)
        edges_before = None if stored is None else (stored.after, stored.requires)
        edges_after = None if item.deps is None else (item.deps.after, item.deps.requires)
        old_use = self.store.calendar_use(job.id)
        if _mutable(made) == _mutable(job) and edges_before == edges_after and item.calendar == old_use:
            # The edges and the calendar are read now, not at `job.version`:
            # answered unchanged only when that is still the job's version,
            # else apply refuses it (VersionMismatch), as a change from it.
            current = self.store.get_job_any(job.id)
            if current is not None and current.version == job.version:
                return job
        made.created_at_ms = job.created_at_ms  # an `every_s` grid stays where it was
        replan = made.schedule != job.schedule or made.jitter_s != job.jitter_s
        slot_ms = due = None
        if replan and not is_after(made.schedule):
            sched = made.schedule
            if sched.repeating:
                slot_ms = self._slot_not_cancelled(job, sched, slot_after_ms(
                    sched, job.created_at_ms, at_ms, inclusive=False))
            else:
                slot_ms = sched.at_ms
            due = None if slot_ms is None else due_ms(made, slot_ms, at_ms)
        elif item.calendar != old_use and made.schedule.repeating and job.slot_ms is not None:
            # Another calendar: the waiting run of the slot is placed anew (engine/calendars.py).
            replan, slot_ms, due = True, job.slot_ms, due_ms(made, job.slot_ms, at_ms)
        if made.schedule.repeating:
            due = self.calendars.placed_due(made, item.calendar, slot_ms, due, at_ms, current_ms=job.next_run_at_ms if slot_ms == job.slot_ms else None)
        command = PatchJob(
            at_ms, job.owner, job.id, job.version, made, replan, slot_ms, due, sets_notify=True,
            sets_deps=edges_before != edges_after, deps=item.deps,
        )
        if item.calendar != old_use:
            command.sets_calendar, command.calendar = True, item.calendar
        return _ok(await self.committer.submit(command), Job)

    def _slot_not_cancelled(self, job: Job, sched: Schedule, slot_ms: int | None) -> int | None:
        """The first slot of `sched` from `slot_ms` on whose run its owner
        did not cancel: a resume or a re-plan of a repeating job never
        brings such a run back, it goes on to the next slot (as the cancel
        did). Read here, by the node that makes the command; apply leaves
        a run its owner cancelled as it is."""
        for _ in range(limits.taken_slots_stepped_max):
            if slot_ms is None:
                return None
            run = self.store.get_run_any(job.id, slot_ms)
            if run is None or not run.owner_cancelled:
                return slot_ms
            slot_ms = slot_after_ms(sched, job.created_at_ms, slot_ms, inclusive=False)
        return slot_ms

    async def delete(self, owner: str, job_id: str) -> None:
        _ok(await self.committer.submit(DeleteJob(self.now_ms(), owner, job_id)), type(None))

    async def trigger(self, owner: str, job_id: str) -> Run:
        return _ok(await self.committer.submit(TriggerJob(self.now_ms(), owner, job_id)), Run)

    async def cancel_run(self, owner: str, run_id: str) -> Run:
        """`POST /v1/runs/{id}/cancel` (docs/semantics.md "Cancelling a
        run"): the command, with the next slot of the job's schedule
        decided here when the run is the waiting run of a repeating job's
        slot (apply reads no clock and no time-zone database)."""
        parsed = ids.parse_run_id(run_id)
        if parsed is None:
            raise errors.NotFound(f"no run {run_id}")
        job_id, nominal_ms = parsed
        for _ in range(limits.patch_tries_max):
            job = self.store.get_job(owner, job_id)  # NotFound for another owner's
            at_ms = self.now_ms()
            command = CancelRun(at_ms, owner, job_id, nominal_ms)
            if job.schedule.repeating and job.state == "active" and job.slot_ms == nominal_ms:
                command.planned = True
                nxt = catch_up(job, nominal_ms, at_ms)
                if nxt is not None:
                    command.missed = nxt.missed  # recorded even when no slot is left (rules/runs.py)
                    nxt = step_over_taken(job, nxt, at_ms, functools.partial(self.store.get_run_any, job.id))
                if nxt is not None:
                    command.next_slot_ms, command.next_due_ms = nxt.slot_ms, nxt.due_ms
                    command.missed, command.catchup_until_ms = nxt.missed, nxt.until_ms
                    command.catchup_decided_ms = nxt.decided_ms
            outcome = await self.committer.submit(command)
            if not isinstance(outcome, errors.Conflict):
                return _ok(outcome, Run)
            # The job's schedule moved between the read and the commit: read
            # it again (rare: a change that made this run its slot run).
        raise errors.Conflict(f"job {job_id} kept changing while the cancel was made: send it again")


def _plan_first(job: Job, at_ms: int, *, patching: bool) -> None:
    """A new job's first slot and its due time; a schedule without one is
    400, unless a patch's `end_at` ended it (the patch completes the job)."""
    sched = job.schedule
    if is_after(sched):
        # No slot of its own: its parents' ends make its runs, none after
        # `end_at`. One past already is refused as a clock schedule's is.
        if not patching and sched.end_at_ms is not None and sched.end_at_ms < at_ms:
            raise errors.Invalid.at("schedule.end_at", "end_at is past: no parent's end could make a run")
        return
    job.slot_ms = first_slot_ms(sched, at_ms)
    if job.slot_ms is None:
        if sched.end_at_ms is None:
            raise errors.Invalid.at("schedule", "the schedule has no occurrence left")
        if not patching:
            raise errors.Invalid.at("schedule.end_at", "the schedule has no occurrence up to end_at")
    job.next_run_at_ms = None if job.slot_ms is None else due_ms(job, job.slot_ms, at_ms)


def _mutable(job: Job) -> tuple[object, ...]:
    """What a patch may change of a job."""
    return (
        job.name, job.target, job.payload, job.schedule, job.max_attempts, job.backoff_s, job.lease_s, job.jitter_s,
        job.labels, job.notify, job.timeout_s, job.overlap, job.catchup,
    )


def _created_each(answer: Answer) -> TypeGuard[list[Created | errors.TempoError]]:
    """Whether `answer` is what apply answers a `CreateJobs`: a job created or
    its fault, one per new job."""
    return isinstance(answer, list) and all(isinstance(o, Created | errors.TempoError) for o in answer)


def _ok(outcome: Answer, kind: type[T]) -> T:
    """A single command's outcome, a `kind`; its fault raised."""
    if isinstance(outcome, errors.TempoError):
        raise outcome
    assert isinstance(outcome, kind), f"{type(outcome).__name__} answered where {kind.__name__} was due"
    return outcome
