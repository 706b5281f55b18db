"""Catch-up after an outage: the latest missed cron slot is found exactly,
so a claim coalesces what was missed into one run (docs/api.md "Runs")."""

from datetime import datetime

import pytest

from tempo import errors
from tempo.engine.jobs import Jobs
from tempo.engine.plan import catch_up, latest_slot_ms
from tempo.engine.records import Job, Schedule
from tempo.schema import JobCreate, ScheduleIn

from .test_dispatch import OWNER, T0_MS, Node, running


@pytest.fixture
async def node(tmp_path, origin):
    async with running(Node(str(tmp_path / "data"))) as made:
        yield made


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.mark.parametrize(
    ("cron", "timezone", "now", "latest"),
    [
        # 2,880 minutes match on 1-2 January, then none for four weeks.
        ("* * 1-2 * *", "UTC", "2027-01-20T00:00:00Z", "2027-01-02T23:59:00Z"),
        ("* * 1-2 * *", "UTC", "2027-01-02T12:34:56Z", "2027-01-02T12:34:00Z"),
        ("* * 1-2 * *", "Europe/Berlin", "2027-01-20T00:00:00Z", "2027-01-02T22:59:00Z"),
        ("*/5 * * * *", "UTC", "2027-01-20T00:05:00Z", "2027-01-20T00:05:00Z"),
        ("*/5 * * * *", "UTC", "2027-01-20T00:04:59.999Z", "2027-01-20T00:00:00Z"),
        ("0 0 29 2 *", "UTC", "2035-06-01T00:00:00Z", "2032-02-29T00:00:00Z"),
        # Fall-back in Berlin: 02:30 runs once, at its first (CEST) pass.
        ("30 2 * * *", "Europe/Berlin", "2027-10-31T01:45:00Z", "2027-10-31T00:30:00Z"),
    ],
)
def test_latest_cron_slot_is_exact(cron, timezone, now, latest):
    created_ms = ms("2026-12-31T00:00:00Z")
    got = latest_slot_ms(Schedule(cron=cron, timezone=timezone), created_ms, ms(now))
    assert got == ms(latest)


async def test_an_outage_costs_one_catch_up_run_not_hundreds(node, fast_clock):
    # The job was made before the outage, on a clock of its own.
    before = Jobs(node.store, node.committer, now_ms=lambda: ms("2026-12-31T23:00:00Z"))
    body = JobCreate(target="queue:work", schedule=ScheduleIn(cron="* * 1-2 * *"), lease_s=3600)
    [created] = await before.create(OWNER, [body], from_msgpack=False)
    assert not isinstance(created, errors.TempoError), created
    job_id = created.job.id
    assert ms("2027-01-03T00:00:00Z") < T0_MS  # the node comes back after 1-2 January
    claimed = []
    for _ in range(5):
        claimed += await node.claim(wait_s=1, runs_max=1000)
    nominal = [c.run.nominal_ms for c in claimed]
    # One run for everything missed, the slot it was waiting for included.
    assert nominal == [ms("2027-01-02T23:59:00Z")]
    assert node.store.get_job(OWNER, job_id).slot_ms == ms("2027-02-01T00:00:00Z")


def test_the_catch_up_of_a_claim_coalesces_to_the_latest():
    job = Job(
        "j_x", OWNER, None, "queue:work", None, Schedule(cron="* * 1-2 * *", timezone="UTC"),
        4, (10,), 60, 0, "active", ms("2026-12-31T00:00:00Z"), None, None, None,
    )
    now_ms = ms("2027-01-20T00:00:00Z")
    found = catch_up(job, ms("2027-01-01T00:00:00Z"), now_ms)
    assert found is not None
    assert (found.slot_ms, found.due_ms) == (ms("2027-01-02T23:59:00Z"), now_ms)
