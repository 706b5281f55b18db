"""The overlap policy of repeating jobs in apply (docs/semantics.md
"Overlap"): decided from the replicated tables and the commands alone, when
a run of the job is claimed and when a running run ends."""

import json

import msgspec
import pytest
import trio

from tempo import errors, ids, limits
from tempo.engine.commands import (
    BackfillJob,
    CancelRun,
    Claim,
    ClaimRuns,
    Command,
    CreateJobs,
    ExpireLeases,
    Expiry,
    PauseJob,
    ReportResults,
    Result,
    ResumeJob,
    TriggerJob,
)
from tempo.engine.jobs import Jobs
from tempo.engine.records import Job, Run
from tempo.engine.store import Changes, Store
from tempo.net.jobs_api import _patched
from tempo.net.views import job_view
from tempo.schema import JobCreate, ScheduleIn

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
MIN = 60_000


class _Log:
    def __init__(self, store: Store):
        self.store = store
        self.index = 0

    def apply(self, *commands: Command) -> tuple[list[object], Changes]:
        self.index += 1
        return self.store.apply_commands(self.index, list(commands))

    async def submit(self, command: Command) -> object:
        return self.apply(command)[0][0]


def _create(store: Store, log: _Log, **fields: object) -> tuple[Jobs, Job]:
    fields.setdefault("target", "queue:q")
    fields.setdefault("schedule", {"every_s": 60})
    body = msgspec.json.decode(json.dumps(fields), type=JobCreate)
    jobs = Jobs(store, log, now_ms=lambda: T0)  # type: ignore[arg-type] - the log commits
    item = jobs.new_job(OWNER, body, T0, from_msgpack=False)
    [[created]], _ = log.apply(CreateJobs(T0, [item]))
    return jobs, created.job


def _slot_claim(slot: int, job: Job) -> Claim:
    """The claim of a slot run as the dispatcher makes it: with the next slot."""
    return Claim(job.id, slot, slot + 10 * MIN, next_slot_ms=slot + MIN, next_due_ms=slot + MIN)


def _claim(log: _Log, job: Job, slot: int, at_ms: int | None = None, *, plain: bool = False) -> tuple[Run | None, Changes]:
    claim = Claim(job.id, slot, (at_ms or slot) + 10 * MIN) if plain else _slot_claim(slot, job)
    [[outcome]], changes = log.apply(ClaimRuns(slot + 5 if at_ms is None else at_ms, "w1", [claim]))
    assert outcome is None or isinstance(outcome, Run)
    return outcome, changes


def _report(log: _Log, job: Job, slot: int, at_ms: int, *, ok: bool = True, attempt: int = 1) -> Changes:
    [[outcome]], changes = log.apply(ReportResults(at_ms, OWNER, [Result(job.id, slot, attempt, ok)]))
    assert isinstance(outcome, Run)
    return changes


def _run(store: Store, job: Job, slot: int) -> Run:
    return store.get_run(OWNER, ids.run_id(job.id, slot))[0]


def _events(store: Store) -> list[str]:
    return [event.type for _, event in store.list_events(OWNER, 0, 100)]


def test_allow_is_the_default_and_runs_overlap(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log)
    assert job.overlap is None
    slot = job.slot_ms
    assert slot is not None
    assert _claim(log, job, slot)[0] is not None
    second, _ = _claim(log, job, slot + MIN)
    assert second is not None and second.status == "claimed"


def test_skip_records_the_slot_skipped_and_plans_the_next(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="skip")
    assert job.overlap == "skip"
    slot = job.slot_ms
    assert slot is not None
    assert _claim(log, job, slot)[0] is not None
    refused, changes = _claim(log, job, slot + MIN)
    assert refused is None
    assert changes.skipped == 1
    skipped = _run(store, job, slot + MIN)
    assert (skipped.status, skipped.reason, skipped.finished_ms, skipped.attempt) == ("skipped", "overlap", slot + MIN + 5, 0)
    # The schedule went on: the job keeps exactly one waiting scheduled run.
    stored = store.get_job(OWNER, job.id)
    assert stored.slot_ms == slot + 2 * MIN and stored.next_run_at_ms == slot + 2 * MIN
    assert _run(store, job, slot + 2 * MIN).status == "waiting"
    assert "run.skipped" in _events(store)
    assert store.job_outcome(job.id) is not None and store.job_outcome(job.id).skipped == 1  # type: ignore[union-attr]
    listed, _ = store.list_owner_runs(OWNER, status="skipped", limit=10, cursor=None)
    assert [r.nominal_ms for r in listed] == [slot + MIN]
    # Once the running run ended, the next slot runs.
    _report(log, job, slot, slot + 2 * MIN)
    third, _ = _claim(log, job, slot + 2 * MIN)
    assert third is not None and third.status == "claimed"


