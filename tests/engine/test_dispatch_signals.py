"""The dispatcher's driver on trio's autojump clock: the lease check wakes
at a run's timeout rather than at its next round, and a worker's signals
(`Dispatcher.signals`, docs/api.md "Signals") answer as soon as one of its
runs is to stop. The commands are applied in the trio thread, so the clock
jumps only when every task waits on it (docs/semantics.md "Run timeouts",
"Cancelling a run")."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from tempo import clock, errors, ids
from tempo.engine.commands import CancelRun, Command
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Changes, Outcome, Store
from tempo.schema import JobCreate, RetryIn, ScheduleIn

T0_MS = 1_800_000_000_000
OWNER = "default"
QUEUE = f"{OWNER}\x00work"


class InlineLog:
    """A `CommandLog` that applies each command at once, in the trio
    thread, and hands its changes to the listeners before answering."""

    def __init__(self, store: Store):
        self.store = store
        self.index = store.applied_index()
        self.listeners: list = []

    async def submit(self, command: Command) -> Outcome | list[Outcome]:
        self.index += 1
        [outcome], changes = self.store.apply_commands(self.index, [command])
        await self._tell(changes)
        return outcome

    async def _tell(self, changes: Changes) -> None:
        for listener in self.listeners:
            answer = listener(changes)
            if answer is not None:
                await answer


class Node:
    def __init__(self, path: str):
        self.origin_s = trio.current_time()
        self.store = Store(path)
        self.log = InlineLog(self.store)
        self.jobs = Jobs(self.store, self.log, now_ms=self.now_ms)  # type: ignore[arg-type]
        self.dispatcher = Dispatcher(self.store, self.log, now_ms=self.now_ms)  # type: ignore[arg-type]

    def now_ms(self) -> int:
        return T0_MS + round((trio.current_time() - self.origin_s) * 1000)

    async def create(self, **fields) -> str:
        fields.setdefault("target", "queue:work")
        fields.setdefault("schedule", ScheduleIn(at=clock.datetime_from_ms(T0_MS)))
        [created] = await self.jobs.create(OWNER, [JobCreate(**fields)], from_msgpack=False)
        assert not isinstance(created, errors.TempoError), created
        return created.job.id


@asynccontextmanager
async def running(tmp_path) -> AsyncIterator[Node]:
    node = Node(str(tmp_path / "data"))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.dispatcher.run)
            yield node
            nursery.cancel_scope.cancel()
    finally:
        node.store.close()


async def test_a_timeout_ends_its_attempt_at_its_timeout_not_at_the_next_lease_check(tmp_path, autojump_clock) -> None:
    async with running(tmp_path) as node:
        job_id = await node.create(timeout_s=3, lease_s=60, retry=RetryIn(max_attempts=1))
        # Half-way between two rounds of the lease check (every 100 ms).
        await trio.sleep(0.05)
        [claimed] = await node.dispatcher.claim([QUEUE], "w1", 1, 0)
        timeout_at_ms = claimed.run.timeout_at_ms
        assert timeout_at_ms is not None
        await trio.sleep(3.5)
        run = node.store.get_run_any(job_id, claimed.run.nominal_ms)
        assert run is not None and run.status == "failed" and run.error == "timeout"
        assert run.finished_ms is not None and 0 <= run.finished_ms - timeout_at_ms <= 5, (
            run.finished_ms - timeout_at_ms)


async def test_signals_answer_when_a_run_is_cancelled_or_times_out(tmp_path, autojump_clock) -> None:
    async with running(tmp_path) as node:
        cancelled_id = await node.create(lease_s=300)
        timed_id = await node.create(lease_s=300, timeout_s=2, retry=RetryIn(max_attempts=1))
        claimed = await node.dispatcher.claim([QUEUE], "w1", 2, 0)
        assert len(claimed) == 2
        by_job = {c.run.job_id: c.run for c in claimed}
        asked = [(ids.run_id(r.job_id, r.nominal_ms), r.attempt) for r in by_job.values()]
        cancelled_run = by_job[cancelled_id]

        # Nothing to stop: the poll waits its whole wait.
        started_s = trio.current_time()
        assert await node.dispatcher.signals(OWNER, asked, 0.5) == {}
        assert trio.current_time() - started_s >= 0.5

        async def cancel_later() -> None:
            await trio.sleep(0.7)
            await node.log.submit(CancelRun(node.now_ms(), OWNER, cancelled_id, cancelled_run.nominal_ms))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_later)
            started_s = trio.current_time()
            answer = await node.dispatcher.signals(OWNER, asked, 30)
        assert answer == {ids.run_id(cancelled_id, cancelled_run.nominal_ms): "requested"}
        assert abs(trio.current_time() - started_s - 0.7) < 0.01

        # The cancelled run keeps answering at once; left out, the poll
        # waits for the timeout (2 s after the claim), and answers it then.
        assert await node.dispatcher.signals(OWNER, asked, 30) == answer
        timed = [(ids.run_id(timed_id, by_job[timed_id].nominal_ms), by_job[timed_id].attempt)]
        answer = await node.dispatcher.signals(OWNER, timed, 30)
        assert answer == {timed[0][0]: "timeout"}
        assert abs(node.now_ms() - (by_job[timed_id].timeout_at_ms or 0)) <= 5
        # Another owner's runs, unknown runs and stale attempts are not
        # this poll's business: it waits.
        assert await node.dispatcher.signals("other", asked, 0.2) == {}
        assert await node.dispatcher.signals(OWNER, [(asked[0][0], 7), ("r_bogus", 1)], 0.2) == {}
        assert node.dispatcher.stop_waiters_count() == 0
