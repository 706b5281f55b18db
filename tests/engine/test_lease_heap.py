"""The lease heap stays bounded: heartbeats add no entries to it, and the
entries of finished runs are dropped once they outnumber the live leases
(`limits.lease_heap_slack_entries`). On the fast mock clock of
test_dispatch.py."""

import trio

from tempo import errors, ids, limits
from tempo.engine.commands import Result
from tempo.schema import JobCreate

from .test_dispatch import OWNER, Node, at, running


def heap_entries(node: Node) -> int:
    return node.dispatcher.core.lease_heap_entries


async def test_heartbeats_on_one_lease_add_no_heap_entries(tmp_path, origin, fast_clock):
    async with running(Node(str(tmp_path / "data"))) as node:
        await node.create(schedule=at(0), lease_s=30)
        [claimed] = await node.claim(wait_s=1)
        run_id = ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)
        before = heap_entries(node)
        assert before == 1
        for _ in range(1000):
            node.dispatcher.heartbeat(OWNER, run_id, 1)
        assert heap_entries(node) == before
        # The lease still runs out 30 s after the last heartbeat, not before.
        await trio.sleep(25)
        assert node.run_of(claimed).status == "claimed"
        await trio.sleep(10)
        assert node.run_of(claimed).status == "waiting"
        assert heap_entries(node) == 0


async def test_a_released_lease_ends_at_once_after_heartbeats(tmp_path, origin, fast_clock):
    async with running(Node(str(tmp_path / "data"))) as node:
        await node.create(schedule=at(0), lease_s=30)
        [claimed] = await node.claim(wait_s=1)
        run_id = ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)
        for _ in range(10):
            node.dispatcher.heartbeat(OWNER, run_id, 1)
        node.dispatcher.release([claimed])
        await trio.sleep(1)
        assert node.run_of(claimed).status == "waiting"
        assert node.dispatcher.core.counters["expired"] == 1
        assert heap_entries(node) <= 1  # at most the released lease's first entry, stale


async def test_finished_runs_leave_a_bounded_number_of_heap_entries(tmp_path, origin, fast_clock, monkeypatch):
    monkeypatch.setattr(limits, "lease_heap_slack_entries", 100)
    async with running(Node(str(tmp_path / "data"))) as node:
        bodies = [JobCreate(target="queue:work", schedule=at(0), lease_s=3600) for _ in range(1500)]
        created = await node.jobs.create(OWNER, bodies, from_msgpack=False)
        assert not any(isinstance(c, errors.TempoError) for c in created)
        claimed = []
        while len(claimed) < 1500:
            claimed += await node.claim(wait_s=1, runs_max=1000)
        kept = claimed[:200]
        for one in claimed[200:]:
            run = one.run
            await node.dispatcher.report(OWNER, [Result(run.job_id, run.nominal_ms, run.attempt, True, None, None)])
            leases = len(node.dispatcher.core.leases)
            assert heap_entries(node) <= 2 * leases + 100
        assert len(node.dispatcher.core.leases) == len(kept)
        for one in kept:
            node.dispatcher.heartbeat(OWNER, ids.run_id(one.run.job_id, one.run.nominal_ms), 1)
        assert heap_entries(node) <= 2 * len(kept) + 100


async def test_the_lease_heap_is_a_gauge_in_the_metrics(tmp_path, origin, fast_clock):
    from tempo.net.api import Api
    from tempo.node import Standalone

    async with running(Node(str(tmp_path / "data"))) as node:
        api = Api(node.store, node.jobs, node.dispatcher, node=Standalone(node.store.applied_index))
        await node.create(schedule=at(0), lease_s=30)
        await node.claim(wait_s=1)
        lines = api._dispatch_metrics()
        assert "# TYPE tempo_lease_heap_entries gauge" in lines
        assert "tempo_lease_heap_entries 1" in lines
