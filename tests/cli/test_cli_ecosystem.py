"""The `tempo` command as a CLI of its ecosystem: global flags anywhere,
usage errors naming the flag, documented exit statuses, help with examples,
`events`, `preview`, `jobs create --file`, and local times beside UTC."""

import argparse
import io
import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from conftest import Server, free_port, tempo_command, unique
from tempo import cli
from tempo.net.agent import USER_AGENT


def tempo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `tempo ARGS` run in this process."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        code = exc.code if isinstance(exc.code, int) else 2 if exc.code else 0
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TEMPO_URL", "TEMPO_TOKEN", "TEMPO_CA_FILE"):
        monkeypatch.delenv(name, raising=False)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


# -- global flags, version, usage errors -----------------------------------------


@pytest.mark.parametrize("order", [
    ("--json", "jobs", "list", "--url", "{url}"),
    ("--url", "{url}", "--json", "jobs", "list"),
    ("jobs", "--json", "--url", "{url}", "list"),
    ("jobs", "list", "--url", "{url}", "--json"),
])
def test_global_flags_in_any_position(server: Server, capsys: pytest.CaptureFixture[str], order: tuple[str, ...]) -> None:
    code, out, err = tempo(capsys, *[a.format(url=server.url) for a in order])
    assert code == 0, err
    assert "jobs" in json.loads(out)


