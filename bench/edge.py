"""The edge under abuse: what a flood of connections, slow headers,
oversized bodies and stalled bodies costs one node, what /metrics costs to
scrape, and how much memory many large batch bodies at once take.

    .venv/bin/python bench/edge.py [--connections N] [--bodies N] [--stalled N] [--slow N] [--aborted N]
                                   [--batch-bodies N] [--stored]

Starts its own server (temporary data dir, free port) with small edge limits
(`[http]` in a config file: 256 connections, 64 of them from one address,
128 requests in flight, body read timeout 2 s), then prints, for each kind of
abuse, what the clients got, how long it took, the server's resident memory
before and after, and the latency of `GET /healthz` from a well-behaved
client meanwhile (one keep-alive connection from an address of its own,
127.0.0.9, opened before the abuse starts). Slow headers are sent from one
address (127.0.0.1) and from eight (127.0.0.10-17), and held past the
header deadline. Aborted long polls are claims with `wait_s` 30 whose
connections are reset (as a killed worker's are), 50 at a time: the time
until their long-poll slots are free again (`tempo_http_long_polls_in_flight`
back to 0) is printed. The large batch bodies go to a second server with
the default limits; their row gives the peak resident memory while they
were read and answered.
"""

import argparse
import json
import os
import select
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

import httpx

from tempo import limits

sys.path.insert(0, os.path.dirname(__file__))
from _server import Node, rss_mib, start, stop_timeout_s, table

CONFIG = "[http]\nconnections_max = 256\nrequests_in_flight_max = 128\nlong_polls_max = 64\nbody_read_timeout_s = 2.0\n"
PROBER_IP = "127.0.0.9"
SLOW_HEAD = b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-slow: "


def status_of(sock: socket.socket) -> int | None:
    """The status of the first answer on `sock`, or None if it closed first."""
    buffer = b""
    while b"\r\n" not in buffer:
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, TimeoutError):
            return None
        if not chunk:
            return None
        buffer += chunk
    return int(buffer.split(b" ", 2)[1])


def status_after_sending(port: int, pieces: list[bytes], timeout_s: float) -> int | None:
    """Sends `pieces` on a fresh connection (stopping where the server
    answers first and closes) and reads the status of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        try:
            for piece in pieces:
                sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered before the body was read
        return status_of(sock)


def at_once(count: int, one) -> None:
    """Runs `one()` in `count` threads at once; returns when all are done."""
    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


class Background:
    """Runs `_run` in a thread while the block runs; `_run` returns once
    `_stop` is set, which leaving the block does."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        raise NotImplementedError


class Prober(Background):
    """GET /healthz every 20 ms from one keep-alive client, in a thread."""

    def __init__(self, url: str):
        super().__init__()
        self.url = url
        self.latencies_s: list[float] = []
        self.failures = 0

    def _run(self) -> None:
        transport = httpx.HTTPTransport(local_address=PROBER_IP)
        with httpx.Client(base_url=self.url, timeout=5.0, transport=transport) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get("/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    self.latencies_s.append(time.perf_counter() - started)
                else:
                    self.failures += 1
                time.sleep(0.02)

    def summary(self) -> str:
        if not self.latencies_s:
            return f"no answer ({self.failures} failures)"
        ordered = sorted(self.latencies_s)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, {self.failures} failed"


def flood_connections(server: Node, count: int) -> tuple:
    started = time.perf_counter()
    sockets = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(count)]
    took_s = time.perf_counter() - started
    time.sleep(0.5)  # refusals are sent at once; what has none by now is held
    refused = closed = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            status = status_of(sock)
        except BlockingIOError:
            continue
        refused += status == 503
        closed += status is None
    for sock in sockets:
        sock.close()
    held = count - refused - closed
    return f"{count} idle connections", f"{refused} got 503, {closed} closed for newer ones, {held} held", took_s


