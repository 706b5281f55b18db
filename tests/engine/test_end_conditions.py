"""End conditions of a repeating schedule (`end_at`, `max_runs`) and the
pause note, in apply: decided from the replicated state and the commands
alone (docs/semantics.md "End conditions", "Pause, resume, delete")."""

import json

import msgspec
import pytest
import trio

from tempo import clock, errors, ids
from tempo.engine.commands import (
    CancelRun,
    Claim,
    ClaimRuns,
    Command,
    CreateJobs,
    PauseJob,
    ReportResults,
    Result,
    TriggerJob,
    decode_entry,
    encode_entry,
)
from tempo.engine.jobs import Jobs
from tempo.engine.plan import catch_up
from tempo.engine.records import Job, Run
from tempo.engine.store import Store
from tempo.schema import JobCreate

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
MIN = 60_000


class _World:
    """A store, the Jobs service on a clock the test sets, and a log that
    applies each command at once."""

    def __init__(self, store: Store):
        self.store = store
        self.index = 0
        self.now_ms = T0
        self.jobs = Jobs(store, self, now_ms=lambda: self.now_ms)  # type: ignore[arg-type] - commits itself

    def apply(self, *commands: Command) -> list[object]:
        self.index += 1
        outcomes, _ = self.store.apply_commands(self.index, list(commands))
        return outcomes

    async def submit(self, command: Command) -> object:
        return self.apply(command)[0]

    def create(self, **fields: object) -> Job:
        [[created]] = self.apply(CreateJobs(self.now_ms, [self.jobs.new_job(OWNER, _body(**fields), self.now_ms, from_msgpack=False)]))
        return created.job

    def job(self, job: Job) -> Job:
        return self.store.get_job(OWNER, job.id)

    def claim(self, job: Job, nominal_ms: int, *, plan: bool = True) -> Run:
        """Claims the run of `nominal_ms` now, with the next slot the
        dispatcher decides (engine/dispatch_core.py); `plan=False`: the claim
        carries no next slot."""
        job = self.job(job)
        claim = Claim(job.id, nominal_ms, self.now_ms + MIN)
        if plan and job.state == "active" and job.slot_ms == nominal_ms:
            nxt = catch_up(job, nominal_ms, self.now_ms)
            if nxt is not None:
                claim.next_slot_ms, claim.next_due_ms = nxt.slot_ms, nxt.due_ms
        [[run]] = self.apply(ClaimRuns(self.now_ms, "w1", [claim]))
        assert isinstance(run, Run)
        return run

    def result(self, run: Run, ok: bool = True) -> None:
        [[answer]] = self.apply(ReportResults(self.now_ms, OWNER, [Result(run.job_id, run.nominal_ms, run.attempt, ok)]))
        assert isinstance(answer, Run)

    def run(self, call):  # type: ignore[no-untyped-def]
        async def go():  # type: ignore[no-untyped-def]
            return await call

        return trio.run(go)

    def runs(self, job: Job) -> list[Run]:
        return self.store.list_runs(OWNER, job.id, since_ms=None, until_ms=None, limit=100, cursor_ms=None)[0]

    def waiting(self, job: Job) -> list[int]:
        return sorted(r.nominal_ms for r in self.runs(job) if r.status == "waiting")

    def completions(self) -> list[dict[str, object]]:
        return [e.detail for _, e in self.store.list_events(OWNER, 0, 100) if e.type == "job.completed"]


def _body(**fields: object) -> JobCreate:
    fields.setdefault("target", "queue:q")
    fields.setdefault("schedule", {"every_s": 60})
    return msgspec.json.decode(json.dumps(fields), type=JobCreate)


def _iso(at_ms: int) -> str:
    return clock.iso_from_ms(at_ms)


@pytest.fixture
def world(store: Store) -> _World:
    return _World(store)


# -- max_runs ----------------------------------------------------------------------


