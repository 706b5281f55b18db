"""Pre-dispatch (docs/semantics.md "Pre-dispatch"): a claim that looks
ahead takes runs due within its `ahead_ms`, earliest first, each leased
from its due time; a pause, cancel or patch stamped more than
`limits.predispatch_stop_ms` before such a run's due time stops it in
apply, a later one does not; the leader says whether a held run may
start (`start_of`). Stepped from plain code, as tests/engine/test_dispatch_core.py."""

import msgspec
import pytest

from tempo import clock, ids, limits
from tempo.engine import keys
from tempo.engine.commands import CancelRun, CreateJobs, DeleteJob, PatchJob, PauseJob
from tempo.engine.dispatch_core import ClaimedRun, DispatchCore
from tempo.schema import JobCreate, RetryIn, ScheduleIn

from .test_dispatch_core import OWNER, QUEUE, T0_MS, Rig, run_id

STOP_MS = limits.predispatch_stop_ms


def claim_ahead(rig: Rig, ahead_ms: int, runs_max: int = 10, worker: str = "w1") -> list[ClaimedRun]:
    core = rig.core
    rig.tick()
    taken = core.take([QUEUE], runs_max, rig.mono_s, rig.now_ms + ahead_ms)
    if not taken.runs:
        return []
    proposal = core.propose_claims(worker, taken.runs, rig.now_ms, rig.mono_s, ahead_ms)
    try:
        assert proposal.command is not None
        assert proposal.command.ahead_ms == ahead_ms
        return core.claimed(proposal, rig.commit(proposal.command))  # type: ignore[arg-type]
    finally:
        core.settle(proposal)


@pytest.fixture
def rig(tmp_path):
    made = Rig(str(tmp_path / "data"))
    yield made
    made.check()
    made.close()


def test_a_claim_that_looks_ahead_takes_runs_due_within_it_earliest_first(rig: Rig) -> None:
    late = rig.create(at_s=5)
    soon = rig.create(at_s=2)
    far = rig.create(at_s=12)
    assert rig.claim() == []  # nothing is due: today's claim takes nothing
    assert claim_ahead(rig, 1000) == []
    claimed = claim_ahead(rig, 6000)
    assert [c.run.job_id for c in claimed] == soon + late
    assert [c.run.due_ms for c in claimed] == [T0_MS + 2000, T0_MS + 5000]
    assert all(c.run.status == "claimed" and c.run.attempt == 1 for c in claimed)
    assert claim_ahead(rig, limits.claim_ahead_ms_max) == []  # 12 s is beyond the longest look ahead
    rig.advance(3)
    assert [c.run.job_id for c in claim_ahead(rig, 9500)] == far


def test_a_run_that_comes_within_reach_after_later_ones_is_taken_ahead_first(rig: Rig) -> None:
    # Runs come within the pre-dispatch horizon in due order as time
    # passes, but a run made later (a new job, a trigger, a retry) may be
    # due before those already within it. It is taken first, and by a
    # claim that looks only as far as it: it sat behind the later run, and
    # a claim looking 5 s ahead took nothing (the lifecycle model found it).
    [later] = rig.create(at_s=9)
    rig.tick()
    [sooner] = rig.create(at_s=2)
    assert [c.run.job_id for c in claim_ahead(rig, 5000)] == [sooner]
    [again] = rig.create(at_s=3)
    rig.tick()
    [also] = rig.create(at_s=1)
    assert [c.run.job_id for c in claim_ahead(rig, 10_000, runs_max=1, worker="w2")] == [also]
    assert [c.run.job_id for c in claim_ahead(rig, 10_000, worker="w2")] == [again, later]


def test_a_run_claimed_ahead_is_leased_from_its_due_time(rig: Rig) -> None:
    [job_id] = rig.create(at_s=4, lease_s=30)
    [claimed] = claim_ahead(rig, 5000)
    assert claimed.run.lease_expires_ms == T0_MS + 4000 + 30_000
    rig.advance(33)  # past a lease counted from the claim, before one from the due time
    assert rig.expire() == []
    rig.advance(1.5)
    [expired] = rig.expire()
    assert expired is not None and expired.job_id == job_id and expired.status == "waiting"


