"""Calendars as a user meets them (docs/semantics.md "Calendars"): the
job's `next_run_at` is when it will run, not a slot the calendar leaves
out; a calendar edit re-plans a run a business-day move placed; a resume
or a re-plan places `previous_business_day` early too; a calendar is
cleared by naming it null alone; a day of moves onto slots of their own
is one row; bad weekdays and countries say what is wrong. No process:
tests/engine/calendar_rig.py."""

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tempo import errors
from tempo.schema import CalendarIn

from .calendar_rig import OWNER, Rig

BERLIN = "Europe/Berlin"
WEEKEND = ["sat", "sun"]


def ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def utc(at_ms: int | None) -> str | None:
    return None if at_ms is None else dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M")


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path / "s", ms("2027-12-01T00:00:00+00:00"))
    yield r
    r.close()


def _job(rig: Rig, expr: str, on_excluded: str, calendar: str = "work", **extra: object):
    return rig.create(schedule={"cron": expr, "calendar": calendar, "on_excluded": on_excluded, **extra})


def _next_run(rig: Rig, job_id: str) -> str | None:
    """The job's `next_run_at` as its view shows it."""
    return utc(rig.jobs.calendars.next_run_ms(rig.job(job_id), rig.now_ms))


# -- 1. next_run_at is when the job runs ---------------------------------------------


@pytest.mark.parametrize(("on_excluded", "expected"), [
    ("skip", "2027-12-06 18:00"),
    ("next_business_day", "2027-12-06 18:00"),  # Sat's and Sun's runs land on Monday's own slot
    ("previous_business_day", "2027-12-06 18:00"),  # Friday's 18:00 has passed
])
async def test_next_run_at_is_the_first_run_the_calendar_lets_happen(rig, on_excluded, expected):
    await rig.put_calendar("work", timezone="UTC", exclude_weekdays=WEEKEND)
    rig.now_ms = ms("2027-12-04T10:00:00+00:00")  # Saturday
    job = _job(rig, "0 18 * * *", on_excluded)
    assert _next_run(rig, job.id) == expected


async def test_next_run_at_of_a_saturday_job_moved_to_monday(rig):
    await rig.put_calendar("work", timezone="UTC", exclude_weekdays=WEEKEND)
    rig.now_ms = ms("2027-12-01T10:00:00+00:00")
    job = _job(rig, "0 18 * * 6", "next_business_day")
    assert _next_run(rig, job.id) == "2027-12-06 18:00"
    action, at_ms, why = rig.jobs.calendars.claim_note(rig.job(job.id), rig.waiting(job.id), rig.now_ms)
    assert (action, utc(at_ms), why) == ("move", "2027-12-06 18:00", "2027-12-04 excluded (weekday sat)")
    plain = rig.create(schedule={"cron": "0 18 * * 6"})
    assert rig.jobs.calendars.claim_note(plain, rig.waiting(plain.id), rig.now_ms) is None
    assert _next_run(rig, plain.id) == utc(plain.next_run_at_ms) == "2027-12-04 18:00"


# -- 2. a calendar is cleared by naming it null ----------------------------------------


async def test_patch_calendar_null_alone_clears_it_and_its_on_excluded(rig):
    from tempo.net.jobs_api import _patched
    from tempo.net.views import job_view

    await rig.put_calendar("work", exclude_weekdays=WEEKEND)
    job = rig.create(schedule={"cron": "0 18 * * *", "calendar": "work"})  # on_excluded never given
    use = rig.store.calendar_use(job.id)
    body = _patched(job_view(job, calendar=use), {"schedule": {"calendar": None}})
    assert body.schedule.calendar is None and body.schedule.on_excluded is None
    patched = await rig.jobs.patch(job, body, from_msgpack=False)
    assert rig.store.calendar_use(job.id) is None
    view = msgspec.to_builtins(job_view(patched, calendar=None))
    assert "calendar" not in view["schedule"] and "on_excluded" not in view["schedule"]


# -- 3. a calendar edit re-plans a moved run --------------------------------------------


