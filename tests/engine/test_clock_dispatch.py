"""The dispatcher on a scheduler clock (clock.Clock) whose wall clock steps,
on the fast mock clock of test_dispatch.py: nothing crashes, runs keep
coming, no slot runs twice, heartbeated leases hold, and a restart with the
wall clock an hour back continues from the stamps (docs/semantics.md
"Clocks")."""

import trio

from tempo import clock, errors, ids
from tempo.engine.commands import Result
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.schema import JobCreate, RetryIn, ScheduleIn

from .test_dispatch import OWNER, QUEUE, T0_MS, at, fake_now_ms, running

HOUR_MS = 3600_000


class SteppedNode:
    """test_dispatch's node with the clock `tempo serve` gives it: a
    `clock.Clock` over the mock clock, whose wall clock is off by
    `offset_ms[0]` (a test steps it by changing that)."""

    def __init__(self, path: str, offset_ms: list[int]):
        self.store = Store(path)
        self.committer = Committer(self.store)
        self.clock = clock.Clock(
            floor_ms=self.store.stamp_ms(),
            wall_ns=lambda: (fake_now_ms() + offset_ms[0]) * 1_000_000,
            monotonic_ns=lambda: int(trio.current_time() * 1e9),
        )
        self.committer.listeners.append(lambda changes: self.clock.observe(changes.stamp_ms))
        self.jobs = Jobs(self.store, self.committer, now_ms=self.clock.now_ms)
        self.dispatcher = Dispatcher(self.store, self.committer, now_ms=self.clock.now_ms)

    async def create(self, **fields) -> str:
        fields.setdefault("target", "queue:work")
        [created] = await self.jobs.create(OWNER, [JobCreate(**fields)], from_msgpack=False)
        assert not isinstance(created, errors.TempoError), created
        return created.job.id

    async def claim(self, wait_s: float = 0, worker: str = "w1", queue: str = QUEUE):
        return await self.dispatcher.claim([queue], worker, 1, wait_s)


async def test_steps_back_neither_crash_nor_stall_nor_run_a_slot_twice(tmp_path, origin, fast_clock):
    offset_ms = [0]
    async with running(SteppedNode(str(tmp_path / "data"), offset_ms)) as node:
        await node.create(schedule=ScheduleIn(every_s=1))
        nominals: list[int] = []
        for step_ms in (0, -50, -200, -1000, -HOUR_MS):
            offset_ms[0] += step_ms
            for _ in range(3):
                # At half pace while a step back is absorbed: a run every 2 s
                # (an hour would be the step's size). Loose: the mock clock
                # runs 40 times faster than a loaded machine may keep up with.
                with trio.fail_after(20):
                    [claimed] = await node.claim(wait_s=20)
                nominals.append(claimed.run.nominal_ms)
        assert nominals == sorted(set(nominals)), "a slot ran twice, or out of order"
        assert node.clock.steps == {"backward": 4, "forward": 0}


async def test_a_step_forward_keeps_a_heartbeating_workers_lease(tmp_path, origin, fast_clock):
    offset_ms = [0]
    async with running(SteppedNode(str(tmp_path / "data"), offset_ms)) as node:
        await node.create(schedule=at(0), lease_s=120)
        [held] = await node.claim(wait_s=1)
        run_id = ids.run_id(held.run.job_id, held.run.nominal_ms)
        offset_ms[0] += HOUR_MS
        for _ in range(6):  # 30 s of heartbeats every 5 s, an hour later by the wall clock
            expires_ms = node.dispatcher.heartbeat(OWNER, run_id, 1)
            assert expires_ms >= fake_now_ms() + HOUR_MS + 119_000
            assert await node.claim(wait_s=5, worker="other") == []
        # Without heartbeats the lease runs out after its 120 s, not before.
        assert await node.claim(wait_s=100, worker="other") == []
        [again] = await node.claim(wait_s=30, worker="other")
        assert again.run.attempt == 2 and again.run.worker == "other"
        assert node.clock.steps == {"backward": 0, "forward": 1}


