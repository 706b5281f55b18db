"""Sequences the randomised lifecycle model (tests/engine/
test_lifecycle_model.py with `TEMPO_LIFECYCLE_RANDOM=1`) once found, as
hypothesis shrank them, replayed step by step through the same model: each
is a fault that was fixed (in the engine or in the model) and must stay so,
whatever examples the fixed seed of the normal suite happens to draw."""

from collections.abc import Iterator
from typing import Any

import pytest

from tempo import ids
from tempo.engine.records import Run

from . import lifecycle_model
from .lifecycle_model import LifecycleModel


class Draws:
    """What a rule's `st.data()` draws, given in order."""

    def __init__(self, *values: Any):
        self.values = list(values)

    def draw(self, strategy: object, label: str | None = None) -> Any:
        assert self.values, f"the rule drew more than the case gives ({label})"
        return self.values.pop(0)


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[LifecycleModel]:
    # hypothesis's `event` records only inside a hypothesis test.
    monkeypatch.setattr(lifecycle_model, "event", lambda _: None)
    made = LifecycleModel()
    yield made
    made.teardown()


def steps(model: LifecycleModel, *calls: tuple[str, dict[str, Any]]) -> None:
    """Each rule with its arguments, and the checks after it, as hypothesis runs them."""
    model.check()
    for name, kwargs in calls:
        getattr(model, name)(**kwargs)
        model.check()


def gated_history(model: LifecycleModel) -> tuple[int, int, list[Run]]:
    """The first slot of the case's gated job (the second job, every
    second), the time now, and the job's run history: runs and `missed`
    rows, newest first."""
    gated = model.jobs[1]
    rows, _ = model.engine.store.list_runs(lifecycle_model.OWNER, gated.id, since_ms=None, until_ms=None, limit=100,
                                           cursor_ms=None)
    return gated.created_ms + 1000, model.engine.now_ms, rows


def test_runs_buffer_all_buffered_stay_buffered_under_buffer_one(model: LifecycleModel) -> None:
    """From `buffer_all` to `buffer_one`, the runs buffered already stay
    buffered (docs/semantics.md "Overlap"), two of them past the new bound:
    the model once called that a fault."""
    model.first_job(sched=("every", 1), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("patch", {"data": Draws(0, "buffer_all"), "stale": False, "what": "overlap"}),
        ("advance", {"by": 1}),
        ("trigger", {"data": Draws(0)}),
        ("claim", {"queues": ["a"], "runs_max": 1}),
        ("advance", {"by": 2}),
        ("claim", {"queues": ["a"], "runs_max": 1}),
        ("claim", {"queues": ["a"], "runs_max": 1}),
        ("result_failed", {"data": Draws(0)}),
        ("patch", {"data": Draws(0, "buffer_one"), "stale": False, "what": "overlap"}),
    )
    buffered = [r for r in model.engine.runs_of(model.jobs[0].id).values() if r.status == "waiting" and r.buffered]
    assert len([r for r in buffered if r.attempt == 0]) == 2  # the case still reaches what it is about


