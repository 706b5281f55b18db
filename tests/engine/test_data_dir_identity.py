"""A data directory knows what it is (docs/operations.md "Data directory"):
a single node's, or one cluster member's. Started with flags that say
otherwise, `tempo serve` exits 2 with a message naming both sides, before it
serves anything: a member's directory served as a single node would accept
writes the cluster never sees, and lose them when that node leads again."""

import httpx
import pytest

from conftest import Server, free_port, job_body, used_data_dir
from tempo.engine.raftlog import RaftLog
from tempo.engine.store import Store
from tempo.node import raft_id_of

from .test_corrupt_data import assert_refused


def member_args(node: str, port: int, *others: str) -> tuple[str, ...]:
    peers = [f"{node}=http://127.0.0.1:{port}", *(f"{o}=http://127.0.0.1:{free_port()}" for o in others)]
    return ("--node", node, "--peers", ",".join(peers))


@pytest.fixture
def member_dir(tmp_path):
    """The data dir of n1, a cluster of one, which acknowledged a job."""
    port = free_port()
    return used_data_dir(Server(tmp_path / "n1", port=port, extra_args=member_args("n1", port)))


def test_a_cluster_members_dir_is_not_served_as_a_single_node(member_dir):
    output = assert_refused(member_dir, "n1", "cluster", "single node", "--node n1")
    assert "--data-dir" in output
    # Refused, it is still n1's, untouched: n1 starts on it as before.
    port = free_port()
    srv = Server(member_dir, port=port, extra_args=member_args("n1", port))
    try:
        srv.start()
        with httpx.Client(base_url=srv.url, timeout=10) as http:
            assert len(http.get("/v1/jobs").json()["jobs"]) == 1
    finally:
        srv.cleanup()


def test_a_members_dir_is_not_another_members(member_dir):
    assert_refused(member_dir, "n1", "n2", args=member_args("n2", free_port(), "n1"))


def test_a_single_nodes_dir_does_not_become_a_members(tmp_path):
    srv = Server(tmp_path / "single")
    try:
        srv.start()  # no writes: the dir is a single node's all the same
        srv.stop()
    finally:
        srv.cleanup()
    assert_refused(srv.data_dir, "single node", "n1", args=member_args("n1", free_port(), "n2", "n3"))


def test_an_earlier_versions_member_dir_is_not_served_as_a_single_node(tmp_path):
    """A member's directory from before identity records (no record; its
    raft state shows it founded a cluster) is refused to a single node, and
    served to its member, which records the identity then."""
    store = Store(str(tmp_path / "n1"))
    RaftLog(store, voters=(raft_id_of("n1"),))
    store.close()
    assert_refused(tmp_path / "n1", "cluster member", "single node")
    port = free_port()
    srv = Server(tmp_path / "n1", port=port, extra_args=member_args("n1", port))
    try:
        srv.start()
        srv.stop()
    finally:
        srv.cleanup()
    assert "written by an earlier version; recorded as the data directory of cluster member n1" in srv.log()
    assert_refused(tmp_path / "n1", "cluster member n1", "single node")


def test_a_second_server_on_a_directory_in_use_is_refused(tmp_path):
    """Two servers on one directory would each keep a timing wheel and hand
    out the same runs; the second exits 2, and the first serves on. Once
    the first is gone (here SIGKILLed), the directory is free again."""
    srv = Server(tmp_path / "data")
    try:
        srv.start()
        assert_refused(srv.data_dir, "in use by another tempo serve", "--data-dir")
        with httpx.Client(base_url=srv.url, timeout=10) as http:
            assert http.post("/v1/jobs", json=job_body()).status_code == 201
        srv.kill()
        srv.start()
        with httpx.Client(base_url=srv.url, timeout=10) as http:
            assert len(http.get("/v1/jobs").json()["jobs"]) == 1
    finally:
        srv.cleanup()
