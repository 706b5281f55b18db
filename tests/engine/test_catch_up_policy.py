"""The catch-up decision of a claim (engine/plan.py `catch_up`) and the
ranges of missed slots it records: bounded work, one record per range
(docs/semantics.md "Catch-up after missed slots")."""

import random
from datetime import datetime

import pytest

from tempo import limits, schedule
from tempo.engine.plan import catch_up, count_slots, paused_ranges
from tempo.engine.records import Catchup, Job, Missed, Schedule

MIN_MS = 60_000
DAY_MS = 86_400_000


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def job(sched: Schedule, created: str, catchup: Catchup | None = None, until_ms: int | None = None) -> Job:
    made = Job(
        "j_x", "o", None, "queue:work", None, sched, 4, (10,), 60, 0, "active", ms(created), None, None, None,
    )
    made.catchup, made.catchup_until_ms = catchup, until_ms
    return made


MINUTELY = Schedule(cron="* * * * *", timezone="UTC")
EVERY_MINUTE = Schedule(every_s=60)


@pytest.mark.parametrize("sched", [MINUTELY, EVERY_MINUTE], ids=["cron", "every_s"])
def test_next_slot_ahead_is_no_catch_up(sched):
    j = job(sched, "2027-01-01T00:00:00Z")
    s0 = ms("2027-01-01T00:01:00Z")
    found = catch_up(j, s0, s0 + 30_000)
    assert found == (s0 + MIN_MS, s0 + MIN_MS, [], None, None)


@pytest.mark.parametrize("sched", [MINUTELY, EVERY_MINUTE], ids=["cron", "every_s"])
def test_latest_runs_the_latest_slot_and_records_the_rest(sched):
    j = job(sched, "2027-01-01T00:00:00Z")
    s0 = ms("2027-01-01T00:01:00Z")
    now = s0 + DAY_MS + 30_000  # a day of downtime
    found = catch_up(j, s0, now)
    latest = s0 + DAY_MS
    assert (found.slot_ms, found.due_ms, found.until_ms) == (latest, now, None)
    # [from, until): until is the first slot after the range, here the one that runs.
    assert found.missed == [Missed("policy", s0 + MIN_MS, latest, 1439)]


@pytest.mark.parametrize("sched", [MINUTELY, EVERY_MINUTE], ids=["cron", "every_s"])
def test_a_window_splits_the_missed_slots(sched):
    j = job(sched, "2027-01-01T00:00:00Z", Catchup(window_s=600, policy="latest"))
    s0 = ms("2027-01-01T00:01:00Z")
    now = s0 + DAY_MS
    found = catch_up(j, s0, now)
    assert found.slot_ms == now
    # Slots older than ten minutes, then the window's but the latest.
    assert found.missed == [
        Missed("outside_window", s0 + MIN_MS, now - 10 * MIN_MS, 1429),
        Missed("policy", now - 10 * MIN_MS, now, 10),
    ]


def test_no_slot_in_the_window_runs_nothing():
    j = job(EVERY_MINUTE, "2027-01-01T00:00:00Z", Catchup(window_s=0, policy="all"))
    s0 = ms("2027-01-01T00:01:00Z")
    now = s0 + 5 * MIN_MS + 1
    found = catch_up(j, s0, now)
    assert found.slot_ms == s0 + 6 * MIN_MS and found.due_ms == s0 + 6 * MIN_MS
    assert found.missed == [Missed("outside_window", s0 + MIN_MS, s0 + 6 * MIN_MS, 5)]


@pytest.mark.parametrize("sched", [MINUTELY, EVERY_MINUTE], ids=["cron", "every_s"])
def test_none_runs_no_missed_slot(sched):
    j = job(sched, "2027-01-01T00:00:00Z", Catchup(policy="none"))
    s0 = ms("2027-01-01T00:01:00Z")
    now = s0 + 90 * MIN_MS + 1
    found = catch_up(j, s0, now)
    assert (found.slot_ms, found.due_ms) == (s0 + 91 * MIN_MS, s0 + 91 * MIN_MS)
    assert found.missed == [Missed("policy", s0 + MIN_MS, s0 + 91 * MIN_MS, 90)]


