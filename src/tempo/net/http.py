"""hypercorn, guarded where a peer's cut connection would stop the server,
and bounded where hypercorn has no bound of its own.

hypercorn 0.18's trio connection task lets a few errors escape when a client
goes away in the middle of a streamed body (an h11 protocol error, then a
send on a stream another task is closing; hypercorn issue #203). They reach
hypercorn's server nursery and end `serve`. A peer killed mid-stream is
routine in a cluster, so each connection's task here ends quietly on them.

hypercorn has no limit on connections open at once, in all or from one
client address. Past `GATE.per_address_max` from one address, a new
connection from it is answered `503` (problem+json) and closed before its
request is read. Past `GATE.connections_max` in all, a new connection takes
the place of the longest idle one (its request head not complete yet, or
kept alive between requests), which is closed; when none is idle, the new
one is refused so. So a flood of connections cannot use up the process's
file descriptors (which LMDB, snapshots and peer links need too), one
address cannot hold more than its share, and a flood from many addresses
cannot keep out peer streams and probes, whose requests are never refused:
client requests busy at once are bounded by `requests_in_flight_max`
(net/api.py), below `connections_max`, and connections that send nothing
make way.

hypercorn closes a connection whose request head is not complete
`keep_alive_timeout` after it opened; here the head of a connection's first
request must be complete `limits.header_read_timeout_s` after it opened, and
a later one that long after its first byte, so a client sending its headers
slowly holds its connection for seconds, not minutes. An idle keep-alive
connection still waits `keep_alive_timeout` for its next request.

hypercorn bounds reads only: a client that stops reading an answer would
hold its connection, and its request's place, for ever. Here it must take
each `limits.write_chunk_bytes` of an answer within `limits.write_timeout_s`,
else it is cut off as if it had gone.

And where h11 rejects a request itself (headers over
`h11_max_incomplete_size`: `431`; a malformed request: `400`; a
Transfer-Encoding other than one `chunked`: `501`), the answer
carries a problem+json body like every other error, instead of hypercorn's
empty one.
"""

import logging
import socket
from collections import Counter
from dataclasses import dataclass

import h11
import hypercorn.protocol
import hypercorn.trio.run
import msgspec
import trio
from hypercorn.events import Event, RawData, Updated
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer

from tempo import limits
from tempo.schema import Problem

log = logging.getLogger("tempo.http")

_CONNECTION_GONE = (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError)
# A refused connection: what the client sent meanwhile is read (at most
# `limits.refused_connection_drain_bytes_max`, `..._drain_s`) before closing,
# so its kernel does not turn the close into a reset that hides the 503.
_PROBLEMS = {
    400: Problem("validation", "Bad Request", 400, "the request is not valid HTTP/1.1"),
    431: Problem(
        "too_large", "Request Header Fields Too Large", 431,
        f"the request line and headers are over {limits.header_bytes_max} bytes",
    ),
    # h11 answers 501 to a Transfer-Encoding other than one `chunked`: a
    # coding it does not implement, or the header sent twice
    # (docs/api.md "Repeated headers").
    501: Problem(
        "not_implemented", "Not Implemented", 501,
        "Transfer-Encoding: only one transfer coding, chunked, is implemented; send it once",
    ),
}


def check_bindable(host: str, port: int) -> None:
    """Raises OSError when `host:port` cannot be listened on (in use, or an
    address this machine does not have), as hypercorn would a moment later:
    `tempo serve` checks first, so the operator gets one line and exit 2
    before the data directory is opened or created. The socket is made as
    hypercorn makes its own (SO_REUSEADDR), so a port in TIME_WAIT passes."""
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(1)
        return


class Ticket:
    """One open connection's place under the gate."""

    __slots__ = ("address", "evicted", "scope")

    def __init__(self, address: str):
        self.address = address
        self.scope = trio.CancelScope()  # cancelled to close it for a newcomer
        self.evicted = False


class ConnectionGate:
    """Connections open now (in all and by client address), those refused
    for being over a bound, and those closed to make room for a new one.

    Invariants: `open == sum(open_of.values())`; an evicted ticket is not
    in `_idle` and no longer counted."""

    def __init__(
        self,
        connections_max: int = limits.connections_max,
        per_address_max: int = limits.connections_per_address_max,
    ):
        self.connections_max = connections_max
        self.per_address_max = per_address_max
        self.open = 0
        self.refused = 0
        self.evicted = 0
        self.open_of: Counter[str] = Counter()
        # Idle connections, the longest idle first.
        self._idle: dict[Ticket, None] = {}

    def admit(self, address: str) -> Ticket | None:
        """A place for a new connection from `address`, made by closing the
        longest idle one when all places are taken; None when it is refused."""
        if self.open_of[address] >= self.per_address_max:
            self.refused += 1
            return None
        if self.open >= self.connections_max and not self._evict():
            self.refused += 1
            return None
        ticket = Ticket(address)
        self.open += 1
        self.open_of[address] += 1
        self.set_idle(ticket)
        return ticket

    def set_idle(self, ticket: Ticket) -> None:
        """No request in progress: waiting for one's head, or kept alive."""
        if not ticket.evicted:
            self._idle[ticket] = None

    def set_busy(self, ticket: Ticket) -> None:
        """A request's head has arrived: it is being answered."""
        self._idle.pop(ticket, None)

    def leave(self, ticket: Ticket) -> None:
        if not ticket.evicted:  # else counted out when it was evicted
            self.set_busy(ticket)
            self._count_out(ticket)

    def _evict(self) -> bool:
        if not self._idle:
            return False
        ticket = next(iter(self._idle))
        self.set_busy(ticket)
        ticket.evicted = True
        ticket.scope.cancel()
        self._count_out(ticket)
        self.evicted += 1
        return True

    def _count_out(self, ticket: Ticket) -> None:
        self.open -= 1
        count = self.open_of[ticket.address] - 1
        assert self.open >= 0 and count >= 0, "the gate counts what it admitted"
        if count:
            self.open_of[ticket.address] = count
        else:
            del self.open_of[ticket.address]


