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
