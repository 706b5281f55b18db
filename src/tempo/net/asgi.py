"""ASGI plumbing: reading bounded bodies, content negotiation, problem+json.

A small hand-written layer instead of a framework: tempo has a dozen routes,
and hypercorn itself is the ceiling for small requests on one core, so every
microsecond of routing shows in the single-create rate.
"""

import re
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import msgspec
import trio
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGIReceiveEvent,
    ASGISendCallable,
    ASGISendEvent,
    HTTPResponseStartEvent,
    HTTPScope,
)

from tempo import errors, limits
from tempo.net import words
from tempo.net.auth import Principal
from tempo.schema import InternalProblem, Problem, ProblemItem

JSON = b"application/json"
MSGPACK = b"application/msgpack"
PROBLEM = b"application/problem+json"
_MSGPACK_TYPES = (b"application/msgpack", b"application/x-msgpack", b"application/vnd.msgpack")

# One table from error type to HTTP status (docs/style.md "Assertions and errors").
STATUS_OF: dict[type[errors.TempoError], int] = {
    errors.Invalid: 400,
    errors.NotFound: 404,
    errors.RequestKeyReused: 409,
    errors.ClaimKeyReused: 409,
    errors.StaleAttempt: 409,
    errors.Conflict: 409,
    errors.HasDependents: 409,
    errors.InUse: 409,
    errors.RunFinished: 409,
    errors.VersionMismatch: 412,
    errors.TooLarge: 413,
    errors.HeadersTooLarge: 431,
    errors.RequestTimeout: 408,
    errors.MethodNotAllowed: 405,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.RateLimited: 429,
    errors.Overloaded: 503,
    errors.StorageFault: 507,
    errors.ShuttingDown: 503,
    errors.NotLeader: 503,
    errors.NoQuorum: 503,
}
TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    412: "Precondition Failed",
    307: "Temporary Redirect",
    413: "Content Too Large",
    429: "Too Many Requests",
    503: "Service Unavailable",
    507: "Insufficient Storage",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}

_json_enc = msgspec.json.Encoder()
_msgpack_enc = msgspec.msgpack.Encoder()
# msgspec ends a validation message with " - at `$.path`" (no structured path
# is exposed); the named field of "unknown field" and "missing required field"
# messages belongs at the end of that path.
_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_NAMED = re.compile(r"^Object (?:contains unknown|missing required) field `(?P<name>[^`]*)`")


async def _no_receive() -> ASGIReceiveEvent:
    raise AssertionError("a request made without its ASGI receive callable read its client")


async def _no_send(event: ASGISendEvent) -> None:
    raise AssertionError("a request made without its ASGI send callable answered its client")


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[bytes, bytes]
    body: bytes = b""
    # The query string as sent: a parameter that may repeat (`label`) is
    # read from it, `query` keeps the last of each name.
    raw_query: bytes = b""
    # Who asks (net/auth.py): `principal`, set before the handler runs.
    _principal: Principal | None = None
    # The ASGI callables, for a handler that watches its client (`watching`)
    # and sends its answer itself.
    receive: ASGIReceiveCallable = _no_receive
    send: ASGISendCallable = _no_send

    @property
    def principal(self) -> Principal:
        assert self._principal is not None, "the principal is read before the request was authenticated"
        return self._principal

    @principal.setter
    def principal(self, principal: Principal) -> None:
        self._principal = principal

    @property
    def is_msgpack(self) -> bool:
        content_type = self.headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        return content_type in _MSGPACK_TYPES

    @property
    def wants_msgpack(self) -> bool:
        accept = acceptable(self.headers.get(b"accept", b"").lower())
        if any(t in accept for t in _MSGPACK_TYPES):
            return True
        return self.is_msgpack and JSON not in accept


_ZERO_WEIGHT = re.compile(rb"\s*q=0(?:\.0{0,3})?\s*")


def acceptable(accept: bytes) -> bytes:
    """An `Accept` value without its media ranges of weight 0, which RFC
    9110 (12.4.2) makes "not acceptable": such a range names no type
    (docs/api.md "Encoding and content negotiation")."""
    if b"q=" not in accept:
        return accept
    kept = [part for part in accept.split(b",") if not any(_ZERO_WEIGHT.fullmatch(p) for p in part.split(b";")[1:])]
    return b",".join(kept)


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    sent: bool = False  # the handler has sent it (or found its client gone)


def encode(request: Request, value: object, status: int = 200) -> Response:
    if request.wants_msgpack:
        return Response(status, _msgpack_enc.encode(value), MSGPACK)
    return Response(status, _json_enc.encode(value), JSON)


