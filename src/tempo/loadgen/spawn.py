"""Local `tempo serve` processes: one node, or a cluster whose nodes all get
the same `--peers` (each its own entry included), as docs/operations.md "Running a
cluster" has it.

The one process harness of `tempo loadgen --spawn`, of bench/ and of the
integration tests: start a node and wait until it is ready, find the leader,
send a node SIGKILL, SIGTERM or SIGSTOP, start it again with the same data
dir, port and arguments (its log is appended to). Of the HTTP API it asks
only `/readyz` and `/v1/cluster`, each bounded by `probe_timeout_s`.

Waiting and stopping take a bound in seconds; a node that exits before it is
ready, or is not ready in time, raises `SpawnError` with its log's tail.
"""

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from signal import SIGCONT, SIGKILL, SIGSTOP, SIGTERM
from typing import Any

import httpx

from tempo.net.tls import client_context

ready_timeout_s = 30.0
stop_timeout_s = 20.0
# What the last resort after a SIGKILL waits for: the kernel reaps at once.
reap_timeout_s = 5.0
leader_timeout_s = 15.0
probe_timeout_s = 1.0
ready_poll_gap_s = 0.02
leader_poll_gap_s = 0.05
log_tail_lines = 15


class SpawnError(Exception):
    """A node exited before it was ready, was not ready in time, or no node
    said it was the leader."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` just now (the kernel picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def tempo_command() -> list[str]:
    """The `tempo` script next to the interpreter, else `python -m tempo.cli`."""
    script = Path(sys.executable).with_name("tempo")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "tempo.cli"]


_probe_clients = threading.local()


def _probe_client(local_address: str | None, ca_file: str | None) -> httpx.Client:
    """One client per thread, source address and CA: a fresh `httpx.get` builds
    an SSL context each time, tens of ms on a busy machine, which would delay
    a SIGKILL past the instant asked for. It keeps no idle connection, so a
    probe holds none of a node's connection slots once answered."""
    clients: dict[tuple[str | None, str | None], httpx.Client] | None = getattr(_probe_clients, "by_key", None)
    if clients is None:
        clients = _probe_clients.by_key = {}
    client = clients.get((local_address, ca_file))
    if client is None:
        client = clients[local_address, ca_file] = httpx.Client(
            transport=httpx.HTTPTransport(
                verify=True if ca_file is None else client_context(ca_file),
                local_address=local_address, retries=0, limits=httpx.Limits(max_keepalive_connections=0),
            ),
            timeout=httpx.Timeout(probe_timeout_s),
        )
    return client


