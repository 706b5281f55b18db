"""Fixtures shared by the engine tests: the fast mock clock the dispatch
tests run on (test_dispatch.py says why), and two empty stores side by side
for tests that compare what two stores hold."""

from pathlib import Path

import pytest
import trio
import trio.testing

from tempo.engine.store import Store

from .test_dispatch import CLOCK_RATE, _origin_s


@pytest.fixture
def fast_clock():
    # Each test names this fixture itself: pytest-trio runs a test on a clock
    # only when the test function receives it directly.
    return trio.testing.MockClock(rate=CLOCK_RATE)


@pytest.fixture
async def origin(fast_clock):
    _origin_s.append(trio.current_time())
    yield
    _origin_s.pop()


@pytest.fixture
def two_stores(tmp_path: Path):
    made = [Store(str(tmp_path / name), map_bytes=64 << 20) for name in ("one", "two")]
    yield made
    for store in made:
        store.close()
