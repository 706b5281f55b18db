"""Calendars in the engine (docs/semantics.md "Calendars"): put, delete
and their checks; what a claim of a calendar job's slot run decides
(skip, next and previous business day, DST, `L`); a calendar edit that
reaches a waiting run with no scan; the epoch that makes a decision made
before an edit go back to the dispatcher. No process: the store, the
jobs service and the dispatcher's core (tests/engine/calendar_rig.py)."""

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import holidays
import pytest

from tempo import errors
from tempo.engine import keys
from tempo.engine.commands import ClaimRuns, PutCalendar

from .calendar_rig import OWNER, Rig

BERLIN = "Europe/Berlin"
WEEKEND = ["sat", "sun"]


def ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def berlin(at_ms: int) -> str:
    from zoneinfo import ZoneInfo

    return dt.datetime.fromtimestamp(at_ms / 1000, ZoneInfo(BERLIN)).strftime("%Y-%m-%d %H:%M %Z")


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path / "s", ms("2027-12-01T00:00:00+00:00"))
    yield r
    r.close()


def _cron(rig: Rig, expr: str, on_excluded: str, calendar: str = "work", **extra: object):
    return rig.create(schedule={"cron": expr, "timezone": BERLIN, "calendar": calendar, "on_excluded": on_excluded, **extra})


# -- the calendar: put, checks, delete ------------------------------------------------


async def test_put_resolves_holidays_to_named_dates_with_the_library_version_and_span(rig):
    cal = await rig.put_calendar("work", exclude_weekdays=WEEKEND, holidays={"country": "DE", "subdivision": "BY"})
    assert cal.version == 1 and cal.holidays is not None
    assert (cal.holidays.from_year, cal.holidays.until_year) == (2027, 2037)
    assert cal.holidays.library_version == holidays.__version__
    named = dict(zip(cal.holidays.days, cal.holidays.names, strict=True))
    assert named[dt.date(2027, 12, 25).toordinal()] == "Christmas Day"
    assert named[dt.date(2027, 3, 26).toordinal()] == "Good Friday"  # Easter moves: from the library
    again = await rig.put_calendar("work", exclude_weekdays=["sun"])
    assert (again.version, again.holidays, again.exclude_weekdays) == (2, None, (6,))


@pytest.mark.parametrize(("body", "loc"), [
    ({"holidays": {"country": "XX"}}, "holidays.country"),
    ({"holidays": {"country": "DE", "subdivision": "ZZ"}}, "holidays.subdivision"),
    ({"exclude_dates": ["2027-12-24", "2027-13-01"]}, "exclude_dates[1]"),
    ({"exclude_dates": ["24.12.2027"]}, "exclude_dates[0]"),
    ({"exclude_weekdays": ["sat", "fun"]}, "exclude_weekdays[1]"),
    ({"exclude_weekdays": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]}, "exclude_weekdays"),
    ({"base": "nothere"}, "base"),
    ({"timezone": "Mars/Base"}, "timezone"),
])
async def test_bad_input_is_400_at_its_field(rig, body, loc):
    with pytest.raises(errors.Invalid) as caught:
        await rig.put_calendar("work", **body)
    assert caught.value.errors[0][0] == loc


async def test_a_bad_name_is_400_at_name(rig):
    with pytest.raises(errors.Invalid) as caught:
        await rig.put_calendar("Work Days")
    assert caught.value.errors[0][0] == "name"


async def test_base_chains_add_up_and_a_cycle_or_a_fifth_level_is_400(rig):
    await rig.put_calendar("a", exclude_dates=["2027-12-24"])
    await rig.put_calendar("b", base="a", exclude_weekdays=["sun"])
    view = rig.store.calendar_view(OWNER, "b")
    assert view is not None and view.excluded(dt.date(2027, 12, 24).toordinal()) and 6 in view.weekdays
    with pytest.raises(errors.Invalid) as caught:
        await rig.put_calendar("a", base="b")
    assert caught.value.errors[0][0] == "base" and "cycle" in caught.value.errors[0][1]
    for name, below in (("c", "b"), ("d", "c"), ("e", "d")):
        await rig.put_calendar(name, base=below)
    with pytest.raises(errors.Invalid) as caught:
        await rig.put_calendar("f", base="e")
    assert caught.value.errors[0][0] == "base"


