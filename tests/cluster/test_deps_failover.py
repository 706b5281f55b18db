"""A dependent's run survives a leader's SIGKILL (docs/semantics.md
"Dependencies"): it is made in the commit that records the parent's
result, so once the result is acknowledged the new leader has the run,
exactly once, and a worker that sends the result again to the new
leader makes no second one."""

import time

from .conftest import Cluster, client

EVENTUALLY_S = 30.0


def _claim(http, url: str, queue: str) -> dict:
    deadline_s = time.monotonic() + EVENTUALLY_S
    while True:
        answer = http.post(f"{url}/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 5})
        assert answer.status_code == 200, answer.text
        if answer.json()["runs"]:
            return answer.json()["runs"][0]
        assert time.monotonic() < deadline_s, "no run came due"


def test_the_child_run_exists_once_on_the_new_leader(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    with client(timeout_s=10) as http:
        parent = http.post(f"{leader.url}/v1/jobs", json={
            "target": "queue:dep-parent", "schedule": {"at": "2020-01-01T00:00:00Z"}, "lease_s": 120,
        }).json()
        child = http.post(f"{leader.url}/v1/jobs", json={
            "target": "queue:dep-child", "schedule": {"after": {"jobs": [parent["id"]]}},
        }).json()
        run = _claim(http, leader.url, "dep-parent")
        result = {"attempt": run["attempt"], "ok": True}
        assert http.post(f"{leader.url}/v1/runs/{run['id']}/result", json=result).status_code == 200
        leader.kill()  # right after the acknowledgement
        new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
        again = http.post(f"{new.url}/v1/runs/{run['id']}/result", json=result)
        assert again.status_code == 200  # the repeat of the result that ended it
        runs = http.get(f"{new.url}/v1/jobs/{child['id']}/runs").json()["runs"]
        assert [r["status"] for r in runs] == ["waiting"]
        detail = http.get(f"{new.url}/v1/runs/{runs[0]['id']}").json()
        assert detail["caused_by"] == [{"job_id": parent["id"], "run_id": run["id"], "attempt": 1, "status": "done"}]
        claimed = _claim(http, new.url, "dep-child")
        assert claimed["id"] == runs[0]["id"]
