"""One owner's share of the dispatcher's memory (docs/operations.md "Fairness
between owners"): an owner holding `limits.dispatch_owner_runs_max` loaded
runs is skipped by the loader, its later runs wait in the table and are read
again from its skip point as its runs drain, in due order, none lost, none
twice; other owners' runs load and are claimed on time. On the fast mock
clock of test_dispatch.py, with the bounds patched low."""

import pytest
import trio
import trio.testing

from tempo import errors, limits
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine.commands import Result
from tempo.schema import JobCreate

from . import test_dispatch as base
from .test_dispatch import OWNER, QUEUE, T0_MS, Node, at, fake_now_ms

OTHER = "other"
OTHER_QUEUE = f"{OTHER}\x00work"
SHARE = 20
PER_MINUTE = 30  # each of A's minutes fills its share alone
MINUTES = 5


@pytest.fixture
def fast_clock():
    return trio.testing.MockClock(rate=base.CLOCK_RATE)


@pytest.fixture
async def origin(fast_clock):
    base._origin_s.append(trio.current_time())
    yield
    base._origin_s.pop()


@pytest.fixture
def small(monkeypatch):
    """Memory for 60 runs, a share of 20 per owner: without the share, A's
    held-back runs alone would stop the loader."""
    monkeypatch.setattr(limits, "dispatch_memory_runs_max", 60)
    monkeypatch.setattr(limits, "dispatch_owner_runs_max", SHARE)
    monkeypatch.setattr(limits, "dispatch_owner_low_water_runs", SHARE // 2)


@pytest.fixture
async def node(tmp_path, origin, small):
    made = Node(str(tmp_path / "data"))
    # A: at most two runs in flight, so its due runs are held back.
    made.dispatcher.limits_of = lambda owner: OwnerLimits(runs_in_flight_max=2) if owner == OWNER else UNLIMITED
    async with trio.open_nursery() as nursery:
        await nursery.start(made.committer.run)
        await nursery.start(made.dispatcher.run)
        yield made
        nursery.cancel_scope.cancel()
    made.store.close()


async def create(node: Node, owner: str, offsets_s: list[float]) -> list[str]:
    # Leases of an hour: a held run's lease does not expire during a test.
    bodies = [JobCreate(target="queue:work", schedule=at(offset_s), lease_s=3600) for offset_s in offsets_s]
    outcomes = await node.jobs.create(owner, bodies, from_msgpack=False)
    assert not any(isinstance(o, errors.TempoError) for o in outcomes), outcomes
    return [o.job.id for o in outcomes]


async def create_backlog(node: Node) -> list[str]:
    """A's runs: 30 in each of five minutes, far more than its share."""
    offsets_s = [60 * minute + i / 10 for minute in range(MINUTES) for i in range(PER_MINUTE)]
    return await create(node, OWNER, offsets_s)


def check(node: Node) -> None:
    node.dispatcher.check_memory()
    for queue, ready in node.dispatcher.ready.items():
        live = [k for k in ready if node.dispatcher.queue_of.get(k, ("",))[0] == queue]
        assert len(live) == len(set(live)), "a run twice in a ready queue"


async def drain(node: Node, count: int, held: list | None = None, on_step=None) -> list:
    """Claims A's runs two at a time (its limit) and reports each, until
    `count` runs came out; `held` are runs claimed before, reported first."""
    out = list(held or [])
    pending = list(held or [])
    while len(out) < count or pending:
        for claimed in pending:
            run = claimed.run
            result = Result(run.job_id, run.nominal_ms, run.attempt, True, None, None)
            [outcome] = await node.dispatcher.report(OWNER, [result])
            assert outcome.status == "done"
        check(node)
        if on_step is not None:
            await on_step(len(out))
        if len(out) >= count:
            break
        pending = await node.claim(wait_s=2, runs_max=10)
        assert pending, f"stalled after {len(out)} runs"
        assert len(pending) <= 2
        out += pending
    return out


def assert_all_once_in_order(out: list, jobs: list[str]) -> None:
    ids_out = [c.run.job_id for c in out]
    assert len(ids_out) == len(set(ids_out)), "a run handed out twice"
    assert set(ids_out) == set(jobs), "a run lost"
    due = [c.run.due_ms for c in out]
    assert due == sorted(due), "not in due order"


async def test_another_owner_is_claimed_on_time_while_one_is_held_back(node, fast_clock):
    jobs = await create_backlog(node)
    others = await create(node, OTHER, [4 * 60 + 1 + i / 10 for i in range(5)])
    held = await node.claim(wait_s=1, runs_max=10)
    assert len(held) == 2  # and nobody reports them: A's due runs pile up
    lateness_ms: list[int] = []
    claimed: list = []
    while len(claimed) < len(others) and fake_now_ms() < T0_MS + 5 * 60_000:
        got = await node.dispatcher.claim([OTHER_QUEUE], "w2", 10, 10)
        lateness_ms += [fake_now_ms() - c.run.due_ms for c in got]
        claimed += got
    assert sorted(c.run.job_id for c in claimed) == sorted(others)
    assert max(lateness_ms) <= 1000  # on time, though A holds 148 due runs
    d = node.dispatcher
    assert d.skipped[OWNER] <= T0_MS + 2 * 60_000  # A skipped early on
    assert d.loaded_of[OWNER] <= SHARE + PER_MINUTE  # its share, plus one minute's scan
    assert d.held_back() == {OWNER: d.loaded_of[OWNER]}
    check(node)
    out = await drain(node, len(jobs), held)
    assert_all_once_in_order(out, jobs)
    assert d.skipped == {} and d.loaded_of == {}


async def test_a_leader_change_in_the_middle_loses_and_doubles_nothing(node, fast_clock):
    jobs = await create_backlog(node)
    await trio.sleep(MINUTES * 60)
    assert OWNER in node.dispatcher.skipped

    async def restart(done: int) -> None:
        if done == 60:
            # A new leader: memory rebuilt from the table, A skipped again.
            node.dispatcher.reset()
            node.dispatcher.load(fake_now_ms())
            assert node.dispatcher.in_flight[OWNER] == 0  # the two were reported
            assert OWNER in node.dispatcher.skipped
            check(node)

    out = await drain(node, len(jobs), on_step=restart)
    assert_all_once_in_order(out, jobs)


async def test_a_leader_change_with_runs_in_flight_recounts_them(node, fast_clock):
    jobs = await create_backlog(node)
    await trio.sleep(MINUTES * 60)
    first = await drain(node, 50)
    held = await node.claim(wait_s=1, runs_max=10)
    assert len(held) == 2
    node.dispatcher.reset()
    node.dispatcher.load(fake_now_ms())
    assert node.dispatcher.in_flight[OWNER] == 2  # leased again, not loaded as waiting
    assert await node.claim(wait_s=0.5) == []
    check(node)
    out = first + await drain(node, len(jobs) - len(first), held)
    assert_all_once_in_order(out, jobs)


async def test_runs_created_while_skipped_wait_in_the_table_and_come_out_last(node, fast_clock):
    jobs = await create_backlog(node)
    await trio.sleep(MINUTES * 60)
    d = node.dispatcher
    skip_ms = d.skipped[OWNER]
    now_s = (fake_now_ms() - T0_MS) / 1000
    late = await create(node, OWNER, [now_s + i / 10 for i in range(10)])
    loaded_jobs = {job.id for _, job in d.queue_of.values()}
    assert not loaded_jobs & set(late)  # due after the skip point: not in memory
    assert d.skipped[OWNER] == skip_ms
    check(node)
    out = await drain(node, len(jobs) + len(late))
    assert_all_once_in_order(out, jobs + late)
    assert [c.run.job_id for c in out[-10:]] == late


async def test_a_skipped_owner_paused_or_deleted_drops_out_cleanly(node, fast_clock):
    jobs = await create_backlog(node)
    await trio.sleep(MINUTES * 60)
    d = node.dispatcher
    assert OWNER in d.skipped
    loaded = {job.id for _, job in d.queue_of.values()}
    skipped = [j for j in jobs if j not in loaded]
    deleted, paused = skipped[:40], skipped[40:80]
    for job_id in deleted:
        await node.jobs.delete(OWNER, job_id)
    for job_id in paused:
        await node.jobs.pause(OWNER, job_id)
    check(node)
    rest = [j for j in jobs if j not in deleted and j not in paused]
    out = await drain(node, len(rest))
    assert_all_once_in_order(out, rest)
    assert await node.claim(wait_s=2) == []
    assert d.skipped == {} and d.loaded_of == {}


async def test_a_whole_owner_deleted_while_skipped_is_forgotten(node, fast_clock):
    jobs = await create_backlog(node)
    await trio.sleep(MINUTES * 60)
    d = node.dispatcher
    assert OWNER in d.skipped
    for job_id in jobs:
        await node.jobs.delete(OWNER, job_id)
    await trio.sleep(1)
    assert d.skipped == {} and d.loaded_of == {} and d.queue_of == {}
    check(node)


async def test_runs_fed_into_a_full_memory_move_the_skip_point_back_in_due_order(node, fast_clock):
    # A's runs due in 40 s, created inside the loaded window, go into memory
    # through the change feed; then 40 runs due in 10 s: 30 fit (memory has
    # room for 60), the 31st finds A over its share and memory full.
    later = await create(node, OWNER, [40 + i / 10 for i in range(PER_MINUTE)])
    d = node.dispatcher
    assert d.loaded_of[OWNER] == PER_MINUTE
    sooner = await create(node, OWNER, [10] * 40)
    # A is skipped from 10 s on, and its runs due later went back to the
    # table, so they come out after the 10 sooner runs that did not fit.
    assert d.counters["feed_skips"] == 1
    assert d.skipped == {OWNER: T0_MS + 10_000}
    assert d.loaded_of[OWNER] == 30
    assert not {job.id for _, job in d.queue_of.values()} & set(later)
    check(node)
    await trio.sleep(45)
    out = await drain(node, len(later) + len(sooner))
    assert_all_once_in_order(out, later + sooner)
    assert {c.run.job_id for c in out[:40]} == set(sooner)


async def test_one_owners_spike_goes_into_memory_while_there_is_room(node, fast_clock, monkeypatch):
    monkeypatch.setattr(limits, "dispatch_memory_runs_max", 200)
    spike = await create(node, OWNER, [5] * 150)  # through the change feed
    d = node.dispatcher
    assert d.loaded_of[OWNER] == 150 and d.skipped == {}
    check(node)
    d.limits_of = lambda owner: UNLIMITED
    claimed = await node.claim(wait_s=10, runs_max=1000)
    assert sorted(c.run.job_id for c in claimed) == sorted(spike)


async def test_an_owner_below_its_share_loads_a_whole_minute_as_before(node, fast_clock, monkeypatch):
    monkeypatch.setattr(limits, "dispatch_memory_runs_max", 200)
    # A spike: 100 runs due in one second of minute 1, read by the loader
    # (not the feed) 30 s ahead. The minute loads whole, as the total bound
    # lets one minute's scan past it; only later minutes are skipped.
    jobs = await create(node, OWNER, [90 + i / 100 for i in range(100)])
    await create(node, OWNER, [150 + i for i in range(10)])
    d = node.dispatcher
    assert d.loaded_of[OWNER] == 0
    await trio.sleep(35)
    assert d.loaded_of[OWNER] == 100
    await trio.sleep(60)  # the loader reaches minute 2, 30 s ahead
    assert d.skipped == {OWNER: T0_MS + 120_000}
    assert d.loaded_of[OWNER] == 100
    check(node)
    d.limits_of = lambda owner: UNLIMITED
    claimed = await node.claim(wait_s=1, runs_max=1000)
    assert sorted(c.run.job_id for c in claimed) == sorted(jobs)
    await trio.sleep(0.5)  # A is below its low water mark: minute 2 is read again
    assert d.skipped == {} and d.loaded_of[OWNER] == 10
    check(node)
    assert QUEUE.startswith(OWNER)