def test_a_run_waiting_for_its_next_attempt_is_not_running_and_its_retry_waits_its_turn(store: Store) -> None:
    """A run is running from its claim until its result, or until its lease
    or timeout ends it: between attempts it is not, and the next slot runs.
    Its retry, no new slot, is never skipped: due while that slot's run
    runs, it waits buffered, and is due the moment that run ends."""
    log = _Log(store)
    _, job = _create(store, log, overlap="skip", retry={"max_attempts": 3, "backoff_s": [30]})
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    _report(log, job, slot, slot + 10, ok=False)
    assert _run(store, job, slot).status == "waiting"
    second, _ = _claim(log, job, slot + MIN)
    assert second is not None and second.status == "claimed"
    held, changes = _claim(log, job, slot, slot + MIN + 30, plain=True)
    assert held is None and changes.skipped == 0
    retry = _run(store, job, slot)
    assert retry.status == "waiting" and retry.buffered and retry.attempt == 1
    _report(log, job, slot + MIN, slot + MIN + 40)
    released = _run(store, job, slot)
    assert not released.buffered and released.due_ms == slot + MIN + 40
    retried, _ = _claim(log, job, slot, slot + MIN + 41, plain=True)
    assert retried is not None and retried.attempt == 2


def test_an_expired_lease_ends_the_running_run_and_the_next_slot_runs(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="skip", retry={"max_attempts": 3, "backoff_s": [30]})
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    log.apply(ExpireLeases(slot + MIN, [Expiry(job.id, slot, 1)]))
    assert _run(store, job, slot).status == "waiting"
    second, changes = _claim(log, job, slot + MIN, slot + MIN + 1)
    assert second is not None and second.status == "claimed" and changes.skipped == 0


def test_buffer_one_holds_one_run_and_skips_the_rest(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="buffer_one")
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    held, changes = _claim(log, job, slot + MIN)
    assert held is None and changes.skipped == 0
    buffered = _run(store, job, slot + MIN)
    assert buffered.status == "waiting" and buffered.buffered
    assert buffered.due_ms == limits.overlap_buffered_due_ms
    # Kept out of the dispatcher: it moved past any window it loads.
    assert not any(run.nominal_ms == slot + MIN and run.due_ms < limits.overlap_buffered_due_ms
                   for _, run, _ in changes.woken)
    assert _claim(log, job, slot + 2 * MIN)[0] is None
    assert _run(store, job, slot + 2 * MIN).status == "skipped"
    # The running run ends: the buffered one is due at once.
    changes = _report(log, job, slot, slot + 2 * MIN + 30)
    released = _run(store, job, slot + MIN)
    assert not released.buffered and released.due_ms == slot + 2 * MIN + 30
    assert [(run.nominal_ms, run.due_ms) for _, run, _ in changes.woken] == [(slot + MIN, slot + 2 * MIN + 30)]
    claimed, _ = _claim(log, job, slot + MIN, slot + 2 * MIN + 31, plain=True)
    assert claimed is not None and claimed.status == "claimed"


def test_buffer_all_runs_every_slot_in_order_one_at_a_time(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="buffer_all")
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    for k in (1, 2, 3):
        assert _claim(log, job, slot + k * MIN)[0] is None
    assert [_run(store, job, slot + k * MIN).buffered for k in (1, 2, 3)] == [True, True, True]
    at = slot + 4 * MIN
    for k in (1, 2, 3):
        _report(log, job, slot + (k - 1) * MIN, at)
        # Only the oldest buffered run was released.
        assert not _run(store, job, slot + k * MIN).buffered
        assert all(_run(store, job, slot + n * MIN).buffered for n in range(k + 1, 4))
        claimed, _ = _claim(log, job, slot + k * MIN, at + 1, plain=True)
        assert claimed is not None
        at += 10


