"""Shared fixtures: a real `tempo serve` process on a free loopback port.

Integration tests talk to the server over HTTP exactly as a client would.
Module-scoped servers are shared by tests that use their own request keys and
names; crash tests take a function-scoped one, which they kill at will.
"""

import glob
import hashlib
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from tempo.engine import keys
from tempo.engine.store import Store
from tempo.loadgen import spawn
from tempo.loadgen.spawn import free_port as free_port
from tempo.loadgen.spawn import tempo_command as tempo_command

# Markers, the per-test timeout's companion guard and the time per marker
# (tests/suite_shape.py); the transcript tests' --rewrite (tests/raft/).
pytest_plugins = ["suite_shape"]

ready_timeout_s = 20.0
log_tail_chars = 4000


class Server(spawn.Node):
    """One `tempo serve` process (`tempo.loadgen.spawn`): `start` waits until
    it is ready, `stop` wants exit status 0, `restart` keeps its data dir and port."""

    def __init__(
        self, data_dir: Path, port: int | None = None, extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None
    ):
        super().__init__(data_dir, port=port, extra_args=extra_args, env=env)

    def start(self) -> "Server":
        super().start()
        self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = ready_timeout_s) -> float:
        """Seconds until /readyz answered 200; fails after `timeout_s`."""
        return super().wait_ready(timeout_s)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-log_tail_chars:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """A clean stop; the process must exit 0 (docs/operations.md "Stopping")."""
        code = super().stop(sig)
        assert code == 0, f"tempo serve exited {code} on signal {sig}: {self.log()}"

    def restart(self) -> "Server":
        if self.running():
            self.stop()
        return self.start()


@contextmanager
def configured_server(root: Path, config: str, kind: type[Server] = Server) -> Iterator[Server]:
    """A started server (of class `kind`) with `config` as root/tempo.toml
    and its data in root/data; killed on leaving."""
    (root / "tempo.toml").write_text(config)
    srv = kind(root / "data", extra_args=("--config", str(root / "tempo.toml")))
    try:
        yield srv.start()
    finally:
        srv.cleanup()


def tokens_config(tokens: dict[str, tuple[str, str, list[str] | None]]) -> str:
    """The `[[tokens]]` tables of a config file for `tokens`, which maps each
    bearer token to its (owner, role, queues or None)."""
    parts = []
    for token, (owner, role, queues) in tokens.items():
        parts.append(f'[[tokens]]\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
                     f'owner = "{owner}"\nrole = "{role}"\n')
        if queues is not None:
            parts.append(f"queues = {queues!r}\n".replace("'", '"'))
    return "\n".join(parts)


def as_token(srv: Server, token: str | None) -> httpx.Client:
    """A client of `srv` that sends `token` as its bearer token (none if None)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=srv.url, headers=headers, timeout=30)


def used_data_dir(srv: Server) -> Path:
    """The data dir of `srv` once it has acknowledged a job and stopped."""
    try:
        srv.start()
        with httpx.Client(base_url=srv.url, timeout=10) as http:
            assert http.post("/v1/jobs", json=job_body()).status_code == 201
        srv.stop()
    finally:
        srv.cleanup()
    return srv.data_dir


def damage_job_record(srv: Server, job_id: str) -> None:
    """Stops `srv`, overwrites the stored record of job `job_id` with bytes
    that are no record, and starts it again."""
    srv.stop()
    store = Store(str(srv.data_dir))
    try:
        with store.env.begin(write=True) as txn:
            assert txn.replace(keys.job_key(job_id), b"\x9f\xc1", db=store.db["jobs"]) is not None
    finally:
        store.close()
    srv.start()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("srv") / "data")
    try:
        yield srv.start()
    finally:
        srv.cleanup()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    """A server of the test's own, free to be killed and restarted."""
    srv = Server(tmp_path / "data")
    try:
        yield srv.start()
    finally:
        srv.cleanup()


@pytest.fixture
def two_stores(tmp_path: Path) -> Iterator[list[Store]]:
    """Two empty stores side by side, for tests that compare what two
    stores hold."""
    made = [Store(str(tmp_path / name), map_bytes=64 << 20) for name in ("one", "two")]
    yield made
    for store in made:
        store.close()


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        yield client


