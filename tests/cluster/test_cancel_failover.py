"""A claimed run's cancel request and its timeout are replicated
(docs/semantics.md "Run timeouts", "Cancelling a run"): after the leader
that took them is SIGKILLed, the new leader still tells the worker to stop,
and still ends the attempt at its timeout, though it grants every claimed
run a full lease when it takes over."""

import time

from .conftest import Cluster, client

EVENTUALLY_S = 30.0  # well under the 120 s lease a new leader grants


def _claim(http, url: str, queue: str) -> dict:
    [run] = http.post(f"{url}/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 5}).json()["runs"]
    return run


def test_a_cancel_request_survives_the_leader(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    with client(timeout_s=10) as http:
        http.post(f"{leader.url}/v1/jobs", json={
            "target": "queue:cq", "schedule": {"at": "2020-01-01T00:00:00Z"}, "lease_s": 120,
            "retry": {"max_attempts": 3, "backoff_s": [0]},
        }).raise_for_status()
        run = _claim(http, leader.url, "cq")
        asked = http.post(f"{leader.url}/v1/runs/{run['id']}/cancel")
        assert asked.status_code == 200 and asked.json()["cancel_requested"] is True
        leader.kill()
        new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
        assert http.get(f"{new.url}/v1/runs/{run['id']}").json()["cancel_requested"] is True
        beat = http.post(f"{new.url}/v1/runs/{run['id']}/heartbeat", json={"attempt": 1})
        assert beat.status_code == 200 and beat.json()["cancel"] == "requested"
        ended = http.post(f"{new.url}/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": False, "error": "stopped"})
        assert ended.status_code == 200 and ended.json()["status"] == "cancelled"


def test_a_timeout_survives_the_leader(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    with client(timeout_s=10) as http:
        http.post(f"{leader.url}/v1/jobs", json={
            "target": "queue:tq", "schedule": {"at": "2020-01-01T00:00:00Z"}, "lease_s": 120, "timeout_s": 2,
            "retry": {"max_attempts": 1, "backoff_s": [0]},
        }).raise_for_status()
        run = _claim(http, leader.url, "tq")
        assert run["timeout_at"] is not None
        leader.kill()
        new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
        # Heartbeats through the new leader do not hold the attempt past its
        # timeout: the next answer after it says so.
        deadline_s = time.monotonic() + EVENTUALLY_S
        while True:
            beat = http.post(f"{new.url}/v1/runs/{run['id']}/heartbeat", json={"attempt": 1})
            assert beat.status_code == 200, beat.text
            if beat.json()["cancel"] is not None:
                break
            assert time.monotonic() < deadline_s, "the new leader did not end the attempt at its timeout"
            time.sleep(0.2)
        assert beat.json() == {"lease_expires_at": None, "cancel": "timeout"}
        got = http.get(f"{new.url}/v1/runs/{run['id']}").json()
        assert got["status"] == "failed" and got["error"] == "timeout"