def test_max_runs_plans_no_slot_after_the_last_and_completes_when_it_ends(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 2})
    assert job.slot_ms == T0 + MIN and job.runs_done == 0
    world.now_ms = T0 + MIN
    world.result(world.claim(job, T0 + MIN))
    after_one = world.job(job)
    assert after_one.runs_done == 1 and after_one.slot_ms == T0 + 2 * MIN and after_one.state == "active"
    world.now_ms = T0 + 2 * MIN
    last = world.claim(job, T0 + 2 * MIN)
    held = world.job(job)
    # The last counted run is claimed: nothing is planned after it, and the
    # job stays active until it ends (as a one-off does with its run).
    assert held.runs_done == 2 and held.next_run_at_ms is None and held.state == "active"
    assert world.waiting(job) == []
    world.result(last)
    done = world.job(job)
    assert done.state == "completed" and done.next_run_at_ms is None
    assert world.completions() == [{"status": "done", "reason": "max_runs"}]


def test_apply_holds_max_runs_even_when_the_claim_carries_a_next_slot(world: _World) -> None:
    """The node that proposed the claim decided a next slot (as a leader
    that read an older job would); apply counts from the replicated
    `runs_done` and plans none."""
    job = world.create(schedule={"every_s": 60, "max_runs": 1}, retry={"max_attempts": 1, "backoff_s": [0]})
    world.now_ms = T0 + MIN
    command = ClaimRuns(world.now_ms, "w1", [Claim(job.id, T0 + MIN, world.now_ms + MIN, next_slot_ms=T0 + 2 * MIN,
                                                   next_due_ms=T0 + 2 * MIN)])
    [[run]] = world.apply(command)
    assert isinstance(run, Run)
    assert world.waiting(job) == [] and world.job(job).runs_done == 1
    world.result(run, ok=False)  # max_attempts 1: failed for good
    assert world.job(job).state == "completed"
    assert world.completions() == [{"status": "failed", "reason": "max_runs"}]


def test_retries_triggered_runs_and_re_deliveries_are_not_counted(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 2}, retry={"max_attempts": 3, "backoff_s": [0]})
    [triggered] = world.apply(TriggerJob(T0, OWNER, job.id))
    assert isinstance(triggered, Run)
    world.result(world.claim(job, triggered.nominal_ms))
    assert world.job(job).runs_done == 0
    world.now_ms = T0 + MIN
    first = world.claim(job, T0 + MIN)
    world.result(first, ok=False)  # waits for its retry
    retry = world.claim(job, T0 + MIN)
    assert retry.attempt == 2 and world.job(job).runs_done == 1
    world.result(retry)
    assert world.job(job).runs_done == 1 and world.job(job).state == "active"
    assert world.waiting(job) == [T0 + 2 * MIN]


def test_the_last_runs_retry_still_runs_and_its_end_completes_the_job(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 1}, retry={"max_attempts": 2, "backoff_s": [0]})
    world.now_ms = T0 + MIN
    world.result(world.claim(job, T0 + MIN), ok=False)
    assert world.job(job).state == "active" and world.waiting(job) == [T0 + MIN]
    retry = world.claim(job, T0 + MIN)
    assert world.waiting(job) == [] and world.job(job).runs_done == 1
    world.result(retry)
    assert world.job(job).state == "completed"


def test_cancelling_the_last_runs_waiting_retry_completes_the_job(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 1}, retry={"max_attempts": 2, "backoff_s": [30]})
    world.now_ms = T0 + MIN
    world.result(world.claim(job, T0 + MIN), ok=False)
    world.run(world.jobs.cancel_run(OWNER, ids.run_id(job.id, T0 + MIN)))
    assert world.job(job).state == "completed" and world.waiting(job) == []
    assert world.completions() == [{"reason": "max_runs"}]


def test_cancelled_slots_are_not_counted(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 1})
    world.run(world.jobs.cancel_run(OWNER, ids.run_id(job.id, T0 + MIN)))
    after = world.job(job)
    assert after.runs_done == 0 and after.state == "active" and world.waiting(job) == [T0 + 2 * MIN]