@pytest.mark.parametrize("sched", [MINUTELY, EVERY_MINUTE], ids=["cron", "every_s"])
def test_all_runs_the_first_max_runs_in_order(sched):
    j = job(sched, "2027-01-01T00:00:00Z", Catchup(policy="all", max_runs=3))
    s0 = ms("2027-01-01T00:01:00Z")
    now = s0 + 10 * MIN_MS
    found = catch_up(j, s0, now)
    assert (found.slot_ms, found.due_ms, found.until_ms, found.decided_ms) == (s0 + MIN_MS, now, s0 + 3 * MIN_MS, now)
    assert found.missed == [Missed("policy", s0 + 4 * MIN_MS, now + MIN_MS, 7)]
    # Each claim of the slot run makes the next, due at once, up to the last.
    j.catchup_until_ms, j.catchup_decided_ms = found.until_ms, found.decided_ms
    later = now + 1000
    second = catch_up(j, s0 + MIN_MS, later)
    assert second == (s0 + 2 * MIN_MS, later, [], s0 + 3 * MIN_MS, now)
    third = catch_up(j, s0 + 2 * MIN_MS, later)
    assert third == (s0 + 3 * MIN_MS, later, [], s0 + 3 * MIN_MS, now)
    # After the last, the schedule goes on after the slots recorded missed.
    last = catch_up(j, s0 + 3 * MIN_MS, later)
    assert last == (now + MIN_MS, now + MIN_MS, [], None, None)
    # Had more slots passed meanwhile, they are a new catch-up of their own.
    much_later = now + 5 * MIN_MS
    again = catch_up(j, s0 + 3 * MIN_MS, much_later)
    assert again.missed == [Missed("policy", now + 4 * MIN_MS, much_later + MIN_MS, 2)]
    assert (again.slot_ms, again.until_ms, again.decided_ms) == (now + MIN_MS, now + 3 * MIN_MS, much_later)


def test_all_within_max_runs_runs_every_slot():
    j = job(EVERY_MINUTE, "2027-01-01T00:00:00Z", Catchup(policy="all", max_runs=1000))
    s0 = ms("2027-01-01T00:01:00Z")
    found = catch_up(j, s0, s0 + 3 * MIN_MS)
    assert found == (s0 + MIN_MS, s0 + 3 * MIN_MS, [], s0 + 3 * MIN_MS, s0 + 3 * MIN_MS)


def test_a_year_of_minutely_slots_is_one_record_counted_without_a_walk(monkeypatch):
    walked = 0
    real = schedule._occurrences

    def counting(*args, **kwargs):
        nonlocal walked
        for found in real(*args, **kwargs):
            walked += 1
            yield found

    monkeypatch.setattr(schedule, "_occurrences", counting)
    j = job(Schedule(cron="* * * * *", timezone="Europe/Berlin"), "2026-12-31T00:00:00Z", Catchup(policy="none"))
    s0 = ms("2027-01-01T00:00:00Z")
    now = ms("2028-01-01T00:00:00Z") - 1
    found = catch_up(j, s0, now)
    # Every UTC minute of the range, less the hour that fall-back repeats
    # (run at its first pass only); s0 itself was the claimed run.
    [missed] = found.missed
    assert missed.reason == "policy" and missed.from_ms == s0 + MIN_MS
    assert missed.until_ms == ms("2028-01-01T00:00:00Z")
    assert missed.count == (missed.until_ms - missed.from_ms) // MIN_MS - 60
    assert walked < 20_000, walked  # the edges and the two DST changes, not 525,600


