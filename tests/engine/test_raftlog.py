"""The raft log on LMDB: what a Ready writes is what a restart reads back."""

import pytest

from tempo.engine.raftlog import RaftLog, write_ready
from tempo.engine.store import Store
from tempo.raft import ConfState, Entry, HardState, Ready, Role, Snapshot, SnapshotMeta

VOTERS = (1, 2, 3)


def entries(lo: int, hi: int, term: int) -> list[Entry]:
    return [Entry(term, i, data=f"e{i}t{term}".encode()) for i in range(lo, hi)]


def write(store: Store, log: RaftLog, *, ents=(), hard_state=None, compaction=None, snapshot=None) -> None:
    """What the replica loop does with a Ready of these (node/replica.py
    `Replica.steps`): `write_ready`, then `committed` once it is durable."""
    if compaction is not None:
        # A compaction's file is written before the core is told of it.
        log.write_snapshot_file(compaction.meta.index, compaction.data)
    rd = Ready(
        hard_state=hard_state, entries=list(ents), must_sync=True, messages=[], committed_entries=[],
        snapshot=snapshot, compaction=compaction, read_states=[], leader_id=0, role=Role.FOLLOWER,
    )
    assert write_ready(store, log, rd, apply=True) == []
    log.committed(rd.hard_state, rd.entries, rd.snapshot, rd.compaction)


@pytest.fixture
def opened(tmp_path):
    store = Store(str(tmp_path / "d"), map_bytes=1 << 26)
    yield store, RaftLog(store, VOTERS)
    store.close()


def reopen(tmp_path, store: Store) -> tuple[Store, RaftLog]:
    store.close()
    store = Store(str(tmp_path / "d"), map_bytes=1 << 26)
    return store, RaftLog(store, VOTERS)


def test_a_founder_starts_from_the_bootstrap_snapshot(opened):
    store, log = opened
    assert log.snapshot().meta == SnapshotMeta(1, 0, ConfState(VOTERS))
    assert (log.first_index(), log.last_index()) == (2, 1)
    assert log.term(1) == 0
    assert store.applied_index() == 1


def test_appends_truncation_and_hard_state_survive_a_restart(tmp_path, opened):
    store, log = opened
    write(store, log, ents=entries(2, 10, 1), hard_state=HardState(1, 2, 5))
    # A new leader's entries replace the uncommitted tail from index 7.
    write(store, log, ents=entries(7, 9, 2), hard_state=HardState(2, 3, 5))
    assert log.last_index() == 8
    assert [log.term(i) for i in range(5, 9)] == [1, 1, 2, 2]
    store, log = reopen(tmp_path, store)
    try:
        assert log.hard_state() == HardState(2, 3, 5)
        assert log.last_index() == 8
        assert [e.data for e in log.entries(6, 9, 1 << 20)] == [b"e6t1", b"e7t2", b"e8t2"]
    finally:
        store.close()


def test_entries_stop_at_the_byte_bound_but_return_one(opened):
    store, log = opened
    write(store, log, ents=entries(2, 6, 1))
    assert len(log.entries(2, 6, 1)) == 1
    assert len(log.entries(2, 6, 9)) == 2


def test_compaction_drops_covered_entries_and_keeps_the_snapshot(tmp_path, opened):
    store, log = opened
    write(store, log, ents=entries(2, 20, 1))
    snap = Snapshot(SnapshotMeta(10, 1, ConfState(VOTERS)), b"state at 10")
    write(store, log, compaction=snap)
    assert log.first_index() == 11
    assert log.term(10) == 1
    assert [e.index for e in log.entries(11, 13, 1 << 20)] == [11, 12]
    store, log = reopen(tmp_path, store)
    try:
        assert log.snapshot() == snap
        assert (log.first_index(), log.last_index()) == (11, 19)
        assert [e.index for e in log.entries(11, 20, 1 << 20)] == list(range(11, 20))
    finally:
        store.close()


def test_installing_a_snapshot_replaces_log_and_state_at_once(tmp_path):
    leader = Store(str(tmp_path / "leader"), map_bytes=1 << 26)
    follower = Store(str(tmp_path / "d"), map_bytes=1 << 26)
    try:
        RaftLog(leader, VOTERS)
        _index, data = leader.snapshot_data()
        log = RaftLog(follower, VOTERS)
        write(follower, log, ents=entries(2, 5, 1))
        snap = Snapshot(SnapshotMeta(40, 3, ConfState(VOTERS)), data)
        write(follower, log, snapshot=snap)
        assert (log.first_index(), log.last_index()) == (41, 40)
        assert follower.applied_index() == 40
        assert follower.dump()["jobs"] == leader.dump()["jobs"]
        follower, log = reopen(tmp_path, follower)
        assert log.snapshot() == snap
        assert log.last_index() == 40
    finally:
        leader.close()
        follower.close()


def test_single_node_data_is_refused_as_a_cluster_node(tmp_path):
    store = Store(str(tmp_path / "d"), map_bytes=1 << 26)
    try:
        store.apply_entry(1, b"")
        with pytest.raises(ValueError, match="single node"):
            RaftLog(store, VOTERS)
    finally:
        store.close()


def test_entries_come_from_disk_and_memory_alike(opened, monkeypatch):
    import tempo.engine.raftlog as raftlog

    monkeypatch.setattr(raftlog, "_TAIL_ENTRIES_MAX", 3)
    store, log = opened
    write(store, log, ents=entries(2, 12, 1))
    assert len(log._tail) == 3  # 9..11 in memory, 2..8 read from LMDB
    assert [e.index for e in log.entries(2, 12, 1 << 20)] == list(range(2, 12))
    assert [e.index for e in log.entries(7, 10, 1 << 20)] == [7, 8, 9]
    assert [e.data for e in log.entries(5, 12, 12)] == [b"e5t1", b"e6t1", b"e7t1"]
