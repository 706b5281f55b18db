"""tempo's clock discipline, and the one place where wall-clock instants and
RFC 3339 strings meet (docs/semantics.md "Clocks").

Two clocks, two uses:

- Durations (leases, timeouts, long-poll waits, token buckets, retry waits in
  memory) run on the monotonic clock: `monotonic_ms` here,
  `trio.current_time()` in trio code (the same clock, or a test's mock). A
  wall-clock step does not lengthen or shorten any of them.
- Instants are UNIX milliseconds, UTC (`*_at_ms`), the only kind of time
  persisted or replicated. The node reads them from one `Clock`, the
  scheduler time: the wall clock while it moves forward, but never a value
  below one it answered before or below the last stamp applied to the store
  (`Clock.observe`). The engine never reads a clock: the node stamps each
  command with `Clock.now_ms` at the edge, and apply carries the highest
  stamp in the store, so a restart and a new leader continue from it.

A step of the wall clock shows as a change of wall minus monotonic time;
`Clock` notices one of more than `limits.clock_step_ms_min` that the next
read confirms, logs it once and counts it by direction. Forward, scheduler
time follows at once. Backward, it does not: it runs on from where it
was, at `limits.clock_ahead_pace_percent` of real time, until the wall
clock meets it again, so runs keep coming (at that pace) and nothing that
already ran comes due again.
"""

import functools
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from tempo import limits

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS_NS = 1_000_000
# limits.py "Clocks", in the units `Clock.now_ms` works in.
_STEP_NS = limits.clock_step_ms_min * _MS_NS
_READ_NS_MAX = limits.clock_read_us_max * 1000
_PACE_PERCENT = limits.clock_ahead_pace_percent
_LAST_NS = limits.time_ms_max * _MS_NS
log = logging.getLogger("tempo.clock")


def now_ms() -> int:
    """The wall clock as it is, steps and all: for what is neither a stamp
    nor a due time (a log line's time). Stamps come from `Clock.now_ms`."""
    return time.time_ns() // _MS_NS


def monotonic_ms() -> int:
    """Milliseconds of the monotonic clock (an arbitrary origin): for token
    buckets and other durations counted in integers."""
    return time.monotonic_ns() // _MS_NS


