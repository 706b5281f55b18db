"""The HTTP API of docs/api.md as an ASGI application: `Api` takes each
request, finds its route (net/routes.py), checks who asks and whether this
node answers, and hands it to the route's handler, a method of one of the
handler groups `Api` is made of (net/jobs_api.py, runs_api.py,
workers_api.py, events_api.py, calendar_api.py, operations_api.py,
metrics_api.py)."""

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import msgspec
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

from tempo import errors, ids, limits
from tempo import metrics as prom
from tempo.clock import Clock
from tempo.config import UNLIMITED, HttpLimits, OwnerLimits
from tempo.engine import Corrupt, Dispatcher, Jobs, Store, decode_entry
from tempo.net import auth as auth_module  # `auth` is also a parameter name below
from tempo.net import openapi
from tempo.net.asgi import (
    STATUS_OF,
    BodyBudget,
    BodyShare,
    Request,
    Response,
    check_head,
    check_repeated,
    declared_length,
    internal_response,
    new_error_id,
    parse_query,
    problem_response,
    query_values,
    read_body,
    repeated_names,
    send_response,
)
from tempo.net.auth import Authenticator
from tempo.net.calendar_api import CalendarHandlers
from tempo.net.events_api import EventHandlers
from tempo.net.handlers import no_fields
from tempo.net.http import GATE, ConnectionGate
from tempo.net.jobs_api import JobHandlers
from tempo.net.metrics_api import MetricsHandlers
from tempo.net.notify import NotifyCounts
from tempo.net.operations_api import OperationsHandlers
from tempo.net.peer import EntryCheck
from tempo.net.routes import ROUTES, Handler, Route, Router, bind
from tempo.net.runs_api import RunHandlers
from tempo.net.starts_api import StartsHandlers
from tempo.net.workers_api import WorkerHandlers
from tempo.node import ClusterMember, Standalone
from tempo.node.membership import Membership
from tempo.raft import Message
from tempo.rate import TokenBucket

log = logging.getLogger("tempo.http")
# Who may call each route, whether a follower answers it itself and the
# query parameters it takes are in its entry of net/routes.py. `stale` (a
# follower's read) is taken by every route, and read before those are
# checked (`_elsewhere`).
_json_enc = msgspec.json.Encoder()


