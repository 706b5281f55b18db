"""The suite's markers follow their rules, and the `process` guard fails a
test that starts `tempo serve` unmarked (tests/suite_shape.py)."""

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
