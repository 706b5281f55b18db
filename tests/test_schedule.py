"""Tests for tempo.schedule: DST rules, macros, bad input, every_s grids."""

from __future__ import annotations

import calendar
import datetime as dt
import itertools
import zoneinfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo.schedule import (
    CRON_EXPR_CHARS_MAX,
    CRON_SEARCH_MONTHS_MAX,
    CronRule,
    ScheduleError,
    next_every_ms,
    validate_cron,
)


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()) * 1000


def iso(t_ms: int) -> str:
    return dt.datetime.fromtimestamp(t_ms // 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def times(expr: str, timezone: str, after: str, count: int) -> list[str]:
    return [iso(t) for t in CronRule(expr, timezone).times_ms(ms(after), count)]


def test_api_example_berlin_spring_forward():
    assert times("30 2 * * *", "Europe/Berlin", "2027-03-27T00:00:00Z", 5) == [
        "2027-03-27T01:30:00Z",
        "2027-03-28T01:00:00Z",  # 02:30 does not exist: 03:00 CEST, the end of the gap.
        "2027-03-29T00:30:00Z",
        "2027-03-30T00:30:00Z",
        "2027-03-31T00:30:00Z",
    ]


# (expr, zone, after, expected UTC times) across the 2027 transitions.
DST_CASES = [
    # Europe/Berlin spring forward: 2027-03-28 01:00Z, 02:00 CET -> 03:00 CEST.
    (
        "0 * * * *",
        "Europe/Berlin",
        "2027-03-27T23:30:00Z",
        # 02:00 (gap) and 03:00 CEST both map to 01:00Z and run once.
        ["2027-03-28T00:00:00Z", "2027-03-28T01:00:00Z", "2027-03-28T02:00:00Z"],
    ),
    (
        "*/15 * * * *",
        "Europe/Berlin",
        "2027-03-28T00:30:00Z",
        ["2027-03-28T00:45:00Z", "2027-03-28T01:00:00Z", "2027-03-28T01:15:00Z"],
    ),
    # Europe/Berlin fall back: 2027-10-31 01:00Z, 03:00 CEST -> 02:00 CET.
    (
        "30 2 * * *",
        "Europe/Berlin",
        "2027-10-30T00:00:00Z",
        ["2027-10-30T00:30:00Z", "2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"],
    ),
    (
        "0 * * * *",
        "Europe/Berlin",
        "2027-10-30T22:30:00Z",
        # 02:00 runs once, at its first (CEST) occurrence; 03:00 CET is 02:00Z.
        ["2027-10-30T23:00:00Z", "2027-10-31T00:00:00Z", "2027-10-31T02:00:00Z"],
    ),
    (
        "*/15 * * * *",
        "Europe/Berlin",
        "2027-10-31T00:30:00Z",
        ["2027-10-31T00:45:00Z", "2027-10-31T02:00:00Z", "2027-10-31T02:15:00Z"],
    ),
    # `after` inside the second pass of the overlap (02:30 CET).
    ("*/15 * * * *", "Europe/Berlin", "2027-10-31T01:30:00Z", ["2027-10-31T02:00:00Z"]),
    ("30 2 * * *", "Europe/Berlin", "2027-10-31T01:30:00Z", ["2027-11-01T01:30:00Z"]),
    # America/New_York spring forward: 2027-03-14 07:00Z, 02:00 EST -> 03:00 EDT.
    (
        "30 2 * * *",
        "America/New_York",
        "2027-03-13T00:00:00Z",
        ["2027-03-13T07:30:00Z", "2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2027-03-14T05:30:00Z",
        ["2027-03-14T06:00:00Z", "2027-03-14T07:00:00Z", "2027-03-14T08:00:00Z"],
    ),
    (
        "*/15 * * * *",
        "America/New_York",
        "2027-03-14T06:30:00Z",
        ["2027-03-14T06:45:00Z", "2027-03-14T07:00:00Z", "2027-03-14T07:15:00Z"],
    ),
    # America/New_York fall back: 2027-11-07 06:00Z, 02:00 EDT -> 01:00 EST.
    (
        "30 2 * * *",
        "America/New_York",
        "2027-11-06T00:00:00Z",
        # 02:30 is not ambiguous in New York (the overlap is 01:00-02:00).
        ["2027-11-06T06:30:00Z", "2027-11-07T07:30:00Z", "2027-11-08T07:30:00Z"],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        "2027-11-06T12:00:00Z",
        ["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2027-11-07T04:30:00Z",
        ["2027-11-07T05:00:00Z", "2027-11-07T07:00:00Z", "2027-11-07T08:00:00Z"],
    ),
    (
        "*/15 * * * *",
        "America/New_York",
        "2027-11-07T05:30:00Z",
        ["2027-11-07T05:45:00Z", "2027-11-07T07:00:00Z", "2027-11-07T07:15:00Z"],
    ),
]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), DST_CASES)
def test_dst_transitions(expr, zone, after, expected):
    assert times(expr, zone, after, len(expected)) == expected
    assert iso(CronRule(expr, zone).next_ms(ms(after))) == expected[0]


def test_gap_collapses_many_local_times_onto_one_instant():
    # Every minute of 02:xx is in the gap and maps to 01:00Z; it runs once.
    got = times("* 2 * * *", "Europe/Berlin", "2027-03-28T00:00:00Z", 2)
    assert got == ["2027-03-28T01:00:00Z", "2027-03-29T00:00:00Z"]


@pytest.mark.parametrize(
    ("expr", "zone", "expected"),
    [
        ("@hourly", "UTC", "2027-01-01T01:00:00Z"),
        ("@daily", "Europe/Berlin", "2027-01-01T23:00:00Z"),
        ("@midnight", "UTC", "2027-01-02T00:00:00Z"),
        ("@weekly", "UTC", "2027-01-03T00:00:00Z"),  # 2027-01-01 is a Friday.
        ("@monthly", "UTC", "2027-02-01T00:00:00Z"),
        ("@yearly", "UTC", "2028-01-01T00:00:00Z"),
        ("@annually", "America/New_York", "2027-01-01T05:00:00Z"),
    ],
)
def test_macros(expr, zone, expected):
    validate_cron(expr, zone)
    assert iso(CronRule(expr, zone).next_ms(ms("2027-01-01T00:00:00Z"))) == expected


def test_results_are_strictly_after_a_non_whole_second():
    after_ms = ms("2027-01-01T00:00:00Z") - 1
    assert CronRule("0 0 * * *", "UTC").next_ms(after_ms) == after_ms + 1
    assert CronRule("0 0 * * *", "UTC").next_ms(after_ms + 1) == after_ms + 1 + 86_400_000


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "   ",
        "garbage",
        "* * * *",
        "* * * * * *",  # a seconds field
        "* * * * * * *",  # a year field
        "61 * * * *",
        "* 24 * * *",
        "* * 32 * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 8",
        "*/0 * * * *",
        "-1 * * * *",
        "1.5 * * * *",
        "@every 5m",
        "@HOURLY",
        "@daily 0",
        "R * * * *",  # random: replicas would disagree
        "H * * * *",
        "0 H(0-3) * * *",
        "0 0 30 2 *",  # never matches
        "0 0 31 4,6,9,11 *",
        "* " * (CRON_EXPR_CHARS_MAX // 2) + "*",
    ],
)
def test_invalid_cron(expr):
    with pytest.raises(ScheduleError) as info:
        validate_cron(expr, "UTC")
    assert info.value.loc == "cron"
    assert info.value.msg