class Clock:
    """A node's scheduler time (the module docstring): UNIX ms that never go
    backwards, with wall-clock steps detected and counted.

    `wall_ns` and `monotonic_ns` are injectable so tests can step a fake
    wall clock. Used from the trio thread only.

    Invariants: `now_ms` answers a non-decreasing sequence, each at least the
    highest stamp `observe`d before it; with no step it answers the wall clock.
    """

    def __init__(
        self,
        *,
        floor_ms: int = 0,
        wall_ns: Callable[[], int] = time.time_ns,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ):
        assert floor_ms >= 0
        self._wall_ns = wall_ns
        self._monotonic_ns = monotonic_ns
        # Steps seen, by direction ("backward", "forward"), for /metrics.
        self.steps = {"backward": 0, "forward": 0}
        mono_ns, wall_ns_now, _ = self._read()
        # Scheduler time answered last, and the monotonic time it was read at.
        # Never before 1970: instants are unsigned (ids.py, engine/keys.py).
        self._last_ns = max(0, wall_ns_now)
        self._last_mono_ns = mono_ns
        # Wall minus monotonic time at the last clean read: a step moves it.
        self._offset_ns = wall_ns_now - mono_ns
        behind_ms = floor_ms - wall_ns_now // _MS_NS
        if behind_ms > limits.clock_step_ms_min:
            # A restart with the wall clock behind what was stamped already:
            # a step back across the restart, noticed from the stamps.
            self._stepped("backward", behind_ms, "is behind the last applied stamp by")
        self.observe(floor_ms)

    def _read(self) -> tuple[int, int, bool]:
        """(monotonic ns, wall ns, clean): the wall clock read between two
        monotonic reads. Not clean when the thread was held up between them
        at every try: the offset could then be off by the delay."""
        for _ in range(limits.clock_read_tries_max):
            before_ns = self._monotonic_ns()
            wall_ns = self._wall_ns()
            after_ns = self._monotonic_ns()
            if after_ns - before_ns <= _READ_NS_MAX:
                return (before_ns + after_ns) // 2, wall_ns, True
        return (before_ns + after_ns) // 2, wall_ns, False

    def now_ms(self) -> int:
        """Scheduler time, UNIX ms: the stamp for a command, the `now` of due
        times. The wall clock, unless that is behind an answer already
        given; then the last answer plus the monotonic time since, at
        `limits.clock_ahead_pace_percent`."""
        # `_read`'s first try, inline: a claim, a heartbeat and every
        # dispatcher tick read the clock.
        before_ns = self._monotonic_ns()
        wall_ns = self._wall_ns()
        after_ns = self._monotonic_ns()
        if after_ns - before_ns <= _READ_NS_MAX:
            mono_ns, clean = (before_ns + after_ns) // 2, True
        else:
            mono_ns, wall_ns, clean = self._read()
        if clean and abs(wall_ns - mono_ns - self._offset_ns) > _STEP_NS:
            # A step is a change the next read confirms: one read alone may
            # be torn (a clock source's hiccup), and following it forward
            # would move scheduler time for good.
            mono_ns, wall_ns, clean = self._read()
        if clean:
            offset_ns = wall_ns - mono_ns
            if abs(offset_ns - self._offset_ns) > _STEP_NS:
                self._check_step(offset_ns)
            else:
                # Slow drift (a slewing NTP daemon, some ppm) moves the
                # offset a little at every read; following it keeps it from
                # adding up to a step.
                self._offset_ns = offset_ns
        last_ns = self._last_ns
        paced_ns = last_ns + max(0, mono_ns - self._last_mono_ns) * _PACE_PERCENT // 100
        # Not past the last instant a record holds (limits.time_ms_max): a
        # wall clock set that far stops there rather than trip a check.
        self._last_ns = min(max(wall_ns, paced_ns), _LAST_NS)
        self._last_mono_ns = mono_ns
        return self._last_ns // _MS_NS

    def observe(self, at_ms: int) -> None:
        """A stamp applied to the store (by this node or another leader's):
        no later answer is below it.

        A raise moves the monotonic reference with it: pacing runs from the
        moment the stamp was learnt, not from this node's last read of its
        own clock. Otherwise a node that followed for an hour, reading its
        clock rarely, would lead by half an hour when it next answered
        (docs/semantics.md "Clocks")."""
        at_ns = min(at_ms * _MS_NS, _LAST_NS)
        if at_ns > self._last_ns:
            self._last_ns = at_ns
            self._last_mono_ns = self._monotonic_ns()

    def lead_ms(self) -> int:
        """How far the last answer is ahead of the wall clock (0 when it is
        the wall clock): what a backward step left to absorb."""
        return max(0, self._last_ns // _MS_NS - self._wall_ns() // _MS_NS)

    def _check_step(self, offset_ns: int) -> None:
        change_ms = (offset_ns - self._offset_ns) // _MS_NS
        self._offset_ns = offset_ns
        if change_ms > 0:
            self._stepped("forward", change_ms, "stepped forward by")
        else:
            self._stepped("backward", -change_ms, "stepped back by")

    def _stepped(self, direction: str, size_ms: int, how: str) -> None:
        self.steps[direction] += 1
        if direction == "forward":
            then = "scheduler time follows it; leases and waits run on the monotonic clock"
        else:
            then = (
                f"scheduler time runs on from its last value at {limits.clock_ahead_pace_percent}% "
                "until the wall clock catches up; nothing that ran comes due again"
            )
        log.warning("wall clock %s %.3f s: %s", how, size_ms / 1000, then,
                    extra={"direction": direction, "step_ms": size_ms})


def ms_from_datetime(value: datetime) -> int:
    """Truncates to the millisecond, as docs/api.md says finer digits are.

    Not cached: every decoded datetime is a new object, and hashing an
    aware one (for a cache's key) costs more than this arithmetic."""
    assert value.tzinfo is not None, "times without an offset are rejected at the edge"
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def datetime_from_ms(at_ms: int) -> datetime:
    return datetime.fromtimestamp(at_ms // 1000, UTC).replace(microsecond=(at_ms % 1000) * 1000)


@functools.lru_cache(maxsize=16384)
def iso_from_ms(at_ms: int) -> str:
    """`2026-12-02T10:00:00.000Z`: UTC, milliseconds, a `Z` suffix.

    Cached: the times of one response (a claim's due times and leases)
    mostly repeat."""
    return _iso_text(at_ms) + "Z"


def local_iso_from_ms(wall_ms: int) -> str:
    """`2027-10-31T02:30:00.000`: a wall-clock time (UNIX ms of the naive
    local time) without an offset, as a preview's `local` spells it."""
    return _iso_text(wall_ms)


_TWO_DIGITS = tuple(f"{n:02d}" for n in range(60))
_MILLIS_TEXT = tuple(f".{n:03d}" for n in range(1000))


def _iso_text(at_ms: int) -> str:
    """`2026-12-02T10:00:00.000`. The date from a cache by the day, the time
    of day from tables: 0.45 µs, against 2.6 µs for `time.gmtime` and an
    f-string a second. The times of a batch of creates spread over a month
    share a few dozen days but hardly a second (docs/performance.md
    "Scale: 10 million jobs on one node")."""
    days, ms = divmod(at_ms, 86_400_000)  # floor: an instant before 1970 is in the day it falls in
    seconds, millis = divmod(ms, 1000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    return _iso_date(days) + _TWO_DIGITS[hours] + ":" + _TWO_DIGITS[minutes] + ":" + _TWO_DIGITS[seconds] + _MILLIS_TEXT[millis]


@functools.lru_cache(maxsize=4096)
def _iso_date(days: int) -> str:
    # Not strftime's %Y: glibc does not pad years before 1000 to four digits,
    # and RFC 3339 wants them (a preview may start in year 1).
    t = time.gmtime(days * 86_400)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"


def offset_text(offset_s: int) -> str:
    """`+02:00`, `-03:30`, `+00:00`: a UTC offset as RFC 3339 writes one,
    with `:SS` added only for the odd local mean time of a zone's early
    history, which is not whole minutes."""
    sign = "-" if offset_s < 0 else "+"
    hours, rest = divmod(abs(offset_s), 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{seconds:02d}" if seconds else "")


def iso_or_none(at_ms: int | None) -> str | None:
    return None if at_ms is None else iso_from_ms(at_ms)
