"""When does a schedule fire? Pure functions over integer UNIX milliseconds.

Two kinds of repeating schedule live here (one-off ``at`` needs no helper):

- ``cron``: a 5-field expression (minute hour day-of-month month day-of-week,
  as croniter understands them) or one macro, evaluated on the *wall clock* of
  an IANA time zone. Each local occurrence is then mapped to UTC:

  * a local time inside a spring-forward gap runs at the first instant after
    the gap (the transition instant itself);
  * a local time that occurs twice (fall-back) runs once, at its first
    occurrence (``fold=0``);
  * several local times that map onto one UTC instant (``*/15`` inside a gap)
    produce that instant once.

  The local-to-UTC map is monotone non-decreasing, so walking local
  occurrences in order and dropping repeats yields strictly increasing UTC
  times. croniter only ever sees naive datetimes, because its own DST handling
  is not what API.md specifies.

- ``every_s``: the grid ``anchor + k * every_s``, integer arithmetic only.

Nothing here reads the clock, touches files (beyond zoneinfo loading tz data)
or uses global random; the croniter ``R`` (random) and ``H`` (hashed) forms
are rejected because replicas must agree on every occurrence.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import re
import zoneinfo

from croniter import CroniterError, croniter

__all__ = [
    "ScheduleError",
    "cron_times_ms",
    "next_cron_ms",
    "next_every_ms",
    "validate_cron",
]

CRON_EXPR_CHARS_MAX = 200
TIMEZONE_CHARS_MAX = 64
CRON_TIMES_COUNT_MAX = 1000
# The Gregorian calendar (weekdays included) repeats every 400 years, so an
# expression with no match in 401 years never matches. croniter jumps month by
# month, so even that worst case costs only milliseconds.
CRON_SEARCH_YEARS_MAX = 401
# Each next_cron_ms call needs one croniter step in practice (see
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
# A valid expression is checked to fire at least once after this instant.
_VALIDATION_REFERENCE_S = 946_684_800  # 2000-01-01T00:00:00Z


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


@functools.lru_cache(maxsize=1024)
def _parsed(expr: str) -> croniter:
    """A parsed croniter template; callers must copy it before stepping it."""
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
        template = croniter(" ".join(fields), 0.0, max_years_between_matches=CRON_SEARCH_YEARS_MAX)
    except (CroniterError, TypeError, ValueError, KeyError, IndexError) as e:
        # croniter signals bad syntax with several exception types.
        raise ScheduleError("cron", f"invalid cron expression: {e}") from e
    return template


def validate_cron(expr: str, timezone: str) -> None:
    """Raise ScheduleError unless ``expr`` in ``timezone`` is a usable schedule.

    Besides syntax, an expression that can never fire (``0 0 30 2 *``, Feb 30)
    is rejected here with loc='cron', so a stored job always has a next run
    (until year 9999).
    """
    _zone(timezone)
    template = _parsed(expr)
    if _next_local_s(template, _VALIDATION_REFERENCE_S) is None:
        raise ScheduleError("cron", "the expression never matches a date")


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


def _next_local_s(template: croniter, start_local_s: int) -> int | None:
    """The first naive wall-clock occurrence strictly after start_local_s."""
    # A shallow copy is enough: croniter copies its expanded fields before
    # each step, and only rebinding attributes (cur, tzinfo) happens on the
    # copy, so concurrent callers never share iteration state.
    it = copy.copy(template)
    try:
        return int(it.get_next(float, start_time=float(start_local_s)))
    except (CroniterError, OverflowError, ValueError):
        # No match within CRON_SEARCH_YEARS_MAX, or beyond datetime's year 9999.
        return None


def next_cron_ms(expr: str, timezone: str, after_ms: int) -> int | None:
    """The first occurrence strictly after ``after_ms``, in UTC ms, or None.

    None means no occurrence within CRON_SEARCH_YEARS_MAX years (impossible
    for an expression that passed validate_cron, short of year 9999).
    Raises ScheduleError for an invalid expression or zone. Results are whole
    seconds (cron has minute granularity; transitions are whole seconds).
    """
    assert isinstance(after_ms, int) and not isinstance(after_ms, bool)
    template = _parsed(expr)
    zone = _zone(timezone)
    after_s = after_ms // 1000  # t_s * 1000 > after_ms  <=>  t_s > floor(after_ms / 1000)
    if timezone in _UTC_KEYS:
        local_s = _next_local_s(template, after_s)
        return None if local_s is None else local_s * 1000
    try:
        return _next_zoned_ms(template, zone, after_s)
    except OverflowError:
        # Wall-clock arithmetic past datetime's range (years 1 and 9999).
        return None


def _next_zoned_ms(template: croniter, zone: zoneinfo.ZoneInfo, after_s: int) -> int | None:
    local_s = _first_local_start_s(zone, after_s)
    for _ in range(CRON_STEPS_MAX):
        next_local_s = _next_local_s(template, local_s)
        if next_local_s is None:
            return None
        local_s = next_local_s
        utc_s = _local_to_utc_s(zone, local_s)
        if utc_s > after_s:
            return utc_s * 1000
    return None


def cron_times_ms(expr: str, timezone: str, after_ms: int, count: int) -> list[int]:
    """Up to ``count`` occurrences strictly after ``after_ms``, strictly increasing.

    Shorter than ``count`` only when next_cron_ms runs out (None).
    """
    assert 0 <= count <= CRON_TIMES_COUNT_MAX
    times_ms: list[int] = []
    at_ms = after_ms
    for _ in range(count):
        next_ms = next_cron_ms(expr, timezone, at_ms)
        if next_ms is None:
            break
        assert next_ms > at_ms
        times_ms.append(next_ms)
        at_ms = next_ms
    return times_ms


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