def problem_of(exc: errors.TempoError) -> Problem:
    status = STATUS_OF[type(exc)]
    return Problem(
        type=exc.type,
        title=TITLES.get(status, "Error"),
        status=status,
        detail=exc.detail,
        errors=[ProblemItem(loc, msg) for loc, msg in exc.errors],
    )


def problem_response(
    exc: errors.TempoError, headers: list[tuple[bytes, bytes]] | None = None, *, status: int | None = None
) -> Response:
    problem = problem_of(exc)
    if status is not None:
        problem.status = status
        problem.title = TITLES.get(status, problem.title)
    extra = list(headers or [])
    if problem.status in (503, 507):
        extra.append((b"retry-after", b"1"))
    if isinstance(exc, errors.RateLimited):
        extra.append((b"retry-after", str(exc.retry_after_s).encode()))
    if problem.status == 401:
        extra.append((b"www-authenticate", b'Bearer realm="tempo"'))
    return Response(problem.status, _json_enc.encode(problem), PROBLEM, extra)


def new_error_id() -> str:
    """Names one unexpected error in the answer and in the log line."""
    return secrets.token_hex(8)


def internal_response(error_id: str) -> Response:
    """The answer to an error the server did not expect: no detail of it
    (the traceback is in the log, under `error_id`), and nothing a client
    should retry blindly."""
    problem = InternalProblem(
        type="internal",
        title=TITLES[500],
        status=500,
        detail=f"an unexpected error; the server logged it with error_id {error_id}",
        error_id=error_id,
    )
    return Response(500, _json_enc.encode(problem), PROBLEM)


def invalid_from_msgspec(exc: msgspec.MsgspecError, prefix: str = "", kind: Any = None) -> errors.Invalid:
    """Turns msgspec's message into a problem naming the field (docs/api.md
    `loc`), in plain words (`words.plain`); `kind` is the type decoded,
    whose enums' values the words list."""
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches any string
    msg = words.plain(match.group("msg"), kind, match.group("path") or "")
    path = (match.group("path") or "").removeprefix(".")
    named = _NAMED.match(match.group("msg"))
    if named:
        path = f"{path}.{named.group('name')}" if path else named.group("name")
    if isinstance(exc, msgspec.DecodeError) and not isinstance(exc, msgspec.ValidationError):
        path, msg = "", f"malformed body: {match.group('msg')}"
    loc = f"{prefix}.{path}" if prefix and path else (prefix or path)
    return errors.Invalid.at(loc, msg)


T = TypeVar("T")


def decoders(kind: type[T]) -> tuple[msgspec.json.Decoder[T], msgspec.msgpack.Decoder[T]]:
    return msgspec.json.Decoder(kind), msgspec.msgpack.Decoder(kind)


_whole_json = msgspec.json.Decoder(msgspec.Raw)
_whole_msgpack = msgspec.msgpack.Decoder(msgspec.Raw)


def malformed(body: bytes, is_msgpack: bool) -> errors.Invalid | None:
    """The problem of a body that is not one whole JSON (or MessagePack)
    value, or None. msgspec validates as it parses: a body cut short, or
    with bytes after its end, fails on the first unknown or mistyped field
    met before the parser reaches the damage, so a ValidationError says
    nothing of the body's syntax. Reading it as Raw checks the syntax only."""
    try:
        (_whole_msgpack if is_msgpack else _whole_json).decode(body)
    except msgspec.DecodeError as exc:
        return errors.Invalid.at("", f"malformed body: {exc}")
    except RecursionError:
        return errors.Invalid.at("", "the body is nested too deeply")
    return None


def decode(request: Request, pair: tuple[msgspec.json.Decoder[T], msgspec.msgpack.Decoder[T]]) -> T:
    decoder = pair[1 if request.is_msgpack else 0]
    try:
        return decoder.decode(request.body)
    except msgspec.ValidationError as exc:
        # A malformed body is malformed at `loc` "" whatever field the
        # parser met first (docs/api.md "General rules"); only a whole one has fields.
        raise (malformed(request.body, request.is_msgpack) or invalid_from_msgspec(exc, kind=decoder.type)) from None
    except msgspec.MsgspecError as exc:
        raise invalid_from_msgspec(exc, kind=decoder.type) from None
    except RecursionError:
        # msgspec raises this, not a MsgspecError, past its nesting depth.
        raise errors.Invalid.at("", "the body is nested too deeply") from None