async def test_a_restart_with_the_wall_clock_an_hour_back_continues_from_the_stamps(tmp_path, origin, fast_clock):
    path = str(tmp_path / "data")
    offset_ms = [0]
    async with running(SteppedNode(path, offset_ms)) as first:
        older = await first.create(schedule=at(0), lease_s=5)
        [held] = await first.claim(wait_s=1)
        paused = await first.create(target="queue:every", schedule=ScheduleIn(every_s=2))
        await first.jobs.pause(OWNER, paused)
        failing = await first.create(target="queue:retried", schedule=at(0), retry=RetryIn(max_attempts=3, backoff_s=[1]))
        [failed] = await first.claim(wait_s=1, queue=f"{OWNER}\x00retried")
        assert failed.run.job_id == failing
        await first.dispatcher.report(OWNER, [_result(failed, ok=False)])
        last_stamp_ms = first.store.stamp_ms()
    assert last_stamp_ms >= T0_MS
    offset_ms[0] = -HOUR_MS
    async with running(SteppedNode(path, offset_ms)) as second:
        restarted_s = trio.current_time()
        assert second.clock.now_ms() >= last_stamp_ms
        resumed = await second.jobs.resume(OWNER, paused)
        assert resumed.state == "active" and resumed.next_run_at_ms is not None
        assert resumed.next_run_at_ms > last_stamp_ms
        # The next slot of the grid is at most 2 s of scheduler time away: 4 s at half pace.
        with trio.fail_after(10):
            [run] = await second.claim(wait_s=10, queue=f"{OWNER}\x00every")
        assert run.run.nominal_ms > last_stamp_ms  # a slot in the future, not one that ran
        with trio.fail_after(10):
            [retry] = await second.claim(wait_s=10, queue=f"{OWNER}\x00retried")
        assert retry.run.attempt == 2
        # A full lease of 5 s from the restart, then handed out again.
        [again] = await second.claim(wait_s=15, worker="fresh")
        assert again.run.job_id == held.run.job_id and again.run.attempt == 2
        assert trio.current_time() - restarted_s <= 5 + 3
        newer = await second.create(schedule=at(60))
        listed, _ = second.store.list_jobs(OWNER, 10, None)
        assert listed[0].id == newer and older in [j.id for j in listed]


def _result(claimed, ok: bool) -> Result:
    run = claimed.run
    return Result(run.job_id, run.nominal_ms, run.attempt, ok, None, None if ok else "boom")


async def test_a_restart_behind_a_backlog_still_leases_every_claimed_run(tmp_path, origin, fast_clock, monkeypatch):
    """Memory full of overdue waiting runs stops the loader short of a
    claimed run's minute; the run gets its full lease from the restart all
    the same, and when its worker is gone it waits for attempt 2 after it."""
    from tempo import limits

    path = str(tmp_path / "data")
    offset_ms = [0]
    async with running(SteppedNode(path, offset_ms)) as first:
        bodies = [JobCreate(target="queue:backlog", schedule=at(i / 2)) for i in range(120)]  # two minutes' worth
        await first.jobs.create(OWNER, bodies, from_msgpack=False)
        await trio.sleep(150)  # nobody claims them
        await first.create(schedule=at(150), lease_s=5)
        [held] = await first.claim(wait_s=1)
    monkeypatch.setattr(limits, "dispatch_memory_runs_max", 50)
    async with running(SteppedNode(path, offset_ms)) as second:
        await trio.sleep(0.5)
        d = second.dispatcher
        assert len(d.core.queue_of) >= 50 and d.core.loaded_until_ms <= held.run.due_ms, "the backlog fills memory"
        await trio.sleep(6)  # past the full lease from the restart
        after = second.store.get_run_any(held.run.job_id, held.run.nominal_ms)
        assert after.status == "waiting" and after.error == "lease expired" and after.attempt == 1
