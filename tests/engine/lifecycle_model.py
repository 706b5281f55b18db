"""A model of the job lifecycle, and a hypothesis state machine that drives
the engine against it (docs/semantics.md "Cancelling a run", "Run
timeouts", "Pause, resume, delete", "Changing a job").

The engine is driven as the leader drives it, with no server and no
thread: commands are made by `Jobs` (create, patch, pause, resume,
trigger, cancel, delete) and by the dispatcher's core (claims, lease
expiries and timeouts), applied to a real store one entry each, and each
entry's changes are fed back to the core before its outcome is handed on
(engine/dispatch.py keeps that order). Time is a fake clock the machine
advances by a rule: scheduler time (`now_ms`) and monotonic time
(`mono_s`) move together, in whole seconds, so lease arithmetic is exact.

The model predicts, rule by rule, every change to the runs it knows: a
run's status, its attempt (the fencing token), whether it was asked to
stop, a retry's due time; the job's version and state. Runs the engine
makes on its own (the next slot's run of a repeating job, a trigger's run)
may appear only in the step that may make them, and only waiting, at
attempt 0. After every step it checks, besides, that an active repeating
job has exactly one waiting scheduled run, at its slot and due at its
`next_run_at` (a paused or completed one none), that an active one-off's
run is open, that the job's outcome counts are the counts of its finished
runs, and the dispatcher core's own invariants. Dependent jobs
(`schedule.after`, docs/semantics.md "Dependencies") of the model's jobs,
on a queue nothing claims, count their runs: every counting end of a
parent makes exactly one run under `all: false`, every complete set of
them exactly one under `all: true`; a parent with dependents is not
deleted (`409 has_dependents`). Gated jobs (`schedule.requires`, "A gate
on a clock schedule") on the model's jobs claim a slot's run only once
every parent had a counting end within `within_s` before the slot, skip
it (`dependency`, naming the missing parents) only `wait_s` after the
slot, and a slot run held for its parents is due the moment the last
end arrives; such a run is never a missed slot: past its next slot it
runs late (or is skipped), and the latest slot that passed runs after it,
the slots between recorded `missed`. `tests/engine/
test_lifecycle_model.py` runs it; `TEMPO_LIFECYCLE_EXAMPLES` and
`TEMPO_LIFECYCLE_STEPS` make it run longer.

Pre-dispatch (docs/semantics.md "Pre-dispatch"): a claim may look up to
10 s ahead, and a rule brings the clock to a few seconds before a run's
due time for it to. The model predicts which runs a claim takes ahead
(no run of a job with an overlap policy; earliest first), their leases
and timeouts counted from the due time, and the stop rule: a cancel,
pause or patch stamped more than 100 ms before a held run's due time
ends it (cancelled), cancels it as a waiting run, or hands it back
waiting with its attempt kept (a patch that moves the schedule cancels
a held run of an old slot but the new slot's); and what `POST
/v1/starts` answers once a held run's stop point has come: `start`
exactly for a run still claimed at the attempt its worker holds and not
asked to stop.

Calendars (docs/semantics.md "Calendars"): jobs may use the owner's one
calendar, which a rule edits (today and tomorrow left out, the weekend,
or nothing), so a waiting run's slot becomes excluded, or excluded no
more, between its planning and its claim. The model does not predict
what the calendar does with a run (skipped, moved, run); it checks, as for
an overlap policy, that the calendar only moves runs as it may (a due run
skipped or moved, never two runs of one slot) and the invariants: one
waiting scheduled run per active job, due at its `next_run_at`.
"""

import datetime as dt
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import msgspec
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tempo import clock, errors, ids, limits
from tempo.engine.commands import ClaimRuns, Command, CreateJobs, ReportResults, Result
from tempo.engine.dispatch_core import DispatchCore, feed_size
from tempo.engine.jobs import Jobs, schedule_record
from tempo.engine.plan import slot_after_ms
from tempo.engine.records import Job, Run
from tempo.engine.store import Store
from tempo.schema import CalendarIn, JobCreate

from .store_hooks import held_rows, job_counts_kept, job_counts_scanned

OWNER = "default"
QUEUES = ("a", "b")
T0_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z
JOBS_MAX = 4



def drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Runs a coroutine of `Jobs` that awaits nothing but the commit (which
    applies at once here) to its end, without an event loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("the engine awaited more than its commit")


class Engine:
    """A store, the dispatcher's core and `Jobs` on a clock of the test's own,
    committing each command as its own entry."""

    def __init__(self, path: str):
        self.store = Store(path, map_bytes=64 << 20)
        self.now_ms = T0_MS
        self.mono_s = 1000.0
        self.core = DispatchCore(self.store, self.now_ms)
        self.core.load(self.now_ms, self.mono_s)
        self.jobs = Jobs(self.store, self, now_ms=lambda: self.now_ms)  # type: ignore[arg-type]  # commits as CommandLog does
        self.index = self.store.applied_index()
        self.next_id = 1

    def close(self) -> None:
        self.store.close()

    async def submit(self, command: Command) -> object:
        return self.commit(command)

    def commit(self, command: Command) -> Any:
        self.index += 1
        [outcome], changes = self.store.apply_commands(self.index, [command])
        self.core.feed(changes, 0, feed_size(changes))
        if changes.stopping:
            self.core.stop_requested(changes.stopping)
        return outcome

    def advance(self, seconds: int) -> None:
        self.now_ms += seconds * 1000
        self.mono_s += seconds

    def create(self, spec: dict[str, Any]) -> Job:
        body = msgspec.json.decode(json.dumps(spec), type=JobCreate)
        job_id = ids.job_ids_from_int(self.now_ms, self.next_id, 1)[0]
        self.next_id += 1
        item = self.jobs.new_job(OWNER, body, self.now_ms, from_msgpack=False, job_id=job_id)
        [created] = self.commit(CreateJobs(self.now_ms, [item]))
        return created.job  # type: ignore[no-any-return]

    def tick(self) -> None:
        """The dispatcher's tick, then apply's decisions on the due runs of
        jobs with an overlap policy, as the driver's loops make them."""
        while self.core.tick(self.now_ms, self.mono_s):
            pass
        while (proposal := self.core.propose_overlap(self.now_ms)) is not None:
            self.core.overlap_applied(proposal, self.commit(proposal.command))

    def claim(self, queues: list[str], runs_max: int, ahead_ms: int = 0) -> list[Run]:
        self.tick()
        core = self.core
        ahead_until_ms = self.now_ms + ahead_ms if ahead_ms else None
        taken = core.take([f"{OWNER}\x00{q}" for q in queues], runs_max, self.mono_s, ahead_until_ms)
        if not taken.runs:
            return []
        proposal = core.propose_claims("w1", taken.runs, self.now_ms, self.mono_s, ahead_ms)
        try:
            if proposal.command is None:
                return []
            return [c.run for c in core.claimed(proposal, self.commit(proposal.command))]
        finally:
            core.settle(proposal)

    def starts(self, runs: list[tuple[str, int, int]]) -> list[bool]:
        """`POST /v1/starts` for held runs (job ID, slot, attempt) whose stop
        point has come, as `Dispatcher.starts_steps` answers it: the
        answers before the barrier, the barrier (an empty claim, committed
        after every earlier command), and the runs whose lease changed
        meanwhile looked at again."""
        core = self.core
        slots: list[tuple[tuple[str, int] | None, int]] = [((job_id, nominal_ms), attempt)
                                                           for job_id, nominal_ms, attempt in runs]
        answers, due_ms = core.may_start(OWNER, slots)
        assert due_ms - limits.predispatch_stop_ms <= self.now_ms, "asked before the stop point"
        changed = core.watch_leases()
        try:
            self.commit(ClaimRuns(self.now_ms, "w1", []))
        finally:
            core.unwatch_leases(changed)
        return core.may_start_again(OWNER, slots, answers, changed)

    def report(self, job_id: str, nominal_ms: int, attempt: int, ok: bool, error: str | None) -> Any:
        result = Result(job_id, nominal_ms, attempt, ok, None, error)
        outcomes = self.commit(ReportResults(self.now_ms, OWNER, [result]))
        self.core.reported(outcomes)
        return outcomes[0]

    def expire(self) -> list[Run]:
        command = self.core.expire(self.now_ms, self.mono_s)
        if command is None:
            return []
        outcomes = self.commit(command)
        self.core.expire_applied(outcomes)
        return [o for o in outcomes if o is not None]

    def runs_of(self, job_id: str) -> dict[int, Run]:
        runs, more = self.store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=10_000, cursor_ms=None)
        assert more is None
        return {r.nominal_ms: r for r in runs if r.status != "missed"}


@dataclass
class MRun:
    """What the model expects of one run."""

    nominal_ms: int
    status: str
    triggered: bool = False
    attempt: int = 0
    ended: int = 0  # attempts ended, each kept in the run's `attempts`
    due_ms: int | None = None  # a waiting run's due time, when the model knows it
    cancel_requested: bool = False
    cancelled_by: str | None = None  # "owner", "pause" or "patch"
    # The claimed attempt: its lease (monotonic deadline, length), its
    # timeout (monotonic instant) and the retry policy it was claimed under.
    deadline_s: float = 0.0
    lease_s: int = 0
    timeout_s: float | None = None
    max_attempts: int = 0
    backoff_s: tuple[int, ...] = ()
    last_error: str | None = None
    # Claimed ahead of its due time (pre-dispatch): that due time, until
    # the attempt ends or is stopped.
    held_due_ms: int | None = None


