"""When does a schedule fire? Pure functions (and methods of immutable values)
over integer UNIX milliseconds.

Two kinds of repeating schedule live here (one-off ``at`` needs no helper):

- ``cron``: a 5-field expression of crontab(5) as Vixie and Debian cron read
  it (docs/semantics.md "The cron dialect"), or one macro, evaluated on the
  *wall clock* of an IANA time zone. The fields are parsed here from plain
  text and compiled into a ``_Cron`` that steps month -> day -> hour ->
  minute, so the next wall-clock occurrence costs one pass over at most
  ``CRON_SEARCH_MONTHS_MAX`` months. Each local occurrence is then mapped to
  UTC by the schedule's DST policy (``gap``, ``repeat``):

  * a local time inside a spring-forward gap runs at the first instant after
    the gap (the transition instant itself) with ``gap="shift"``, and not
    at all with ``gap="skip"``;
  * a local time that occurs twice (fall-back) runs at its first occurrence
    (``repeat="first"``, ``fold=0``), at its second (``"last"``, ``fold=1``),
    or at both (``"both"``);
  * several local times that map onto one UTC instant (``*/15`` inside a gap)
    produce that instant once.

  Each of the two maps (every local time by its first occurrence, or every
  one by its last) is monotone non-decreasing, so walking local occurrences
  in order and dropping repeats yields strictly increasing UTC times;
  ``repeat="both"`` merges the two walks.

  A ``CronRule``, an immutable value, holds the expression, the zone and the
  policy together and answers for their occurrences: the next ones, the
  latest before an instant, the n-th, how many in a range.

- ``every_s``: the grid ``anchor + k * every_s``, integer arithmetic only.

Every instant answered lies in years 1 to 9999 (limits.instant_ms_max): a
schedule has no occurrence after the end of 9999. Nothing here reads the
clock, touches files (beyond zoneinfo loading tz data) or uses randomness.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as dt
import functools
import heapq
import re
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from tempo import limits

__all__ = [
    "CronRule",
    "DstGap",
    "DstMark",
    "DstRepeat",
    "ScheduleError",
    "next_every_ms",
    "utc_offset_s",
    "validate_cron",
]

DstGap = Literal["shift", "skip"]
DstRepeat = Literal["first", "last", "both"]
# How an occurrence came about on its day of a transition; None on others.
DstMark = Literal["gap_shifted", "repeat_first", "repeat_second"]

CRON_EXPR_CHARS_MAX = 200
TIMEZONE_CHARS_MAX = 64
CRON_TIMES_COUNT_MAX = 1000
# Which days of a month match depends only on the month's type: its number,
# its length and the weekday it starts on. Over the 400-year Gregorian cycle
# a type recurs at most 480 months after its last occurrence (a leap February
# that starts on a given weekday, across a century year that is not leap:
# tests/test_schedule.py checks the figure). So an expression that can match
# at all matches within 481 months of any instant; the search never looks
# further, and an expression that matches in no month type is rejected.
CRON_SEARCH_MONTHS_MAX = 481
# Matcher steps between two occurrences of one walk that give none: a start
# inside an overlap, a gap jumped over, a shifted time met again at the end
# of its gap. A few in practice; the bound only turns a logic error into None.
CRON_STEPS_MAX = 8

_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
# (name, lowest, highest) of the five fields; day-of-week 7 is Sunday as 0 is.
_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_DAY_OF_MONTH = 2
# `L` in the day-of-month field, the last day of the month (Quartz's and
# cronsim's `L`), held in the field's set as this value past any day.
_LAST_DAY = 32
_MONTH = 3
_DAY_OF_WEEK = 4
_NAMES: dict[int, dict[str, int]] = {
    _MONTH: {name: i for i, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)},
    _DAY_OF_WEEK: {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))},
}
# One list element: `*`, a value, or a range `a-b`, each with an optional
# `/step`; a value or range end is digits or a name (checked afterwards).
_ELEMENT = re.compile(r"(?:(\*)|([0-9]{1,4}|[A-Za-z]{3})(?:-([0-9]{1,4}|[A-Za-z]{3}))?)(?:/([0-9]{1,4}))?")
# Extensions of other crons, named when they are met (tests/test_cron_dialect.py).
_LAST = re.compile(r"L|LW|[0-9]+L|L[0-9]*|L-[0-9]+", re.IGNORECASE)
_NEAREST = re.compile(r"[0-9]+W", re.IGNORECASE)
_TIMEZONE_KEY = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
# Keys that resolve to the host's own configuration rather than a fixed zone,
# so two nodes could disagree about them.
_HOST_SPECIFIC_KEYS = frozenset({"localtime", "posixrules"})
_UTC_KEYS = frozenset({"UTC", "Etc/UTC"})
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
# Naive wall-clock seconds of 0001-01-01T00:00, the start of datetime's range.
_LOCAL_S_MIN = -62_135_596_800
# The last UTC second an occurrence may fall on (the end of year 9999).
_UTC_S_LAST = limits.instant_ms_max // 1000
_EPOCH_ORDINAL = 719_163  # dt.date(1970, 1, 1).toordinal()
_MONTH_NAMES = tuple(calendar.month_name)
# Latest-slot bisection halves an int64 range of seconds at most this often,
# and the look back before it quadruples a minute at most this often.
_BISECT_STEPS_MAX = 64
_GALLOP_STEPS_MAX = 32


class ScheduleError(ValueError):
    """Raised for an invalid schedule; .loc is the field ('cron' or 'timezone' or 'every_s'), .msg the human message."""

    def __init__(self, loc: str, msg: str):
        super().__init__(f"{loc}: {msg}")
        self.loc = loc
        self.msg = msg


@functools.lru_cache(maxsize=1024)
def _zone(timezone: str) -> zoneinfo.ZoneInfo:
    """The zone for an IANA key; raises ScheduleError(loc='timezone')."""
    if not isinstance(timezone, str) or not timezone:
        raise ScheduleError("timezone", "must be a non-empty IANA time zone name")
    if len(timezone) > TIMEZONE_CHARS_MAX:
        raise ScheduleError("timezone", f"longer than {TIMEZONE_CHARS_MAX} characters")
    # The pattern rules out path tricks ("../", absolute paths, NUL) before
    # zoneinfo touches the file system.
    if not _TIMEZONE_KEY.fullmatch(timezone) or timezone in _HOST_SPECIFIC_KEYS:
        raise ScheduleError("timezone", f"unknown time zone {timezone!r}")
    try:
        return zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as e:
        # ZoneInfoNotFoundError for unknown keys, ValueError for non-TZif
        # files, OSError (IsADirectoryError) for region names like "America".
        raise ScheduleError("timezone", f"unknown time zone {timezone!r}") from e


# -- parsing ------------------------------------------------------------------------


def _reject_extension(field: str, element: str) -> None:
    """Name an extension of another cron met in ``element`` of ``field``."""
    if "?" in element:
        raise ScheduleError("cron", f"`?` in the {field} field is Quartz syntax, not crontab's: use `*`")
    if "#" in element:
        raise ScheduleError(
            "cron", f"`#` (the n-th weekday of a month) in the {field} field is not crontab syntax"
        )
    if _LAST.fullmatch(element):
        raise ScheduleError(
            "cron",
            f"{element!r} in the {field} field: of the `L` forms tempo takes only `L` alone, the last day of "
            "the month, in the day-of-month field",
        )
    if _NEAREST.fullmatch(element):
        raise ScheduleError(
            "cron", f"`W` (the weekday nearest a day) in the {field} field is not crontab syntax"
        )
    if element[:1] in ("H", "h", "R", "r"):
        raise ScheduleError(
            "cron",
            f"{element!r} in the {field} field: the hashed (H) and random (R) forms are not "
            "crontab syntax, and every node must agree on every time",
        )


def _value(index: int, text: str) -> int:
    """One value of field ``index``: digits, or a name the field has."""
    field, lo, hi = _FIELDS[index]
    if text.isdigit():
        value = int(text)
        if not lo <= value <= hi:
            raise ScheduleError("cron", f"{text} is outside the {field} field's {lo}-{hi}")
        return value
    names = _NAMES.get(index)
    if names is None or text.lower() not in names:
        where = f"one of {', '.join(names)}" if names else "numbers only"
        raise ScheduleError("cron", f"{text!r} is not a name of the {field} field ({where})")
    return names[text.lower()]


def _parse_field(index: int, text: str) -> frozenset[int]:
    """The values a field allows (day-of-week 7 given as 0).

    ``*`` is the field's whole range, ``a-b`` a range (never backwards),
    ``/s`` a step from the start of the range or ``*``, and a value with a
    step ``a/s`` runs from a to the field's maximum. Lists join elements."""
    field, lo, hi = _FIELDS[index]
    values: set[int] = set()
    for element in text.split(","):
        if index == _DAY_OF_MONTH and element in ("L", "l"):
            values.add(_LAST_DAY)
            continue
        _reject_extension(field, element)
        match = _ELEMENT.fullmatch(element)
        if match is None:
            raise ScheduleError(
                "cron", f"{element!r} in the {field} field is not a value, a range, `*` or a step of one"
            )
        star, start_text, end_text, step_text = match.groups()
        step = 1
        if step_text is not None:
            step = int(step_text)
            if not 1 <= step <= hi - lo + 1:
                raise ScheduleError("cron", f"the step {step_text} of the {field} field is outside 1-{hi - lo + 1}")
        if star is not None:
            first, last = lo, hi
        else:
            first = _value(index, start_text)
            if end_text is not None:
                last = _value(index, end_text)
                if last < first:
                    raise ScheduleError("cron", f"the {field} range {element!r} runs backwards")
            else:
                last = hi if step_text is not None else first
        values.update(range(first, last + 1, step))
    if index == _DAY_OF_WEEK and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