class Api(
    JobHandlers,
    RunHandlers,
    WorkerHandlers,
    EventHandlers,
    OperationsHandlers,
    MetricsHandlers,
    CalendarHandlers,
    StartsHandlers,
):
    """Routes requests to the services; owns no state but counters."""

    def __init__(
        self,
        store: Store,
        jobs: Jobs,
        dispatcher: Dispatcher,
        *,
        node: Standalone | ClusterMember,
        auth: Authenticator | None = None,
        on_peer_messages: Callable[[list[Message]], None] | None = None,
        peer_token: str | None = None,
        membership: Membership | None = None,
        limits_of: Callable[[str], OwnerLimits] = lambda owner: UNLIMITED,
        http_limits: HttpLimits | None = None,
        gate: ConnectionGate = GATE,
        clock: Clock | None = None,
    ):
        self.auth = auth or Authenticator(())
        # The node's clock, for its steps and lead in /metrics.
        self.clock = clock
        self.store = store
        self.jobs = jobs
        self.dispatcher = dispatcher
        self.node = node
        # False until the server listens and its services run.
        self.started = False
        self.on_peer_messages = on_peer_messages
        # Adds and removes voters (node/membership.py); None on a single node.
        self.membership = membership
        self.peer_auth = auth_module.PeerAuth(peer_token)
        self.requests: Counter[tuple[str, int]] = Counter()
        # Each owner's job creations per second (config.py): soft state of
        # the node that answers writes, the leader, never replicated.
        self.limits_of = limits_of
        self.create_buckets: dict[str, TokenBucket] = {}
        self.rate_limited: Counter[str] = Counter()  # creates refused, by owner
        # Cancels answered, by what they did: `cancelled` (a waiting run),
        # `requested` (a claimed run asked to stop).
        self.cancels: Counter[str] = Counter()
        self.edge = http_limits or HttpLimits()
        self.gate = gate  # connections: counted by net/http.py, shown in /metrics
        self.in_flight = 0
        self.long_polls = 0
        self.internal_errors = 0  # 500s: errors no handler expected
        self.notify_counts: NotifyCounts | None = None  # set when the config has [notify]
        self.bodies = BodyBudget(self.edge.body_bytes_in_flight_max)
        # Seconds from the request's arrival to its answer sent, by route.
        self.durations: dict[str, prom.Histogram] = {}
        # Corrupt raft frames from peers, dropped unread (net/peer.py).
        self.peer_frames_dropped = 0
        # The leader's entries this node could not decode (net/peer.py).
        self.entry_check = EntryCheck(_entry_problem)
        # Event-loop lag and GC pauses, observed by server.py.
        self.pauses = prom.Pauses()
        self.previews_computing = trio.CapacityLimiter(limits.previews_computing_max)
        document = openapi.document()
        self.openapi_body = _json_enc.encode(document)
        self.openapi_msgpack = msgspec.msgpack.encode(document)
        self.router = Router(bind(ROUTES, self))
        # Shutdown (server.py): once `stopping`, long polls do not wait and
        # are answered empty with a retry hint; once the peer streams are
        # closed, no new one is taken. Client requests in flight carry a
        # number each, so the server can wait for those begun before a mark.
        self.stopping = False
        self._waits: set[trio.CancelScope] = set()
        self._peer_streams: set[trio.CancelScope] = set()
        self._peer_streams_closed = False
        self._requests_begun = 0
        self._requests_open: set[int] = set()

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        assert scope["type"] == "http"
        path = scope["path"]
        request = Request(
            method=scope["method"],
            path=path,
            query={},
            headers=dict(scope["headers"]),
            receive=receive,
            send=send,
        )
        route = "unknown"
        started = trio.current_time()
        bounded = False
        # The body's part of the budget, held until the answer is sent: what
        # the body decodes to, and an answer built from it, live that long.
        share = self.bodies.share()
        try:
            try:
                check_head(scope)
                raw_headers = scope["headers"]
                if not isinstance(raw_headers, list) or len(request.headers) != len(raw_headers):
                    check_repeated(raw_headers, request.headers)
                request.raw_query = scope.get("query_string", b"")
                request.query = parse_query(request.raw_query)
                entry, handler, args = self.router.find(request.method, path)
                route = entry.name
                if entry.bounded:
                    if self.in_flight >= self.edge.requests_in_flight_max:
                        raise errors.Overloaded("too many requests in flight; retry shortly")
                    self.in_flight += 1
                    bounded = True
                    seq = self._requests_begun
                    self._requests_begun += 1
                    self._requests_open.add(seq)
                response = await self._handle(entry, handler, args, request, scope, receive, share)
            except Exception as exc:  # noqa: BLE001 - every error is answered (docs/api.md "Errors")
                response = self._error_response(route, request, exc)
            self.requests[(route, response.status)] += 1
            if not response.sent:
                await send_response(send, response)
        finally:
            share.release()
            if bounded:
                self.in_flight -= 1
                self._requests_open.discard(seq)
        histogram = self.durations.get(route)
        if histogram is None:
            histogram = self.durations[route] = prom.Histogram()
        histogram.observe(trio.current_time() - started)

    def _error_response(self, route: str, request: Request, exc: Exception) -> Response:
        """A TempoError's problem; any other error (a bug, or damaged data
        read back) is logged once with its traceback under a fresh
        `error_id`, counted, and answered 500 problem+json naming that ID."""
        if isinstance(exc, errors.TempoError) and type(exc) in STATUS_OF:
            return problem_response(exc)
        error_id = new_error_id()
        self.internal_errors += 1
        log.error(
            "unexpected error answering %s %r (route %s), error_id %s",
            request.method, request.path, route, error_id,
            exc_info=exc, extra={"error_id": error_id, "route": route},
        )
        return internal_response(error_id)

    async def _handle(
        self, route: Route, handler: Handler, args: tuple[str, ...], request: Request, scope: HTTPScope,
        receive: ASGIReceiveCallable, share: BodyShare,
    ) -> Response:
        if route.name == "raft":
            # A peer's stream is outside the body budget, as it is outside
            # `requests_in_flight_max`: replication never waits behind
            # clients. Its frames are bounded by `peer_frame_bytes_max`.
            return await self.raft(request, receive)
        request.principal = self.auth.check(route.needs, request.headers.get(b"authorization"))
        if "stale" in request.query:
            # Checked before a follower redirects: `stale=1` must not pass on
            # one node and be refused by the next (docs/api.md "General rules").
            _check_stale(request)
        stale = request.method == "GET" and request.query.get("stale") == "true" and not route.local
        response = self._elsewhere(route, request, scope)
        if response is None:
            limit = limits.batch_body_bytes_max if request.path == "/v1/jobs/batch" else limits.body_bytes_max
            request.body = await read_body(
                receive, limit, self.edge.body_read_timeout_s,
                share=share, declared_bytes=declared_length(request.headers),
            )
            _check_query(route, request)
            if route.body is None and request.method != "GET":
                # A write the route table gives no body takes none: `{}`
                # at most (docs/api.md "General rules").
                no_fields(request)
            if stale:
                # Answered from what this node applied, which may lag the
                # leader; the header says how far it got (docs/semantics.md "Reads").
                applied = str(self.node.applied_index()).encode()
                try:
                    response = await handler(request, *args)
                except Exception as exc:  # noqa: BLE001 - a stale 404 says how fresh it is, as a 200 does
                    response = self._error_response(route.name, request, exc)
                response.headers.append((b"tempo-applied-index", applied))
            else:
                if request.method == "GET" and not route.local:
                    # Linearizable by default: the leader confirms it still
                    # leads before it answers (docs/semantics.md "Reads").
                    await self.node.confirm_read()
                response = await handler(request, *args)
        return response

    @contextmanager
    def _long_poll(self, wait_s: float) -> Iterator[None]:
        """A slot among `long_polls_max` for a request that may wait; none
        is needed (nor counted) when it will not."""
        if wait_s <= 0:
            yield
            return
        if self.long_polls >= self.edge.long_polls_max:
            raise errors.Overloaded("too many long polls waiting; retry shortly")
        self.long_polls += 1
        # Cancelled when the node starts stopping: the wait ends at once.
        scope = trio.CancelScope()
        if self.stopping:
            scope.cancel()
        self._waits.add(scope)
        try:
            with scope:
                yield
        finally:
            self._waits.discard(scope)
            self.long_polls -= 1

    # -- shutdown (server.py) ------------------------------------------------------

    def answer_long_polls(self) -> int:
        """The node is stopping: every long poll waiting ends its wait and is
        answered empty, with `retry-after`, and later ones do not wait.
        Returns how many were waiting."""
        self.stopping = True
        for scope in self._waits:
            scope.cancel()
        return len(self._waits)

    async def finish_requests(self, deadline_s: float) -> tuple[int, int]:
        """Waits until the client requests in flight now are answered, or
        until `deadline_s` (trio time): (how many were, how many still are)."""
        mark = self._requests_begun
        waited = len(self._requests_open)
        with trio.move_on_at(deadline_s):
            while min(self._requests_open, default=mark) < mark:
                await trio.sleep(limits.shutdown_poll_s)
        return waited, sum(1 for seq in self._requests_open if seq < mark)

    def close_peer_streams(self) -> int:
        """Ends the peers' replication streams into this node, and refuses
        new ones, so the HTTP server does not wait for them to end. Returns
        how many were open."""
        self._peer_streams_closed = True
        for scope in self._peer_streams:
            scope.cancel()
        return len(self._peer_streams)

    def _retry_hint(self, response: Response) -> Response:
        """An empty long poll answered because the node stops: ask the
        client to come back (to this node's successor) a moment later."""
        if self.stopping:
            response.headers.append((b"retry-after", str(limits.shutdown_retry_after_s).encode()))
        return response

    def _elsewhere(self, route: Route, request: Request, scope: HTTPScope) -> Response | None:
        """The answer of a node that may not serve `route` itself: a redirect
        to the leader, or 503 while none is known (docs/api.md "General rules")."""
        stale = request.query.pop("stale", None)
        if route.local or self.node.serves():
            return None
        if stale == "true" and request.method == "GET":
            return None
        leader_url = self.node.redirect_url()
        if leader_url is None:
            raise errors.NoQuorum("no leader is known; retry shortly")
        location = leader_url + scope.get("raw_path", request.path.encode()).decode("latin-1")
        query = scope.get("query_string", b"")
        if query:
            location += "?" + query.decode("latin-1")
        problem = errors.NotLeader(f"this node is not the leader; ask {leader_url}")
        return problem_response(problem, [(b"location", location.encode())], status=307)

    def route(self, request: Request) -> tuple[Route, Handler, tuple[str, ...]]:
        """The route of `request` (net/routes.py), its handler and the path's parameters."""
        return self.router.find(request.method, request.path)

    # -- who acts ---------------------------------------------------------------

    def owner(self, request: Request) -> str:
        return request.principal.owner  # `default` when auth is off

    def _sees_all(self, request: Request) -> bool:
        """An admin token does everything but claim (docs/operations.md
        "Tokens"): every owner's jobs and runs are its to list, read and act on."""
        return self.auth.enabled and request.principal.role == "admin"

    def _owner_of_job(self, request: Request, job_id: str) -> str:
        """The owner a request about job `job_id` acts as: the token's own,
        or for an admin the job's owner, whoever that is (its own when no
        such job exists, which answers 404 as for anyone)."""
        if not self._sees_all(request):
            return self.owner(request)
        job = self.store.get_job_any(job_id)
        return self.owner(request) if job is None else job.owner

    def _owner_of_run(self, request: Request, run_id: str) -> str:
        if not self._sees_all(request):
            return self.owner(request)
        parsed = ids.parse_run_id(run_id)
        return self.owner(request) if parsed is None else self._owner_of_job(request, parsed[0])

    def _may_touch(self, request: Request, run_id: str) -> bool:
        """A worker token touches only runs of its owner's listed queues."""
        queues = request.principal.queues
        if queues is None:
            return True
        parsed = ids.parse_run_id(run_id)
        job = None if parsed is None else self.store.get_job_any(parsed[0])
        return job is not None and job.target.startswith("queue:") and job.target[6:] in queues



