"""Fixtures shared by the engine tests: an empty store, and the fast mock
clock the dispatch tests run on (test_dispatch.py says why). Two empty
stores side by side (`two_stores`) are in tests/conftest.py."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from tempo.engine.store import Store

from .test_dispatch import CLOCK_RATE, _origin_s


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """An empty store of the test's own (a file that needs another defines
    its own `store`)."""
    s = Store(str(tmp_path / "s"), map_bytes=64 << 20)
    yield s
    s.close()


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
