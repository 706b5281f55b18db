"""The `tempo` command against a real server."""

import json
import os
import signal
import subprocess

import pytest

from conftest import Server, free_port, tempo_command, unique


def tempo(*args: str, url: str | None = None, env_url: str | None = None, check: bool = True):
    env = dict(os.environ)
    env.pop("TEMPO_URL", None)
    if env_url is not None:
        env["TEMPO_URL"] = env_url
    argv = [*tempo_command(), *args] + (["--url", url] if url else [])
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_create_get_list_with_json_and_tables(server, http):
    name = unique("cli")
    created = tempo(
        "jobs", "create", "--target", "queue:cli", "--every-s", "600", "--name", name,
        "--payload", '{"a": 1}', "--max-attempts", "3", "--backoff-s", "5,50",
        "--lease-s", "30", "--request-key", name, "--json", url=server.url,
    )
    job = json.loads(created.stdout)
    assert job["name"] == name and job["payload"] == {"a": 1}
    assert job["retry"] == {"max_attempts": 3, "backoff_s": [5, 50]} and job["lease_s"] == 30
    assert http.get(f"/v1/jobs/{job['id']}").json() == job

    got = tempo("jobs", "get", job["id"], "--json", env_url=server.url)
    assert json.loads(got.stdout) == job
    shown = tempo("jobs", "get", job["id"], env_url=server.url).stdout
    assert job["id"] in shown and "every 600s" not in shown  # a record, not a table
    assert any(line.split()[:2] == ["id", job["id"]] for line in shown.splitlines())

    listing = tempo("jobs", "list", "--limit", "5", env_url=server.url).stdout.splitlines()
    assert listing[0].split() == ["ID", "NAME", "STATE", "TARGET", "SCHEDULE", "NEXT_RUN_AT"]
    assert listing[1].split()[:3] == [job["id"], name, "active"]
    assert "every 600s" in listing[1]
    page = json.loads(tempo("jobs", "list", "--limit", "1", "--json", url=server.url).stdout)
    assert [j["id"] for j in page["jobs"]] == [job["id"]]


def test_url_flag_wins_over_tempo_url(server):
    dead = f"http://127.0.0.1:{free_port()}"
    done = tempo("jobs", "list", "--json", url=server.url, env_url=dead)
    assert "jobs" in json.loads(done.stdout)
    failed = tempo("jobs", "list", env_url=dead, check=False)
    assert failed.returncode == 2 and "cannot reach" in failed.stderr


def test_pause_resume_trigger_runs_delete(server):
    job = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin", "--json", url=server.url).stdout)
    paused = json.loads(tempo("jobs", "pause", job["id"], "--json", url=server.url).stdout)
    assert paused["state"] == "paused"
    resumed = json.loads(tempo("jobs", "resume", job["id"], "--json", url=server.url).stdout)
    assert resumed["state"] == "active" and resumed["next_run_at"] == job["next_run_at"]
    run = json.loads(tempo("jobs", "trigger", job["id"], "--json", url=server.url).stdout)
    assert run["job_id"] == job["id"] and run["status"] == "waiting"
    assert "waiting" in tempo("jobs", "trigger", job["id"], url=server.url).stdout

    runs = json.loads(tempo("jobs", "runs", job["id"], "--json", url=server.url).stdout)["runs"]
    assert len(runs) == 3 and run["id"] in [r["id"] for r in runs]
    table = tempo("jobs", "runs", job["id"], "--limit", "2", url=server.url).stdout.splitlines()
    assert table[0].split() == ["ID", "STATUS", "ATTEMPT", "NOMINAL_AT", "DUE_AT", "WORKER", "FINISHED_AT"]
    assert len(table) == 4 and table[-1].startswith("next page: --cursor ")
    window = tempo("jobs", "runs", job["id"], "--since", run["nominal_at"], "--until", job["next_run_at"], "--json", url=server.url)
    assert run["id"] in [r["id"] for r in json.loads(window.stdout)["runs"]]

    assert tempo("jobs", "delete", job["id"], url=server.url).stdout.strip() == "deleted"
    gone = tempo("jobs", "get", job["id"], url=server.url, check=False)
    assert gone.returncode == 1 and "404" in gone.stderr and "not_found" in gone.stderr


def test_bad_create_is_reported(server):
    done = tempo("jobs", "create", "--target", "queue:cli", "--every-s", "0", url=server.url, check=False)
    assert done.returncode == 1 and "schedule.every_s" in done.stderr
    done = tempo("jobs", "create", "--target", "queue:cli", url=server.url, check=False)
    assert done.returncode != 0 and "exactly one" in done.stderr
    done = tempo("jobs", "create", "--target", "queue:cli", "--at", "2030-01-01T00:00:00Z", "--payload", "{", url=server.url, check=False)
    assert done.returncode != 0 and "--payload" in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_exits_0_on_signal(tmp_path, sig):
    srv = Server(tmp_path / "data")
    try:
        srv.start()
        assert f"tempo serving on {srv.url}" in srv.log()
        srv.stop(sig)
    finally:
        srv.cleanup()


def test_serve_refuses_a_public_address_without_insecure(tmp_path):
    done = subprocess.run(
        [*tempo_command(), "serve", "--data-dir", str(tmp_path / "d"), "--listen", f"0.0.0.0:{free_port()}"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0
    assert "--insecure" in done.stderr and "0.0.0.0" in done.stderr


def test_serve_rejects_a_bad_listen_address(tmp_path):
    done = subprocess.run(
        [*tempo_command(), "serve", "--data-dir", str(tmp_path / "d"), "--listen", "nonsense"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0 and "--listen" in done.stderr
