"""Calls an ASGI app in-process, as hypercorn would, and records what it
sent and how much of the body it read; makes a single node's app to call."""

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.net.api import Api
from tempo.node import Standalone


@contextmanager
def standalone_api(data_dir: Path, **options) -> Iterator[Api]:
    """The app of a single node on a new store at `data_dir`, as it is once
    started (`options` go to Api), without the services that run beside it;
    the store is closed on leaving."""
    store = Store(str(data_dir))
    committer = Committer(store)
    made = Api(
        store, Jobs(store, committer), Dispatcher(store, committer), node=Standalone(store.applied_index), **options
    )
    made.started = True
    try:
        yield made
    finally:
        store.close()


@dataclass
class Answer:
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    receives: int  # how many times the app asked for more of the request
    messages: list[dict] = field(default_factory=list)

    def problem(self) -> dict:
        assert self.headers[b"content-type"] == b"application/problem+json", self.headers
        return json.loads(self.body)


async def call(
    app,
    method: str,
    path: str,
    chunks: Iterable[bytes | None] = (b"",),
    headers: Iterable[tuple[bytes, bytes]] = (),
    on_receive=None,
) -> Answer:
    """One request whose body arrives in `chunks` (None: the client goes
    away instead); `on_receive(n)` runs before the n-th chunk (from 0) is
    handed over."""
    pending = list(chunks)
    received = 0

    async def receive() -> dict:
        nonlocal received
        if on_receive is not None:
            await on_receive(received)
        received += 1
        chunk = pending.pop(0) if pending else None
        if chunk is None:  # the client went away
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    raw_path, _, query = path.encode().partition(b"?")
    scope = {
        "type": "http", "method": method, "path": raw_path.decode(), "raw_path": raw_path, "query_string": query,
        "headers": [(b"host", b"x"), *headers],
    }
    await app(scope, receive, send)
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1, f"the app must answer once: {sent}"
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(starts[0]["status"], dict(starts[0]["headers"]), body, received, sent)