def test_a_global_flag_given_twice_keeps_the_later(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    code, _, err = tempo(capsys, "--url", dead, "jobs", "list", "--url", server.url, "--json")
    assert code == 0, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = tempo(capsys, "--version")
    assert code == 0 and out.strip() == USER_AGENT.replace("/", " ")


@pytest.mark.parametrize(("flag", "value"), [
    ("--backoff-s", "10,abc"), ("--backoff-s", "10,-5"), ("--payload", "{"),
    ("--lease-s", "ten"), ("--max-attempts", "1.5"),
])
def test_a_bad_flag_value_is_a_usage_error_naming_it(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    code, _, err = tempo(capsys, "jobs", "create", "--target", "queue:x", "--every-s", "60", f"{flag}={value}",
                           "--url", "http://127.0.0.1:1")
    assert code == 2, err
    assert flag in err and "Traceback" not in err and "usage:" in err


@pytest.mark.parametrize(("args", "flag"), [
    (("--concurrency", "0"), "--concurrency"), (("--grace-s", "-1"), "--grace-s"),
    (("--worker-id", "w" * 201), "--worker-id"),
    (tuple(arg for i in range(101) for arg in ("--queue", f"q{i}")), "--queue"),
])
def test_bad_worker_flags_are_usage_errors(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], flag: str) -> None:
    code, _, err = tempo(capsys, "worker", "--url", "http://127.0.0.1:1", "--queue", "q", *args, "--", "true")
    assert code == 2 and flag in err and "Traceback" not in err, err


def test_create_needs_exactly_one_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = tempo(capsys, "jobs", "create", "--target", "queue:x")
    assert code == 2 and all(f in err for f in ("--at", "--cron", "--every-s"))
    code, _, err = tempo(capsys, "jobs", "create", "--target", "queue:x", "--at", now_iso(), "--every-s", "5")
    assert code == 2 and "--every-s" in err and "--at" in err
    code, out, _ = tempo(capsys, "jobs", "create", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "exactly one of --at, --cron or --every-s" in text


@pytest.mark.parametrize(("args", "flag", "path"), [
    (("jobs", "create", "--target", "queue:cli", "--every-s", "0"), "--every-s", "schedule.every_s"),
    (("jobs", "create", "--target", "queue:cli", "--at", "tomorrow"), "--at", "schedule.at"),
    (("jobs", "create", "--target", "queue:cli", "--cron", "0 3 * * *", "--timezone", "Mars/Olympus"),
     "--timezone", "schedule.timezone"),
    (("jobs", "create", "--target", "nowhere", "--every-s", "60"), "--target", "target"),
    (("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--backoff-s", "10," * 40 + "10"),
     "--backoff-s", "retry.backoff_s"),
    (("jobs", "list", "--limit", "0"), "--limit", "query.limit"),
    (("jobs", "runs", "J", "--since", "yesterday"), "--since", "query.since"),
    (("preview", "--every-s", "60", "--count", "100000"), "--count", "count"),
    (("events", "--after", "x"), "--after", "query.after"),
])
def test_server_errors_name_the_flag(
    server: Server, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], flag: str, path: str
) -> None:
    code, _, err = tempo(capsys, *args, "--url", server.url)
    assert code == 1, err
    assert flag in err and path not in err.replace(flag, ""), err


# -- exit statuses -----------------------------------------------------------------


def test_exit_statuses(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    assert tempo(capsys, "jobs", "list", "--url", server.url)[0] == 0
    assert tempo(capsys, "jobs", "get", "nosuchjob", "--url", server.url)[0] == 1
    assert tempo(capsys, "jobs", "list", "--limit", "many", "--url", server.url)[0] == 2
    assert tempo(capsys, "jobs", "frobnicate")[0] == 2
    dead = f"http://127.0.0.1:{free_port()}"
    code, _, err = tempo(capsys, "jobs", "list", "--url", dead)
    assert code == 3 and "cannot reach" in err
    code, out, _ = tempo(capsys, "--help")
    text = " ".join(out.split())
    for line in ("0 ok", "1 the server said no", "2 usage", "3 no server answered"):
        assert line in text, out


def test_a_subprocess_exits_3_when_unreachable() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TEMPO_URL"}
    done = subprocess.run([*tempo_command(), "--url", f"http://127.0.0.1:{free_port()}", "jobs", "list"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 3 and "Traceback" not in done.stderr


# -- help --------------------------------------------------------------------------


def _parsers(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_flag_and_command_has_help_and_an_example() -> None:
    seen = 0
    for name, parser in _parsers(cli.parser(), "tempo"):
        seen += 1
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert choice.help, f"{name} {choice.dest}: no help"
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help"
        if name != "tempo":
            assert parser.epilog and f"\n  {name}" in "\n" + parser.epilog.replace("example", "").replace(":", ""), \
                f"{name}: no example in its epilog"
    assert seen >= 15


# -- events ------------------------------------------------------------------------


def failed_run(server: Server) -> dict[str, str]:
    """A one-off job whose only attempt failed: a `run.failed` event."""
    queue = unique("ev")
    body = {"target": f"queue:{queue}", "schedule": {"at": now_iso()}, "retry": {"max_attempts": 1}}
    job = httpx.post(f"{server.url}/v1/jobs", json=body, timeout=10).json()
    runs: list[dict[str, str]] = []
    deadline_s = time.monotonic() + 10
    while not runs and time.monotonic() < deadline_s:
        runs = httpx.post(f"{server.url}/v1/claim", json={"worker": "w", "queues": [queue]}, timeout=10).json()["runs"]
    (run,) = runs
    answer = httpx.post(f"{server.url}/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": False, "error": "boom"}, timeout=10)
    assert answer.status_code == 200, answer.text
    return {"job_id": job["id"], "run_id": run["id"]}


def test_events_lists_a_page(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    ids = failed_run(server)
    code, out, err = tempo(capsys, "events", "--url", server.url, "--json", "--limit", "1000")
    assert code == 0, err
    page = json.loads(out)
    assert any(e["type"] == "run.failed" and e["run_id"] == ids["run_id"] for e in page["events"])
    code, out, err = tempo(capsys, "events", "--url", server.url, "--limit", "1000")
    line = next(line for line in out.splitlines() if ids["run_id"] in line)
    assert "run.failed" in line and ids["job_id"] in line
    code, out, err = tempo(capsys, "events", "--url", server.url, "--after", page["next_cursor"])
    assert code == 0 and ids["run_id"] not in out


def test_events_follow_prints_new_events_as_they_come(server: Server) -> None:
    cursor = httpx.get(f"{server.url}/v1/events?limit=1000", timeout=10).json()["next_cursor"]
    while True:  # the last cursor: page until empty
        page = httpx.get(f"{server.url}/v1/events?limit=1000&after={cursor}", timeout=10).json()
        if not page["events"]:
            break
        cursor = page["next_cursor"]
    argv = [*tempo_command(), "events", "--follow", "--json", "--after", cursor, "--url", server.url]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            time.sleep(0.5)
            ids = failed_run(server)
            assert proc.stdout is not None
            created = json.loads(proc.stdout.readline())  # the job's audit trail comes first
            assert created["job_id"] == ids["job_id"] and created["type"] == "job.created"
            event = json.loads(proc.stdout.readline())
            assert event["run_id"] == ids["run_id"] and event["type"] == "run.failed"
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err


# -- preview -----------------------------------------------------------------------


def test_preview_shows_local_times_beside_utc(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    args = ("preview", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin", "--after", "2026-03-27T12:00:00Z",
            "--count", "3", "--url", server.url)
    code, out, err = tempo(capsys, *args)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["AT", "LOCAL", "OFFSET", "DST"]
    assert lines[1].split()[:3] == ["2026-03-28T02:00:00.000Z", "2026-03-28T03:00:00.000", "+01:00"]
    assert lines[2].split()[:3] == ["2026-03-29T01:00:00.000Z", "2026-03-29T03:00:00.000", "+02:00"]
    code, out, err = tempo(capsys, *args, "--json")
    assert json.loads(out)["occurrences"][0]["local"] == "2026-03-28T03:00:00.000"


# -- jobs create --file ------------------------------------------------------------


def test_create_from_a_file_reports_each_line(
    server: Server, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "file_batch_jobs", 2)  # three batches for five jobs
    name = unique("file")
    good = {"target": "queue:file", "schedule": {"every_s": 600}}
    lines = [
        json.dumps(good | {"name": f"{name}-1"}), "", json.dumps(good | {"name": f"{name}-2"}),
        json.dumps({"target": "queue:file", "schedule": {"every_s": 0}}),
        json.dumps(good | {"name": f"{name}-3"}), json.dumps(good | {"name": f"{name}-4"}),
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = tempo(capsys, "jobs", "create", "--file", str(path), "--url", server.url)
    assert code == 1, err  # one line refused
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["LINE", "STATUS", "RESULT"]
    assert [r[:2] for r in rows[1:6]] == [["1", "201"], ["3", "201"], ["4", "400"], ["5", "201"], ["6", "201"]]
    assert "schedule.every_s" in out.splitlines()[3]
    listed = httpx.get(f"{server.url}/v1/jobs?limit=1000", timeout=10).json()["jobs"]
    assert sorted(j["name"] for j in listed if (j["name"] or "").startswith(name)) == [f"{name}-{i}" for i in range(1, 5)]


def test_create_from_a_file_with_a_bad_line_sends_nothing(
    server: Server, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name = unique("bad")
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps({"target": "queue:file", "schedule": {"every_s": 60}, "name": name}) + "\n{oops\n")
    code, _, err = tempo(capsys, "jobs", "create", "--file", str(path), "--url", server.url)
    assert code == 2 and "line 2" in err and "--file" in err
    listed = httpx.get(f"{server.url}/v1/jobs?limit=1000", timeout=10).json()["jobs"]
    assert all(j["name"] != name for j in listed)
    code, _, err = tempo(capsys, "jobs", "create", "--file", str(path), "--target", "queue:x", "--url", server.url)
    assert code == 2 and "--target" in err


def test_create_from_stdin(
    server: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("stdin")
    line = json.dumps({"target": "queue:file", "schedule": {"every_s": 60}, "name": name, "request_key": name})
    monkeypatch.setattr("sys.stdin", io.StringIO(line + "\n" + line + "\n"))
    code, out, err = tempo(capsys, "--json", "jobs", "create", "--file", "-", "--url", server.url)
    assert code == 0, err
    first, second = (json.loads(line) for line in out.splitlines())
    assert (first["line"], first["status"], second["line"], second["status"]) == (1, 201, 2, 200)
    assert first["job"]["id"] == second["job"]["id"]


# -- local times -------------------------------------------------------------------


def test_list_and_get_show_the_jobs_zone_beside_utc(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique("berlin")
    code, out, err = tempo(capsys, "jobs", "create", "--target", "queue:tz", "--cron", "0 3 * * *",
                           "--timezone", "Europe/Berlin", "--name", name, "--json", "--url", server.url)
    assert code == 0, err
    job = json.loads(out)
    at = datetime.fromisoformat(job["next_run_at"])
    local = at.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin"))
    assert local.hour == 3
    expect = local.strftime("%Y-%m-%dT%H:%M:%S")
    _, out, _ = tempo(capsys, "jobs", "list", "--url", server.url)
    row = next(line for line in out.splitlines() if name in line)
    assert job["next_run_at"] in row and expect in row and local.strftime("%z")[:3] in row
    _, out, _ = tempo(capsys, "jobs", "get", job["id"], "--url", server.url)
    line = next(line for line in out.splitlines() if line.startswith("next_run_at"))
    assert job["next_run_at"] in line and expect in line and "Europe/Berlin" in line