# -- end_at ------------------------------------------------------------------------


def test_end_at_plans_no_slot_after_it(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "end_at": _iso(T0 + 2 * MIN)})
    world.now_ms = T0 + MIN
    world.result(world.claim(job, T0 + MIN))
    assert world.waiting(job) == [T0 + 2 * MIN]  # a slot at end_at runs
    world.now_ms = T0 + 2 * MIN
    last = world.claim(job, T0 + 2 * MIN)
    assert world.waiting(job) == [] and world.job(job).state == "active"
    world.result(last)
    assert world.job(job).state == "completed"
    assert world.completions() == [{"status": "done", "reason": "end_at"}]


def test_apply_plans_no_slot_after_end_at_whatever_the_claim_says(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "end_at": _iso(T0 + MIN + 1)})
    world.now_ms = T0 + MIN
    command = ClaimRuns(world.now_ms, "w1", [Claim(job.id, T0 + MIN, world.now_ms + MIN, next_slot_ms=T0 + 2 * MIN,
                                                   next_due_ms=T0 + 2 * MIN)])
    world.apply(command)
    assert world.waiting(job) == [] and world.job(job).next_run_at_ms is None


def test_catch_up_after_end_at_runs_nothing_past_it(world: _World) -> None:
    """Down for an hour: the latest missed slot at or before end_at runs,
    then nothing (catch-up `latest`)."""
    job = world.create(schedule={"every_s": 60, "end_at": _iso(T0 + 10 * MIN)})
    world.now_ms = T0 + 60 * MIN
    first = world.claim(job, T0 + MIN)
    assert world.waiting(job) == [T0 + 10 * MIN]
    world.result(first)
    last = world.claim(job, T0 + 10 * MIN)
    assert world.waiting(job) == []
    world.result(last)
    assert world.job(job).state == "completed"


def test_a_schedule_with_no_slot_left_completes_when_its_last_run_ends(world: _World) -> None:
    """A claim that plans no next slot (the schedule has none) used to leave
    the job active with nothing waiting, for ever."""
    job = world.create(schedule={"every_s": 60})
    world.now_ms = T0 + MIN
    run = world.claim(job, T0 + MIN, plan=False)
    world.result(run)
    assert world.job(job).state == "completed"
    assert world.completions() == [{"status": "done", "reason": "no_slot_left"}]


# -- checks at the edge ----------------------------------------------------------


@pytest.mark.parametrize(("schedule", "loc"), [
    ({"at": "2027-01-15T09:00:00Z", "end_at": "2027-01-16T00:00:00Z"}, "schedule.end_at"),
    ({"at": "2027-01-15T09:00:00Z", "max_runs": 3}, "schedule.max_runs"),
    ({"every_s": 60, "start_at": "2027-01-16T00:00:00Z", "end_at": "2027-01-16T00:00:00Z"}, "schedule.end_at"),
    ({"every_s": 60, "start_at": "2027-01-16T00:00:00Z", "end_at": "2027-01-15T00:00:00Z"}, "schedule.end_at"),
    ({"cron": "0 0 * * *", "end_at": "2027-01-15T09:00:00Z"}, "schedule.end_at"),  # no slot up to it
    ({"every_s": 60, "end_at": "2027-01-15T08:00:30Z"}, "schedule.end_at"),
    ({"every_s": 60, "end_at": "10000-01-01T00:00:00Z"}, "schedule.end_at"),
])
def test_bad_end_conditions_are_refused_at_their_field(world: _World, schedule: dict, loc: str) -> None:
    try:
        body = _body(schedule=schedule)
    except msgspec.ValidationError:
        return  # refused by the decoder (a year past 9999)
    with pytest.raises(errors.Invalid) as caught:
        world.jobs.new_job(OWNER, body, T0, from_msgpack=False)
    assert [where for where, _ in caught.value.errors] == [loc]