def slow_headers(server: Node, count: int, sources: list[str]) -> tuple:
    """`count` connections, spread over `sources`, that send part of a
    request head and then nothing, held past the header deadline."""
    started = time.perf_counter()
    sockets = []
    for i in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5, source_address=(sources[i % len(sources)], 0))
            sock.sendall(SLOW_HEAD)
        except OSError:
            continue
        sockets.append(sock)
    took_s = time.perf_counter() - started
    closed_at: list[float] = []
    refused = 0
    deadline_s = time.perf_counter() + limits.header_read_timeout_s + 2
    pending = list(sockets)
    while pending and time.perf_counter() < deadline_s:
        for sock in select.select(pending, [], [], 0.1)[0]:
            sock.setblocking(False)
            try:
                refused += status_of(sock) == 503
            except BlockingIOError:
                continue
            closed_at.append(time.perf_counter() - started)
            pending.remove(sock)
    for sock in sockets:
        sock.close()
    where = f"{len(sources)} address{'es' if len(sources) > 1 else ''}"
    last = f", the last {max(closed_at):.1f} s after the first opened" if closed_at else ""
    got = f"{refused} got 503, {len(closed_at) - refused} closed{last}; {len(pending)} open after {limits.header_read_timeout_s + 2:g} s"
    return f"{count} slow heads from {where}", got, took_s


def oversized_bodies(server: Node, count: int) -> tuple:
    size = 8 << 20
    head = f"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n"
    pieces = [head.encode()] + [b"x" * (1 << 20)] * 8
    statuses: list[int | None] = []
    started = time.perf_counter()
    at_once(count, lambda: statuses.append(status_after_sending(server.port, pieces, 10)))
    took_s = time.perf_counter() - started
    return f"{count} bodies of 8 MiB at once", f"{statuses.count(413)} got 413", took_s


class PeakRss(Background):
    """The server's highest resident memory while the block runs, sampled
    every few milliseconds from /proc (VmRSS, and RssAnon: the heap, without
    LMDB's mapped pages)."""

    def __init__(self, server: Node):
        super().__init__()
        self.server = server
        self.rss_mib = self.anon_mib = 0.0

    def _run(self) -> None:
        status = f"/proc/{self.server.proc.pid}/status"
        while not self._stop.is_set():
            with open(status) as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            self.rss_mib = max(self.rss_mib, int(fields["VmRSS"].split()[0]) / 1024)
            self.anon_mib = max(self.anon_mib, int(fields["RssAnon"].split()[0]) / 1024)
            time.sleep(0.005)