def test_buffer_all_is_bounded(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "overlap_buffered_runs_max", 2)
    log = _Log(store)
    _, job = _create(store, log, overlap="buffer_all")
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    for k in (1, 2, 3):
        _claim(log, job, slot + k * MIN)
    assert [_run(store, job, slot + k * MIN).status for k in (1, 2, 3)] == ["waiting", "waiting", "skipped"]


def test_a_released_run_goes_before_a_later_slot(store: Store) -> None:
    """A later slot's run that comes due while a released one still waits
    for its claim queues behind the buffered runs, not ahead of them."""
    log = _Log(store)
    _, job = _create(store, log, overlap="buffer_all")
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    _claim(log, job, slot + MIN)
    _claim(log, job, slot + 2 * MIN)
    _report(log, job, slot, slot + 3 * MIN)  # slot + MIN released; slot + 2 MIN still buffered
    assert _claim(log, job, slot + 3 * MIN, slot + 3 * MIN + 5)[0] is None
    assert _run(store, job, slot + 3 * MIN).buffered
    assert _claim(log, job, slot + MIN, slot + 3 * MIN + 6, plain=True)[0] is not None


def test_cancel_other_asks_the_running_run_to_stop_and_runs_the_new_one(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="cancel_other", retry={"max_attempts": 3, "backoff_s": [30]})
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    new, changes = _claim(log, job, slot + MIN)
    assert new is not None and new.status == "claimed"
    assert changes.stopping == [(job.id, slot)]
    assert _run(store, job, slot).cancel == "requested"
    # A run waiting for its next attempt is not running: nothing to stop.
    _report(log, job, slot + MIN, slot + MIN + 10, ok=False)
    assert _run(store, job, slot + MIN).status == "waiting"
    third, changes = _claim(log, job, slot + 2 * MIN)
    assert third is not None and third.status == "claimed" and changes.stopping == []
    assert _run(store, job, slot + MIN).status == "waiting"


def test_triggered_runs_obey_the_policy_and_backfill_is_exempt(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="skip")
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    [triggered], _ = log.apply(TriggerJob(slot + 10, OWNER, job.id))
    assert isinstance(triggered, Run)
    assert _claim(log, job, triggered.nominal_ms, slot + 11, plain=True)[0] is None
    assert _run(store, job, triggered.nominal_ms).status == "skipped"
    [made], _ = log.apply(BackfillJob(slot + 20, OWNER, job.id, [slot - MIN]))
    assert isinstance(made, list) and len(made) == 1
    backfilled, _ = _claim(log, job, slot - MIN, slot + 21, plain=True)
    assert backfilled is not None and backfilled.status == "claimed"


def test_two_claims_in_one_command_see_each_other(store: Store) -> None:
    """A claim racing a just-claimed run of the same job (one batch) is
    decided against it."""
    log = _Log(store)
    _, job = _create(store, log, overlap="skip")
    slot = job.slot_ms
    assert slot is not None
    [triggered], _ = log.apply(TriggerJob(slot, OWNER, job.id))
    assert isinstance(triggered, Run)
    claims = [_slot_claim(slot, job), Claim(job.id, triggered.nominal_ms, slot + 10 * MIN)]
    [[first, second]], _ = log.apply(ClaimRuns(slot + 5, "w1", claims))
    assert isinstance(first, Run) and second is None
    assert _run(store, job, triggered.nominal_ms).status == "skipped"


def test_an_expired_lease_or_a_cancel_ends_the_running_run(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="buffer_one", retry={"max_attempts": 1})
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    _claim(log, job, slot + MIN)
    log.apply(ExpireLeases(slot + 2 * MIN, [Expiry(job.id, slot, 1)]))
    assert _run(store, job, slot).status == "failed"
    assert _run(store, job, slot + MIN).due_ms == slot + 2 * MIN
    _claim(log, job, slot + MIN, slot + 2 * MIN + 1, plain=True)
    _claim(log, job, slot + 2 * MIN, slot + 2 * MIN + 2)
    assert _run(store, job, slot + 2 * MIN).buffered
    log.apply(CancelRun(slot + 2 * MIN + 3, OWNER, job.id, slot + MIN))
    _report(log, job, slot + MIN, slot + 2 * MIN + 4, ok=False)  # stopped, as asked
    assert _run(store, job, slot + MIN).status == "cancelled"
    assert _run(store, job, slot + 2 * MIN).due_ms == slot + 2 * MIN + 4