@pytest.mark.parametrize("max_runs", [0, -1, 1_000_000_001])
def test_max_runs_out_of_bounds_does_not_decode(max_runs: int) -> None:
    with pytest.raises(msgspec.ValidationError, match=r"schedule\.max_runs"):
        _body(schedule={"every_s": 60, "max_runs": max_runs})


# -- patch -------------------------------------------------------------------------


def _patch(world: _World, job: Job, schedule: dict) -> Job:
    return world.run(world.jobs.patch(world.job(job), _body(schedule=schedule), from_msgpack=False))


def test_lowering_max_runs_to_the_runs_done_completes_the_job(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 5})
    world.now_ms = T0 + MIN
    world.result(world.claim(job, T0 + MIN))
    assert world.waiting(job) == [T0 + 2 * MIN]
    world.now_ms = T0 + MIN + 1000
    changed = _patch(world, job, {"every_s": 60, "max_runs": 1})
    assert changed.state == "completed" and world.waiting(job) == [] and changed.next_run_at_ms is None
    assert world.completions() == [{"reason": "max_runs"}]


def test_raising_max_runs_makes_a_completed_job_active_again(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 1})
    world.now_ms = T0 + MIN
    world.result(world.claim(job, T0 + MIN))
    assert world.job(job).state == "completed"
    world.now_ms = T0 + 5 * MIN + 1000
    changed = _patch(world, job, {"every_s": 60, "max_runs": 3})
    assert changed.state == "active" and world.waiting(job) == [T0 + 6 * MIN]
    assert changed.runs_done == 1


def test_moving_end_at_later_makes_a_completed_job_active_again(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "end_at": _iso(T0 + MIN)})
    world.now_ms = T0 + MIN
    world.result(world.claim(job, T0 + MIN))
    assert world.job(job).state == "completed"
    world.now_ms = T0 + 2 * MIN + 1000
    changed = _patch(world, job, {"every_s": 60, "end_at": _iso(T0 + 10 * MIN)})
    assert changed.state == "active" and world.waiting(job) == [T0 + 3 * MIN]


def test_moving_end_at_before_now_completes_an_active_job(world: _World) -> None:
    job = world.create(schedule={"every_s": 60})
    world.now_ms = T0 + 90_000
    changed = _patch(world, job, {"every_s": 60, "end_at": _iso(T0 + 30_000)})
    assert changed.state == "completed" and world.waiting(job) == []
    assert world.completions() == [{"reason": "end_at"}]


# -- pause and resume ------------------------------------------------------------


def test_pause_keeps_who_and_why_and_resume_clears_it(world: _World) -> None:
    job = world.create()
    world.now_ms = T0 + 1000
    paused = world.run(world.jobs.pause(OWNER, job.id, by=("ops", "admin"), note="db migration"))
    assert paused.state == "paused"
    assert paused.paused is not None
    assert (paused.paused.at_ms, paused.paused.by_owner, paused.paused.by_role, paused.paused.note) == (
        T0 + 1000, "ops", "admin", "db migration")
    again = world.run(world.jobs.pause(OWNER, job.id, by=("x", "client"), note="other"))
    assert again.paused == paused.paused  # paused already: the first pause stands
    resumed = world.run(world.jobs.resume(OWNER, job.id))
    assert resumed.state == "active" and resumed.paused is None


def test_a_pause_entry_logged_before_the_note_decodes_and_names_the_owner(world: _World) -> None:
    job = world.create()
    # An entry as an older version logged it: three fields after the tag.
    raw = msgspec.msgpack.encode([["pause_job", T0, OWNER, job.id]])
    [command] = decode_entry(raw)
    assert isinstance(command, PauseJob) and command.note is None and command.by_owner is None
    [paused] = world.apply(command)
    assert isinstance(paused, Job) and paused.paused is not None
    assert (paused.paused.by_owner, paused.paused.by_role, paused.paused.note) == (OWNER, None, None)
    assert decode_entry(encode_entry([command])) == [command]


