"""What tempo writes where it is run stays out of `git status`."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WRITTEN = [
    "tempo-data/data.mdb",
    "sub/tempo-data/lock.mdb",
    "data-n1/data.mdb",
    "data-n3/raft/log",
    "tempo-loadgen-20261203-101500.json",
    "tempo-loadgen-20261203-101500.html",
    "tempo-loadgen-20261203-101500.svg",
]
KEPT = ["src/tempo/loadgen.py", "docs/operations.md", "data-notes.md"]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_data_directories_and_loadgen_reports_are_ignored():
    def ignored(path: str) -> bool:
        found = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, check=False)
        assert found.returncode in (0, 1), found
        return found.returncode == 0

    assert [p for p in WRITTEN if not ignored(p)] == []
    assert [p for p in KEPT if ignored(p)] == []