def test_a_catch_up_whose_latest_slot_a_trigger_took_does_not_hand_out_the_superseded_run(
    model: LifecycleModel,
) -> None:
    """An `every_s: 1` job with `end_at` 30 s on, its slot run of second 1
    unclaimed until second 30, when a trigger takes second 30, the last
    slot. The claim's catch-up (`latest`) decides on slot 30, which the
    triggered run holds; the leader steps over it and finds no slot left.
    The decision's ranges still stand (engine/dispatch_core.py
    `_claim_of`, rules/slots.py `hand_on`): the run of second 1,
    superseded by 29 slots, is recorded missed rather than handed out
    (docs/semantics.md "Catch-up after missed slots"), and with no slot
    left the job is completed; the triggered run is handed out."""
    model.first_job(sched=("at", -120), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("delete", {"data": Draws(0), "now": 0}),
        ("create", {"end": ("end_at", 30), "jitter_s": 0, "lease_s": None, "overlap": None, "queue": "a",
                    "retry": None, "sched": ("every", 1), "timeout_s": None}),
        ("advance", {"by": 30}),
        ("trigger", {"data": Draws(0)}),
        ("claim_all", {}),
    )
    job = model.jobs[1]
    store = model.engine.store
    first_ms = job.created_ms + 1000
    runs, _ = store.list_runs("default", job.id, since_ms=None, until_ms=None, limit=100, cursor_ms=None)
    assert sorted((r.nominal_ms - first_ms, r.status, r.reason, r.missed_count, r.triggered) for r in runs) == [
        (0, "missed", "policy", 29, False), (29_000, "claimed", None, None, True)]
    stored = store.get_job("default", job.id)
    assert stored.state == "completed" and stored.next_run_at_ms is None
    [missed] = [e for _, e in store.list_events("default", 0, 100) if e.type == "run.missed"]
    assert missed.detail["count"] == 29 and missed.detail["reason"] == "policy"


def test_a_cancel_whose_catch_up_finds_the_latest_slot_taken_records_the_slots_it_passed(
    model: LifecycleModel,
) -> None:
    """As above, but the slot run of second 1 is cancelled at second 30
    rather than claimed: the slots 2 to 29 the catch-up passed over are
    recorded missed (a `run.missed` event), though no slot is left to hand
    the schedule on to (engine/jobs.py `cancel_run`, rules/runs.py
    `_cancel_waiting`), and the job is completed."""
    model.first_job(sched=("every", 1), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("delete", {"data": Draws(0), "now": 0}),
        ("create", {"end": ("end_at", 30), "jitter_s": 0, "lease_s": None, "overlap": None, "queue": "b",
                    "retry": None, "sched": ("every", 1), "timeout_s": None}),
        ("advance", {"by": 30}),
        ("trigger", {"data": Draws(0)}),
        ("cancel", {"data": Draws(0)}),
    )
    job = model.jobs[1]
    store = model.engine.store
    stored = store.get_job("default", job.id)
    assert stored.state == "completed" and stored.next_run_at_ms is None
    assert model.jobs[1].runs[job.created_ms + 1000].status == "cancelled"
    [missed] = [e for _, e in store.list_events("default", 0, 100) if e.type == "run.missed"]
    assert (missed.detail["count"], missed.detail["reason"]) == (28, "policy")


def test_a_one_off_given_the_at_of_a_run_that_ended_is_completed(model: LifecycleModel) -> None:
    """A repeating job whose run of second 0 failed for good (one attempt,
    its lease expired), patched two minutes later into a one-off `at`
    second 0: its one slot has run, so the job is completed, not left
    active with nothing to run (docs/semantics.md "Changing a job")."""
    model.first_job(sched=("every_start", 30, -120), retry={"max_attempts": 1, "backoff_s": [0]}, timeout_s=None,
                    lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("claim_all", {}),
        ("advance_and_check_leases", {"by": 60}),
        ("advance_more", {"by": 60}),
        ("patch", {"data": Draws(0, False, {"at": "2027-01-15T08:00:00.000Z"}), "stale": False, "what": "schedule"}),
    )
    job = model.store_job(model.jobs[0])
    assert job.state == "completed" and job.next_run_at_ms is None
    [event] = [e for _, e in model.engine.store.list_events("default", 0, 100) if e.type == "job.completed"]
    assert event.detail == {"status": "failed"}


