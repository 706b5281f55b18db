"""A cron schedule's DST policy (docs/semantics.md "Daylight-saving policy"):
`gap` shift | skip, `repeat` first | last | both, and the mark each time gets."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo.schedule import CronRule


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()) * 1000


def iso(t_ms: int) -> str:
    return dt.datetime.fromtimestamp(t_ms // 1000, dt.UTC).strftime("%Y-%m-%dT%H:%MZ")


def occurrences(expr, zone, after, count, gap="shift", repeat="first"):
    return [(iso(t), mark) for t, mark in CronRule(expr, zone, gap=gap, repeat=repeat).occurrences_ms(ms(after), count)]


N = None
CASES = [
    # Europe/Berlin 2027: forward 28 March 01:00Z (02:00 CET -> 03:00 CEST),
    # back 31 October 01:00Z (03:00 CEST -> 02:00 CET).
    ("30 2 * * *", "Europe/Berlin", "2027-03-27T00:00Z", "shift", "first",
     [("2027-03-27T01:30Z", N), ("2027-03-28T01:00Z", "gap_shifted"), ("2027-03-29T00:30Z", N)]),
    ("30 2 * * *", "Europe/Berlin", "2027-03-27T00:00Z", "skip", "first",
     [("2027-03-27T01:30Z", N), ("2027-03-29T00:30Z", N), ("2027-03-30T00:30Z", N)]),
    # 02:00 is in the gap, but 03:00 CEST (01:00Z) is an occurrence of its own.
    ("0 * * * *", "Europe/Berlin", "2027-03-27T23:30Z", "shift", "first",
     [("2027-03-28T00:00Z", N), ("2027-03-28T01:00Z", N), ("2027-03-28T02:00Z", N)]),
    ("0 * * * *", "Europe/Berlin", "2027-03-27T23:30Z", "skip", "first",
     [("2027-03-28T00:00Z", N), ("2027-03-28T01:00Z", N), ("2027-03-28T02:00Z", N)]),
    ("*/15 2 * * *", "Europe/Berlin", "2027-03-28T00:00Z", "shift", "both",
     [("2027-03-28T01:00Z", "gap_shifted"), ("2027-03-29T00:00Z", N)]),
    ("*/15 2 * * *", "Europe/Berlin", "2027-03-28T00:00Z", "skip", "both",
     [("2027-03-29T00:00Z", N), ("2027-03-29T00:15Z", N)]),
    ("30 2 * * *", "Europe/Berlin", "2027-10-30T00:00Z", "shift", "first",
     [("2027-10-30T00:30Z", N), ("2027-10-31T00:30Z", "repeat_first"), ("2027-11-01T01:30Z", N)]),
    ("30 2 * * *", "Europe/Berlin", "2027-10-30T00:00Z", "shift", "last",
     [("2027-10-30T00:30Z", N), ("2027-10-31T01:30Z", "repeat_second"), ("2027-11-01T01:30Z", N)]),
    ("30 2 * * *", "Europe/Berlin", "2027-10-30T00:00Z", "shift", "both",
     [("2027-10-30T00:30Z", N), ("2027-10-31T00:30Z", "repeat_first"),
      ("2027-10-31T01:30Z", "repeat_second"), ("2027-11-01T01:30Z", N)]),
    # Both passes of two repeated times come in the order of the instants.
    ("*/30 2 * * *", "Europe/Berlin", "2027-10-30T23:00Z", "shift", "both",
     [("2027-10-31T00:00Z", "repeat_first"), ("2027-10-31T00:30Z", "repeat_first"),
      ("2027-10-31T01:00Z", "repeat_second"), ("2027-10-31T01:30Z", "repeat_second"),
      ("2027-11-01T01:00Z", N)]),
    # From inside the first pass: "last" still has both second passes ahead.
    ("*/30 2 * * *", "Europe/Berlin", "2027-10-31T00:15Z", "shift", "last",
     [("2027-10-31T01:00Z", "repeat_second"), ("2027-10-31T01:30Z", "repeat_second"),
      ("2027-11-01T01:00Z", N)]),
    # From inside the second pass: "first" has nothing left that day.
    ("*/30 2 * * *", "Europe/Berlin", "2027-10-31T01:15Z", "shift", "first",
     [("2027-11-01T01:00Z", N)]),
    ("*/30 2 * * *", "Europe/Berlin", "2027-10-31T01:15Z", "shift", "both",
     [("2027-10-31T01:30Z", "repeat_second"), ("2027-11-01T01:00Z", N)]),
    # America/New_York 2027: forward 14 March 07:00Z (02:00 EST -> 03:00 EDT),
    # back 7 November 06:00Z (02:00 EDT -> 01:00 EST).
    ("30 2 * * *", "America/New_York", "2027-03-13T00:00Z", "shift", "first",
     [("2027-03-13T07:30Z", N), ("2027-03-14T07:00Z", "gap_shifted"), ("2027-03-15T06:30Z", N)]),
    ("30 2 * * *", "America/New_York", "2027-03-13T00:00Z", "skip", "last",
     [("2027-03-13T07:30Z", N), ("2027-03-15T06:30Z", N), ("2027-03-16T06:30Z", N)]),
    ("30 1 * * *", "America/New_York", "2027-11-06T12:00Z", "shift", "first",
     [("2027-11-07T05:30Z", "repeat_first"), ("2027-11-08T06:30Z", N)]),
    ("30 1 * * *", "America/New_York", "2027-11-06T12:00Z", "shift", "last",
     [("2027-11-07T06:30Z", "repeat_second"), ("2027-11-08T06:30Z", N)]),
    ("30 1 * * *", "America/New_York", "2027-11-06T12:00Z", "skip", "both",
     [("2027-11-07T05:30Z", "repeat_first"), ("2027-11-07T06:30Z", "repeat_second"),
      ("2027-11-08T06:30Z", N)]),
    # Australia/Lord_Howe 2027, a half-hour shift: back 3 April 15:00Z
    # (02:00 +11 -> 01:30 +10:30), forward 2 October 15:30Z (02:00 +10:30 -> 02:30 +11).
    ("15 2 * * *", "Australia/Lord_Howe", "2027-10-01T12:00Z", "shift", "first",
     [("2027-10-01T15:45Z", N), ("2027-10-02T15:30Z", "gap_shifted"), ("2027-10-03T15:15Z", N)]),
    ("15 2 * * *", "Australia/Lord_Howe", "2027-10-01T12:00Z", "skip", "first",
     [("2027-10-01T15:45Z", N), ("2027-10-03T15:15Z", N), ("2027-10-04T15:15Z", N)]),
    ("45 1 * * *", "Australia/Lord_Howe", "2027-04-02T12:00Z", "shift", "first",
     [("2027-04-02T14:45Z", N), ("2027-04-03T14:45Z", "repeat_first"), ("2027-04-04T15:15Z", N)]),
    ("45 1 * * *", "Australia/Lord_Howe", "2027-04-02T12:00Z", "shift", "last",
     [("2027-04-02T14:45Z", N), ("2027-04-03T15:15Z", "repeat_second"), ("2027-04-04T15:15Z", N)]),
    ("45 1 * * *", "Australia/Lord_Howe", "2027-04-02T12:00Z", "shift", "both",
     [("2027-04-02T14:45Z", N), ("2027-04-03T14:45Z", "repeat_first"),
      ("2027-04-03T15:15Z", "repeat_second"), ("2027-04-04T15:15Z", N)]),
]


@pytest.mark.parametrize(("expr", "zone", "after", "gap", "repeat", "expected"), CASES)
def test_policy_on_transition_days(expr, zone, after, gap, repeat, expected):
    assert occurrences(expr, zone, after, len(expected), gap, repeat) == expected
    assert iso(CronRule(expr, zone, gap=gap, repeat=repeat).next_ms(ms(after))) == expected[0][0]


def test_the_transitions_are_where_the_cases_say():
    for zone, at in [
        ("Europe/Berlin", "2027-03-28T01:00Z"), ("Europe/Berlin", "2027-10-31T01:00Z"),
        ("America/New_York", "2027-03-14T07:00Z"), ("America/New_York", "2027-11-07T06:00Z"),
        ("Australia/Lord_Howe", "2027-04-03T15:00Z"), ("Australia/Lord_Howe", "2027-10-02T15:30Z"),
    ]:
        z = zoneinfo.ZoneInfo(zone)
        s = ms(at) // 1000
        assert dt.datetime.fromtimestamp(s - 1, z).utcoffset() != dt.datetime.fromtimestamp(s, z).utcoffset()


_TRANSITION_MS = [
    (zone, ms(at))
    for zone, at in [
        ("Europe/Berlin", "2027-03-28T01:00Z"), ("Europe/Berlin", "2027-10-31T01:00Z"),
        ("America/New_York", "2027-11-07T06:00Z"), ("Australia/Lord_Howe", "2027-04-03T15:00Z"),
        ("Australia/Lord_Howe", "2027-10-02T15:30Z"), ("Pacific/Chatham", "2027-04-03T14:00Z"),
        ("Europe/Dublin", "2027-10-31T01:00Z"), ("America/Santiago", "2023-04-02T03:00Z"),
        ("Pacific/Apia", "2011-12-30T10:00Z"),
    ]
]
EXPRS = ["* * * * *", "*/15 * * * *", "0 * * * *", "30 2 * * *", "*/7 1-3 * * *", "45 1 * * *", "0 0 * * *"]


@settings(max_examples=300, deadline=None)
@given(
    transition=st.sampled_from(_TRANSITION_MS),
    expr=st.sampled_from(EXPRS),
    offset_ms=st.integers(-6 * 3_600_000, 3_600_000),
    gap=st.sampled_from(["shift", "skip"]),
    repeat=st.sampled_from(["first", "last", "both"]),
)
def test_every_policy_chains_and_bisects_consistently(transition, expr, offset_ms, gap, repeat):
    """Strictly increasing, the same as chained next_ms calls, and each
    latest_ms the last of them before an instant."""
    zone, at_ms = transition
    after_ms = at_ms + offset_ms
    rule = CronRule(expr, zone, gap=gap, repeat=repeat)
    got = rule.times_ms(after_ms, 30)
    assert all(b > a for a, b in zip([after_ms, *got], got, strict=False))
    chained, last_ms = [], after_ms
    for _ in range(30):
        last_ms = rule.next_ms(last_ms)
        chained.append(last_ms)
    assert got == chained
    probe_ms = got[len(got) // 2] + 1
    assert rule.latest_ms(probe_ms, after_ms) == got[len(got) // 2]


@settings(max_examples=200, deadline=None)
@given(
    transition=st.sampled_from(_TRANSITION_MS),
    expr=st.sampled_from(EXPRS),
    offset_ms=st.integers(-6 * 3_600_000, 3_600_000),
)
def test_both_is_the_union_of_first_and_last(transition, expr, offset_ms):
    zone, at_ms = transition
    after_ms = at_ms + offset_ms
    for gap in ("shift", "skip"):
        first = CronRule(expr, zone, gap=gap, repeat="first").times_ms(after_ms, 40)
        last = CronRule(expr, zone, gap=gap, repeat="last").times_ms(after_ms, 40)
        both = CronRule(expr, zone, gap=gap, repeat="both").times_ms(after_ms, 80)
        horizon = min(first[-1], last[-1])
        assert [t for t in both if t <= horizon] == sorted({t for t in first + last if t <= horizon})
