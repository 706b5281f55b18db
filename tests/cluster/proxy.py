"""A TCP fault proxy for the cluster tests: it sits in front of one node's
listener and forwards bytes both ways, until told to cut some sources off.

Every node's outgoing peer connections come from its own loopback address
(127.0.0.k for node k), so the proxy tells the nodes apart by the connecting
source IP. `block(ips)` closes the live connections from those IPs at once
and refuses new ones (a reset right after accept); `heal()` lets everyone
through again; `delay_s` holds each forwarded chunk back that long.

Plain threads, no dependency: each connection has two pump threads; the
accept loop polls a closed flag every `accept_poll_s`.
"""

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterable

accept_poll_s = 0.1
upstream_connect_timeout_s = 2.0
chunk_bytes_max = 65536
backlog_max = 128


def _reset(sock: socket.socket) -> None:
    """Closes with RST (SO_LINGER 0): the peer sees the connection break at once."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class _Pair:
    """One proxied connection: the accepted socket and the upstream one."""

    def __init__(self, source_ip: str, downstream: socket.socket, upstream: socket.socket):
        self.source_ip = source_ip
        self.downstream = downstream
        self.upstream = upstream
        self._lock = threading.Lock()
        self._open_pumps = 2
        self._closed = False

    def cut(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _reset(self.downstream)
        _reset(self.upstream)

    def pump_done(self) -> bool:
        """True when this was the last pump of the pair."""
        with self._lock:
            self._open_pumps -= 1
            return self._open_pumps == 0


class Proxy:
    """Forwards `listen` (HOST, PORT) to `upstream` (HOST, PORT)."""

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int], name: str = "proxy"):
        self.listen = listen
        self.upstream = upstream
        self.name = name
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._blocked: set[str] = set()
        self._pairs: set[_Pair] = set()
        self._sources_seen: set[str] = set()
        self._refused = 0
        self._closed = threading.Event()
        self._server: socket.socket | None = None
        self._acceptor: threading.Thread | None = None

    # -- control ----------------------------------------------------------------

    def start(self) -> "Proxy":
        assert self._server is None, "start: already started"
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(self.listen)
        server.listen(backlog_max)
        server.settimeout(accept_poll_s)
        self._server = server
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"{self.name}-accept", daemon=True)
        self._acceptor.start()
        return self

    def close(self) -> None:
        self._closed.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5.0)
        if self._server is not None:
            self._server.close()
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            pair.cut()

    def block(self, ips: Iterable[str]) -> None:
        """Cuts the live connections from `ips` and refuses new ones from them."""
        ips = set(ips)
        with self._lock:
            self._blocked |= ips
            doomed = [p for p in self._pairs if p.source_ip in ips]
        for pair in doomed:
            pair.cut()

    def heal(self) -> None:
        with self._lock:
            self._blocked.clear()

    @property
    def blocked(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._blocked)

    @property
    def sources_seen(self) -> frozenset[str]:
        """Every source IP that opened a connection through this proxy."""
        with self._lock:
            return frozenset(self._sources_seen)

    @property
    def refused(self) -> int:
        with self._lock:
            return self._refused

    def live_sources(self) -> list[str]:
        with self._lock:
            return sorted(p.source_ip for p in self._pairs)

    # -- forwarding -------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._server is not None
        while not self._closed.is_set():
            try:
                downstream, (source_ip, _) = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed under us
            with self._lock:
                self._sources_seen.add(source_ip)
                refuse = source_ip in self._blocked
                if refuse:
                    self._refused += 1
            if refuse:
                _reset(downstream)
                continue
            threading.Thread(
                target=self._connect, args=(source_ip, downstream), name=f"{self.name}-conn", daemon=True
            ).start()

    def _connect(self, source_ip: str, downstream: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=upstream_connect_timeout_s)
        except OSError:
            _reset(downstream)
            return
        upstream.settimeout(None)
        downstream.settimeout(None)
        for sock in (upstream, downstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(source_ip, downstream, upstream)
        with self._lock:
            # A block that came while we connected must still win.
            if source_ip in self._blocked or self._closed.is_set():
                refuse = True
            else:
                refuse = False
                self._pairs.add(pair)
        if refuse:
            pair.cut()
            return
        threading.Thread(target=self._pump, args=(pair, downstream, upstream), daemon=True).start()
        self._pump(pair, upstream, downstream)

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                chunk = src.recv(chunk_bytes_max)
                if not chunk:
                    # Half-close: the other direction may still carry an answer.
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    break
                delay_s = self.delay_s
                if delay_s > 0:
                    time.sleep(delay_s)
                dst.sendall(chunk)
        except OSError:
            pair.cut()
        if pair.pump_done():
            pair.cut()
            with self._lock:
                self._pairs.discard(pair)