@functools.lru_cache(maxsize=1024)
def _compiled(expr: str) -> _Cron:
    """The expression parsed and compiled for stepping."""
    if not isinstance(expr, str):
        raise ScheduleError("cron", "must be a string")
    if len(expr) > CRON_EXPR_CHARS_MAX:
        raise ScheduleError("cron", f"longer than {CRON_EXPR_CHARS_MAX} characters")
    stripped = expr.strip()
    if stripped == "@reboot":
        raise ScheduleError("cron", "@reboot runs when a machine starts, which a schedule has no notion of")
    if stripped.startswith("@"):
        if stripped not in _MACROS:
            raise ScheduleError("cron", f"unknown macro {stripped!r}; use one of {sorted(_MACROS)}")
        stripped = _MACROS[stripped]
    fields = stripped.split()
    if len(fields) != len(_FIELDS):
        raise ScheduleError(
            "cron",
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}",
        )
    minutes, hours, doms, months, dows = (_parse_field(i, f) for i, f in enumerate(fields))
    # Vixie cron's day rule: a field that starts with `*` (`*`, `*/2`) makes
    # the two day fields AND together, otherwise either may match.
    day_and = fields[_DAY_OF_MONTH].startswith("*") or fields[_DAY_OF_WEEK].startswith("*")
    return _Cron(minutes, hours, doms, months, dows, day_and=day_and)