def test_a_job_whose_last_slot_is_skipped_runs_its_buffered_run_and_then_completes(model: LifecycleModel) -> None:
    """An `every_s: 1` job with `end_at` three seconds on and `buffer_one`:
    its first slot's run is claimed and held past its next two slots. The
    second slot's run is buffered, the third and last is skipped. The
    buffered run was due before the end, so it runs as the policy
    promises, and the job stays active until it ends, then is completed
    (docs/semantics.md "Overlap"): the skip of the last slot once
    completed the job at once, and the buffered run ran a slot of a
    `completed` job."""
    model.first_job(sched=("at", 0), retry=None, timeout_s=None, lease_s=None, jitter_s=5, queue="a")
    steps(
        model,
        ("advance_and_check_leases", {"by": 1}),
        ("create", {"end": ("end_at", 3), "jitter_s": 0, "lease_s": None, "overlap": "buffer_one", "queue": "a",
                    "retry": None, "sched": ("every", 1), "timeout_s": None}),
        ("advance_and_check_leases", {"by": 1}),
        ("claim_all", {}),
        ("expire", {}),
        ("expire", {}),
        ("advance_and_check_leases", {"by": 59}),
        ("claim_all", {}),
        ("claim_all", {}),
        ("advance_and_check_leases", {"by": 1}),  # the first run's lease ends: the buffered run is released
        ("claim_all", {}),  # the first run again (its re-delivery); the released run buffered again
        ("result", {"data": Draws(1), "ok": True}),  # the first run ends: the buffered run is released
    )
    job = model.jobs[1]
    first_ms = job.created_ms + 1000
    assert model.store_job(job).state == "active"
    steps(model, ("claim_all", {}))
    assert [(n - first_ms, r.status, r.reason) for n, r in sorted(model.engine.runs_of(job.id).items())] == [
        (0, "done", None), (1000, "claimed", None), (2000, "skipped", "overlap")]
    assert model.store_job(job).state == "active"
    steps(model, ("result", {"data": Draws(1), "ok": True}))
    stored = model.store_job(job)
    assert stored.state == "completed" and stored.next_run_at_ms is None
    [event] = [e for _, e in model.engine.store.list_events("default", 0, 100)
               if e.type == "job.completed" and e.job_id == job.id]
    assert event.detail == {"status": "done", "reason": "end_at"}
    assert event.run_id == ids.run_id(job.id, first_ms + 1000)  # the buffered run's end completed it


def test_a_released_run_cancelled_before_it_runs_releases_the_next_buffered_run(model: LifecycleModel) -> None:
    """A `buffer_all` job (cron every minute, `timeout_s: 2`, two attempts)
    whose triggered run ran over the slots of minutes 2 and 3, both
    buffered: when that run's attempt ended (its timeout), the run of
    minute 2 was released, and was cancelled before it was claimed. The
    run of minute 3 waited for it, and was left buffered with nothing
    running and nothing released, for ever (rules/overlap.py `ended`
    looked only at runs that had run). A released run cancelled before it
    runs hands on as a run that ended does: the next buffered run is due
    (docs/semantics.md "Overlap")."""
    model.first_job(sched=("cron", "*/5 * * * *"), timeout_s=2, retry=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("trigger", {"data": Draws(0)}),
        ("claim_all", {}),
        ("advance", {"by": 5}),
        ("result", {"data": Draws(0), "ok": False}),
        ("cancel", {"data": Draws(1)}),
        ("cancel", {"data": Draws(2)}),
        ("create", {"end": None, "jitter_s": 0, "lease_s": None, "overlap": "buffer_all", "queue": "a",
                    "retry": {"max_attempts": 2, "backoff_s": [0]}, "sched": ("cron", "* * * * *"), "timeout_s": 2}),
        ("expire", {}),
        ("trigger", {"data": Draws(0)}),
        ("create", {"end": None, "jitter_s": 5, "lease_s": None, "overlap": None, "queue": "a", "retry": None,
                    "sched": ("every", 1), "timeout_s": None}),
        ("advance", {"by": 59}),
        ("claim_all", {}),
        ("trigger", {"data": Draws(1)}),
        ("claim_all", {}),
        ("expire", {}),
        ("cancel", {"data": Draws(5)}),
        ("advance", {"by": 120}),
        ("claim_all", {}),
        ("expire", {}),
        ("claim_all", {}),
        ("advance", {"by": 2}),
        ("expire", {}),
        ("claim_all", {}),
        ("trigger", {"data": Draws(0)}),
        ("result", {"data": Draws(0), "ok": False}),
    )
    job = model.jobs[1]
    minute_ms = 60_000
    first_ms = lifecycle_model.T0_MS + minute_ms
    runs = model.engine.runs_of(job.id)
    assert (runs[first_ms + minute_ms].status, runs[first_ms + minute_ms].buffered) == ("waiting", False)  # released
    assert (runs[first_ms + 2 * minute_ms].status, runs[first_ms + 2 * minute_ms].buffered) == ("waiting", True)
    steps(model, ("cancel", {"data": Draws(8)}))  # the released run of minute 2
    runs = model.engine.runs_of(job.id)
    assert runs[first_ms + minute_ms].status == "cancelled"
    released = runs[first_ms + 2 * minute_ms]
    assert (released.status, released.buffered, released.due_ms) == ("waiting", False, model.engine.now_ms)


