"""The dispatcher in one process, on a fast mock clock: leases, heartbeats,
retries, fencing, repeating jobs and restarts, without waiting in real time.

The clock runs `CLOCK_RATE` times faster than real time. (An autojump clock
would stall here: the commit thread's wake-up is not a deadline it can jump
to.) A commit's few real milliseconds are a fraction of a virtual second, so
the margins below are wide."""

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest
import trio
import trio.testing

from tempo import clock, errors, ids
from tempo.engine import keys
from tempo.engine.commands import ClaimRuns, Result
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Commit, Dispatcher, Wait
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.schema import JobCreate, RetryIn, ScheduleIn

T0_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z
OWNER = "default"
QUEUE = f"{OWNER}\x00work"


_origin_s: list[float] = []


def fake_now_ms() -> int:
    """Wall-clock milliseconds on the autojump clock: T0 when the test began."""
    return T0_MS + int((trio.current_time() - _origin_s[-1]) * 1000)


CLOCK_RATE = 40


class Node:
    """Store, committer, jobs service and dispatcher, as `tempo serve` wires them."""

    def __init__(self, path: str):
        self.store = Store(path)
        self.committer = Committer(self.store)
        self.jobs = Jobs(self.store, self.committer, now_ms=fake_now_ms)
        self.dispatcher = Dispatcher(self.store, self.committer, now_ms=fake_now_ms)

    async def create(self, **fields) -> str:
        fields.setdefault("target", "queue:work")
        [created] = await self.jobs.create(OWNER, [JobCreate(**fields)], from_msgpack=False)
        assert not isinstance(created, errors.TempoError), created
        return created.job.id

    async def claim(self, wait_s: float = 0, runs_max: int = 10, worker: str = "w1"):
        return await self.dispatcher.claim([QUEUE], worker, runs_max, wait_s)

    async def report(self, claimed, ok: bool, attempt: int | None = None):
        run = claimed.run
        result = Result(run.job_id, run.nominal_ms, attempt or run.attempt, ok, None, None if ok else "boom")
        [outcome] = await self.dispatcher.report(OWNER, [result])
        return outcome

    def run_of(self, claimed):
        return self.store.get_run_any(claimed.run.job_id, claimed.run.nominal_ms)


@asynccontextmanager
async def running(made: Node) -> AsyncIterator[Node]:
    """`made` with its group commit and dispatcher running; its store closed after."""
    async with trio.open_nursery() as nursery:
        await nursery.start(made.committer.run)
        await nursery.start(made.dispatcher.run)
        yield made
        nursery.cancel_scope.cancel()
    made.store.close()


@pytest.fixture
async def node(tmp_path, origin):
    async with running(Node(str(tmp_path / "data"))) as made:
        yield made


def at(offset_s: float) -> ScheduleIn:
    return ScheduleIn(at=clock.datetime_from_ms(T0_MS + int(offset_s * 1000)))


async def test_a_one_off_is_claimed_when_due_not_before(node, fast_clock):
    await node.create(schedule=at(5))
    assert await node.claim() == []
    [claimed] = await node.claim(wait_s=10)
    lateness_ms = fake_now_ms() - claimed.run.due_ms
    assert claimed.run.due_ms == T0_MS + 5000
    # Not before it was due; how soon after is a timing figure, measured in
    # bench/spike.py rather than asserted on a shared machine.
    assert lateness_ms >= 0
    assert claimed.run.attempt == 1 and claimed.run.status == "claimed"


async def test_the_claim_sequence_runs_step_by_step_without_io(node, fast_clock):
    """`claim_steps`, driven by hand as the node simulator drives it: a
    `Wait` while nothing is due, a `Commit` of the claim once it is; a
    fault thrown in gives the runs back, an answer sent in claims them."""
    await node.create(schedule=at(5))
    steps = node.dispatcher.claim_steps([QUEUE], "w1", 10, trio.current_time() + 10)
    step = next(steps)
    assert isinstance(step, Wait) and step.queues == [QUEUE]
    steps.close()
    await trio.sleep(6)
    steps = node.dispatcher.claim_steps([QUEUE], "w1", 10, trio.current_time())
    step = next(steps)
    assert isinstance(step, Commit) and isinstance(step.command, ClaimRuns)
    with pytest.raises(errors.Overloaded):
        steps.throw(errors.Overloaded("too many writes"))
    steps = node.dispatcher.claim_steps([QUEUE], "w2", 10, trio.current_time())
    step = next(steps)
    assert isinstance(step, Commit)
    answer = await node.committer.submit(step.command)
    with pytest.raises(StopIteration) as done:
        steps.send(answer)
    [claimed] = done.value.value
    assert claimed.run.attempt == 1 and claimed.run.worker == "w2" and claimed.run.status == "claimed"


