"""The suite's markers follow their rules, and the `process` guard fails a
test that starts `tempo serve` unmarked (tests/suite_shape.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import suite_shape

TESTS = Path(suite_shape.__file__).parent


def item(path: Path, fixturenames: tuple[str, ...] = (), marked: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(
        path=path, fixturenames=fixturenames, nodeid=f"{path.name}::t",
        get_closest_marker=lambda name: name if name in marked else None,
    )


def test_markers_follow_directory_fixture_and_source():
    seen: dict[Path, str] = {}
    assert suite_shape.markers_for(item(TESTS / "cluster" / "test_pause.py"), seen) == {"process"}
    assert suite_shape.markers_for(item(TESTS / "test_wheel.py", ("http", "server")), seen) == {"process"}
    assert suite_shape.markers_for(item(TESTS / "cli" / "test_cli.py"), seen) == {"process"}  # spells the command
    assert suite_shape.markers_for(item(TESTS / "sim" / "test_sim.py"), seen) == {"sim"}
    assert suite_shape.markers_for(item(TESTS / "net" / "test_fuzz_api.py", ("server",)), seen) == {"process", "fuzz"}
    assert suite_shape.markers_for(item(TESTS / "engine" / "test_records_fuzz.py"), seen) == {"fuzz"}
    assert suite_shape.markers_for(item(TESTS / "test_wheel.py"), seen) == set()


def test_collection_applied_the_markers(request):
    # This module starts nothing, so none of the markers is on its tests.
    assert [m.name for m in request.node.iter_markers()] == []


def test_an_unmarked_test_that_starts_tempo_serve_fails():
    before = len(suite_shape._spawned)
    suite_shape._audit("subprocess.Popen", ("/x/.venv/bin/tempo", ["/x/.venv/bin/tempo", "serve"], None, None))
    suite_shape._audit("subprocess.Popen", ("/bin/true", ["/bin/true", "serve"], None, None))  # not tempo
    assert len(suite_shape._spawned) == before + 1
    try:
        with pytest.raises(AssertionError, match="not marked `process`"):
            suite_shape._check_spawns(item(TESTS / "test_wheel.py"), before)
        suite_shape._check_spawns(item(TESTS / "test_wheel.py", marked=("process",)), before)
    finally:
        del suite_shape._spawned[before:]


def test_under_two_workers_every_process_test_runs_in_one(tmp_path):
    # A small suite with our plugin, run as `pytest -n 2 --dist loadgroup`
    # runs the whole suite (pyproject.toml): the `process` tests all run in
    # the same worker, the others may run in either.
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    process: x\n    sim: x\n    fuzz: x\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["suite_shape"]\n')
    base = os.nice(0)
    lowered = min(19, base + suite_shape.OTHER_TESTS_NICENESS)
    assert lowered > base, "run this test at a niceness below 19"
    (tmp_path / "test_mix.py").write_text(
        "import os\nimport time\nimport pytest\n\n"
        + "".join(
            # The process tests run at the priority they were started with
            # (this test's own: lowered when it runs beside process tests),
            # the rest lower.
            f"@pytest.mark.process\ndef test_process_{i}():\n    time.sleep(0.05)\n    assert os.nice(0) == {base}\n\n"
            f"def test_plain_{i}():\n    time.sleep(0.05)\n    assert os.nice(0) == {lowered}\n\n"
            for i in range(8)
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", "2", "--dist", "loadgroup", "-v", "-p",
         "no:cacheprovider"],
        # Only xdist of the plugins installed: schemathesis and the rest
        # take seconds to import, in each of the three processes.
        env={**os.environ, "PYTHONPATH": str(TESTS), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = {"process": set(), "plain": set()}
    for worker, kind in re.findall(r"\[(gw\d)\] .*PASSED test_mix\.py::test_(process|plain)_\d", done.stdout):
        workers[kind].add(worker)
    assert len(re.findall(r"PASSED test_mix", done.stdout)) == 16, done.stdout
    assert len(workers["process"]) == 1, done.stdout
    assert re.search(r"^process +8 tests", done.stdout, re.MULTILINE), done.stdout  # the time by marker, from the workers' reports