async def test_if_match_names_the_version_and_zero_means_none_yet(rig):
    await rig.put_calendar("work", if_version=0)
    with pytest.raises(errors.VersionMismatch):
        await rig.put_calendar("work", if_version=0)
    with pytest.raises(errors.VersionMismatch):
        await rig.put_calendar("work", if_version=5)
    assert (await rig.put_calendar("work", if_version=1)).version == 2


async def test_delete_in_use_is_409_naming_the_jobs_and_the_calendars(rig):
    await rig.put_calendar("work", exclude_weekdays=WEEKEND)
    job = _cron(rig, "0 18 * * *", "skip")
    with pytest.raises(errors.InUse) as caught:
        await rig.jobs.calendars.delete(OWNER, "work", None)
    assert job.id in caught.value.detail
    await rig.put_calendar("more", base="work")
    await rig.jobs.delete(OWNER, job.id)
    with pytest.raises(errors.InUse) as caught:
        await rig.jobs.calendars.delete(OWNER, "work", None)
    assert "more" in caught.value.detail
    await rig.jobs.calendars.delete(OWNER, "more", None)
    await rig.jobs.calendars.delete(OWNER, "work", None)
    with pytest.raises(errors.NotFound):
        rig.store.get_calendar(OWNER, "work")


async def test_another_owners_calendar_is_not_there(rig):
    await rig.put_calendar("work", owner="alice")
    with pytest.raises(errors.NotFound):
        rig.store.get_calendar("bob", "work")
    with pytest.raises(errors.Invalid) as caught:
        _cron(rig, "0 18 * * *", "skip")  # the default owner's: none
    assert caught.value.errors[0][0] == "schedule.calendar"
    with pytest.raises(errors.NotFound):
        await rig.jobs.calendars.delete("bob", "work", None)


async def test_a_calendar_is_refused_on_a_one_off_and_on_excluded_alone(rig):
    await rig.put_calendar("work")
    with pytest.raises(errors.Invalid) as caught:
        rig.create(schedule={"at": "2027-12-24T10:00:00Z", "calendar": "work"})
    assert caught.value.errors[0][0] == "schedule.calendar"
    with pytest.raises(errors.Invalid) as caught:
        rig.create(schedule={"every_s": 60, "on_excluded": "skip"})
    assert caught.value.errors[0][0] == "schedule.on_excluded"


# -- what a claim decides ---------------------------------------------------------------


async def _christmas(rig: Rig) -> None:
    await rig.put_calendar(
        "work", exclude_weekdays=WEEKEND, exclude_dates=["2027-12-24"], holidays={"country": "DE", "subdivision": "BY"}
    )


async def test_skip_records_one_skipped_row_for_a_contiguous_range(rig):
    await _christmas(rig)
    rig.now_ms = ms("2027-12-23T12:00:00+00:00")
    job = _cron(rig, "0 18 * * *", "skip")
    assert rig.claim(job.id).status == "claimed"  # Thu 23rd
    assert rig.claim(job.id) is None  # Fri 24th: skipped with the weekend
    row = next(r for r in rig.history(job.id) if r.status == "skipped")
    assert (row.reason, row.missed_count) == ("calendar", 3)
    assert "2027-12-24 excluded (exclude_dates)" in (row.error or "")
    assert berlin(row.missed_until_ms) == "2027-12-27 18:00 CET"
    assert berlin(rig.waiting(job.id).due_ms) == "2027-12-27 18:00 CET"


async def test_next_business_day_moves_a_run_and_it_runs_once_there(rig):
    await _christmas(rig)
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    job = _cron(rig, "0 18 * * 5", "next_business_day")  # Fridays
    assert rig.claim(job.id) is None  # Fri 24th: moved, not claimed
    run = rig.waiting(job.id)
    assert berlin(run.nominal_ms) == "2027-12-24 18:00 CET" and berlin(run.due_ms) == "2027-12-27 18:00 CET"
    claimed = rig.claim(job.id)
    assert claimed is not None and claimed.status == "claimed" and claimed.nominal_ms == run.nominal_ms
    assert berlin(rig.waiting(job.id).nominal_ms) == "2027-12-31 18:00 CET"