async def test_an_expired_lease_redelivers_with_a_new_attempt_and_fences_the_old(node, fast_clock):
    await node.create(schedule=at(0), lease_s=5)
    [first] = await node.claim(wait_s=1)
    await trio.sleep(5.5)
    assert node.run_of(first).status == "waiting"
    with pytest.raises(errors.StaleAttempt):
        node.dispatcher.heartbeat(OWNER, ids.run_id(first.run.job_id, first.run.nominal_ms), 1)
    [second] = await node.claim(wait_s=1, worker="w2")
    assert second.run.attempt == 2 and second.run.worker == "w2"
    assert isinstance(await node.report(first, ok=True), errors.StaleAttempt)
    done = await node.report(second, ok=True)
    assert done.status == "done" and done.attempt == 2


async def test_heartbeats_keep_a_run_past_its_lease(node, fast_clock):
    await node.create(schedule=at(0), lease_s=40)
    [claimed] = await node.claim(wait_s=1)
    run_id = ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)
    for _ in range(6):  # 120 s, three leases' worth
        await trio.sleep(20)
        expires_ms = node.dispatcher.heartbeat(OWNER, run_id, 1)
        assert abs(expires_ms - (fake_now_ms() + 40_000)) <= 50
    assert node.run_of(claimed).status == "claimed"
    await trio.sleep(45)
    assert node.run_of(claimed).status == "waiting"


async def test_retries_follow_backoff_then_fail_with_events(node, fast_clock):
    job_id = await node.create(schedule=at(0), retry=RetryIn(max_attempts=3, backoff_s=[100, 300]))
    [c1] = await node.claim(wait_s=1)
    waiting = await node.report(c1, ok=False)
    assert waiting.status == "waiting" and waiting.attempt == 1
    reported_ms = fake_now_ms()
    assert reported_ms - 10_000 <= waiting.due_ms - 100_000 <= reported_ms
    assert await node.claim(wait_s=(waiting.due_ms - fake_now_ms()) / 1000 - 10) == []
    [c2] = await node.claim(wait_s=30)
    assert c2.run.attempt == 2 and fake_now_ms() >= waiting.due_ms
    second = await node.report(c2, ok=False)
    assert second.due_ms - c2.run.due_ms >= 300_000  # the second gap of backoff_s
    [c3] = await node.claim(wait_s=320)
    failed = await node.report(c3, ok=False)
    assert failed.status == "failed" and failed.attempt == 3
    assert node.store.get_job(OWNER, job_id).state == "completed"
    events = [e for _, e in node.store.list_events(OWNER, 0, 10) if e.type != "job.created"]
    assert [e.type for e in events] == ["run.failed", "job.completed"]
    assert events[0].detail["attempt"] == 3


async def test_the_same_result_twice_is_harmless_and_a_different_one_stale(node, fast_clock):
    await node.create(schedule=at(0))
    [claimed] = await node.claim(wait_s=1)
    first = await node.report(claimed, ok=True)
    again = await node.report(claimed, ok=True)
    assert first.status == again.status == "done" and again.finished_ms == first.finished_ms
    assert isinstance(await node.report(claimed, ok=False), errors.StaleAttempt)


async def test_a_repeating_job_keeps_its_schedule_while_a_run_is_slow(node, fast_clock):
    job_id = await node.create(schedule=ScheduleIn(every_s=10))
    created_ms = node.store.get_job(OWNER, job_id).created_at_ms
    [c1] = await node.claim(wait_s=11)
    assert c1.run.nominal_ms == created_ms + 10_000
    # The next run exists from the moment of the claim, though c1 never reports.
    [c2] = await node.claim(wait_s=11)
    assert c2.run.nominal_ms == created_ms + 20_000
    assert node.store.get_job(OWNER, job_id).next_run_at_ms == created_ms + 30_000


