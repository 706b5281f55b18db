"""`tempo cluster status` right after the README's cluster start (three
`tempo serve` in the background, then at once `tempo cluster status`)
waits, up to `--wait-s`, for the nodes that are starting to answer and
agree on a leader, rather than calling every node unreachable (issue 25
finding 7)."""

import os
import subprocess
import time

import httpx
import pytest

from cli.test_cli import A, B, C, cluster_answer, fake_client
from conftest import free_port, tempo_command
from tempo import cli
from tempo.loadgen import spawn


def _status(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("TEMPO_URL", None)
    return subprocess.run([*tempo_command(), "cluster", "status", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_status_at_once_after_the_readmes_cluster_start(tmp_path) -> None:
    cluster = spawn.Cluster(tmp_path, 3)
    try:
        for node in cluster.nodes:
            node.start()  # in the background, not waited for: the README's `&`
        done = _status("--url", ",".join(cluster.urls))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "unreachable" not in done.stdout and done.stdout.splitlines()[-1].startswith("leader: n")
    finally:
        cluster.cleanup()


def test_the_wait_is_bounded_and_can_be_zero() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    started_s = time.monotonic()
    done = _status("--url", dead, "--wait-s", "0")
    assert done.returncode == 1 and "unreachable" in done.stdout
    started_s = time.monotonic()
    done = _status("--url", dead, "--wait-s", "1")
    took_s = time.monotonic() - started_s
    assert done.returncode == 1 and "unreachable" in done.stdout and 1.0 <= took_s < 10, took_s
    assert "--wait-s" in done.stdout  # the last line says how long it waited
    bad = _status("--url", dead, "--wait-s", "-1")
    assert bad.returncode == 2 and "--wait-s" in bad.stderr


def test_it_asks_again_until_a_leader_is_agreed() -> None:
    calls = {"n": 0}
    starting, electing = cluster_answer("n1", None, down=("n1", "n2", "n3")), cluster_answer("n1", None)
    elected = cluster_answer("n1", "n2")

    def answer(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        return (starting if calls["n"] <= 3 else electing if calls["n"] <= 6 else elected)(request)

    client, _ = fake_client(answer, urls=(A,), token="t")
    clock = {"now_s": 0.0}
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock["now_s"] += seconds

    answers, failures, status, verdict = cli.cluster_status_waiting(
        client, [A, B, C], wait_s=5.0, monotonic=lambda: clock["now_s"], sleep=sleep)
    assert (status, verdict) == (0, "leader: n2") and not failures and len(answers) == 3
    assert len(slept) == 2 and clock["now_s"] <= 5.0

    client, _ = fake_client(starting, urls=(A,), token="t")
    clock["now_s"], slept[:] = 0.0, []
    _, failures, status, _ = cli.cluster_status_waiting(
        client, [A, B, C], wait_s=2.0, monotonic=lambda: clock["now_s"], sleep=sleep)
    assert status == 1 and len(failures) == 3 and clock["now_s"] == pytest.approx(2.0)


def test_it_asks_again_while_a_node_is_still_starting() -> None:
    """Two nodes elect before the third listens (a loaded machine starts one
    `tempo serve` late): the answer waits for the third rather than calling
    a cluster that is only starting degraded. One that stays down is
    degraded once the wait is over."""
    calls = {"n": 0}
    late, whole = cluster_answer("n1", "n2", down=("n3",)), cluster_answer("n1", "n2")

    def answer(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        return (late if calls["n"] <= 6 else whole)(request)

    client, _ = fake_client(answer, urls=(A,), token="t")
    clock = {"now_s": 0.0}

    def sleep(seconds: float) -> None:
        clock["now_s"] += seconds

    _, failures, status, verdict = cli.cluster_status_waiting(
        client, [A, B, C], wait_s=5.0, monotonic=lambda: clock["now_s"], sleep=sleep)
    assert (status, verdict) == (cli.STATUS_HEALTHY, "leader: n2") and not failures

    client, _ = fake_client(late, urls=(A,), token="t")
    clock["now_s"] = 0.0
    _, failures, status, verdict = cli.cluster_status_waiting(
        client, [A, B, C], wait_s=2.0, monotonic=lambda: clock["now_s"], sleep=sleep)
    assert (status, verdict) == (cli.STATUS_DEGRADED, "leader: n2; degraded: n3 not answering")
    assert list(failures) == [C] and clock["now_s"] == pytest.approx(2.0)