def test_a_run_claimed_ahead_does_not_fall_due_again_in_the_ready_queue(rig: Rig) -> None:
    rig.create(at_s=1)
    assert len(claim_ahead(rig, 2000)) == 1
    rig.advance(1.5)
    rig.tick()
    assert rig.claim() == []
    assert rig.core.ready_count() == 0


@pytest.mark.parametrize("early_ms", [STOP_MS + 1, 3000])
def test_a_cancel_stamped_before_the_stop_point_ends_a_held_run(rig: Rig, early_ms: int) -> None:
    rig.create(at_s=4)
    [claimed] = claim_ahead(rig, 5000)
    run = claimed.run
    rig.now_ms = run.due_ms - early_ms
    outcome = rig.commit(CancelRun(rig.now_ms, OWNER, run.job_id, run.nominal_ms))
    assert outcome.status == "cancelled"  # type: ignore[union-attr]
    assert rig.core.start_of(OWNER, run_id(claimed), run.attempt)[0] is False
    assert rig.core.leases == {}


@pytest.mark.parametrize("late_ms", [STOP_MS, 0, -500])
def test_a_cancel_stamped_after_the_stop_point_asks_the_run_to_stop(rig: Rig, late_ms: int) -> None:
    rig.create(at_s=4)
    [claimed] = claim_ahead(rig, 5000)
    run = claimed.run
    rig.now_ms = run.due_ms - late_ms
    outcome = rig.commit(CancelRun(rig.now_ms, OWNER, run.job_id, run.nominal_ms))
    assert outcome.status == "claimed" and outcome.cancel == "requested"  # type: ignore[union-attr]
    rig.core.stop_requested([(run.job_id, run.nominal_ms)])  # as the driver does with `Changes.stopping`
    # It was asked to stop: it does not start either (the lease's mark).
    assert rig.core.start_of(OWNER, run_id(claimed), run.attempt) == (False, run.due_ms)


def test_a_pause_before_the_stop_point_cancels_a_held_run(rig: Rig) -> None:
    [job_id] = rig.create(at_s=4)
    [claimed] = claim_ahead(rig, 5000)
    run = claimed.run
    rig.now_ms = run.due_ms - STOP_MS - 1
    rig.commit(PauseJob(rig.now_ms, OWNER, job_id))
    stored = rig.store.get_run_any(run.job_id, run.nominal_ms)
    assert stored is not None and stored.status == "cancelled"
    assert rig.core.start_of(OWNER, run_id(claimed), run.attempt)[0] is False


def test_a_pause_after_the_stop_point_lets_a_held_run_start(rig: Rig) -> None:
    [job_id] = rig.create(at_s=4)
    [claimed] = claim_ahead(rig, 5000)
    run = claimed.run
    rig.now_ms = run.due_ms - STOP_MS
    rig.commit(PauseJob(rig.now_ms, OWNER, job_id))
    stored = rig.store.get_run_any(run.job_id, run.nominal_ms)
    assert stored is not None and stored.status == "claimed"
    assert rig.core.start_of(OWNER, run_id(claimed), run.attempt) == (True, run.due_ms)


def test_a_patch_before_the_stop_point_hands_a_held_run_back(rig: Rig) -> None:
    [job_id] = rig.create(at_s=4)
    [claimed] = claim_ahead(rig, 5000)
    run = claimed.run
    job = rig.store.get_job_any(job_id)
    assert job is not None
    rig.now_ms = run.due_ms - 2000
    new = msgspec.structs.replace(job, payload={"v": 2})
    rig.commit(PatchJob(rig.now_ms, OWNER, job_id, job.version, new, False, None, None))
    stored = rig.store.get_run_any(run.job_id, run.nominal_ms)
    assert stored is not None and stored.status == "waiting" and stored.attempt == 1
    assert rig.core.start_of(OWNER, run_id(claimed), 1)[0] is False
    [again] = claim_ahead(rig, 5000, worker="w2")
    assert again.run.attempt == 2 and again.job.payload == {"v": 2}