async def test_missed_occurrences_coalesce_into_one_run_due_at_once(node, fast_clock):
    job_id = await node.create(schedule=ScheduleIn(every_s=10), lease_s=600)
    created_ms = node.store.get_job(OWNER, job_id).created_at_ms
    [_c1] = await node.claim(wait_s=11)
    # Nobody claims for 65 s: the run due at +20 waits past its next slot,
    # so it is missed with +30..+60, and the latest missed slot runs.
    await trio.sleep(65)
    [c2] = await node.claim(wait_s=1)
    assert c2.run.nominal_ms == created_ms + 70_000  # the latest missed slot, not +20 or +30
    [row] = [r for r in node.store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=10, cursor_ms=None)[0]
             if r.status == "missed"]
    assert (row.nominal_ms, row.missed_until_ms, row.missed_count) == (created_ms + 20_000, created_ms + 70_000, 5)
    assert c2.run.due_ms <= c2.run.started_ms  # due at once
    assert node.store.get_job(OWNER, job_id).slot_ms == created_ms + 80_000


async def test_pause_and_delete_take_runs_out_of_the_ready_queue(node, fast_clock):
    paused = await node.create(schedule=at(0))
    deleted = await node.create(schedule=at(0))
    kept = await node.create(schedule=at(0))
    await trio.sleep(0.1)
    await node.jobs.pause(OWNER, paused)
    await node.jobs.delete(OWNER, deleted)
    claimed = await node.claim(wait_s=1)
    assert [c.run.job_id for c in claimed] == [kept]


async def test_claims_come_out_in_due_order_across_queues(node, fast_clock):
    # Due far enough ahead that a slow create (an fsync on a loaded machine,
    # while the clock runs 40 times fast) cannot make a one-off past due at
    # its creation, and so due at once, out of the order this test sets.
    late = await node.create(schedule=at(120), target="queue:b")
    early = await node.create(schedule=at(60), target="queue:a")
    await trio.sleep(121)
    with trio.fail_after(60):  # both due; on a loaded machine the tick may lag the fast clock
        while node.dispatcher.core.ready_count() < 2:
            await trio.sleep(0.1)
    claimed = await node.dispatcher.claim([f"{OWNER}\x00a", f"{OWNER}\x00b"], "w", 10, 0)
    assert [c.run.job_id for c in claimed] == [early, late]
    assert [c.run.due_ms for c in claimed] == [T0_MS + 60_000, T0_MS + 120_000]


async def test_a_restart_gives_claimed_runs_a_full_lease_and_reloads_waiting_runs(tmp_path, origin, fast_clock):
    path = str(tmp_path / "data")
    first = Node(path)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.committer.run)
        await nursery.start(first.dispatcher.run)
        await first.create(schedule=at(0), lease_s=10)
        waiting_id = await first.create(schedule=at(30))
        [claimed] = await first.claim(wait_s=1)
        await trio.sleep(8)  # 2 s of the lease left when the node goes away
        nursery.cancel_scope.cancel()
    first.store.close()
    second = Node(path)
    async with trio.open_nursery() as nursery:
        await nursery.start(second.committer.run)
        await nursery.start(second.dispatcher.run)
        restart_s = trio.current_time()
        lease = second.dispatcher.core.leases[(claimed.run.job_id, claimed.run.nominal_ms)]
        assert abs(lease.deadline_s - (restart_s + 10)) <= 0.05
        await trio.sleep(5)  # past the old lease, within the new one
        assert second.run_of(claimed).status == "claimed"
        assert (await second.report(claimed, ok=True)).status == "done"
        [later] = await second.claim(wait_s=60)
        assert later.run.job_id == waiting_id and later.run.due_ms == T0_MS + 30_000
        nursery.cancel_scope.cancel()
    second.store.close()