def test_invalid_cron_raises_in_next_too():
    with pytest.raises(ScheduleError):
        CronRule("* * * * * *", "UTC").next_ms(0)


@pytest.mark.parametrize(
    "timezone",
    [
        "",
        "Mars/Olympus_Mons",
        "../etc/passwd",
        "../../../../etc/localtime",
        "/etc/localtime",
        "America",  # a directory
        "zone.tab",  # a data file, not a zone
        "localtime",
        "posixrules",
        "Europe/Berlin ",
        "Europe//Berlin",
        "a\0b",
        "x" * 65,
    ],
)
def test_invalid_timezone(timezone):
    with pytest.raises(ScheduleError) as info:
        validate_cron("0 * * * *", timezone)
    assert info.value.loc == "timezone"
    with pytest.raises(ScheduleError):
        CronRule("0 * * * *", timezone).next_ms(0)


def test_valid_names_and_ranges():
    for expr in ["0 9 * * mon-fri", "0 0 1 jan *", "0 0 29 2 *", "0 0 * * 5-7"]:
        validate_cron(expr, "UTC")
    assert iso(CronRule("0 0 29 2 *", "UTC").next_ms(ms("2027-01-01T00:00:00Z"))) == (
        "2028-02-29T00:00:00Z"
    )


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
def test_edges_of_datetime_range_give_none(zone):
    assert CronRule("0 0 1 1 *", zone).next_ms(ms("9999-06-01T00:00:00Z")) is None
    assert CronRule("*/15 * * * *", zone).next_ms(ms("9999-12-31T23:59:00Z")) is None
    first_ms = CronRule("*/15 * * * *", zone).next_ms(ms("0001-01-01T00:00:00Z"))
    assert first_ms is None or first_ms > ms("0001-01-01T00:00:00Z")


