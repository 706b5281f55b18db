"""The log lines of a disk-full episode (docs/operations.md "Disk full"):
one when writes become refused, one when a write commits again, each when
it happens. A probe that fits while batches do not (the disk has the probe's
4 MiB and not a batch's) must not log a resume, or the real one goes
unlogged."""

import logging

import pytest
import trio

from tempo import errors, limits
from tempo.engine.commands import NotifyCursor
from tempo.engine.commit import Committer
from tempo.engine.store import Changes


class _Disk:
    """A store whose batches fit only once `room` is set, and whose probe
    fits once `probe_fits` is."""

    map_grows = False

    def __init__(self) -> None:
        self.room = False
        self.probe_fits = False

    def applied_index(self) -> int:
        return 0

    def apply_commands(self, index, commands):
        if not self.room:
            raise errors.StorageFault("the disk is full")
        return [None] * len(commands), Changes([], [], [], set())

    def probe(self):
        return None if self.probe_fits else errors.StorageFault("the disk is full")

    def grow_map(self) -> bool:
        return False


async def _write(committer: Committer) -> str:
    try:
        await committer.submit(NotifyCursor(1_800_000_000_000, 1))
    except errors.StorageFault:
        return "507"
    return "ok"


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch):
    """Retries within tens of milliseconds, on the real clock: the probe
    runs on a worker thread, which a mock clock would jump past."""
    monkeypatch.setattr(limits, "storage_retry_s_min", 0.01)
    monkeypatch.setattr(limits, "storage_retry_s_max", 0.05)


_SETTLE_S = 0.5  # many retries' worth


def _lines(caplog) -> list[str]:
    return [r.getMessage().split(":")[0] for r in caplog.records if r.name == "tempo.storage"]


async def test_each_transition_is_logged_when_it_happens(caplog):
    caplog.set_level(logging.INFO, "tempo.storage")
    disk = _Disk()
    committer = Committer(disk)  # type: ignore[arg-type] - only what the committer calls is there
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        assert await _write(committer) == "507"
        assert _lines(caplog) == ["writes refused"]
        disk.probe_fits = True  # room for a probe, not for a batch
        for _ in range(3):
            await trio.sleep(_SETTLE_S)  # probes run, and then a batch is tried
            assert await _write(committer) == "507"
        assert _lines(caplog) == ["writes refused"], "no resume while every batch is refused"
        assert committer.storage.refusals == 1
        disk.room = True
        await trio.sleep(_SETTLE_S)
        assert await _write(committer) == "ok"
        assert _lines(caplog) == ["writes refused", "writes resume"]
        assert committer.storage.refused is None
        # A new episode is logged as one.
        disk.room = disk.probe_fits = False
        assert await _write(committer) == "507"
        assert _lines(caplog) == ["writes refused", "writes resume", "writes refused"]
        assert committer.storage.refusals == 2
        nursery.cancel_scope.cancel()


async def test_a_probe_that_fits_makes_the_node_ready_again():
    """With no write to try, the probe is what tells /readyz that writes
    go again (docs/operations.md "Disk full"), logged or not."""
    disk = _Disk()
    committer = Committer(disk)  # type: ignore[arg-type] - only what the committer calls is there
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        assert await _write(committer) == "507"
        assert committer.storage.refused is not None
        disk.probe_fits = True
        await trio.sleep(_SETTLE_S)
        assert committer.storage.refused is None
        nursery.cancel_scope.cancel()