def test_resume_after_max_runs_waits_for_the_last_run_then_completes(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 1})
    world.now_ms = T0 + MIN
    last = world.claim(job, T0 + MIN)
    world.run(world.jobs.pause(OWNER, job.id))
    world.now_ms = T0 + 3 * MIN
    resumed = world.run(world.jobs.resume(OWNER, job.id))
    assert resumed.state == "active" and world.waiting(job) == []
    assert [r for r in world.runs(job) if r.status == "missed"] == [], "slots after the last run are not missed"
    world.result(last)
    assert world.job(job).state == "completed" and world.job(job).paused is None


def test_a_paused_job_whose_last_run_ends_is_completed(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "max_runs": 1})
    world.now_ms = T0 + MIN
    last = world.claim(job, T0 + MIN)
    world.run(world.jobs.pause(OWNER, job.id, note="hold"))
    world.result(last)
    done = world.job(job)
    assert done.state == "completed" and done.paused is None


def test_resume_past_end_at_completes_the_job(world: _World) -> None:
    job = world.create(schedule={"every_s": 60, "end_at": _iso(T0 + 5 * MIN)})
    world.run(world.jobs.pause(OWNER, job.id))
    world.now_ms = T0 + 10 * MIN
    resumed = world.run(world.jobs.resume(OWNER, job.id))
    assert resumed.state == "completed" and world.waiting(job) == []
    assert world.completions() == [{"reason": "end_at"}]
    # The slots the pause let pass are recorded up to end_at, not after it.
    [missed] = [r for r in world.runs(job) if r.status == "missed"]
    assert missed.missed_count == 4 and missed.reason == "paused"  # 2, 3, 4 and 5 minutes past


def test_cancel_run_of_a_completed_jobs_slot_plans_nothing(world: _World) -> None:
    """A planned cancel whose next slot lies past end_at completes the job."""
    job = world.create(schedule={"every_s": 60, "end_at": _iso(T0 + MIN)})
    command = CancelRun(T0, OWNER, job.id, T0 + MIN, planned=True, next_slot_ms=T0 + 2 * MIN, next_due_ms=T0 + 2 * MIN)
    [answer] = world.apply(command)
    assert isinstance(answer, Run) and answer.status == "cancelled"
    assert world.job(job).state == "completed" and world.waiting(job) == []


def test_a_patch_back_to_a_slot_an_earlier_patch_cancelled_plans_its_run_again(world: _World) -> None:
    """Ending a job by `end_at` and reopening it before its next slot came
    round meets the slot whose run the first patch cancelled: it waits
    again (it had left the job active with nothing planned)."""
    hour = 60 * MIN
    job = world.create(schedule={"every_s": 3600})
    world.now_ms = T0 + 1000
    _patch(world, job, {"every_s": 7200})
    assert world.waiting(job) == [T0 + 2 * hour]
    back = _patch(world, job, {"every_s": 3600})
    assert world.waiting(job) == [T0 + hour] and back.next_run_at_ms == T0 + hour
    assert [r.status for r in world.runs(job) if r.nominal_ms == T0 + hour] == ["waiting"]


def test_a_request_keys_body_hash_without_end_conditions_is_what_it_was(world: _World) -> None:
    """A create retried with its request key across an upgrade must match
    the job it made: a schedule without end conditions hashes as it did
    before they existed (the golden value is the hash an older version
    gave this body)."""
    body = _body(schedule={"cron": "0 3 * * *", "dst": {"gap": "skip"}}, request_key="k")
    item = world.jobs.new_job("o", body, T0, from_msgpack=False)
    assert item.body_hash.hex() == "c104498e972921087900e7a2dc122643"
    ended = _body(schedule={"cron": "0 3 * * *", "dst": {"gap": "skip"}, "max_runs": 3}, request_key="k")
    assert world.jobs.new_job("o", ended, T0, from_msgpack=False).body_hash != item.body_hash