def test_never_beyond_year_9999_is_none():
    assert CronRule("0 0 1 1 *", "UTC").times_ms(ms("9998-06-01T00:00:00Z"), 5) == [
        ms("9999-01-01T00:00:00Z")
    ]


# every_s ----------------------------------------------------------------------


def test_every_created_at_grid():
    # Without start_at the anchor is created_at and k >= 1.
    assert next_every_ms(300, 1_000, 1_000, include_anchor=False) == 301_000
    assert next_every_ms(300, 1_000, 300_999, include_anchor=False) == 301_000
    assert next_every_ms(300, 1_000, 301_000, include_anchor=False) == 601_000
    assert next_every_ms(300, 1_000, 0, include_anchor=False) == 301_000
    # strictly_after=False: a grid point equal to after_ms counts.
    assert next_every_ms(300, 1_000, 301_000, include_anchor=False, strictly_after=False) == 301_000
    assert next_every_ms(300, 1_000, 1_000, include_anchor=False, strictly_after=False) == 301_000


def test_every_start_at_grid():
    start_ms = 10_000
    # A future start_at is itself the first run.
    assert next_every_ms(60, start_ms, 0, include_anchor=True, strictly_after=False) == start_ms
    assert next_every_ms(60, start_ms, start_ms, include_anchor=True, strictly_after=False) == (
        start_ms
    )
    assert next_every_ms(60, start_ms, start_ms, include_anchor=True) == start_ms + 60_000
    # A past start_at: the earliest grid point not in the past, no catch-up.
    now_ms = start_ms + 3 * 60_000 + 1
    assert next_every_ms(60, start_ms, now_ms, include_anchor=True, strictly_after=False) == (
        start_ms + 4 * 60_000
    )
    assert next_every_ms(60, start_ms, now_ms - 1, include_anchor=True, strictly_after=False) == (
        start_ms + 3 * 60_000
    )
    assert next_every_ms(60, start_ms, now_ms - 1, include_anchor=True) == start_ms + 4 * 60_000


@given(
    every_s=st.integers(1, 10**7),
    anchor_ms=st.integers(-(10**13), 10**13),
    after_ms=st.integers(-(10**13), 10**13),
    include_anchor=st.booleans(),
    strictly_after=st.booleans(),
)
def test_every_is_the_smallest_grid_point(
    every_s, anchor_ms, after_ms, include_anchor, strictly_after
):
    got = next_every_ms(
        every_s, anchor_ms, after_ms, include_anchor=include_anchor, strictly_after=strictly_after
    )
    period_ms = every_s * 1000
    k, rest = divmod(got - anchor_ms, period_ms)
    assert rest == 0
    assert k >= (0 if include_anchor else 1)
    assert got > after_ms if strictly_after else got >= after_ms
    # The previous grid point is either before the allowed k or not past after_ms.
    prev = got - period_ms
    assert k - 1 < (0 if include_anchor else 1) or not (
        prev > after_ms if strictly_after else prev >= after_ms
    )


def test_every_rejects_bad_period():
    with pytest.raises(AssertionError):
        next_every_ms(0, 0, 0, include_anchor=False)


# Properties -------------------------------------------------------------------

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute DST shift
    "Asia/Kathmandu",  # +05:45
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/Santiago",  # transitions at midnight
    "Asia/Tehran",
    "Pacific/Apia",  # skipped 2011-12-30 entirely
]
EXPRS = [
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "*/7 1-3 * * *",
    "0,30 0-4 * * *",
    "45 23 * * *",
    "* 2 * * *",
    "0 0 * * *",
    "15 3 * * 0",
]


def _field_matches(field: str, value: int) -> bool:
    """A tiny cron field matcher (*, */n, a-b, a-b/n, lists) as an oracle."""
    for part in field.split(","):
        spec, _, step = part.partition("/")
        if spec == "*":
            lo, hi = 0, 59
        elif "-" in spec:
            lo, hi = (int(x) for x in spec.split("-"))
        else:
            lo = hi = int(spec)
        if lo <= value <= hi and (value - lo) % int(step or 1) == 0:
            return True
    return False


