"""hypercorn, guarded where a peer's cut connection would stop the server,
and bounded where hypercorn has no bound of its own.

hypercorn 0.18's trio connection task lets a few errors escape when a client
goes away in the middle of a streamed body (an h11 protocol error, then a
send on a stream another task is closing; hypercorn issue #203). They reach
hypercorn's server nursery and end `serve`. A peer killed mid-stream is
routine in a cluster, so each connection's task here ends quietly on them.

hypercorn has no limit on connections open at once: past `GATE.connections_max`
a new connection is answered `503` (problem+json) and closed before its
request is read, so a flood of connections cannot use up the process's file
descriptors (which LMDB, snapshots and peer links need too). And where h11
rejects a request itself (headers over `h11_max_incomplete_size`: `431`; a
malformed request: `400`), the answer carries a problem+json body like every
other error, instead of hypercorn's empty one.
"""

import logging

import h11
import hypercorn.protocol
import hypercorn.trio.run
import msgspec
import trio
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer

from tempo import limits
from tempo.schema import Problem

log = logging.getLogger("tempo.http")

_CONNECTION_GONE = (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError)
# A refused connection: what the client sent meanwhile is read (at most this
# much, this long) before closing, so its kernel does not turn the close into
# a reset that hides the 503.
_drain_bytes_max = 64 << 10
_drain_s = 0.5
_PROBLEMS = {
    400: Problem("validation", "Bad Request", 400, "the request is not valid HTTP/1.1"),
    431: Problem(
        "too_large", "Request Header Fields Too Large", 431,
        f"the request line and headers are over {limits.header_bytes_max} bytes",
    ),
}


class ConnectionGate:
    """Connections open now, and those refused for being over the bound."""

    def __init__(self, connections_max: int = limits.connections_max):
        self.connections_max = connections_max
        self.open = 0
        self.refused = 0


GATE = ConnectionGate()


def _refusal() -> bytes:
    body = msgspec.json.encode(
        Problem("overloaded", "Service Unavailable", 503, "too many connections; retry shortly")
    )
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "content-type: application/problem+json\r\n"
        f"retry-after: {limits.retry_after_s}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


_REFUSAL = _refusal()


class _GuardedTCPServer(TCPServer):
    async def run(self) -> None:
        if GATE.open >= GATE.connections_max:
            GATE.refused += 1
            await self._refuse()
            return
        GATE.open += 1
        try:
            await super().run()
        except* _CONNECTION_GONE as group:
            log.debug("a connection ended abruptly: %r", group.exceptions)
        finally:
            GATE.open -= 1

    async def _read_data(self) -> None:
        await super()._read_data()
        # The client has closed (or stopped sending for `read_timeout`).
        # hypercorn 0.18 leaves the keep-alive timer of an idle connection
        # running, and the connection (its file descriptor, its place under
        # `connections_max`) waits for it, up to `keep_alive_timeout_s`.
        await self.idle_task.stop()

    async def _refuse(self) -> None:
        stream = self.stream
        with trio.move_on_after(_drain_s):
            try:
                # Over TLS the answer would need a handshake first: just close.
                if isinstance(stream, trio.SocketStream):
                    await stream.send_all(_REFUSAL)
                    await stream.send_eof()
                    drained = 0
                    while drained < _drain_bytes_max and (data := await stream.receive_some(_drain_bytes_max)):
                        drained += len(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        with trio.CancelScope(shield=True):
            await stream.aclose()


class _ProblemH11Protocol(H11Protocol):
    async def _send_error_response(self, status_code: int) -> None:
        problem = _PROBLEMS.get(status_code) or Problem("error", "Error", status_code, "the request was refused")
        body = msgspec.json.encode(problem)
        headers = [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())


def install() -> None:
    """Makes hypercorn's trio worker use the guarded connection task and
    answer its own rejections with problem+json."""
    hypercorn.trio.run.TCPServer = _GuardedTCPServer  # type: ignore[misc]
    hypercorn.protocol.H11Protocol = _ProblemH11Protocol  # type: ignore[misc]
