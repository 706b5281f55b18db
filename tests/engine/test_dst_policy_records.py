"""A cron schedule's DST policy in the engine: the job record carries it
(older records decode to the default), and the engine's slot arithmetic
follows it."""

from __future__ import annotations

import datetime as dt

import msgspec

from tempo.engine import plan
from tempo.engine.records import Decoder, Schedule


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()) * 1000


def test_a_schedule_record_without_the_policy_decodes_to_the_default():
    old = msgspec.msgpack.encode([None, "30 1 * * *", "America/New_York", None, None])
    got = Decoder(Schedule).decode(old)
    assert got == Schedule(cron="30 1 * * *", timezone="America/New_York")
    assert (got.dst_gap, got.dst_repeat) == ("shift", "first")


def test_the_policy_survives_a_round_trip():
    sched = Schedule(cron="30 1 * * *", timezone="America/New_York", dst_gap="skip", dst_repeat="both")
    assert Decoder(Schedule).decode(msgspec.msgpack.encode(sched)) == sched


# New York, 7 November 2027: 01:30 happens at 05:30Z (EDT) and 06:30Z (EST).
CREATED_MS = ms("2027-11-01T00:00:00Z")
AFTER_MS = ms("2027-11-06T12:00:00Z")


def slot(repeat: str, gap: str = "shift") -> int | None:
    sched = Schedule(cron="30 1 * * *", timezone="America/New_York", dst_gap=gap, dst_repeat=repeat)
    return plan.slot_after_ms(sched, CREATED_MS, AFTER_MS, inclusive=False)


def test_the_next_slot_follows_the_repeat_policy():
    assert slot("first") == ms("2027-11-07T05:30:00Z")
    assert slot("last") == ms("2027-11-07T06:30:00Z")
    assert slot("both") == ms("2027-11-07T05:30:00Z")
    both = Schedule(cron="30 1 * * *", timezone="America/New_York", dst_repeat="both")
    assert plan.slot_after_ms(both, CREATED_MS, ms("2027-11-07T05:30:00Z"), inclusive=False) == ms(
        "2027-11-07T06:30:00Z"
    )


def test_the_latest_slot_follows_the_gap_policy():
    # New York, 14 March 2027: 02:30 does not exist; shifted to 07:00Z, or skipped.
    now_ms = ms("2027-03-14T12:00:00Z")
    created_ms = ms("2027-03-10T00:00:00Z")
    shift = Schedule(cron="30 2 * * *", timezone="America/New_York")
    skip = Schedule(cron="30 2 * * *", timezone="America/New_York", dst_gap="skip")
    assert plan.latest_slot_ms(shift, created_ms, now_ms) == ms("2027-03-14T07:00:00Z")
    assert plan.latest_slot_ms(skip, created_ms, now_ms) == ms("2027-03-13T07:30:00Z")


def test_an_every_schedule_ends_with_year_9999():
    sched = Schedule(every_s=86_400, start_at_ms=ms("9999-12-30T00:00:00Z"))
    assert plan.slot_after_ms(sched, 0, ms("9999-12-30T00:00:00Z"), inclusive=False) == ms("9999-12-31T00:00:00Z")
    assert plan.slot_after_ms(sched, 0, ms("9999-12-31T00:00:00Z"), inclusive=False) is None


def test_a_stored_expression_the_dialect_no_longer_has_ends_its_schedule():
    # `W` was accepted before tempo's cron became crontab's (and is refused
    # now: only `L` alone came back, docs/semantics.md): such a stored job
    # has no further slot rather than failing every claim.
    sched = Schedule(cron="0 0 15W * *", timezone="UTC")
    assert plan.slot_after_ms(sched, 0, ms("2027-01-01T00:00:00Z"), inclusive=False) is None
    assert plan.latest_slot_ms(sched, 0, ms("2027-01-01T00:00:00Z")) is None
