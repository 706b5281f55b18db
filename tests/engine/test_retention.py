"""Retention against a real `tempo serve`: history older than the period
disappears (runs and events answer as never written), open runs and jobs
stay, and `retention_days` in the config file is checked."""

import time
from pathlib import Path

import httpx
import pytest

from conftest import Server, unique
from tempo import config, limits
from tempo.loadgen.spawn import SpawnError

vanish_timeout_s = 20.0


def create(client: httpx.Client, **body) -> dict:
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def claim_one(client: httpx.Client, queue: str) -> dict:
    answer = client.post("/v1/claim", json={"worker": "w1", "queues": [queue], "max_runs": 1, "wait_s": 5})
    assert answer.status_code == 200, answer.text
    [run] = answer.json()["runs"]
    return run


def report(client: httpx.Client, run: dict, ok: bool) -> httpx.Response:
    return client.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": ok, "output": "x"})


def test_history_past_the_period_disappears_and_open_work_stays(tmp_path: Path):
    server = Server(tmp_path / "data")
    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            queue = unique("q")
            done_job = create(client, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"})
            done_run = claim_one(client, queue)
            assert report(client, done_run, True).json()["status"] == "done"
            failed_job = create(client, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"},
                                retry={"max_attempts": 1})
            failed_run = claim_one(client, queue)
            assert report(client, failed_run, False).json()["status"] == "failed"
            later = create(client, target=f"queue:{queue}", schedule={"at": "2030-01-01T00:00:00Z"})
            paused = create(client, target=f"queue:{queue}", schedule={"every_s": 3600})
            assert client.post(f"/v1/jobs/{paused['id']}/pause").status_code == 200
            [cancelled] = client.get(f"/v1/jobs/{paused['id']}/runs").json()["runs"]
            assert cancelled["status"] == "cancelled"
            # Finished history answers from its bucket: reads, and a repeated result.
            assert client.get(f"/v1/runs/{done_run['id']}").json()["status"] == "done"
            assert report(client, done_run, True).status_code == 200
            events = client.get("/v1/events").json()
            assert {e["type"] for e in events["events"]} == {"run.failed", "job.completed", "job.created", "job.paused"}
        server.stop()

        # The same data, with a one-day period and the retention clock three days ahead.
        conf = tmp_path / "tempo.toml"
        conf.write_text("retention_days = 1\n")
        server.extra_args = ("--config", str(conf), "--retention-skew-days", "3")
        server.start()
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            deadline_s = time.monotonic() + vanish_timeout_s
            while client.get(f"/v1/runs/{done_run['id']}").status_code != 404:
                assert time.monotonic() < deadline_s, "history was not dropped"
                time.sleep(0.1)
            for run_id in (failed_run["id"], cancelled["id"]):
                assert client.get(f"/v1/runs/{run_id}").status_code == 404
            assert client.get(f"/v1/jobs/{done_job['id']}/runs").json()["runs"] == []
            assert report(client, done_run, True).status_code == 404
            feed = client.get("/v1/events", params={"after": events["next_cursor"]}).json()
            assert feed == {"events": [], "next_cursor": events["next_cursor"]}
            assert client.get("/v1/events").json()["events"] == []
            # Jobs stay, and so do open runs.
            for job in (done_job, failed_job, later, paused):
                assert client.get(f"/v1/jobs/{job['id']}").status_code == 200
            [waiting] = client.get(f"/v1/jobs/{later['id']}/runs").json()["runs"]
            assert waiting["status"] == "waiting"
            # A resume makes the paused job's next run; new history is kept.
            resumed = client.post(f"/v1/jobs/{paused['id']}/resume").json()
            assert resumed["state"] == "active" and resumed["next_run_at"] is not None
            assert client.post(f"/v1/jobs/{later['id']}/trigger").status_code == 201
            fresh_run = claim_one(client, queue)
            assert report(client, fresh_run, True).json()["status"] == "done"
            assert client.get(f"/v1/runs/{fresh_run['id']}").json()["status"] == "done"
        server.stop()
    finally:
        server.cleanup()


@pytest.mark.parametrize("text", ["retention_days = 0", "retention_days = 367", "retention_days = 1.5",
                                  'retention_days = "30"', "retention_days = true"])
def test_a_bad_retention_period_is_refused(text):
    with pytest.raises(config.ConfigError, match="retention_days"):
        config.parse(text)


def test_the_retention_period_defaults_to_thirty_days():
    assert config.parse("").retention_days == limits.retention_days_default == 30
    assert config.parse("retention_days = 366").retention_days == 366


def test_serve_refuses_a_bad_retention_period(tmp_path: Path):
    conf = tmp_path / "tempo.toml"
    conf.write_text("retention_days = 0\n")
    server = Server(tmp_path / "data", extra_args=("--config", str(conf)))
    with pytest.raises(SpawnError, match="retention_days"):
        server.start()
