"""How `tempo runs get` and `tempo jobs get` print one record: a text of
several lines (a command's output, a stderr tail) stays in the value's
column, without an empty line for its final line break."""

import json

import pytest

from conftest import Server
from tempo import cli


def test_a_text_of_several_lines_stays_in_its_column() -> None:
    row = {"id": "r_1", "output": "first\r\nsecond\nthird\n", "error": None}
    assert cli.record(row).splitlines() == [
        "id      r_1",
        "output  first",
        "        second",
        "        third",
        "error   -",
    ]


def test_a_one_line_text_is_unchanged() -> None:
    assert cli.record({"id": "r_1", "output": "sent"}) == "id      r_1\noutput  sent"


def test_runs_list_help_names_every_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["runs", "list", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for status in ("waiting", "claimed", "done", "failed", "cancelled", "missed"):
        assert status in text


def test_a_run_shows_the_missed_fields_only_on_a_missed_row() -> None:
    run = {"id": "r_1", "status": "done", "reason": None, "missed_from": None, "missed_until": None,
           "count": None, "attempts": [], "caused_by": []}
    assert list(cli.run_record(run)) == ["id", "status"]
    caused = cli.run_record({**run, "caused_by": [{"job_id": "j_A", "run_id": "r_A", "attempt": 1, "status": "done"}]})
    assert caused["caused_by"] == "r_A (done)"
    missed = {**run, "status": "missed", "reason": "outside_window", "missed_from": "2027-01-01T08:01:00.000Z",
              "missed_until": "2027-01-02T07:00:00.000Z", "count": 1379}
    assert list(cli.run_record(missed)) == ["id", "status", "reason", "missed_from", "missed_until", "count"]


def test_a_triggered_run_is_printed_as_runs_get_prints_it(
    server: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEMPO_TOKEN", raising=False)
    assert cli.main(["jobs", "create", "--target", "queue:cli", "--every-s", "3600", "--url", server.url, "--json"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert cli.main(["jobs", "trigger", job["id"], "--url", server.url]) == 0
    fields = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert "status" in fields and not set(cli.MISSED_FIELDS) & set(fields)
