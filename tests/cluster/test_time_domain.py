"""Issue 26 findings 1 and 2 on a real 3-node cluster: the backfills of a
range before 1970 and of a year-1 range, and an `every_s` job starting
before 1970, answer 2xx or a 4xx problem+json (the leader appended an entry
its followers refused, and no write committed after it); every node lives
and is ready, and the next create commits within 5 s."""

import time

from .conftest import client

REQUESTS = [
    ({"from": "1969-12-31T23:00:00Z", "until": "1970-01-01T00:00:00Z"}, "from"),
    ({"from": "0001-01-01T00:00:00Z", "until": "0001-01-02T00:00:00Z"}, "from"),
]
EARLY_EVERY = {"target": "queue:bf", "schedule": {"every_s": 60, "start_at": "1960-01-01T00:00:00Z"}}


def check_answer(answer, loc: str) -> None:
    if answer.is_success:
        return
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert [e["loc"] for e in answer.json()["errors"]] == [loc]


def test_the_issues_requests_leave_every_node_up_and_the_cluster_writable(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_leader()
    with client(timeout_s=10.0) as http:
        created = http.post(f"{leader.url}/v1/jobs", json={"target": "queue:bf", "schedule": {"cron": "* * * * *"}})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        for body, loc in REQUESTS:
            check_answer(http.post(f"{leader.url}/v1/jobs/{job_id}/backfill", json=body), loc)
        check_answer(http.post(f"{leader.url}/v1/jobs", json=EARLY_EVERY), "schedule.start_at")
        cluster.assert_running()
        started = time.monotonic()
        after = http.post(f"{leader.url}/v1/jobs", json={"target": "queue:bf", "schedule": {"every_s": 60}})
        assert after.status_code == 201, after.text
        assert time.monotonic() - started < 5.0
    cluster.assert_running()
    cluster.wait_converged()
    with client() as http:
        for node in cluster.nodes:
            assert node.ready(), f"{node.id} is not ready:\n{node.log_tail(30)}"
            metrics = http.get(f"{node.url}/metrics").text.splitlines()
            assert "tempo_raft_entries_refused_total 0" in metrics
            assert "tempo_commit_commands_undecodable_total 0" in metrics
