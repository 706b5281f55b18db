"""`--after`, `--on`, `--any`, `--within-s` on `tempo jobs create` and
`tempo jobs update`, and `tempo jobs graph` (docs/semantics.md "Dependencies")."""

import json

import pytest

from tempo.cli import _cell, graph_lines

from .test_cli_update import tempo


def test_create_after_parents_and_show_the_graph(server) -> None:
    def create(*flags: str) -> dict:
        return json.loads(tempo("jobs", "create", "--target", "queue:cli", *flags, "--json", url=server.url).stdout)

    a = create("--every-s", "3600")
    b = create("--every-s", "3600")
    child = create("--after", f"{a['id']},{b['id']}", "--on", "finished", "--within-s", "600")
    assert child["schedule"]["after"] == {"jobs": [a["id"], b["id"]], "on": "finished", "all": True, "within_s": 600}
    anyone = create("--after", a["id"], "--any")
    assert anyone["schedule"]["after"]["all"] is False
    text = tempo("jobs", "graph", child["id"], url=server.url).stdout
    assert f"{a['id']} -> {child['id']}" in text and "downstream: none" in text
    moved = json.loads(tempo("jobs", "update", anyone["id"], "--after", b["id"], "--json", url=server.url).stdout)
    assert moved["schedule"]["after"]["jobs"] == [b["id"]]
    clock = json.loads(tempo("jobs", "update", anyone["id"], "--every-s", "60", "--json", url=server.url).stdout)
    assert "after" not in clock["schedule"] and clock["schedule"]["every_s"] == 60


def test_a_missing_parent_names_the_flag(server) -> None:
    bad = tempo("jobs", "create", "--target", "queue:cli", "--after", "j_" + "0" * 26, url=server.url, check=False)
    assert bad.returncode != 0 and "--after" in bad.stderr and "no job" in bad.stderr


def test_graph_lines_say_when_edges_were_left_out() -> None:
    text = graph_lines({"job_id": "j_B", "depth": 1, "upstream": [{"parent": "j_A", "child": "j_B"}],
                        "downstream": [], "truncated": True})
    assert text.splitlines() == ["j_B (depth 1)", "upstream:", "  j_A -> j_B", "downstream: none",
                                 "(more edges left out: the answer's bound)"]


def test_requires_gates_a_clock_schedule(server) -> None:
    parent = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--every-s", "3600", "--json",
                              url=server.url).stdout)
    gated = json.loads(tempo(
        "jobs", "create", "--target", "queue:cli", "--cron", "0 6 * * *", "--requires", parent["id"],
        "--within-s", "86400", "--wait-s", "10800", "--json", url=server.url,
    ).stdout)
    assert gated["schedule"]["requires"] == {"jobs": [parent["id"]], "on": "succeeded", "within_s": 86400,
                                             "wait_s": 10800}
    bad = tempo("jobs", "create", "--target", "queue:cli", "--at", "2030-01-01T00:00:00Z", "--requires",
                parent["id"], url=server.url, check=False)
    assert bad.returncode != 0 and "--requires" in bad.stderr


def test_the_jobs_table_says_what_a_job_runs_after() -> None:
    after = {"schedule": {"after": {"jobs": ["j_A", "j_B"], "on": "failed", "all": False}}}
    assert _cell(after, "schedule") == "after j_A|j_B failed"
    gated = {"schedule": {"cron": "0 6 * * *", "timezone": "UTC", "requires": {"jobs": ["j_L"]}}}
    assert _cell(gated, "schedule") == "cron 0 6 * * * (UTC), requires j_L"


def _cli(capsys, monkeypatch, *argv: str, url: str = "http://127.0.0.1:9") -> tuple[int, str, str]:
    """`tempo ARGV` in this process: its exit status, stdout and stderr."""
    from tempo.cli import main

    monkeypatch.delenv("TEMPO_URL", raising=False)
    code = main([*argv, "--url", url])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_flag_that_shapes_no_edges_is_a_usage_error_naming_it(capsys, monkeypatch) -> None:
    """`--on`, `--any`, `--all`, `--within-s` and `--wait-s` without the
    edges they shape were dropped silently; now each is exit 2, naming
    the flag, before anything is sent (no server listens here)."""
    cases = [
        (["--every-s", "10", "--wait-s", "30"], "--wait-s: only with --requires"),
        (["--every-s", "3600", "--on", "failed", "--any"], "--on: only with --after or --requires"),
        (["--every-s", "3600", "--any"], "--any: only with --after"),
        (["--every-s", "3600", "--all"], "--all: only with --after"),
        (["--cron", "0 6 * * *", "--within-s", "60"], "--within-s: only with --after or --requires"),
        (["--cron", "0 6 * * *", "--requires", "j_x", "--any"], "--any: only with --after"),
        (["--after", "j_x", "--wait-s", "5"], "--wait-s: only with --requires"),
    ]
    for flags, said in cases:
        code, _, err = _cli(capsys, monkeypatch, "jobs", "create", "--target", "queue:cli", *flags)
        assert (code, said in err) == (2, True), (flags, err)
    with pytest.raises(SystemExit) as both:
        _cli(capsys, monkeypatch, "jobs", "create", "--target", "queue:cli", "--after", "j_x", "--any", "--all")
    assert both.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_update_changes_the_jobs_own_edges_with_a_flag_alone(server, capsys, monkeypatch) -> None:
    def run(*argv: str) -> tuple[int, dict, str]:
        code, out, err = _cli(capsys, monkeypatch, *argv, "--json", url=server.url)
        return code, (json.loads(out) if code == 0 else {}), err

    _, a, _ = run("jobs", "create", "--target", "queue:cli", "--every-s", "3600")
    _, child, _ = run("jobs", "create", "--target", "queue:cli", "--after", a["id"], "--within-s", "600")
    code, changed, err = run("jobs", "update", child["id"], "--on", "failed")
    assert code == 0, err
    assert changed["schedule"]["after"] == {"jobs": [a["id"]], "on": "failed", "all": True, "within_s": 600}
    code, _, err = run("jobs", "update", child["id"], "--any")  # within_s goes only with all: the server says so
    assert code == 1 and "--within-s" in err
    _, anyone, _ = run("jobs", "create", "--target", "queue:cli", "--after", a["id"], "--any")
    _, back, _ = run("jobs", "update", anyone["id"], "--all")
    assert back["schedule"]["after"] == {"jobs": [a["id"]], "on": "succeeded", "all": True, "within_s": None}
    code, _, err = run("jobs", "update", anyone["id"], "--wait-s", "60")
    assert code == 2 and "--wait-s: only with --requires (the job has after edges)" in err
    _, gated, _ = run("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--requires", a["id"])
    _, waits, _ = run("jobs", "update", gated["id"], "--wait-s", "120", "--on", "finished")
    assert waits["schedule"]["requires"] == {"jobs": [a["id"]], "on": "finished", "within_s": None, "wait_s": 120}
    code, _, err = run("jobs", "update", gated["id"], "--any")
    assert code == 2 and "--any: only with --after (the job has requires edges)" in err
    code, _, err = run("jobs", "update", a["id"], "--on", "failed")
    assert code == 2 and "--on: only with --after or --requires, and the job has no edges to change" in err
