"""`tempo.loadgen.spawn`, the one process harness: what it says when a node
cannot start, and a node that is killed and started again keeps its data
dir, port and log."""

from pathlib import Path

import httpx
import pytest

from tempo.loadgen.spawn import Cluster, Node, SpawnError

# Its nodes are real `tempo serve` processes.
pytestmark = pytest.mark.process


def test_a_node_that_exits_before_it_is_ready_is_named_with_its_status_and_log(tmp_path: Path) -> None:
    node = Node(tmp_path / "n1", extra_args=("--no-such-flag",))
    node.start()
    try:
        with pytest.raises(SpawnError) as raised:
            node.wait_ready(10.0)
    finally:
        node.cleanup()
    assert "tempo serve n1 exited with status 2" in str(raised.value)
    assert "--no-such-flag" in str(raised.value)  # the tail of its log: argparse's complaint
    assert node.log_path == tmp_path / "n1.log"


def test_a_killed_node_starts_again_on_its_data_dir_and_port(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 1)
    [node] = cluster.nodes
    assert "--node" not in node.argv and "--peers" not in node.argv
    try:
        cluster.start()
        assert cluster.leader() == (node, 0)  # a single node leads a cluster of one
        body = {"target": "queue:spawn", "schedule": {"at": "2099-01-01T00:00:00Z"}}
        job = httpx.post(f"{node.url}/v1/jobs", json=body, timeout=10).json()
        port, killed_at_s = node.port, node.kill()
        assert killed_at_s > 0 and not node.running() and node.exit_code() == -9
        node.start()
        assert node.wait_ready() >= 0 and node.port == port
        assert httpx.get(f"{node.url}/v1/jobs/{job['id']}", timeout=10).status_code == 200
        assert node.log_path.read_text().count("tempo serving on") == 2  # appended to, not replaced
    finally:
        stopped = cluster.stop()
        cluster.cleanup()
    assert stopped == {"n1": 0}