def _runs(rig: Rig, job_id: str) -> list[tuple[int, str]]:
    """(nominal ms, status) of every run of the job, oldest first."""
    found = rig.store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=100, cursor_ms=None)[0]
    return sorted((r.nominal_ms, r.status) for r in found)


def _replan(rig: Rig, job_id: str, slot_ms: int, **schedule: object) -> None:
    """A patch of the job's schedule, its first slot `slot_ms` (what the
    node taking the request computes), stamped now."""
    job = rig.store.get_job_any(job_id)
    assert job is not None
    new_schedule = rig.jobs.new_job(OWNER, JobCreate(target="queue:work", schedule=ScheduleIn(**schedule)),
                                    rig.now_ms, from_msgpack=False).job.schedule
    new = msgspec.structs.replace(job, schedule=new_schedule)
    rig.commit(PatchJob(rig.now_ms, OWNER, job_id, job.version, new, True, slot_ms, slot_ms))


def test_a_one_off_moved_later_while_held_runs_once_at_its_new_time(rig: Rig) -> None:
    # A held run stopped by a patch is the job's waiting run again: a patch
    # that moves the schedule cancels it, as it cancels a waiting run, and
    # the run of the new slot is the one that runs.
    [job_id] = rig.create(at_s=4)
    [claimed] = claim_ahead(rig, 5000)
    rig.now_ms = claimed.run.due_ms - 2000
    new_ms = T0_MS + 8000
    _replan(rig, job_id, new_ms, at=clock.datetime_from_ms(new_ms))
    assert _runs(rig, job_id) == [(T0_MS + 4000, "cancelled"), (new_ms, "waiting")]
    # The dispatcher holds the new run only: the held run's hand-back,
    # cancelled in the same entry, is not fed to it as waiting.
    assert [keys.nominal_of(k) for k in rig.core.queue_of] == [new_ms]
    assert rig.core.start_of(OWNER, run_id(claimed), 1)[0] is False
    rig.now_ms = T0_MS + 4000
    assert claim_ahead(rig, 0, worker="w2") == []  # nothing due at the old time
    [again] = claim_ahead(rig, 5000, worker="w2")
    assert (again.run.nominal_ms, again.run.attempt) == (new_ms, 1)


def test_a_repeating_job_whose_period_changes_while_held_runs_the_new_slots_only(rig: Rig) -> None:
    body = JobCreate(target="queue:work", schedule=ScheduleIn(every_s=4))
    [created] = rig.commit(CreateJobs(rig.now_ms, [rig.jobs.new_job(OWNER, body, rig.now_ms, from_msgpack=False)]))  # type: ignore[misc]
    job_id, first_ms = created.job.id, created.job.slot_ms  # type: ignore[union-attr]
    rig.now_ms = first_ms - 3000
    [claimed] = claim_ahead(rig, 5000)
    assert claimed.run.nominal_ms == first_ms
    assert _runs(rig, job_id) == [(first_ms, "claimed"), (first_ms + 4000, "waiting")]
    rig.now_ms = first_ms - 2000
    new_ms = first_ms + 3000  # every 7 s from the same start: not a slot of the old period
    _replan(rig, job_id, new_ms, every_s=7)
    assert _runs(rig, job_id) == [(first_ms, "cancelled"), (new_ms, "waiting"), (first_ms + 4000, "cancelled")]