def test_a_patch_away_from_buffering_releases_the_buffered_runs(store: Store) -> None:
    log = _Log(store)
    jobs, job = _create(store, log, overlap="buffer_all")
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    _claim(log, job, slot + MIN)
    _claim(log, job, slot + 2 * MIN)
    stored = store.get_job(OWNER, job.id)
    body = _patched(job_view(stored), {"overlap": "allow"})

    async def patch() -> Job:
        return await jobs.patch(stored, body, from_msgpack=False)

    patched = trio.run(patch)
    assert patched.overlap is None
    assert [_run(store, job, slot + k * MIN).buffered for k in (1, 2)] == [False, False]
    assert [_run(store, job, slot + k * MIN).due_ms for k in (1, 2)] == [T0, T0]


def test_overlap_is_for_repeating_jobs(store: Store) -> None:
    log = _Log(store)
    with pytest.raises(errors.Invalid) as raised:
        _create(store, log, schedule={"at": "2027-01-15T09:00:00Z"}, overlap="skip")
    assert [loc for loc, _ in raised.value.errors] == ["overlap"]
    _, one_off = _create(store, log, schedule={"at": "2027-01-15T09:00:00Z"}, overlap="allow")
    assert one_off.overlap is None


def test_two_stores_fed_the_same_entries_agree(two_stores: list[Store]) -> None:
    first, second = _Log(two_stores[0]), _Log(two_stores[1])
    body = msgspec.json.decode(json.dumps({"target": "queue:q", "schedule": {"every_s": 60}, "overlap": "buffer_one"}),
                               type=JobCreate)
    item = Jobs(two_stores[0], first, now_ms=lambda: T0).new_job(  # type: ignore[arg-type] - the log commits
        OWNER, body, T0, from_msgpack=False
    )
    job = item.job
    assert job.slot_ms is not None
    slot = job.slot_ms
    entries: list[list[Command]] = [
        [CreateJobs(T0, [item])],
        [ClaimRuns(slot + 5, "w1", [_slot_claim(slot, job)])],
        [ClaimRuns(slot + MIN + 5, "w1", [_slot_claim(slot + MIN, job)])],
        [ClaimRuns(slot + 2 * MIN + 5, "w1", [_slot_claim(slot + 2 * MIN, job)])],
        [ReportResults(slot + 3 * MIN, OWNER, [Result(job.id, slot, 1, True)])],
    ]
    for commands in entries:
        for log in (first, second):
            log.apply(*msgspec.msgpack.decode(msgspec.msgpack.encode(commands), type=list[Command]))
    assert two_stores[0].digest() == two_stores[1].digest()
    assert _run(two_stores[0], job, slot + MIN).status == "waiting"
    assert _run(two_stores[0], job, slot + 2 * MIN).status == "skipped"


# -- the dispatcher: due runs of such jobs are decided on when they fall due --------


def _rig(tmp_path):
    from .test_dispatch_core import Rig

    return Rig(str(tmp_path / "data"))


def _create_every_minute(rig, overlap: str) -> str:
    body = JobCreate(target="queue:work", schedule=ScheduleIn(every_s=60), overlap=overlap)  # type: ignore[arg-type]
    item = rig.jobs.new_job(OWNER, body, rig.now_ms, from_msgpack=False, job_id=ids.job_ids_from_int(rig.now_ms, 1, 1)[0])
    [created] = rig.commit(CreateJobs(rig.now_ms, [item]))
    return created.job.id


def _decide(rig) -> list[bool]:
    """The driver's overlap round: propose, apply (changes fed first), hand back."""
    proposal = rig.core.propose_overlap(rig.now_ms)
    if proposal is None:
        return []
    outcomes = rig.commit(proposal.command)
    rig.core.overlap_applied(proposal, outcomes)
    return outcomes