def batch_bodies(server: Node, count: int, stored: bool) -> tuple:
    """`count` batch bodies of (almost) 32 MiB at once, each of 1000 items
    with a 32 KiB payload. Unless `stored`, their target is one no job may
    have: each batch is read and decoded whole and answered item by item
    with 400s, and nothing is written, so the memory measured is the edge's,
    not LMDB's. With `stored`, the jobs are created, and each answer holds
    them (payloads included)."""
    item = {"target": "queue:big" if stored else "nowhere:x", "schedule": {"at": "2031-01-01T00:00:00Z"}, "payload": "x" * ((32 << 10) - 200)}
    body = json.dumps({"jobs": [item] * 1000}).encode()
    assert len(body) <= 32 << 20
    head = (
        f"POST /v1/jobs/batch HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    statuses: list[int | None] = []
    started = time.perf_counter()
    with PeakRss(server) as peak:
        at_once(count, lambda: statuses.append(status_after_sending(server.port, [head + body], 60)))
    took_s = time.perf_counter() - started
    got = ", ".join(f"{statuses.count(s)} got {s}" for s in sorted(set(statuses), key=str))
    return (
        f"{count} batch bodies of {len(body) / (1 << 20):.1f} MiB at once",
        f"{got}; peak RSS {peak.rss_mib:.0f} MiB (heap {peak.anon_mib:.0f})",
        took_s,
    )


def stalled_bodies(server: Node, count: int) -> tuple:
    head = b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"
    started = time.perf_counter()
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(head)
        sockets.append(sock)
    statuses = [status_of(sock) for sock in sockets]
    took_s = time.perf_counter() - started
    for sock in sockets:
        sock.close()
    got = ", ".join(f"{statuses.count(s)} got {s}" for s in sorted(set(statuses), key=str))
    return f"{count} stalled bodies", got, took_s


def _long_polls(client: httpx.Client) -> int:
    text = client.get("/metrics").text
    return int(float(next(ln for ln in text.splitlines() if ln.startswith("tempo_http_long_polls_in_flight ")).split()[1]))


def aborted_long_polls(server: Node, count: int) -> tuple:
    body = b'{"worker": "gone", "queues": ["nothing-due"], "wait_s": 30}'
    request = b"POST /v1/claim HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body), body)
    batch = 50
    freed_s: list[float] = []
    started = time.perf_counter()
    transport = httpx.HTTPTransport(local_address=PROBER_IP)
    with httpx.Client(base_url=server.url, timeout=5.0, transport=transport) as client:
        for _ in range(count // batch):
            sockets = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(batch)]
            for sock in sockets:
                sock.sendall(request)
            while _long_polls(client) < batch:
                time.sleep(0.01)
            reset_at = time.perf_counter()
            for sock in sockets:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            while _long_polls(client) > 0:
                time.sleep(0.005)
            freed_s.append(time.perf_counter() - reset_at)
    took_s = time.perf_counter() - started
    got = f"slots free again after p50 {statistics.median(freed_s) * 1000:.0f} ms, max {max(freed_s) * 1000:.0f} ms"
    return f"{len(freed_s) * batch} long polls reset, {batch} at a time", got, took_s


def scrape(server: Node, count: int) -> tuple:
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        client.post("/v1/jobs/batch", json={"jobs": [
            {"target": f"queue:q{i % 8}", "schedule": {"at": "2031-01-01T00:00:00Z"}} for i in range(1000)
        ]})
        took = []
        for _ in range(count):
            started = time.perf_counter()
            size = len(client.get("/metrics").content)
            took.append(time.perf_counter() - started)
    took.sort()
    return f"{count} scrapes of /metrics", f"{size} bytes, p50 {statistics.median(took) * 1000:.2f} ms", sum(took)


def measure(server: Node, steps: list, rows: list) -> None:
    for step in steps:
        before = rss_mib(server)
        with Prober(server.url) as prober:
            time.sleep(0.2)  # the prober's keep-alive connection is open before the abuse
            what, got, took_s = step()
            time.sleep(0.2)
        rows.append((what, got, f"{took_s:.2f}", f"{before:.0f} -> {rss_mib(server):.0f}", prober.summary()))
    assert server.running(), "the server died"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=400)
    parser.add_argument("--bodies", type=int, default=16)
    parser.add_argument("--stalled", type=int, default=100)
    parser.add_argument("--slow", type=int, default=300)
    parser.add_argument("--aborted", type=int, default=1000)
    parser.add_argument("--batch-bodies", type=int, default=16)
    parser.add_argument("--stored", action="store_true", help="batch items that are valid jobs, created")
    args = parser.parse_args()
    rows: list = []
    with tempfile.TemporaryDirectory() as root:
        config = os.path.join(root, "tempo.toml")
        with open(config, "w") as f:
            f.write(CONFIG)
        server = Node(os.path.join(root, "data"), extra_args=("--config", config))
        start(server)
        try:
            measure(server, [
                lambda: flood_connections(server, args.connections),
                lambda: slow_headers(server, args.slow, ["127.0.0.1"]),
                lambda: slow_headers(server, args.slow, [f"127.0.0.{i}" for i in range(10, 18)]),
                lambda: aborted_long_polls(server, args.aborted),
                lambda: oversized_bodies(server, args.bodies),
                lambda: stalled_bodies(server, args.stalled),
                lambda: scrape(server, 200),
            ], rows)
        finally:
            server.stop(timeout_s=stop_timeout_s)
        # Large bodies against a server of its own with the default limits
        # (the 2 s read timeout above would cut them short).
        server = Node(os.path.join(root, "defaults"))
        start(server)
        try:
            measure(server, [lambda: batch_bodies(server, args.batch_bodies, args.stored)], rows)
        finally:
            server.stop(timeout_s=stop_timeout_s)
    print(table(rows, ("abuse", "answers", "s", "RSS MiB", "/healthz meanwhile")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