async def test_claims_from_an_unknown_queue_are_empty(node, fast_clock):
    assert await node.dispatcher.claim([f"{OWNER}\x00nobody"], "w", 10, 0.5) == []


def test_the_fake_clock_starts_where_the_tests_say():
    assert datetime.fromtimestamp(T0_MS / 1000, UTC).year == 2027


async def test_pause_cancels_retries_and_triggered_runs_too(node, fast_clock):
    job_id = await node.create(schedule=at(0), retry=RetryIn(max_attempts=3, backoff_s=[5]))
    [claimed] = await node.claim(wait_s=1)
    assert (await node.report(claimed, ok=False)).status == "waiting"
    triggered = await node.jobs.trigger(OWNER, job_id)
    await node.jobs.pause(OWNER, job_id)
    assert node.run_of(claimed).status == "cancelled"
    assert node.store.get_run_any(job_id, triggered.nominal_ms).status == "cancelled"
    assert await node.claim(wait_s=10) == []


async def test_a_result_for_an_attempt_that_never_was_or_expired_is_stale(node, fast_clock):
    await node.create(schedule=at(0), lease_s=5)
    await trio.sleep(0.5)
    [waiting_key] = list(node.dispatcher.core.queue_of)
    job_id, nominal_ms = keys.slot_of(waiting_key)
    never = Result(job_id, nominal_ms, 0, False, None, "made up")
    assert isinstance((await node.dispatcher.report(OWNER, [never]))[0], errors.StaleAttempt)
    [claimed] = await node.claim(wait_s=1)
    await trio.sleep(6)  # the lease expires: the run waits for attempt 2
    assert node.run_of(claimed).status == "waiting"
    assert isinstance(await node.report(claimed, ok=False), errors.StaleAttempt)


async def test_a_backlog_streams_through_memory_oldest_first(node, fast_clock, monkeypatch):
    from tempo import limits

    monkeypatch.setattr(limits, "dispatch_memory_runs_max", 50)
    for minute in range(5):
        bodies = [JobCreate(target="queue:work", schedule=at(60 * minute + i / 10)) for i in range(40)]
        await node.jobs.create(OWNER, bodies, from_msgpack=False)
    await trio.sleep(5 * 60)  # nobody claims: 200 runs are overdue, over five minutes
    due_seen: list[int] = []
    while len(due_seen) < 200:
        assert len(node.dispatcher.core.queue_of) <= 50 + 40  # the cap, plus one minute's scan
        claimed = await node.claim(wait_s=1, runs_max=30)
        assert claimed, f"stalled after {len(due_seen)}"
        due_seen += [c.run.due_ms for c in claimed]
    assert due_seen == sorted(due_seen)
    assert due_seen[-1] - due_seen[0] >= 4 * 60_000  # five minutes of due times, in order


async def test_a_claimed_run_not_loaded_yet_keeps_its_heartbeat(node, fast_clock):
    await node.create(schedule=at(0), lease_s=30)
    [claimed] = await node.claim(wait_s=1)
    node.dispatcher.core.leases.clear()  # as after a restart, before its minute is loaded
    node.dispatcher.core.in_flight.clear()
    run_id = ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)
    assert abs(node.dispatcher.heartbeat(OWNER, run_id, 1) - (fake_now_ms() + 30_000)) <= 50
    with pytest.raises(errors.StaleAttempt):
        node.dispatcher.heartbeat(OWNER, run_id, 2)


async def test_claim_lateness_falls_in_the_first_bucket_whose_bound_it_does_not_exceed(node, fast_clock):
    from tempo.engine.dispatch import LATENESS_BUCKETS_S

    d = node.dispatcher
    d.core.observe_lateness([-0.5, 0.0, 0.01, 0.0100001, 1.0, 60.0, 60.5, 1e9])
    expected = [0] * (len(LATENESS_BUCKETS_S) + 1)
    for i in (0, 0, 0, 1, LATENESS_BUCKETS_S.index(1.0), len(LATENESS_BUCKETS_S) - 1, -1, -1):
        expected[i] += 1
    assert d.core.lateness_buckets == expected
    assert d.core.lateness_sum_s == pytest.approx(0.01 + 0.0100001 + 1.0 + 60.0 + 60.5 + 1e9)  # early counts as 0


