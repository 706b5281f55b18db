"""A claim whose command is refused before it is proposed, while the node
goes on leading (a leadership transfer that is still in progress, then
times out), gives its runs back: the next claim gets them (found by the
whole-node simulator, tests/sim/node_cluster.py)."""

from datetime import UTC, datetime
from pathlib import Path

import trio
import trio.testing

from tempo import errors
from tempo.engine.commandlog import Answer, Listener
from tempo.engine.commands import ClaimRuns, Command
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.schema import JobCreate, ScheduleIn

T0_MS = 1_800_000_000_000
OWNER = "default"


class TransferringLog:
    """The commit seam as a leader in a leadership transfer answers it: the
    first `refusals` claims are refused `NotLeader` before they are
    proposed; the node leads on."""

    def __init__(self, inner: Committer, refusals: int) -> None:
        self.inner = inner
        self.refusals = refusals

    @property
    def listeners(self) -> list[Listener]:
        return self.inner.listeners

    async def submit(self, command: Command) -> Answer:
        if isinstance(command, ClaimRuns) and self.refusals:
            self.refusals -= 1
            raise errors.NotLeader("this node is not the leader")
        return await self.inner.submit(command)


async def test_a_claim_refused_while_the_node_leads_on_gives_its_runs_back(tmp_path: Path) -> None:
    origin_s = trio.current_time()

    def now_ms() -> int:
        return T0_MS + int((trio.current_time() - origin_s) * 1000)

    store = Store(str(tmp_path / "d"), map_bytes=1 << 26)
    committer = Committer(store)
    jobs = Jobs(store, committer, now_ms=now_ms)
    seam = TransferringLog(committer, refusals=1)
    dispatcher = Dispatcher(store, seam, now_ms=now_ms)  # type: ignore[arg-type]  # the seam's part it uses
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(committer.run)
            await nursery.start(dispatcher.run)
            at = datetime.fromtimestamp(T0_MS / 1000, UTC)
            [created] = await jobs.create(OWNER, [JobCreate("queue:work", ScheduleIn(at=at))], from_msgpack=False)
            assert not isinstance(created, errors.TempoError)
            queue = f"{OWNER}\x00work"
            try:
                await dispatcher.claim([queue], "w1", 10, 0)
                raise AssertionError("the refused claim raised nothing")
            except errors.NotLeader:
                pass
            with trio.fail_after(5):
                claimed = await dispatcher.claim([queue], "w1", 10, 1)
            assert [c.run.job_id for c in claimed] == [created.job.id]
            nursery.cancel_scope.cancel()
    finally:
        store.close()
