"""The raft core's golden transcripts (tests/raft/testdata/*.txt, format in
tests/raft/datadriven.py): each file's commands give the outputs written in
it. `pytest tests/raft/test_datadriven.py --rewrite` writes them anew."""

import difflib
from pathlib import Path

import pytest

from .datadriven import Case, parse, render, replay

TESTDATA = Path(__file__).parent / "testdata"
SCENARIOS = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_transcript(path: Path, request: pytest.FixtureRequest) -> None:
    expected, actual = replay(path)
    if request.config.getoption("rewrite"):
        path.write_text(actual)
        return
    diff = "".join(difflib.unified_diff(
        expected.splitlines(keepends=True), actual.splitlines(keepends=True), str(path), "now",
    ))
    assert actual == expected, f"the transcript changed (pytest --rewrite writes it anew):\n{diff}"


def test_the_scenarios_cover_what_they_promise() -> None:
    names = {p.stem for p in SCENARIOS}
    assert {"election", "replication", "leader_change", "stale_term"} <= names


def test_parse_and_render_round_trip_and_show_a_changed_output() -> None:
    text = "# a comment\ncluster 3\n----\nold\n\n# between\nstatus\n----\nx\ny\n"
    preambles, cases = parse(text)
    assert [c.command for c in cases] == ["cluster 3", "status"]
    assert [c.expected for c in cases] == ["old", "x\ny"]
    assert render(preambles, cases, ["old", "x\ny"]) == text
    assert render(preambles, cases, ["new", "x\ny"]) != text
    assert cases[1] == Case(7, "status", "x\ny")


def test_a_command_without_its_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse("status\nno separator\n")
