"""Run timeouts and cancels in apply (docs/semantics.md "Run timeouts",
"Cancelling a run"): decided from the replicated state and the commands
alone."""

import json

import msgspec
import trio

from tempo import errors, ids
from tempo.engine.commands import (
    CancelRun,
    Claim,
    ClaimRuns,
    Command,
    CreateJobs,
    ExpireLeases,
    Expiry,
    ReportResults,
    Result,
)
from tempo.engine.jobs import Jobs
from tempo.engine.records import Job, Run
from tempo.engine.store import Store
from tempo.schema import JobCreate

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z


class _Log:
    """Entries applied to a store in order; each apply answers (outcomes, changes)."""

    def __init__(self, store: Store):
        self.store = store
        self.index = 0

    def apply(self, *commands: Command) -> tuple[list[object], object]:
        self.index += 1
        return self.store.apply_commands(self.index, list(commands))

    async def submit(self, command: Command) -> object:
        return self.apply(command)[0][0]


def _body(**fields: object) -> JobCreate:
    fields.setdefault("target", "queue:q")
    fields.setdefault("schedule", {"every_s": 60})
    return msgspec.json.decode(json.dumps(fields), type=JobCreate)


def _create(store: Store, log: _Log, **fields: object) -> tuple[Jobs, Job]:
    jobs = Jobs(store, log, now_ms=lambda: T0)  # type: ignore[arg-type] - the log commits
    item = jobs.new_job(OWNER, _body(**fields), T0, from_msgpack=False)
    [[created]], _ = log.apply(CreateJobs(T0, [item]))
    return jobs, created.job


def _claim(log: _Log, job: Job, nominal_ms: int, at_ms: int, **fields: object) -> Run:
    [[run]], _ = log.apply(ClaimRuns(at_ms, "w1", [Claim(job.id, nominal_ms, at_ms + 60_000, **fields)]))
    assert isinstance(run, Run)
    return run


def _cancel(jobs: Jobs, job: Job, nominal_ms: int) -> Run:
    async def go() -> Run:
        return await jobs.cancel_run(OWNER, ids.run_id(job.id, nominal_ms))

    return trio.run(go)


def _runs(store: Store, job: Job) -> list[Run]:
    return store.list_runs(OWNER, job.id, since_ms=None, until_ms=None, limit=100, cursor_ms=None)[0]


def _events(store: Store) -> list[str]:
    """The events of runs and outcomes, not a job's audit trail (test_job_events.py)."""
    return [event.type for _, event in store.list_events(OWNER, 0, 100) if event.type != "job.created"]


def test_a_claimed_run_is_asked_to_stop_and_its_result_ends_it_cancelled(store: Store) -> None:
    log = _Log(store)
    _jobs, job = _create(store, log, schedule={"at": "2027-01-15T08:00:00Z"}, retry={"max_attempts": 3})
    _claim(log, job, T0, T0 + 5, one_off=True)
    [asked], changes = log.apply(CancelRun(T0 + 10, OWNER, job.id, T0))
    assert asked.status == "claimed" and asked.cancel == "requested"
    assert changes.stopping == [(job.id, T0)]
    # Asked again: the same, and nothing new for the dispatcher.
    [again], changes = log.apply(CancelRun(T0 + 11, OWNER, job.id, T0))
    assert again.cancel == "requested" and changes.stopping == []
    assert store.get_run(OWNER, ids.run_id(job.id, T0))[0].cancel == "requested"
    # The result that follows, even a failure with attempts left, ends it cancelled.
    [[ended]], _ = log.apply(ReportResults(T0 + 20, OWNER, [Result(job.id, T0, 1, False, None, "stopped")]))
    assert ended.status == "cancelled" and ended.finished_ms == T0 + 20
    assert [(a.ok, a.error) for a in ended.attempts] == [(False, "stopped")]
    assert store.get_job(OWNER, job.id).state == "completed"
    assert "run.cancelled" in _events(store)
    # The same result again is harmless; another is stale.
    [[repeat]], _ = log.apply(ReportResults(T0 + 21, OWNER, [Result(job.id, T0, 1, False, None, "stopped")]))
    assert isinstance(repeat, Run) and repeat.status == "cancelled"
    [[other]], _ = log.apply(ReportResults(T0 + 21, OWNER, [Result(job.id, T0, 1, True)]))
    assert isinstance(other, errors.StaleAttempt)