async def test_a_claim_that_cannot_be_written_leaves_its_runs_to_the_next_claim(node, fast_clock, monkeypatch):
    await node.create(schedule=at(0))
    await trio.sleep(0.5)  # due, in the ready queue
    real_submit = node.committer.submit

    async def disk_full(command):
        raise errors.StorageFault("the disk is full")

    monkeypatch.setattr(node.committer, "submit", disk_full)
    with pytest.raises(errors.StorageFault):
        await node.claim()
    monkeypatch.setattr(node.committer, "submit", real_submit)
    [claimed] = await node.claim()
    assert claimed.run.attempt == 1 and claimed.run.nominal_ms == T0_MS


async def test_a_wheel_slot_larger_than_a_slice_moves_over_several_ticks_in_due_order(
    tmp_path, origin, fast_clock, monkeypatch
):
    # 250 runs due within one wheel slot, and a slice of 40: each tick moves
    # at most 40 to the ready queue and says that more are left, and all of
    # them get there, in due order, over several ticks.
    monkeypatch.setattr("tempo.limits.dispatch_slice_runs", 40)
    made = Node(str(tmp_path / "data"))
    async with trio.open_nursery() as nursery:
        await nursery.start(made.committer.run)
        dispatcher = made.dispatcher
        dispatcher.load(fake_now_ms())
        offsets_ms = [3000 + (i * 37) % 9 for i in range(250)]
        jobs = [JobCreate(target="queue:work", schedule=at(ms / 1000)) for ms in offsets_ms]
        created = await made.jobs.create(OWNER, jobs, from_msgpack=False)
        assert not any(isinstance(c, errors.TempoError) for c in created)
        assert len(dispatcher.core.wheel) == 250
        now_ms = T0_MS + 4000
        ticks = []
        while True:
            more = dispatcher.tick(now_ms)
            ticks.append(dispatcher.core.ready_count())
            if not more:
                break
        assert len(ticks) >= 250 // 40 + 1
        assert all(b - a <= 40 for a, b in zip([0, *ticks], ticks, strict=False))
        assert ticks[-1] == 250 and len(dispatcher.core.wheel) == 0
        dues = [keys.due_of(k) for k in dispatcher.core.ready[QUEUE]]
        assert dues == sorted(dues) and dues[0] == T0_MS + 3000
        await trio.sleep(5)  # the claim's stamp past every due time
        claimed = await made.dispatcher.claim([QUEUE], "w1", 1000, 0)
        assert [c.run.due_ms for c in claimed] == sorted(T0_MS + ms for ms in offsets_ms)
        nursery.cancel_scope.cancel()
    made.store.close()


async def test_a_batch_larger_than_a_slice_enters_memory_over_several_steps(tmp_path, origin, fast_clock, monkeypatch):
    # The commit listener takes a batch of 250 new runs into the wheel 40 at a
    # time: another task runs between the slices (and sees part of them), and
    # the batch's answer comes once all of them are in.
    monkeypatch.setattr("tempo.limits.dispatch_slice_runs", 40)
    made = Node(str(tmp_path / "data"))
    seen: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(made.committer.run)
        dispatcher = made.dispatcher
        dispatcher.load(fake_now_ms())

        async def watch():
            while True:
                seen.append(len(dispatcher.core.wheel))
                await trio.lowlevel.checkpoint()

        nursery.start_soon(watch)
        jobs = [JobCreate(target="queue:work", schedule=at(3 + i / 1000)) for i in range(250)]
        created = await made.jobs.create(OWNER, jobs, from_msgpack=False)
        assert not any(isinstance(c, errors.TempoError) for c in created)
        assert len(dispatcher.core.wheel) == 250
        # Trio runs the watcher once per scheduling batch, before or after the
        # listener: it sees at most two slices between two looks.
        assert len({n for n in seen if 0 < n < 250}) >= 3
        assert all(b - a <= 2 * 40 for a, b in itertools.pairwise(seen))
        dispatcher.core.check_memory()
        nursery.cancel_scope.cancel()
    made.store.close()
