"""`schedule.max_runs` holds across a leader's SIGKILL (docs/semantics.md
"End conditions"): the count of runs is replicated (`runs_done`, bumped by
the apply of a claim), so the new leader plans from it and neither runs a
slot too many nor stops a slot short; a pause's note is replicated too."""

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


def _done(http, url: str, run: dict) -> None:
    answer = http.post(f"{url}/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": True})
    assert answer.status_code == 200, answer.text


def _slot_runs_done(http, url: str, job_id: str) -> int:
    runs = http.get(f"{url}/v1/jobs/{job_id}/runs", params={"limit": 100}).json()["runs"]
    return sum(1 for r in runs if r["status"] == "done")


def test_max_runs_counted_by_one_leader_is_held_by_the_next(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    with client(timeout_s=10) as http:
        job = http.post(f"{leader.url}/v1/jobs", json={
            "target": "queue:mr", "schedule": {"every_s": 1, "max_runs": 3}, "lease_s": 120,
        }).json()
        _done(http, leader.url, _claim(http, leader.url, "mr"))
        assert http.get(f"{leader.url}/v1/jobs/{job['id']}").json()["runs_left"] == 2
        leader.kill()
        new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
        assert http.get(f"{new.url}/v1/jobs/{job['id']}").json()["runs_left"] == 2
        for _ in range(2):
            _done(http, new.url, _claim(http, new.url, "mr"))
        final = http.get(f"{new.url}/v1/jobs/{job['id']}").json()
        assert final["state"] == "completed" and final["runs_left"] == 0
        assert http.post(f"{new.url}/v1/claim", json={"worker": "w", "queues": ["mr"], "wait_s": 3}).json()["runs"] == []
        assert _slot_runs_done(http, new.url, job["id"]) == 3


def test_the_last_run_claimed_before_the_kill_completes_the_job_under_the_next_leader(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    with client(timeout_s=10) as http:
        job = http.post(f"{leader.url}/v1/jobs", json={
            "target": "queue:last", "schedule": {"every_s": 1, "max_runs": 1}, "lease_s": 120,
        }).json()
        paused_note = {"note": "checked across failover"}
        last = _claim(http, leader.url, "last")
        held = http.get(f"{leader.url}/v1/jobs/{job['id']}").json()
        assert held["state"] == "active" and held["next_run_at"] is None and held["runs_left"] == 0
        assert http.post(f"{leader.url}/v1/jobs/{job['id']}/pause", json=paused_note).status_code == 200
        leader.kill()
        new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
        shown = http.get(f"{new.url}/v1/jobs/{job['id']}").json()
        assert shown["state"] == "paused" and shown["paused"]["note"] == paused_note["note"]
        resumed = http.post(f"{new.url}/v1/jobs/{job['id']}/resume").json()
        # Nothing planned by the new leader: the last run still runs.
        assert resumed["state"] == "active" and resumed["next_run_at"] is None
        _done(http, new.url, last)
        final = http.get(f"{new.url}/v1/jobs/{job['id']}").json()
        assert final["state"] == "completed" and final["paused"] is None
        assert http.post(f"{new.url}/v1/claim", json={"worker": "w", "queues": ["last"], "wait_s": 3}).json()["runs"] == []
        events = http.get(f"{new.url}/v1/events", params={"limit": 1000}).json()["events"]
        details = [e["detail"] for e in events if e["job_id"] == job["id"] and e["type"] == "job.completed"]
        assert details == [{"status": "done", "reason": "max_runs"}]