def test_a_run_asked_to_stop_ends_cancelled_when_its_lease_runs_out(store: Store) -> None:
    log = _Log(store)
    _jobs, job = _create(store, log)
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot, slot + 5, next_slot_ms=slot + 60_000, next_due_ms=slot + 60_000)
    log.apply(CancelRun(slot + 10, OWNER, job.id, slot))
    [[ended]], _ = log.apply(ExpireLeases(slot + 70_000, [Expiry(job.id, slot, 1)]))
    assert ended.status == "cancelled" and ended.error == "lease expired"
    # The schedule went on at the claim: the next slot's run waits.
    assert [r.nominal_ms for r in _runs(store, job) if r.status == "waiting"] == [slot + 60_000]


def test_a_waiting_slot_run_of_a_repeating_job_hands_the_schedule_on(store: Store) -> None:
    log = _Log(store)
    jobs, job = _create(store, log)
    slot = job.slot_ms
    assert slot == T0 + 60_000
    cancelled = _cancel(jobs, job, slot)
    assert cancelled.status == "cancelled"
    waiting = [r for r in _runs(store, job) if r.status == "waiting"]
    assert [r.nominal_ms for r in waiting] == [slot + 60_000]
    stored = store.get_job(OWNER, job.id)
    assert stored.state == "active" and stored.slot_ms == slot + 60_000 and stored.next_run_at_ms == slot + 60_000
    assert _events(store) == ["run.cancelled"]
    # Cancelling it again answers the cancelled run; the schedule stays.
    assert _cancel(jobs, job, slot).status == "cancelled"
    assert [r.nominal_ms for r in _runs(store, job) if r.status == "waiting"] == [slot + 60_000]


def test_a_slot_run_cancel_made_before_the_schedule_moved_is_a_conflict(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log)
    [outcome], _ = log.apply(CancelRun(T0 + 1, OWNER, job.id, T0 + 60_000))  # not planned
    assert isinstance(outcome, errors.Conflict)
    assert [r.status for r in _runs(store, job)] == ["waiting"]


def test_a_waiting_one_off_run_cancelled_completes_its_job(store: Store) -> None:
    log = _Log(store)
    jobs, job = _create(store, log, schedule={"at": "2027-01-15T09:00:00Z"})
    run = _cancel(jobs, job, job.slot_ms or 0)
    assert run.status == "cancelled"
    stored = store.get_job(OWNER, job.id)
    assert stored.state == "completed" and stored.next_run_at_ms is None
    assert _events(store) == ["run.cancelled", "job.completed"]


def test_a_finished_run_is_not_cancelled(store: Store) -> None:
    log = _Log(store)
    _jobs, job = _create(store, log, schedule={"at": "2027-01-15T08:00:00Z"})
    _claim(log, job, T0, T0 + 5, one_off=True)
    log.apply(ReportResults(T0 + 6, OWNER, [Result(job.id, T0, 1, True)]))
    [outcome], _ = log.apply(CancelRun(T0 + 10, OWNER, job.id, T0))
    assert isinstance(outcome, errors.RunFinished) and outcome.type == "run_finished"
    [outcome], _ = log.apply(CancelRun(T0 + 10, "acme", job.id, T0))
    assert isinstance(outcome, errors.NotFound)