def test_a_patch_that_keeps_the_held_runs_slot_keeps_it_as_the_slots_run(rig: Rig) -> None:
    # Only the due time moves (its jitter, say): the held run waits again
    # as the run of that slot, and the slot the claim handed on to is
    # planned again by its claim.
    body = JobCreate(target="queue:work", schedule=ScheduleIn(every_s=4))
    [created] = rig.commit(CreateJobs(rig.now_ms, [rig.jobs.new_job(OWNER, body, rig.now_ms, from_msgpack=False)]))  # type: ignore[misc]
    job_id, first_ms = created.job.id, created.job.slot_ms  # type: ignore[union-attr]
    rig.now_ms = first_ms - 3000
    assert len(claim_ahead(rig, 5000)) == 1
    rig.now_ms = first_ms - 2000
    _replan(rig, job_id, first_ms, every_s=4)
    runs = _runs(rig, job_id)
    assert runs[0] == (first_ms, "waiting") and [s for _, s in runs].count("waiting") == 1, runs
    rig.now_ms = first_ms
    [again] = claim_ahead(rig, 0, worker="w2")
    assert (again.run.nominal_ms, again.run.attempt) == (first_ms, 2)
    assert (first_ms + 4000, "waiting") in _runs(rig, job_id)


def test_a_delete_stops_a_held_run(rig: Rig) -> None:
    [job_id] = rig.create(at_s=4)
    [claimed] = claim_ahead(rig, 5000)
    rig.commit(DeleteJob(rig.now_ms, OWNER, job_id))
    assert rig.core.start_of(OWNER, run_id(claimed), 1)[0] is False


def test_a_held_run_starts_at_its_own_attempt_only(rig: Rig) -> None:
    rig.create(at_s=4)
    [claimed] = claim_ahead(rig, 5000)
    assert rig.core.start_of(OWNER, run_id(claimed), 1) == (True, T0_MS + 4000)
    assert rig.core.start_of(OWNER, run_id(claimed), 2)[0] is False
    assert rig.core.start_of("other", run_id(claimed), 1)[0] is False


def test_a_starts_call_answers_each_run_as_start_of_does(rig: Rig) -> None:
    # A `POST /v1/starts` parses its run IDs once and looks their leases up
    # in one pass (`may_start`): the same answers, and due time, as
    # `start_of` gives run by run, the leased and the rest, and the latest
    # due time among the runs that may start.
    held, deleted = rig.create(at_s=4), rig.create(at_s=6)
    claimed = claim_ahead(rig, 7000)
    assert len(claimed) == 2
    rig.commit(DeleteJob(rig.now_ms, OWNER, deleted[0]))
    asked = [(run_id(c), attempt) for c in claimed for attempt in (1, 2)] + [("r_bogus", 1)]
    for owner in (OWNER, "other", None):
        parsed = [(ids.parse_run_id(r), attempt) for r, attempt in asked]
        by_run = [rig.core.start_of(owner, r, attempt) for r, attempt in asked]
        latest_ms = max((due_ms for ok, due_ms in by_run if ok), default=0)
        assert rig.core.may_start(owner, parsed) == ([ok for ok, _ in by_run], latest_ms)
    assert rig.core.may_start(OWNER, [(ids.parse_run_id(run_id(c)), 1) for c in claimed])[0] == [
        c.run.job_id == held[0] for c in claimed
    ]


def test_a_starts_call_waits_only_for_the_runs_it_may_start(rig: Rig) -> None:
    # The call is answered at the stop point of the latest due time among
    # the runs it may start. A run it answers `stop` never starts again at
    # the attempt asked, so its due time does not count: here a run whose
    # lease ran out, re-claimed by another worker and failed, waits for
    # its retry five minutes on, and held the whole call, the other run
    # too, until then (the lifecycle model found it).
    retry = RetryIn(max_attempts=3, backoff_s=(300,))
    [lost], [kept] = rig.create(at_s=4, lease_s=5, retry=retry), rig.create(at_s=4, lease_s=60, retry=retry)
    held = {c.run.job_id: c for c in claim_ahead(rig, 5000)}
    rig.advance(10)
    assert [(e.job_id, e.attempt) for e in rig.expire()] == [(lost, 1)]
    rig.tick()
    [again] = rig.claim(worker="w2")
    assert (again.run.job_id, again.run.attempt) == (lost, 2)
    assert rig.report(again, ok=False).due_ms == rig.now_ms + 300_000
    asked = [(ids.parse_run_id(run_id(held[j])), 1) for j in (lost, kept)]
    assert rig.core.may_start(OWNER, asked) == ([False, True], T0_MS + 4000)
    assert rig.core.start_of(OWNER, run_id(held[lost]), 1) == (False, rig.now_ms + 300_000)