def test_a_gated_slot_waits_for_its_parent_and_runs_when_it_ends(model: LifecycleModel) -> None:
    """A job gated on a one-off (`requires`, `wait_s: 60`): its first slot
    waits for the parent, due at the deadline; the parent's run ends
    done, which makes it due at once, and it is claimed (docs/semantics.md
    "A gate on a clock schedule"). The model's gate checks judge each step."""
    model.first_job(sched=("at", 65), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("create_gated", {"data": Draws(0, 0), "sched": ("every", 60), "on": "succeeded", "wait_s": 60,
                          "within_s": None, "queue": "b"}),
        ("advance", {"by": 60}),
        ("claim", {"queues": ["b"], "runs_max": 100}),  # the gate holds the slot run back
    )
    gated = model.jobs[1]
    slot_ms = gated.created_ms + 60_000
    held = model.engine.runs_of(gated.id)[slot_ms]
    assert (held.status, held.due_ms) == ("waiting", slot_ms + 60_000)
    steps(
        model,
        ("advance", {"by": 5}),
        ("claim", {"queues": ["a"], "runs_max": 100}),  # the parent's run
        ("result", {"data": Draws(0), "ok": True}),
    )
    assert model.engine.runs_of(gated.id)[slot_ms].due_ms == model.engine.now_ms
    steps(model, ("claim", {"queues": ["b"], "runs_max": 1}))
    assert model.engine.runs_of(gated.id)[slot_ms].status == "claimed"


def test_a_stale_patch_that_drops_the_calendar_is_a_mismatch(model: LifecycleModel) -> None:
    """A job on the owner's calendar, patched to `every_s: 1` without it
    (version 2); then a patch made from version 1 that asks for its
    schedule without the calendar. Its record equals version 1's, and the
    calendar it asks for (none) equals the job's now, so it was answered
    as changing nothing, with version 1: a lost update (without `If-Match`
    the API would not merge it again onto version 2). It is a mismatch
    (engine/jobs.py `Jobs.patch`)."""
    model.first_job(sched=("at", -120), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("create", {"calendar": None, "end": None, "jitter_s": 0, "lease_s": None, "overlap": None, "queue": "a",
                    "retry": None, "sched": ("at", -120), "timeout_s": None}),
        ("claim_all", {}),
        ("create", {"calendar": "skip", "end": None, "jitter_s": 0, "lease_s": None, "overlap": None, "queue": "a",
                    "retry": None, "sched": ("every", 7), "timeout_s": None}),
        ("patch", {"data": Draws(2, False, {"every_s": 1}), "stale": False, "what": "schedule"}),
        ("patch", {"data": Draws(2, False, {"every_s": 7}), "stale": True, "what": "schedule"}),
    )
    assert model.store_job(model.jobs[2]).version == 2