async def test_a_move_onto_a_slot_of_its_own_is_one_run_not_two(rig):
    await _christmas(rig)
    rig.now_ms = ms("2027-12-23T12:00:00+00:00")
    job = _cron(rig, "0 18 * * *", "next_business_day")
    rig.claim(job.id)  # Thu 23rd
    assert rig.claim(job.id) is None  # Fri, Sat, Sun: each onto Monday's own slot, one range
    assert berlin(rig.waiting(job.id).nominal_ms) == "2027-12-27 18:00 CET"
    [skipped] = [r for r in rig.history(job.id) if r.status == "skipped"]
    assert skipped.missed_count == 3 and "onto a slot of its own" in (skipped.error or "")


async def test_previous_business_day_is_planned_early(rig):
    await _christmas(rig)
    rig.now_ms = ms("2027-12-15T12:00:00+00:00")
    job = _cron(rig, "0 18 * * 5", "previous_business_day")
    rig.claim(job.id)  # Fri 17th, normal: plans the 24th, moved back to Thu 23rd
    run = rig.waiting(job.id)
    assert berlin(run.nominal_ms) == "2027-12-24 18:00 CET" and berlin(run.due_ms) == "2027-12-23 18:00 CET"
    assert rig.claim(job.id).nominal_ms == run.nominal_ms


async def test_easter_from_the_library_next_and_previous(rig):
    await rig.put_calendar("work", exclude_weekdays=WEEKEND, holidays={"country": "DE"})
    rig.now_ms = ms("2027-03-20T12:00:00+00:00")
    nxt = _cron(rig, "0 9 * * 1", "next_business_day")  # Mondays: Easter Monday is March 29th
    prev = _cron(rig, "0 9 * * 1", "previous_business_day")
    rig.claim(nxt.id)
    rig.claim(prev.id)
    assert rig.claim(nxt.id) is None
    assert berlin(rig.waiting(nxt.id).due_ms) == "2027-03-30 09:00 CEST"  # Tuesday
    # Good Friday (the 26th) is out too: Thursday, planned at the claim before.
    assert berlin(rig.waiting(prev.id).due_ms) == "2027-03-25 09:00 CET"


async def test_a_move_across_the_dst_change_keeps_the_wall_time(rig):
    await rig.put_calendar("work", exclude_weekdays=WEEKEND, holidays={"country": "DE"})
    rig.now_ms = ms("2027-03-20T12:00:00+00:00")
    job = _cron(rig, "0 18 * * 5", "next_business_day")  # Fri 26th, Good Friday, CET
    assert rig.claim(job.id) is None
    run = rig.waiting(job.id)
    assert berlin(run.nominal_ms) == "2027-03-26 18:00 CET"
    assert berlin(run.due_ms) == "2027-03-30 18:00 CEST"  # an hour less in UTC
    assert run.due_ms - run.nominal_ms == 4 * 86_400_000 - 3_600_000


@pytest.mark.parametrize(("gap", "expected"), [("shift", "2027-03-28 03:00 CEST"), ("skip", None)])
async def test_a_move_into_a_dst_gap_follows_the_schedules_gap_rule(rig, gap, expected):
    await rig.put_calendar("sat", exclude_weekdays=["sat"])
    rig.now_ms = ms("2027-03-20T12:00:00+00:00")
    job = _cron(rig, "30 2 * * 6", "next_business_day", calendar="sat", dst={"gap": gap})
    assert rig.claim(job.id) is None
    if expected is None:
        assert berlin(rig.waiting(job.id).nominal_ms) == "2027-04-03 02:30 CEST"  # skipped on
    else:
        assert berlin(rig.waiting(job.id).due_ms) == expected


async def test_last_business_day_of_the_month_for_24_months(rig):
    await rig.put_calendar("work", exclude_weekdays=WEEKEND, holidays={"country": "DE"})
    rig.now_ms = ms("2027-01-01T00:00:00+00:00")
    job = _cron(rig, "0 18 L * *", "previous_business_day")
    known = holidays.country_holidays("DE", years=range(2027, 2030))
    got, expected = [], []
    year, month = 2027, 1
    for _ in range(24):
        last = dt.date(year, month % 12 + 1, 1) - dt.timedelta(days=1) if month < 12 else dt.date(year, 12, 31)
        day = last
        while day.weekday() >= 5 or day in known:
            day -= dt.timedelta(days=1)
        expected.append(f"{day.isoformat()} 18:00")
        run = rig.claim(job.id)
        assert run is not None and run.status == "claimed"
        got.append(berlin(run.started_ms)[:16])
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    assert got == expected