def test_the_dispatcher_has_apply_decide_when_a_slot_falls_due(tmp_path) -> None:
    """A `skip` slot is skipped when it falls due, not only when a claim
    comes for it: a busy worker that claims later finds the next slot, not
    the one that came due while its run ran."""
    rig = _rig(tmp_path)
    try:
        job_id = _create_every_minute(rig, "skip")
        rig.advance(60)
        rig.tick()
        # Set aside, not ready: apply decides first.
        assert rig.core.ready_count() == 0 and len(rig.core.overlap_due) == 1
        assert _decide(rig) == [True]
        [first] = rig.claim(["default\x00work"])
        rig.advance(60)
        rig.tick()
        assert _decide(rig) == [False]  # skipped as it fell due
        assert rig.core.ready_count() == 0 and not rig.core.overlap_due
        second_slot = first.run.nominal_ms + MIN
        assert rig.store.get_run(OWNER, ids.run_id(job_id, second_slot))[0].status == "skipped"
        rig.check()
        rig.report(first)
        rig.advance(60)
        rig.tick()
        assert _decide(rig) == [True]
        [third] = rig.claim(["default\x00work"])
        assert third.run.nominal_ms == second_slot + MIN
        rig.check()
    finally:
        rig.close()


def test_buffered_runs_leave_the_dispatcher_and_come_back_when_released(tmp_path) -> None:
    rig = _rig(tmp_path)
    try:
        _create_every_minute(rig, "buffer_one")
        rig.advance(60)
        rig.tick()
        _decide(rig)
        [first] = rig.claim(["default\x00work"])
        rig.advance(60)
        rig.tick()
        assert _decide(rig) == [False]
        assert not rig.core.queue_of or all(job.id != first.job.id or key in rig.core.wheel
                                            for key, (_, job) in rig.core.queue_of.items())
        rig.check()
        rig.report(first)  # releases the buffered run: due now, fed back in
        rig.tick()
        assert _decide(rig) == [True]
        [second] = rig.claim(["default\x00work"])
        assert second.run.nominal_ms == first.run.nominal_ms + MIN
        rig.check()
    finally:
        rig.close()


def test_a_proposal_not_written_is_proposed_again(tmp_path) -> None:
    rig = _rig(tmp_path)
    try:
        _create_every_minute(rig, "skip")
        rig.advance(60)
        rig.tick()
        proposal = rig.core.propose_overlap(rig.now_ms)
        assert proposal is not None and not rig.core.overlap_due
        rig.core.overlap_failed(proposal)
        assert _decide(rig) == [True]
        assert len(rig.claim(["default\x00work"])) == 1
    finally:
        rig.close()


def test_a_buffered_run_cancelled_is_listed_when_it_ended(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="buffer_one")
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    _claim(log, job, slot + MIN)
    [cancelled], _ = log.apply(CancelRun(slot + MIN + 10, OWNER, job.id, slot + MIN))
    assert isinstance(cancelled, Run) and cancelled.status == "cancelled"
    shown = _run(store, job, slot + MIN)
    assert not shown.buffered and shown.due_ms == slot + MIN + 10
    listed, _ = store.list_owner_runs(OWNER, status="cancelled", limit=10, cursor=None)
    assert [r.nominal_ms for r in listed] == [slot + MIN]
    # The running run's end releases nothing: nothing is buffered.
    _report(log, job, slot, slot + 2 * MIN)
    assert _run(store, job, slot + MIN).status == "cancelled"


def test_pausing_cancels_buffered_runs_and_resuming_waits_for_the_next_slot(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="buffer_all")
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    _claim(log, job, slot + MIN)
    log.apply(PauseJob(slot + MIN + 10, OWNER, job.id))
    assert _run(store, job, slot + MIN).status == "cancelled"
    # The running run's end releases nothing, paused or resumed.
    _report(log, job, slot, slot + MIN + 20)
    log.apply(ResumeJob(slot + MIN + 30, OWNER, job.id, slot + 3 * MIN, slot + 3 * MIN))
    assert [r.nominal_ms for r in store.list_runs(OWNER, job.id, since_ms=None, until_ms=None, limit=100,
                                                    cursor_ms=None)[0] if r.status == "waiting"] == [slot + 3 * MIN]


