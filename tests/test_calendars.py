"""tempo/calendars.py's pure rules (docs/semantics.md "Calendars"): the
local day of an instant (with its cache of a day's span) against zoneinfo,
around DST changes, a midnight gap and a midnight repeat included."""

import datetime as dt
import random
import zoneinfo

import pytest

from tempo import calendars

ZONES = ["Europe/Berlin", "America/Santiago", "America/Havana", "Australia/Lord_Howe", "Pacific/Apia", "UTC"]


@pytest.mark.parametrize("zone_name", ZONES)
def test_day_of_is_the_local_date_for_instants_in_any_order(zone_name):
    zone = zoneinfo.ZoneInfo(zone_name)
    rng = random.Random(7)
    start = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    instants = [start + n * 1_799_000 for n in range(20_000)]  # every ~30 min over a year, in order
    instants += [rng.randrange(start, start + 400 * 86_400_000) for _ in range(5_000)]  # and at random
    for at_ms in instants:
        want = dt.datetime.fromtimestamp(at_ms / 1000, zone).date().toordinal()
        assert calendars.day_of(zone_name, at_ms) == want, (zone_name, at_ms)


@pytest.mark.parametrize("on_excluded", ["next_business_day", "previous_business_day"])
def test_a_move_keeps_the_milliseconds_of_the_slot(on_excluded):
    # An `every_s` grid counts from `created_at`, milliseconds and all: the
    # moved run lands on the same wall time, so on the slot of that day
    # when there is one (one run there, not two: docs/semantics.md "Calendars").
    view = calendars.View("UTC", {}, frozenset({0}))  # Mondays out
    monday = int(dt.datetime(2026, 12, 7, 13, 18, 32, 85_000, tzinfo=dt.UTC).timestamp() * 1000)
    moved = calendars.place(view, monday, on_excluded)
    step = 1 if on_excluded == "next_business_day" else -1  # Tuesday, or Sunday
    assert moved.moved and moved.at_ms == monday + step * 86_400_000


def test_a_move_keeps_the_wall_time_and_a_gap_shifts_or_skips():
    view = calendars.View("Europe/Berlin", {}, frozenset({5}))  # Saturdays out
    sat = int(dt.datetime(2027, 3, 27, 2, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin")).timestamp() * 1000)
    shifted = calendars.place(view, sat, "next_business_day")
    assert shifted.moved and shifted.at_ms == int(dt.datetime(2027, 3, 28, 1, 0, tzinfo=dt.UTC).timestamp() * 1000)
    assert calendars.place(view, sat, "next_business_day", gap="skip").at_ms is None
    assert calendars.place(view, sat, "skip") == calendars.Placement(None, "2027-03-27 excluded (weekday sat)")