async def test_a_calendar_edit_skips_a_run_already_waiting_with_no_scan(rig):
    await rig.put_calendar("work")
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    job = _cron(rig, "0 18 * * *", "skip")
    waiting = rig.waiting(job.id)
    await rig.put_calendar("work", exclude_dates=["2027-12-20"])  # one command, no job touched
    assert rig.waiting(job.id) == waiting
    assert rig.claim(job.id) is None
    row = rig.store.get_run_any(job.id, waiting.nominal_ms)
    assert row is not None and (row.status, row.reason) == ("skipped", "calendar")


async def test_a_decision_made_before_an_edit_goes_back_to_the_dispatcher(rig):
    await rig.put_calendar("work")
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    job = _cron(rig, "0 18 * * *", "skip")
    run = rig.waiting(job.id)
    rig.now_ms = run.due_ms
    runs_key = keys.run_key_of(keys.job_key(job.id), job.id, run.nominal_ms, run.due_ms)
    claim = rig.core._claim_of(runs_key, rig.job(job.id), {}, rig.now_ms, claiming=True)
    assert claim is not None and claim.calendar is not None and claim.calendar.action == "run"
    cal = rig.jobs.calendars.record(OWNER, "work", _spec(exclude_dates=["2027-12-20"]), rig.now_ms)
    [[edited, claimed]] = [rig.apply(PutCalendar(rig.now_ms, cal), ClaimRuns(rig.now_ms, "w", [claim]))]
    assert edited.version == 2 and claimed == [None]
    assert rig.waiting(job.id) == run  # still waiting, and fed to the dispatcher again
    assert any(key == runs_key for key, _, _ in rig.changes[-1].woken)
    assert rig.claim(job.id) is None  # decided anew: skipped
    assert rig.store.get_run_any(job.id, run.nominal_ms).status == "skipped"


async def test_a_job_without_a_calendar_claims_with_no_calendar_decision(rig):
    await rig.put_calendar("work", exclude_weekdays=WEEKEND)
    job = rig.create(schedule={"every_s": 3600})
    run = rig.waiting(job.id)
    runs_key = keys.run_key_of(keys.job_key(job.id), job.id, run.nominal_ms, run.due_ms)
    claim = rig.core._claim_of(runs_key, rig.job(job.id), {}, run.due_ms, claiming=True)
    assert claim is not None and claim.calendar is None


async def test_patch_sets_and_clears_a_jobs_calendar(rig):
    await rig.put_calendar("work", exclude_weekdays=WEEKEND)
    job = rig.create(schedule={"cron": "0 18 * * *", "timezone": BERLIN})
    from tempo.net.jobs_api import _patched
    from tempo.net.views import job_view

    body = _patched(job_view(job), {"schedule": {"calendar": "work", "on_excluded": "next_business_day"}})
    patched = await rig.jobs.patch(job, body, from_msgpack=False)
    use = rig.store.calendar_use(job.id)
    assert use is not None and (use.name, use.on_excluded) == ("work", "next_business_day")
    assert rig.store.calendar_users(OWNER, "work") == [job.id]
    body = _patched(job_view(patched, calendar=use), {"schedule": {"calendar": None, "on_excluded": None}})
    await rig.jobs.patch(rig.job(job.id), body, from_msgpack=False)
    assert rig.store.calendar_use(job.id) is None and rig.store.calendar_users(OWNER, "work") == []


# -- preview ----------------------------------------------------------------------------


