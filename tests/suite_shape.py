"""The suite's shape: its markers, its time per marker, and a guard that
keeps the `process` marker honest (docs/design.md "Tests").

Markers (registered in pyproject.toml), applied at collection:

- `process`: the test starts real `tempo serve` processes. Every test in
  tests/cluster/, every test that uses a fixture that starts one
  (`PROCESS_FIXTURES`, followed through the fixtures it uses), and every
  test of a module that starts one itself (`_STARTS_SERVE`). Checked as
  the test runs: an unmarked test that starts `tempo serve` fails and says
  to mark it.
- `sim`: the seeded simulators in tests/sim/.
- `fuzz`: hypothesis-heavy and schemathesis tests: every test of a module
  that takes its settings from tests/fuzzing.py or imports schemathesis
  (`_FUZZES`), and the modules marked so by hand
  (`pytestmark = pytest.mark.fuzz`).

`pytest -m "not process"` is the quick run. At the end of every run the
time spent per marker is printed (a test with two markers counts under
both; `unmarked` is the rest), so CI's log records where the suite's time
goes.
"""

import json
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

MARKERS = ("process", "sim", "fuzz")
# The work unit of every `process` test under pytest-xdist (`-n 2 --dist
# loadgroup`, pyproject.toml): they all run in one worker, one after the
# other, as they did before the suite ran in two processes; the other worker
# takes the rest (below, "Two processes").
PROCESS_GROUP = "process"
_GROUPS_DIR_KEY = "tempo_process_ids_dir"
PROCESS_FIXTURES = frozenset({"server", "fresh_server", "json_server"})
# What a module that starts `tempo serve` itself spells: the command with
# its data directory, the fixture helpers' classes, or the process
# harness's cluster.
_STARTS_SERVE = re.compile(r'"serve", "--data-dir"|\bServer\(|\bconfigured_server\(|\bspawn\.Cluster\(')
_FUZZES = re.compile(r"^(from fuzzing import|import schemathesis)", re.MULTILINE)
_TESTS = Path(__file__).parent

