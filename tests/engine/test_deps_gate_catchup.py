"""A gated slot that waited on its parents (docs/semantics.md "A gate on
a clock schedule") and the catch-up of the slots that passed meanwhile,
through the dispatcher's own claims (engine/dispatch_core.py), with a
`wait_s` longer than the job's period.

Before, once the next slot had passed, the claim's catch-up took the
gated slot for a missed one: a run released by its parent's end was
recorded `missed` (reason `policy`) and never ran, and one that waited
in vain was `missed` too, not `skipped` with reason `dependency`."""

from collections.abc import Iterator

import msgspec
import pytest

from tempo.engine.commands import CreateJobs, TriggerJob
from tempo.engine.records import Run
from tempo.schema import JobCreate

from .test_dispatch_core import OWNER, QUEUE, Rig

PERIOD_MS = 60_000
WAIT_S = 300


@pytest.fixture(name="rig")
def _rig(tmp_path) -> Iterator[Rig]:  # type: ignore[no-untyped-def]
    made = Rig(str(tmp_path / "data"))
    yield made
    made.check()
    made.close()


def _job(rig: Rig, schedule: dict) -> str:
    body = msgspec.convert({"target": "queue:work", "schedule": schedule}, JobCreate)
    item = rig.jobs.new_job(OWNER, body, rig.now_ms, from_msgpack=False)
    [created] = rig.commit(CreateJobs(rig.now_ms, [item]))  # type: ignore[misc]
    return created.job.id  # type: ignore[union-attr]


def _gated(rig: Rig) -> tuple[str, str, int]:
    """A parent with no run yet, and an every-minute job gated on it that
    waits up to five periods; the gated job's first slot, reached and
    claimed: the run waits on its gate."""
    parent = _job(rig, {"at": "2099-01-01T00:00:00Z"})
    gated = _job(rig, {"every_s": PERIOD_MS // 1000, "requires": {"jobs": [parent], "wait_s": WAIT_S}})
    slot_ms = rig.store.get_job(OWNER, gated).slot_ms
    assert slot_ms is not None
    rig.advance((slot_ms - rig.now_ms) / 1000)
    rig.tick()
    assert rig.claim() == []
    [held] = _runs(rig, gated, "waiting")
    assert (held.nominal_ms, held.due_ms) == (slot_ms, slot_ms + WAIT_S * 1000)
    return parent, gated, slot_ms


def _runs(rig: Rig, job_id: str, status: str) -> list[Run]:
    found, _ = rig.store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=100, cursor_ms=None)
    return sorted((r for r in found if r.status == status), key=lambda r: r.nominal_ms)


def test_a_gated_run_released_after_later_slots_passed_runs(rig: Rig) -> None:
    parent, gated, slot_ms = _gated(rig)
    rig.advance(150)  # two more slots pass while the run waits
    rig.tick()
    # The parent runs now: a trigger, claimed and reported.
    rig.commit(TriggerJob(rig.now_ms, OWNER, parent))
    rig.tick()
    [claimed] = rig.claim([QUEUE])
    assert claimed.run.job_id == parent
    rig.report(claimed)
    rig.tick()
    taken = rig.claim([QUEUE])
    assert [(c.run.job_id, c.run.nominal_ms) for c in taken] == [(gated, slot_ms)]
    # The slots that passed while it waited are the catch-up's (`latest`:
    # the last runs, the one before it is missed).
    missed = _runs(rig, gated, "missed")
    assert [(r.reason, r.nominal_ms, r.missed_count) for r in missed] == [("policy", slot_ms + PERIOD_MS, 1)]
    assert [r.nominal_ms for r in _runs(rig, gated, "waiting")] == [slot_ms + 2 * PERIOD_MS]


def test_a_gated_run_that_waited_in_vain_is_skipped_for_its_dependency(rig: Rig) -> None:
    parent, gated, slot_ms = _gated(rig)
    rig.advance(WAIT_S)
    rig.tick()
    assert rig.claim([QUEUE]) == []
    [skipped] = _runs(rig, gated, "skipped")
    assert (skipped.nominal_ms, skipped.reason) == (slot_ms, "dependency") and parent in (skipped.error or "")
    assert [r.nominal_ms for r in _runs(rig, gated, "missed") if r.nominal_ms == slot_ms] == []
    # The slots after it are the catch-up's: the latest waits (on its own
    # gate), the four before it are missed.
    missed = _runs(rig, gated, "missed")
    assert [(r.reason, r.nominal_ms, r.missed_count) for r in missed] == [("policy", slot_ms + PERIOD_MS, 4)]
    assert [r.nominal_ms for r in _runs(rig, gated, "waiting")] == [slot_ms + 5 * PERIOD_MS]


async def test_a_gated_run_of_a_job_with_a_calendar_is_not_missed_either(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same through the calendar's claim (the job has a calendar that
    lets the slot run): the released run runs, the slot between is missed."""
    from tempo.engine.commands import Claim, ClaimRuns, ReportResults, Result

    from .calendar_rig import Rig as CalendarRig

    t0_ms = 1_800_000_000_000  # a Friday
    rig = CalendarRig(tmp_path / "data", t0_ms)
    try:
        await rig.put_calendar("c", exclude_dates=["2099-01-01"])
        parent = rig.create(schedule={"at": "2099-01-02T00:00:00Z"})
        gated = rig.create(schedule={"every_s": 60, "calendar": "c",
                                     "requires": {"jobs": [parent.id], "wait_s": WAIT_S}})
        slot_ms = rig.waiting(gated.id).nominal_ms
        assert rig.claim(gated.id, slot_ms) is None  # held by its gate
        rig.now_ms = slot_ms + 150_000
        run = await rig.jobs.trigger(OWNER, parent.id)
        [[claimed]] = rig.apply(ClaimRuns(rig.now_ms, "w", [Claim(parent.id, run.nominal_ms, rig.now_ms + 60_000,
                                                                   one_off=True)]))
        rig.apply(ReportResults(rig.now_ms, OWNER, [Result(parent.id, claimed.nominal_ms, 1, True)]))
        got = rig.claim(gated.id, rig.now_ms)
        assert got is not None and got.nominal_ms == slot_ms
        missed = [(r.reason, r.nominal_ms, r.missed_count) for r in rig.history(gated.id) if r.status == "missed"]
        assert missed == [("policy", slot_ms + PERIOD_MS, 1)]
    finally:
        rig.close()