def test_a_job_past_its_last_slot_whose_buffered_run_a_patch_released_completes_when_its_runs_end(
    model: LifecycleModel,
) -> None:
    """As above, up to the skip of the last slot; then a patch to `allow`
    releases the buffered run, which is claimed beside the first. The job
    is completed when the last of its slots' runs ends, whatever its
    policy is by then (rules/slots.py `settle`), not left active with
    nothing to run."""
    model.first_job(sched=("at", 0), retry=None, timeout_s=None, lease_s=None, jitter_s=5, queue="a")
    steps(
        model,
        ("advance_and_check_leases", {"by": 1}),
        ("create", {"end": ("end_at", 3), "jitter_s": 0, "lease_s": None, "overlap": "buffer_one", "queue": "a",
                    "retry": None, "sched": ("every", 1), "timeout_s": None}),
        ("advance_and_check_leases", {"by": 1}),
        ("claim_all", {}),
        ("expire", {}),
        ("expire", {}),
        ("advance_and_check_leases", {"by": 59}),
        ("claim_all", {}),
        ("claim_all", {}),  # the first run claimed, the second slot's buffered, the last skipped
        ("patch", {"data": Draws(1, None), "stale": False, "what": "overlap"}),
        ("claim_all", {}),  # the released run
        ("result", {"data": Draws(2), "ok": True}),
    )
    job = model.jobs[1]
    first_ms = job.created_ms + 1000

    def first_run() -> Draws:  # the draw that picks the first slot's run among those claimed
        claimed = sorted((j.id, n) for j in model.live() for n, r in j.runs.items() if r.status == "claimed")
        return Draws(claimed.index((job.id, first_ms)))

    assert model.store_job(job).state == "active"  # the first slot's run still runs
    steps(model, ("result", {"data": first_run(), "ok": False}))
    assert model.store_job(job).state == "active"  # it waits for its retry
    steps(model, ("advance", {"by": 10}), ("claim_all", {}))
    steps(model, ("result", {"data": first_run(), "ok": True}))
    assert model.store_job(job).state == "completed"


def test_a_patch_that_ends_the_schedule_cancels_the_buffered_slot_run(model: LifecycleModel) -> None:
    """A `buffer_one` job whose slot of second 30 was buffered behind the
    running run of second 0, then patched to a schedule whose `end_at`
    leaves no slot after the patch: the patch completes the job at once
    (docs/semantics.md "End conditions"), and the buffered run goes with
    it, cancelled as the waiting run is; it was left buffered in a
    completed job, to run when the running run ended."""
    model.first_job(sched=("every_start", 30, -120), retry=None, timeout_s=None, lease_s=None, jitter_s=0,
                    queue="a")
    steps(
        model,
        ("claim_all", {}),
        ("patch", {"data": Draws(0, "buffer_one"), "stale": False, "what": "overlap"}),
        ("advance", {"by": 30}),
        ("claim_all", {}),
        ("patch", {"data": Draws(0, True, {"cron": "* * * * *", "end_at": "2027-01-15T08:00:31.000Z"}),
                   "stale": False, "what": "schedule"}),
    )
    job = model.jobs[0]
    assert model.store_job(job).state == "completed"
    runs = model.engine.runs_of(job.id)
    assert (runs[lifecycle_model.T0_MS].status, runs[lifecycle_model.T0_MS + 30_000].status) == ("claimed", "cancelled")


