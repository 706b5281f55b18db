"""Fairness between owners in the dispatcher, on the fast mock clock of
test_dispatch.py: runs in flight and claim rates per owner, due order kept,
waiting claimers woken when room frees, and the HTTP queues served in turn."""

import pytest
import trio
import trio.testing

from tempo import errors
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine.commands import Result
from tempo.engine.dispatch import HTTP_QUEUE
from tempo.schema import JobCreate

from .test_dispatch import OWNER, QUEUE, Node, at, fake_now_ms, running

OTHER = "other"


def limit(**per_owner: OwnerLimits):
    return lambda owner: per_owner.get(owner, UNLIMITED)


@pytest.fixture
async def node(tmp_path, origin):
    async with running(Node(str(tmp_path / "data"))) as made:
        yield made
        check_in_flight(made)


def check_in_flight(node: Node) -> None:
    """The dispatcher's invariant: in flight counts the leases, per owner."""
    d = node.dispatcher
    by_owner: dict[str, int] = {}
    for lease in d.core.leases.values():
        by_owner[lease.owner] = by_owner.get(lease.owner, 0) + 1
    assert dict(d.core.in_flight) == by_owner


async def create(node: Node, owner: str, count: int, offset_s: float = 0, target: str = "queue:work", **fields) -> list[str]:
    bodies = [JobCreate(target=target, schedule=at(offset_s), **fields) for _ in range(count)]
    outcomes = await node.jobs.create(owner, bodies, from_msgpack=False)
    assert not any(isinstance(o, errors.TempoError) for o in outcomes), outcomes
    return [o.job.id for o in outcomes]


async def report(node: Node, owner: str, claimed) -> None:
    run = claimed.run
    [outcome] = await node.dispatcher.report(owner, [Result(run.job_id, run.nominal_ms, run.attempt, True, None, None)])
    assert outcome.status == "done"


async def test_runs_in_flight_stop_at_the_limit_and_free_on_a_result(node, fast_clock):
    node.dispatcher.core.limits_of = limit(default=OwnerLimits(runs_in_flight_max=2))
    await create(node, OWNER, 5)
    first = await node.claim(wait_s=1, runs_max=10)
    assert len(first) == 2
    assert await node.claim(wait_s=0, runs_max=10) == []
    assert node.dispatcher.core.in_flight[OWNER] == 2
    assert node.dispatcher.held_back() == {OWNER: 3}
    await report(node, OWNER, first[0])
    assert node.dispatcher.core.in_flight[OWNER] == 1
    assert len(await node.claim(wait_s=0, runs_max=10)) == 1
    assert await node.claim(wait_s=0, runs_max=10) == []


async def test_a_waiting_claimer_is_woken_when_a_result_frees_room(node, fast_clock):
    node.dispatcher.core.limits_of = limit(default=OwnerLimits(runs_in_flight_max=1))
    await create(node, OWNER, 2)
    [held] = await node.claim(wait_s=1)
    got: list = []

    async def waiter():
        got.extend(await node.claim(wait_s=30))
        got.append(fake_now_ms())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(2)
        assert got == []
        reported_ms = fake_now_ms()
        await report(node, OWNER, held)
    [claimed, woken_ms] = got
    assert claimed.run.job_id != held.run.job_id
    assert woken_ms - reported_ms < 1000  # woken by the result, not by wait_s (30 s)


async def test_room_frees_when_a_lease_expires_and_wakes_the_claimer(node, fast_clock):
    node.dispatcher.core.limits_of = limit(default=OwnerLimits(runs_in_flight_max=1))
    await create(node, OWNER, 2, lease_s=5)
    [held] = await node.claim(wait_s=1)
    start_ms = fake_now_ms()
    [next_run] = await node.claim(wait_s=30)
    waited_ms = fake_now_ms() - start_ms
    assert 4000 <= waited_ms <= 7000  # the lease of 5 s, not wait_s
    assert next_run.run.job_id != held.run.job_id  # the older due run first
    assert node.dispatcher.core.in_flight[OWNER] == 1


async def test_a_delete_frees_room_and_a_leader_change_recounts(node, fast_clock):
    node.dispatcher.core.limits_of = limit(default=OwnerLimits(runs_in_flight_max=2))
    jobs = await create(node, OWNER, 4)
    claimed = await node.claim(wait_s=1, runs_max=10)
    assert len(claimed) == 2
    await node.jobs.delete(OWNER, claimed[0].run.job_id)
    assert node.dispatcher.core.in_flight[OWNER] == 1
    [third] = await node.claim(wait_s=0, runs_max=10)
    # A new leader (or a restart) rebuilds the count from the claimed runs.
    node.dispatcher.reset()
    assert node.dispatcher.core.in_flight[OWNER] == 0
    node.dispatcher.load(fake_now_ms())
    assert node.dispatcher.core.in_flight[OWNER] == 2
    assert await node.claim(wait_s=0.5, runs_max=10) == []
    await report(node, OWNER, third)
    [last] = await node.claim(wait_s=1, runs_max=10)
    assert {c.run.job_id for c in (*claimed, third, last)} == set(jobs)