def test_a_starts_call_answered_before_its_wait_sees_each_lease_change_after_it(rig: Rig) -> None:
    # The leader answers a call when it comes and, after the barrier at
    # the stop point, looks again at the runs whose lease changed
    # (`watch_leases`, `may_start_again`): the answer is the one the runs
    # have then.
    job_ids = [rig.create(at_s=4)[0] for _ in range(5)]
    claimed = {c.run.job_id: c for c in claim_ahead(rig, 5000)}
    kept, cancelled, asked_to_stop, deleted, patched = (claimed[j].run for j in job_ids)
    asked = [(ids.parse_run_id(run_id(claimed[j])), 1) for j in job_ids]
    first, _ = rig.core.may_start(OWNER, asked)
    assert first == [True] * 5
    changed = rig.core.watch_leases()
    rig.now_ms = kept.due_ms - 2000
    rig.commit(CancelRun(rig.now_ms, OWNER, cancelled.job_id, cancelled.nominal_ms))
    rig.commit(DeleteJob(rig.now_ms, OWNER, deleted.job_id))
    job = rig.store.get_job_any(patched.job_id)
    assert job is not None
    rig.commit(PatchJob(rig.now_ms, OWNER, job.id, job.version, msgspec.structs.replace(job, payload={"v": 2}), False,
                        None, None))
    assert [c.run.attempt for c in claim_ahead(rig, 5000, worker="w2")] == [2]  # a new lease, of another attempt
    rig.now_ms = kept.due_ms - STOP_MS
    rig.commit(CancelRun(rig.now_ms, OWNER, asked_to_stop.job_id, asked_to_stop.nominal_ms))
    rig.core.stop_requested([(asked_to_stop.job_id, asked_to_stop.nominal_ms)])  # as the driver does
    rig.core.unwatch_leases(changed)
    assert changed == {(r.job_id, r.nominal_ms) for r in (cancelled, asked_to_stop, deleted, patched)}
    assert rig.core.may_start_again(OWNER, asked, first, changed) == [True, False, False, False, False]
    assert rig.core.may_start_again(OWNER, asked, first, changed) == rig.core.may_start(OWNER, asked)[0]
    assert rig.core.lease_watches == {}


def test_a_claim_given_back_puts_runs_taken_ahead_back_in_the_wheel(rig: Rig) -> None:
    rig.create(at_s=3)
    rig.tick()
    taken = rig.core.take([QUEUE], 10, rig.mono_s, rig.now_ms + 5000)
    proposal = rig.core.propose_claims("w1", taken.runs, rig.now_ms, rig.mono_s, 5000)
    rig.core.give_back(proposal)
    rig.core.settle(proposal)
    assert rig.claim() == []  # not due: not in a ready queue
    rig.advance(3)
    rig.tick()
    assert len(rig.claim()) == 1


def test_a_new_leader_leases_a_held_run_from_its_due_time(rig: Rig) -> None:
    rig.create(at_s=8, lease_s=30)
    [claimed] = claim_ahead(rig, 9000)
    core = DispatchCore(rig.store, rig.now_ms)
    core.load(rig.now_ms, rig.mono_s)
    lease = core.leases[(claimed.run.job_id, claimed.run.nominal_ms)]
    assert lease.deadline_s == pytest.approx(rig.mono_s + 8 + 30)
    assert core.start_of(OWNER, run_id(claimed), 1) == (True, T0_MS + 8000)


