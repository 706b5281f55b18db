"""clock.ms_from_datetime is cached by datetime: equal datetimes (one
instant at any offset) must get the same answer, and it must be right. And
the scheduler clock, on fake wall and monotonic clocks: it never goes
backwards, absorbs a step back, follows a step forward, starts from the last
applied stamp, and counts and logs each step once."""

import logging
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from tempo import clock, limits


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


_YEAR_1_MS = clock.ms_from_datetime(datetime(1, 1, 1, tzinfo=UTC))
_YEAR_9999_END_MS = clock.ms_from_datetime(datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC))


def _iso_by_datetime(at_ms: int) -> str:
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at_ms)
    return f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at:%H:%M:%S}.{at.microsecond // 1000:03d}"


@given(st.integers(_YEAR_1_MS, _YEAR_9999_END_MS))
def test_iso_text_is_what_datetime_spells_for_any_instant_a_preview_can_reach(at_ms: int):
    # Years before 1000 padded to four digits, 1969 and earlier too (a
    # preview's `local` may start in year 1).
    assert clock.iso_from_ms(at_ms) == _iso_by_datetime(at_ms) + "Z"
    assert clock.local_iso_from_ms(at_ms) == _iso_by_datetime(at_ms)


def test_iso_text_at_the_edges_of_a_day_and_of_the_range():
    for at_ms, text in (
        (0, "1970-01-01T00:00:00.000"), (-1, "1969-12-31T23:59:59.999"), (86_399_999, "1970-01-01T23:59:59.999"),
        (_YEAR_1_MS, "0001-01-01T00:00:00.000"), (_YEAR_9999_END_MS, "9999-12-31T23:59:59.999"),
        (1_924_992_000_123, "2031-01-01T00:00:00.123"),
    ):
        assert clock.local_iso_from_ms(at_ms) == text
        assert clock.iso_from_ms(at_ms) == text + "Z"


# -- the scheduler clock (clock.Clock) ---------------------------------------------

T0_NS = 1_800_000_000_000 * 1_000_000  # 2027-01-15T08:00:00Z


class FakeClocks:
    """A wall clock and a monotonic one that advance together, and a wall
    clock that can step alone, as NTP or an operator steps it."""

    def __init__(self) -> None:
        self.wall = T0_NS
        self.mono = 5_000_000_000
        # Nanoseconds the monotonic clock moves between the two reads that
        # bracket a wall-clock read (a thread held up there).
        self.held_up_ns = 0
        self._reads = 0
        self.glitch_ns = 0

    def wall_ns(self) -> int:
        # A torn read: the next wall-clock read alone is off by this much.
        off_ns, self.glitch_ns = self.glitch_ns, 0
        return self.wall + off_ns

    def monotonic_ns(self) -> int:
        self._reads += 1
        if self.held_up_ns and self._reads % 2 == 0:
            self.mono += self.held_up_ns
            self.wall += self.held_up_ns
        return self.mono

    def advance(self, seconds: float) -> None:
        self.mono += int(seconds * 1e9)
        self.wall += int(seconds * 1e9)

    def step(self, seconds: float) -> None:
        self.wall += int(seconds * 1e9)

    def clock(self, floor_ms: int = 0) -> clock.Clock:
        return clock.Clock(floor_ms=floor_ms, wall_ns=self.wall_ns, monotonic_ns=self.monotonic_ns)


def test_without_steps_the_scheduler_clock_is_the_wall_clock():
    fake = FakeClocks()
    c = fake.clock()
    for _ in range(5):
        fake.advance(0.25)
        assert c.now_ms() == fake.wall // 1_000_000
    assert c.steps == {"backward": 0, "forward": 0} and c.lead_ms() == 0


def test_a_step_back_never_shows_and_is_absorbed_at_the_pace():
    fake = FakeClocks()
    c = fake.clock()
    before_ms = c.now_ms()
    fake.step(-3600)
    assert c.now_ms() == before_ms  # not an hour back, and not frozen either:
    fake.advance(10)
    assert c.now_ms() == before_ms + 10_000 * limits.clock_ahead_pace_percent // 100
    assert c.steps == {"backward": 1, "forward": 0}
    assert c.lead_ms() == 3600_000 - 5_000
    # At 50 % a step back of an hour is absorbed after two; then the wall clock again.
    fake.advance(7200)
    assert c.now_ms() == fake.wall // 1_000_000 and c.lead_ms() == 0
    fake.advance(1)
    assert c.now_ms() == fake.wall // 1_000_000
    assert c.steps == {"backward": 1, "forward": 0}  # counted once


def test_a_step_forward_is_followed_at_once_and_counted():
    fake = FakeClocks()
    c = fake.clock()
    c.now_ms()
    fake.step(3600)
    assert c.now_ms() == fake.wall // 1_000_000
    assert c.steps == {"backward": 0, "forward": 1}


def test_answers_never_decrease_whatever_the_wall_clock_does():
    fake = FakeClocks()
    c = fake.clock()
    answers = [c.now_ms()]
    for seconds in (-0.05, 0.01, -0.2, 0.3, -1, 3600, -3600, -0.021, 0.5):
        fake.step(seconds)
        answers.append(c.now_ms())
        fake.advance(0.01)
        answers.append(c.now_ms())
    assert answers == sorted(answers)
    assert c.steps == {"backward": 5, "forward": 3}  # 10 ms is below the threshold


def test_small_changes_are_drift_not_steps():
    fake = FakeClocks()
    c = fake.clock()
    for _ in range(100):  # 100 x 5 ms: half a second of drift, never a step
        fake.step(-0.005)
        fake.advance(0.1)
        c.now_ms()
    assert c.steps == {"backward": 0, "forward": 0}
    fake.step(-(limits.clock_step_ms_min + 1) / 1000)
    c.now_ms()
    assert c.steps == {"backward": 1, "forward": 0}


def test_a_read_held_up_between_the_two_clocks_is_not_taken_for_a_step():
    fake = FakeClocks()
    c = fake.clock()
    c.now_ms()
    fake.held_up_ns = 30_000_000  # longer than a step: but both clocks moved
    before_ms = c.now_ms()
    assert c.steps == {"backward": 0, "forward": 0}
    fake.held_up_ns = 0
    assert c.now_ms() >= before_ms


def test_one_wall_clock_read_off_alone_is_not_a_step():
    """A read that disagrees with the one after it (a torn read, a clock
    source that hiccups) is neither counted nor followed: a step is a
    change that the next read confirms."""
    fake = FakeClocks()
    c = fake.clock()
    c.now_ms()
    for glitch_s in (3600, -3600, 0.05):
        fake.advance(0.01)
        fake.glitch_ns = int(glitch_s * 1e9)
        assert c.now_ms() == fake.wall // 1_000_000
        fake.advance(0.01)
        assert c.now_ms() == fake.wall // 1_000_000
    assert c.steps == {"backward": 0, "forward": 0} and c.lead_ms() == 0
    fake.step(-0.05)  # a real step: the next read agrees with it
    c.now_ms()
    assert c.steps == {"backward": 1, "forward": 0}


def test_the_clock_starts_from_the_last_applied_stamp_and_observes_later_ones():
    fake = FakeClocks()
    stamp_ms = fake.wall // 1_000_000 + 3600_000  # stamped before a restart with the clock an hour back
    c = fake.clock(floor_ms=stamp_ms)
    assert c.now_ms() == stamp_ms
    assert c.steps == {"backward": 1, "forward": 0}  # the step across the restart
    fake.advance(2)
    assert c.now_ms() == stamp_ms + 2000 * limits.clock_ahead_pace_percent // 100
    c.observe(stamp_ms + 10_000)  # another leader's stamp, applied here
    assert c.now_ms() == stamp_ms + 10_000
    c.observe(0)
    assert c.now_ms() == stamp_ms + 10_000
    assert fake.clock(floor_ms=fake.wall // 1_000_000 - 5).steps == {"backward": 0, "forward": 0}


def test_each_step_is_logged_once(caplog):
    fake = FakeClocks()
    c = fake.clock()
    with caplog.at_level(logging.WARNING, logger="tempo.clock"):
        fake.step(-0.05)
        for _ in range(3):
            fake.advance(0.01)
            c.now_ms()
        fake.step(3600)
        c.now_ms()
        c.now_ms()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("wall clock stepped back by 0.050 s")
    assert lines[1].startswith("wall clock stepped forward by 3600.000 s")


def test_a_wall_clock_outside_what_records_hold_is_clamped_not_asserted():
    fake = FakeClocks()
    fake.wall = -5_000_000_000  # 1969
    c = fake.clock()
    assert c.now_ms() == 0
    fake.advance(1)
    assert c.now_ms() == 1000 * limits.clock_ahead_pace_percent // 100  # ahead of a wall clock behind 0
    fake.step(limits.time_ms_max / 1000 + 3600)
    assert c.now_ms() == limits.time_ms_max
    c.observe(limits.time_ms_max + 10)
    assert c.now_ms() == limits.time_ms_max


def test_a_follower_that_observes_stamps_answers_its_wall_clock_when_it_leads():
    """A node that followed (observing the leader's stamps, reading its own
    clock rarely) and then leads answers its wall clock, not its last stamp
    plus half of all the time since it last read its clock: a raise moves
    the monotonic reference with it."""
    fake = FakeClocks()
    c = fake.clock()
    c.now_ms()
    for _ in range(4):
        fake.advance(1)
        c.observe(fake.wall // 1_000_000)  # the leader's stamp, with equal clocks
    assert c.now_ms() == fake.wall // 1_000_000
    assert c.lead_ms() == 0
    # A day of following, and no read of its own clock in between.
    for _ in range(24):
        fake.advance(3600)
        c.observe(fake.wall // 1_000_000)
    fake.advance(0.5)
    assert c.now_ms() == fake.wall // 1_000_000
    assert c.steps == {"backward": 0, "forward": 0}


def test_a_stamp_ahead_of_the_wall_clock_is_absorbed_at_the_pace_from_when_it_was_observed():
    fake = FakeClocks()
    c = fake.clock()
    c.now_ms()
    fake.advance(60)
    ahead_ms = fake.wall // 1_000_000 + 1_000  # a leader whose clock ran a second ahead
    c.observe(ahead_ms)
    fake.advance(1)
    assert c.now_ms() == ahead_ms + 1000 * limits.clock_ahead_pace_percent // 100
    fake.advance(10)
    assert c.now_ms() == fake.wall // 1_000_000