async def test_an_edit_that_frees_the_day_brings_a_moved_run_back_at_once(rig):
    await rig.put_calendar("work", timezone="UTC", exclude_weekdays=WEEKEND)
    rig.now_ms = ms("2027-12-10T12:00:00+00:00")
    job = _job(rig, "0 10 * * 6", "next_business_day")
    assert rig.claim(job.id) is None  # Sat 11th 10:00 -> Mon 13th 10:00
    assert utc(rig.waiting(job.id).due_ms) == "2027-12-13 10:00"
    rig.now_ms = ms("2027-12-11T11:00:00+00:00")
    await rig.put_calendar("work", timezone="UTC", exclude_weekdays=["sun"])  # Saturday is a business day now
    run = rig.waiting(job.id)
    assert utc(run.nominal_ms) == "2027-12-11 10:00" and run.due_ms == rig.now_ms  # due at once
    assert utc(rig.job(job.id).next_run_at_ms) == "2027-12-11 11:00" == _next_run(rig, job.id)
    claimed = rig.claim(job.id)
    assert claimed is not None and claimed.status == "claimed" and claimed.nominal_ms == run.nominal_ms


async def test_an_edit_that_excludes_the_day_places_previous_business_day_early(rig):
    await rig.put_calendar("work", timezone="UTC")
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    job = _job(rig, "0 18 * * 5", "previous_business_day")  # Fri 24th
    assert utc(rig.waiting(job.id).due_ms) == "2027-12-24 18:00"
    await rig.put_calendar("work", timezone="UTC", exclude_dates=["2027-12-24"])
    assert utc(rig.waiting(job.id).due_ms) == "2027-12-23 18:00"
    assert _next_run(rig, job.id) == utc(rig.job(job.id).next_run_at_ms) == "2027-12-23 18:00"
    await rig.put_calendar("work", timezone="UTC")  # and back again
    assert utc(rig.waiting(job.id).due_ms) == "2027-12-24 18:00"


async def test_an_edit_of_a_base_re_plans_the_jobs_of_the_calendars_above_it(rig):
    await rig.put_calendar("base", timezone="UTC", exclude_weekdays=WEEKEND)
    await rig.put_calendar("work", timezone="UTC", base="base")
    rig.now_ms = ms("2027-12-10T12:00:00+00:00")
    job = _job(rig, "0 10 * * 6", "next_business_day")
    assert rig.claim(job.id) is None
    rig.now_ms = ms("2027-12-11T11:00:00+00:00")
    await rig.put_calendar("base", timezone="UTC")
    assert rig.waiting(job.id).due_ms == rig.now_ms


# -- 4. previous_business_day after a resume or a re-plan ----------------------------------


async def test_previous_business_day_is_placed_early_after_a_resume(rig):
    await rig.put_calendar("work", timezone="UTC", exclude_dates=["2027-12-24"])
    rig.now_ms = ms("2027-12-15T12:00:00+00:00")
    job = _job(rig, "0 18 * * 5", "previous_business_day")
    await rig.jobs.pause(OWNER, job.id)
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    resumed = await rig.jobs.resume(OWNER, job.id)
    run = rig.waiting(job.id)
    assert utc(run.nominal_ms) == "2027-12-24 18:00" and utc(run.due_ms) == "2027-12-23 18:00"
    assert utc(resumed.next_run_at_ms) == "2027-12-23 18:00"


async def test_previous_business_day_is_placed_early_after_a_re_plan(rig):
    from tempo.net.jobs_api import _patched
    from tempo.net.views import job_view

    await rig.put_calendar("work", timezone="UTC", exclude_dates=["2027-12-24"])
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    job = _job(rig, "0 17 * * 5", "previous_business_day")
    body = _patched(job_view(job, calendar=rig.store.calendar_use(job.id)), {"schedule": {"cron": "0 18 * * 5"}})
    await rig.jobs.patch(job, body, from_msgpack=False)
    assert utc(rig.waiting(job.id).due_ms) == "2027-12-23 18:00"


