"""The dispatch loop sleeps until its tick has work (docs/design.md
"Dispatch on the leader"): `DispatchCore.next_tick_ms` plans the wake-up,
an applied entry wakes the loop before it, and the overlap loop runs when a
tick sets runs aside, not once a dispatch tick.

The driver tests run on a mock clock that stands still unless a test moves
it: a loop that waits for a dispatch tick's sleep to end never gets there,
so what reaches a claimer came from the wake-ups above."""

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from tempo import clock, errors, limits
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.dispatch_core import DispatchCore
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.schema import JobCreate, ScheduleIn

T0_MS = 1_800_000_000_000
OWNER = "default"
QUEUE = f"{OWNER}\x00work"


# -- the core's plan -------------------------------------------------------------


@pytest.fixture
def core(tmp_path):
    store = Store(str(tmp_path / "data"))
    made = DispatchCore(store, T0_MS)
    made.load(T0_MS, 0.0)
    yield made
    store.close()


def test_an_idle_core_asks_for_the_next_tick_after_the_idle_bound(core):
    assert core.next_tick_ms(T0_MS) == T0_MS + limits.dispatch_idle_wake_ms


def test_a_wheel_slot_due_soon_is_the_wake_up(core, tmp_path):
    due_ms = T0_MS + 3 * limits.dispatch_tick_ms + 4
    core.wheel.add(b"run", due_ms)
    # The start of the run's slot: the tick there takes what is due by then.
    slot_ms = due_ms - due_ms % limits.dispatch_tick_ms
    assert core.next_tick_ms(T0_MS) == slot_ms
    core.wheel.add(b"sooner", T0_MS + 1)
    assert core.next_tick_ms(T0_MS) == T0_MS + limits.dispatch_tick_ms, "never sooner than a dispatch tick"


def test_the_loader_window_and_rereads_bring_the_wake_up_forward(core):
    window_ms = core.loaded_until_ms - core.readahead_ms
    assert window_ms > T0_MS
    assert core.next_tick_ms(window_ms - 50) == window_ms
    core.rereads.add(OWNER)
    assert core.next_tick_ms(T0_MS) == T0_MS + limits.dispatch_tick_ms


def test_a_run_coming_within_the_pre_dispatch_horizon_is_the_wake_up(core):
    due_ms = T0_MS + limits.claim_ahead_ms_max + 40
    core.ahead_heap.append((due_ms, b"run"))
    assert core.next_tick_ms(T0_MS) == due_ms - limits.claim_ahead_ms_max


# -- the driver on a still clock -------------------------------------------------


@pytest.fixture
def still_clock():
    return trio.testing.MockClock(rate=0)


class Rig:
    def __init__(self, tmp_path) -> None:
        origin_s = trio.current_time()
        self.now_ms = lambda: T0_MS + int((trio.current_time() - origin_s) * 1000)
        self.store = Store(str(tmp_path / "data"))
        self.committer = Committer(self.store)
        self.jobs = Jobs(self.store, self.committer, now_ms=self.now_ms)
        self.dispatcher = Dispatcher(self.store, self.committer, now_ms=self.now_ms)
        self.ticks = 0
        tick = self.dispatcher.core.tick

        def counted(now_ms: int, mono_s: float) -> bool:
            self.ticks += 1
            return tick(now_ms, mono_s)

        self.dispatcher.core.tick = counted  # type: ignore[method-assign]

    async def create(self, **fields: object) -> str:
        """A job whose first run is due now: a one-off, or with `overlap`
        a job every minute starting now."""
        now = clock.datetime_from_ms(self.now_ms())
        schedule = ScheduleIn(every_s=60, start_at=now) if "overlap" in fields else ScheduleIn(at=now)
        body = JobCreate(target="queue:work", schedule=schedule, **fields)  # type: ignore[arg-type]
        [created] = await self.jobs.create(OWNER, [body], from_msgpack=False)
        assert not isinstance(created, errors.TempoError), created
        return created.job.id


async def settle(done: Callable[[], bool]) -> None:
    """Lets every task run (the commits' threads too, for up to 5 s of
    real time) until `done()`, without moving the clock."""
    deadline_s = time.monotonic() + 5
    while not done() and time.monotonic() < deadline_s:
        await trio.testing.wait_all_tasks_blocked()
        await trio.to_thread.run_sync(time.sleep, 0.005)


@asynccontextmanager
async def running(tmp_path) -> AsyncIterator[tuple[Rig, trio.Nursery]]:
    """A rig whose committer and dispatch loop run, until the block ends."""
    rig = Rig(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.committer.run)
        await nursery.start(rig.dispatcher.run)
        yield rig, nursery
        nursery.cancel_scope.cancel()
    rig.store.close()


def claimer(rig: Rig, nursery: trio.Nursery) -> list[str]:
    """A claim of one run, waiting up to 30 s; the list gets its job ID."""
    got: list[str] = []

    async def claim() -> None:
        claimed = await rig.dispatcher.claim([QUEUE], "w", 1, 30)
        got.extend(c.run.job_id for c in claimed)

    nursery.start_soon(claim)
    return got


async def test_a_run_fed_while_the_loop_sleeps_reaches_a_waiting_claimer(tmp_path, still_clock):
    async with running(tmp_path) as (rig, nursery):
        await trio.testing.wait_all_tasks_blocked()
        # It looks once (nothing due), then waits for its queue's event.
        got = claimer(rig, nursery)
        await trio.testing.wait_all_tasks_blocked()
        job_id = await rig.create()
        await settle(lambda: bool(got))
        assert got == [job_id]


async def test_a_due_run_of_a_job_with_an_overlap_policy_is_decided_without_a_tick(tmp_path, still_clock):
    async with running(tmp_path) as (rig, nursery):
        job_id = await rig.create(overlap="skip")
        got = claimer(rig, nursery)
        # Set aside by the tick the entry woke, then let go by apply's
        # overlap decision: no sleep of a dispatch tick in between.
        await settle(lambda: bool(got))
        assert got == [job_id]


async def test_an_idle_loop_ticks_once_per_idle_bound(tmp_path, still_clock):
    async with running(tmp_path) as (rig, _):
        await trio.testing.wait_all_tasks_blocked()
        before = rig.ticks
        for _ in range(100):
            still_clock.jump(limits.dispatch_tick_ms / 1000)
            await trio.testing.wait_all_tasks_blocked()
        # A second in dispatch ticks: a wake-up per idle bound (100 ms), not
        # one a tick.
        assert 1 <= rig.ticks - before <= 1000 // limits.dispatch_idle_wake_ms
