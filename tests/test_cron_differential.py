"""tempo's cron dialect against an independent engine: cronsim (Healthchecks.io's,
which follows Debian cron's day rule and ranges).

Thousands of seeded random expressions, each from an instant near a real
daylight-saving transition of a zone chosen for its odd rules, compared on the
wall clock: cronsim walks naive local times (it gets no zone), tempo walks
instants and each is turned back into its wall time. A wall time that does not
exist in the zone (a spring-forward gap) is dropped from cronsim's list, and
tempo's `gap="skip"` leaves it out too; a wall time that occurs twice is one
wall time under every `repeat` policy. So the DST choices do not count, and
every difference left is one of dialect or of matching.

`TEMPO_CRON_DIFF_EXPRS` sets the number of expressions (CI runs the default,
a few seconds); `TEMPO_CRON_DIFF_SEED` the seed (a failure prints it).

Cases where cronsim itself is wrong, left out of the comparison with the reason:
none found so far (the `reference_wrong` list below stays empty; an entry
names the expression and why).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import random
import zoneinfo

import pytest
from cronsim import CronSim, CronSimError

from tempo.schedule import CronRule, ScheduleError, validate_cron

# Thousands of random expressions against another engine (tests/suite_shape.py).
pytestmark = pytest.mark.fuzz

EXPRS = int(os.environ.get("TEMPO_CRON_DIFF_EXPRS", "1500"))
SEED = int(os.environ.get("TEMPO_CRON_DIFF_SEED", "18"))
TIMES = 12  # occurrences compared per expression
ZONES = [
    "Australia/Lord_Howe",  # a 30-minute shift
    "Pacific/Chatham",  # +12:45 / +13:45
    "Europe/Dublin",  # "negative DST" in tzdata: winter time is the saving one
    "America/Santiago",  # transitions at midnight: a day without 00:00
    "Europe/Berlin",
    "America/New_York",
    "UTC",
]
# (expression, why cronsim's answer is wrong): none so far.
reference_wrong: dict[str, str] = {}

_MONTHS = ["jan", "FEB", "Mar", "apr", "may", "jun", "JUL", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "MON", "Tue", "wed", "thu", "fri", "SAT"]


def _element(rng: random.Random, lo: int, hi: int, names: list[str] | None) -> str:
    def value() -> tuple[int, str]:
        v = rng.randint(lo, hi)
        if names and rng.random() < 0.3 and v - (1 if lo == 1 else 0) < len(names):
            return v, names[v - (1 if lo == 1 else 0)]
        return v, str(v)

    kind = rng.choice(["value", "value", "range", "range_step", "star_step", "value_step"])
    a, a_text = value()
    step = rng.choice([1, 2, 2, 3, 4, 5, 7, rng.randint(1, hi - lo + 1)])
    if kind == "value":
        return a_text
    if kind == "star_step":
        return f"*/{step}"
    if kind == "value_step":
        return f"{a_text}/{step}"
    b, b_text = value()
    if b < a:
        a, a_text, b, b_text = b, b_text, a, a_text
    return f"{a_text}-{b_text}" + (f"/{step}" if kind == "range_step" else "")


def _field(rng: random.Random, lo: int, hi: int, names: list[str] | None = None) -> str:
    if rng.random() < 0.3:
        return "*"
    return ",".join(_element(rng, lo, hi, names) for _ in range(rng.choice([1, 1, 2, 3])))


def _day_of_month(rng: random.Random) -> str:
    """The day-of-month field, with `L` (the last day) now and then, alone
    or in a list: both engines read it as the month's last day."""
    field = _field(rng, 1, 31)
    if rng.random() < 0.1:
        return "L" if rng.random() < 0.5 or field == "*" else f"{field},L"
    return field


def random_expr(rng: random.Random) -> str:
    return " ".join([
        _field(rng, 0, 59),
        _field(rng, 0, 23),
        _day_of_month(rng),
        _field(rng, 1, 12, _MONTHS),
        _field(rng, 0, 7, _DAYS),
    ])


@functools.cache
def transitions(zone_name: str) -> list[int]:
    """The UTC seconds of the zone's offset changes in 2020-2030, found with
    zoneinfo alone (a scan every 6 hours, then bisection)."""
    zone = zoneinfo.ZoneInfo(zone_name)

    def offset(s: int) -> dt.timedelta | None:
        return dt.datetime.fromtimestamp(s, zone).utcoffset()

    found = []
    start = int(dt.datetime(2020, 1, 1, tzinfo=dt.UTC).timestamp())
    end = int(dt.datetime(2030, 1, 1, tzinfo=dt.UTC).timestamp())
    for s in range(start, end, 6 * 3600):
        if offset(s) != offset(s + 6 * 3600):
            lo, hi = s, s + 6 * 3600
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if offset(mid) == offset(lo) else (lo, mid)
            found.append(hi)
    return found


