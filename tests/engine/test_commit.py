"""Group commit on a node alone: batches, failures, and the trio thread that
waits while a batch applies (engine/commit.py `Committer._apply`)."""

import threading
import time
from pathlib import Path

import msgspec
import pytest
import trio

from tempo import errors, limits
from tempo.engine.commands import CreateJobs, DeleteJob
from tempo.engine.commit import Committer
from tempo.engine.jobs import Jobs
from tempo.engine.store import Created, Store
from tempo.schema import JobCreate

T0 = 1_800_000_000_000


def new_job(at_ms: int, **fields):
    body = {"target": "queue:x", "schedule": {"at": "2027-01-15T08:00:00Z"}, **fields}
    return Jobs(None, None).new_job("default", msgspec.convert(body, JobCreate), at_ms, from_msgpack=False)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path):
    made = Store(str(tmp_path / "d"), map_bytes=64 << 20)
    yield made
    made.close()


async def test_commands_that_arrive_together_commit_together(store):
    committer = Committer(store)
    answers: list = []

    async def create(i: int) -> None:
        answers.append(await committer.submit(CreateJobs(T0, [new_job(T0, payload={"i": i})])))

    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        async with trio.open_nursery() as clients:
            for i in range(50):
                clients.start_soon(create, i)
        committer.close()
    assert len(answers) == 50
    assert all(isinstance(outcome, Created) and outcome.new for [outcome] in answers)
    assert committer.commands_committed == 50
    assert committer.batches_committed < 50
    assert store.applied_index() == committer.batches_committed


async def test_a_full_map_that_may_not_grow_refuses_writes_until_they_fit_again(tmp_path: Path):
    store = Store(str(tmp_path / "d"), map_bytes=1 << 20)
    committer = Committer(store)
    big = [new_job(T0, payload="x" * (limits.payload_bytes_max - 100)) for _ in range(40)]
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        with pytest.raises(errors.StorageFault) as refused:
            await committer.submit(CreateJobs(T0, big))
        assert refused.value.map_full and committer.storage.refused is not None
        # Refused at once while no new try is due: a state, not one failure.
        with pytest.raises(errors.StorageFault):
            await committer.submit(CreateJobs(T0, [new_job(T0)]))
        assert committer.storage.refused_commands == 2  # commands: a batch create is one
        # A small write fits the map: the next try (a probe, no batch came)
        # finds room, and writes go again.
        with trio.fail_after(5 * limits.storage_retry_s_max):
            while committer.storage.refused is not None:
                await trio.sleep(limits.storage_retry_s_min / 4)
        [outcome] = await committer.submit(CreateJobs(T0, [new_job(T0)]))
        committer.close()
    assert isinstance(outcome, Created)
    assert store.applied_index() == 1
    assert store.map_grown == 0 and committer.storage.refusals == 1
    store.close()


async def test_a_full_map_grows_into_the_free_disk_and_the_batch_commits(tmp_path: Path):
    store = Store(str(tmp_path / "d"), map_bytes=1 << 20, map_grows=True)
    committer = Committer(store)
    big = [new_job(T0, payload="x" * (limits.payload_bytes_max - 100)) for _ in range(40)]
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        outcomes = await committer.submit(CreateJobs(T0, big))
        committer.close()
    assert all(isinstance(outcome, Created) for outcome in outcomes)
    assert store.map_grown == 1 and committer.storage.refusals == 0
    assert store.usage()[2] >= min(store.disk_map_bytes(), limits.lmdb_map_bytes_min)
    store.close()


def test_a_store_sized_to_the_disk_takes_its_free_space_within_the_bounds(tmp_path: Path):
    store = Store(str(tmp_path / "d"))
    try:
        free_bytes = store.free_bytes()
        map_bytes = store.usage()[2]
        assert store.map_grows
        assert limits.lmdb_map_bytes_min <= map_bytes <= limits.lmdb_map_bytes_max
        # The disk's free space is read again here, after the store sized
        # its map: other writers on the machine may have taken a little.
        slack_bytes = 16 << 20
        assert map_bytes <= max(limits.lmdb_map_bytes_min, free_bytes + store.usage()[0] + slack_bytes)
    finally:
        store.close()


