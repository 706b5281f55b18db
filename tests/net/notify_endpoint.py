"""A local HTTP(S) endpoint that records what it is sent, for the
notification tests (tests/net/test_notify.py, tests/cluster/test_notify_failover.py)."""

import http.server
import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import trustme

SECRET = "s3cret-" + "x" * 40
hang_s = 60.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def notice(self) -> dict:
        return json.loads(self.body)


@dataclass
class Endpoint:
    """A local HTTP(S) server that records every request. `/flaky…` answers
    500 to its first request, `/hang…` answers only when released, the rest 200."""

    url: str
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    seen: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: list[tuple[str, float]] = field(default_factory=list)  # (path, monotonic s) as each request came

    def arrived_at(self, path: str, after_s: float = 0.0) -> int:
        with self.lock:
            return sum(1 for p, t_s in self.arrived if p == path and t_s > after_s)

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def ok_at(self, path: str) -> list[dict]:
        return [r.notice for r in self.at(path) if r.status == 200]


def serve(endpoint_of: "list[Endpoint]", context: ssl.SSLContext | None) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            endpoint = endpoint_of[0]
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            status = 200
            with endpoint.lock:
                endpoint.arrived.append((self.path, time.monotonic()))
            if self.path.startswith("/hang"):
                endpoint.release.wait(hang_s)
            with endpoint.lock:
                if self.path.startswith("/flaky") and self.path not in endpoint.seen:
                    endpoint.seen.add(self.path)
                    status = 500
                endpoint.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                  body, status))
            try:
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()
            except OSError:
                pass  # the caller gave up waiting

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    scheme = "http"
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"{scheme}://127.0.0.1:{httpd.server_address[1]}"


@contextmanager
def serving(context: ssl.SSLContext | None) -> Iterator[Endpoint]:
    """A recording endpoint, https with `context`, plain http without."""
    holder: list[Endpoint] = []
    httpd, url = serve(holder, context)
    holder.append(Endpoint(url))
    try:
        yield holder[0]
    finally:
        holder[0].release.set()
        httpd.shutdown()


@contextmanager
def https_endpoint(ca: trustme.CA) -> Iterator[Endpoint]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with serving(context) as found:
        yield found
