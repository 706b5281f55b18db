"""clock.ms_from_datetime is cached by datetime: equal datetimes (one
instant at any offset) must get the same answer, and it must be right."""

from datetime import UTC, datetime, timedelta, timezone

from tempo import clock


def test_one_instant_at_any_offset_gives_the_same_milliseconds():
    utc = datetime(2031, 1, 1, 0, 0, 0, 123_999, tzinfo=UTC)
    plus_one = datetime(2031, 1, 1, 1, 0, 0, 123_999, tzinfo=timezone(timedelta(hours=1)))
    minus_half = datetime(2030, 12, 31, 23, 30, 0, 123_999, tzinfo=timezone(timedelta(minutes=-30)))
    assert clock.ms_from_datetime(plus_one) == clock.ms_from_datetime(utc) == 1_924_992_000_123
    assert clock.ms_from_datetime(minus_half) == 1_924_992_000_123
    assert clock.ms_from_datetime(plus_one + timedelta(milliseconds=1)) == 1_924_992_000_124


def test_milliseconds_round_trip_through_datetimes():
    for at_ms in (0, 1, 999, 1_800_000_000_000, 1_924_992_000_123):
        assert clock.ms_from_datetime(clock.datetime_from_ms(at_ms)) == at_ms
    assert clock.ms_from_datetime(datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)) == -1
