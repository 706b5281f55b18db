"""`tempo jobs update`: a job changed in place from the command line, and
`--if-version` refused when the job moved on."""

import json
import os
import subprocess

from conftest import tempo_command


def tempo(*args: str, url: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TEMPO_URL"}
    done = subprocess.run([*tempo_command(), *args, "--url", url], capture_output=True, text=True, env=env, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_update_with_and_without_if_version(server) -> None:
    job = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--cron", "0 3 * * *", "--json", url=server.url).stdout)
    changed = json.loads(tempo(
        "jobs", "update", job["id"], "--cron", "30 4 * * *", "--timezone", "Europe/Berlin", "--name", "n",
        "--max-attempts", "2", "--if-version", "1", "--json", url=server.url,
    ).stdout)
    assert changed["schedule"] == {"cron": "30 4 * * *", "timezone": "Europe/Berlin"}
    assert (changed["name"], changed["retry"]["max_attempts"], changed["version"]) == ("n", 2, 2)
    assert changed["next_run_at"] != job["next_run_at"]
    stale = tempo("jobs", "update", job["id"], "--lease-s", "30", "--if-version", "1", url=server.url, check=False)
    assert stale.returncode == 1 and "412" in stale.stderr and "version_mismatch" in stale.stderr
    again = json.loads(tempo("jobs", "update", job["id"], "--lease-s", "30", "--json", url=server.url).stdout)
    assert (again["lease_s"], again["version"]) == (30, 3)
    nothing = tempo("jobs", "update", job["id"], url=server.url, check=False)
    assert nothing.returncode != 0 and "at least one field" in nothing.stderr


def _created(server, *flags: str) -> dict:
    job: dict = json.loads(tempo("jobs", "create", "--target", "queue:cli", *flags, "--json", url=server.url).stdout)
    return job


def _updated(server, job_id: str, *flags: str) -> dict:
    job: dict = json.loads(tempo("jobs", "update", job_id, *flags, "--json", url=server.url).stdout)
    return job


def test_a_new_cron_keeps_the_zone_and_the_dst_policy(server) -> None:
    job = _created(server, "--cron", "30 2 * * *", "--timezone", "Europe/Berlin", "--dst-gap", "skip",
                   "--dst-repeat", "both")
    berlin = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "dst": {"gap": "skip", "repeat": "both"}}
    assert job["schedule"] == berlin
    assert _updated(server, job["id"], "--cron", "0 3 * * *")["schedule"] == berlin | {"cron": "0 3 * * *"}


def test_timezone_alone_changes_only_the_zone(server) -> None:
    job = _created(server, "--cron", "0 3 * * *", "--timezone", "Europe/Berlin")
    changed = _updated(server, job["id"], "--timezone", "Asia/Tokyo")
    assert changed["schedule"] == {"cron": "0 3 * * *", "timezone": "Asia/Tokyo"}
    assert changed["next_run_at"] != job["next_run_at"]


def test_dst_flags_alone_change_only_the_dst_policy(server) -> None:
    job = _created(server, "--cron", "30 2 * * *", "--timezone", "Europe/Berlin")
    changed = _updated(server, job["id"], "--dst-repeat", "last")
    assert changed["schedule"]["dst"] == {"gap": "shift", "repeat": "last"}
    bad = tempo("jobs", "update", job["id"], "--dst-gap", "never", url=server.url, check=False)
    assert bad.returncode != 0 and "--dst-gap" in bad.stderr


def test_another_kind_replaces_the_old_one(server) -> None:
    job = _created(server, "--cron", "0 3 * * *", "--timezone", "Europe/Berlin", "--max-runs", "4")
    # The zone goes with cron; the end condition stays.
    assert _updated(server, job["id"], "--every-s", "60")["schedule"] == {"every_s": 60, "max_runs": 4}
    zoned = tempo("jobs", "update", job["id"], "--timezone", "UTC", url=server.url, check=False)
    assert zoned.returncode == 1 and "--timezone" in zoned.stderr


def test_catchup_flags_on_update(server) -> None:
    job = _created(server, "--every-s", "60", "--catchup-policy", "all", "--catchup-max-runs", "5")
    changed = _updated(server, job["id"], "--catchup-window-s", "600")
    assert changed["catchup"] == {"window_s": 600, "policy": "all", "max_runs": 5}
    bad = tempo("jobs", "update", job["id"], "--catchup-policy", "sometimes", url=server.url, check=False)
    assert bad.returncode == 1 and "--catchup-policy" in bad.stderr
