"""hypercorn, guarded where a peer's cut connection would stop the server.

hypercorn 0.18's trio connection task lets a few errors escape when a client
goes away in the middle of a streamed body (an h11 protocol error, then a
send on a stream another task is closing; hypercorn issue #203). They reach
hypercorn's server nursery and end `serve`. A peer killed mid-stream is
routine in a cluster, so each connection's task here ends quietly on them.
"""

import logging

import h11
import hypercorn.trio.run
import trio
from hypercorn.trio.tcp_server import TCPServer

log = logging.getLogger("tempo.http")

_CONNECTION_GONE = (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError)


class _GuardedTCPServer(TCPServer):
    async def run(self) -> None:
        try:
            await super().run()
        except* _CONNECTION_GONE as group:
            log.debug("a connection ended abruptly: %r", group.exceptions)


def install() -> None:
    """Makes hypercorn's trio worker use the guarded connection task."""
    hypercorn.trio.run.TCPServer = _GuardedTCPServer  # type: ignore[misc]