async def test_a_patch_that_adds_a_calendar_places_the_waiting_run(rig):
    from tempo.net.jobs_api import _patched
    from tempo.net.views import job_view

    await rig.put_calendar("work", timezone="UTC", exclude_dates=["2027-12-24"])
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    job = rig.create(schedule={"cron": "0 18 * * 5"})
    body = _patched(job_view(job), {"schedule": {"calendar": "work", "on_excluded": "previous_business_day"}})
    await rig.jobs.patch(job, body, from_msgpack=False)
    assert utc(rig.waiting(job.id).due_ms) == "2027-12-23 18:00"


# -- 6. messages that say what is wrong ------------------------------------------------------


def _spec(**body: object) -> CalendarIn:
    body.setdefault("timezone", "UTC")
    return msgspec.json.decode(json.dumps(body), type=CalendarIn)


@pytest.mark.parametrize(("body", "loc", "says"), [
    ({"exclude_weekdays": ["mon", "funday"]}, "exclude_weekdays[1]", "'funday' is not a weekday: one of mon, tue"),
    ({"holidays": {"country": "DE-XX"}}, "holidays.country", 'give the subdivision apart: {"country": "DE", "subdivision": "XX"}'),
    ({"holidays": {"country": "Germany"}}, "holidays.country", "ISO 3166-1 alpha-2"),
    ({"holidays": {"country": "XX"}}, "holidays.country", "the holidays library knows: one of AD, AE,"),
])
async def test_bad_weekdays_and_countries_say_what_is_wrong(rig, body, loc, says):
    with pytest.raises(errors.Invalid) as caught:
        rig.jobs.calendars.record(OWNER, "x", _spec(**body), rig.now_ms)
    [(at, why)] = caught.value.errors
    assert at == loc and says in why, why


# -- 7. one row for a day of moves onto slots of their own -------------------------------------


async def test_moves_onto_slots_of_their_own_are_one_row_per_range(rig):
    await rig.put_calendar("work", timezone="UTC", exclude_weekdays=WEEKEND)
    rig.now_ms = ms("2027-12-10T23:55:00+00:00")  # Friday night
    job = _job(rig, "*/10 * * * *", "next_business_day")
    assert rig.claim(job.id) is None  # Sat 00:00: the weekend's 288 slots, each onto Monday's own
    [row] = [r for r in rig.history(job.id) if r.status == "skipped"]
    assert (row.reason, row.missed_count, utc(row.missed_until_ms)) == ("calendar", 288, "2027-12-13 00:00")
    assert "onto a slot of its own" in (row.error or "")
    assert utc(rig.waiting(job.id).nominal_ms) == "2027-12-13 00:00"


async def test_a_run_placed_early_whose_day_was_freed_waits_for_its_slot_at_its_claim(rig):
    """A `PUT` whose re-plans did not reach the run (past
    limits.calendar_replan_jobs_max, or a race): its claim at the early time
    sends it on to its slot rather than running it a day early."""
    from tempo.engine.commands import PutCalendar

    await rig.put_calendar("work", timezone="UTC", exclude_dates=["2027-12-24"])
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    job = _job(rig, "0 18 * * 5", "previous_business_day")
    assert utc(rig.waiting(job.id).due_ms) == "2027-12-23 18:00"
    cal = rig.jobs.calendars.record(OWNER, "work", _spec(), rig.now_ms)
    rig.apply(PutCalendar(rig.now_ms, cal))  # no re-plans carried
    assert rig.claim(job.id) is None
    assert utc(rig.waiting(job.id).due_ms) == "2027-12-24 18:00"
    claimed = rig.claim(job.id)
    assert claimed is not None and claimed.status == "claimed"


async def test_next_run_at_follows_a_calendar_edit_at_once(rig):
    """A skip job's waiting run is not re-planned by an edit (its claim
    decides it); its `next_run_at` still shows the edit at once."""
    await rig.put_calendar("work", timezone="UTC", exclude_weekdays=WEEKEND)
    rig.now_ms = ms("2027-12-04T10:00:00+00:00")  # Saturday
    job = _job(rig, "0 18 * * *", "skip")
    assert _next_run(rig, job.id) == "2027-12-06 18:00"
    await rig.put_calendar("work", timezone="UTC", exclude_weekdays=["sun"])
    assert _next_run(rig, job.id) == "2027-12-04 18:00"