class _Cron:
    """A cron expression compiled for stepping: sorted minutes and hours, a
    set of months, and the matching days of each month type, computed once
    per type (at most 12 months x 2 lengths x 7 first weekdays)."""

    __slots__ = ("_day_types", "_months_sorted", "day_and", "doms", "dows", "hours", "minutes", "months")

    def __init__(
        self,
        minutes: frozenset[int],
        hours: frozenset[int],
        doms: frozenset[int],
        months: frozenset[int],
        dows: frozenset[int],
        *,
        day_and: bool,
    ):
        assert minutes and hours and doms and months and dows
        self.minutes = tuple(sorted(minutes))
        self.hours = tuple(sorted(hours))
        self.doms = doms
        self.months = months
        self.dows = dows  # 0 = Sunday .. 6 = Saturday
        self.day_and = day_and
        self._months_sorted = tuple(sorted(months))
        self._day_types: dict[tuple[int, int, int], tuple[int, ...]] = {}

    def days(self, month: int, days: int, first_wd: int) -> tuple[int, ...]:
        """The matching days, ascending, of a month of this type; ``first_wd``
        is the cron weekday (0 = Sunday) of its 1st."""
        key = (month, days, first_wd)
        found = self._day_types.get(key)
        if found is None:
            by_dom = {d for d in self.doms if d <= days}
            if _LAST_DAY in self.doms:
                by_dom.add(days)
            by_dow = {d for d in range(1, days + 1) if (first_wd + d - 1) % 7 in self.dows}
            matched = by_dom & by_dow if self.day_and else by_dom | by_dow
            found = self._day_types[key] = tuple(sorted(matched))
        return found

    def dom_occurs(self) -> bool:
        """Whether the day-of-month field allows a day of some allowed month."""
        return _LAST_DAY in self.doms or any(d <= max(_MONTH_LENGTHS[m]) for d in self.doms for m in self.months)

    def month_types(self) -> list[tuple[int, int, int]]:
        """Every (month, length, first weekday) the months field allows."""
        return [
            (month, days, first_wd)
            for month in self._months_sorted
            for days in _MONTH_LENGTHS[month]
            for first_wd in range(7)
        ]

    # -- stepping -----------------------------------------------------------------

    def next_s(self, start_s: int) -> int | None:
        """The first matching naive wall-clock second strictly after
        ``start_s``, found within CRON_SEARCH_MONTHS_MAX months, or None."""
        minute_index = start_s // 60 + 1  # the first whole minute after start_s
        if minute_index * 60 < _LOCAL_S_MIN:
            minute_index = _LOCAL_S_MIN // 60
        day_index, minute_of_day = divmod(minute_index, 1440)
        if day_index + _EPOCH_ORDINAL > _ORDINAL_MAX:
            return None
        date = dt.date.fromordinal(day_index + _EPOCH_ORDINAL)
        year, month, day = date.year, date.month, date.day
        hour, minute = divmod(minute_of_day, 60)
        months = self._months_sorted
        end_index = year * 12 + month - 1 + CRON_SEARCH_MONTHS_MAX
        # Each pass takes the next allowed month, so the loop's bound is the
        # number of months in the search window, never reached in practice.
        for _ in range(CRON_SEARCH_MONTHS_MAX + 1):
            i = bisect.bisect_left(months, month)
            if i == len(months):
                year, month, i = year + 1, months[0], 0
                day, hour, minute = 1, 0, 0
            elif months[i] != month:
                month = months[i]
                day, hour, minute = 1, 0, 0
            if year > dt.MAXYEAR or year * 12 + month - 1 >= end_index:
                return None
            found = self._in_month(year, month, day, hour, minute)
            if found is not None:
                return found
            month += 1
            day, hour, minute = 1, 0, 0
        return None

    def matches(self, local_s: int) -> bool:
        """Whether the naive wall-clock second ``local_s`` is an occurrence."""
        return self.next_s(local_s - 1) == local_s

    def _in_month(self, year: int, month: int, day: int, hour: int, minute: int) -> int | None:
        """The first match in this month at or after (day, hour, minute)."""
        first_wd_py, days = calendar.monthrange(year, month)
        matching = self.days(month, days, (first_wd_py + 1) % 7)
        i = bisect.bisect_left(matching, day)
        if i < len(matching) and matching[i] == day:
            at = self._in_day(hour, minute)
            if at is not None:
                return _local_s(year, month, day, *at)
            i += 1
        if i < len(matching):
            return _local_s(year, month, matching[i], self.hours[0], self.minutes[0])
        return None

    def _in_day(self, hour: int, minute: int) -> tuple[int, int] | None:
        """The first (hour, minute) of the fields at or after the given one."""
        hours, minutes = self.hours, self.minutes
        i = bisect.bisect_left(hours, hour)
        if i < len(hours) and hours[i] == hour:
            j = bisect.bisect_left(minutes, minute)
            if j < len(minutes):
                return hour, minutes[j]
            i += 1
        if i < len(hours):
            return hours[i], minutes[0]
        return None