@pytest.fixture
def json_server(tmp_path: Path) -> Iterator[Server]:
    """A server of the test's own that logs JSON lines."""
    srv = Server(tmp_path / "data", extra_args=("--log-format", "json"))
    try:
        yield srv.start()
    finally:
        srv.cleanup()


def metric(client: httpx.Client, name: str) -> float:
    """The value of the unlabelled metric `name` in the node's /metrics."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", client.get("/metrics").text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def wait_for(predicate, timeout_s: float = 10.0):
    """The first truthy answer of `predicate()`; fails after `timeout_s`."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        found = predicate()
        if found:
            return found
        assert time.monotonic() < deadline_s, "timed out"
        time.sleep(0.02)


def unique(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def job_body(**overrides) -> dict:
    body = {"target": f"queue:{unique('q')}", "schedule": {"at": "2030-01-01T00:00:00Z"}}
    body.update(overrides)
    return body


def job_count(http: httpx.Client) -> int:
    """Every job of the owner, by walking the pages."""
    count, cursor = 0, None
    while True:
        params = {"limit": 1000} | ({"cursor": cursor} if cursor else {})
        page = http.get("/v1/jobs", params=params).json()
        count += len(page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            return count


# libfaketime's thread-safe build (Debian's package `faketime`, which
# .ci/run installs, ships both). The plain one parses the offset file into a
# static buffer that another thread's clock read can overwrite half-way, so
# a multi-threaded server now and then reads the real time for one call: a
# step the test never made.
LIBFAKETIME = sorted(
    {
        *glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"),
        *glob.glob("/usr/lib/faketime/libfaketimeMT.so.1"),
        *glob.glob("/usr/local/lib/faketime/libfaketimeMT.so.1"),
    }
)


SMALL_DISK_BYTES = 24 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of SMALL_DISK_BYTES at tmp_path/disk, for a data dir that
    fills (docs/operations.md "Disk full"); unmounted afterwards. Mounting
    needs root (CI runs as root); without it the test skips and says why."""
    with tmpfs(tmp_path / "disk", f"size={SMALL_DISK_BYTES}") as mount_point:
        yield mount_point


@contextmanager
def tmpfs(mount_point: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted with `options` at `mount_point` (made here) while the
    block runs. Mounting needs root (CI runs as root); without it the test
    skips and says why."""
    mount_point.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
            capture_output=True, text=True, check=False,
        )
        refused = done.stderr.strip() if done.returncode != 0 else None
    except OSError as exc:  # no mount(8)
        refused = str(exc)
    if refused is not None:
        pytest.skip(f"cannot mount a tmpfs here (needs root and the right to mount): {refused}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


class Arrival(NamedTuple):
    """One request an `Endpoint` received."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    at: datetime  # when its body had been read


def no_content(arrival: Arrival) -> tuple[int, bytes]:
    return 204, b""


class Endpoint(ThreadingHTTPServer):
    """A local HTTP endpoint on a free loopback port that records every GET
    and POST in `seen` and answers each with `answer(arrival)`: a status and
    a body (an answer may also sleep, to be a slow target)."""

    daemon_threads = True
    # The executor opens up to 64 connections at once; the default backlog of
    # 5 would leave some to a SYN retry a second later.
    request_queue_size = 256

    def __init__(self, answer: Callable[[Arrival], tuple[int, bytes]] = no_content):
        self.seen: list[Arrival] = []
        self.lock = threading.Lock()
        self.answer = answer
        super().__init__(("127.0.0.1", 0), _EndpointHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _EndpointHandler(BaseHTTPRequestHandler):
    server: Endpoint

    def do_GET(self) -> None:
        self._record_and_answer()

    def do_POST(self) -> None:
        self._record_and_answer()

    def _record_and_answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        arrival = Arrival(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                          body, datetime.now(UTC))
        with self.server.lock:
            self.server.seen.append(arrival)
        status, answer = self.server.answer(arrival)
        self.send_response(status)
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        if answer:
            self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def endpoint(answer: Callable[[Arrival], tuple[int, bytes]] = no_content) -> Iterator[Endpoint]:
    """A running `Endpoint`, shut down on leaving."""
    srv = Endpoint(answer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