def _entry_problem(data: bytes) -> str | None:
    """Why a replicated entry's data would not apply, or None (peer frames)."""
    try:
        decode_entry(data)
    except Corrupt as exc:
        return str(exc)
    return None


def _check_stale(request: Request) -> None:
    """`stale` has one value, `true`: any other (`1`, empty, `false`) is
    refused rather than read as absent, which would answer a client that
    asked for a local read with a redirect or a leader's round instead."""
    if any(value != "true" for value in query_values(request.raw_query, "stale")):
        raise errors.Invalid.at("query.stale", "the only value is `true`; leave it out for a linearizable read")


# Query parameters a request may give more than once: `label` is a list
# (docs/api.md "List jobs"), and `stale` has one value however often given.
_LISTS = frozenset({"label", "stale"})


def _check_query(route: Route, request: Request) -> None:
    """Refuses a query parameter the route does not take (its `query` in
    net/routes.py): a filter that does not exist must not answer as if it
    had matched everything. One given twice that is no list is refused
    too: which of the two counts would be a guess."""
    raw = request.raw_query
    if raw and raw.count(b"&") >= len(request.query):  # fewer names than parts: one came twice (or a part was empty)
        for name, count in repeated_names(raw).items():
            if name not in _LISTS:
                raise errors.Invalid.at(f"query.{name}", f"given {count} times; give it once")
    takes = route.query
    for name in request.query:
        if name not in takes:
            if takes:
                raise errors.Invalid.at(f"query.{name}", f"not a parameter of this path; it takes {', '.join(sorted(takes))}")
            raise errors.Invalid.at(f"query.{name}", "not a parameter of this path; it takes none")



async def _lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