_ORDINAL_MAX = dt.date.max.toordinal()
# The lengths a month can have, February's in common and leap years.
_MONTH_LENGTHS = {m: ((28, 29) if m == 2 else (calendar.monthrange(2001, m)[1],)) for m in range(1, 13)}


def _local_s(year: int, month: int, day: int, hour: int, minute: int) -> int:
    ordinal = dt.date(year, month, day).toordinal()
    return (ordinal - _EPOCH_ORDINAL) * 86_400 + hour * 3600 + minute * 60


def _never_reason(cron: _Cron) -> str | None:
    """Why the expression cannot match, or None when it can.

    A day-of-month field that is restricted but occurs in none of the months
    is rejected even when the day-of-week field would still match (cron's OR
    rule): ``0 0 31 4,6,9,11 1-5`` would fire on every weekday of those
    months, surely not what was meant."""
    months = _month_list(sorted(cron.months))
    if not cron.day_and:
        if not cron.dom_occurs():
            return (
                f"the day-of-month field never matches: {_dom_words(cron)} never occurs in {months}; "
                "with both day fields restricted cron fires when either matches, so this would run "
                "on the days of the week alone: fix the day of the month, or give it as * for that"
            )
        return None
    if not any(cron.days(*t) for t in cron.month_types()):
        if len(cron.dows) == 7:
            return f"never matches: {_dom_words(cron)} never occurs in {months}"
        return f"never matches: no day satisfies both day fields in {months}"
    return None


def _dom_words(cron: _Cron) -> str:
    words = ["L" if d == _LAST_DAY else str(d) for d in sorted(cron.doms)]
    return ("day " if len(words) == 1 else "days ") + _or_list(words)


def _month_list(months: list[int]) -> str:
    return "any month" if len(months) == 12 else _or_list([_MONTH_NAMES[m] for m in months])


