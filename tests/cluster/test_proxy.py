"""The fault proxy alone, against an echo server: it forwards both ways, cuts
and refuses the blocked sources only, heals, and delays."""

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tempo.loadgen.spawn import free_port

from .proxy import Proxy

io_timeout_s = 3.0


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                while chunk := conn.recv(65536):
                    conn.sendall(chunk)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()
    finally:
        stop.set()
        thread.join(timeout=2.0)
        server.close()


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[Proxy]:
    p = Proxy(("127.0.0.5", free_port("127.0.0.5")), echo, name="test").start()
    try:
        yield p
    finally:
        p.close()


def connect(proxy: Proxy, source_ip: str) -> socket.socket:
    sock = socket.socket()
    sock.settimeout(io_timeout_s)
    sock.bind((source_ip, 0))
    sock.connect(proxy.listen)
    return sock


def roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def is_cut(sock: socket.socket) -> bool:
    """True when the connection is broken or closed by the other side."""
    try:
        sock.sendall(b"x")
        return sock.recv(1) == b""
    except OSError:
        return True


def refused(proxy: Proxy, source_ip: str) -> bool:
    """True when a new connection from `source_ip` breaks (at connect or at once after)."""
    try:
        sock = connect(proxy, source_ip)
    except OSError:
        return True  # the reset can beat connect() back
    with sock:
        return is_cut(sock)


def test_forwards_both_ways(proxy: Proxy):
    with connect(proxy, "127.0.0.9") as sock:
        assert roundtrip(sock, b"hello") == b"hello"
        big = bytes(range(256)) * 8192  # 2 MiB, many chunks
        assert roundtrip(sock, big) == big
    assert proxy.sources_seen == {"127.0.0.9"}


def test_block_cuts_and_refuses_only_those_sources(proxy: Proxy):
    blocked = connect(proxy, "127.0.0.2")
    other = connect(proxy, "127.0.0.3")
    assert roundtrip(blocked, b"a") == b"a"
    assert roundtrip(other, b"b") == b"b"
    proxy.block(["127.0.0.2"])
    assert is_cut(blocked)
    blocked.close()
    assert refused(proxy, "127.0.0.2")
    assert roundtrip(other, b"still") == b"still"
    with connect(proxy, "127.0.0.4") as fresh:
        assert roundtrip(fresh, b"new") == b"new"
    assert proxy.refused >= 1
    other.close()


def test_heal_lets_blocked_sources_back(proxy: Proxy):
    proxy.block(["127.0.0.2"])
    assert refused(proxy, "127.0.0.2")
    proxy.heal()
    assert proxy.blocked == frozenset()
    with connect(proxy, "127.0.0.2") as sock:
        assert roundtrip(sock, b"back") == b"back"


def test_delay_holds_chunks_back(proxy: Proxy):
    with connect(proxy, "127.0.0.9") as sock:
        proxy.delay_s = 0.2
        started = time.monotonic()
        assert roundtrip(sock, b"slow") == b"slow"
        # One chunk each way, each held back 0.2 s.
        assert time.monotonic() - started >= 0.35
        proxy.delay_s = 0.0
        started = time.monotonic()
        assert roundtrip(sock, b"fast") == b"fast"
        assert time.monotonic() - started < 0.2


def test_upstream_down_resets_the_client():
    port = free_port("127.0.0.1")  # nothing listens there
    p = Proxy(("127.0.0.5", free_port("127.0.0.5")), ("127.0.0.1", port)).start()
    try:
        assert refused(p, "127.0.0.9")
    finally:
        p.close()


def test_close_cuts_live_connections(echo: tuple[str, int]):
    p = Proxy(("127.0.0.5", free_port("127.0.0.5")), echo).start()
    sock = connect(p, "127.0.0.9")
    assert roundtrip(sock, b"x") == b"x"
    p.close()
    assert is_cut(sock)
    sock.close()
