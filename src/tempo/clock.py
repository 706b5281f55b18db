"""The one place where wall-clock instants and RFC 3339 strings meet.

Only `*_at_ms` (UNIX milliseconds, UTC) is persisted or replicated. The engine
never calls `now_ms`: the node stamps each command with it at the edge.
"""

import functools
import time
from datetime import UTC, datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_s() -> float:
    return time.monotonic()


def ms_from_datetime(value: datetime) -> int:
    """Truncates to the millisecond, as API.md says finer digits are.

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

    Cached: the times of one response (a batch's due times, a claim's
    leases) mostly repeat."""
    seconds, millis = divmod(at_ms, 1000)
    return _iso_seconds(seconds) + f".{millis:03d}Z"


@functools.lru_cache(maxsize=4096)
def _iso_seconds(seconds: int) -> str:
    # Not strftime's %Y: glibc does not pad years before 1000 to four digits,
    # and RFC 3339 wants them (a preview may start in year 1).
    t = time.gmtime(seconds)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"


def iso_or_none(at_ms: int | None) -> str | None:
    return None if at_ms is None else iso_from_ms(at_ms)
