"""A cluster member that cannot persist (node/replica.py): three replicas in
one process, messages between them in memory, real stores; one store's
commits fail as LMDB's do on a full disk (`mdb_txn_commit: Input/output
error`, the transaction aborted) until the test gives the room back.

A follower that cannot persist sends nothing, so acknowledges nothing, and
the other two go on; a leader that cannot persist answers 507 and stops
leading, and the other two elect a leader and go on. Once there is room,
the node catches up to the same tables.
"""

import random
from collections.abc import AsyncIterator
from pathlib import Path

import lmdb
import msgspec
import pytest
import trio

from tempo import errors
from tempo.engine.commands import CreateJobs
from tempo.engine.jobs import Jobs
from tempo.engine.raftlog import RaftLog
from tempo.engine.store import Created, Store
from tempo.node.replica import Phase, Replica
from tempo.raft import AppendResponse
from tempo.schema import JobCreate

T0 = 1_800_000_000_000
IDS = (1, 2, 3)
ELECTION_WAIT_S = 10.0
CATCH_UP_WAIT_S = 15.0


def create() -> CreateJobs:
    body = msgspec.convert({"target": "queue:x", "schedule": {"at": "2027-01-15T08:00:00Z"}}, JobCreate)
    return CreateJobs(T0, [Jobs(None, None).new_job("default", body, T0, from_msgpack=False)])  # type: ignore[arg-type]


class FullDiskTxn:
    """A write transaction whose commit fails as on a full disk."""

    def __init__(self, txn: lmdb.Transaction):
        self._txn = txn

    def __getattr__(self, name: str):
        return getattr(self._txn, name)

    def commit(self) -> None:
        self._txn.abort()
        raise lmdb.Error("mdb_txn_commit: Input/output error")


class FlakyEnv:
    """`Store.env`, with write transactions that fail while `full()`."""

    def __init__(self, env: lmdb.Environment, full):
        self._env = env
        self._full = full

    def __getattr__(self, name: str):
        return getattr(self._env, name)

    def begin(self, write: bool = False, **kwargs):
        txn = self._env.begin(write=write, **kwargs)
        return FullDiskTxn(txn) if write and self._full() else txn


class Cluster:
    def __init__(self, root: Path, seed: int):
        self.stores = {i: Store(str(root / f"n{i}"), map_bytes=64 << 20) for i in IDS}
        self.replicas: dict[int, Replica] = {}
        self.full: set[int] = set()  # nodes whose disk is full
        self.sent: dict[int, list] = {i: [] for i in IDS}  # what each node sent while its disk was full
        for i in IDS:
            store = self.stores[i]
            store.env = FlakyEnv(store.env, lambda i=i: i in self.full)  # type: ignore[assignment]
            store.free_bytes = lambda i=i: 0 if i in self.full else 1 << 40  # type: ignore[method-assign]
            self.replicas[i] = Replica(
                store, RaftLog(store, IDS), i, self._sender(i), rng=random.Random(seed * 10 + i)
            )

    def _sender(self, src: int):
        def send(messages: list) -> None:
            if src in self.full:
                self.sent[src].extend(messages)
            token = trio.lowlevel.current_trio_token()
            for message in messages:
                token.run_sync_soon(self.replicas[message.dst].step, message)

        return send

    async def leader(self, among: tuple[int, ...] = IDS) -> int:
        with trio.fail_after(ELECTION_WAIT_S):
            while True:
                leading = [i for i in among if self.replicas[i].phase is Phase.LEADING]
                if leading:
                    return leading[0]
                await trio.sleep(0.05)

    async def converged(self) -> None:
        with trio.fail_after(CATCH_UP_WAIT_S):
            while True:
                # The stores first; a replica's applied_index follows once its
                # driver resumes after the write that applied the entries.
                digests = {self.stores[i].digest() for i in IDS}
                applied = {self.replicas[i].applied_index for i in IDS}
                if len(digests) == 1 and len(applied) == 1:
                    return
                await trio.sleep(0.1)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    made = Cluster(tmp_path, seed=random.randrange(1 << 16))
    async with trio.open_nursery() as nursery:
        for replica in made.replicas.values():
            await nursery.start(replica.run)
        yield made
        nursery.cancel_scope.cancel()
    for store in made.stores.values():
        store.env._env.close()


async def test_a_follower_that_cannot_persist_acknowledges_nothing_and_the_others_go_on(cluster: Cluster):
    leader_id = await cluster.leader()
    leader = cluster.replicas[leader_id]
    [outcome] = await leader.submit(create())
    assert isinstance(outcome, Created)
    follower_id = next(i for i in IDS if i != leader_id)
    follower = cluster.replicas[follower_id]
    cluster.full.add(follower_id)
    [outcome] = await leader.submit(create())
    await trio.sleep(0.5)  # a write in flight when the disk filled ends
    stored = follower.raft_log.last_index()  # what it has on disk

    for _ in range(20):
        [outcome] = await leader.submit(create())
        assert isinstance(outcome, Created)  # the leader and the other follower are a majority
    await trio.sleep(1.0)  # heartbeats, and retries of the follower's write
    assert follower.storage.refused is not None
    assert follower.storage.refused.detail == "the disk is full"
    assert follower.raft_log.last_index() == stored  # nothing more on its disk
    acks = [m.index for m in cluster.sent[follower_id] if isinstance(m, AppendResponse) and not m.reject]
    assert max(acks, default=0) <= stored, (acks, stored)
    assert leader.node.progress[follower_id].match <= stored
    assert leader.raft_log.last_index() > stored + 10
    assert follower.phase is Phase.FOLLOWER

    cluster.full.discard(follower_id)
    await cluster.converged()
    assert follower.storage.refused is None
    assert follower.applied_index == leader.applied_index


async def test_a_leader_that_cannot_persist_answers_507_and_the_others_elect_a_leader(cluster: Cluster):
    old_id = await cluster.leader()
    old = cluster.replicas[old_id]
    [outcome] = await old.submit(create())
    assert isinstance(outcome, Created)
    cluster.full.add(old_id)

    with pytest.raises(errors.StorageFault):
        await old.submit(create())
    assert old.phase is not Phase.LEADING  # it neither serves nor dispatches
    others = tuple(i for i in IDS if i != old_id)
    new_id = await cluster.leader(among=others)
    [outcome] = await cluster.replicas[new_id].submit(create())
    assert isinstance(outcome, Created)
    assert old.storage.refused is not None

    cluster.full.discard(old_id)
    await cluster.converged()
    assert old.storage.refused is None
    assert old.phase is Phase.FOLLOWER