@dataclass(repr=False)
class MJob:
    id: str
    spec: dict[str, Any]
    created_ms: int
    version: int = 1
    state: str = "active"
    slot_ms: int | None = None  # a one-off's slot (the store's, which the model follows)
    deleted: bool = False
    # Whether the model predicts the job's state and events exactly: not
    # once an overlap policy or an end condition came into it (those it
    # checks by their invariants, and follows the store's word).
    plain: bool = True
    # The overlap policy holds since no run of the job was running when it
    # was set (its invariants are checked then).
    overlap_clean: bool = True
    had_overlap: bool = False  # a policy other than allow, once: released buffered runs may wait
    # Slots' runs buffered under `buffer_all` when a patch made the policy
    # `buffer_one`: they stay buffered (docs/semantics.md "Overlap"), past
    # the new bound, until each is released.
    buffered_kept: set[int] = field(default_factory=set)
    gate: "Gate | None" = None  # `schedule.requires`: a gate on each slot
    runs_done: int = 0  # slots whose run was claimed for the first time
    runs: dict[int, MRun] = field(default_factory=dict)
    events: Counter[str] = field(default_factory=Counter)  # the events the job's changes wrote, by type
    specs: dict[int, dict[str, Any]] = field(default_factory=dict)  # spec at each version
    records: dict[int, Job] = field(default_factory=dict)  # the record as read at each version

    def __repr__(self) -> str:
        return f"MJob({self.id} v{self.version} {self.state} {self.spec})"

    @property
    def repeating(self) -> bool:
        return "at" not in self.spec["schedule"]

    @property
    def overlap(self) -> str:
        return str(self.spec.get("overlap") or "allow")

    @property
    def calendar(self) -> bool:
        return self.spec["schedule"].get("calendar") is not None

    def end_conditions(self) -> bool:
        sched = self.spec["schedule"]
        return sched.get("end_at") is not None or sched.get("max_runs") is not None

    def running(self) -> list[MRun]:
        """Runs that are running (docs/semantics.md "Overlap"): from a claim
        until its attempt ends."""
        return [r for r in self.runs.values() if r.status == "claimed"]

    @property
    def queue(self) -> str:
        return str(self.spec["target"]).removeprefix("queue:")


# -- what the rules draw ---------------------------------------------------------

OFFSETS_S = (-120, -10, 0, 5, 60, 90, 600, 3600)
schedules = st.one_of(
    st.builds(lambda s: ("at", s), st.sampled_from(OFFSETS_S)),
    st.builds(lambda s: ("every", s), st.sampled_from((1, 7, 60, 300))),
    st.builds(lambda s, o: ("every_start", s, o), st.sampled_from((30, 60)), st.sampled_from(OFFSETS_S)),
    st.builds(lambda c: ("cron", c), st.sampled_from(("* * * * *", "*/5 * * * *", "0 * * * *"))),
)
ends = st.one_of(st.none(), st.none(), st.tuples(st.sampled_from(("end_at", "max_runs")), st.sampled_from((1, 2, 3, 30, 600))))
overlaps = st.sampled_from((None, None, "skip", "buffer_one", "buffer_all", "cancel_other"))
calendars = st.sampled_from((None, None, "skip", "next_business_day", "previous_business_day"))
# What the calendar rule leaves out: the days around now, the weekend, nothing.
CALENDAR_EDITS = ("today", "tomorrow", "weekend", "none")
retries = st.one_of(
    st.none(),
    st.builds(lambda n, b: {"max_attempts": n, "backoff_s": b}, st.integers(1, 3),
              st.lists(st.sampled_from((0, 1, 5, 30)), min_size=1, max_size=2)),
)
timeouts = st.sampled_from((None, None, 2, 10, 45))
leases = st.sampled_from((None, 3, 10, 60))
jitters = st.sampled_from((0, 0, 0, 5))
seconds = st.sampled_from((1, 1, 2, 3, 5, 10, 30, 59, 60, 61, 120, 600, 3600))


def _schedule_spec(drawn: tuple[Any, ...], now_ms: int, end: tuple[str, int] | None = None) -> dict[str, Any]:
    """A schedule; `end`: an end condition for a repeating one, `end_at`
    that many seconds from now, or `max_runs`."""
    if drawn[0] == "at":
        # On the second, where triggered runs take their millisecond too.
        return {"at": clock.iso_from_ms(now_ms + drawn[1] * 1000)}
    if drawn[0] == "every":
        sched: dict[str, Any] = {"every_s": drawn[1]}
    elif drawn[0] == "every_start":
        sched = {"every_s": drawn[1], "start_at": clock.iso_from_ms(now_ms + drawn[2] * 1000)}
    else:
        sched = {"cron": drawn[1]}
    if end is not None and end[0] == "end_at":
        sched["end_at"] = clock.iso_from_ms(now_ms + end[1] * 1000)
    elif end is not None:
        sched["max_runs"] = end[1]
    return sched


def _spec(sched: dict[str, Any], retry: dict[str, Any] | None, timeout_s: int | None, lease_s: int | None,
          jitter_s: int, queue: str) -> dict[str, Any]:
    return {
        "target": f"queue:{queue}",
        "schedule": sched,
        "retry": retry or {"max_attempts": limits.attempts_default, "backoff_s": list(limits.backoff_s_default)},
        "timeout_s": timeout_s,
        "lease_s": lease_s or limits.lease_s_default,
        "jitter_s": jitter_s,
    }


def _body(spec: dict[str, Any]) -> JobCreate:
    return msgspec.json.decode(json.dumps(spec), type=JobCreate)


class Fault(AssertionError):
    """A check of the model failed; `name` says which."""


@dataclass
class Dependent:
    """A dependent job of the model's jobs, and the runs its parents' ends
    should have made (`expected`); under `all`, the parents that ended
    since its last run was made."""

    id: str
    parents: tuple[str, ...]
    on: str
    all: bool
    expected: int = 0
    pending: set[str] = field(default_factory=set)

    def counts(self, status: str) -> bool:
        return status in ("done", "failed") if self.on == "finished" else status == (
            "done" if self.on == "succeeded" else "failed")

    def ended(self, parent: str, status: str) -> None:
        if parent not in self.parents or not self.counts(status):
            return
        if not self.all:
            self.expected += 1
            return
        self.pending.add(parent)
        if self.pending >= set(self.parents):
            self.expected += 1
            self.pending.clear()


DEPENDENTS_MAX = 3


@dataclass
class Gate:
    """A gated job's `schedule.requires` (docs/semantics.md "A gate on a
    clock schedule"), and each parent's latest counting end since the
    gate was made (ends are not used up)."""

    parents: tuple[str, ...]
    on: str
    within_s: int | None
    wait_s: int
    latest: dict[str, int] = field(default_factory=dict)
    judged: set[int] = field(default_factory=set)  # slots whose `dependency` skip was checked
    # Slots whose run waited on the gate: a claim found a parent missing
    # before the slot's deadline (`wait_s`), and the run was held, due at it.
    waited: set[int] = field(default_factory=set)

    def ended(self, parent: str, status: str, at_ms: int) -> None:
        if parent in self.parents and Dependent("", (), self.on, False).counts(status):
            self.latest[parent] = at_ms

    def missing(self, slot_ms: int) -> list[str]:
        """The parents with no counting end within `within_s` before the
        slot (an end after it counts: it came while the slot waited)."""
        floor_ms = None if self.within_s is None else slot_ms - self.within_s * 1000
        return [p for p in self.parents if p not in self.latest or (floor_ms is not None and self.latest[p] < floor_ms)]


class LifecycleModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="tempo-lifecycle-")
        self.engine = Engine(self.dir + "/data")
        self.jobs: list[MJob] = []
        self.dependents: list[Dependent] = []
        self.new_ok: dict[str, str] = {}  # job ID -> the kind of run this step may make ("slot", "trigger")
        self.last_result: tuple[str, int, int, bool, str | None, Run] | None = None
        # Each job's slot as the last check read it: the slot as it was
        # before the step (a rule asks it of the store before acting).
        self.slots: dict[str, int | None] = {}
        self.steps = 0
        # Runs handed out ahead of their due time (job ID, slot, attempt, due
        # time) that their worker has not yet asked to start.
        self.handed: list[tuple[str, int, int, int]] = []
        self.edit_calendar("none")

    def teardown(self) -> None:
        event(f"steps: {self.steps // 20 * 20}+")
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------

    def fault(self, name: str, message: str) -> None:
        raise Fault(f"{name}: {message}")

    def live(self) -> list[MJob]:
        return [j for j in self.jobs if not j.deleted]

    def pick_job(self, data: st.DataObject) -> MJob:
        live = self.live()
        return live[data.draw(st.integers(0, len(live) - 1), label="job")]

    def pick_run(self, data: st.DataObject, statuses: tuple[str, ...]) -> tuple[MJob, MRun] | None:
        found = sorted(((j, r) for j in self.live() for r in j.runs.values() if r.status in statuses),
                       key=lambda p: (p[0].id, p[1].nominal_ms))
        if not found:
            return None
        return found[data.draw(st.integers(0, len(found) - 1), label="run")]

    def store_job(self, job: MJob) -> Job:
        return self.engine.store.get_job(OWNER, job.id)

    def end_run(self, job: MJob, run: MRun, status: str) -> None:
        """A run ends `status`: a one-off's scheduled run completes its job."""
        run.status = status
        run.due_ms = None
        for dependent in self.dependents:
            dependent.ended(job.id, status)
        for gated in self.live():
            if gated.gate is not None:
                gated.gate.ended(job.id, status, self.engine.now_ms)
        if status == "failed":
            job.events["run.failed"] += 1
        if status == "cancelled" and run.cancelled_by == "owner":
            job.events["run.cancelled"] += 1
        if not job.repeating and not run.triggered and run.nominal_ms == job.slot_ms:
            job.state = "completed"
            job.events["job.completed"] += 1

    def end_attempt(self, job: MJob, run: MRun, ok: bool, error: str | None, retry_due_ms: int) -> None:
        """The claimed attempt of `run` ended (a result, its lease, its timeout)."""
        run.ended += 1
        run.held_due_ms = None
        run.last_error = error
        if run.cancel_requested and not ok:
            # Asked to stop, it ends cancelled; one that succeeded before
            # the stop reached it is done (docs/semantics.md "Cancelling a run").
            run.cancelled_by = "owner"
            self.end_run(job, run, "cancelled")
        elif ok:
            self.end_run(job, run, "done")
        elif run.attempt < run.max_attempts and job.state == "paused" and not run.triggered:
            run.status = "cancelled"  # a paused job has no run waiting; a resume may bring it back
            run.cancelled_by = "pause"
            run.due_ms = None
        elif run.attempt < run.max_attempts:
            run.status = "waiting"
            run.due_ms = retry_due_ms
        else:
            self.end_run(job, run, "failed")

    def stopped_ahead(self, run: MRun) -> bool:
        """Whether a pause, cancel, delete or patch stamped now stops `run`,
        held ahead of its due time: stamped more than
        `limits.predispatch_stop_ms` before it (docs/semantics.md
        "Pre-dispatch", the stop rule)."""
        return (run.status == "claimed" and run.held_due_ms is not None
                and self.engine.now_ms < run.held_due_ms - limits.predispatch_stop_ms)

    def backoff_due_ms(self, run: MRun) -> int:
        gap_s = run.backoff_s[min(run.attempt - 1, len(run.backoff_s) - 1)]
        return self.engine.now_ms + gap_s * 1000

    def remember(self, job: MJob) -> None:
        job.specs[job.version] = dict(job.spec)
        job.records[job.version] = self.store_job(job)

    # -- rules -------------------------------------------------------------------

    def has_runs(self, *statuses: str) -> bool:
        return any(r.status in statuses for j in self.live() for r in j.runs.values())

    @initialize(sched=schedules, retry=retries, timeout_s=timeouts, lease_s=leases, jitter_s=jitters,
                queue=st.sampled_from(QUEUES))
    def first_job(self, sched: tuple[Any, ...], retry: dict[str, Any] | None, timeout_s: int | None,
                  lease_s: int | None, jitter_s: int, queue: str) -> None:
        self.create(sched, retry, timeout_s, lease_s, jitter_s, queue)

    @rule(what=st.sampled_from(CALENDAR_EDITS))
    def edit_calendar(self, what: str) -> None:
        """The owner's calendar changes: one command, whatever jobs use it."""
        today = dt.datetime.fromtimestamp(self.engine.now_ms / 1000, dt.UTC).date()
        body: dict[str, Any] = {"timezone": "UTC"}
        if what in ("today", "tomorrow"):
            body["exclude_dates"] = [(today + dt.timedelta(days=what == "tomorrow")).isoformat()]
        elif what == "weekend":
            body["exclude_weekdays"] = ["sat", "sun"]
        spec = msgspec.json.decode(json.dumps(body), type=CalendarIn)
        drive(self.engine.jobs.calendars.put(OWNER, "cal", spec, None))
        event(f"calendar: {what}")

    @precondition(lambda self: len(self.live()) < JOBS_MAX)
    @rule(sched=schedules, retry=retries, timeout_s=timeouts, lease_s=leases, jitter_s=jitters,
          queue=st.sampled_from(QUEUES), end=ends, overlap=overlaps, calendar=calendars)
    def create(self, sched: tuple[Any, ...], retry: dict[str, Any] | None, timeout_s: int | None,
               lease_s: int | None, jitter_s: int, queue: str, end: tuple[str, int] | None = None,
               overlap: str | None = None, calendar: str | None = None) -> None:
        spec = _spec(_schedule_spec(sched, self.engine.now_ms, end), retry, timeout_s, lease_s, jitter_s, queue)
        if "at" not in spec["schedule"] and overlap is not None:
            spec["overlap"] = overlap
        if "at" not in spec["schedule"] and calendar is not None:
            spec["schedule"] |= {"calendar": "cal", "on_excluded": calendar}
        try:
            made = self.engine.create(spec)
        except errors.Invalid:
            event("create: refused")
            assert "end_at" in spec["schedule"], "only an end_at with no slot before it is refused"
            return
        job = MJob(made.id, spec, made.created_at_ms, slot_ms=made.slot_ms)
        job.events["job.created"] += 1
        job.plain = job.overlap == "allow" and not job.end_conditions() and not job.calendar
        job.had_overlap = job.overlap != "allow"
        self.jobs.append(job)
        self.new_ok[job.id] = "slot"
        self.remember(job)

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data(), what=st.sampled_from(("schedule", "schedule", "lease_s", "timeout_s", "retry", "target",
                                                "jitter_s", "overlap")), stale=st.booleans())
    def patch(self, data: st.DataObject, what: str, stale: bool) -> None:
        job = self.pick_job(data)
        if what == "overlap" and not job.repeating:
            return
        if job.gate is not None and what in ("schedule", "jitter_s"):
            return  # the gate is checked on a schedule it keeps, with no jitter
        spec = self.patched_spec(data, job, what)
        if stale and job.version > 1:
            self.patch_stale(job, spec)
            return
        try:
            changed = drive(self.engine.jobs.patch(self.store_job(job), _body(spec), from_msgpack=False))
        except errors.Invalid:
            event("patch: refused")
            assert "end_at" in spec["schedule"], "only an end_at with no slot before it is refused"
            return
        if spec == job.spec:
            if changed.version != job.version:
                self.fault("version", f"a patch that changes nothing made version {changed.version}")
            return
        self.patched(job, spec, changed)

    def patched_spec(self, data: st.DataObject, job: MJob, what: str) -> dict[str, Any]:
        """The job's spec with one field drawn anew."""
        spec = dict(job.spec)
        if what == "schedule" and job.repeating and data.draw(st.booleans(), label="end"):
            what = "end"
        strategy = {
            "schedule": schedules.map(lambda drawn: _schedule_spec(drawn, self.engine.now_ms)),
            "end": st.tuples(schedules.filter(lambda d: d[0] != "at"), ends).map(
                lambda drawn: _schedule_spec(drawn[0], self.engine.now_ms, drawn[1])),
            "overlap": overlaps,
            "lease_s": leases.map(lambda lease_s: lease_s or limits.lease_s_default),
            "timeout_s": timeouts,
            "retry": retries.map(lambda retry: _spec({}, retry, None, None, 0, "a")["retry"]),
            "target": st.sampled_from(QUEUES).map(lambda queue: f"queue:{queue}"),
            "jitter_s": jitters,
        }[what]
        drawn = data.draw(strategy, label=what)
        spec["schedule" if what == "end" else what] = drawn
        if "at" in spec["schedule"] or spec.get("overlap") is None:
            spec.pop("overlap", None)  # a one-off has no overlap policy; None is `allow`
        return spec

    def patched(self, job: MJob, spec: dict[str, Any], changed: Job) -> None:
        """The model of a patch that changed the job to `spec`."""
        stopped = []
        for run in job.runs.values():
            if self.stopped_ahead(run):
                # Held ahead and not started: it waits again at its due
                # time, its attempt kept, as the waiting run it was before
                # its claim (which the re-plan below may move).
                event("patch: a run held ahead, stopped")
                assert run.held_due_ms is not None
                run.status, run.due_ms, run.held_due_ms, run.cancel_requested = "waiting", run.held_due_ms, None, False
                stopped.append(run)
        old = job.spec
        job.spec = spec
        job.plain = job.plain and job.overlap == "allow" and not job.end_conditions()
        job.had_overlap = job.had_overlap or job.overlap != "allow"
        if job.overlap != str(old.get("overlap") or "allow"):
            job.overlap_clean = not job.running()
            if old.get("overlap") == "buffer_all" and job.overlap == "buffer_one":
                job.buffered_kept = {r.nominal_ms for r in self.engine.runs_of(job.id).values()
                                     if r.status == "waiting" and r.buffered and r.attempt == 0 and not r.backfill}
            else:
                job.buffered_kept = set()
        job.version += 1
        job.events["job.updated"] += 1
        if changed.version != job.version:
            self.fault("version", f"a patch made version {changed.version}, not {job.version}")
        if old["schedule"] != spec["schedule"] or old["jitter_s"] != spec["jitter_s"]:
            if "at" not in old["schedule"]:
                # A repeating job's slot is the store's, as last checked: a
                # patch that leaves it completed keeps it.
                job.slot_ms = self.store_slot_before_step(job)
            new_slot = self.replan(job)
            if job.state != "paused":
                self.cancel_held_slots(job, stopped, new_slot)
        self.remember(job)

    def cancel_held_slots(self, job: MJob, stopped: list[MRun], new_slot: int | None) -> None:
        """After a patch moved the schedule, the runs of its old slots that
        were held ahead are cancelled, as the waiting run of the slot it
        moves off is, but for the new slot's; a retry (an attempt ran) and
        a triggered run wait on (docs/semantics.md "Pre-dispatch")."""
        for run in stopped:
            if run.status != "waiting" or run.triggered or run.ended:
                continue
            if run.nominal_ms == new_slot:
                run.due_ms = None  # due anew, by the new schedule
                continue
            event("patch: a held run of an old slot cancelled")
            run.status, run.cancelled_by, run.due_ms = "cancelled", "patch", None

    def patch_stale(self, job: MJob, spec: dict[str, Any]) -> None:
        """A patch made from the job as read at an earlier version (what
        `If-Match` with that version asks for, raced by another change):
        nothing changes, and it is a mismatch. (The job's calendar and
        edges are read when the patch is made, not at the version it names,
        so a patch equal to its base is not told from a change of it.)"""
        base = job.version - 1
        try:
            answered = drive(self.engine.jobs.patch(job.records[base], _body(spec), from_msgpack=False))
        except errors.Invalid:
            assert "end_at" in spec["schedule"], "only an end_at with no slot before it is refused"
            return
        except errors.VersionMismatch:
            event("patch: version mismatch")
            return
        self.fault("version", f"a patch from version {base} was answered at {job.version}: {answered}")

    def replan(self, job: MJob) -> int | None:
        """The schedule or the jitter changed: the scheduled waiting run
        moves to the new slot (docs/semantics.md "Changing a job"),
        which it answers."""
        now_ms = self.engine.now_ms
        sched = schedule_record(_body(job.spec).schedule)
        if sched.repeating:
            new_slot = self.slot_not_cancelled(job, slot_after_ms(sched, job.created_ms, now_ms, inclusive=False))
        else:
            new_slot = sched.at_ms
        if job.state == "paused":
            if not job.repeating:
                job.slot_ms = new_slot
            return new_slot
        if job.state == "completed":
            if new_slot is None or new_slot <= now_ms:
                return new_slot
            job.state = "active"
        else:
            old_slot = self.store_slot_before_step(job)
            old_run = job.runs.get(old_slot) if old_slot is not None else None
            if old_slot != new_slot and old_run is not None and old_run.status == "waiting" and not old_run.triggered:
                old_run.status = "cancelled"
                old_run.cancelled_by = "patch"
                old_run.due_ms = None
        if not job.repeating:
            job.slot_ms = new_slot
        if new_slot is None:
            job.state = "completed"
            return None
        self.plant(job, new_slot, "patch")
        return new_slot

    def slot_not_cancelled(self, job: MJob, slot_ms: int | None) -> int | None:
        """The first slot from `slot_ms` on whose run its owner did not
        cancel: a resume or a re-plan never brings such a run back."""
        sched = schedule_record(_body(job.spec).schedule)
        while slot_ms is not None:
            there = job.runs.get(slot_ms)
            if there is None or there.cancelled_by != "owner":
                break
            slot_ms = slot_after_ms(sched, job.created_ms, slot_ms, inclusive=False)
        return slot_ms

    def store_slot_before_step(self, job: MJob) -> int | None:
        # The job's slot as the model last checked it (`check` keeps it).
        return self.slots.get(job.id)

    def plant(self, job: MJob, slot_ms: int, how: str) -> None:
        """The job's scheduled run is to wait at `slot_ms`: the run there, or a new one."""
        there = job.runs.get(slot_ms)
        event(f"plant ({how}): {'new' if there is None else there.status}")
        if there is not None and there.status in ("waiting", "claimed", "cancelled"):
            there.triggered = False  # a run triggered on the very slot is the slot's run now
        if there is None:
            self.new_ok[job.id] = "slot"
        elif there.status == "waiting":
            if there.attempt == 0:
                there.due_ms = None  # re-planned: due by the new jitter
        elif there.status in ("done", "failed") and not job.repeating and how == "patch":
            # A one-off's `at` on a run that ended: it has run, and is completed.
            job.state = "completed"
            job.events["job.completed"] += 1
        elif there.status == "cancelled":
            assert there.cancelled_by != "owner" or not job.repeating, f"{how} planted on a run its owner cancelled"
            there.status = "waiting"
            there.cancelled_by = None
            there.due_ms = None

    def has_due(self, ahead_ms: int = 0) -> bool:
        until_ms = self.engine.now_ms + ahead_ms
        return any(r.status == "waiting" and r.due_ms is not None and r.due_ms <= until_ms
                   for j in self.live() for r in j.runs.values())

    @precondition(lambda self: self.has_due(limits.claim_ahead_ms_max))
    @rule(runs_max=st.sampled_from((1, 2, 100)), queues=st.sampled_from((["a"], ["b"], ["a", "b"])),
          ahead_s=st.sampled_from((0, 0, 1, 5, 10)))
    def claim(self, runs_max: int, queues: list[str], ahead_s: int = 0) -> None:
        """A claim; with `ahead_s`, it also takes runs due within that
        many seconds (pre-dispatch, docs/semantics.md "Pre-dispatch"),
        but no run of a job with an overlap policy."""
        engine = self.engine
        now_ms = engine.now_ms
        due = {(j.id, r.nominal_ms) for j in self.live() if j.queue in queues
               for r in j.runs.values() if r.status == "waiting" and self.due_of(j, r) <= now_ms}
        coming = {(j.id, r.nominal_ms) for j in self.live() if j.queue in queues and j.overlap == "allow"
                  for r in j.runs.values()
                  if r.status == "waiting" and now_ms < self.due_of(j, r) <= now_ms + ahead_s * 1000}
        # A job's overlap policy, or its calendar, may hold its due runs back.
        held = {(j.id, r.nominal_ms) for j in self.live() if j.overlap != "allow" or j.calendar or j.gate
                for r in j.runs.values()}
        slots = dict(self.slots)
        slot_runs = (due | coming) & {(j.id, slots.get(j.id)) for j in self.live()}
        superseded = self.superseded(slot_runs)
        late = self.waited_late(slot_runs)
        for job in self.live():
            if not job.plain:
                self.new_ok[job.id] = "slot"  # an overlap decision hands the schedule on as a claim does
        claimed = engine.claim(queues, runs_max, ahead_s * 1000)
        got = [(r.job_id, r.nominal_ms) for r in claimed]
        event(f"claim: {min(len(got), 3)} runs")
        if coming & set(got):
            event("claim: runs ahead of their due time")
        if not set(got) <= due | coming:
            self.fault("claim", f"claimed {sorted(set(got) - due - coming)}, not waiting and due in {queues}"
                       + (f" or within {ahead_s} s" if ahead_s else ""))
        if len(set(got)) != len(got):
            self.fault("claim", "a run claimed twice in one claim")
        # A run its calendar moved runs when it falls due, whatever slots passed.
        calendar_jobs = {j.id for j in self.live() if j.calendar}
        if {(job_id, slot) for job_id, slot in superseded & set(got) if job_id not in calendar_jobs}:
            self.fault("claim", f"runs {sorted(superseded & set(got))} handed out after their next slot passed")
        missed = self.missed_slot_runs(superseded - set(got))
        if runs_max >= len(due | coming) and (due | coming) - set(got) - held - missed:
            # A job's overlap policy may hold its due runs back.
            self.fault("claim", f"due runs {sorted((due | coming) - set(got) - held - missed)} were not handed out")
        for run in claimed:
            self.claimed(run, slots)
        self.check_gates_claimed(claimed)
        if runs_max >= len(due | coming):  # else some were not reached
            self.gates_held((due | coming) - set(got))
        self.check_late_gated(late)

    def check_gates_claimed(self, claimed: list[Run]) -> None:
        """A gated job's slot run is claimed only when every parent had a
        counting end within `within_s` before the slot, by now."""
        for run in claimed:
            job = next(j for j in self.jobs if j.id == run.job_id)
            if job.gate is None or run.triggered or run.backfill or run.attempt != 1:
                continue
            missing = job.gate.missing(run.nominal_ms)
            event("gate: a slot claimed")
            if missing:
                self.fault("gate", f"slot {run.nominal_ms} of gated job {job.id} claimed without ends of {missing}")

    def gates_held(self, passed_over: set[tuple[str, int]]) -> None:
        """Slot runs a claim reached and left for their gate, parents
        missing and the gate's `wait_s` not over: they wait on it, also one
        reached ahead of its slot (pre-dispatch), which `check_gates`, by
        the run's due time, does not see."""
        now_ms = self.engine.now_ms
        for job_id, nominal_ms in passed_over:
            job = next(j for j in self.jobs if j.id == job_id)
            run = job.runs.get(nominal_ms)
            if (job.gate is None or run is None or run.attempt or run.triggered
                    or not job.gate.missing(nominal_ms) or now_ms >= nominal_ms + job.gate.wait_s * 1000):
                continue
            event("gate: a slot a claim reached waits for its parents")
            job.gate.waited.add(nominal_ms)

    def superseded(self, slot_runs: set[tuple[str, int | None]]) -> set[tuple[str, int]]:
        """The due slot runs (job ID, slot) of active repeating jobs whose
        next slot has passed too: the catch-up policy (the default, `latest`,
        here) decides on them with the slots after them, and never hands
        them out (docs/semantics.md "Catch-up after missed slots"). A run
        that waited on its gate is not one of them: it is never a missed
        slot ("A gate on a clock schedule"; `waited_late`)."""
        return {(job_id, slot_ms) for job_id, slot_ms, waited in self.passed_slot_runs(slot_runs) if not waited}

    def waited_late(self, slot_runs: set[tuple[str, int | None]]) -> set[tuple[str, int]]:
        """The due slot runs that waited on their gate and whose next slot
        has passed: the gate decides on each (it runs, late, or is skipped
        for its dependency), and catch-up on the slots after it
        (`check_late_gated`)."""
        return {(job_id, slot_ms) for job_id, slot_ms, waited in self.passed_slot_runs(slot_runs) if waited}

    def passed_slot_runs(self, slot_runs: set[tuple[str, int | None]]) -> list[tuple[str, int, bool]]:
        """The due slot runs of active repeating jobs with the default
        catch-up whose next slot has passed, each with whether it waited
        on its gate."""
        found = []
        for job_id, slot_ms in slot_runs:
            job = next(j for j in self.jobs if j.id == job_id)
            run = job.runs.get(slot_ms) if slot_ms is not None else None
            if slot_ms is None or run is None or run.attempt or run.triggered or job.state != "active":
                continue
            stored = self.engine.store.get_job(OWNER, job_id)
            nxt = slot_after_ms(stored.schedule, stored.created_at_ms, slot_ms, inclusive=False)
            if stored.catchup is None and nxt is not None and nxt <= self.engine.now_ms:
                found.append((job_id, slot_ms, job.gate is not None and slot_ms in job.gate.waited))
        return found

    def check_late_gated(self, late: set[tuple[str, int]]) -> None:
        """A run that waited on its gate past its next slot, claimed (late)
        or skipped for its dependency by this claim: the slots that passed
        while it waited are decided by catch-up (`latest`): the latest of
        them runs, due at once, and those between are one `missed` range,
        reason `policy` (docs/semantics.md "A gate on a clock schedule"):
        its event, and its row unless a triggered run holds its first slot
        ("Catch-up after missed slots")."""
        now_ms = self.engine.now_ms
        for job_id, slot_ms in late:
            job = next(j for j in self.jobs if j.id == job_id)
            run = self.engine.store.get_run_any(job_id, slot_ms)
            if run is None or run.status not in ("claimed", "skipped") or job.had_overlap:
                continue  # not reached by this claim (`runs_max`), or held back by an overlap policy
            stored = self.engine.store.get_job(OWNER, job_id)
            nxt = slot_after_ms(stored.schedule, stored.created_at_ms, slot_ms, inclusive=False)
            assert nxt is not None and nxt <= now_ms
            latest = nxt
            while (after := slot_after_ms(stored.schedule, stored.created_at_ms, latest, inclusive=False)) is not None \
                    and after <= now_ms:
                latest = after
            if latest in job.runs and job.runs[latest].triggered:
                continue  # a trigger took the latest slot: the schedule steps over it
            event(f"gate: a run that waited past its next slot, {run.status}")
            if (stored.slot_ms, stored.next_run_at_ms) != (latest, now_ms):
                self.fault("gate", f"after slot {slot_ms} waited on its gate to {now_ms}, job {job_id} has slot "
                           f"{stored.slot_ms} due {stored.next_run_at_ms}, not the latest passed slot {latest}")
            ranges = [(ev.detail["missed_from"], ev.detail["missed_until"])
                      for _, ev in self.engine.store.list_events(OWNER, 0, 1 << 20)
                      if ev.job_id == job_id and ev.type == "run.missed" and ev.at_ms == now_ms
                      and ev.detail["reason"] == "policy"]
            if latest > nxt and (clock.iso_from_ms(nxt), clock.iso_from_ms(latest)) not in ranges:
                self.fault("gate", f"after slot {slot_ms} waited on its gate, no run.missed event of "
                           f"{nxt}..{latest}: {ranges}")
            # The range's row, at its first slot, unless a triggered run
            # holds that slot (the range is then the event alone).
            rows, _ = self.engine.store.list_runs(OWNER, job_id, since_ms=nxt, until_ms=latest, limit=100,
                                                  cursor_ms=None)
            seen = [(r.nominal_ms, r.status, r.reason, r.missed_until_ms) for r in rows if not r.triggered]
            taken = any(r.nominal_ms == nxt for r in rows if r.triggered)
            want = [] if latest == nxt or taken else [(nxt, "missed", "policy", latest)]
            if seen != want:
                self.fault("gate", f"after slot {slot_ms} waited on its gate, the slots it passed are {seen}, "
                           f"not {want}")

    def missed_slot_runs(self, superseded: set[tuple[str, int]]) -> set[tuple[str, int]]:
        """Those of `superseded` that became a `missed` row, which the model
        drops (the engine lists no missed row as a run); the schedule went
        on to the next run, made in the same command."""
        found = set()
        for job_id, slot_ms in superseded:
            runs, _ = self.engine.store.list_runs(OWNER, job_id, since_ms=slot_ms, until_ms=slot_ms + 1, limit=1,
                                                  cursor_ms=None)
            if runs and runs[0].status == "missed" and runs[0].reason == "policy":
                job = next(j for j in self.jobs if j.id == job_id)
                del job.runs[slot_ms]
                self.new_ok[job_id] = "slot"
                event("claim: a waiting run that missed its next slot is recorded missed")
                found.add((job_id, slot_ms))
        return found

    def claimed(self, run: Run, slots: dict[str, int | None]) -> None:
        """The model of one run a claim took."""
        engine = self.engine
        job = next(j for j in self.jobs if j.id == run.job_id)
        mrun = job.runs[run.nominal_ms]
        mrun.status = "claimed"
        mrun.attempt += 1
        mrun.due_ms = None
        mrun.cancel_requested = False
        # Claimed ahead of its due time, its lease and its timeout count
        # from then.
        mrun.held_due_ms = run.due_ms if run.due_ms > engine.now_ms else None
        start_s = engine.mono_s + max(0, run.due_ms - engine.now_ms) / 1000
        mrun.lease_s = job.spec["lease_s"]
        mrun.deadline_s = start_s + mrun.lease_s
        timeout_s = job.spec["timeout_s"]
        mrun.timeout_s = None if timeout_s is None else start_s + timeout_s
        if mrun.timeout_s is not None:
            mrun.deadline_s = min(mrun.deadline_s, mrun.timeout_s)  # a lease never outlives the timeout
        mrun.max_attempts = job.spec["retry"]["max_attempts"]
        mrun.backoff_s = tuple(job.spec["retry"]["backoff_s"])
        if run.attempt != mrun.attempt:
            self.fault("attempt", f"run {run.nominal_ms} claimed at attempt {run.attempt}, not {mrun.attempt}")
        if job.repeating and mrun.attempt == 1 and not mrun.triggered:
            job.runs_done += 1  # a slot's run claimed for the first time (schedule.max_runs)
        if job.repeating and job.state == "active" and slots.get(job.id) == run.nominal_ms and not mrun.triggered:
            self.new_ok[job.id] = "slot"  # the next slot's run, in the same command
        if mrun.held_due_ms is not None:
            self.handed.append((job.id, run.nominal_ms, run.attempt, mrun.held_due_ms))

    def due_of(self, job: MJob, run: MRun) -> int:
        assert run.due_ms is not None, "the model learns every waiting run's due time"
        return run.due_ms

    def stop_point_passed(self) -> bool:
        return any(due_ms - limits.predispatch_stop_ms <= self.engine.now_ms for *_, due_ms in self.handed)

    @precondition(lambda self: self.stop_point_passed())
    @rule(data=st.data())
    def starts(self, data: st.DataObject) -> None:
        """A worker asks whether to start runs it holds ahead, once their
        stop point came (`POST /v1/starts`): `start` exactly for those
        still claimed at the attempt it holds and not asked to stop."""
        now_ms = self.engine.now_ms
        ready = [h for h in self.handed if h[3] - limits.predispatch_stop_ms <= now_ms]
        asked = data.draw(st.lists(st.sampled_from(ready), min_size=1, max_size=len(ready), unique=True), label="asked")
        self.handed = [h for h in self.handed if h not in asked]
        answers = self.engine.starts([(job_id, nominal_ms, attempt) for job_id, nominal_ms, attempt, _ in asked])
        for (job_id, nominal_ms, attempt, _), start in zip(asked, answers, strict=True):
            job = next(j for j in self.jobs if j.id == job_id)
            run = job.runs.get(nominal_ms)
            want = (not job.deleted and run is not None and run.status == "claimed" and run.attempt == attempt
                    and not run.cancel_requested)
            event(f"starts: {'start' if want else 'stop'}")
            if start != want:
                self.fault("starts", f"run {nominal_ms} of job {job_id} at attempt {attempt}: "
                           f"{'start' if start else 'stop'}, the model says {'start' if want else 'stop'}")

    @precondition(lambda self: self.last_result is not None)
    @rule()
    def result_again(self) -> None:
        """The last result, sent again: harmless while the run is as it left it."""
        engine = self.engine
        if self.last_result is not None:
            job_id, nominal_ms, attempt, was_ok, error, answered = self.last_result
            job = next(j for j in self.jobs if j.id == job_id)
            run = job.runs[nominal_ms]
            if job.deleted or run.attempt != attempt or run.status != answered.status or run.cancelled_by == "owner":
                return  # the run moved on since (claimed again, cancelled, paused)
            again = engine.report(job_id, nominal_ms, attempt, was_ok, error)
            if not isinstance(again, Run) or again.status != answered.status:
                self.fault("result", f"the same result again answered {again!r}, not the run as it was")

    @precondition(lambda self: any(r.attempt >= 2 for j in self.live() for r in j.runs.values()))
    @rule(data=st.data(), ok=st.booleans())
    def result_stale(self, data: st.DataObject, ok: bool) -> None:
        """A result of an attempt that is not the run's current one is fenced off."""
        picked = self.pick_run(data, ("claimed", "waiting", "done", "failed", "cancelled"))
        if picked is None or picked[1].attempt < 2:
            return
        job, run = picked
        answer = self.engine.report(job.id, run.nominal_ms, run.attempt - 1, ok, None)
        event("result: stale")
        if not isinstance(answer, errors.StaleAttempt):
            self.fault("fencing", f"a result of attempt {run.attempt - 1} of a run at {run.attempt}: {answer!r}")

    @precondition(lambda self: self.has_runs("claimed"))
    @rule(data=st.data(), ok=st.booleans())
    def result(self, data: st.DataObject, ok: bool) -> None:
        engine = self.engine
        picked = self.pick_run(data, ("claimed",))
        if picked is None:
            return
        job, run = picked
        error = None if ok else "boom"
        retry_due_ms = self.backoff_due_ms(run)
        answer = engine.report(job.id, run.nominal_ms, run.attempt, ok, error)
        if run.timeout_s is not None and run.timeout_s <= engine.mono_s:
            # The attempt ended at its timeout (both clocks move together
            # here); the lease check records it.
            if not isinstance(answer, errors.StaleAttempt):
                self.fault("timeout", f"a result after the attempt's timeout answered {answer!r}")
            return
        if not isinstance(answer, Run):
            self.fault("result", f"the result of the current attempt answered {answer!r}")
            return
        self.end_attempt(job, run, ok, error, retry_due_ms)
        event(f"result: ended {run.status}")
        self.last_result = (job.id, run.nominal_ms, run.attempt, ok, error, answer)

    @precondition(lambda self: self.has_runs("claimed"))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        picked = self.pick_run(data, ("claimed",))
        if picked is None:
            return
        job, run = picked
        engine = self.engine
        expires_ms, cancel = engine.core.beat(OWNER, ids.run_id(job.id, run.nominal_ms), run.attempt,
                                              engine.now_ms, engine.mono_s)
        if run.cancel_requested:
            if cancel != "requested":
                self.fault("cancel", f"a heartbeat of a run asked to stop answered {cancel!r}")
            return
        if run.timeout_s is not None and run.timeout_s <= engine.mono_s:
            if (expires_ms, cancel) != (None, "timeout"):
                self.fault("timeout", f"a heartbeat at or after the timeout answered {(expires_ms, cancel)}")
            return
        # Before a held run's due time, to its due time and `lease_s` after.
        ahead_s = 0.0 if run.held_due_ms is None else max(0, run.held_due_ms - engine.now_ms) / 1000
        deadline_s = engine.mono_s + ahead_s + run.lease_s
        if run.timeout_s is not None:
            deadline_s = min(deadline_s, run.timeout_s)
        run.deadline_s = deadline_s
        want_ms = engine.now_ms + round(max(0.0, deadline_s - engine.mono_s) * 1000)
        if (expires_ms, cancel) != (want_ms, None):
            self.fault("lease", f"a heartbeat answered {(expires_ms, cancel)}, not {(want_ms, None)}")

    @precondition(lambda self: self.has_runs("claimed"))
    @rule()
    def expire(self) -> None:
        """The lease check: leases and timeouts run out by now end their attempts."""
        engine = self.engine
        mono_s = engine.mono_s
        ending = {(j.id, r.nominal_ms): (j, r) for j in self.live() for r in j.runs.values()
                  if r.status == "claimed" and r.deadline_s <= mono_s}
        ended = engine.expire()
        got = {(r.job_id, r.nominal_ms) for r in ended}
        if got != set(ending):
            self.fault("lease", f"the lease check ended {sorted(got)}, not {sorted(ending)}")
        for key in sorted(got & set(ending)):
            job, run = ending[key]
            timed_out = run.timeout_s is not None and run.timeout_s <= mono_s
            event(f"expire: {'timeout' if timed_out else 'lease'}, asked to stop: {run.cancel_requested}")
            if timed_out:
                self.end_attempt(job, run, False, "timeout", self.backoff_due_ms(run))
            else:
                self.end_attempt(job, run, False, "lease expired", engine.now_ms)

    @precondition(lambda self: self.has_runs("waiting", "claimed", "done", "failed", "cancelled"))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        picked = self.pick_run(data, ("waiting", "claimed", "done", "failed", "cancelled"))
        if picked is None:
            return
        job, run = picked
        slot = self.slots.get(job.id)
        stopped = self.stopped_ahead(run)
        try:
            answer: object = drive(self.engine.jobs.cancel_run(OWNER, ids.run_id(job.id, run.nominal_ms)))
        except errors.TempoError as exc:
            answer = exc
        event(f"cancel: a {run.status} run")
        if run.status in ("done", "failed"):
            if not isinstance(answer, errors.RunFinished):
                self.fault("cancel", f"a cancel of a {run.status} run answered {answer!r}")
            return
        if not isinstance(answer, Run):
            self.fault("cancel", f"a cancel of a {run.status} run answered {answer!r}")
            return
        if stopped:
            # Held ahead and not started: it ends here, never to start.
            event("cancel: a run held ahead, stopped")
            run.held_due_ms = None
            run.cancelled_by = "owner"
            self.end_run(job, run, "cancelled")
        elif run.status == "claimed":
            run.cancel_requested = True
        elif run.status == "waiting":
            run.cancelled_by = "owner"
            if job.repeating and job.state == "active" and not run.triggered and slot == run.nominal_ms:
                self.new_ok[job.id] = "slot"  # the schedule goes on
            self.end_run(job, run, "cancelled")

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def pause(self, data: st.DataObject) -> None:
        job = self.pick_job(data)
        drive(self.engine.jobs.pause(OWNER, job.id))
        if job.state != "active":
            return
        job.state = "paused"
        job.events["job.paused"] += 1
        for run in job.runs.values():
            if run.status == "waiting" or self.stopped_ahead(run):
                if run.status == "claimed":
                    event("pause: a run held ahead, stopped")
                run.status = "cancelled"
                run.cancelled_by = "pause"
                run.due_ms = None
                run.held_due_ms = None

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        job = self.pick_job(data)
        drive(self.engine.jobs.resume(OWNER, job.id))
        if job.state != "paused":
            return
        job.state = "active"
        job.events["job.resumed"] += 1
        now_ms = self.engine.now_ms
        if job.repeating:
            sched = schedule_record(_body(job.spec).schedule)
            slot = self.slot_not_cancelled(job, slot_after_ms(sched, job.created_ms, now_ms, inclusive=False))
        else:
            slot = job.slot_ms
        if slot is None:
            job.state = "completed"
            return
        there = job.runs.get(slot)
        if there is None or there.status == "cancelled":
            self.plant(job, slot, "resume")

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def trigger(self, data: st.DataObject) -> None:
        job = self.pick_job(data)
        run = drive(self.engine.jobs.trigger(OWNER, job.id))
        job.runs[run.nominal_ms] = MRun(run.nominal_ms, "waiting", triggered=True, due_ms=run.due_ms)
        if run.nominal_ms < self.engine.now_ms or not run.triggered:
            self.fault("trigger", f"a triggered run {run!r}")

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data(), now=st.integers(0, 3))
    def delete(self, data: st.DataObject, now: int) -> None:
        if now:
            return  # a delete one time in four: it ends a job's story
        job = self.pick_job(data)
        if any(job.id in d.parents for d in self.dependents) or any(
                j.gate is not None and job.id in j.gate.parents for j in self.live() if j is not job):
            try:
                drive(self.engine.jobs.delete(OWNER, job.id))
            except errors.HasDependents:
                return
            self.fault("delete", f"job {job.id} was deleted from under its dependents")
        drive(self.engine.jobs.delete(OWNER, job.id))
        job.deleted = True
        job.events["job.deleted"] += 1

    @precondition(lambda self: bool(self.live()) and len(self.live()) < JOBS_MAX)
    @rule(data=st.data(), sched=st.sampled_from((("every", 1), ("every", 7), ("every", 60), ("cron", "* * * * *"))),
          on=st.sampled_from(("succeeded", "failed", "finished")), wait_s=st.sampled_from((0, 5, 60)),
          within_s=st.sampled_from((None, 10, 120)), queue=st.sampled_from(QUEUES))
    def create_gated(self, data: st.DataObject, sched: tuple[Any, ...], on: str, wait_s: int, within_s: int | None,
                     queue: str) -> None:
        """A repeating job gated on one or two of the model's jobs
        (`schedule.requires`): each of its slots runs only once every
        parent had a counting end, waits for them up to `wait_s`, and is
        skipped (reason `dependency`) after."""
        live = self.live()
        first = data.draw(st.integers(0, len(live) - 1), label="parent")
        second = data.draw(st.integers(0, len(live) - 1), label="second parent")
        parents = tuple(dict.fromkeys((live[first].id, live[second].id)))
        spec = _spec(_schedule_spec(sched, self.engine.now_ms), None, None, None, 0, queue)
        spec["schedule"]["requires"] = {"jobs": list(parents), "on": on, "wait_s": wait_s, "within_s": within_s}
        made = self.engine.create(spec)
        job = MJob(made.id, spec, made.created_at_ms, slot_ms=made.slot_ms, plain=False)
        job.gate = Gate(parents, on, within_s, wait_s)
        job.events["job.created"] += 1
        self.jobs.append(job)
        self.new_ok[job.id] = "slot"
        self.remember(job)
        event(f"create: gated on {len(parents)}")

    def check_gates(self) -> None:
        """A gated job's slot is skipped (`dependency`) only after
        `wait_s`, naming the parents with no counting end; a slot run held
        for its parents is due at once when the last end arrives."""
        now_ms = self.engine.now_ms
        for job in self.live():
            gate = job.gate
            if gate is None:
                continue
            for nominal_ms, run in self.engine.runs_of(job.id).items():
                if run.status == "skipped" and run.reason == "dependency" and nominal_ms not in gate.judged:
                    gate.judged.add(nominal_ms)
                    event("gate: a slot skipped")
                    missing = gate.missing(nominal_ms)
                    if now_ms < nominal_ms + gate.wait_s * 1000 or not missing:
                        self.fault("gate", f"slot {nominal_ms} skipped at {now_ms}, missing {missing}")
                    if run.error != "no counting end of " + ", ".join(missing):
                        self.fault("gate", f"slot {nominal_ms} skipped with error {run.error!r}, missing {missing}")
                held = (run.status == "waiting" and run.attempt == 0 and not run.triggered and not run.backfill
                        and not run.buffered and nominal_ms <= now_ms < run.due_ms)
                if held:
                    event("gate: a slot waits for its parents")
                    gate.waited.add(nominal_ms)
                if held and job.state == "active" and not gate.missing(nominal_ms):
                    self.fault("gate", f"slot {nominal_ms} waits (due {run.due_ms}) though every parent ended")

    @precondition(lambda self: bool(self.live()) and len(self.dependents) < DEPENDENTS_MAX)
    @rule(data=st.data(), on=st.sampled_from(("succeeded", "failed", "finished")), all_=st.booleans())
    def depend(self, data: st.DataObject, on: str, all_: bool) -> None:
        """A dependent of one or two of the model's jobs, on a queue no
        claim of the model takes: its runs stay waiting, and are counted."""
        live = self.live()
        first = data.draw(st.integers(0, len(live) - 1), label="parent")
        second = data.draw(st.integers(0, len(live) - 1), label="second parent")
        parents = tuple(dict.fromkeys((live[first].id, live[second].id)))
        made = self.engine.create({"target": "queue:dep", "schedule": {
            "after": {"jobs": list(parents), "on": on, "all": all_}}})
        self.dependents.append(Dependent(made.id, parents, on, all_))

    @rule(by=seconds)
    def advance(self, by: int) -> None:
        self.engine.advance(by)

    # -- the checks, after every step --------------------------------------------

    @invariant()
    def check(self) -> None:
        self.steps += 1
        engine = self.engine
        for job in self.jobs:
            self.check_job(job)
        self.check_events()
        self.check_held_index()
        self.check_job_counts()
        self.check_dependents()
        self.check_gates()
        self.new_ok = {}
        engine.core.check_memory()
        engine.core.check_leases()

    def check_dependents(self) -> None:
        """Each dependent has exactly the runs its parents' ends made."""
        for dependent in self.dependents:
            runs = self.engine.store.list_runs(OWNER, dependent.id, since_ms=None, until_ms=None, limit=1000,
                                               cursor_ms=None)[0]
            if len(runs) != dependent.expected:
                self.fault("dependent", f"{dependent} has {len(runs)} runs, not {dependent.expected}")
                dependent.expected = len(runs)

    def check_held_index(self) -> None:
        """The index the overlap decisions read holds exactly the open runs
        a policy looks at, of the jobs that have one: claimed, or waiting
        buffered, and no backfill."""
        expected = {(job.id, run.nominal_ms) for job in self.live() if job.overlap != "allow"
                    for run in self.engine.runs_of(job.id).values()
                    if not run.backfill and (run.status == "claimed" or (run.status == "waiting" and run.buffered))}
        held = held_rows(self.engine.store)
        if held != expected:
            self.fault("held_index", f"rows {sorted(held - expected)} too many, {sorted(expected - held)} missing")

    def check_job_counts(self) -> None:
        """The counts of jobs by state that apply keeps equal a count of the jobs."""
        kept, counted = job_counts_kept(self.engine.store), job_counts_scanned(self.engine.store)
        if kept != counted:
            self.fault("job_counts", f"kept {kept}, counted {counted}")

    def check_deleted(self, job: MJob) -> None:
        store = self.engine.store
        try:
            store.get_job(OWNER, job.id)
        except errors.NotFound:
            pass
        else:
            self.fault("delete", f"job {job.id} is still there")
        for nominal_ms in job.runs:
            if store.get_run_any(job.id, nominal_ms) is not None:
                self.fault("delete", f"run {nominal_ms} of a deleted job is still there")

    def check_job(self, job: MJob) -> None:
        if job.deleted:
            self.check_deleted(job)
            return
        stored = self.engine.store.get_job(OWNER, job.id)
        if stored.version != job.version:
            self.fault("version", f"job at version {stored.version}, the model at {job.version}")
        if stored.state != job.state:
            if job.plain:
                self.fault("state", f"job {stored.state}, the model {job.state}")
            job.state = stored.state
        if job.repeating and stored.runs_done != job.runs_done:
            self.fault("runs_done", f"job counts {stored.runs_done} slots run, the model {job.runs_done}")
            job.runs_done = stored.runs_done
        self.slots[job.id] = stored.slot_ms
        if not job.repeating and stored.slot_ms != job.slot_ms:
            self.fault("slot", f"one-off's slot {stored.slot_ms}, the model {job.slot_ms}")
            job.slot_ms = stored.slot_ms
        runs = self.engine.runs_of(job.id)
        self.check_runs(job, runs, stored.slot_ms)
        self.check_schedule(job, stored, runs)
        self.check_overlap(job, runs)
        self.check_outcome(job, runs)

    def check_runs(self, job: MJob, runs: dict[int, Run], slot_ms: int | None) -> None:
        self.check_known_runs(job, runs, slot_ms)
        self.check_new_runs(job, runs)

    def check_known_runs(self, job: MJob, runs: dict[int, Run], slot_ms: int | None) -> None:
        for nominal_ms, mrun in job.runs.items():
            run = runs.get(nominal_ms)
            if run is None:
                self.fault("run", f"run {nominal_ms} ({mrun.status}) is gone")
                continue
            if (mrun.status == "cancelled" and mrun.cancelled_by in ("pause", "patch") and run.status == "waiting"
                    and self.new_ok.get(job.id) == "slot" and nominal_ms == slot_ms):
                # The schedule went on (a claim, a cancel) to a slot whose run a
                # pause or a patch cancelled: that run waits again.
                mrun.status, mrun.cancelled_by, mrun.due_ms = "waiting", None, run.due_ms
                event("the schedule went on to a run a pause or a patch cancelled")
                del self.new_ok[job.id]
            seen = (run.status, run.attempt, run.cancel == "requested" and run.status == "claimed")
            want = (mrun.status, mrun.attempt, mrun.cancel_requested and mrun.status == "claimed")
            if seen != want and not job.plain and self.moved_by_policy(mrun, run):
                event(f"policy: {mrun.status} -> {run.status}" + (" (calendar)" if run.reason == "calendar" else ""))
                mrun.status, mrun.due_ms = run.status, run.due_ms if run.status == "waiting" else None
                mrun.cancel_requested = run.cancel == "requested"
                if run.status == "cancelled":
                    mrun.cancelled_by = "owner" if run.owner_cancelled else "pause"
                continue
            if seen != want:
                self.fault("run", f"run {nominal_ms} of job {job.id} is {seen}, the model says {want}")
                mrun.status, mrun.attempt = run.status, run.attempt
            if run.status == "waiting":
                if mrun.due_ms is not None and run.due_ms != mrun.due_ms and job.plain:
                    self.fault("due", f"run {nominal_ms} due at {run.due_ms}, the model says {mrun.due_ms}")
                mrun.due_ms = run.due_ms
            if len(run.attempts) != mrun.ended:
                self.fault("attempts", f"run {nominal_ms} keeps {len(run.attempts)} attempts, not {mrun.ended}")

    def moved_by_policy(self, mrun: MRun, run: Run) -> bool:
        """Whether a run of a job with an overlap policy or an end condition
        moved as those may move it: a due run skipped, buffered or released;
        a running run asked to stop, or (between attempts) cancelled; a
        waiting run cancelled, or brought back, by an end condition a patch
        changed."""
        if run.attempt != mrun.attempt:
            return False
        if mrun.status == "waiting":
            return run.status in ("skipped", "cancelled", "waiting")
        if mrun.status == "claimed":
            return run.status == "claimed" and run.cancel == "requested"
        return mrun.status == "cancelled" and run.status == "waiting"

    def check_new_runs(self, job: MJob, runs: dict[int, Run]) -> None:
        for nominal_ms, run in runs.items():
            if nominal_ms in job.runs:
                continue
            kind = self.new_ok.get(job.id)
            if kind is None or run.status != "waiting" or run.attempt != 0 or run.triggered:
                self.fault("new_run", f"run {run!r} appeared in a step that makes none")
            job.runs[nominal_ms] = MRun(nominal_ms, run.status, run.triggered, run.attempt, due_ms=run.due_ms)

    def check_schedule(self, job: MJob, stored: Job, runs: dict[int, Run]) -> None:
        """Exactly one waiting scheduled run per active repeating job, at its
        slot; none for a paused or completed job; an active one-off's run open."""
        # A run claimed ahead and handed back by a patch keeps its attempt
        # number, with no attempt run: at the job's slot, it is the slot's
        # scheduled run still; at an earlier one, a run that waits as a
        # retry does.
        scheduled = [r for r in runs.values() if r.status == "waiting"
                     and (r.attempt == 0 or (not r.attempts and r.nominal_ms == stored.slot_ms))
                     and not r.triggered and not r.backfill and not r.buffered]
        self.check_end_conditions(job, stored, scheduled)
        self.check_nothing_left(job, stored, runs)
        if stored.state != "active":
            if scheduled:
                self.fault("one_waiting", f"a {stored.state} job has scheduled runs waiting: {scheduled}")
            if stored.next_run_at_ms is not None:
                self.fault("one_waiting", f"a {stored.state} job has next_run_at {stored.next_run_at_ms}")
            return
        if job.repeating:
            self.check_one_waiting(job, stored, scheduled)
            return
        assert stored.slot_ms is not None
        slot_run = runs.get(stored.slot_ms)
        if slot_run is None or slot_run.status not in ("waiting", "claimed"):
            self.fault("one_waiting", f"an active one-off's run at {stored.slot_ms} is {slot_run!r}")

    def check_nothing_left(self, job: MJob, stored: Job, runs: dict[int, Run]) -> None:
        """A completed job has no slot's run buffered (docs/semantics.md
        "Overlap": a run buffered before the job's end runs, and the job
        completes when the last such run ends); an active repeating job
        with no next run has a slot's run open, whose end completes it."""
        if not job.repeating:
            return
        buffered = [r.nominal_ms for r in runs.values() if r.status == "waiting" and r.buffered and r.attempt == 0
                    and not r.triggered and not r.backfill]
        if stored.state == "completed" and buffered:
            self.fault("completed", f"a completed job has slots' runs buffered: {buffered}")
        slot_runs = [r for r in runs.values() if r.status in ("waiting", "claimed") and not r.triggered
                     and not r.backfill]
        if stored.state == "active" and stored.next_run_at_ms is None and not slot_runs:
            self.fault("completed", f"an active job with no next run has no slot's run open ({stored.slot_ms})")

    def check_end_conditions(self, job: MJob, stored: Job, scheduled: list[Run]) -> None:
        """No scheduled run waits after `end_at`, nor once `max_runs` slots ran."""
        sched = stored.schedule
        if sched.end_at_ms is not None and any(r.nominal_ms > sched.end_at_ms for r in scheduled):
            self.fault("end_at", f"a run waits after end_at {sched.end_at_ms}: {scheduled}")
        if sched.max_runs is not None and stored.runs_done >= sched.max_runs and scheduled:
            self.fault("max_runs", f"{stored.runs_done} of {sched.max_runs} slots ran, yet {scheduled} waits")
        if sched.max_runs is not None and stored.runs_done > sched.max_runs and job.version == 1:
            self.fault("max_runs", f"{stored.runs_done} slots ran, past max_runs {sched.max_runs}")

    def check_one_waiting(self, job: MJob, stored: Job, scheduled: list[Run]) -> None:
        """An active repeating job has exactly one waiting scheduled run, at its slot."""
        if not scheduled and stored.next_run_at_ms is None and job.end_conditions():
            return  # the last slot's run is claimed (or buffered): the job completes when it ends
        if job.had_overlap:
            # A buffered run released waits too, for a slot before the job's.
            scheduled = [r for r in scheduled if r.nominal_ms >= (stored.slot_ms or 0)]
            if not scheduled and stored.next_run_at_ms is None and job.end_conditions():
                return  # the last slot ended (skipped): the job completes as its released runs end
        if [r.nominal_ms for r in scheduled] != [stored.slot_ms]:
            self.fault("one_waiting", f"active repeating job with slot {stored.slot_ms} has waiting "
                       f"{[r.nominal_ms for r in scheduled]}")
        elif stored.next_run_at_ms != scheduled[0].due_ms:
            self.fault("one_waiting", f"next_run_at {stored.next_run_at_ms}, its run due {scheduled[0].due_ms}")

    def check_overlap(self, job: MJob, runs: dict[int, Run]) -> None:
        """The overlap policy's promises (docs/semantics.md "Overlap"), once
        it holds (no run was running when it was set)."""
        policy = job.overlap
        if job.running() == []:
            job.overlap_clean = True
        if policy == "allow" or not job.overlap_clean:
            return
        open_runs = [r for r in runs.values() if not r.backfill]
        running = [r for r in open_runs if r.status == "claimed"]
        buffered = [r for r in open_runs if r.status == "waiting" and r.buffered]
        if policy == "cancel_other":
            going = [r for r in running if r.status == "claimed" and r.cancel != "requested"]
            if len(going) > 1:
                self.fault("overlap", f"cancel_other job has {len(going)} runs running unasked to stop")
            return
        if len(running) > 1:
            self.fault("overlap", f"{policy} job has {len(running)} runs running: {[r.nominal_ms for r in running]}")
        limit = {"skip": 0, "buffer_one": 1, "buffer_all": limits.overlap_buffered_runs_max}[policy]
        slot_runs = [r for r in buffered if r.attempt == 0]  # a retry held back is not counted
        # Runs `buffer_all` buffered stay buffered under `buffer_one`, and
        # while they wait no further run is buffered.
        kept = job.buffered_kept = {r.nominal_ms for r in slot_runs} & job.buffered_kept
        if len(slot_runs) > max(limit, len(kept)):
            self.fault("overlap", f"{policy} job has {len(buffered)} runs buffered")
        first = min((r.nominal_ms for r in buffered), default=None)
        released = [r for r in open_runs if r.status == "waiting" and not r.buffered and first is not None
                    and r.nominal_ms < first]
        if buffered and not running and not released:
            # Buffered runs wait for the running one, or for the one released before them.
            self.fault("overlap", f"{policy} job has runs buffered and none running or released")

    def check_events(self) -> None:
        """The events of the kinds the model follows, job by job."""
        seen: dict[str, Counter[str]] = {}
        for _, ev in self.engine.store.list_events(OWNER, 0, 1 << 20):
            if ev.type in ("run.failed", "run.cancelled", "job.completed", "job.updated", "job.created",
                           "job.paused", "job.resumed", "job.deleted"):
                seen.setdefault(ev.job_id, Counter())[ev.type] += 1
        for job in self.jobs:
            if not job.plain:
                job.events = seen.get(job.id, Counter())
                continue
            if seen.get(job.id, Counter()) != job.events:
                self.fault("events", f"job {job.id} wrote {dict(seen.get(job.id, {}))}, the model {dict(job.events)}")
                job.events = seen.get(job.id, Counter())

    def check_outcome(self, job: MJob, runs: dict[int, Run]) -> None:
        outcome = self.engine.store.job_outcome(job.id)
        counts = Counter(r.status for r in runs.values())
        seen = (0, 0, 0) if outcome is None else (outcome.done, outcome.failed, outcome.cancelled)
        want = (counts["done"], counts["failed"], counts["cancelled"])
        if seen != want:
            self.fault("outcome", f"job {job.id} counts (done, failed, cancelled) {seen}, its runs {want}")

    # -- weights: hypothesis picks among enabled rules alike, so the worker's
    # side of the lifecycle (claims, results, the clock, the lease check)
    # comes as a few rules each, and deletes take a draw of their own.

    @precondition(lambda self: self.has_due())
    @rule(runs_max=st.sampled_from((1, 100)), queues=st.sampled_from((["a"], ["b"], ["a", "b"])))
    def claim_more(self, runs_max: int, queues: list[str]) -> None:
        self.claim(runs_max, queues)

    @precondition(lambda self: self.has_due())
    @rule()
    def claim_all(self) -> None:
        self.claim(100, list(QUEUES))

    @precondition(lambda self: self.has_due(limits.claim_ahead_ms_max))
    @rule(ahead_s=st.sampled_from((1, 5, 10)))
    def claim_ahead(self, ahead_s: int) -> None:
        self.claim(100, list(QUEUES), ahead_s)

    @precondition(lambda self: self.next_due_ms() is not None)
    @rule(before_s=st.sampled_from((1, 2, 5, 9)))
    def approach(self, before_s: int) -> None:
        """The clock to a few seconds before the next waiting run's due
        time, where a claim may take it ahead."""
        due_ms = self.next_due_ms()
        assert due_ms is not None
        by_s = (due_ms - self.engine.now_ms) // 1000 - before_s
        if by_s > 0:
            self.engine.advance(by_s)

    def next_due_ms(self) -> int | None:
        """The earliest due time of a waiting run within the next hour (the
        `advance` rule's longest step), if any."""
        now_ms = self.engine.now_ms
        return min((r.due_ms for j in self.live() for r in j.runs.values()
                    if r.status == "waiting" and r.due_ms is not None and now_ms < r.due_ms <= now_ms + 3_600_000),
                   default=None)

    @precondition(lambda self: self.has_runs("claimed"))
    @rule(data=st.data(), ok=st.booleans())
    def result_more(self, data: st.DataObject, ok: bool) -> None:
        self.result(data, ok)

    @precondition(lambda self: self.has_runs("claimed"))
    @rule(data=st.data())
    def result_failed(self, data: st.DataObject) -> None:
        self.result(data, False)

    @rule(by=st.sampled_from((1, 2, 5, 10, 60)))
    def advance_more(self, by: int) -> None:
        self.advance(by)

    @rule(by=seconds)
    def advance_and_check_leases(self, by: int) -> None:
        self.advance(by)
        if self.has_runs("claimed"):
            self.expire()