def _matches(expr: str, local: dt.datetime) -> bool:
    minute, hour, dom, month, dow = expr.split()
    assert (dom, month) == ("*", "*")
    return (
        _field_matches(minute, local.minute)
        and _field_matches(hour, local.hour)
        and _field_matches(dow, (local.weekday() + 1) % 7)
    )


def _oracle(expr: str, timezone: str, after_s: int, window_s: int) -> list[int]:
    """Fire times in (after_s, after_s + window_s], minute by minute in UTC.

    A UTC minute fires if its wall time matches on its first pass (fold=0),
    or if it ends a spring-forward gap containing a matching wall time.
    """
    zone = zoneinfo.ZoneInfo(timezone)
    fired = []
    start_s = (after_s // 60 + 1) * 60
    for utc_s in range(start_s, after_s + window_s + 1, 60):
        local = dt.datetime.fromtimestamp(utc_s, zone)
        before = dt.datetime.fromtimestamp(utc_s - 1, zone)
        hit = not local.fold and _matches(expr, local.replace(tzinfo=None))
        jump_s = int((local.utcoffset() - before.utcoffset()).total_seconds())
        if jump_s > 0:  # The wall clock skipped (before, local): the gap.
            gap = local.replace(tzinfo=None) - dt.timedelta(seconds=jump_s)
            while gap < local.replace(tzinfo=None) and not hit:
                hit = _matches(expr, gap)
                gap += dt.timedelta(minutes=1)
        if hit:
            fired.append(utc_s * 1000)
    return fired


# (zone, instant of one of its transitions): samples start shortly before one.
_TRANSITIONS = [
    (zone, ms(at))
    for zone, at in [
        ("Europe/Berlin", "2027-03-28T01:00:00Z"),
        ("Europe/Berlin", "2027-10-31T01:00:00Z"),
        ("America/New_York", "2027-03-14T07:00:00Z"),
        ("America/New_York", "2027-11-07T06:00:00Z"),
        ("Australia/Lord_Howe", "2027-04-03T15:00:00Z"),
        ("Australia/Lord_Howe", "2027-10-02T15:30:00Z"),
        ("Pacific/Apia", "2011-12-30T10:00:00Z"),
        ("America/Santiago", "2022-09-11T04:00:00Z"),
        ("America/Santiago", "2023-04-02T03:00:00Z"),
        ("Asia/Tehran", "2022-03-21T20:30:00Z"),
        ("Asia/Tehran", "2022-09-21T19:30:00Z"),
        ("Pacific/Chatham", "2027-04-03T14:00:00Z"),
        ("UTC", "2027-01-01T00:00:00Z"),
        ("Asia/Kathmandu", "2027-01-01T00:00:00Z"),
    ]
]


def test_transition_table_is_real():
    for zone, at_ms in _TRANSITIONS:
        if zone in ("UTC", "Asia/Kathmandu"):
            continue
        z = zoneinfo.ZoneInfo(zone)
        before = dt.datetime.fromtimestamp(at_ms // 1000 - 1, z).utcoffset()
        assert before != dt.datetime.fromtimestamp(at_ms // 1000, z).utcoffset(), zone


@settings(max_examples=150, deadline=None)
@given(
    transition=st.sampled_from(_TRANSITIONS),
    expr=st.sampled_from(EXPRS),
    offset_ms=st.integers(-7 * 3_600_000, 3_600_000),
)
def test_matches_minute_by_minute_oracle(transition, expr, offset_ms):
    timezone, at_ms = transition
    after_ms = at_ms + offset_ms
    window_s = 8 * 3600
    expected = _oracle(expr, timezone, after_ms // 1000, window_s)
    got = CronRule(expr, timezone).times_ms(after_ms, 600)
    assert [t for t in got if t <= after_ms + window_s * 1000] == expected


@settings(max_examples=200, deadline=None)
@given(
    timezone=st.sampled_from(ZONES),
    expr=st.sampled_from([*EXPRS, "@daily", "@weekly", "@monthly", "0 0 28-31 * *", "0 9 * * 1-5"]),
    after_ms=st.integers(0, 4_102_444_800_000),  # 1970 .. 2100
    count=st.integers(1, 30),
)
def test_strictly_increasing_and_after(timezone, expr, after_ms, count):
    got = CronRule(expr, timezone).times_ms(after_ms, count)
    assert len(got) == count
    assert all(t % 1000 == 0 for t in got)
    assert all(b > a for a, b in zip([after_ms, *got], got, strict=False))
    assert CronRule(expr, timezone).next_ms(after_ms) == got[0]


# Bounded cost ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        # With both day fields restricted cron fires when either matches, so
        # these would run on every weekday of those months: the day-of-month
        # field is dead, which is a mistake worth naming.
        ("0 0 31 4,6,9,11 1-5", ["31", "April", "June", "September", "November"]),
        ("0 0 30,31 2 mon", ["30", "31", "February"]),
        ("0 0 31 4,6,9,11 *", ["31", "April"]),
        ("0 0 30 2 *", ["30", "February"]),
    ],
)
def test_a_day_of_month_that_never_occurs_is_rejected_with_the_reason(expr, words):
    with pytest.raises(ScheduleError) as info:
        validate_cron(expr, "UTC")
    assert info.value.loc == "cron"
    assert all(word in info.value.msg for word in words), info.value.msg


def test_search_bound_covers_the_longest_gap_of_a_month_type():
    # A month's matching days depend only on (month, length, first weekday);
    # over the 400-year cycle no such type is absent for longer than this.
    seen: dict[tuple[int, int, int], list[int]] = {}
    for year in range(2000, 2800):
        for month in range(1, 13):
            first, days = calendar.monthrange(year, month)
            seen.setdefault((month, days, first), []).append(year * 12 + month)
    gap_max = max(b - a for months in seen.values() for a, b in itertools.pairwise(months))
    assert gap_max + 1 == CRON_SEARCH_MONTHS_MAX


def _field(draw, lo: int, hi: int, names: list[str] | None = None) -> str:
    """One crontab field over [lo, hi]: *, */n, a, a-b, a-b/n, lists, names."""
    def element() -> str:
        kind = draw(st.sampled_from(["value", "range", "step", "star_step", "name"]))
        a = draw(st.integers(lo, hi))
        if kind == "name" and names:
            return draw(st.sampled_from(names))
        if kind == "range" or kind == "step":
            b = draw(st.integers(a, hi))
            step = f"/{draw(st.integers(1, hi - lo + 1))}" if kind == "step" else ""
            return f"{a}-{b}{step}"
        if kind == "star_step":
            return f"*/{draw(st.integers(1, hi - lo + 1))}"
        return str(a)

    if draw(st.integers(0, 3)) == 0:
        return "*"
    return ",".join(element() for _ in range(draw(st.integers(1, 3))))


@st.composite
def cron_exprs(draw) -> str:
    minute = _field(draw, 0, 59)
    hour = _field(draw, 0, 23)
    dom = draw(st.sampled_from(["*", _field(draw, 1, 31)]))
    month = _field(draw, 1, 12, ["jan", "feb", "apr", "jun", "sep", "nov", "dec"])
    dow = draw(st.sampled_from(["*", _field(draw, 0, 7, ["sun", "mon", "fri", "sat"])]))
    return f"{minute} {hour} {dom} {month} {dow}"


@settings(max_examples=300, deadline=None)
@given(
    expr=cron_exprs(),
    transition=st.sampled_from(_TRANSITIONS),
    offset_ms=st.integers(-40 * 86_400_000, 3_600_000),
)
def test_times_in_a_row_are_chained_next_times(expr, transition, offset_ms):
    """CronRule.times_ms walks local times for speed; it must give exactly what
    next_ms gives step by step, across every kind of transition."""
    try:
        validate_cron(expr, "UTC")
    except ScheduleError:
        return
    timezone, at_ms = transition
    after_ms = at_ms + offset_ms
    rule = CronRule(expr, timezone)
    got = rule.times_ms(after_ms, 40)
    chained, last_ms = [], after_ms
    for _ in range(40):
        last_ms = rule.next_ms(last_ms)
        if last_ms is None:
            break
        chained.append(last_ms)
    assert got == chained


@settings(max_examples=300, deadline=None)
@given(
    expr=cron_exprs(),
    transition=st.sampled_from(_TRANSITIONS),
    offset_ms=st.integers(-3 * 86_400_000, 3 * 86_400_000),
    window_ms=st.integers(0, 2 * 86_400_000),
)
def test_latest_is_the_last_of_the_times_before(expr, transition, offset_ms, window_ms):
    try:
        validate_cron(expr, "UTC")
    except ScheduleError:
        return
    timezone, at_ms = transition
    at_ms += offset_ms
    since_ms = at_ms - window_ms
    times = CronRule(expr, timezone).times_ms(since_ms, 1000)
    before = [t for t in times if t <= at_ms]
    if len(before) == len(times) == 1000:
        return  # more than 1,000 in the window: the list does not reach at_ms
    assert CronRule(expr, timezone).latest_ms(at_ms, since_ms) == (before[-1] if before else None)
