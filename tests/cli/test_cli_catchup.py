"""`tempo jobs create --catchup-policy/--catchup-window-s/--catchup-max-runs`:
the flags become the job's `catchup` field, and the server's errors about
it name the flag."""

import json

from .test_cli import tempo


def test_catchup_flags_set_the_jobs_policy(server):
    done = tempo("--json", "jobs", "create", "--target", "queue:cli-cu", "--every-s", "60", "--catchup-policy", "all",
                 "--catchup-window-s", "3600", "--catchup-max-runs", "5", url=server.url)
    assert json.loads(done.stdout)["catchup"] == {"window_s": 3600, "policy": "all", "max_runs": 5}
    done = tempo("--json", "jobs", "create", "--target", "queue:cli-cu", "--every-s", "60", url=server.url)
    assert json.loads(done.stdout)["catchup"] is None


def test_bad_catchup_flags_are_named(server):
    for flag, value in (("--catchup-policy", "sometimes"), ("--catchup-window-s", "-1"), ("--catchup-max-runs", "0")):
        done = tempo("jobs", "create", "--target", "queue:cli-cu", "--every-s", "60", flag, value,
                     url=server.url, check=False)
        assert done.returncode == 1 and flag in done.stderr, done.stderr
    done = tempo("jobs", "create", "--target", "queue:cli-cu", "--at", "2030-01-01T00:00:00Z", "--catchup-policy",
                 "none", url=server.url, check=False)
    assert done.returncode == 1 and "--catchup-policy/--catchup-window-s/--catchup-max-runs" in done.stderr, done.stderr
