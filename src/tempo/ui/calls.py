"""Calls the API in process: the console's every read and write is one
request to the same ASGI app that answers `/v1`, with the console user's
bearer token, so no rule of the API is written twice."""

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import trio
from hypercorn.typing import (
    ASGIFramework,
    ASGIReceiveEvent,
    ASGISendEvent,
    ConnectionState,
    HTTPScope,
)


@dataclass(slots=True)
class Answer:
    status: int
    body: bytes
    headers: dict[bytes, bytes] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def problem(self) -> str:
        """The API's own words for a refusal: its detail and each field's
        message (docs/api.md "Errors")."""
        try:
            data = self.json()
        except ValueError:
            return f"HTTP {self.status}"
        if not isinstance(data, dict):
            return f"HTTP {self.status}"
        parts = [str(data.get("detail") or data.get("title") or f"HTTP {self.status}")]
        for item in data.get("errors") or []:
            loc = item.get("loc", "")
            said = f"{loc}: {item.get('msg', '')}" if loc else str(item.get("msg", ""))
            if said not in parts[0]:
                parts.append(said)
        return "; ".join(p for p in parts if p)


class ApiCaller:
    """One console user's view of the API: `token` is their bearer token
    (None when the server has no tokens)."""

    def __init__(self, app: ASGIFramework, scope: HTTPScope, token: str | None):
        self.app = app
        self.outer = scope
        self.token = token

    async def call(
        self, method: str, path: str, query: dict[str, Any] | list[tuple[str, str]] | None = None,
        body: Any = None, headers: dict[str, str] | None = None,
    ) -> Answer:
        pairs = query.items() if isinstance(query, dict) else (query or [])
        raw_query = urlencode([(k, v) for k, v in pairs if v not in (None, "")]).encode()
        data = b"" if body is None else json.dumps(body).encode()
        head = [(b"accept", b"application/json"), (b"host", dict(self.outer["headers"]).get(b"host", b"localhost"))]
        if data:
            head += [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        if self.token is not None:
            head.append((b"authorization", f"Bearer {self.token}".encode()))
        for name, value in (headers or {}).items():
            head.append((name.lower().encode(), value.encode()))
        scope: HTTPScope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": self.outer.get("scheme", "http"), "path": path, "raw_path": path.encode(),
            "query_string": raw_query, "root_path": "", "headers": head,
            "client": self.outer.get("client"), "server": self.outer.get("server"), "extensions": {},
            "state": ConnectionState({}),
        }
        sent_body = False
        status = 500
        chunks: list[bytes] = []
        answer_headers: dict[bytes, bytes] = {}

        async def receive() -> ASGIReceiveEvent:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": data, "more_body": False}
            # The console's user waits for this answer: no disconnect comes
            # (a long poll would otherwise end at once).
            await trio.sleep_forever()
            raise AssertionError("sleep_forever returned")

        async def send(event: ASGISendEvent) -> None:
            nonlocal status
            if event["type"] == "http.response.start":
                status = event["status"]
                answer_headers.update(dict(event["headers"]))
            elif event["type"] == "http.response.body":
                chunks.append(event.get("body", b""))

        await self.app(scope, receive, send)
        return Answer(status, b"".join(chunks), answer_headers)
