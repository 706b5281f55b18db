"""`POST /v1/jobs/{id}/backfill`: one run per slot in [from, until), due at
once, marked `backfill`, idempotent by slot, at most 10,000 a request
(docs/api.md "Backfill")."""

import subprocess
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from conftest import tempo_command, unique
from tempo import limits


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def five_minute_mark(minutes_ago: int) -> datetime:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return now - timedelta(minutes=now.minute % 5 + minutes_ago)


def cron_job(http: httpx.Client, cron: str = "*/5 * * * *") -> str:
    r = http.post("/v1/jobs", json={"target": f"queue:{unique('bf')}", "schedule": {"cron": cron}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_backfill_makes_one_run_per_slot_due_at_once(http):
    job_id = cron_job(http)
    start = five_minute_mark(60)
    before_ms = int(time.time() * 1000)
    r = http.post(f"/v1/jobs/{job_id}/backfill", json={"from": iso(start), "until": iso(start + timedelta(minutes=30))})
    assert r.status_code == 200, r.text
    assert r.json() == {"created": 6, "existing": 0}
    runs = http.get(f"/v1/jobs/{job_id}/runs", params={"until": iso(start + timedelta(minutes=30))}).json()["runs"]
    assert sorted(ms(run["nominal_at"]) for run in runs) == [
        int((start + timedelta(minutes=5 * k)).timestamp() * 1000) for k in range(6)
    ]
    for run in runs:
        assert run["backfill"] is True and run["status"] == "waiting"
        assert ms(run["due_at"]) >= before_ms  # due at once, not at its slot
        assert http.get(f"/v1/runs/{run['id']}").json()["backfill"] is True
    # The job's scheduled run is no backfill.
    [scheduled] = http.get(f"/v1/jobs/{job_id}/runs", params={"since": iso(start + timedelta(minutes=60))}).json()["runs"]
    assert scheduled["backfill"] is False


def test_backfill_is_idempotent_by_slot(http):
    job_id = cron_job(http)
    start = five_minute_mark(60)
    first = http.post(f"/v1/jobs/{job_id}/backfill", json={"from": iso(start), "until": iso(start + timedelta(minutes=30))})
    assert first.json() == {"created": 6, "existing": 0}
    again = http.post(f"/v1/jobs/{job_id}/backfill",
                      json={"from": iso(start + timedelta(minutes=15)), "until": iso(start + timedelta(minutes=45)),
                            "overlap": "allow"})
    assert again.status_code == 200 and again.json() == {"created": 3, "existing": 3}
    runs = http.get(f"/v1/jobs/{job_id}/runs", params={"until": iso(start + timedelta(minutes=45))}).json()["runs"]
    assert len(runs) == 9 and len({run["nominal_at"] for run in runs}) == 9


def test_a_finished_run_keeps_its_slot(http):
    queue = unique("bf")
    r = http.post("/v1/jobs", json={"target": f"queue:{queue}", "schedule": {"cron": "*/5 * * * *"}})
    job_id = r.json()["id"]
    start = five_minute_mark(60)
    body = {"from": iso(start), "until": iso(start + timedelta(minutes=10))}
    assert http.post(f"/v1/jobs/{job_id}/backfill", json=body).json() == {"created": 2, "existing": 0}
    got = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "max_runs": 10, "wait_s": 5}).json()["runs"]
    assert len(got) == 2 and all(run["backfill"] for run in got)
    for run in got:
        done = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": True})
        assert done.status_code == 200
    assert http.post(f"/v1/jobs/{job_id}/backfill", json=body).json() == {"created": 0, "existing": 2}


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"from": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
        ({"from": "2026-01-01T01:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
        ({"from": "2026-01-01T00:00:00Z", "until": "2999-01-01T00:00:00Z"}, "until"),
        ({"from": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z", "overlap": "skip"}, "overlap"),
        ({"from": "2026-01-01T00:00:00Z"}, "until"),
        ({"from": "2026-01-01T00:00:00", "until": "2026-01-02T00:00:00Z"}, "from"),
        ({"from": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z", "extra": 1}, "extra"),
    ],
)
def test_bad_backfills_are_400_naming_the_field(http, body, loc):
    job_id = cron_job(http)
    r = http.post(f"/v1/jobs/{job_id}/backfill", json=body)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert [e["loc"] for e in r.json()["errors"]] == [loc]


def test_overlap_other_than_allow_says_why(http):
    job_id = cron_job(http)
    r = http.post(f"/v1/jobs/{job_id}/backfill", json={
        "from": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z", "overlap": "skip"})
    assert "allow" in r.json()["errors"][0]["msg"] and "overlap policy" in r.json()["errors"][0]["msg"]


def test_more_than_the_limit_of_slots_is_400(http):
    job_id = cron_job(http, "* * * * *")
    start = five_minute_mark(60 * 24 * 8)  # 11,520 minutes
    r = http.post(f"/v1/jobs/{job_id}/backfill", json={"from": iso(start), "until": iso(start + timedelta(days=7))})
    assert r.status_code == 400 and r.json()["errors"][0]["loc"] == "until"
    assert str(limits.backfill_runs_max) in r.json()["errors"][0]["msg"]
    exactly = start + timedelta(minutes=limits.backfill_runs_max)
    r = http.post(f"/v1/jobs/{job_id}/backfill", json={"from": iso(start), "until": iso(exactly)})
    assert r.status_code == 200 and r.json() == {"created": limits.backfill_runs_max, "existing": 0}
    grid = http.post("/v1/jobs", json={"target": "queue:bf", "schedule": {
        "every_s": 1, "start_at": iso(start)}}).json()["id"]
    r = http.post(f"/v1/jobs/{grid}/backfill", json={"from": iso(start), "until": iso(start + timedelta(hours=3))})
    assert r.status_code == 400 and r.json()["errors"][0]["loc"] == "until"


def test_a_one_off_and_an_unknown_job(http):
    one_off = http.post("/v1/jobs", json={"target": "queue:bf", "schedule": {"at": "2020-01-01T00:00:00Z"}}).json()["id"]
    body = {"from": "2019-01-01T00:00:00Z", "until": "2019-01-02T00:00:00Z"}
    assert http.post(f"/v1/jobs/{one_off}/backfill", json=body).status_code == 400
    assert http.post("/v1/jobs/j_01JUNKNOWNUNKNOWNUNKNOWN00/backfill", json=body).status_code == 404


def test_cli_backfill(server, http):
    job_id = cron_job(http)
    start = five_minute_mark(60)
    done = subprocess.run(
        [*tempo_command(), "jobs", "backfill", job_id, "--from", iso(start),
         "--until", iso(start + timedelta(minutes=10)), "--url", server.url, "--json"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert '"created": 2' in done.stdout
