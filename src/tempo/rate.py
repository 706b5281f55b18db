"""A token bucket, the rate limit of claims and creates per owner.

Pure: time comes in as `now_ms`, never read here, so tests drive it with a
mock clock. A rate is a duration, so callers pass monotonic milliseconds
(clock.py), which a wall-clock step does not move.
"""

import math

# Float sums of refills may fall a hair short of a whole token.
_EPSILON = 1e-9


class TokenBucket:
    """Holds up to `burst` tokens and gains `rate_per_s` a second; starts
    full. A take may drive it below zero (a batch larger than what it holds):
    the debt is paid off by refills before the next take fits."""

    __slots__ = ("at_ms", "burst", "rate_per_s", "tokens")

    def __init__(self, rate_per_s: float, burst: int, now_ms: int):
        assert rate_per_s > 0, "rate_per_s"
        assert burst >= 1, "burst"
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.tokens = float(burst)
        self.at_ms = now_ms

    def _refill(self, now_ms: int) -> None:
        # Time that went back (it cannot on the monotonic clock) adds nothing
        # and takes nothing away.
        if now_ms > self.at_ms:
            gained = (now_ms - self.at_ms) * self.rate_per_s / 1000
            self.tokens = min(float(self.burst), self.tokens + gained)
            self.at_ms = now_ms

    def available(self, now_ms: int) -> int:
        """Whole tokens held now (0 while in debt)."""
        self._refill(now_ms)
        return max(0, math.floor(self.tokens + _EPSILON))

    def take(self, now_ms: int, count: int) -> None:
        assert count >= 0, "count"
        self._refill(now_ms)
        self.tokens -= count

    def wait_ms(self, now_ms: int, count: int) -> int:
        """Milliseconds until `count` tokens are held, or the bucket is full
        when `count` is more than it holds (0: now)."""
        self._refill(now_ms)
        missing = min(count, self.burst) - self.tokens
        if missing <= _EPSILON:
            return 0
        return max(1, math.ceil(missing * 1000 / self.rate_per_s))
