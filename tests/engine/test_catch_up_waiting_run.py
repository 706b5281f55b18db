"""The run that was waiting when the node stopped obeys the catch-up policy
when the node comes back (docs/semantics.md "Catch-up after missed slots"):
once the slot after it has passed too, its own slot is the first missed
slot, and the window and the policy decide on it as on the others. A slot
not run is a `missed` row with its reason, and a `run.missed` event.

Before, that run was handed out however old it was, beside what the
policy ran: `none` and `window_s: 0` ran it, and `all` with `max_runs: 2`
ran three runs."""

import pytest

from tempo import clock, errors, ids
from tempo.engine.jobs import Jobs
from tempo.engine.plan import catch_up
from tempo.engine.records import Catchup, Missed
from tempo.schema import CatchupIn, JobCreate, ScheduleIn

from .lifecycle_model import OWNER as M_OWNER
from .lifecycle_model import T0_MS as M0_MS
from .lifecycle_model import Engine, drive
from .test_catch_up_policy import EVERY_MINUTE, MIN_MS, job, ms
from .test_dispatch import OWNER, T0_MS, Node, running

# The job's first slot; the node comes back at T0_MS, an hour and a half later.
S0_MS = T0_MS - 90 * MIN_MS
CREATED_MS = S0_MS - MIN_MS


@pytest.fixture
async def node(tmp_path, origin):
    async with running(Node(str(tmp_path / "data"))) as made:
        yield made


async def _job_before_the_outage(node: Node, catchup: CatchupIn | None) -> str:
    before = Jobs(node.store, node.committer, now_ms=lambda: CREATED_MS)
    body = JobCreate(target="queue:work", schedule=ScheduleIn(every_s=60), lease_s=3600, catchup=catchup)
    [created] = await before.create(OWNER, [body], from_msgpack=False)
    assert not isinstance(created, errors.TempoError), created
    assert node.store.get_job(OWNER, created.job.id).slot_ms == S0_MS
    return created.job.id


async def _claimed(node: Node, claims: int) -> list[int]:
    nominal = []
    for _ in range(claims):
        nominal += [c.run.nominal_ms for c in await node.claim(wait_s=1, runs_max=1)]
    return nominal


def _missed(node: Node, job_id: str) -> list[tuple[str | None, int, int | None, int | None]]:
    runs, _ = node.store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=100, cursor_ms=None)
    return sorted((r.reason, r.nominal_ms, r.missed_until_ms, r.missed_count) for r in runs if r.status == "missed")


def _missed_events(node: Node, job_id: str) -> list[tuple[str, int]]:
    return [(e.detail["reason"], e.detail["count"]) for _, e in node.store.list_events(OWNER, 0, 100)
            if e.type == "run.missed" and e.job_id == job_id]


async def test_none_does_not_run_the_waiting_run(node, fast_clock):
    job_id = await _job_before_the_outage(node, CatchupIn(policy="none"))
    ahead_ms = T0_MS + MIN_MS  # the first slot after the node came back
    assert await _claimed(node, 1) == []
    assert _missed(node, job_id) == [("policy", S0_MS, ahead_ms, 91)]
    assert _missed_events(node, job_id) == [("policy", 91)]
    assert node.store.get_job(OWNER, job_id).slot_ms == ahead_ms


async def test_a_window_of_0_does_not_run_the_waiting_run(node, fast_clock):
    job_id = await _job_before_the_outage(node, CatchupIn(window_s=0, policy="all"))
    assert S0_MS not in await _claimed(node, 1)
    [(reason, from_ms, until_ms, count)] = _missed(node, job_id)
    # Up to the slot of the claim's very millisecond (in a window of 0 s),
    # or past it, as the test's clock moved on.
    assert (reason, from_ms) == ("outside_window", S0_MS) and until_ms in (T0_MS, T0_MS + MIN_MS)
    assert count == (until_ms - S0_MS) // MIN_MS
    assert _missed_events(node, job_id) == [("outside_window", count)]


async def test_all_with_max_runs_2_runs_two_the_waiting_one_first(node, fast_clock):
    job_id = await _job_before_the_outage(node, CatchupIn(policy="all", max_runs=2))
    assert await _claimed(node, 3) == [S0_MS, S0_MS + MIN_MS]
    assert _missed(node, job_id) == [("policy", S0_MS + 2 * MIN_MS, T0_MS + MIN_MS, 89)]
    assert node.store.get_job(OWNER, job_id).slot_ms == T0_MS + MIN_MS


async def test_latest_runs_the_latest_slot_only(node, fast_clock):
    job_id = await _job_before_the_outage(node, None)
    assert await _claimed(node, 2) == [T0_MS]
    assert _missed(node, job_id) == [("policy", S0_MS, T0_MS, 90)]