@pytest.mark.parametrize(("overlap", "taken"), [("skip", 0), ("allow", 1)])
def test_runs_of_jobs_with_an_overlap_policy_are_not_taken_ahead(rig: Rig, overlap: str, taken: int) -> None:
    body = JobCreate(target="queue:work", schedule=ScheduleIn(every_s=60), overlap=overlap)
    item = rig.jobs.new_job(OWNER, body, rig.now_ms, from_msgpack=False)
    [created] = rig.commit(CreateJobs(rig.now_ms, [item]))  # type: ignore[misc]
    due_ms = created.job.next_run_at_ms
    rig.advance((due_ms - rig.now_ms - 3000) / 1000)
    assert len(claim_ahead(rig, 5000)) == taken


def test_a_gated_slot_claimed_ahead_waits_on_its_gate_in_memory(rig: Rig) -> None:
    # A gate is decided at the claim (docs/semantics.md "Pre-dispatch"): a
    # slot claimed ahead whose parent has not ended waits on its gate, due
    # `wait_s` after the slot, and the dispatcher holds it. A claim that
    # looks past that due time takes it again at once (`claim_steps` looks
    # again when a claim took nothing); the whole-node simulator found the
    # run then missing from memory, never to be claimed again.
    parent = rig.create(at_s=3600)[0]
    body = msgspec.convert(
        {"target": "queue:work", "schedule": {"every_s": 60, "requires": {"jobs": [parent], "wait_s": 2}}}, JobCreate
    )
    [created] = rig.commit(CreateJobs(rig.now_ms, [rig.jobs.new_job(OWNER, body, rig.now_ms, from_msgpack=False)]))
    job = rig.store.get_job_any(created.job.id)  # type: ignore[union-attr]
    assert job is not None and job.slot_ms is not None
    rig.advance((job.slot_ms - rig.now_ms - 3000) / 1000)
    for _ in range(2):
        assert claim_ahead(rig, 6000) == []
        run = rig.store.get_run_any(job.id, job.slot_ms)
        assert run is not None and run.status == "waiting" and run.due_ms == job.slot_ms + 2000
        rig.check()


def test_a_held_runs_lease_shows_due_at_plus_lease_s_to_the_millisecond(rig: Rig) -> None:
    # `lease_expires_at` is `due_at + lease_s` (docs/semantics.md
    # "Pre-dispatch"). The lease runs on the monotonic clock and is shown
    # as scheduler time, which a node reads apart from it, in whole ms: a
    # probe of a real cluster saw a new leader show it 1 ms short.
    [job_id] = rig.create(at_s=8, lease_s=30)
    [claimed] = claim_ahead(rig, 9000)
    due_ms = claimed.run.due_ms
    assert claimed.run.lease_expires_ms == due_ms + 30_000
    later_ms, later_s = rig.now_ms + 1000, rig.mono_s + 1.0009
    assert rig.core.lease_of(job_id, claimed.run.nominal_ms, 1, later_ms, later_s) == due_ms + 30_000
    # A new leader, whose monotonic reading fell 0.9 ms after its scheduler time's.
    core = DispatchCore(rig.store, rig.now_ms)
    core.load(rig.now_ms, rig.mono_s + 0.0009)
    assert core.lease_of(job_id, claimed.run.nominal_ms, 1, later_ms, rig.mono_s + 1.0001) == due_ms + 30_000
    # A heartbeat before the due time: due_at + lease_s at the least, to the ms.
    expires_ms, _ = core.beat(OWNER, run_id(claimed), 1, rig.now_ms + 2000, rig.mono_s + 2.0004)
    assert expires_ms == due_ms + 30_000
    assert core.lease_of(job_id, claimed.run.nominal_ms, 1, rig.now_ms + 3000, rig.mono_s + 3.0009) == due_ms + 30_000
