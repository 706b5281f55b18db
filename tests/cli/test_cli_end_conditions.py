"""`tempo jobs create/update --end-at --max-runs`, `tempo preview` with
them, and `tempo jobs pause --note`, against a real `tempo serve`; errors
name the flag."""

import json

from .test_cli_update import tempo


def _json(*args: str, url: str) -> dict:
    return json.loads(tempo(*args, "--json", url=url).stdout)


def test_create_and_update_end_conditions(server) -> None:
    job = _json("jobs", "create", "--target", "queue:cli-end", "--every-s", "3600",
                "--end-at", "2031-01-01T00:00:00Z", "--max-runs", "5", url=server.url)
    assert job["schedule"] == {"every_s": 3600, "end_at": "2031-01-01T00:00:00.000Z", "max_runs": 5}
    assert job["runs_left"] == 5
    # --max-runs alone changes it in the job's schedule, and keeps the rest.
    raised = _json("jobs", "update", job["id"], "--max-runs", "7", url=server.url)
    assert raised["schedule"] == {"every_s": 3600, "end_at": "2031-01-01T00:00:00.000Z", "max_runs": 7}
    assert raised["runs_left"] == 7 and raised["version"] == 2
    removed = _json("jobs", "update", job["id"], "--end-at", "none", url=server.url)
    assert removed["schedule"] == {"every_s": 3600, "max_runs": 7}
    # A schedule flag replaces the schedule whole, with the end conditions given.
    whole = _json("jobs", "update", job["id"], "--cron", "0 3 * * *", "--max-runs", "2", url=server.url)
    assert whole["schedule"] == {"cron": "0 3 * * *", "timezone": "UTC", "max_runs": 2}
    shown = tempo("jobs", "get", job["id"], url=server.url).stdout
    assert "runs_left" in shown and '"max_runs": 2' in shown


def test_errors_name_the_flag(server) -> None:
    one_off = tempo("jobs", "create", "--target", "queue:cli-end", "--at", "2030-01-01T00:00:00Z",
                    "--max-runs", "3", url=server.url, check=False)
    assert one_off.returncode != 0 and "--max-runs:" in one_off.stderr, one_off.stderr
    zero = tempo("jobs", "create", "--target", "queue:cli-end", "--every-s", "60", "--max-runs", "0",
                 url=server.url, check=False)
    assert zero.returncode != 0 and "--max-runs:" in zero.stderr, zero.stderr
    bad_time = tempo("jobs", "create", "--target", "queue:cli-end", "--every-s", "60", "--end-at", "soon",
                     url=server.url, check=False)
    assert bad_time.returncode != 0 and "--end-at:" in bad_time.stderr, bad_time.stderr
    not_a_number = tempo("jobs", "create", "--target", "queue:cli-end", "--every-s", "60", "--max-runs", "x",
                         url=server.url, check=False)
    assert not_a_number.returncode != 0 and "--max-runs" in not_a_number.stderr


def test_preview_honours_end_at_and_max_runs(server) -> None:
    answer = _json("preview", "--every-s", "60", "--after", "2030-01-01T00:00:00Z", "--end-at",
                   "2030-01-01T00:03:00Z", "--count", "50", url=server.url)
    assert [o["at"] for o in answer["occurrences"]] == [
        "2030-01-01T00:01:00.000Z", "2030-01-01T00:02:00.000Z", "2030-01-01T00:03:00.000Z"]
    capped = _json("preview", "--cron", "@daily", "--max-runs", "2", "--count", "10", url=server.url)
    assert len(capped["occurrences"]) == 2


def test_pause_with_a_note(server) -> None:
    job = _json("jobs", "create", "--target", "queue:cli-end", "--every-s", "3600", url=server.url)
    paused = _json("jobs", "pause", job["id"], "--note", "waiting on the vendor", url=server.url)
    assert paused["state"] == "paused" and paused["paused"]["note"] == "waiting on the vendor"
    shown = tempo("jobs", "get", job["id"], url=server.url).stdout
    assert "waiting on the vendor" in shown
    plain = _json("jobs", "create", "--target", "queue:cli-end", "--every-s", "3600", url=server.url)
    assert _json("jobs", "pause", plain["id"], url=server.url)["paused"]["note"] is None
    other = _json("jobs", "create", "--target", "queue:cli-end", "--every-s", "3600", url=server.url)
    too_long = tempo("jobs", "pause", other["id"], "--note", "x" * 1001, url=server.url, check=False)
    assert too_long.returncode != 0 and "--note:" in too_long.stderr, too_long.stderr
