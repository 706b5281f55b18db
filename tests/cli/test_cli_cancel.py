"""`tempo runs cancel RUN_ID`, and `--timeout-s` on `tempo jobs create` and
`tempo jobs update`, from the command line against a real `tempo serve`."""

import json

import httpx

from conftest import unique

from .test_cli_update import tempo


def test_timeout_s_on_create_and_update(server) -> None:
    job = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--every-s", "3600", "--timeout-s", "30",
                           "--json", url=server.url).stdout)
    assert job["timeout_s"] == 30
    changed = json.loads(tempo("jobs", "update", job["id"], "--timeout-s", "90", "--json", url=server.url).stdout)
    assert changed["timeout_s"] == 90
    removed = json.loads(tempo("jobs", "update", job["id"], "--no-timeout", "--json", url=server.url).stdout)
    assert removed["timeout_s"] is None
    bad = tempo("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--timeout-s", "0", url=server.url,
                check=False)
    assert bad.returncode != 0 and "--timeout-s" in bad.stderr


def test_runs_cancel_a_waiting_and_a_claimed_run(server) -> None:
    job = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--every-s", "3600", "--json",
                           url=server.url).stdout)
    [waiting] = httpx.get(f"{server.url}/v1/jobs/{job['id']}/runs", timeout=10).json()["runs"]
    done = tempo("runs", "cancel", waiting["id"], url=server.url)
    assert "cancelled" in done.stdout
    as_json = json.loads(tempo("runs", "cancel", waiting["id"], "--json", url=server.url).stdout)
    assert as_json["status"] == "cancelled"

    queue = unique("q")
    httpx.post(f"{server.url}/v1/jobs", json={"target": f"queue:{queue}", "schedule": {"at": "2020-01-01T00:00:00Z"}},
               timeout=10).raise_for_status()
    [run] = httpx.post(f"{server.url}/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 10},
                       timeout=20).json()["runs"]
    asked = json.loads(tempo("runs", "cancel", run["id"], "--json", url=server.url).stdout)
    assert asked["status"] == "claimed" and asked["cancel_requested"] is True

    ended = httpx.post(f"{server.url}/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": False}, timeout=10)
    assert ended.json()["status"] == "cancelled"  # asked to stop, it stopped: recorded cancelled
    again = tempo("runs", "cancel", run["id"], url=server.url)  # cancelled already: answered as it is
    assert "cancelled" in again.stdout
    missing = tempo("runs", "cancel", "r_nope", url=server.url, check=False)
    assert missing.returncode != 0 and "404" in missing.stderr


def test_runs_cancel_of_a_finished_run_says_so(server) -> None:
    queue = unique("q")
    httpx.post(f"{server.url}/v1/jobs", json={"target": f"queue:{queue}", "schedule": {"at": "2020-01-01T00:00:00Z"}},
               timeout=10).raise_for_status()
    [run] = httpx.post(f"{server.url}/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 10},
                       timeout=20).json()["runs"]
    httpx.post(f"{server.url}/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True},
               timeout=10).raise_for_status()
    refused = tempo("runs", "cancel", run["id"], url=server.url, check=False)
    assert refused.returncode == 1 and "409" in refused.stderr and "run_finished" in refused.stderr
