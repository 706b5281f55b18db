"""Plain hypercorn, one worker, trio: the reference bench/create.py measures
beside tempo. Issue 2 gives its targets for a machine on which this answers
about 2,200 tiny requests a second from 32 clients; this machine's speed
changes by a factor of two or more from one hour to the next (it is shared),
so the same load against this app, run just before, says how fast the
machine was when tempo's figures were taken.

    python bench/_plain.py PORT      # serves until SIGTERM

Every request gets `201` and an empty JSON object; the body is read and
dropped, as an ASGI app must.
"""

import sys

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

# The reference: plain hypercorn's tiny requests a second, on the
# 2-core machine its targets were set on.
REFERENCE_PER_S = 2_200


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        raise RuntimeError("no lifespan")  # hypercorn then goes on without one
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})


def main() -> None:
    config = Config()
    config.bind = [f"127.0.0.1:{int(sys.argv[1])}"]
    config.accesslog = None
    config.errorlog = None
    trio.run(serve, app, config)


if __name__ == "__main__":
    main()