def check_head(scope: HTTPScope) -> None:
    """hypercorn refuses a head over `h11_max_incomplete_size` only when it
    arrives in more than one read; this makes the bound exact."""
    size = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b""))
    size += sum(len(name) + len(value) + 4 for name, value in scope["headers"])
    if size > limits.header_bytes_max:
        raise errors.HeadersTooLarge(f"the request line and headers are over {limits.header_bytes_max} bytes")


# Headers that decide who asks, which job version a write is for, or how
# the body is framed and read: sent twice, a proxy in front may have checked
# one and tempo would read another (docs/api.md "Repeated headers"). h11
# refuses a second `Host` and differing `Content-Length` values, and merges
# identical ones, before tempo sees the head: those two are kept here in case
# the HTTP layer changes.
SINGLE_HEADERS = (b"authorization", b"content-type", b"content-length", b"host", b"if-match")


def check_repeated(raw_headers: Iterable[tuple[bytes, bytes]], headers: dict[bytes, bytes]) -> None:
    """Called when `headers`, the request's headers by name, is shorter than
    the list it came from: some name came more than once. One of
    SINGLE_HEADERS is `400` at `header.<name>`; a repeated `Accept` (a
    list, RFC 9110 section 12.5.1) is read as its values joined; any other
    keeps its last value, which nothing in tempo reads."""
    seen: dict[bytes, list[bytes]] = {}
    for name, value in raw_headers:
        seen.setdefault(name, []).append(value)
    for name in SINGLE_HEADERS:
        if len(seen.get(name, ())) > 1:
            header = name.decode()
            raise errors.Invalid.at(f"header.{header}", f"{header} was sent {len(seen[name])} times; send it once")
    accept = seen.get(b"accept", [])
    if len(accept) > 1:
        headers[b"accept"] = b", ".join(accept)


def _pairs(raw: bytes) -> list[tuple[str, str]]:
    try:
        return parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    except ValueError:
        raise errors.Invalid.at("query", "malformed query string") from None


def parse_query(raw: bytes) -> dict[str, str]:
    return dict(_pairs(raw))


def query_values(raw: bytes, name: str) -> list[str]:
    """Every value of the query parameter `name`, in order (`parse_query`
    keeps the last)."""
    return [value for key, value in _pairs(raw) if key == name]


def repeated_names(raw: bytes) -> Counter[str]:
    """The query parameters given more than once, and how often."""
    return Counter({name: n for name, n in Counter(key for key, _ in _pairs(raw)).items() if n > 1})


class BodyBudget:
    """The bytes of request bodies held at once, over all requests
    (limits.py "Request bodies in flight"). Bodies, not connections or
    requests, are what a few clients can use to fill memory: 16 batch
    bodies of 32 MiB are half a gigabyte before they are decoded."""

    def __init__(self, bytes_max: int):
        assert bytes_max >= 1, "bytes_max"
        self.bytes_max = bytes_max
        self.used_bytes = 0
        self.refused = 0  # requests answered 503 for want of budget

    def share(self) -> "BodyShare":
        return BodyShare(self)


class BodyShare:
    """One request's part of the budget, given back whole by `release`."""

    __slots__ = ("budget", "bytes")

    def __init__(self, budget: BodyBudget):
        self.budget = budget
        self.bytes = 0

    def grow_to(self, size_bytes: int) -> None:
        """Holds `size_bytes` in all, or raises `Overloaded` (503) and holds
        what it held before."""
        more = size_bytes - self.bytes
        if more <= 0:
            return
        budget = self.budget
        if budget.used_bytes + more > budget.bytes_max:
            budget.refused += 1
            raise errors.Overloaded(
                f"the request bodies this node holds are at its budget of {budget.bytes_max} bytes; retry shortly"
            )
        budget.used_bytes += more
        self.bytes = size_bytes

    def release(self) -> None:
        self.budget.used_bytes -= self.bytes
        self.bytes = 0
        assert self.budget.used_bytes >= 0, "a share given back twice"


def declared_length(headers: dict[bytes, bytes]) -> int | None:
    """The request's Content-Length, or None for a body without one
    (chunked). h11 has checked that it is all digits."""
    raw = headers.get(b"content-length")
    if raw is None or not raw.isdigit():
        return None
    # int() of a huge string is slow; 19 digits are past any bound here.
    return int(raw) if len(raw) <= 18 else 1 << 62