def test_a_run_late_by_less_than_a_period_still_runs():
    j = job(EVERY_MINUTE, "2027-01-01T00:00:00Z", Catchup(window_s=0, policy="none"))
    s0 = j.created_at_ms + MIN_MS
    found = catch_up(j, s0, s0 + MIN_MS - 1, claiming=True)
    assert found == (s0 + MIN_MS, s0 + MIN_MS, [], None, None)


def test_the_runs_of_an_all_catch_up_under_way_are_not_decided_again():
    j = job(EVERY_MINUTE, "2027-01-01T00:00:00Z", Catchup(policy="none"), until_ms=None)
    s0 = j.created_at_ms + MIN_MS
    j.catchup = Catchup(policy="all", max_runs=3)
    j.catchup_until_ms, j.catchup_decided_ms = s0 + 2 * MIN_MS, s0 + 5 * MIN_MS
    later = s0 + 10 * MIN_MS
    # The last run of the catch-up, claimed late: it runs; the slots after
    # the latest it decided on are a new catch-up of their own.
    found = catch_up(j, s0 + 2 * MIN_MS, later, claiming=True)
    assert found.slot_ms == s0 + 6 * MIN_MS
    assert found.missed == [Missed("policy", s0 + 9 * MIN_MS, s0 + 11 * MIN_MS, 2)]


def test_a_cancel_hands_on_without_counting_the_cancelled_slot_missed():
    j = job(EVERY_MINUTE, "2027-01-01T00:00:00Z", Catchup(policy="none"))
    s0 = j.created_at_ms + MIN_MS
    found = catch_up(j, s0, s0 + 5 * MIN_MS + 1)
    assert found.missed == [Missed("policy", s0 + MIN_MS, s0 + 6 * MIN_MS, 5)]



def _ending_job(tmp_path, catchup: dict) -> tuple[Engine, str]:
    """An `every_s: 1` job with `end_at` 30 s on, 40 s later: its waiting
    run of second 1 was never claimed."""
    engine = Engine(str(tmp_path / "data"))
    made = engine.create({"target": "queue:a", "catchup": catchup,
                          "schedule": {"every_s": 1, "end_at": clock.iso_from_ms(M0_MS + 30_000)}})
    engine.advance(40)
    return engine, made.id


def _ranges_recorded(engine: Engine) -> list[tuple[str, int, int]]:
    """(reason, first slot's second, count) of each `run.missed` event."""
    return [(e.detail["reason"], (ms(e.detail["missed_from"]) - M0_MS) // 1000, e.detail["count"])
            for _, e in engine.store.list_events(M_OWNER, 0, 100) if e.type == "run.missed"]


@pytest.mark.parametrize(
    ("policy", "window_s", "max_runs", "runs", "missed"),
    [
        # `none`, and a window the whole range is older than: the waiting
        # run is the first slot of the range, recorded, not handed out.
        ("none", None, 1000, [], [("policy", 1, 30)]),
        ("latest", 5, 1000, [], [("outside_window", 1, 30)]),
        ("all", 5, 1000, [], [("outside_window", 1, 30)]),
        # `all` running the waiting run alone: the slots after it are recorded.
        ("all", None, 1, [1], [("policy", 2, 29)]),
    ],
)
def test_a_catch_up_that_reaches_the_end_of_the_schedule_records_its_ranges(
    tmp_path, policy, window_s, max_runs, runs, missed,
):
    """The waiting run claimed after the schedule's end: the decision's
    ranges reach the end, no slot is left after them, and they are
    recorded all the same (engine/plan.py `_ended`); before, the decision
    was dropped with its ranges, and the waiting run was handed out
    whatever the policy said. The job completes: at once when nothing
    runs, else when the run ends."""
    engine, job_id = _ending_job(tmp_path, {"policy": policy, "window_s": window_s, "max_runs": max_runs})
    try:
        claimed = engine.claim(["a"], 100)
        assert [(r.nominal_ms - M0_MS) // 1000 for r in claimed] == runs
        assert _ranges_recorded(engine) == missed
        stored = engine.store.get_job(M_OWNER, job_id)
        assert (stored.state, stored.next_run_at_ms) == ("active" if runs else "completed", None)
    finally:
        engine.close()


def test_a_cancel_whose_catch_up_reaches_the_end_records_its_ranges(tmp_path):
    """The waiting run of a `none` job cancelled after its schedule's end:
    the slots after it are recorded `policy`, and the job is completed."""
    engine, job_id = _ending_job(tmp_path, {"policy": "none"})
    try:
        run = drive(engine.jobs.cancel_run(M_OWNER, ids.run_id(job_id, M0_MS + 1000)))
        assert run.status == "cancelled"
        assert _ranges_recorded(engine) == [("policy", 2, 29)]
        assert engine.store.get_job(M_OWNER, job_id).state == "completed"
    finally:
        engine.close()
