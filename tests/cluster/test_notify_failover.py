"""A notice survives a change of leader (docs/semantics.md "Notifications"):
the leader dies while its notice hangs at the endpoint, and the new leader
sends it, from the notifier cursor the cluster replicated."""

import time
from pathlib import Path

import trustme

from net.notify_endpoint import SECRET, https_endpoint

from .conftest import Cluster, client

notice_timeout_s = 20.0


def _wait(predicate, timeout_s: float) -> None:
    deadline_s = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline_s, "timed out"
        time.sleep(0.05)


def test_a_notice_in_flight_when_the_leader_dies_is_sent_by_the_next(make_cluster, tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    config = tmp_path / "tempo.toml"
    config.write_text(f'[notify]\nsecret = "{SECRET}"\nca_file = "{tmp_path / "ca.pem"}"\n')
    with https_endpoint(ca) as endpoint:
        cluster: Cluster = make_cluster("--config", str(config))
        leader = cluster.wait_leader()
        with client() as http:
            job = http.post(f"{leader.url}/v1/jobs", json={
                "target": "queue:nq", "schedule": {"at": "2020-01-01T00:00:00Z"},
                "retry": {"max_attempts": 1, "backoff_s": [0]},
                "notify": {"url": endpoint.url + "/hang", "events": ["run.failed"]},
            })
            assert job.status_code == 201, job.text
            [run] = http.post(f"{leader.url}/v1/claim", json={"worker": "w", "queues": ["nq"], "wait_s": 5}).json()["runs"]
            ended = http.post(f"{leader.url}/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": False, "error": "x"})
            assert ended.status_code == 200
        _wait(lambda: endpoint.arrived_at("/hang") == 1, notice_timeout_s)
        leader.kill()
        killed_s = time.monotonic()
        endpoint.release.set()
        new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
        _wait(lambda: endpoint.arrived_at("/hang", killed_s) >= 1, notice_timeout_s)
        sent = list(endpoint.ok_at("/hang"))
        assert {n["run_id"] for n in sent} == {run["id"]} and len({n["id"] for n in sent}) == 1
        print(f"{leader.id} killed with its notice in flight; {new.id} sent it "
              f"{time.monotonic() - killed_s:.2f} s later")