_spawned: list[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Notes every `tempo serve` this process starts (the audit event of
    subprocess.Popen carries its argv)."""
    if event != "subprocess.Popen":
        return
    argv = [str(a) for a in (args[1] if isinstance(args[1], (list, tuple)) else [args[1]])]
    if "serve" in argv and any("tempo" in a for a in argv):
        _spawned.append(argv)


sys.addaudithook(_audit)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rewrite", action="store_true", default=False,
        help="write the raft transcripts' outputs anew (tests/raft/testdata/*.txt) instead of comparing them",
    )


def _source(path: Path, seen: dict[Path, str]) -> str:
    if path not in seen:
        seen[path] = path.read_text() if path.suffix == ".py" else ""
    return seen[path]


def markers_for(item: pytest.Item, seen: dict[Path, str]) -> set[str]:
    """Which of MARKERS the rules above give `item`."""
    path = Path(str(item.path))
    parts = path.relative_to(_TESTS).parts if path.is_relative_to(_TESTS) else ()
    found = set()
    uses_process = bool(PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())))
    starts_serve = parts[:1] != ("sim",) and bool(_STARTS_SERVE.search(_source(path, seen)))
    if parts[:1] == ("cluster",) or uses_process or starts_serve:
        found.add("process")
    if parts[:1] == ("sim",):
        found.add("sim")
    if _FUZZES.search(_source(path, seen)):
        found.add("fuzz")
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: dict[Path, str] = {}
    for item in items:
        for name in sorted(markers_for(item, seen) - {m.name for m in item.iter_markers()}):
            item.add_marker(name)
    _write_process_ids(config, [item.nodeid for item in items if item.get_closest_marker("process") is not None])


def _check_spawns(item: pytest.Item, before: int) -> None:
    if item.get_closest_marker("process") is None and len(_spawned) > before:
        raise AssertionError(
            f"{item.nodeid} started `{' '.join(_spawned[before][-6:])}` but is not marked `process`: "
            "mark it (pytest.mark.process) or teach tests/suite_shape.py its fixture"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    _times.marks[item.nodeid] = tuple(m for m in MARKERS if item.get_closest_marker(m) is not None)
    _yield_to_process_tests(item)
    before = len(_spawned)
    result = yield
    _check_spawns(item, before)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    before = len(_spawned)
    result = yield
    _check_spawns(item, before)
    return result


class _Times:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, set[str]] = defaultdict(set)
        self.marks: dict[str, tuple[str, ...]] = {}


_times = _Times()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under pytest-xdist the controller sees only the workers' reports, whose
    # keywords carry the markers; in one process the setup hook noted them.
    marks = _times.marks.get(report.nodeid) or tuple(m for m in MARKERS if m in report.keywords)
    for name in marks or ("unmarked",):
        _times.seconds[name] += report.duration
        _times.tests[name].add(report.nodeid)


def time_by_marker() -> list[tuple[str, int, float]]:
    """(marker, tests, seconds) for each marker that ran, then `unmarked`."""
    order = [*MARKERS, "unmarked"]
    return [(name, len(_times.tests[name]), _times.seconds[name]) for name in order if name in _times.tests]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    rows = time_by_marker()
    if not rows:
        return
    terminalreporter.write_sep("-", "time by marker (setup, call and teardown)")
    for name, count, seconds in rows:
        terminalreporter.write_line(f"{name:<9} {count:>5} tests {seconds:>9.1f} s")


# -- Two processes (pytest-xdist) ------------------------------------------------
#
# pytest-xdist's own loadgroup reads a test's group from an "@group" suffix
# that its worker writes into the node ID at collection, which pytest 9.2 no
# longer lets it write (pytest-dev/pytest-xdist#1386): every test then goes
# out on its own. So each worker writes the node IDs of its `process` tests
# to a file, and the controller's scheduler, which starts sharing out only
# once every worker has collected, makes them one work unit. Its queue puts
# the largest unit first, so one worker starts on them at once.

_groups_dir = pytest.StashKey[Path]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Controller: tells each worker where to write its process tests' IDs."""
    config = node.config
    if _groups_dir not in config.stash:
        config.stash[_groups_dir] = Path(tempfile.mkdtemp(prefix="tempo-suite-"))
    node.workerinput[_GROUPS_DIR_KEY] = str(config.stash[_groups_dir])


# A worker that runs a test that starts no `tempo serve` lowers its own CPU
# priority, once, by this much (niceness, at most 19): the process tests' servers, which
# time elections, leases and long polls, then get the cores as when they
# ran alone, and the rest (the simulators, the fuzzing) takes what they
# leave. The process tests' worker runs them first (their unit is the
# largest), so it is lowered only after them, if at all.
OTHER_TESTS_NICENESS = 10
_lowered: list[bool] = []


def _yield_to_process_tests(item: pytest.Item) -> None:
    if _lowered or item.get_closest_marker("process") is not None:
        return
    if not getattr(item.config, "workerinput", None):
        return  # one process: nothing runs beside it
    os.nice(OTHER_TESTS_NICENESS)
    _lowered.append(True)


def _write_process_ids(config: pytest.Config, nodeids: list[str]) -> None:
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or _GROUPS_DIR_KEY not in workerinput:
        return
    path = Path(workerinput[_GROUPS_DIR_KEY]) / f"{workerinput['workerid']}.json"
    path.with_suffix(".part").write_text(json.dumps(nodeids))
    path.with_suffix(".part").rename(path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ProcessTestsTogether(LoadGroupScheduling):
        """loadgroup, with every `process` test in the unit PROCESS_GROUP."""

        process_ids: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.process_ids is None:
                folder = config.stash[_groups_dir]
                self.process_ids = {i for f in folder.glob("*.json") for i in json.loads(f.read_text())}
            return PROCESS_GROUP if nodeid in self.process_ids else super()._split_scope(nodeid)

    return ProcessTestsTogether(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _groups_dir in config.stash:
        shutil.rmtree(config.stash[_groups_dir], ignore_errors=True)
