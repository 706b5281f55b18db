"""`--after`, `--on`, `--any`, `--within-s` on `tempo jobs create` and
`tempo jobs update`, and `tempo jobs graph` (docs/semantics.md "Dependencies")."""

import json

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