def _or_list(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


@functools.lru_cache(maxsize=1024)
def _reason(expr: str) -> str | None:
    """_never_reason of an expression, cached: a rejected one costs up to a
    millisecond, and a client may send it again and again."""
    return _never_reason(_compiled(expr))


def validate_cron(expr: str, timezone: str) -> None:
    """Raise ScheduleError unless ``expr`` in ``timezone`` is a usable schedule.

    Besides syntax, an expression that can never fire (``0 0 30 2 *``, Feb 30)
    is rejected here with loc='cron', and so is one whose restricted
    day-of-month field can never fire (see _never_reason). Either way no
    month type matches, which is decided without searching, so a stored job
    always has a next run within CRON_SEARCH_MONTHS_MAX months (until year
    9999).
    """
    _zone(timezone)
    reason = _reason(expr)
    if reason is not None:
        raise ScheduleError("cron", reason)


# -- wall clock to UTC -----------------------------------------------------------------


def _utcoffset_s(value: dt.datetime) -> int:
    offset = value.utcoffset()
    assert offset is not None  # an aware datetime
    return offset.days * 86_400 + offset.seconds


def _naive_offset_s(zone: zoneinfo.ZoneInfo, naive: dt.datetime) -> int:
    """The zone's UTC offset for a naive wall time, by its ``fold``."""
    offset = zone.utcoffset(naive)
    assert offset is not None  # a zone has an offset for every wall time
    return offset.days * 86_400 + offset.seconds


def _offset_s(zone: zoneinfo.ZoneInfo, utc_s: int) -> int:
    """The zone's UTC offset in seconds at the UTC instant ``utc_s``."""
    return _utcoffset_s((_EPOCH_UTC + dt.timedelta(seconds=utc_s)).astimezone(zone))


def utc_offset_s(timezone: str, at_ms: int) -> int:
    """The UTC offset of ``timezone`` at the instant ``at_ms``, in seconds:
    the wall clock there is ``at_ms + 1000 * offset``."""
    if timezone in _UTC_KEYS:
        return 0
    return _offset_s(_zone(timezone), at_ms // 1000)


def _first_change_s(zone: zoneinfo.ZoneInfo, lo_s: int, hi_s: int) -> int:
    """The smallest second in (lo_s, hi_s] whose offset differs from lo_s's.

    Precondition: the offsets at lo_s and hi_s differ. Transitions are whole
    seconds, so a binary search over integer seconds finds the exact one.
    """
    offset_lo_s = _offset_s(zone, lo_s)
    assert _offset_s(zone, hi_s) != offset_lo_s
    for _ in range(64):  # Bisection of any int64 range ends within 64 halvings.
        if hi_s - lo_s <= 1:
            return hi_s
        mid_s = (lo_s + hi_s) // 2
        if _offset_s(zone, mid_s) == offset_lo_s:
            lo_s = mid_s
        else:
            hi_s = mid_s
    raise AssertionError("bisection did not converge")


def _start_local_s(zone: zoneinfo.ZoneInfo, after_s: int, second_pass: bool) -> int:
    """The naive wall-clock second to walk from for occurrences > after_s.

    Every local time <= the returned one maps to UTC <= after_s under the
    walk's map (first or second pass), and every later one maps past it,
    up to the gap and repeat rules. Normally it is the wall clock at after_s.
    The first pass starting inside the second pass of an overlap starts
    just before the overlap ends (the wall times up to there ran before
    after_s); the second pass starting inside the first pass of an overlap
    starts just before it begins (those wall times come again after after_s).
    """
    local = (_EPOCH_UTC + dt.timedelta(seconds=after_s)).astimezone(zone)
    now_offset_s = _utcoffset_s(local)
    if not second_pass:
        if not local.fold:
            return after_s + now_offset_s
        first_offset_s = _utcoffset_s(local.replace(fold=0))
        overlap_s = first_offset_s - now_offset_s
        assert overlap_s > 0
        transition_s = _first_change_s(zone, after_s - overlap_s, after_s)
        return transition_s + first_offset_s - 1
    if local.fold:
        return after_s + now_offset_s
    second_offset_s = _utcoffset_s(local.replace(fold=1))
    if second_offset_s == now_offset_s:
        return after_s + now_offset_s
    overlap_s = now_offset_s - second_offset_s
    assert overlap_s > 0
    transition_s = _first_change_s(zone, after_s, after_s + overlap_s)
    return transition_s + second_offset_s - 1


def _walk(
    cron: _Cron, zone: zoneinfo.ZoneInfo, after_s: int, *, second_pass: bool, gap: DstGap
) -> Iterator[tuple[int, DstMark | None]]:
    """Occurrences after ``after_s`` as (UTC second, mark), strictly
    increasing: each local occurrence by its first pass (or its second with
    ``second_pass``), gaps by ``gap``. Ends at the end of year 9999."""
    local_s = _start_local_s(zone, after_s, second_pass)
    last_s = after_s
    idle_steps = 0
    while idle_steps <= CRON_STEPS_MAX:
        next_local_s = cron.next_s(local_s)
        if next_local_s is None:
            return
        local_s = next_local_s
        naive = _EPOCH_NAIVE + dt.timedelta(seconds=local_s)
        # The zone's offsets for the wall time by its first and its second
        # pass (PEP 495 fold), which differ only in a gap or an overlap.
        first_s = _naive_offset_s(zone, naive)
        second_s = _naive_offset_s(zone, naive.replace(fold=1))
        mark: DstMark | None = None
        if first_s == second_s:
            utc_s = local_s - first_s
        elif _offset_s(zone, local_s - first_s) == first_s:
            # Both passes exist: the wall time repeats (fall-back).
            utc_s, mark = (local_s - second_s, "repeat_second") if second_pass else (local_s - first_s, "repeat_first")
        else:
            # The wall time does not exist: it lies in a gap between the
            # instant it would have under the offset after the transition
            # and the one under the offset before it. The transition is the
            # first instant after the gap; the walk resumes at the wall time
            # there, so one gap costs one step however many times it holds.
            transition_s = _first_change_s(zone, local_s - second_s, local_s - first_s)
            local_s = transition_s + second_s - 1
            if gap == "skip":
                idle_steps += 1
                continue
            utc_s = transition_s
            # The wall time at the end of the gap may be an occurrence of its
            # own: then the run there is that one, not a shifted one.
            mark = None if cron.matches(local_s + 1) else "gap_shifted"
        if utc_s > _UTC_S_LAST:
            return
        if utc_s > last_s:
            yield utc_s, mark
            last_s = utc_s
            idle_steps = 0
        else:
            idle_steps += 1


def _occurrences(
    cron: _Cron, timezone: str, after_s: int, gap: DstGap, repeat: DstRepeat
) -> Iterator[tuple[int, DstMark | None]]:
    """Occurrences after ``after_s`` under the DST policy, strictly increasing."""
    assert gap in ("shift", "skip") and repeat in ("first", "last", "both")
    if timezone in _UTC_KEYS:
        at_s = after_s
        while True:
            found_s = cron.next_s(at_s)
            if found_s is None or found_s > _UTC_S_LAST:
                return
            yield found_s, None
            at_s = found_s
    zone = _zone(timezone)
    try:
        if repeat != "both":
            yield from _walk(cron, zone, after_s, second_pass=repeat == "last", gap=gap)
            return
        # Either walk yields the unambiguous times; merged, each comes twice.
        last_s = after_s
        for utc_s, mark in heapq.merge(
            _walk(cron, zone, after_s, second_pass=False, gap=gap),
            _walk(cron, zone, after_s, second_pass=True, gap=gap),
            key=lambda found: found[0],
        ):
            if utc_s > last_s:
                yield utc_s, mark
                last_s = utc_s
    except OverflowError:
        return  # wall-clock arithmetic past datetime's range (years 1 and 9999)


@dataclass(frozen=True, slots=True)
class CronRule:
    """A cron schedule, asked for its occurrences: the expression, the
    IANA zone on whose wall clock it is read, and the DST policy (``gap``,
    ``repeat``; the module's docstring). Making one checks nothing; each
    question raises ScheduleError for an invalid expression or zone.

    Every answer is in UTC ms and whole seconds (cron has minute
    granularity; transitions are whole seconds)."""

    expr: str
    timezone: str
    gap: DstGap = "shift"
    repeat: DstRepeat = "first"

    def occurrences_ms(self, after_ms: int, count: int) -> list[tuple[int, DstMark | None]]:
        """Up to ``count`` occurrences strictly after ``after_ms`` as (UTC ms,
        mark), strictly increasing: the mark says how DST placed the time
        (``gap_shifted``, ``repeat_first``, ``repeat_second``), None on other days.

        Shorter than ``count`` only when there are no more (None from
        next_ms).
        """
        assert isinstance(after_ms, int) and not isinstance(after_ms, bool)
        assert 0 <= count <= CRON_TIMES_COUNT_MAX
        cron = _compiled(self.expr)
        _zone(self.timezone)
        found: list[tuple[int, DstMark | None]] = []
        if count == 0:
            return found
        # t_s * 1000 > after_ms  <=>  t_s > floor(after_ms / 1000)
        for utc_s, mark in _occurrences(cron, self.timezone, after_ms // 1000, self.gap, self.repeat):
            found.append((utc_s * 1000, mark))
            if len(found) == count:
                break
        return found

    def times_ms(self, after_ms: int, count: int) -> list[int]:
        """occurrences_ms without the marks: the same times as ``count``
        chained next_ms calls."""
        return [t for t, _ in self.occurrences_ms(after_ms, count)]

    def next_ms(self, after_ms: int) -> int | None:
        """The first occurrence strictly after ``after_ms``, in UTC ms, or None.

        None means no occurrence within CRON_SEARCH_MONTHS_MAX months (impossible
        for an expression that passed validate_cron, short of year 9999).
        """
        found = self.occurrences_ms(after_ms, 1)
        return found[0][0] if found else None

    def latest_ms(self, at_ms: int, since_ms: int) -> int | None:
        """The last occurrence in ``(since_ms, at_ms]``, in UTC ms, or None.

        Exactly the largest value next_ms can give that is <= at_ms, found
        by bisection over whole seconds (occurrences are whole seconds, and
        next_ms of an instant depends only on its whole second): at most
        _BISECT_STEPS_MAX steps however long the range, each one bounded. The
        range is first narrowed by looking back from at_ms over spans that grow
        fourfold from a minute, so a job with many missed occurrences (the
        common catch-up) takes a handful of steps, not one per halving of its
        whole life.
        """
        assert isinstance(at_ms, int) and isinstance(since_ms, int)
        after = self.next_ms
        first_ms = None
        span_ms = 60_000
        for _ in range(_GALLOP_STEPS_MAX):
            if at_ms - span_ms <= since_ms:
                break
            found = after(at_ms - span_ms)
            if found is not None and found <= at_ms:
                first_ms = found  # an occurrence in (at_ms - span_ms, at_ms]
                break
            span_ms *= 4
        if first_ms is None:
            first_ms = after(since_ms)
            if first_ms is None or first_ms > at_ms:
                return None
        # Invariant: next(lo) <= at_ms < next(hi), where next(x) is the first
        # occurrence after second x. hi = at's second qualifies, as next(hi) is
        # a whole second past it.
        lo_s, hi_s = first_ms // 1000 - 1, at_ms // 1000
        for _ in range(_BISECT_STEPS_MAX):
            if hi_s - lo_s <= 1:
                break
            mid_s = (lo_s + hi_s) // 2
            found = after(mid_s * 1000)
            if found is not None and found <= at_ms:
                lo_s = mid_s
            else:
                hi_s = mid_s
        else:
            raise AssertionError("bisection did not converge")
        latest_ms = after(lo_s * 1000)
        assert latest_ms is not None and since_ms < latest_ms <= at_ms
        return latest_ms

    def count_in(self, after_ms: int, until_ms: int) -> int | None:
        """How many occurrences lie in ``(after_ms, until_ms]``; None when the
        range spans more than limits.catchup_count_days_max days.

        Nothing is walked minute by minute but the hours around a UTC offset
        change: the range is cut at each change (found by looking the offset up
        once a day, then bisecting), a window of the change's size plus an hour
        either side is walked (there DST shifts, repeats or drops wall times),
        and each stretch between, whose offset is fixed, has as many occurrences
        as its wall-clock span has matching minutes (`_local_count`). So a year
        of minutely occurrences costs some 365 offset lookups and date matches.
        """
        assert isinstance(after_ms, int) and isinstance(until_ms, int)
        cron = _compiled(self.expr)
        # t_s * 1000 in (after_ms, until_ms]  <=>  t_s in (after_ms // 1000, until_ms // 1000]
        after_s, until_s = after_ms // 1000, until_ms // 1000
        if until_s <= after_s:
            return 0
        if (until_s - after_s) // 86_400 > limits.catchup_count_days_max:
            return None
        if self.timezone in _UTC_KEYS:
            return _local_count(cron, after_s, until_s)
        zone = _zone(self.timezone)

        def offset_s(utc_s: int) -> int:
            try:
                return _offset_s(zone, utc_s)
            except OverflowError:
                return 0  # past datetime's range, where no occurrence lies

        total = 0
        at_s = after_s  # counted up to here
        probe_s, probe_offset_s = after_s, offset_s(after_s)
        # Each pass moves the probe a day on, or to an offset change.
        for _ in range(4 * limits.catchup_count_days_max + 4):
            if at_s >= until_s:
                break
            step_s = min(probe_s + 86_400, until_s + 86_400)
            step_offset_s = offset_s(step_s)
            if step_offset_s == probe_offset_s:
                if probe_s >= until_s:
                    # No change up to a day past the end: the rest is one stretch.
                    total += _local_count(cron, at_s + probe_offset_s, until_s + probe_offset_s)
                    break
                probe_s = step_s
                continue
            change_s = _first_change_s(zone, probe_s, step_s)
            margin_s = abs(step_offset_s - probe_offset_s) + 3600
            # The change may lie past the end (the probe looks a day ahead).
            walk_from_s = min(max(at_s, change_s - margin_s), until_s)
            total += _local_count(cron, at_s + probe_offset_s, walk_from_s + probe_offset_s)
            walk_until_s = min(until_s, change_s + margin_s)
            total += _walk_count(cron, self.timezone, walk_from_s, walk_until_s, self.gap, self.repeat)
            at_s = walk_until_s
            probe_s, probe_offset_s = change_s, step_offset_s
        else:
            raise AssertionError("the count did not reach the end of its range")
        return total

    def nth_ms(self, after_ms: int, n: int) -> int | None:
        """The n-th occurrence strictly after ``after_ms`` (n from 1 to
        CRON_TIMES_COUNT_MAX), as times_ms(...)[n - 1] gives it, or None.

        Found from the fields where the UTC offset holds from ``after_ms`` to a
        day past the answer (checked once a day, as count_in does); across
        an offset change it is walked, at most ``n`` occurrences."""
        assert isinstance(after_ms, int) and 1 <= n <= CRON_TIMES_COUNT_MAX
        cron = _compiled(self.expr)
        after_s = after_ms // 1000
        if self.timezone in _UTC_KEYS:
            found_s = _local_nth(cron, after_s, n)
            if found_s is not None:
                return None if found_s > _UTC_S_LAST else found_s * 1000
        else:
            found_s = _nth_where_offset_holds(cron, _zone(self.timezone), after_s, n)
            if found_s is not None:
                return found_s * 1000
        found = self.times_ms(after_ms, n)
        return found[-1] if len(found) == n else None


def next_every_ms(
    every_s: int,
    anchor_ms: int,
    after_ms: int,
    *,
    include_anchor: bool,
    strictly_after: bool = True,
) -> int:
    """The smallest grid point ``anchor_ms + k * every_s * 1000`` past ``after_ms``.

    ``include_anchor=False`` requires k >= 1 (the grid of ``created_at``: the
    first run is one period after creation); ``include_anchor=True`` allows
    k >= 0 (the grid of ``start_at``, which may itself be the first run).
    ``strictly_after=True`` requires the point to be > after_ms (the next run
    after a nominal time, or a preview "strictly after"); False allows
    == after_ms ("the earliest not in the past" when a job is created with
    ``start_at``: ``include_anchor=True, strictly_after=False, after_ms=now``).
    The point may lie past limits.instant_ms_max: callers bound it.
    """
    assert isinstance(every_s, int) and not isinstance(every_s, bool)
    assert every_s >= 1
    assert isinstance(anchor_ms, int) and isinstance(after_ms, int)
    period_ms = every_s * 1000
    if strictly_after:
        k = (after_ms - anchor_ms) // period_ms + 1
    else:
        k = -((anchor_ms - after_ms) // period_ms)  # ceil((after - anchor) / period)
    k = max(k, 0 if include_anchor else 1)
    due_ms = anchor_ms + k * period_ms
    assert due_ms > after_ms if strictly_after else due_ms >= after_ms
    return due_ms


def _walk_count(cron: _Cron, timezone: str, after_s: int, until_s: int, gap: DstGap, repeat: DstRepeat) -> int:
    """Occurrences in (after_s, until_s] by walking them: callers bound the span."""
    count = 0
    for utc_s, _ in _occurrences(cron, timezone, after_s, gap, repeat):
        if utc_s > until_s:
            break
        count += 1
    return count


def _day_matches(cron: _Cron, day: int) -> bool:
    """Whether the date `day` days after 1970-01-01 matches the month and
    day fields (crontab(5)'s day rule is `cron.days`)."""
    date = dt.date.fromordinal(day + _EPOCH_ORDINAL)
    if date.month not in cron.months:
        return False
    first_wd_py, days = calendar.monthrange(date.year, date.month)
    return date.day in cron.days(date.month, days, (first_wd_py + 1) % 7)


def _local_count(cron: _Cron, lo_s: int, hi_s: int) -> int:
    """Matching naive wall-clock minutes in (lo_s, hi_s], from the fields:
    per day, its date's match and, for a part of a day, a bisection per hour."""
    total = 0
    per_day = len(cron.hours) * len(cron.minutes)
    minutes = cron.minutes
    day_lo = max(lo_s // 86_400, 1 - _EPOCH_ORDINAL)
    day_hi = min(hi_s // 86_400, _ORDINAL_MAX - _EPOCH_ORDINAL)
    for day in range(day_lo, day_hi + 1):
        if not _day_matches(cron, day):
            continue
        lo, hi = lo_s - day * 86_400, hi_s - day * 86_400  # (lo, hi] within the day
        if lo < 0 and hi >= 86_399:
            total += per_day
            continue
        for hour in cron.hours:
            base = hour * 3600
            # minutes m with lo < base + 60 m <= hi
            total += max(0, bisect.bisect_right(minutes, (hi - base) // 60) - bisect.bisect_right(minutes, (lo - base) // 60))
    return total


def _local_nth(cron: _Cron, lo_s: int, n: int) -> int | None:
    """The n-th matching naive wall-clock minute after ``lo_s`` (n >= 1), in
    seconds, from the fields: per day its count, then per hour a bisection;
    None when it lies past limits.catchup_count_days_max days (or year 9999)."""
    minutes = cron.minutes
    day = max(lo_s // 86_400, 1 - _EPOCH_ORDINAL)
    last_day = min(day + limits.catchup_count_days_max, _ORDINAL_MAX - _EPOCH_ORDINAL)
    while day <= last_day:
        if _day_matches(cron, day):
            lo = lo_s - day * 86_400  # after lo within the day
            for hour in cron.hours:
                base = hour * 3600
                skip = bisect.bisect_right(minutes, (lo - base) // 60)
                here = len(minutes) - skip
                if here >= n:
                    return day * 86_400 + base + minutes[skip + n - 1] * 60
                n -= here
        day += 1
    return None


def _nth_where_offset_holds(cron: _Cron, zone: zoneinfo.ZoneInfo, after_s: int, n: int) -> int | None:
    """`_local_nth` mapped to UTC by the offset at ``after_s``, when that
    offset holds (checked once a day) up to a day past the answer; else None."""
    try:
        offset_s = _offset_s(zone, after_s)
        found_s = _local_nth(cron, after_s + offset_s, n)
        if found_s is None:
            return None
        utc_s = found_s - offset_s
        probe_s = after_s
        while probe_s < utc_s + 86_400:
            if _offset_s(zone, probe_s) != offset_s:
                return None
            probe_s += 86_400
        if _offset_s(zone, utc_s + 86_400) != offset_s or utc_s > _UTC_S_LAST:
            return None
        return utc_s
    except OverflowError:
        return None  # past datetime's range


def wall_time_ms(timezone: str, local_s: int, *, gap: DstGap = "shift", repeat: DstRepeat = "first") -> int | None:
    """The UTC instant (ms) of the naive wall-clock second ``local_s`` in
    ``timezone``, placed by the DST policy as a cron occurrence is: a time
    in a gap at the gap's end (``shift``) or nowhere (``skip``, None); a
    repeated time at its first pass (``first``, ``both``) or its second
    (``last``). None past the range of years 1 to 9999. A calendar's moved
    run is placed with it (docs/semantics.md "Calendars")."""
    if timezone in _UTC_KEYS:
        return local_s * 1000 if _LOCAL_S_MIN <= local_s <= _UTC_S_LAST else None
    zone = _zone(timezone)
    try:
        naive = _EPOCH_NAIVE + dt.timedelta(seconds=local_s)
        first_s = _naive_offset_s(zone, naive)
        second_s = _naive_offset_s(zone, naive.replace(fold=1))
        if first_s == second_s:
            return (local_s - first_s) * 1000
        if _offset_s(zone, local_s - first_s) == first_s:  # repeated (fall-back)
            return (local_s - (second_s if repeat == "last" else first_s)) * 1000
        if gap == "skip":
            return None
        return _first_change_s(zone, local_s - second_s, local_s - first_s) * 1000
    except OverflowError:
        return None
