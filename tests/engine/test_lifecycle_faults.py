"""Faults the lifecycle model (tests/engine/lifecycle_model.py) found, each
as a small deterministic test on the same engine rig."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tempo import clock, ids
from tempo.engine.records import Run

from .lifecycle_model import OWNER, T0_MS, Engine, drive


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = Engine(str(tmp_path / "data"))
    yield made
    made.core.check_memory()
    made.core.check_leases()
    made.close()


def _spec(schedule: dict[str, object], **fields: object) -> dict[str, object]:
    return {"target": "queue:a", "schedule": schedule, **fields}


def _counts(engine: Engine, job_id: str) -> tuple[int, int, int]:
    outcome = engine.store.job_outcome(job_id)
    return (0, 0, 0) if outcome is None else (outcome.done, outcome.failed, outcome.cancelled)


def _runs(engine: Engine, job_id: str) -> dict[int, Run]:
    return engine.runs_of(job_id)


def test_a_run_resume_revives_no_longer_counts_cancelled(engine: Engine) -> None:
    job = engine.create(_spec({"at": clock.iso_from_ms(T0_MS + 60_000)}))
    drive(engine.jobs.pause(OWNER, job.id))
    assert _counts(engine, job.id) == (0, 0, 1)
    drive(engine.jobs.resume(OWNER, job.id))
    assert [r.status for r in _runs(engine, job.id).values()] == ["waiting"]
    assert _counts(engine, job.id) == (0, 0, 0)
    # Cancelled again, it counts once.
    drive(engine.jobs.cancel_run(OWNER, ids.run_id(job.id, T0_MS + 60_000)))
    assert _counts(engine, job.id) == (0, 0, 1)


def _patch(engine: Engine, job_id: str, spec: dict[str, object]) -> None:
    from .lifecycle_model import _body

    drive(engine.jobs.patch(engine.store.get_job(OWNER, job_id), _body(spec), from_msgpack=False))


def test_a_patch_back_onto_a_slot_an_earlier_patch_left_has_its_run_wait_again(engine: Engine) -> None:
    every = _spec({"every_s": 60})
    job = engine.create(every)
    first = T0_MS + 60_000
    engine.advance(1)
    _patch(engine, job.id, _spec({"every_s": 3600}))
    assert _runs(engine, job.id)[first].status == "cancelled"
    engine.advance(1)
    _patch(engine, job.id, every)
    runs = _runs(engine, job.id)
    assert runs[first].status == "waiting"
    stored = engine.store.get_job(OWNER, job.id)
    assert (stored.slot_ms, stored.next_run_at_ms) == (first, first)
    assert [r.status for r in runs.values()].count("waiting") == 1
    assert _counts(engine, job.id) == (0, 0, 1)  # the hourly slot's run, cancelled by the second patch


def test_a_paused_jobs_failed_attempt_waits_for_the_resume_not_in_the_queue(engine: Engine) -> None:
    job = engine.create(_spec({"at": clock.iso_from_ms(T0_MS)}, retry={"max_attempts": 3, "backoff_s": [5]}))
    [claimed] = engine.claim(["a"], 10)
    drive(engine.jobs.pause(OWNER, job.id))
    engine.advance(1)
    ended = engine.report(job.id, T0_MS, 1, False, "boom")
    # Paused: no run becomes waiting, and the job shows no next run.
    assert ended.status == "cancelled" and ended.attempt == 1
    stored = engine.store.get_job(OWNER, job.id)
    assert (stored.state, stored.next_run_at_ms) == ("paused", None)
    engine.advance(10)
    assert engine.claim(["a"], 10) == []
    # The resume brings the one-off's run back; its next attempt is the second.
    drive(engine.jobs.resume(OWNER, job.id))
    [again] = engine.claim(["a"], 10)
    assert (again.nominal_ms, again.attempt) == (claimed.nominal_ms, 2)
    assert _counts(engine, job.id) == (0, 0, 0)


def test_a_cancel_hands_the_schedule_on_to_a_slot_a_patch_left(engine: Engine) -> None:
    job = engine.create(_spec({"at": clock.iso_from_ms(T0_MS + 600_000)}))
    _patch(engine, job.id, _spec({"every_s": 300}))
    runs = _runs(engine, job.id)
    assert (runs[T0_MS + 300_000].status, runs[T0_MS + 600_000].status) == ("waiting", "cancelled")
    drive(engine.jobs.cancel_run(OWNER, ids.run_id(job.id, T0_MS + 300_000)))
    runs = _runs(engine, job.id)
    assert (runs[T0_MS + 300_000].status, runs[T0_MS + 600_000].status) == ("cancelled", "waiting")
    stored = engine.store.get_job(OWNER, job.id)
    assert (stored.slot_ms, stored.next_run_at_ms) == (T0_MS + 600_000, T0_MS + 600_000)
    assert _counts(engine, job.id) == (0, 0, 1)


def test_a_resume_leaves_a_run_its_owner_cancelled_ahead_cancelled(engine: Engine) -> None:
    job = engine.create(_spec({"every_s": 60}))
    first, second = T0_MS + 60_000, T0_MS + 120_000
    drive(engine.jobs.cancel_run(OWNER, ids.run_id(job.id, first)))
    drive(engine.jobs.pause(OWNER, job.id))
    engine.advance(1)
    drive(engine.jobs.resume(OWNER, job.id))
    runs = _runs(engine, job.id)
    assert (runs[first].status, runs[second].status) == ("cancelled", "waiting")
    stored = engine.store.get_job(OWNER, job.id)
    assert (stored.slot_ms, stored.next_run_at_ms) == (second, second)
    assert _counts(engine, job.id) == (0, 0, 1)


def test_a_claim_hands_the_schedule_on_to_the_run_a_patch_cancelled_not_to_a_second_one(engine: Engine) -> None:
    job = engine.create(_spec({"every_s": 60}))
    minute = T0_MS + 60_000
    engine.advance(1)
    _patch(engine, job.id, _spec({"every_s": 30}))
    assert _runs(engine, job.id)[minute].status == "cancelled"
    engine.advance(29)
    [claimed] = engine.claim(["a"], 10)
    assert claimed.nominal_ms == T0_MS + 30_000
    # The next slot is the minute whose run the patch cancelled: that run
    # waits again, the only run of its slot.
    listed, _ = engine.store.list_runs(OWNER, job.id, since_ms=minute, until_ms=minute + 1, limit=10, cursor_ms=None)
    assert [r.status for r in listed] == ["waiting"]
    stored = engine.store.get_job(OWNER, job.id)
    assert (stored.slot_ms, stored.next_run_at_ms) == (minute, minute)
    assert _counts(engine, job.id) == (0, 0, 0)


def test_a_trigger_on_a_later_slot_of_the_grid_does_not_stop_the_schedule(engine: Engine) -> None:
    job = engine.create(_spec({"every_s": 60}))
    engine.advance(120)
    triggered = drive(engine.jobs.trigger(OWNER, job.id))
    assert triggered.nominal_ms == T0_MS + 120_000  # the ms of the slot the schedule missed
    claimed = engine.claim(["a"], 10)
    # The waiting run's next slot passed: it is missed (the triggered run
    # holds the latest slot, the one the catch-up would run).
    assert sorted(r.nominal_ms for r in claimed) == [T0_MS + 120_000]
    missed = engine.store.list_runs(OWNER, job.id, since_ms=T0_MS + 60_000, until_ms=T0_MS + 60_001, limit=1,
                                    cursor_ms=None)[0]
    assert [(r.status, r.reason, r.missed_count) for r in missed] == [("missed", "policy", 1)]
    # The schedule steps over the slot the triggered run holds.
    stored = engine.store.get_job(OWNER, job.id)
    assert (stored.slot_ms, stored.next_run_at_ms) == (T0_MS + 180_000, T0_MS + 180_000)
    assert _runs(engine, job.id)[T0_MS + 180_000].status == "waiting"


def test_a_one_off_patched_onto_a_triggered_runs_millisecond_still_completes(engine: Engine) -> None:
    job = engine.create(_spec({"every_s": 60}, retry={"max_attempts": 1, "backoff_s": [0]}))
    triggered = drive(engine.jobs.trigger(OWNER, job.id))
    _patch(engine, job.id, _spec({"at": clock.iso_from_ms(triggered.nominal_ms)},
                                 retry={"max_attempts": 1, "backoff_s": [0]}))
    [claimed] = engine.claim(["a"], 10)
    engine.report(job.id, claimed.nominal_ms, 1, False, "boom")
    # The one-off's one slot has had its run: the job is over.
    assert engine.store.get_job(OWNER, job.id).state == "completed"


def test_a_one_off_patched_onto_a_claimed_triggered_runs_millisecond_completes_when_it_ends(engine: Engine) -> None:
    job = engine.create(_spec({"every_s": 60}))
    triggered = drive(engine.jobs.trigger(OWNER, job.id))
    [claimed] = engine.claim(["a"], 10)
    assert claimed.nominal_ms == triggered.nominal_ms
    _patch(engine, job.id, _spec({"at": clock.iso_from_ms(triggered.nominal_ms)}))
    assert engine.claim(["a"], 10) == []  # the slot's run is the one claimed
    engine.report(job.id, claimed.nominal_ms, 1, True, None)
    assert engine.store.get_job(OWNER, job.id).state == "completed"


def test_a_run_triggered_after_a_pause_and_buffered_is_released_when_the_running_one_ends(engine: Engine) -> None:
    job = engine.create(_spec({"every_s": 60}, overlap="buffer_one"))
    engine.advance(60)
    [running] = engine.claim(["a"], 10)
    drive(engine.jobs.pause(OWNER, job.id))
    triggered = drive(engine.jobs.trigger(OWNER, job.id))
    engine.advance(1)
    assert engine.claim(["a"], 10) == []  # buffered behind the running run
    assert engine.store.get_run_any(job.id, triggered.nominal_ms).buffered  # type: ignore[union-attr]
    engine.report(job.id, running.nominal_ms, 1, True, None)
    # A trigger after the pause still runs: once the running run ended.
    [claimed] = engine.claim(["a"], 10)
    assert claimed.nominal_ms == triggered.nominal_ms


def test_a_buffered_slot_run_released_is_the_jobs_next_run(engine: Engine) -> None:
    end_at = clock.iso_from_ms(T0_MS + 2_000)
    job = engine.create(_spec({"every_s": 1, "end_at": end_at}, overlap="buffer_one"))
    engine.advance(1)
    [running] = engine.claim(["a"], 10)
    engine.advance(1)
    assert engine.claim(["a"], 10) == []  # the last slot's run, buffered
    engine.report(job.id, running.nominal_ms, 1, True, None)
    released = engine.store.get_run_any(job.id, T0_MS + 2_000)
    assert released is not None and released.status == "waiting" and not released.buffered
    assert engine.store.get_job(OWNER, job.id).next_run_at_ms == released.due_ms


def test_a_paused_one_off_patched_onto_a_triggered_runs_millisecond_completes_after_its_resume(engine: Engine) -> None:
    job = engine.create(_spec({"at": clock.iso_from_ms(T0_MS - 120_000)}))
    triggered = drive(engine.jobs.trigger(OWNER, job.id))
    drive(engine.jobs.pause(OWNER, job.id))
    _patch(engine, job.id, _spec({"at": clock.iso_from_ms(triggered.nominal_ms)}))
    engine.advance(1)
    drive(engine.jobs.resume(OWNER, job.id))
    [claimed] = engine.claim(["a"], 10)
    assert claimed.nominal_ms == triggered.nominal_ms
    engine.report(job.id, claimed.nominal_ms, 1, True, None)
    assert engine.store.get_job(OWNER, job.id).state == "completed"


def test_a_released_retry_of_the_last_slot_is_not_the_jobs_next_run(engine: Engine) -> None:
    """A repeating job's next run is a slot's: the retry of its last slot,
    held back while a triggered run ran and released as that run's lease
    ran out, leaves `next_run_at` empty, as any retry of it does."""
    job = engine.create(_spec({"every_s": 1, "end_at": clock.iso_from_ms(T0_MS + 1_000)}, overlap="skip"))
    engine.advance(2)
    [last] = engine.claim(["a"], 10)
    engine.report(job.id, last.nominal_ms, 1, False, "boom")  # its retry is due in 10 s
    triggered = drive(engine.jobs.trigger(OWNER, job.id))
    assert [r.nominal_ms for r in engine.claim(["a"], 10)] == [triggered.nominal_ms]
    engine.advance(60)
    assert engine.claim(["a"], 10) == []  # the retry waits buffered behind the triggered run
    engine.expire()  # the triggered run's lease ran out: the retry is released
    released = engine.store.get_run_any(job.id, last.nominal_ms)
    assert released is not None and released.status == "waiting" and not released.buffered
    assert engine.store.get_job(OWNER, job.id).next_run_at_ms is None


def test_a_one_off_patched_onto_the_first_slot_of_a_missed_range_runs(engine: Engine) -> None:
    """The first slot of a range that got no run holds the range's `missed`
    row, not a run: a one-off's `at` moved there gets its run."""
    every = _spec({"every_s": 1})
    job = engine.create(every)
    engine.advance(122)
    engine.claim(["a"], 10)  # catch-up `latest`: slots before the latest are missed
    listed, _ = engine.store.list_runs(OWNER, job.id, since_ms=None, until_ms=None, limit=1000, cursor_ms=None)
    missed = [r for r in listed if r.status == "missed"]
    assert missed, "a missed range"
    first_ms = missed[0].nominal_ms
    _patch(engine, job.id, _spec({"at": clock.iso_from_ms(first_ms)}))
    run = engine.store.get_run_any(job.id, first_ms)
    assert run is not None and run.status == "waiting"
    assert engine.store.get_job(OWNER, job.id).next_run_at_ms == run.due_ms


def test_a_paused_one_off_made_repeating_stays_paused_when_its_claimed_run_ends(engine: Engine) -> None:
    job = engine.create(_spec({"at": clock.iso_from_ms(T0_MS - 120_000)}, retry={"max_attempts": 1, "backoff_s": [0]}))
    [claimed] = engine.claim(["a"], 10)
    drive(engine.jobs.pause(OWNER, job.id))
    _patch(engine, job.id, _spec({"every_s": 1}, retry={"max_attempts": 1, "backoff_s": [0]}))
    engine.report(job.id, claimed.nominal_ms, 1, False, "boom")
    assert engine.store.get_job(OWNER, job.id).state == "paused"
    drive(engine.jobs.resume(OWNER, job.id))
    resumed = engine.store.get_job(OWNER, job.id)
    assert resumed.state == "active" and resumed.next_run_at_ms is not None
