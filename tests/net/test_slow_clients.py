"""Slow clients cannot starve others (docs/operations.md "Limits"), against a
real `tempo serve` with a small connection bound: floods of connections that
send their headers slowly, from one address and from many, while another
client, the probes and keep-alive connections go on being served; and a
client that stops reading its answer is cut off.

Every address is on the loopback (127.0.0.0/8); the flood keeps its
connections open (opening new ones as the server closes old ones) until
the test ends. The server runs with shorter deadlines than the defaults
(`SHORT`), so that the tests that wait them out take seconds, not half a
minute; the code that enforces them is the same."""

import socket
import sys
import time

import httpx
import pytest

from conftest import Server, configured_server, metric, tempo_command, unique
from slow_heads import SLOW_HEAD, SlowHeaders
from tempo import limits

from .raw_http import read_answer

CONNECTIONS_MAX = 64
PER_ADDRESS_MAX = CONNECTIONS_MAX // limits.connections_per_address_share  # the default
CONFIG = f"""
[http]
connections_max = {CONNECTIONS_MAX}
requests_in_flight_max = 32
long_polls_max = 16
"""
CLIENT_IP = "127.0.0.9"
# The deadlines of `limits` the server runs with: the head's (5 s by
# default) and a stalled write's (20 s). The write's stays above the 2 s
# the cut-off test waits before it looks.
SHORT = {"header_read_timeout_s": 1.5, "write_timeout_s": 5.0}
HEAD_S, WRITE_S = SHORT["header_read_timeout_s"], SHORT["write_timeout_s"]


class ShortServer(Server):
    """`tempo serve`, in a process that set `SHORT` in `limits` first."""

    @property
    def argv(self) -> list[str]:
        prelude = "; ".join(["import sys", "from tempo import cli, limits",
                             *(f"limits.{name} = {value!r}" for name, value in SHORT.items()),
                             "sys.exit(cli.main())"])
        return [sys.executable, "-c", prelude, *super().argv[len(tempo_command()):]]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory):
    with configured_server(tmp_path_factory.mktemp("slow"), CONFIG, ShortServer) as srv:
        yield srv


def fresh_client(url: str) -> httpx.Client:
    """A client from CLIENT_IP that opens a new connection per request."""
    transport = httpx.HTTPTransport(local_address=CLIENT_IP, retries=0)
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.Client(base_url=url, transport=transport, limits=limits, timeout=5.0)


def served(url: str, count: int) -> list[int]:
    with fresh_client(url) as client:
        statuses = []
        for _ in range(count):
            body = {"target": f"queue:{unique('q')}", "schedule": {"at": "2030-01-01T00:00:00Z"}}
            statuses.append(client.post("/v1/jobs", json=body).status_code)
            statuses.append(client.get("/healthz").status_code)
            statuses.append(client.get("/readyz").status_code)
        return statuses


def metric_of(url: str, name: str) -> float:
    """`name` from /metrics, read on a connection of its own from CLIENT_IP."""
    with fresh_client(url) as client:
        return metric(client, name)


def test_slow_headers_from_one_address_do_not_lock_out_another_client(small):
    with SlowHeaders("127.0.0.1", small.port, ["127.0.0.1"], 300):
        time.sleep(0.5)
        assert set(served(small.url, 10)) == {201, 200}
        # One address holds at most its share (this client's own included).
        assert metric_of(small.url, "tempo_http_connections_open") <= PER_ADDRESS_MAX + 1


def test_slow_headers_from_many_addresses_make_way_for_probes_and_requests(small):
    sources = [f"127.0.0.{i}" for i in range(10, 20)]
    with SlowHeaders("127.0.0.1", small.port, sources, PER_ADDRESS_MAX) as flood:
        time.sleep(0.5)
        assert flood.opened > CONNECTIONS_MAX
        assert set(served(small.url, 10)) == {201, 200}


def closed_after_s(sock: socket.socket, timeout_s: float) -> float:
    """Seconds until the server closed `sock` (EOF or reset)."""
    started = time.monotonic()
    sock.settimeout(timeout_s)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"still open after {timeout_s} s") from None
    return time.monotonic() - started


def test_a_head_must_arrive_within_the_header_deadline(small):
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as partial:
        partial.sendall(SLOW_HEAD)
        assert closed_after_s(partial, HEAD_S + 5) <= HEAD_S + 2
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as silent:
        assert closed_after_s(silent, HEAD_S + 5) <= HEAD_S + 2
    # A later request on a kept-alive connection: counted from its first byte.
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as kept:
        kept.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        status, _, body = read_answer(kept)
        assert (status, body) == (200, b'{"status":"ok"}')
        time.sleep(1.0)
        kept.sendall(SLOW_HEAD)
        assert closed_after_s(kept, HEAD_S + 5) <= HEAD_S + 2


def test_an_idle_keep_alive_connection_outlives_the_header_deadline(small):
    with httpx.Client(base_url=small.url, timeout=5.0) as client:
        first = client.get("/healthz")
        time.sleep(HEAD_S + 1)
        second = client.get("/healthz")
        assert first.status_code == second.status_code == 200
        assert client.get("/metrics").status_code == 200
    # One connection served all three (httpx would have opened another
    # silently had the server closed the first).
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as sock:
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            status, _, body = read_answer(sock)
            assert (status, body) == (200, b'{"status":"ok"}')
            time.sleep(HEAD_S + 1)


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory):
    with configured_server(tmp_path_factory.mktemp("tight"), CONFIG + "connections_per_address_max = 4\n",
                           ShortServer) as srv:
        yield srv


def test_connections_past_the_per_address_bound_are_refused_503(tight):
    polls = []
    body = b'{"worker": "w", "queues": ["nothing"], "wait_s": 5}'
    head = b"POST /v1/claim HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    try:
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", tight.port), timeout=5, source_address=("127.0.0.20", 0))
            sock.sendall(head % len(body) + body)
            polls.append(sock)
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", tight.port), timeout=5, source_address=("127.0.0.20", 0)) as over:
            answer = over.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 1" in answer.lower() and b'"type":"overloaded"' in answer
        # Another address is not concerned.
        assert set(served(tight.url, 1)) == {201, 200}
    finally:
        for sock in polls:
            sock.close()


def test_a_client_that_stops_reading_is_cut_off(small):
    # Over 7 MB of answer: more than the kernel's buffers on both ends hold.
    jobs = [{"target": f"queue:{unique('q')}", "schedule": {"at": "2030-01-01T00:00:00Z"}, "payload": "x" * 60_000}
            for _ in range(120)]
    with fresh_client(small.url) as client:
        assert client.post("/v1/jobs/batch", json={"jobs": jobs}, timeout=30).status_code == 200
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", small.port))
    try:
        sock.sendall(b"GET /v1/jobs?limit=1000 HTTP/1.1\r\nhost: x\r\n\r\n")
        time.sleep(2.0)
        assert metric_of(small.url, "tempo_http_requests_in_flight") == 1, "the answer was taken whole: make it larger"
        started = time.monotonic()
        while metric_of(small.url, "tempo_http_requests_in_flight") != 0:
            assert time.monotonic() - started < WRITE_S + 10, "a reader that stopped holds its request"
            time.sleep(0.5)
    finally:
        sock.close()
    assert set(served(small.url, 1)) == {201, 200}
