"""A `POST /v1/starts` is answered only once the leader's scheduler time
reaches the stop point (docs/semantics.md "Pre-dispatch"), whatever the
wall clock did meanwhile.

After a backward step of the wall clock, scheduler time runs at
`limits.clock_ahead_pace_percent` of real time (tempo/clock.py). A wait
counted on the monotonic clock then ends before scheduler time reaches
the stop point: the leader answered `start`, and a pause stamped after
the answer, still more than 100 ms before the run's due time, stopped
the run in apply as well, a run its worker had started. The whole-node
simulator found it (tests/sim/node_invariants.py, invariant 13)."""

import trio

from tempo import clock, ids, limits
from tempo.engine.commands import PauseJob

from .test_dispatch import OWNER, QUEUE, T0_MS, Node, at, running

STOP_MS = limits.predispatch_stop_ms


class SteppedWall:
    """A wall clock on the trio clock that a test steps, as `date -s` would."""

    def __init__(self) -> None:
        self.origin_s = trio.current_time()
        self.offset_ms = 0

    def ns(self) -> int:
        return (T0_MS + self.offset_ms) * 1_000_000 + round((trio.current_time() - self.origin_s) * 1e9)


async def test_a_starts_call_is_answered_once_scheduler_time_reaches_the_stop_point(tmp_path, origin, fast_clock):
    wall = SteppedWall()
    scheduler = clock.Clock(wall_ns=wall.ns, monotonic_ns=lambda: round(trio.current_time() * 1e9))
    made = Node(str(tmp_path / "data"))
    made.jobs.now_ms = made.dispatcher.now_ms = scheduler.now_ms
    async with running(made) as node:
        job_id = await node.create(schedule=at(4))
        [claimed] = await node.dispatcher.claim([QUEUE], "w1", 10, 0, ahead_ms=5000)
        due_ms = claimed.run.due_ms
        assert claimed.run.started_ms is not None and claimed.run.started_ms < due_ms
        # The wall clock steps back 3 s: scheduler time runs on at half pace.
        wall.offset_ms -= 3000
        scheduler.now_ms()
        await trio.sleep(0.1)
        assert scheduler.now_ms() < wall.ns() // 1_000_000 + 3000

        run_id = ids.run_id(job_id, claimed.run.nominal_ms)
        assert await node.dispatcher.starts(OWNER, "w1", [(run_id, 1)]) == [True]
        # Answered at the stop point by scheduler time, after its barrier:
        # every command stamped from now on leaves the run to start.
        assert scheduler.now_ms() >= due_ms - STOP_MS
        # A pause after the answer leaves the run claimed: it runs.
        pause_ms = scheduler.now_ms()
        assert pause_ms >= due_ms - STOP_MS
        await node.committer.submit(PauseJob(pause_ms, OWNER, job_id))
        run = node.run_of(claimed)
        assert run is not None and run.status == "claimed" and run.attempt == 1
