"""Operations per second of tempo.wheel.TimingWheel for 100,000 items.

Run: python bench/wheel.py  (prints one line per operation). The clock is read
here, in the benchmark, never in the wheel.
"""

from __future__ import annotations

import random
import time

from tempo.wheel import TimingWheel

ITEMS = 100_000
T0_MS = 1_800_000_000_000
SPREAD_MS = 3_600_000  # due times spread over one hour, the common case
SEED = 20_261_202


def rate(label: str, ops: int, seconds: float) -> None:
    print(f"{label:<32} {ops / seconds:>12,.0f} ops/s  ({ops:,} in {seconds * 1e3:.1f} ms)")


def main() -> None:
    rng = random.Random(SEED)
    dues_ms = [T0_MS + rng.randrange(1, SPREAD_MS) for _ in range(ITEMS)]

    wheel = TimingWheel(T0_MS)
    start = time.perf_counter()
    for item, due_ms in enumerate(dues_ms):
        wheel.add(item, due_ms)
    rate("add", ITEMS, time.perf_counter() - start)

    start = time.perf_counter()
    for item in range(0, ITEMS, 2):
        wheel.cancel(item)
    rate("cancel (half)", ITEMS // 2, time.perf_counter() - start)

    # Advance in 10 ms steps, as a driver waking every tick would.
    start = time.perf_counter()
    released = 0
    steps = 0
    for now_ms in range(T0_MS, T0_MS + SPREAD_MS + 10, 10):
        released += len(wheel.advance(now_ms))
        steps += 1
    elapsed = time.perf_counter() - start
    assert released == ITEMS // 2 and len(wheel) == 0
    rate("advance by 10 ms (calls)", steps, elapsed)
    rate("advance by 10 ms (items out)", released, elapsed)

    # One big jump releasing everything at once.
    wheel = TimingWheel(T0_MS)
    for item, due_ms in enumerate(dues_ms):
        wheel.add(item, due_ms)
    start = time.perf_counter()
    released = len(wheel.advance(T0_MS + SPREAD_MS))
    rate("advance 1 h in one call (items)", released, time.perf_counter() - start)


if __name__ == "__main__":
    main()
