"""The run that was waiting when the node stopped obeys the catch-up policy
when the node comes back (docs/semantics.md "Catch-up after missed slots"):
once the slot after it has passed too, its own slot is the first missed
slot, and the window and the policy decide on it as on the others. A slot
not run is a `missed` row with its reason, and a `run.missed` event.

Before, that run was handed out however old it was, beside what the
policy ran: `none` and `window_s: 0` ran it, and `all` with `max_runs: 2`
ran three runs."""

import pytest

from tempo import errors
from tempo.engine.jobs import Jobs
from tempo.engine.plan import catch_up
from tempo.engine.records import Catchup, Missed
from tempo.schema import CatchupIn, JobCreate, ScheduleIn

from .test_catch_up_policy import EVERY_MINUTE, MIN_MS, job
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