GATE = ConnectionGate()


@dataclass(frozen=True)
class _HeadStarted(Event):
    """From the protocol to its connection: the first bytes of a request
    head have arrived."""


_HEAD_STARTED = _HeadStarted()
# What a connection waits for (`_GuardedTCPServer._waiting`).
_FIRST_HEAD, _BUSY, _KEPT_ALIVE, _NEXT_HEAD = "first head", "busy", "kept alive", "next head"


def _address_of(stream: trio.abc.Stream) -> str:
    """The client's IP address ("" if it has gone already)."""
    transport = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    assert isinstance(transport, trio.SocketStream)  # hypercorn serves TCP, with or without TLS
    sock = transport.socket
    try:
        return str(sock.getpeername()[0])
    except OSError:
        return ""


class _WriteBoundedStream:
    """A connection's stream whose writes the client must take in time
    (`limits.write_timeout_s` for each `limits.write_chunk_bytes`); all else
    is the stream's own."""

    def __init__(self, stream: trio.abc.Stream):
        self._stream = stream

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        for start in range(0, max(len(view), 1), limits.write_chunk_bytes):
            # Inside hypercorn's shield: this deadline still applies.
            with trio.move_on_after(limits.write_timeout_s) as stalled:
                await self._stream.send_all(view[start : start + limits.write_chunk_bytes])
            if stalled.cancelled_caught:
                # What hypercorn takes for a client that has gone.
                raise trio.BrokenResourceError(f"the client took nothing for {limits.write_timeout_s:g} s")


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
        ticket = GATE.admit(_address_of(self.stream))
        if ticket is None:
            await self._refuse()
            return
        self._ticket = ticket
        self._waiting = _FIRST_HEAD
        self.stream = _WriteBoundedStream(self.stream)  # type: ignore[assignment]  # a Stream by __getattr__
        self._idle_scope = trio.CancelScope()  # the idle task's, once it runs
        try:
            with ticket.scope:
                await super().run()
        except* _CONNECTION_GONE as group:
            log.debug("a connection ended abruptly: %r", group.exceptions)
        finally:
            GATE.leave(ticket)
            if ticket.evicted:
                # Cancelled inside hypercorn's own closing: close it here.
                with trio.CancelScope(shield=True):
                    await self.stream.aclose()

    async def protocol_send(self, event: Event) -> None:
        if event is _HEAD_STARTED:
            if self._waiting == _KEPT_ALIVE:
                # The next request's head has begun: from now on it has
                # `header_read_timeout_s`, not the keep-alive timeout. (An
                # idle task that has not started yet reads `_waiting`.)
                self._waiting = _NEXT_HEAD
                scope = self._idle_scope
                scope.deadline = min(scope.deadline, trio.current_time() + limits.header_read_timeout_s)
            return
        if isinstance(event, Updated):
            if event.idle:
                self._waiting = _KEPT_ALIVE
                GATE.set_idle(self._ticket)
            else:
                self._waiting = _BUSY
                GATE.set_busy(self._ticket)
        await super().protocol_send(event)

    async def _idle_timeout(self) -> None:
        """Closes the connection when the head it waits for is late, or
        when it has been kept alive idle for `keep_alive_timeout`."""
        kept_alive = self._waiting == _KEPT_ALIVE
        timeout_s = self.config.keep_alive_timeout if kept_alive else limits.header_read_timeout_s
        with trio.move_on_after(timeout_s) as self._idle_scope:
            await self.context.terminated.wait()
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    async def _read_data(self) -> None:
        await super()._read_data()
        # The client has closed (or stopped sending for `read_timeout`).
        # hypercorn 0.18 leaves the keep-alive timer of an idle connection
        # running, and the connection (its file descriptor, its place under
        # `connections_max`) waits for it, up to `keep_alive_timeout_s`.
        await self.idle_task.stop()

    async def _refuse(self) -> None:
        stream = self.stream
        with trio.move_on_after(limits.refused_connection_drain_s):
            try:
                # Over TLS the answer would need a handshake first: just close.
                if isinstance(stream, trio.SocketStream):
                    await stream.send_all(_REFUSAL)
                    await stream.send_eof()
                    drained = 0
                    while drained < limits.refused_connection_drain_bytes_max and (data := await stream.receive_some(limits.refused_connection_drain_bytes_max)):
                        drained += len(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        with trio.CancelScope(shield=True):
            await stream.aclose()


class _ProblemH11Protocol(H11Protocol):
    async def handle(self, event: Event) -> None:
        if self.stream is None and isinstance(event, RawData) and event.data:
            await self.send(_HEAD_STARTED)  # between requests: a head begins
        await super().handle(event)

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
    hypercorn.trio.run.TCPServer = _GuardedTCPServer  # type: ignore[attr-defined]  # hypercorn does not export it
    hypercorn.protocol.H11Protocol = _ProblemH11Protocol  # type: ignore[attr-defined]  # hypercorn does not export it