class Node:
    """One `tempo serve` process listening on `host:port`.

    `url` is where clients and the other nodes reach it: its own address
    unless something (a fault proxy) stands in front. `peers` (set by
    `Cluster`) makes it a member of a cluster. `env` is added to the
    environment the process inherits (libfaketime's, say). Probes come from
    `probe_address` when it is given, so a test's partitions do not cut them
    off; over https they trust the CA in `ca_file`. `start` after `kill` or
    `stop` keeps the data dir, port and arguments, and appends to the log at
    `log_path` (beside the data dir).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        node_id: str = "n1",
        url: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        probe_address: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.id = node_id
        self.host = host
        self.port = port or free_port(host)
        self.url = url or f"http://{host}:{self.port}"
        self.data_dir = Path(data_dir)
        self.log_path = self.data_dir.with_name(f"{self.data_dir.name}.log")
        self.peers: str | None = None
        self.extra_args = tuple(extra_args)
        self.env = None if env is None else dict(env)
        self.probe_address = probe_address
        self.ca_file = ca_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._stopping = False

    def __repr__(self) -> str:
        return self.id

    @property
    def argv(self) -> list[str]:
        member = ["--node", self.id, "--peers", self.peers] if self.peers else []
        return [*tempo_command(), "serve", "--data-dir", str(self.data_dir), "--listen", f"{self.host}:{self.port}",
                *member, *self.extra_args]

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.id}: not started"
        return self.proc.pid

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        """Starts the process; does not wait for it to be ready (`wait_ready`)."""
        assert not self.running(), f"{self.id}: already running"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT,
                env=None if self.env is None else {**os.environ, **self.env},
            )
        self.paused = False
        self._stopping = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        """The exit status, or None while it runs (or before it started)."""
        return None if self.proc is None else self.proc.poll()

    def wait_ready(self, timeout_s: float = ready_timeout_s, *, since_s: float | None = None) -> float:
        """Seconds from `since_s` (monotonic; default now) until /readyz
        answered 200: the node knows a leader and has applied what is committed."""
        started_s = time.monotonic() if since_s is None else since_s
        deadline_s = time.monotonic() + timeout_s
        while not self.ready():
            self.check_alive()
            if time.monotonic() > deadline_s:
                raise SpawnError(f"{self.id} ({self.url}) not ready within {timeout_s:g} s:\n{self.log_tail()}")
            time.sleep(ready_poll_gap_s)
        return time.monotonic() - started_s

    def check_alive(self) -> None:
        """Raises `SpawnError` with the log's tail when the process has exited."""
        assert self.proc is not None, f"{self.id}: not started"
        if self.proc.poll() is not None:
            raise SpawnError(f"tempo serve {self.id} exited with status {self.proc.returncode}:\n{self.log_tail()}")

    def signal(self, sig: int) -> None:
        assert self.proc is not None, f"{self.id}: not started"
        self.proc.send_signal(sig)

    def kill(self) -> float:
        """SIGKILL: nothing gets finished. The UNIX time the signal was sent;
        returns once the process is gone."""
        self.signal(SIGKILL)
        killed_at_s = time.time()
        assert self.proc is not None
        self.proc.wait(timeout=stop_timeout_s)
        self.paused = False
        return killed_at_s

    def terminate(self, sig: int = SIGTERM) -> None:
        """Asks it to stop (SIGTERM) without waiting; `stop` then waits."""
        if self.running():
            self.signal(sig)
            self._stopping = True

    def stop(self, sig: int = SIGTERM, timeout_s: float = stop_timeout_s) -> int | None:
        """`sig` (unless `terminate` sent it already) and waits: the exit
        status, or None when it had to be killed after `timeout_s`. None also
        for a node never started."""
        if self.proc is None:
            return None
        if not self._stopping:
            self.terminate(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=reap_timeout_s)
            return None

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets and answers nothing."""
        self.signal(SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(SIGCONT)
        self.paused = False

    def cleanup(self) -> None:
        """SIGKILL if it still runs (a stopped process dies as well)."""
        if self.running():
            self.kill()

    # -- what it says ---------------------------------------------------------------

    def probe(self, path: str) -> Any:
        """The JSON of this node's 200 answer to `GET path`, or None when it
        answers otherwise or not within `probe_timeout_s`."""
        try:
            answer = _probe_client(self.probe_address, self.ca_file).get(self.url + path)
        except httpx.HTTPError:
            return None
        return answer.json() if answer.status_code == 200 else None

    def ready(self) -> bool:
        try:
            return _probe_client(self.probe_address, self.ca_file).get(self.url + "/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def view(self) -> dict[str, Any] | None:
        """This node's own `GET /v1/cluster`, or None when it does not answer."""
        view: dict[str, Any] | None = self.probe("/v1/cluster")
        return view

    def log_tail(self, lines: int = log_tail_lines) -> str:
        try:
            text = self.log_path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Cluster:
    """`size` nodes n1..nK with data dirs and logs under `root`, on free
    loopback ports: a plain `tempo serve` for size 1, else nodes that all get
    the same `--peers`. `make_node` builds each one; a subclass overrides it
    to put something in front of a node."""

    def __init__(self, root: str | os.PathLike[str], size: int = 3, *, extra_args: Sequence[str] = ()) -> None:
        assert size >= 1, "size: at least one node"
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.nodes = [self.make_node(index, tuple(extra_args)) for index in range(1, size + 1)]
        if size > 1:
            peers = ",".join(f"{node.id}={node.url}" for node in self.nodes)
            for node in self.nodes:
                node.peers = peers

    def make_node(self, index: int, extra_args: tuple[str, ...]) -> Node:
        node_id = f"n{index}"
        return Node(self.root / node_id, node_id=node_id, extra_args=extra_args)

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def node(self, node_id: str) -> Node:
        return next(node for node in self.nodes if node.id == node_id)

    def by_url(self, url: str) -> Node | None:
        return next((node for node in self.nodes if node.url == url.rstrip("/")), None)

    def start(self, timeout_s: float = ready_timeout_s) -> float:
        """Starts every node at once; seconds until all are ready."""
        started_s = time.monotonic()
        for node in self.nodes:
            node.start()
        self.wait_ready(self.nodes, timeout_s)
        return time.monotonic() - started_s

    def wait_ready(self, nodes: Sequence[Node], timeout_s: float = ready_timeout_s) -> float:
        """Seconds until every one of `nodes` answered /readyz 200."""
        started_s = time.monotonic()
        deadline_s = started_s + timeout_s
        waiting = list(nodes)
        while waiting:
            for node in waiting:
                node.check_alive()
            waiting = [node for node in waiting if not node.ready()]
            if waiting and time.monotonic() > deadline_s:
                names = ", ".join(f"{node.id} ({node.url})" for node in waiting)
                raise SpawnError(f"not ready within {timeout_s:g} s: {names}")
            if waiting:
                time.sleep(ready_poll_gap_s)
        return time.monotonic() - started_s

    def leader(self, timeout_s: float = leader_timeout_s) -> tuple[Node, int]:
        """The running node whose own `/v1/cluster` names itself leader (the
        highest term if several do), and that term. A single node leads a
        cluster of one in term 0."""
        if len(self.nodes) == 1:
            return self.nodes[0], 0
        deadline_s = time.monotonic() + timeout_s
        while True:
            claims: list[tuple[int, Node]] = []
            for node in self.nodes:
                view = node.view() if node.running() else None
                if view is not None and view.get("leader") == node.id:
                    claims.append((int(view.get("term", 0)), node))
            if claims:
                term, node = max(claims, key=lambda claim: claim[0])
                return node, term
            if time.monotonic() > deadline_s:
                raise SpawnError(f"no node says it is the leader within {timeout_s:g} s")
            time.sleep(leader_poll_gap_s)

    def stop(self, timeout_s: float = stop_timeout_s) -> dict[str, int | None]:
        """SIGTERM to every running node at once, then each one's exit status
        (None: it had to be killed). A node that had exited before is left out."""
        running = [node for node in self.nodes if node.running()]
        for node in running:
            node.terminate()
        return {node.id: node.stop(timeout_s=timeout_s) for node in running}

    def cleanup(self) -> None:
        """SIGKILL to every node still running."""
        for node in self.nodes:
            node.cleanup()
