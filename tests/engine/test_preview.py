"""Preview answers in slices: a long one lets the rest of the server run."""

from datetime import UTC, datetime

import trio

from tempo import limits, schedule
from tempo.engine.jobs import preview_occurrences
from tempo.schema import PreviewIn, ScheduleIn

AFTER = datetime(2027, 3, 1, tzinfo=UTC)


async def preview_ms(body: PreviewIn, now_ms: int) -> list[int]:
    """The preview's times alone."""
    found, _ = await preview_occurrences(body, now_ms)
    return [at_ms for at_ms, _ in found]


async def test_a_preview_of_the_largest_count_yields_between_slices():
    ticks = 0
    stop = trio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await trio.lowlevel.checkpoint()

    body = PreviewIn(
        schedule=ScheduleIn(cron="*/15 * * * *", timezone="Europe/Berlin"), after=AFTER,
        count=limits.preview_count_max,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        before = ticks
        times = await preview_ms(body, 0)
        during = ticks - before
        stop.set()
    # One tick of the other task per slice boundary at least: it ran while
    # the preview was being computed, not only after.
    assert during >= limits.preview_count_max // limits.preview_slice_times - 1
    # The slices chain into exactly the times of one call.
    after_ms = int(AFTER.timestamp() * 1000)
    assert times == schedule.CronRule("*/15 * * * *", "Europe/Berlin").times_ms(after_ms, limits.preview_count_max)


async def test_a_preview_that_runs_out_stops_short():
    body = PreviewIn(schedule=ScheduleIn(cron="0 0 1 1 *"), after=datetime(9990, 6, 1, tzinfo=UTC), count=500)
    times = await preview_ms(body, 0)
    assert len(times) == 9  # 9991 to 9999: there is no year 10000
