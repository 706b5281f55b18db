"""Issue 26 findings 1 and 2 against a real `tempo serve` alone: the
backfills of a range before 1970 and of a year-1 range, and an `every_s`
job starting before 1970, answer 2xx or a 4xx problem+json; the node lives
and is ready, and the next create commits within 5 s."""

import time

import httpx

from conftest import Server

REQUESTS = [
    # (path after the job, body, the field a 400 names)
    ("backfill", {"from": "1969-12-31T23:00:00Z", "until": "1970-01-01T00:00:00Z"}, "from"),
    ("backfill", {"from": "0001-01-01T00:00:00Z", "until": "0001-01-02T00:00:00Z"}, "from"),
]
EARLY_EVERY = {"target": "queue:bf", "schedule": {"every_s": 60, "start_at": "1960-01-01T00:00:00Z"}}


def check_problem(answer: httpx.Response, loc: str) -> None:
    if answer.is_success:
        return
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert [e["loc"] for e in answer.json()["errors"]] == [loc]
    assert "1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z" in answer.json()["errors"][0]["msg"]


def test_the_issues_requests_leave_the_node_up_and_writable(fresh_server: Server):
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        created = http.post("/v1/jobs", json={"target": "queue:bf", "schedule": {"cron": "* * * * *"}})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        for path, body, loc in REQUESTS:
            check_problem(http.post(f"/v1/jobs/{job_id}/{path}", json=body), loc)
        check_problem(http.post("/v1/jobs", json=EARLY_EVERY), "schedule.start_at")
        batch = http.post("/v1/jobs/batch", json={"jobs": [EARLY_EVERY]})
        assert batch.status_code == 200, batch.text
        assert batch.json()["results"][0]["status"] == 400
        assert fresh_server.proc.poll() is None, fresh_server.log()
        started = time.monotonic()
        after = http.post("/v1/jobs", json={"target": "queue:bf", "schedule": {"every_s": 60}})
        assert after.status_code == 201, after.text
        assert time.monotonic() - started < 5.0
        assert http.get("/readyz").status_code == 200