def test_a_cancel_of_the_last_slot_run_leaves_the_buffered_run_to_run(model: LifecycleModel) -> None:
    """A `buffer_one` job with three slots (60, 120 and 180 s): the run of
    60 runs past 120, whose run is buffered; the owner cancels the waiting
    run of 180, the last slot. As when the last slot is skipped, the
    buffered run was due before the end: it runs when the first ends, and
    its end completes the job (docs/semantics.md "Overlap"); the cancel
    once completed the job with the run still buffered."""
    model.first_job(sched=("at", 3600), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="b")
    steps(
        model,
        ("create", {"end": ("end_at", 190), "jitter_s": 0, "lease_s": 600, "overlap": "buffer_one", "queue": "a",
                    "retry": None, "sched": ("every", 60), "timeout_s": None}),
        ("advance", {"by": 60}),
        ("claim_all", {}),
        ("advance", {"by": 60}),
        ("claim_all", {}),  # the run of 120 is buffered
        ("cancel", {"data": Draws(3)}),  # the waiting run of 180
    )
    job = model.jobs[1]
    stored = model.store_job(job)
    assert (stored.state, stored.next_run_at_ms) == ("active", None)
    steps(model, ("result", {"data": Draws(0), "ok": True}), ("claim_all", {}))
    assert model.engine.runs_of(job.id)[job.created_ms + 120_000].status == "claimed"
    steps(model, ("result", {"data": Draws(0), "ok": True}))
    assert model.store_job(job).state == "completed"



@pytest.mark.parametrize("late_s", [1, 3])
def test_a_gated_slot_released_after_its_next_slot_passed_runs_late(model: LifecycleModel, late_s: int) -> None:
    """An `every_s: 1` job gated on a one-off's failure (`wait_s: 5`): its
    slot of second 1 waits on its gate; the parent fails for good at second
    1 + `late_s`, after the next slot passed. A run that waits on its gate
    is never a missed slot (docs/semantics.md "A gate on a clock
    schedule"): the slot of second 1 runs, late, and catch-up (`latest`)
    runs the latest slot that passed while it waited, due at once and
    after its own gate (the same end opens it); the slots between are one
    `missed` range, reason `policy`. The model once called the late run a
    fault ("handed out after their next slot passed"); `late_s` 1 is the
    sequence hypothesis shrank it to."""
    model.first_job(sched=("at", -120), retry={"max_attempts": 1, "backoff_s": [0]}, timeout_s=None, lease_s=None,
                    jitter_s=0, queue="a")
    steps(
        model,
        ("create_gated", {"data": Draws(0, 0), "sched": ("every", 1), "on": "failed", "wait_s": 5,
                          "within_s": None, "queue": "a"}),
        ("advance", {"by": 1}),
        ("claim_all", {}),  # the parent's run; the gate holds the slot of second 1 back
        ("advance", {"by": late_s}),
        ("result", {"data": Draws(0), "ok": False}),  # the parent fails for good: the gate opens
        ("claim_all", {}),
    )
    first_ms, now_ms, rows = gated_history(model)
    assert sorted((r.nominal_ms, r.status, r.reason, r.missed_count, r.due_ms) for r in rows) == [
        (first_ms, "claimed", None, None, now_ms),
        *([] if late_s == 1 else [(first_ms + 1000, "missed", "policy", late_s - 1, first_ms + 1000)]),
        (now_ms, "waiting", None, None, now_ms)]
    steps(model, ("claim_all", {}))  # the latest slot's run: its gate is open
    assert model.engine.runs_of(model.jobs[1].id)[now_ms].status == "claimed"


@pytest.mark.parametrize("gate_open_at_slot", [True, False])
def test_a_gated_slot_no_claim_reached_within_a_period_is_missed(model: LifecycleModel, gate_open_at_slot: bool) -> None:
    """An `every_s: 1` job gated on a one-off's failure (`wait_s: 5`), on a
    queue no worker asks until second 3. Its slot of second 1 never waited
    on its gate (no claim found a parent missing before its next slot),
    whether the parent failed before the slot or after it: it is a missed
    slot as any run unclaimed for longer than a period, recorded with
    second 2 as one `missed` range, reason `policy`, and the latest slot
    runs (docs/semantics.md "A gate on a clock schedule")."""
    model.first_job(sched=("at", -120), retry={"max_attempts": 1, "backoff_s": [0]}, timeout_s=None, lease_s=None,
                    jitter_s=0, queue="a")
    fail = ("result", {"data": Draws(0), "ok": False})
    steps(
        model,
        ("create_gated", {"data": Draws(0, 0), "sched": ("every", 1), "on": "failed", "wait_s": 5,
                          "within_s": None, "queue": "b"}),
        ("advance", {"by": 1}),
        ("claim", {"queues": ["a"], "runs_max": 100}),  # the parent's run only
        *([fail] if gate_open_at_slot else []),
        ("advance", {"by": 1}),
        *([] if gate_open_at_slot else [fail]),
        ("advance", {"by": 1}),
        ("claim_all", {}),
    )
    first_ms, now_ms, rows = gated_history(model)
    assert sorted((r.nominal_ms, r.status, r.reason, r.missed_count, r.due_ms) for r in rows) == [
        (first_ms, "missed", "policy", 2, first_ms), (now_ms, "waiting", None, None, now_ms)]
    steps(model, ("claim_all", {}))  # the latest slot's run: its gate is open
    assert model.engine.runs_of(model.jobs[1].id)[now_ms].status == "claimed"