def test_the_dispatcher_sets_nothing_aside_for_allow_jobs(tmp_path) -> None:
    rig = _rig(tmp_path)
    try:
        _create_every_minute(rig, "allow")
        rig.advance(60)
        rig.tick()
        assert rig.core.ready_count() == 1 and not rig.core.overlap_due
        assert rig.core.propose_overlap(rig.now_ms) is None
    finally:
        rig.close()


# -- with end conditions (docs/semantics.md "End conditions") --------------------------


def test_a_buffered_slot_counts_toward_max_runs(store: Store) -> None:
    """`max_runs` counts slots that run: a buffered one will, so the slot
    after it is not planned past the bound, and its end completes the job."""
    log = _Log(store)
    _, job = _create(store, log, overlap="buffer_one", schedule={"every_s": 60, "max_runs": 2})
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    assert store.get_job(OWNER, job.id).runs_done == 1
    _claim(log, job, slot + MIN)  # buffered: the job's second and last run
    stored = store.get_job(OWNER, job.id)
    assert stored.next_run_at_ms is None and stored.slot_ms == slot + MIN
    assert _run(store, job, slot + MIN).buffered
    assert _run_at_or_none(store, job, slot + 2 * MIN) is None
    _report(log, job, slot, slot + 2 * MIN)
    released, _ = _claim(log, job, slot + MIN, slot + 2 * MIN + 1, plain=True)
    assert released is not None
    assert store.get_job(OWNER, job.id).runs_done == 2
    _report(log, job, slot + MIN, slot + 2 * MIN + 2)
    assert store.get_job(OWNER, job.id).state == "completed"


def test_a_skipped_slot_does_not_count_and_a_skipped_last_slot_completes_the_job(store: Store) -> None:
    log = _Log(store)
    _, job = _create(store, log, overlap="skip", schedule={"every_s": 60, "max_runs": 2})
    slot = job.slot_ms
    assert slot is not None
    _claim(log, job, slot)
    _claim(log, job, slot + MIN)  # skipped: not counted, the next slot is planned
    stored = store.get_job(OWNER, job.id)
    assert stored.runs_done == 1 and stored.slot_ms == slot + 2 * MIN
    _report(log, job, slot, slot + 2 * MIN)
    _claim(log, job, slot + 2 * MIN)
    assert store.get_job(OWNER, job.id).runs_done == 2
    _report(log, job, slot + 2 * MIN, slot + 3 * MIN)
    assert store.get_job(OWNER, job.id).state == "completed"
    # end_at: the last slot skipped while a run runs completes the job then.
    _, ending = _create(store, log, overlap="skip",
                        schedule={"every_s": 60, "end_at": "2027-01-15T08:02:00Z"})
    first = ending.slot_ms
    assert first == T0 + MIN
    _claim(log, ending, first)
    # The dispatcher plans no slot past end_at: the claim of the last slot carries none.
    [[outcome]], _ = log.apply(ClaimRuns(first + MIN + 5, "w1", [Claim(ending.id, first + MIN, first + 11 * MIN)]))
    assert outcome is None
    assert _run(store, ending, first + MIN).status == "skipped"
    assert store.get_job(OWNER, ending.id).state == "completed"


def _run_at_or_none(store: Store, job: Job, slot: int) -> Run | None:
    try:
        return _run(store, job, slot)
    except errors.NotFound:
        return None


def test_a_run_asked_to_stop_by_a_later_claim_of_the_same_batch_is_handed_out_so(store: Store) -> None:
    """One claim takes a `cancel_other` job's slot run and then its
    triggered run: the second asks the first to stop, and the first's
    outcome (from which the dispatcher makes its lease, and so its
    heartbeats' answer) says so, as the stored run does."""
    log = _Log(store)
    _, job = _create(store, log, overlap="cancel_other")
    slot = job.slot_ms
    assert slot is not None
    [triggered], _ = log.apply(TriggerJob(slot + 1, OWNER, job.id))
    assert isinstance(triggered, Run)
    claims = [_slot_claim(slot, job), Claim(job.id, triggered.nominal_ms, slot + 10 * MIN)]
    [[first, second]], changes = log.apply(ClaimRuns(slot + 5, "w1", claims))
    assert isinstance(first, Run) and isinstance(second, Run)
    assert changes.stopping == [(job.id, slot)]
    assert _run(store, job, slot).cancel == "requested"
    assert first.cancel == "requested" and second.cancel is None