async def test_the_claim_rate_follows_the_token_bucket(node, fast_clock):
    node.dispatcher.core.limits_of = limit(default=OwnerLimits(claims_per_s=5, claim_burst=5))
    await create(node, OWNER, 60)
    await trio.sleep(0.5)
    start_ms = fake_now_ms()
    sizes: list[int] = []
    while sum(sizes) < 35:
        claimed = await node.claim(wait_s=5, runs_max=100)
        assert claimed, "a claim waiting for tokens timed out"
        sizes.append(len(claimed))
    elapsed_s = (fake_now_ms() - start_ms) / 1000
    assert sizes[0] == 5  # the burst
    assert max(sizes) <= 5
    assert 5.0 <= elapsed_s <= 7.5, elapsed_s  # 30 more at 5 a second


async def test_runs_held_back_come_out_in_due_order(node, fast_clock):
    node.dispatcher.core.limits_of = limit(default=OwnerLimits(runs_in_flight_max=2))
    offsets_s = (4, 1, 3, 2, 5, 1.5)
    bodies = [JobCreate(target="queue:work", schedule=at(offset_s)) for offset_s in offsets_s]
    await node.jobs.create(OWNER, bodies, from_msgpack=False)
    await trio.sleep(6)
    due: list[int] = []
    while len(due) < 6:
        claimed = await node.claim(wait_s=1, runs_max=10)
        assert len(claimed) <= 2
        due += [c.run.due_ms for c in claimed]
        for c in claimed:
            await report(node, OWNER, c)
    assert due == sorted(due)


async def test_another_owners_queue_is_not_held_by_a_limited_owner(node, fast_clock):
    node.dispatcher.core.limits_of = limit(default=OwnerLimits(runs_in_flight_max=1, claims_per_s=1, claim_burst=1))
    await create(node, OWNER, 100)
    await create(node, OTHER, 50)
    assert len(await node.claim(wait_s=1, runs_max=100)) == 1
    others = await node.dispatcher.claim([f"{OTHER}\x00work"], "w2", 100, 1)
    assert len(others) == 50
    assert node.dispatcher.held_back() == {OWNER: 99}


async def test_the_http_queues_of_owners_are_served_in_turn(node, fast_clock):
    await create(node, OWNER, 300, target="http://127.0.0.1:9/greedy")
    await create(node, OTHER, 3, target="http://127.0.0.1:9/modest")
    await trio.sleep(0.5)
    claimed = await node.dispatcher.claim([HTTP_QUEUE], "executor", 10, 0)
    owners = [c.job.owner for c in claimed]
    assert owners.count(OTHER) == 3
    assert all(owner == OTHER for owner in owners[1:6:2]) or all(owner == OTHER for owner in owners[0:6:2])
    # One run at a time, the owners alternate while both have runs.
    await create(node, OTHER, 2, target="http://127.0.0.1:9/modest")
    await trio.sleep(0.5)
    singles = [(await node.dispatcher.claim([HTTP_QUEUE], "executor", 1, 0))[0].job.owner for _ in range(4)]
    assert sorted(singles) == [OWNER, OWNER, OTHER, OTHER]
    assert singles[0] != singles[1] and singles[2] != singles[3]


async def test_the_http_executor_skips_an_owner_at_its_limit(node, fast_clock):
    node.dispatcher.core.limits_of = limit(default=OwnerLimits(runs_in_flight_max=2))
    await create(node, OWNER, 50, target="http://127.0.0.1:9/greedy")
    await create(node, OTHER, 5, target="http://127.0.0.1:9/modest")
    await trio.sleep(0.5)
    claimed = await node.dispatcher.claim([HTTP_QUEUE], "executor", 100, 0)
    owners = sorted(c.job.owner for c in claimed)
    assert owners == [OWNER] * 2 + [OTHER] * 5
    got: list = []

    async def executor():
        got.extend(await node.dispatcher.claim([HTTP_QUEUE], "executor", 100, 30))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(executor)
        await trio.sleep(1)
        assert got == []
        await report(node, OWNER, next(c for c in claimed if c.job.owner == OWNER))
    assert [c.job.owner for c in got] == [OWNER]


async def test_no_limits_claims_as_before(node, fast_clock):
    await create(node, OWNER, 30)
    assert len(await node.claim(wait_s=1, runs_max=100)) == 30
    assert node.dispatcher.core.in_flight[OWNER] == 30
    assert node.dispatcher.held_back() == {}
    assert QUEUE.startswith(OWNER)
