"""Shared helpers of the benchmarks: one `tempo serve` process on a free
loopback port, a local cluster of them, and a few numbers about it."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ready_timeout_s = 120.0
stop_timeout_s = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tempo_command() -> list[str]:
    script = Path(sys.executable).with_name("tempo")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tempo.cli"]


class Server:
    """One `tempo serve`; with `node_id` and `peers` (the same list for every
    node, its own entry included) a node of a cluster. `start` after `kill`
    reuses the data dir, port and arguments."""

    def __init__(self, data_dir: str, port: int | None = None, *, node_id: str | None = None, peers: str | None = None):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.node_id = node_id
        self.cluster_args = ["--node", node_id, "--peers", peers] if node_id and peers else []
        self.proc: subprocess.Popen | None = None
        self.log_path = f"{data_dir.rstrip('/')}.log"

    def spawn(self) -> None:
        """Starts the process without waiting for it to be ready."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*tempo_command(), "serve", "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}",
                 *self.cluster_args],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def start(self) -> float:
        """Starts the process; answers seconds from spawn to /readyz 200."""
        started = time.monotonic()
        self.spawn()
        return self.wait_ready(started)

    def wait_ready(self, started: float | None = None) -> float:
        """Seconds from `started` (monotonic; default now) to /readyz 200."""
        assert self.proc is not None
        started = time.monotonic() if started is None else started
        deadline_s = started + ready_timeout_s
        while time.monotonic() < deadline_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tempo serve exited {self.proc.returncode}; see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"tempo serve not ready after {ready_timeout_s}s")

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=stop_timeout_s)

    def kill(self) -> float | None:
        """SIGKILL; the UNIX time the signal was sent (None: not running)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            killed_at_s = time.time()
            self.proc.wait()
            return killed_at_s
        return None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def view(self) -> dict | None:
        """This node's own `GET /v1/cluster`, or None when it does not answer."""
        try:
            answer = httpx.get(f"{self.url}/v1/cluster", timeout=1.0)
        except httpx.HTTPError:
            return None
        return answer.json() if answer.status_code == 200 else None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def rss_mib(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def rss_split(self) -> str:
        """RssAnon (heap) and RssFile (LMDB pages mapped in) of /proc/PID/status."""
        assert self.proc is not None
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines() if ":" in line
        )
        return ", ".join(f"{k} {int(fields[k].split()[0]) / 1024:.0f} MiB" for k in ("RssAnon", "RssFile") if k in fields)


class Cluster:
    """`size` nodes n1..nK under `root` on free loopback ports, each given the
    same `--peers`; size 1 is a plain single server."""

    def __init__(self, root: str, size: int):
        ports = [free_port() for _ in range(size)]
        ids = [f"n{i + 1}" for i in range(size)]
        peers = ",".join(f"{i}=http://127.0.0.1:{p}" for i, p in zip(ids, ports, strict=True))
        self.servers = [
            Server(os.path.join(root, i), p, node_id=i, peers=peers) if size > 1 else Server(os.path.join(root, i), p)
            for i, p in zip(ids, ports, strict=True)
        ]
        self.urls = [s.url for s in self.servers]

    def start(self) -> float:
        """Starts every node at once; seconds until all answer /readyz 200."""
        started = time.monotonic()
        for server in self.servers:
            server.spawn()
        return max(server.wait_ready(started) for server in self.servers)

    def by_id(self, node_id: str) -> Server:
        return next(s for s in self.servers if (s.node_id or "n1") == node_id)

    def leader(self, timeout_s: float = 30.0) -> tuple[Server, int]:
        """The running node whose own `/v1/cluster` names itself leader (the
        highest term if several do), and its term."""
        if len(self.servers) == 1:
            return self.servers[0], 0
        deadline_s = time.monotonic() + timeout_s
        while True:
            claims = []
            for server in self.servers:
                view = server.view() if server.running() else None
                if view is not None and view.get("leader") == server.node_id:
                    claims.append((int(view.get("term", 0)), server))
            if claims:
                term, server = max(claims, key=lambda c: c[0])
                return server, term
            if time.monotonic() > deadline_s:
                tails = "\n".join(f"--- {s.log_path}\n{s.log_tail()}" for s in self.servers)
                raise RuntimeError(f"no node says it is the leader within {timeout_s:g} s\n{tails}")
            time.sleep(0.05)

    def stop(self) -> dict[str, int]:
        """SIGTERM to every running node at once; each one's exit status."""
        running = [s for s in self.servers if s.running()]
        for server in running:
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
        return {(s.node_id or "n1"): s.proc.wait(timeout=stop_timeout_s) for s in running if s.proc is not None}

    def kill(self) -> None:
        for server in self.servers:
            server.kill()


def dir_mib(path: str) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total / (1 << 20)


def table(rows: list[tuple], header: tuple) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