@pytest.mark.parametrize("seed", range(3))
def test_count_cron_matches_a_walk(seed):
    rng = random.Random(seed)
    exprs = ["* * * * *", "*/7 2-3 * * *", "30 2 * * *", "0,30 * * * 0", "15 1 1-10 * 1-5", "*/15 * * 3,10 *"]
    zones = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago",
             "Europe/Dublin", "Pacific/Chatham"]
    for _ in range(40):
        expr, zone = rng.choice(exprs), rng.choice(zones)
        gap, repeat = rng.choice(["shift", "skip"]), rng.choice(["first", "last", "both"])
        after = rng.randrange(ms("2024-01-01T00:00:00Z"), ms("2029-01-01T00:00:00Z"))
        until = after + rng.randrange(0, (8 if expr == "* * * * *" else 40) * DAY_MS)
        rule = schedule.CronRule(expr, zone, gap=gap, repeat=repeat)
        walked, at = 0, after
        while True:
            part = rule.times_ms(at, 1000)
            inside = [t for t in part if t <= until]
            walked += len(inside)
            if len(inside) < len(part) or len(part) < 1000:
                break
            at = part[-1]
        got = rule.count_in(after, until)
        assert got == walked, (expr, zone, gap, repeat, after, until)


def test_count_of_every_s_is_arithmetic():
    assert count_slots(Schedule(every_s=7), 0, 7000, 7000 + 7000 * 1_000_000) == 1_000_000
    assert count_slots(Schedule(every_s=7), 0, 7000, 7000 + 7000 * 1_000_000 + 1) == 1_000_001


def test_a_range_too_long_to_count_has_no_count(monkeypatch):
    monkeypatch.setattr(limits, "catchup_count_days_max", 10)
    minutely = schedule.CronRule("* * * * *", "UTC")
    assert minutely.count_in(0, 11 * DAY_MS + 1) is None
    assert minutely.count_in(0, 9 * DAY_MS) == 9 * 1440


def test_paused_slots_are_one_range():
    j = job(EVERY_MINUTE, "2027-01-01T00:00:00Z")
    j.slot_ms = ms("2027-01-01T00:05:00Z")  # the slot whose run the pause cancelled
    j.state = "paused"
    assert paused_ranges(j, ms("2027-01-01T02:00:30Z"), ms("2027-01-01T02:01:00Z")) == [Missed(
        "paused", ms("2027-01-01T00:06:00Z"), ms("2027-01-01T02:01:00Z"), 115
    )]
    # Only the cancelled slot passed.
    assert paused_ranges(j, ms("2027-01-01T00:05:30Z"), ms("2027-01-01T00:06:00Z")) == []


def test_a_pause_in_an_all_catch_up_records_around_its_own_range():
    # Paused at the run of 00:05 of a catch-up that runs up to 00:07 and
    # recorded 00:08 to 00:10 as `policy`.
    j = job(EVERY_MINUTE, "2027-01-01T00:00:00Z", Catchup(policy="all", max_runs=3),
            until_ms=ms("2027-01-01T00:07:00Z"))
    j.catchup_decided_ms = ms("2027-01-01T00:10:00Z")
    j.slot_ms, j.state = ms("2027-01-01T00:05:00Z"), "paused"
    assert paused_ranges(j, ms("2027-01-01T00:20:30Z"), ms("2027-01-01T00:21:00Z")) == [
        Missed("paused", ms("2027-01-01T00:06:00Z"), ms("2027-01-01T00:08:00Z"), 2),
        Missed("paused", ms("2027-01-01T00:11:00Z"), ms("2027-01-01T00:21:00Z"), 10),
    ]


@pytest.mark.parametrize("seed", range(2))
def test_nth_cron_matches_a_walk(seed):
    rng = random.Random(seed)
    exprs = ["* * * * *", "*/7 2-3 * * *", "30 2 * * *", "15 1 1-10 * 1-5", "*/15 * * 3,10 *", "0 0 29 2 *"]
    zones = ["UTC", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago", "Europe/Dublin", "Pacific/Chatham"]
    for _ in range(40):
        expr, zone = rng.choice(exprs), rng.choice(zones)
        gap, repeat = rng.choice(["shift", "skip"]), rng.choice(["first", "last", "both"])
        after = rng.randrange(ms("2024-01-01T00:00:00Z"), ms("2029-01-01T00:00:00Z"))
        n = rng.randrange(1, 1001)
        rule = schedule.CronRule(expr, zone, gap=gap, repeat=repeat)
        walked = rule.times_ms(after, n)
        got = rule.nth_ms(after, n)
        assert got == (walked[-1] if len(walked) == n else None), (expr, zone, gap, repeat, after, n)