async def test_a_failing_apply_stops_the_committer_without_holding_the_loop(store, monkeypatch):
    def broken(index, commands):
        raise RuntimeError("apply failed")

    monkeypatch.setattr(store, "apply_commands", broken)
    committer = Committer(store)
    started_s = time.monotonic()
    with pytest.raises(BaseExceptionGroup) as failure:
        async with trio.open_nursery() as nursery:
            await nursery.start(committer.run)
            await committer.submit(DeleteJob(T0, "default", new_job(T0).job.id))
    assert failure.group_contains(RuntimeError, match="apply failed", depth=1)
    # The failure reached the loop at once.
    assert time.monotonic() - started_s < 1.0


async def test_the_trio_thread_runs_while_apply_works(store, monkeypatch):
    """Apply runs on a worker thread and the event loop is never held for
    it: other tasks keep running through the whole of a slow apply."""
    applying = threading.Event()
    applied = threading.Event()
    ticks_while_applying = 0
    apply_commands = store.apply_commands

    def slow_apply(index, commands):
        applying.set()
        try:
            time.sleep(0.2)
            return apply_commands(index, commands)
        finally:
            applied.set()

    monkeypatch.setattr(store, "apply_commands", slow_apply)
    committer = Committer(store)

    async def ticker() -> None:
        nonlocal ticks_while_applying
        while True:
            if applying.is_set() and not applied.is_set():
                ticks_while_applying += 1
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        nursery.start_soon(ticker)
        [outcome] = await committer.submit(CreateJobs(T0, [new_job(T0)]))
        committer.close()
        nursery.cancel_scope.cancel()
    assert isinstance(outcome, Created)
    # A 10 ms ticker through 200 ms of apply: about 20 ticks; blocked, none.
    assert ticks_while_applying >= 5


async def test_a_command_no_node_could_decode_is_400_and_never_applied(store, monkeypatch):
    """Issue 26: a backfill slot before 1970 reached apply on a node alone
    and crashed it (struct.error). The batch is checked as a cluster's
    leader checks an entry (engine/commandlog.py `Intake.checked`)."""
    from tempo.engine.commands import BackfillJob

    committer = Committer(store)
    created = new_job(T0)
    planted = BackfillJob(T0, "default", created.job.id, [-3_600_000])
    applied: list = []
    apply_commands = store.apply_commands
    monkeypatch.setattr(store, "apply_commands", lambda i, cs: applied.append(cs) or apply_commands(i, cs))
    answers: list = []

    async def submit(command) -> None:
        try:
            answers.append(await committer.submit(command))
        except errors.Invalid as exc:
            answers.append(exc)

    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        async with trio.open_nursery() as clients:
            clients.start_soon(submit, planted)
            clients.start_soon(submit, CreateJobs(T0, [created]))
        committer.close()
    refused = [a for a in answers if isinstance(a, errors.Invalid)]
    assert len(refused) == 1 and "outside what tempo stores" in refused[0].detail
    assert all(planted not in commands for commands in applied)
    assert committer.commands_undecodable == 1 and committer.commands_committed == 1


async def test_a_batch_stuck_past_the_bound_makes_the_node_stalled(store, monkeypatch, autojump_clock):
    committer = Committer(store)
    release = trio.Event()

    async def stuck_apply(index, commands):
        await release.wait()
        return await trio.to_thread.run_sync(store.apply_commands, index, commands)

    monkeypatch.setattr(committer, "_apply", stuck_apply)
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        assert committer.stalled() is None
        done = trio.Event()

        async def submit() -> None:
            await committer.submit(CreateJobs(T0, [new_job(T0)]))
            done.set()

        nursery.start_soon(submit)
        await trio.sleep(limits.progress_stall_s - 0.5)
        assert committer.stalled() is None
        await trio.sleep(1.0)
        reason = committer.stalled()
        assert reason is not None and reason.startswith("no progress for 3.5 s: a batch is being written")
        release.set()
        await done.wait()
        assert committer.stalled() is None
        committer.close()