def test_a_one_off_whose_owner_cancelled_its_run_made_repeating_steps_over_that_slot(model: LifecycleModel) -> None:
    """A one-off at second 600 whose waiting run its owner cancels at
    second 201 (the job completes), patched to `*/5 * * * *`: its run of
    second 300 is claimed, and the schedule is handed on past second 600,
    whose run its owner cancelled: it stays cancelled (docs/semantics.md
    "Changing a job": a slot whose run its owner cancelled is stepped
    over, as when a claim hands the schedule on)."""
    model.first_job(sched=("at", 600), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("advance", {"by": 201}),
        ("cancel", {"data": Draws(0)}),
        ("patch", {"data": Draws(0, {"cron": "*/5 * * * *"}), "stale": False, "what": "schedule"}),
        ("advance", {"by": 120}),
        ("claim_all", {}),
    )
    job = model.jobs[0]
    runs = model.engine.runs_of(job.id)
    t0_ms = lifecycle_model.T0_MS
    assert (runs[t0_ms + 300_000].status, runs[t0_ms + 600_000].status) == ("claimed", "cancelled")
    assert model.store_job(job).slot_ms == t0_ms + 900_000


def test_a_gated_slot_skipped_past_a_slot_a_trigger_took_records_the_range_as_its_event(
    model: LifecycleModel,
) -> None:
    """An `every_s: 1` job gated on a one-off that never succeeds
    (`wait_s: 5`): its slot of second 1 waits on its gate, a trigger at
    second 2 takes the next slot's millisecond, and the claim at second 7
    skips the slot of second 1 (`dependency`). Catch-up runs second 7;
    seconds 2 to 6 are one `missed` range (`policy`), whose first slot
    the triggered run holds: the range is its `run.missed` event alone
    (docs/semantics.md "Catch-up after missed slots"). The model once
    asked for its row too (lifecycle model seed 3)."""
    model.first_job(sched=("at", -120), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("claim_all", {}),  # the parent's run, which never ends
        ("advance", {"by": 1}),
        ("create_gated", {"data": Draws(0, 0), "sched": ("every", 1), "on": "succeeded", "wait_s": 5,
                          "within_s": None, "queue": "a"}),
        ("advance", {"by": 1}),
        ("claim_all", {}),  # the gate holds the slot of second 1 back
        ("advance", {"by": 1}),
        ("trigger", {"data": Draws(1)}),
        ("advance", {"by": 5}),
        ("claim_all", {}),
    )
    first_ms, now_ms, rows = gated_history(model)
    assert sorted((r.nominal_ms, r.status, r.reason, r.triggered) for r in rows) == [
        (first_ms, "skipped", "dependency", False), (first_ms + 1000, "claimed", None, True),
        (now_ms, "waiting", None, False)]
    missed = [ev.detail for _, ev in model.engine.store.list_events(lifecycle_model.OWNER, 0, 1 << 20)
              if ev.type == "run.missed" and ev.job_id == model.jobs[1].id]
    assert [(d["reason"], d["count"]) for d in missed] == [("policy", 5)]