async def test_preview_marks_moves_and_lists_excluded_slots_with_reasons(rig):
    await _christmas(rig)
    sched = rig.jobs.calendars  # the service
    from tempo.engine.jobs import schedule_record
    from tempo.schema import ScheduleIn

    record = schedule_record(ScheduleIn(cron="0 18 * * 5", timezone=BERLIN))
    after = ms("2027-12-20T00:00:00+00:00")
    entries = await sched.preview(OWNER, record, "work", "next_business_day", after, 3, include_excluded=True)
    assert [(berlin(e.at_ms), e.excluded) for e in entries] == [
        ("2027-12-27 18:00 CET", False), ("2027-12-31 18:00 CET", False), ("2028-01-07 18:00 CET", False),
    ]
    assert entries[0].moved_from_ms == ms("2027-12-24T17:00:00+00:00")
    assert entries[0].why == "2027-12-24 excluded (exclude_dates)"
    daily = schedule_record(ScheduleIn(cron="0 18 * * *", timezone=BERLIN))
    entries = await sched.preview(OWNER, daily, "work", "skip", after, 6, include_excluded=True)
    excluded = [(berlin(e.at_ms)[:10], e.why) for e in entries if e.excluded]
    assert ("2027-12-25", "2027-12-25 excluded (Christmas Day)") in excluded
    assert sum(not e.excluded for e in entries) == 6


def _spec(**body: object):
    import json

    import msgspec

    from tempo.schema import CalendarIn

    body.setdefault("timezone", BERLIN)
    return msgspec.json.decode(json.dumps(body), type=CalendarIn)


async def test_a_moved_run_runs_and_the_slots_it_passed_go_to_catch_up(rig):
    await rig.put_calendar("sat", timezone="UTC", exclude_weekdays=["sat", "sun"])
    rig.now_ms = ms("2027-12-10T12:00:00+00:00")
    job = rig.create(schedule={"cron": "0 8,20 * * 6", "calendar": "sat", "on_excluded": "next_business_day"})
    assert rig.claim(job.id) is None  # Sat 11th 08:00 -> Mon 13th 08:00 (no slot of its own)
    moved = rig.waiting(job.id)
    claimed = rig.claim(job.id)
    assert claimed is not None and claimed.nominal_ms == moved.nominal_ms  # runs, not recorded missed
    after = rig.waiting(job.id)  # the latest slot passed (Sat 20:00), due now, then moved in turn
    assert after.nominal_ms == ms("2027-12-11T20:00:00+00:00")
    assert rig.claim(job.id) is None
    assert rig.waiting(job.id).due_ms == ms("2027-12-13T20:00:00+00:00")


async def test_a_patch_to_a_one_off_drops_the_calendar(rig):
    from tempo.net.jobs_api import _patched
    from tempo.net.views import job_view

    await rig.put_calendar("work", exclude_weekdays=WEEKEND)
    job = _cron(rig, "0 18 * * *", "next_business_day")
    use = rig.store.calendar_use(job.id)
    body = _patched(job_view(job, calendar=use), {"schedule": {"cron": None, "at": "2027-12-24T10:00:00Z"}})
    assert body.schedule.calendar is None and body.schedule.on_excluded is None
    await rig.jobs.patch(job, body, from_msgpack=False)
    assert rig.store.calendar_use(job.id) is None


async def test_a_reopened_store_and_a_snapshot_still_know_the_calendar_jobs(rig, tmp_path):
    from tempo.engine.store import Store

    await rig.put_calendar("work", exclude_weekdays=WEEKEND)
    job = _cron(rig, "0 18 * * *", "skip")
    plain = rig.create(schedule={"every_s": 60})
    path = rig.store.path
    index, data = rig.store.snapshot_data()
    rig.store.close()
    rig.store = Store(path, map_bytes=64 << 20)
    copy = Store(str(tmp_path / "copy"), map_bytes=64 << 20)
    try:
        copy.write(lambda txn: copy.restore_in(txn, index, data))
        for store in (rig.store, copy):
            assert store.calendar_of(store.get_job_any(job.id)) is not None
            assert store.calendar_of(store.get_job_any(plain.id)) is None
            assert job.id in store._calendar_uses and plain.id not in store._calendar_uses
            assert store._calendar_epochs == {OWNER: 1}
    finally:
        copy.close()


async def test_one_command_changes_a_calendar_whatever_jobs_use_it(rig):
    await rig.put_calendar("work")
    rig.now_ms = ms("2027-12-20T12:00:00+00:00")
    made = [_cron(rig, "0 18 * * *", "skip") for _ in range(50)]
    before = rig.index
    await rig.put_calendar("work", exclude_dates=["2027-12-20"])
    assert rig.index == before + 1  # one entry
    changes = rig.changes[-1]
    assert changes.woken == [] and changes.left == [] and changes.calendar_epochs == [(OWNER, 2)]
    assert all(rig.claim(job.id) is None for job in made)  # each decided at its claim: skipped