async def read_body(
    receive: ASGIReceiveCallable,
    limit_bytes: int,
    timeout_s: float = limits.body_read_timeout_s,
    *,
    share: BodyShare,
    declared_bytes: int | None = None,
) -> bytes:
    """The whole body, at most `limit_bytes` of it, arrived within `timeout_s`
    (hypercorn bounds only the gap between two reads, so a client sending a
    byte now and then would otherwise hold the request open for ever).

    `share` holds the body's bytes in the budget: all `declared_bytes`
    before the first byte is read, or, without a declared length, what has
    arrived so far. A declared length over `limit_bytes` (413) or over what
    the budget has left (503) is refused before the body is read."""
    deadline_s = trio.current_time() + timeout_s
    if declared_bytes is not None:
        try:
            if declared_bytes > limit_bytes:
                raise errors.TooLarge.at("", f"the body is over {limit_bytes} bytes")
            share.grow_to(declared_bytes)
        except (errors.TooLarge, errors.Overloaded):
            await discard_body(receive, declared_bytes, deadline_s)
            raise
    chunks: list[bytes] = []
    size = 0
    with trio.move_on_at(deadline_s):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise errors.Invalid.at("", "the client went away")
            assert message["type"] == "http.request", "an HTTP request receives its body or a disconnect"
            chunk = message.get("body", b"")
            size += len(chunk)
            more = message.get("more_body", False)
            try:
                if size > limit_bytes:
                    raise errors.TooLarge.at("", f"the body is over {limit_bytes} bytes")
                share.grow_to(size)
            except (errors.TooLarge, errors.Overloaded):
                if more:
                    await discard_body(receive, None, deadline_s)
                raise
            chunks.append(chunk)
            if not more:
                return b"".join(chunks)
    raise errors.RequestTimeout.at("", f"the body did not arrive within {timeout_s:g} s")


async def discard_body(receive: ASGIReceiveCallable, declared_bytes: int | None, deadline_s: float) -> None:
    """Reads the rest of a refused body and drops each chunk as it comes, so
    that the refusal reaches the client: a connection closed with bytes of
    the request still unread is reset by the kernel, and a client that sends
    its whole body before it reads (most do) gets the reset, not the answer.
    Nothing is held, so the budget is untouched. A body that says it is
    larger than `limits.refused_body_discard_bytes_max`, is still coming at
    `deadline_s`, or pauses for `limits.refused_body_discard_gap_s` (its
    client waits for the answer before it sends more) is left unread."""
    if declared_bytes is not None and declared_bytes > limits.refused_body_discard_bytes_max:
        return
    size = 0
    with trio.move_on_at(deadline_s):
        while size <= limits.refused_body_discard_bytes_max:
            with trio.move_on_after(limits.refused_body_discard_gap_s) as gap:
                message = await receive()
            if gap.cancelled_caught:
                return
            if message["type"] == "http.disconnect":
                return
            assert message["type"] == "http.request", "an HTTP request receives its body or a disconnect"
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return


async def send_response(send: ASGISendCallable, response: Response) -> None:
    await send_head(send, response)
    await send_body(send, response)


class Client:
    """The client of one request once its body has been read: `gone` says
    whether it has disconnected (ASGI `http.disconnect`), and `scope` is
    cancelled when it does, so that a wait inside it ends at once."""

    def __init__(self) -> None:
        self.gone = False
        self.scope = trio.CancelScope()

    async def watch(self, receive: ASGIReceiveCallable) -> None:
        # After a whole body, the next message is the disconnect. (hypercorn
        # also sends one when an answer is complete: `watching` stops
        # watching before the end of an answer is sent.)
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        self.scope.cancel()


@asynccontextmanager
async def watching(receive: ASGIReceiveCallable) -> AsyncIterator[Client]:
    """Watches the client while the block runs; once the block is left,
    `gone` is final: it tells whether the client went away before then."""
    client = Client()
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.watch, receive)
        try:
            yield client
        except BaseException as exc:  # noqa: BLE001 - raised again below
            # Raised as it is, below: out of the nursery it would come
            # wrapped in an exception group, which the error table misses.
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def send_head(send: ASGISendCallable, response: Response) -> None:
    headers = [(b"content-type", response.content_type), *response.headers]
    headers.append((b"content-length", str(len(response.body)).encode()))
    start: HTTPResponseStartEvent = {"type": "http.response.start", "status": response.status, "headers": headers}
    await send(start)


async def send_body(send: ASGISendCallable, response: Response) -> None:
    await send({"type": "http.response.body", "body": response.body, "more_body": False})
    response.sent = True
