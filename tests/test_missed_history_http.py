"""Missed ranges in a job's run history over HTTP, after a real downtime:
`GET /v1/jobs/{id}/runs` shows each as a `missed` row with its reason and
count, and `GET /v1/runs?status=missed` lists them (docs/semantics.md
"Catch-up after missed slots")."""

import time

import httpx

from test_catchup_downtime import DOWNTIME_S, claim_all, create, missed_of, ms


def missed_rows(http: httpx.Client, job_id: str) -> list[dict]:
    r = http.get(f"/v1/jobs/{job_id}/runs", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return [run for run in r.json()["runs"] if run["status"] == "missed"]


def test_a_downtime_leaves_missed_rows_in_the_runs_of_the_job(fresh_server):
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        none_id, none_queue, s0 = create(http, {"policy": "none"})
        window_id, window_queue, w0 = create(http, {"policy": "all", "window_s": 2})
        [other] = http.get(f"/v1/jobs/{none_id}/runs").json()["runs"]
        assert (other["reason"], other["missed_from"], other["missed_until"], other["count"]) == (None,) * 4
    fresh_server.stop()
    time.sleep(DOWNTIME_S)
    fresh_server.start()
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        claim_all(http, none_queue, 2)
        claim_all(http, window_queue, 2)

        [row] = missed_rows(http, none_id)
        [(reason, start, end, count)] = missed_of(http, none_id)  # the event is kept too
        assert (row["reason"], ms(row["missed_from"]), ms(row["missed_until"]), row["count"]) == (
            "policy", start, end, count)
        # From the slot whose run was waiting when the server stopped.
        assert reason == "policy" and start == s0 and count >= 4
        assert row["nominal_at"] == row["missed_from"] and row["attempt"] == 0 and row["worker"] is None

        [row] = missed_rows(http, window_id)
        assert row["reason"] == "outside_window" and ms(row["missed_from"]) == w0
        assert row["count"] == (ms(row["missed_until"]) - ms(row["missed_from"])) // 1000

        # The run ID of the row answers, as any run's does.
        got = http.get(f"/v1/runs/{row['id']}")
        assert got.status_code == 200 and got.json()["status"] == "missed", got.text


def test_status_missed_lists_only_missed_rows(fresh_server):
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        job_id, queue, _ = create(http, {"policy": "none"})
    fresh_server.stop()
    time.sleep(4.0)
    fresh_server.start()
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        claim_all(http, queue, 1)
        r = http.get("/v1/runs", params={"status": "missed"})
        assert r.status_code == 200, r.text
        listed = [(run["job_id"], run["status"], run["reason"]) for run in r.json()["runs"]]
        assert listed == [(job_id, "missed", "policy")]
        assert all(run["status"] != "missed" for run in http.get("/v1/runs", params={"status": "done"}).json()["runs"])
        everything = http.get("/v1/runs", params={"limit": 1000}).json()["runs"]
        assert "missed" in {run["status"] for run in everything}
        bad = http.get("/v1/runs", params={"status": "exploded"})
        assert bad.status_code == 400 and "missed" in bad.text
