"""Log compaction and InstallSnapshot in chunks to a far-behind follower."""

from __future__ import annotations

import pytest

from tempo.raft import SnapshotChunk, SnapshotResponse, limits

from .transcript import Cluster


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "SNAPSHOT_CHUNK_BYTES", 16)


def state_of(c: Cluster, i: int) -> bytes:
    """The application state: all values applied, joined."""
    return b",".join(c.applied_data(i))


def test_a_far_behind_follower_catches_up_from_a_snapshot() -> None:
    c = Cluster(3)
    c.elect(1)
    c.crash(3)
    for k in range(20):
        c.propose(1, b"value-%d" % k)
        c.settle()
    # The leader compacts its log: S3 can no longer be sent entries.
    applied = c.nodes[1].log.applied
    c.nodes[1].compact(applied, state_of(c, 1))
    c.process(1)
    assert c.nodes[1].log.first_index() == applied + 1
    c.restart(3)
    c.tick(1)  # heartbeat; S3 answers and the leader finds it needs the snapshot
    c.settle()
    installed = c.snapshots_installed[3]
    assert len(installed) == 1
    assert installed[0].meta.index == applied
    assert installed[0].data == state_of(c, 1)
    chunks = [m for m in c.sent if isinstance(m, SnapshotChunk) and m.dst == 3]
    assert len(chunks) == -(-len(installed[0].data) // 16)  # sent in 16-byte chunks
    # From there on, S3 follows by plain replication.
    c.propose(1, b"after")
    c.settle()
    assert c.applied_data(3) == [b"after"]
    assert c.nodes[3].log.committed == c.nodes[1].log.committed


def test_the_leader_retries_a_snapshot_whose_chunk_was_lost() -> None:
    c = Cluster(3)
    c.elect(1)
    c.crash(3)
    for k in range(10):
        c.propose(1, b"value-%d" % k)
    c.settle()
    c.nodes[1].compact(c.nodes[1].log.applied, state_of(c, 1))
    c.process(1)
    c.restart(3)
    c.tick(1)
    c.drop(dst=2)
    # Talk with S3 until the first chunk is through, then lose everything to S3.
    while not any(isinstance(m, SnapshotChunk) for m in c.sent):
        c.deliver_one(1, 3)
        c.deliver(src=3)
    c.drop(dst=3)
    c.drop(src=3, kind=SnapshotResponse)
    assert not c.snapshots_installed[3]
    # After SNAPSHOT_RETRY_TICKS the leader sends the chunk again and finishes.
    c.tick_all(limits.SNAPSHOT_RETRY_TICKS + 2)
    assert len(c.snapshots_installed[3]) == 1
    assert c.nodes[3].log.committed == c.nodes[1].log.committed
    chunks = [m for m in c.sent if isinstance(m, SnapshotChunk)]
    offsets = [m.offset for m in chunks]
    assert len(offsets) > len(set(offsets))  # some chunk was sent twice
