"""What the handler groups of `net/api.py`'s `Api` share: the part of
`Api` they read (set up by `Api.__init__`, or its methods), and the
query parameters more than one group takes. Each group is a class of its
own module, mixed into `Api`; the route table (net/routes.py) names each
route's handler, a method of one of them."""

from collections.abc import Callable
from contextlib import AbstractContextManager

from tempo import errors, limits
from tempo.engine import Dispatcher, Jobs, Store
from tempo.net.asgi import Request, Response, decode, decoders
from tempo.schema import NoFieldsIn

_no_fields = decoders(NoFieldsIn)


class Handlers:
    """The services and `Api`'s helpers a handler group uses."""

    store: Store
    jobs: Jobs
    dispatcher: Dispatcher
    # `Api`'s: who acts (auth off: `default`), and what it may see and touch.
    owner: Callable[[Request], str]
    _sees_all: Callable[[Request], bool]
    _owner_of_job: Callable[[Request, str], str]
    _owner_of_run: Callable[[Request, str], str]
    _may_touch: Callable[[Request, str], bool]
    # `Api`'s long-poll plumbing: a slot to wait in, and the hint of an
    # empty answer given because the node stops.
    _long_poll: Callable[[float], AbstractContextManager[None]]
    _retry_hint: Callable[[Response], Response]


def no_fields(request: Request) -> None:
    """The body of an endpoint that takes no fields is empty or `{}` (in
    JSON or MessagePack): anything in it is `400` at what was sent, before
    anything is done (docs/api.md "General rules": unknown fields are
    rejected, not ignored)."""
    if request.body:
        decode(request, _no_fields)


def is_decimal(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes "²" and other digits
    that int() refuses."""
    return text.isascii() and text.isdigit()


def page_limit(request: Request) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return limits.page_limit_default
    # The length check first: int() refuses strings of over 4300 digits.
    if not is_decimal(raw) or len(raw) > 4 or not 1 <= int(raw) <= limits.page_limit_max:
        raise errors.Invalid.at("query.limit", f"an integer from 1 to {limits.page_limit_max}")
    return int(raw)

