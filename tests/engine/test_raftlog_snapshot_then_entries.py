"""A Ready that installs a snapshot and appends entries after it, in one
transaction (found by the whole-node simulator, tests/sim/node_cluster.py:
a follower stepped the snapshot's last chunk and then the leader's next
append before its loop took the Ready)."""

from pathlib import Path

from tempo.engine.raftlog import RaftLog, write_ready
from tempo.engine.store import Store
from tempo.raft import ConfState, Entry, HardState, Ready, Role, Snapshot, SnapshotMeta

VOTERS = (1, 2, 3)


def ready(*, entries: list[Entry], snapshot: Snapshot | None = None, hard_state: HardState | None = None) -> Ready:
    return Ready(
        hard_state=hard_state, entries=entries, must_sync=True, messages=[], committed_entries=[],
        snapshot=snapshot, compaction=None, read_states=[], leader_id=0, role=Role.FOLLOWER,
    )


def test_a_snapshot_and_the_entries_after_it_are_written_in_one_ready(tmp_path: Path) -> None:
    leader = Store(str(tmp_path / "leader"), map_bytes=1 << 26)
    follower = Store(str(tmp_path / "d"), map_bytes=1 << 26)
    try:
        RaftLog(leader, VOTERS)
        _, data = leader.snapshot_data()
        log = RaftLog(follower, VOTERS)
        behind = ready(entries=[Entry(1, i, data=b"x") for i in range(2, 5)])
        write_ready(follower, log, behind, apply=True)
        log.committed(None, behind.entries, None, None)
        # The follower is far behind (its log ends at 4): the snapshot at 40,
        # then entry 41 the leader sent right after it, in the same Ready.
        snap = Snapshot(SnapshotMeta(40, 3, ConfState(VOTERS)), data)
        rd = ready(entries=[Entry(3, 41, data=b"y")], snapshot=snap, hard_state=HardState(3, 1, 40))
        write_ready(follower, log, rd, apply=True)
        log.committed(rd.hard_state, rd.entries, rd.snapshot, rd.compaction)
        assert (log.first_index(), log.last_index()) == (41, 41)
        assert log.entries(41, 42, 1 << 20) == rd.entries
        assert follower.applied_index() == 40
        follower.close()
        follower = Store(str(tmp_path / "d"), map_bytes=1 << 26)
        log = RaftLog(follower, VOTERS)  # and so after a restart
        assert log.snapshot().meta.index == 40
        assert (log.first_index(), log.last_index()) == (41, 41)
        assert log.entries(41, 42, 1 << 20) == rd.entries
    finally:
        leader.close()
        follower.close()
