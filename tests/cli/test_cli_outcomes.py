"""`tempo jobs list` tells a failed one-off from one that succeeded, and
`tempo runs get` / `tempo runs list` show a run's attempts and runs across
jobs (docs/api.md "Outcomes")."""

import json

from conftest import unique
from net.test_outcomes_filters import claim_one, failed_one_off, now_iso

from .test_cli import tempo


def test_jobs_list_shows_a_failed_one_off_as_failed(server, http):
    failed, _ = failed_one_off(http, name=unique("failed"))
    queue = unique("q")
    ok = http.post("/v1/jobs", json={"target": f"queue:{queue}", "schedule": {"at": now_iso(-1)}}).json()
    run = claim_one(http, queue)
    http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True})
    lines = tempo("jobs", "list", "--limit", "1000", url=server.url).stdout.splitlines()
    assert "OUTCOME" in lines[0].split()
    row = {line.split()[0]: line.split() for line in lines[1:]}
    assert "completed" in row[failed["id"]] and "failed" in row[failed["id"]]
    assert "completed" in row[ok["id"]] and "done" in row[ok["id"]] and "failed" not in row[ok["id"]]


def test_runs_get_shows_every_attempt(server, http):
    job, _ = failed_one_off(http)
    run_id = http.get(f"/v1/jobs/{job['id']}").json()["last_run"]["id"]
    text = tempo("runs", "get", run_id, url=server.url).stdout
    assert "boom 1" in text and "boom 2" in text and "CLAIMED_AT" in text
    got = json.loads(tempo("runs", "get", run_id, "--json", url=server.url).stdout)
    assert [a["error"] for a in got["attempts"]] == ["boom 1", "boom 2"]


def test_runs_list_filters_by_status(server, http):
    since = now_iso()
    job, _ = failed_one_off(http)
    got = json.loads(tempo("runs", "list", "--status", "failed", "--since", since, "--json", url=server.url).stdout)
    assert [r["job_id"] for r in got["runs"]] == [job["id"]]
    bad = tempo("runs", "list", "--status", "lost", url=server.url, check=False)
    assert bad.returncode == 1 and "status" in bad.stderr


def test_jobs_list_filters(server, http):
    tag = unique("n")
    job = http.post("/v1/jobs", json={"target": "queue:q", "name": tag, "schedule": {"every_s": 60}}).json()
    http.post(f"/v1/jobs/{job['id']}/pause")
    got = json.loads(tempo("jobs", "list", "--name-prefix", tag, "--state", "paused", "--json", url=server.url).stdout)
    assert [j["id"] for j in got["jobs"]] == [job["id"]]