def test_a_timeout_ends_the_attempt_failed_and_the_retry_policy_applies(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, schedule={"at": "2027-01-15T08:00:00Z"}, timeout_s=2,
                     retry={"max_attempts": 2, "backoff_s": [7]})
    assert job.timeout_s == 2
    run = _claim(log, job, T0, T0 + 5, one_off=True, timeout_at_ms=T0 + 2005)
    assert run.timeout_at_ms == T0 + 2005
    [[ended]], _ = log.apply(ExpireLeases(T0 + 2005, [Expiry(job.id, T0, 1, "timeout")]))
    assert ended.status == "waiting" and ended.error == "timeout" and ended.cancel == "timeout"
    assert ended.due_ms == T0 + 2005 + 7_000  # after the backoff, as a failed result
    assert [(a.ok, a.error) for a in ended.attempts] == [(False, "timeout")]
    # A result of the attempt that timed out is stale, even one saying the same.
    [[late]], _ = log.apply(ReportResults(T0 + 2006, OWNER, [Result(job.id, T0, 1, False, None, "timeout")]))
    assert isinstance(late, errors.StaleAttempt)
    # The next claim clears it; its own timeout ends the run for good.
    again = _claim(log, job, T0, T0 + 9005, one_off=True, timeout_at_ms=T0 + 11_005)
    assert again.cancel is None and again.attempt == 2
    [[failed]], _ = log.apply(ExpireLeases(T0 + 11_005, [Expiry(job.id, T0, 2, "timeout")]))
    assert failed.status == "failed" and failed.error == "timeout" and failed.cancel == "timeout"
    assert "run.failed" in _events(store)


def test_a_run_asked_to_stop_that_ends_ok_first_is_done(store: Store) -> None:
    """The recorded outcome is what happened: a command that finished well
    before the stop reached it is `done`, not `cancelled`."""
    log = _Log(store)
    _jobs, job = _create(store, log, schedule={"at": "2027-01-15T08:00:00Z"}, retry={"max_attempts": 3})
    _claim(log, job, T0, T0 + 5, one_off=True)
    log.apply(CancelRun(T0 + 10, OWNER, job.id, T0))
    [[ended]], _ = log.apply(ReportResults(T0 + 20, OWNER, [Result(job.id, T0, 1, True, "sent", None)]))
    assert ended.status == "done" and ended.output == "sent" and ended.finished_ms == T0 + 20
    assert store.get_job(OWNER, job.id).state == "completed"
    assert "run.cancelled" not in _events(store)
    # The same result again is harmless; a failure of that attempt now is stale.
    [[repeat]], _ = log.apply(ReportResults(T0 + 21, OWNER, [Result(job.id, T0, 1, True, "sent", None)]))
    assert isinstance(repeat, Run) and repeat.status == "done"
    [[other]], _ = log.apply(ReportResults(T0 + 21, OWNER, [Result(job.id, T0, 1, False, None, "stopped")]))
    assert isinstance(other, errors.StaleAttempt)


def test_a_result_at_or_after_the_timeout_is_stale(store: Store) -> None:
    """An attempt ends at its `timeout_at`: a result stamped then or later
    does not end it (the timeout's expiry does), one stamped before does."""
    log = _Log(store)
    _, job = _create(store, log, schedule={"at": "2027-01-15T08:00:00Z"}, timeout_s=2,
                     retry={"max_attempts": 2, "backoff_s": [7]})
    _claim(log, job, T0, T0 + 5, one_off=True, timeout_at_ms=T0 + 2005)
    [[late]], _ = log.apply(ReportResults(T0 + 2005, OWNER, [Result(job.id, T0, 1, True, "late", None)]))
    assert isinstance(late, errors.StaleAttempt) and "timeout" in str(late)
    assert store.get_run(OWNER, ids.run_id(job.id, T0))[0].status == "claimed"
    [[ended]], _ = log.apply(ExpireLeases(T0 + 2006, [Expiry(job.id, T0, 1, "timeout")]))
    assert ended.status == "waiting" and ended.error == "timeout"
    again = _claim(log, job, T0, T0 + 9006, one_off=True, timeout_at_ms=T0 + 11_006)
    [[done]], _ = log.apply(ReportResults(T0 + 11_004, OWNER, [Result(job.id, T0, again.attempt, True, "ok", None)]))
    assert isinstance(done, Run) and done.status == "done"
