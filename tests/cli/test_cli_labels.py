"""`tempo jobs create/update --label KEY=VALUE`, `jobs update --remove-label`,
`jobs list --label KEY=VALUE` (or KEY:VALUE), and `--notify-url` / `--notify-event` for a
job's own notification setting: against a real `tempo serve`, in this
process (`cli.main`), with errors naming the flag."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Server, configured_server, unique
from tempo import cli

SECRET = "s" * 40


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TEMPO_URL", "TEMPO_TOKEN", "TEMPO_CA_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def notifying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that sends notifications (a `[notify]` table)."""
    with configured_server(tmp_path_factory.mktemp("cli-notify"), f'[notify]\nsecret = "{SECRET}"\n') as srv:
        yield srv


def tempo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse: usage errors
        code = exc.code if isinstance(exc.code, int) else 2 if exc.code else 0
    out, err = capsys.readouterr()
    return code, out, err


def ok_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code, out, err = tempo(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_labels_on_create_update_and_list(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    team = unique("team").lower()
    url = ("--url", server.url)
    job = ok_json(capsys, "jobs", "create", *url, "--target", "queue:cli", "--every-s", "60",
                  "--label", f"team={team}", "--label", "env=prod", "--label", "note=a=b")
    assert job["labels"] == {"env": "prod", "note": "a=b", "team": team}
    other = ok_json(capsys, "jobs", "create", *url, "--target", "queue:cli", "--every-s", "60", "--label", f"team={team}")
    listed = ok_json(capsys, "jobs", "list", *url, "--label", f"team:{team}")
    assert [j["id"] for j in listed["jobs"]] == [other["id"], job["id"]]
    # A label is written alike on create and list: KEY=VALUE, or KEY:VALUE
    # as the API's filter has it.
    both = ok_json(capsys, "jobs", "list", *url, "--label", f"team={team}", "--label", "env:prod")
    assert [j["id"] for j in both["jobs"]] == [job["id"]]
    changed = ok_json(capsys, "jobs", "update", job["id"], *url, "--label", "env=dev", "--remove-label", "note")
    assert changed["labels"] == {"env": "dev", "team": team} and changed["version"] == 2
    code, out, _ = tempo(capsys, "jobs", "get", job["id"], *url)
    assert code == 0 and '"env": "dev"' in out


@pytest.mark.parametrize(("args", "flag"), [
    (("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--label", "Team=x"), "--label"),
    (("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--label", "team=" + "v" * 257), "--label"),
    (("jobs", "list", "--label", "Team:x"), "--label"),
])
def test_a_bad_label_is_refused_naming_the_flag(
    server: Server, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], flag: str
) -> None:
    code, _, err = tempo(capsys, *args, "--url", server.url)
    assert code == 1 and f"{flag}:" in err and "400" in err


@pytest.mark.parametrize("args", [
    ("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--label", "team"),
    ("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--label", "=x"),
    ("jobs", "list", "--label", "team"),
    ("jobs", "list", "--label", ":payments"),
    ("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--notify-event", "run.failed"),
])
def test_a_malformed_flag_is_a_usage_error(server: Server, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    code, _, err = tempo(capsys, *args, "--url", server.url)
    assert code == 2 and ("--label" in err or "--notify" in err)


def test_labels_and_notify_do_not_go_with_file(tmp_path: Path, server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"target": "queue:cli", "schedule": {"every_s": 60}}\n')
    code, _, err = tempo(capsys, "jobs", "create", "--file", str(lines), "--label", "a=b", "--url", server.url)
    assert code == 2 and "--label" in err and "--file" in err


def test_notify_flags_set_and_change_a_jobs_setting(notifying: Server, capsys: pytest.CaptureFixture[str]) -> None:
    url = ("--url", notifying.url)
    job = ok_json(capsys, "jobs", "create", *url, "--target", "queue:cli", "--every-s", "60",
                  "--notify-url", "https://hooks.example.com/a", "--notify-event", "run.failed",
                  "--notify-event", "job.recovered", "--notify-event", "run.failed")
    assert job["notify"] == {"url": "https://hooks.example.com/a", "events": ["run.failed", "job.recovered"]}
    default = ok_json(capsys, "jobs", "create", *url, "--target", "queue:cli", "--every-s", "60",
                      "--notify-url", "https://hooks.example.com/b")
    assert default["notify"]["events"] == ["run.failed", "job.completed", "job.recovered"]
    # --notify-event alone keeps the URL (a merge of the setting).
    events = ok_json(capsys, "jobs", "update", job["id"], *url, "--notify-event", "job.completed")
    assert events["notify"] == {"url": "https://hooks.example.com/a", "events": ["job.completed"]}
    moved = ok_json(capsys, "jobs", "update", job["id"], *url, "--notify-url", "https://hooks.example.com/c")
    assert moved["notify"] == {"url": "https://hooks.example.com/c", "events": ["job.completed"]}
    # Other changes keep it as it is.
    renamed = ok_json(capsys, "jobs", "update", job["id"], *url, "--name", "renamed")
    assert renamed["notify"] == moved["notify"] and renamed["version"] == 4
    code, _, err = tempo(capsys, "jobs", "update", job["id"], *url, "--notify-event", "run.lost")
    assert code == 1 and "--notify-event:" in err
    code, _, err = tempo(capsys, "jobs", "update", job["id"], *url, "--notify-url", "ftp://x")
    assert code == 1 and "--notify-url:" in err


def test_notify_on_a_server_without_notifications_names_the_flag(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = tempo(capsys, "jobs", "create", "--url", server.url, "--target", "queue:cli", "--every-s", "60",
                         "--notify-url", "https://hooks.example.com/a")
    assert code == 1 and "--notify-url/--notify-event:" in err and "[notify]" in err
