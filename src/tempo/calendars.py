"""Which local days a calendar excludes, and where an excluded slot's run
goes (docs/semantics.md "Calendars"). Pure functions over integer UNIX
milliseconds and proleptic Gregorian ordinals (`date.toordinal()`), as
schedule.py is: no clock, no I/O, no randomness.

A calendar is seen through a `View`: its time zone, and the days it
excludes with its bases' (explicit dates, resolved holidays, weekdays),
each day with the reason a preview shows. Holidays are resolved to dates
when a calendar is put (engine/calendars.py), so nothing here asks the
holidays library anything.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from tempo import limits, schedule

__all__ = ["WEEKDAYS", "OnExcluded", "Placement", "View", "day_of", "place", "reason"]

# Weekday names by Python's `date.weekday()`: Monday is 0.
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
OnExcluded = Literal["skip", "next_business_day", "previous_business_day"]
_EPOCH_ORDINAL = 719_163  # dt.date(1970, 1, 1).toordinal()


@dataclass(frozen=True, slots=True)
class View:
    """A calendar with its bases folded in: the days it excludes, by
    ordinal, with why (`exclude_dates`, or a holiday's name); the weekdays
    it excludes (0 = Monday); `epoch` names the state of its owner's
    calendars it was read at (records.CalendarEpoch)."""

    timezone: str
    days: Mapping[int, str]
    weekdays: frozenset[int]
    epoch: int = 0

    def excluded(self, day: int) -> bool:
        return (day + 6) % 7 in self.weekdays or day in self.days


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a slot's run goes: `at_ms` None when it does not run (its
    day is excluded and it is skipped, or no business day is near enough,
    or the new time falls in a DST gap that `skip`s); else the instant
    it runs at, the slot itself when its day is not excluded. `why`:
    the reason when the day is excluded, else None."""

    at_ms: int | None
    why: str | None = None

    @property
    def moved(self) -> bool:
        return self.why is not None and self.at_ms is not None


# The UTC span [from, until) in ms of the local day last asked of each zone,
# and its ordinal: the claims of one day ask of the same day again and
# again, and a span check costs less than a zone's offset lookup.
_day_spans: dict[str, tuple[int, int, int]] = {}


def day_of(timezone: str, at_ms: int) -> int:
    """The ordinal of the local date in `timezone` at the instant `at_ms`."""
    span = _day_spans.get(timezone)
    if span is not None and span[0] <= at_ms < span[1]:
        return span[2]
    local_s = at_ms // 1000 + schedule.utc_offset_s(timezone, at_ms)
    day = local_s // 86_400 + _EPOCH_ORDINAL
    # The day's first instant (its midnight, or the end of a gap there)
    # and the next day's: DST makes a day 23 or 25 hours long.
    start_ms = schedule.wall_time_ms(timezone, (day - _EPOCH_ORDINAL) * 86_400)
    end_ms = schedule.wall_time_ms(timezone, (day + 1 - _EPOCH_ORDINAL) * 86_400)
    if start_ms is not None and end_ms is not None and start_ms <= at_ms < end_ms:
        _day_spans[timezone] = (start_ms, end_ms, day)
    return day


def reason(view: View, day: int) -> str:
    """Why `day` is excluded, as a preview shows it: `2027-12-24 excluded
    (exclude_dates)`, `(Christmas Day)`, `(weekday sat)`."""
    why = view.days.get(day)
    if why is None:
        why = f"weekday {WEEKDAYS[(day + 6) % 7]}"
    return f"{dt.date.fromordinal(day).isoformat()} excluded ({why})"


def business_day(view: View, day: int, step: int) -> int | None:
    """The nearest day after (`step` 1) or before (-1) `day` that `view`
    does not exclude, within limits.calendar_days_searched_max days."""
    for n in range(1, limits.calendar_days_searched_max + 1):
        found = day + step * n
        if not view.excluded(found):
            return found
    return None


def place(
    view: View,
    slot_ms: int,
    on_excluded: OnExcluded,
    *,
    gap: schedule.DstGap = "shift",
    repeat: schedule.DstRepeat = "first",
) -> Placement:
    """Where the run of the slot `slot_ms` goes under `view` and the
    job's `on_excluded`: at the slot when its local day is not excluded;
    else nowhere (`skip`), or at the same local wall time on the nearest
    business day after or before, placed by the schedule's DST policy."""
    day = day_of(view.timezone, slot_ms)
    if not view.excluded(day):
        return Placement(slot_ms)
    local_s = slot_ms // 1000 + schedule.utc_offset_s(view.timezone, slot_ms)
    why = reason(view, day)
    if on_excluded == "skip":
        return Placement(None, why)
    to_day = business_day(view, day, 1 if on_excluded == "next_business_day" else -1)
    if to_day is None:
        return Placement(None, why)
    moved_s = local_s + (to_day - day) * 86_400
    try:
        # The slot's milliseconds too (an `every_s` grid counts from
        # `created_at`): on a day with a slot at that wall time, the moved
        # run lands on it, and that slot's run is the one run there.
        at_ms = schedule.wall_time_ms(view.timezone, moved_s, gap=gap, repeat=repeat)
    except schedule.ScheduleError:
        at_ms = None
    if at_ms is not None:
        at_ms += slot_ms % 1000
    if at_ms is not None and not 0 <= at_ms <= limits.instant_ms_max:
        at_ms = None
    return Placement(at_ms, why)


def next_open_ms(view: View, at_ms: int) -> int | None:
    """The start (local midnight, or the end of a DST gap there) of the
    first day after the local day of `at_ms` that `view` does not
    exclude; None when none is within limits.calendar_days_searched_max."""
    local_s = at_ms // 1000 + schedule.utc_offset_s(view.timezone, at_ms)
    day = business_day(view, local_s // 86_400 + _EPOCH_ORDINAL, 1)
    if day is None:
        return None
    return schedule.wall_time_ms(view.timezone, (day - _EPOCH_ORDINAL) * 86_400)


def local_text(timezone: str, at_ms: int) -> str:
    """The wall clock of `timezone` at `at_ms`: `2027-12-24T18:00:00`."""
    local_s = at_ms // 1000 + schedule.utc_offset_s(timezone, at_ms)
    return (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=local_s)).isoformat(timespec="seconds")
