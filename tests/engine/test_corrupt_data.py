"""Damaged, foreign and misused data directories, with real `tempo serve`
processes (docs/operations.md "Corrupt data"): each stops the node at start
with exit status 2 and a message, never a signal, a traceback or a silent
empty start; and a corrupt stored record met later fails reads and stops the
node on apply."""

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import lmdb
import pytest

from conftest import (
    Server,
    damage_job_record,
    free_port,
    job_body,
    tempo_command,
    tmpfs,
    used_data_dir,
)
from tempo.engine.raftlog import RaftLog
from tempo.engine.store import Store
from tempo.node import raft_id_of

exit_timeout_s = 20.0
refused_timeout_s = 30.0
# The first page holds the first meta page: a page header, then the meta
# fields (tempo.engine.datadir); the second starts at the page size.
page_bytes = 4096


def serve_refused(data_dir: Path, *args: str) -> tuple[int, str]:
    """Starts `tempo serve` on `data_dir` and returns (exit status, output)
    once it exits. A node that serves instead fails the test (and is killed)."""
    port = free_port()
    proc = subprocess.Popen(
        [*tempo_command(), "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    deadline_s = time.monotonic() + refused_timeout_s
    try:
        while proc.poll() is None and time.monotonic() < deadline_s:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200:
                    pytest.fail(f"tempo serve started on {data_dir} {args} instead of refusing it")
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        assert proc.poll() is not None, f"tempo serve neither served nor exited in {refused_timeout_s} s"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        output = proc.communicate(timeout=exit_timeout_s)[0].decode(errors="replace")
    return proc.returncode, output


def assert_refused(data_dir: Path, *words: str, args: tuple[str, ...] = ()) -> str:
    code, output = serve_refused(data_dir, *args)
    assert code == 2, f"exit status {code}, not 2:\n{output}"
    assert "Traceback" not in output, output
    line = output.strip().splitlines()[-1] if output.strip() else ""
    assert line.startswith("tempo serve: "), output
    for word in words:
        assert word in output, f"{word!r} not in:\n{output}"
    return output


@pytest.fixture
def used_dir(tmp_path: Path) -> Path:
    """The data dir of a single node that acknowledged a job and stopped."""
    return used_data_dir(Server(tmp_path / "data"))


def test_a_truncated_data_file_is_refused(used_dir: Path):
    data = used_dir / "data.mdb"
    os.truncate(data, data.stat().st_size // 2)
    assert_refused(used_dir, "data.mdb", "truncated", "backup")


def test_an_empty_data_file_is_refused_not_started_empty(used_dir: Path):
    os.truncate(used_dir / "data.mdb", 0)
    assert_refused(used_dir, "data.mdb", "empty", "backup")


@pytest.mark.parametrize("page", [0, 1])
@pytest.mark.parametrize(
    ("offset", "garble"),
    [
        (16, os.urandom(136)),  # every field, the magic number included
        (136, (1 << 36).to_bytes(8, "little")),  # the last page only: a map past memory (ENOMEM)
        (136, (1 << 60).to_bytes(8, "little")),  # the last page only: a map size that overflows
    ],
    ids=["all", "last-page-enomem", "last-page-overflow"],
)
def test_a_garbled_meta_page_is_refused(used_dir: Path, page: int, offset: int, garble: bytes):
    with open(used_dir / "data.mdb", "r+b") as f:
        f.seek(page * page_bytes + offset)
        f.write(garble)
    assert_refused(used_dir, "data.mdb", f"meta page {page}", "backup")


def test_a_foreign_lmdb_environment_is_refused_and_left_alone(tmp_path: Path):
    foreign = tmp_path / "foreign"
    env = lmdb.open(str(foreign), map_size=1 << 24, max_dbs=4)
    users = env.open_db(b"users")
    with env.begin(write=True) as txn:
        txn.put(b"alice", b"1", db=users)
    env.close()
    before = (foreign / "data.mdb").read_bytes()
    assert_refused(foreign, "users", "not tempo's")
    assert (foreign / "data.mdb").read_bytes() == before


def test_a_directory_with_other_files_is_refused(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    assert_refused(home, "notes.txt")
    assert sorted(os.listdir(home)) == ["notes.txt"]


def test_a_regular_file_as_the_data_dir_is_refused(tmp_path: Path):
    file = tmp_path / "file"
    file.write_text("not a directory")
    assert_refused(file, "not a directory")


def test_a_data_file_that_is_a_directory_is_refused(tmp_path: Path):
    (tmp_path / "data" / "data.mdb").mkdir(parents=True)
    assert_refused(tmp_path / "data", "data.mdb", "not a regular file")


@pytest.fixture
def read_only_mount(tmp_path: Path):
    """A read-only tmpfs; skips where mounting is refused (not root, no
    CAP_SYS_ADMIN)."""
    with tmpfs(tmp_path / "ro", "ro,size=1m") as where:
        yield where


def test_a_read_only_file_system_is_refused(read_only_mount: Path):
    assert_refused(read_only_mount / "data", "read-only")
    assert_refused(read_only_mount, "read-only")


def test_a_read_only_copy_of_a_used_dir_is_refused(used_dir: Path, tmp_path: Path):
    with tmpfs(tmp_path / "ro-used", "size=4m") as where:
        shutil.copytree(used_dir, where / "data")
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        assert_refused(where / "data", "read-only")


def test_a_corrupt_job_record_fails_reads_and_stops_the_node_on_apply(fresh_server):
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        job = http.post("/v1/jobs", json=job_body()).json()
    damage_job_record(fresh_server, job["id"])
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        read = http.get(f"/v1/jobs/{job['id']}")
        assert read.status_code == 500
        assert fresh_server.proc.poll() is None
        with contextlib.suppress(httpx.HTTPError):  # the node may stop before it answers
            http.post(f"/v1/jobs/{job['id']}/pause")
    deadline_s = time.monotonic() + exit_timeout_s
    while fresh_server.proc.poll() is None and time.monotonic() < deadline_s:
        time.sleep(0.05)
    assert fresh_server.proc.returncode not in (None, 0)
    assert "a stored Job does not decode" in fresh_server.log()


def test_a_corrupt_raft_log_entry_is_refused_at_start(tmp_path: Path):
    store = Store(str(tmp_path / "n1"))
    RaftLog(store, voters=(raft_id_of("n1"),))
    with store.env.begin(write=True) as txn:
        txn.put((2).to_bytes(8, "big"), b"\xc1 not msgpack", db=store.env.open_db(b"raft_log", txn=txn))
    store.close()
    port = free_port()
    args = ("--node", "n1", "--peers", f"n1=http://127.0.0.1:{port}")
    assert_refused(tmp_path / "n1", "does not decode", "backup", args=args)
