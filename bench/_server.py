"""Shared helpers of the benchmarks: one `tempo serve` process on a free
loopback port, and a few numbers about it."""

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
    def __init__(self, data_dir: str, port: int | None = None):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = f"{data_dir.rstrip('/')}.log"

    def start(self) -> float:
        """Starts the process; answers seconds from spawn to /readyz 200."""
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*tempo_command(), "serve", "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
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

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

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
