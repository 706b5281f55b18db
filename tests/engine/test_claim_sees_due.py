"""A claim sees every run due by its own time, not only those the dispatch
tick has moved to a ready queue (docs/api.md "POST /v1/claim": runs "that are due
now").

The clock here is a mock that stands still unless a test moves it: the
dispatch loop ticks once when it starts, then sleeps until the clock moves
again, so whether a claim sees a run cannot depend on when the loop last
ticked. (Before the fix, runs that fell due after the last tick stayed in the
timing wheel until the next one, up to `dispatch_tick_ms` later: of two
claims in a row on a queue of 3 due runs, the second often got none.)"""

import pytest
import trio
import trio.testing

from tempo import clock, errors, limits
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.schema import JobCreate, ScheduleIn

T0_MS = 1_800_000_000_000
OWNER = "default"
QUEUE = f"{OWNER}\x00work"


@pytest.fixture
def still_clock():
    return trio.testing.MockClock(rate=0)


async def test_two_claims_in_a_row_each_take_one_of_three_due_runs(tmp_path, still_clock):
    origin_s = trio.current_time()

    def now_ms() -> int:
        return T0_MS + int((trio.current_time() - origin_s) * 1000)

    store = Store(str(tmp_path / "data"))
    committer = Committer(store)
    jobs = Jobs(store, committer, now_ms=now_ms)
    dispatcher = Dispatcher(store, committer, now_ms=now_ms)

    async def create() -> str:
        body = JobCreate(target="queue:work", schedule=ScheduleIn(at=clock.datetime_from_ms(T0_MS)))
        [created] = await jobs.create(OWNER, [body], from_msgpack=False)
        assert not isinstance(created, errors.TempoError), created
        return created.job.id

    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        await nursery.start(dispatcher.run)
        first = await create()
        # The dispatch loop ticks once more: the first run is in its ready queue.
        still_clock.jump(limits.dispatch_tick_ms / 1000)
        await trio.testing.wait_all_tasks_blocked()
        later = [await create(), await create()]
        # No tick from here on: the clock stands still.
        claimed = [await dispatcher.claim([QUEUE], "w", 1, 0) for _ in range(3)]
        assert [[c.run.job_id for c in one] for one in claimed] == [[first], [later[0]], [later[1]]]
        assert await dispatcher.claim([QUEUE], "w", 1, 0) == []
        nursery.cancel_scope.cancel()
    store.close()

