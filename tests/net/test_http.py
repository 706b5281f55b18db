"""Limits at the edge, against a real `tempo serve` started with small ones
(docs/operations.md "Limits"): each over-limit request gets its documented
answer, and the server keeps serving everyone else afterwards."""

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import Server, configured_server, metric, unique, wait_for

from .raw_http import read_answer

CONNECTIONS_MAX = 24
REQUESTS_MAX = 4
LONG_POLLS_MAX = 2
BODY_READ_TIMEOUT_S = 3.0
CONFIG = f"""
[http]
connections_max = {CONNECTIONS_MAX}
requests_in_flight_max = {REQUESTS_MAX}
long_polls_max = {LONG_POLLS_MAX}
body_read_timeout_s = {BODY_READ_TIMEOUT_S}
connections_per_address_max = {CONNECTIONS_MAX}
"""


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory):
    with configured_server(tmp_path_factory.mktemp("edge"), CONFIG) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(edge: Server):
    with httpx.Client(base_url=edge.url, timeout=30.0) as c:
        yield c


def raw(port: int, data: bytes, *, read_s: float = 10.0) -> tuple[int, dict, bytes]:
    """Sends `data` on a fresh connection and reads one answer: (status,
    headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_s) as sock:
        # The server may answer and close while this is sending.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        return read_answer(sock)


def problem(headers: dict, body: bytes) -> dict:
    assert headers["content-type"] == "application/problem+json"
    return json.loads(body)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def still_serves(client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200
    created = client.post("/v1/jobs", json={"target": f"queue:{unique('q')}", "schedule": {"at": "2030-01-01T00:00:00Z"}})
    assert created.status_code == 201, created.text


def test_headers_over_the_bound_are_431_problem_json(edge, client):
    # One read: hypercorn parses it whole, tempo's own check answers.
    answer = client.get("/v1/jobs", headers={"x-filler": "a" * (17 << 10)})
    assert answer.status_code == 431
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"] == "too_large"
    # Far over: h11 refuses it while buffering, before any of tempo runs.
    status, headers, body = raw(edge.port, b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-filler: " + b"a" * (200 << 10) + b"\r\n\r\n")
    assert status == 431 and problem(headers, body)["type"] == "too_large"
    assert headers["connection"] == "close"
    # Just under the bound is fine.
    assert client.get("/healthz", headers={"x-filler": "a" * (12 << 10)}).status_code == 200
    still_serves(client)


def test_a_body_over_the_bound_is_413_and_memory_stays_bounded(edge, client):
    before = rss_bytes(edge.pid)
    size = 64 << 20
    head = f"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", edge.port), timeout=30) as sock:
        sock.sendall(head.encode())
        chunk = b"x" * (1 << 20)
        sent = 0
        try:
            while sent < size:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, headers, body = read_answer(sock)
    assert status == 413 and problem(headers, body)["type"] == "too_large"
    # Past `limits.refused_body_discard_bytes_max`, a refused body is not read
    # and dropped either (net/asgi.py `discard_body`).
    assert sent < size, "the server read the whole 64 MiB instead of stopping at the bound"
    assert rss_bytes(edge.pid) - before < 16 << 20
    still_serves(client)


def test_a_stalled_body_is_408_after_the_read_timeout(edge, client):
    started = time.monotonic()
    status, headers, body = raw(
        edge.port,
        b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"tar",
    )
    waited_s = time.monotonic() - started
    assert status == 408 and problem(headers, body)["type"] == "request_timeout"
    assert BODY_READ_TIMEOUT_S - 0.5 <= waited_s <= BODY_READ_TIMEOUT_S + 5
    still_serves(client)


def _long_poll(url: str, queue: str, wait_s: float, out: list) -> None:
    with httpx.Client(base_url=url, timeout=30.0) as c:
        out.append(c.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": wait_s}))


def test_long_polls_over_the_bound_are_503_and_short_polls_still_pass(edge, client):
    queue = unique("q")
    answers: list[httpx.Response] = []
    pollers = [threading.Thread(target=_long_poll, args=(edge.url, queue, 4, answers)) for _ in range(LONG_POLLS_MAX)]
    for t in pollers:
        t.start()
    wait_for(lambda: metric(client, "tempo_http_long_polls_in_flight") == LONG_POLLS_MAX)
    over = client.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 2})
    assert over.status_code == 503 and over.headers["retry-after"] == "1"
    assert over.json()["type"] == "overloaded"
    events = client.get("/v1/events", params={"wait_s": 2})
    assert events.status_code == 503 and events.json()["type"] == "overloaded"
    # No wait, no long-poll slot needed.
    assert client.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 0}).status_code == 200
    assert client.get("/v1/events").status_code == 200
    for t in pollers:
        t.join(timeout=30)
    assert [a.status_code for a in answers] == [200] * LONG_POLLS_MAX
    again = client.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 0.2})
    assert again.status_code == 200 and again.json() == {"runs": []}


def _stalled_body(port: int, out: list) -> None:
    head = b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n{"
    out.append(raw(port, head))


def test_requests_over_the_in_flight_bound_are_503_but_probes_pass(edge, client):
    queue = unique("q")
    polls: list[httpx.Response] = []
    stalled: list[tuple] = []
    threads = [threading.Thread(target=_long_poll, args=(edge.url, queue, 2 * BODY_READ_TIMEOUT_S, polls))
               for _ in range(LONG_POLLS_MAX)]
    threads += [threading.Thread(target=_stalled_body, args=(edge.port, stalled))
                for _ in range(REQUESTS_MAX - LONG_POLLS_MAX)]
    for t in threads:
        t.start()
    wait_for(lambda: metric(client, "tempo_http_requests_in_flight") == REQUESTS_MAX)
    over = client.get("/v1/jobs")
    assert over.status_code == 503 and over.json()["type"] == "overloaded"
    assert over.headers["retry-after"] == "1"
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    for t in threads:
        t.join(timeout=30)
    assert sorted(status for status, _, _ in stalled) == [408] * (REQUESTS_MAX - LONG_POLLS_MAX)
    assert [p.status_code for p in polls] == [200] * LONG_POLLS_MAX
    assert metric(client, "tempo_http_requests_in_flight") == 0
    still_serves(client)


def test_connections_over_the_bound_close_the_longest_idle_ones(edge, client):
    client.close()  # none of this test's own connections stay open
    sockets = []
    try:
        # All places taken from one address, then newcomers from another
        # (one address may hold them all here: connections_per_address_max).
        for i in range(CONNECTIONS_MAX + 6):
            source = "127.0.0.1" if i < CONNECTIONS_MAX else "127.0.0.2"
            sockets.append(socket.create_connection(("127.0.0.1", edge.port), timeout=5, source_address=(source, 0)))
            time.sleep(0.01)  # in order of arrival
        time.sleep(0.5)
        closed = []
        for sock in sockets:
            sock.settimeout(0.05)
            try:
                closed.append(sock.recv(1) == b"")  # closed without an answer
            except TimeoutError:
                closed.append(False)  # open: it waits for a request
            except ConnectionResetError:
                closed.append(True)
    finally:
        for sock in sockets:
            sock.close()
    # Each newcomer past the bound took the place of the longest idle one.
    assert closed == [True] * 6 + [False] * CONNECTIONS_MAX
    with httpx.Client(base_url=edge.url, timeout=10.0) as fresh:
        wait_for(lambda: fresh.get("/healthz").status_code == 200)
        assert metric(fresh, "tempo_http_connections_evicted_total") >= 6
        still_serves(fresh)

