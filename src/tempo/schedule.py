"""When does a schedule fire? Pure functions over integer UNIX milliseconds.

Two kinds of repeating schedule live here (one-off ``at`` needs no helper):

- ``cron``: a 5-field expression (minute hour day-of-month month day-of-week,
  as croniter parses them) or one macro, evaluated on the *wall clock* of
  an IANA time zone. croniter only parses: its expanded fields are compiled
  into a ``_Cron`` that steps month -> day -> hour -> minute, so the next
  occurrence costs one pass over at most ``CRON_SEARCH_MONTHS_MAX`` months
  rather than croniter's search of up to centuries, minute field by minute
  field. Each local occurrence is then mapped to UTC:

  * a local time inside a spring-forward gap runs at the first instant after
    the gap (the transition instant itself);
  * a local time that occurs twice (fall-back) runs once, at its first
    occurrence (``fold=0``);
  * several local times that map onto one UTC instant (``*/15`` inside a gap)
    produce that instant once.

  The local-to-UTC map is monotone non-decreasing, so walking local
  occurrences in order and dropping repeats yields strictly increasing UTC
  times. The matcher works on naive wall-clock seconds, because croniter's
  own DST handling is not what API.md specifies.

- ``every_s``: the grid ``anchor + k * every_s``, integer arithmetic only.

Nothing here reads the clock, touches files (beyond zoneinfo loading tz data)
or uses global random; the croniter ``R`` (random) and ``H`` (hashed) forms
are rejected because replicas must agree on every occurrence.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as dt
import functools
import re
import zoneinfo

from croniter import CroniterError, croniter

__all__ = [
    "ScheduleError",
    "cron_times_ms",
    "latest_cron_ms",
    "next_cron_ms",
    "next_every_ms",
    "validate_cron",
]

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
# Each next_cron_ms call needs one matcher step in practice (see
# _first_local_start_s); the bound only turns a logic error into None.
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
_CRON_FIELDS = 5
# "R" (random) and "H" (hashed) start a list element in croniter's extensions;
# no month or weekday name starts with either letter.
_NONDETERMINISTIC = re.compile(r"(?:^|,)[HhRr]")
_TIMEZONE_KEY = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
# Keys that resolve to the host's own configuration rather than a fixed zone,
# so two nodes could disagree about them.
_HOST_SPECIFIC_KEYS = frozenset({"localtime", "posixrules"})
_UTC_KEYS = frozenset({"UTC", "Etc/UTC"})
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
# Naive wall-clock seconds of 0001-01-01T00:00 and of the end of 9999, the
# range of datetime; occurrences past it do not exist (None).
_LOCAL_S_MIN = -62_135_596_800
_LOCAL_S_END = 253_402_300_800
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


class _Cron:
    """A cron expression compiled for stepping: sorted minutes and hours, a
    set of months, and the matching days of each month type, computed once
    per type (at most 12 months x 2 lengths x 7 first weekdays).

    Days follow croniter's rules. Day-of-month holds numbers and ``L`` (the
    last day), or one ``nW`` (the weekday nearest day n); day-of-week holds
    weekdays (0 = Sunday), or ``d#n`` (the n-th weekday d) and ``dL``-style
    last weekdays. When both day fields are restricted, a day matches if
    either does (cron's OR rule); ``W`` and ``#`` are not fields of their own
    in croniter, so each side of the OR keeps them as a further condition,
    and if one such side can never match, neither can the expression.
    """

    __slots__ = ("_day_types", "_dead", "_dom", "_dom_star", "_dow", "_dow_star", "_nearest", "_nth",
                 "_months_sorted", "hours", "minutes", "months")

    def __init__(self, template: croniter):
        minutes, hours, dom, months, dow = template.expanded
        self.minutes = tuple(range(60)) if minutes == ["*"] else tuple(sorted(minutes))
        self.hours = tuple(range(24)) if hours == ["*"] else tuple(sorted(hours))
        self.months = frozenset(range(1, 13)) if months == ["*"] else frozenset(months)
        self._months_sorted = tuple(sorted(self.months))
        self._dom_star = dom == ["*"]
        self._dow_star = dow == ["*"]
        self._dom = frozenset(dom) if not self._dom_star else frozenset()
        self._dow = frozenset(0 if d == 7 else d for d in dow) if not self._dow_star else frozenset()
        nth: dict[int, set] = {}
        for wday, which in template.nth_weekday_of_month.items():
            for day in range(7) if wday == "*" else [0 if wday == 7 else wday]:
                nth.setdefault(day, set()).update(which)
        self._nth = nth
        self._nearest = frozenset(getattr(template, "nearest_weekday", ()) or ())
        self._day_types: dict[tuple[int, int, int], tuple[int, ...]] = {}
        self._dead: bool | None = None

    # -- days of one month type --------------------------------------------------

    def _by_dom(self, days: int, first_wd: int) -> set[int]:
        """Days the day-of-month side allows (``W`` included)."""
        if self._nearest:
            return {_nearest_weekday(w, days, first_wd) for w in self._nearest}
        if self._dom_star:
            return set(range(1, days + 1))
        got = {d for d in self._dom if d != "l" and d <= days}
        if "l" in self._dom:
            got.add(days)
        return got

    def _by_dow(self, days: int, first_wd: int) -> set[int]:
        """Days the day-of-week side allows (``#`` and last weekdays included).
        ``first_wd`` is the cron weekday (0 = Sunday) of the 1st."""
        if self._nth:
            got = set()
            for wday, which in self._nth.items():
                same = list(range(1 + (wday - first_wd) % 7, days + 1, 7))
                for n in which:
                    if n == "l":
                        got.add(same[-1])
                    elif n <= len(same):
                        got.add(same[n - 1])
            return got
        if self._dow_star:
            return set(range(1, days + 1))
        return {d for d in range(1, days + 1) if (first_wd + d - 1) % 7 in self._dow}

    def _sides(self, days: int, first_wd: int) -> tuple[set[int], set[int]]:
        """The two sides of cron's OR rule, when both day fields are restricted:
        day-of-month with ``#`` still applied, and day-of-week with ``W``."""
        all_days = set(range(1, days + 1))
        nth_only = self._by_dow(days, first_wd) if self._nth else all_days
        nearest_only = self._by_dom(days, first_wd) if self._nearest else all_days
        dom_side = self._by_dom(days, first_wd) & nth_only
        dow_side = nearest_only & self._by_dow(days, first_wd)
        return dom_side, dow_side

    @property
    def day_or(self) -> bool:
        return not self._dom_star and not self._dow_star

    @property
    def clean_or(self) -> bool:
        """Each side of the OR is a plain field (no ``W``, no ``#``)."""
        return not self._nth and not self._nearest

    def days(self, month: int, days: int, first_wd: int) -> tuple[int, ...]:
        """The matching days, ascending, of a month of this type."""
        key = (month, days, first_wd)
        found = self._day_types.get(key)
        if found is None:
            if self.day_or:
                dom_side, dow_side = self._sides(days, first_wd)
                matched = dom_side | dow_side
                if not self.clean_or and self._dead_side():
                    matched = set()
            else:
                matched = self._by_dom(days, first_wd) & self._by_dow(days, first_wd)
            found = self._day_types[key] = tuple(sorted(matched))
        return found

    def month_types(self) -> list[tuple[int, int, int]]:
        """Every (month, length, first weekday) the months field allows."""
        return [
            (month, days, first_wd)
            for month in sorted(self.months)
            for days in _MONTH_LENGTHS[month]
            for first_wd in range(7)
        ]

    def _dead_side(self) -> bool:
        """Some side of the OR matches in no month type (computed once)."""
        if self._dead is None:
            types = self.month_types()
            self._dead = not any(self._sides(d, w)[0] for _, d, w in types) or not any(
                self._sides(d, w)[1] for _, d, w in types
            )
        return self._dead

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


def _nearest_weekday(day: int, days: int, first_wd: int) -> int:
    """The weekday (Monday to Friday) nearest to ``day`` of a month of
    ``days`` days whose 1st is cron weekday ``first_wd`` (0 = Sunday), never
    leaving the month: croniter's ``nW``."""
    day = min(day, days)
    wd = (first_wd + day - 1) % 7
    if wd == 6:  # Saturday: the Friday before, or the Monday after the 1st
        return day - 1 if day > 1 else day + 2
    if wd == 0:  # Sunday: the Monday after, or the Friday before the last day
        return day + 1 if day < days else day - 2
    return day


def _never_reason(cron: _Cron) -> str | None:
    """Why the expression cannot match, or None when it can.

    A day-of-month field that is restricted but occurs in none of the months
    is rejected even when the day-of-week field would still match (cron's OR
    rule): ``0 0 31 4,6,9,11 1-5`` would fire on every weekday of those
    months, surely not what was meant."""
    types = cron.month_types()
    months = _month_list(sorted(cron.months))
    if cron.day_or:
        if not any(cron._sides(d, w)[0] for _, d, w in types):
            if not cron.clean_or:
                return f"never matches: no day satisfies the day-of-month field together with # or W in {months}"
            return (
                f"the day-of-month field never matches: {_dom_words(cron)} never occurs in {months}; "
                "with both day fields restricted cron fires when either matches, so this would run "
                "on the days of the week alone: fix the day of the month, or give it as * for that"
            )
        if not any(cron._sides(d, w)[1] for _, d, w in types):
            return f"never matches: the day-of-week field does not occur in {months}"
        return None
    if not any(cron.days(*t) for t in types):
        if not cron._dom_star and not cron._nearest and cron._dow_star and not cron._nth:
            return f"never matches: {_dom_words(cron)} never occurs in {months}"
        return f"never matches: no day satisfies both day fields in {months}"
    return None


def _dom_words(cron: _Cron) -> str:
    days = sorted(cron._dom, key=lambda d: 32 if d == "l" else d)
    words = ["the last day" if d == "l" else str(d) for d in days]
    return ("day " if len(words) == 1 else "days ") + _or_list(words)


def _month_list(months: list[int]) -> str:
    return "any month" if len(months) == 12 else _or_list([_MONTH_NAMES[m] for m in months])


def _or_list(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


@functools.lru_cache(maxsize=1024)
def _compiled(expr: str) -> _Cron:
    """The expression parsed by croniter and compiled for stepping."""
    if not isinstance(expr, str):
        raise ScheduleError("cron", "must be a string")
    if len(expr) > CRON_EXPR_CHARS_MAX:
        raise ScheduleError("cron", f"longer than {CRON_EXPR_CHARS_MAX} characters")
    stripped = expr.strip()
    if stripped.startswith("@"):
        if stripped not in _MACROS:
            raise ScheduleError("cron", f"unknown macro {stripped!r}; use one of {sorted(_MACROS)}")
        stripped = _MACROS[stripped]
    fields = stripped.split()
    if len(fields) != _CRON_FIELDS:
        raise ScheduleError(
            "cron",
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}",
        )
    if any(_NONDETERMINISTIC.search(f) for f in fields):
        raise ScheduleError("cron", "random (R) and hashed (H) fields are not supported")
    try:
        template = croniter(" ".join(fields), 0.0)
    except (CroniterError, TypeError, ValueError, KeyError, IndexError) as e:
        # croniter signals bad syntax with several exception types.
        raise ScheduleError("cron", f"invalid cron expression: {e}") from e
    return _Cron(template)


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


def _offset_s(zone: zoneinfo.ZoneInfo, utc_s: int) -> int:
    """The zone's UTC offset in seconds at the UTC instant ``utc_s``."""
    local = (_EPOCH_UTC + dt.timedelta(seconds=utc_s)).astimezone(zone)
    return int(local.utcoffset().total_seconds())


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


def _local_to_utc_s(zone: zoneinfo.ZoneInfo, local_s: int) -> int:
    """Map a naive wall-clock second to UTC by the gap/overlap rules above."""
    naive = _EPOCH_NAIVE + dt.timedelta(seconds=local_s)
    before_s = int(naive.replace(tzinfo=zone).utcoffset().total_seconds())
    utc_s = local_s - before_s  # fold=0: the first occurrence when ambiguous.
    if _offset_s(zone, utc_s) == before_s:
        return utc_s
    # The wall time does not exist: it lies in a gap between the instant it
    # would have under the offset after the transition and the one under the
    # offset before it; the transition instant is the first one after the gap.
    after_s = int(naive.replace(tzinfo=zone, fold=1).utcoffset().total_seconds())
    assert after_s != before_s
    return _first_change_s(zone, local_s - after_s, utc_s)


def _first_local_start_s(zone: zoneinfo.ZoneInfo, after_s: int) -> int:
    """A naive wall-clock second to start croniter from for occurrences > after_s.

    Every local time <= the returned one maps to UTC <= after_s. Normally it
    is the wall clock at after_s. When after_s lies in the second pass of a
    fall-back overlap, the wall times up to the end of the overlap map to
    their first pass (before after_s), so start just before the overlap ends.
    """
    local = (_EPOCH_UTC + dt.timedelta(seconds=after_s)).astimezone(zone)
    now_offset_s = int(local.utcoffset().total_seconds())
    if not local.fold:
        return after_s + now_offset_s
    first_offset_s = int(local.replace(fold=0).utcoffset().total_seconds())
    overlap_s = first_offset_s - now_offset_s
    assert overlap_s > 0
    transition_s = _first_change_s(zone, after_s - overlap_s, after_s)
    return transition_s + first_offset_s - 1


def _next_local_s(cron: _Cron, start_local_s: int) -> int | None:
    """The first naive wall-clock occurrence strictly after start_local_s."""
    return cron.next_s(start_local_s)


def next_cron_ms(expr: str, timezone: str, after_ms: int) -> int | None:
    """The first occurrence strictly after ``after_ms``, in UTC ms, or None.

    None means no occurrence within CRON_SEARCH_MONTHS_MAX months (impossible
    for an expression that passed validate_cron, short of year 9999).
    Raises ScheduleError for an invalid expression or zone. Results are whole
    seconds (cron has minute granularity; transitions are whole seconds).
    """
    assert isinstance(after_ms, int) and not isinstance(after_ms, bool)
    cron = _compiled(expr)
    zone = _zone(timezone)
    after_s = after_ms // 1000  # t_s * 1000 > after_ms  <=>  t_s > floor(after_ms / 1000)
    if timezone in _UTC_KEYS:
        local_s = _next_local_s(cron, after_s)
        return None if local_s is None else local_s * 1000
    try:
        return _next_zoned_ms(cron, zone, after_s)
    except OverflowError:
        # Wall-clock arithmetic past datetime's range (years 1 and 9999).
        return None


def _next_zoned_ms(cron: _Cron, zone: zoneinfo.ZoneInfo, after_s: int) -> int | None:
    found = _next_zoned_s(cron, zone, after_s)
    return None if found is None else found[0] * 1000


def _next_zoned_s(cron: _Cron, zone: zoneinfo.ZoneInfo, after_s: int) -> tuple[int, int] | None:
    """(UTC second, naive local second) of the first occurrence after after_s."""
    local_s = _first_local_start_s(zone, after_s)
    for _ in range(CRON_STEPS_MAX):
        next_local_s = _next_local_s(cron, local_s)
        if next_local_s is None:
            return None
        local_s = next_local_s
        utc_s = _local_to_utc_s(zone, local_s)
        if utc_s > after_s:
            return utc_s, local_s
    return None


def cron_times_ms(expr: str, timezone: str, after_ms: int, count: int) -> list[int]:
    """Up to ``count`` occurrences strictly after ``after_ms``, strictly increasing.

    Shorter than ``count`` only when next_cron_ms runs out (None). The same
    times as ``count`` chained next_cron_ms calls: the local-to-UTC map is
    monotone, so the occurrence after one found at local time L is the next
    local match after L, unless that maps onto the same instant (a gap); then
    the search starts afresh from the instant, as next_cron_ms does.
    """
    assert 0 <= count <= CRON_TIMES_COUNT_MAX
    cron = _compiled(expr)
    zone = _zone(timezone)
    times_ms: list[int] = []
    if timezone in _UTC_KEYS:
        local_s: int | None = after_ms // 1000
        for _ in range(count):
            local_s = cron.next_s(local_s)
            if local_s is None:
                break
            times_ms.append(local_s * 1000)
        return times_ms
    at_s = after_ms // 1000
    local_s = None
    try:
        for _ in range(count):
            found = None
            if local_s is not None:
                next_local_s = cron.next_s(local_s)
                if next_local_s is None:
                    break
                utc_s = _local_to_utc_s(zone, next_local_s)
                if utc_s > at_s:
                    found = utc_s, next_local_s
            if found is None:
                found = _next_zoned_s(cron, zone, at_s)
                if found is None:
                    break
            at_s, local_s = found
            times_ms.append(at_s * 1000)
    except OverflowError:
        pass  # wall-clock arithmetic past datetime's range, as in next_cron_ms
    return times_ms


def latest_cron_ms(expr: str, timezone: str, at_ms: int, since_ms: int) -> int | None:
    """The last occurrence in ``(since_ms, at_ms]``, in UTC ms, or None.

    Exactly the largest value next_cron_ms can give that is <= at_ms, found
    by bisection over whole seconds (occurrences are whole seconds, and
    next_cron_ms of an instant depends only on its whole second): at most
    _BISECT_STEPS_MAX steps however long the range, each one bounded. The
    range is first narrowed by looking back from at_ms over spans that grow
    fourfold from a minute, so a job with many missed occurrences (the
    common catch-up) takes a handful of steps, not one per halving of its
    whole life.
    """
    assert isinstance(at_ms, int) and isinstance(since_ms, int)
    first_ms = None
    span_ms = 60_000
    for _ in range(_GALLOP_STEPS_MAX):
        if at_ms - span_ms <= since_ms:
            break
        found = next_cron_ms(expr, timezone, at_ms - span_ms)
        if found is not None and found <= at_ms:
            first_ms = found  # an occurrence in (at_ms - span_ms, at_ms]
            break
        span_ms *= 4
    if first_ms is None:
        first_ms = next_cron_ms(expr, timezone, since_ms)
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
        found = next_cron_ms(expr, timezone, mid_s * 1000)
        if found is not None and found <= at_ms:
            lo_s = mid_s
        else:
            hi_s = mid_s
    else:
        raise AssertionError("bisection did not converge")
    latest_ms = next_cron_ms(expr, timezone, lo_s * 1000)
    assert latest_ms is not None and since_ms < latest_ms <= at_ms
    return latest_ms


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