def start_instant(rng: random.Random, zone_name: str) -> int:
    """A UTC second shortly before (or inside the day of) a transition, whose
    wall time is unambiguous, so both sides start from one wall time."""
    zone = zoneinfo.ZoneInfo(zone_name)
    points = transitions(zone_name) or [int(dt.datetime(2027, 1, 1, tzinfo=dt.UTC).timestamp())]
    base = rng.choice(points) - rng.choice([60, 1800, 3600, 7200, 86_400, 40 * 86_400, rng.randint(0, 86_400)])
    base -= base % 60 if rng.random() < 0.5 else 0
    for nudge in range(0, 6 * 3600, 600):
        local = dt.datetime.fromtimestamp(base - nudge, zone)
        if local.utcoffset() == local.replace(fold=1 - local.fold).utcoffset():
            return base - nudge
    raise AssertionError("no unambiguous start found")


def exists(zone: zoneinfo.ZoneInfo, naive: dt.datetime) -> bool:
    """Whether a wall time occurs in the zone (is not in a gap)."""
    aware = naive.replace(tzinfo=zone)
    return aware.astimezone(dt.UTC).astimezone(zone).replace(tzinfo=None) == naive


def walls_of(times_ms: list[int], zone: zoneinfo.ZoneInfo) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(t // 1000, zone).replace(tzinfo=None) for t in times_ms]


def reference(expr: str, zone: zoneinfo.ZoneInfo, start: dt.datetime, count: int) -> list[dt.datetime]:
    """cronsim's next `count` wall times after `start` that exist in the zone."""
    out = []
    sim = CronSim(expr, start)
    for _ in range(count + 1500):  # a gap drops at most a day of minutes
        wall = next(sim)
        if exists(zone, wall):
            out.append(wall)
            if len(out) == count:
                break
    return out


def compare(expr: str, zone_name: str, after_s: int) -> str | None:
    """None when tempo and cronsim agree, else what differs."""
    zone = zoneinfo.ZoneInfo(zone_name)
    start = dt.datetime.fromtimestamp(after_s, zone).replace(tzinfo=None)
    expected = reference(expr, zone, start, TIMES)
    got = walls_of(CronRule(expr, zone_name, gap="skip").times_ms(after_s * 1000, TIMES), zone)
    if got != expected:
        return f"first/skip: tempo {got} != cronsim {expected}"
    # The other repeat policies give the same wall times (each repeated one
    # once, or twice with "both") over the same stretch.
    for repeat in ("last", "both"):
        other = walls_of(CronRule(expr, zone_name, gap="skip", repeat=repeat).times_ms(after_s * 1000, 2 * TIMES), zone)
        horizon = min(got[-1], max(other)) if got and other else None
        if horizon is not None and sorted({w for w in other if w <= horizon}) != [w for w in got if w <= horizon]:
            return f"{repeat}/skip: tempo {other} != {got}"
    return None


def test_tempo_and_cronsim_agree_on_the_wall_clock():
    rng = random.Random(SEED)
    differences = []
    compared = 0
    for _ in range(EXPRS):
        expr = random_expr(rng)
        zone_name = rng.choice(ZONES)
        after_s = start_instant(rng, zone_name)
        if expr in reference_wrong:
            continue
        try:
            validate_cron(expr, zone_name)
        except ScheduleError as e:
            # tempo refuses an OR of a day-of-month that never occurs in the
            # months with a day of the week (docs/semantics.md); every other
            # refusal must be cronsim's too.
            if "day-of-month field never matches" in e.msg:
                continue
            with pytest.raises(CronSimError):
                CronSim(expr, dt.datetime(2027, 1, 1))
            continue
        found = compare(expr, zone_name, after_s)
        compared += 1
        if found is not None:
            differences.append(f"{expr!r} in {zone_name} after {after_s}: {found}")
    assert not differences, f"seed {SEED}, {len(differences)} differences:\n" + "\n".join(differences[:20])
    assert compared >= EXPRS // 2  # most expressions are compared, not skipped


@pytest.mark.parametrize("zone_name", ZONES[:4])
def test_the_zones_have_transitions_to_start_near(zone_name):
    assert len(transitions(zone_name)) >= 10


@pytest.mark.parametrize(
    "expr",
    ["0 0 1 * */1", "0 0 */7 * 1", "0 0 * * 7/1", "0 0 * * 5/1", "0 0 * * 1/2", "0 12 * * Mon-Fri"],
)
def test_the_issue_examples_agree(expr):
    for zone_name in ("Europe/Dublin", "Australia/Lord_Howe"):
        assert compare(expr, zone_name, transitions(zone_name)[3] - 86_400) is None
