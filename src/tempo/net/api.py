"""The HTTP API of docs/api.md as an ASGI application."""

import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

import msgspec
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope
from msgspec import Meta

from tempo import clock, errors, ids, limits
from tempo import metrics as prom
from tempo.clock import Clock
from tempo.config import UNLIMITED, HttpLimits, OwnerLimits
from tempo.engine import (
    ORDER_TAIL_BYTES,
    STATUS_CODE,
    STATUSES,
    ClaimedRun,
    ClaimKey,
    Corrupt,
    Created,
    Dispatcher,
    Event,
    Job,
    Jobs,
    Result,
    Run,
    RunCancel,
    Store,
    check_json_value,
    check_label_key,
    decode_entry,
    preview_occurrences,
    queues_hash,
)
from tempo.net import auth as auth_module  # `auth` is also a parameter name below
from tempo.net import openapi, views
from tempo.net.asgi import (
    STATUS_OF,
    BodyBudget,
    BodyShare,
    Request,
    Response,
    check_head,
    check_repeated,
    declared_length,
    decode,
    decoders,
    encode,
    internal_response,
    invalid_from_msgspec,
    new_error_id,
    parse_query,
    problem_of,
    problem_response,
    query_values,
    read_body,
    send_body,
    send_head,
    send_response,
    watching,
)
from tempo.net.auth import Authenticator
from tempo.net.calendar_api import CalendarHandlers, preview_calendar
from tempo.net.http import GATE, ConnectionGate
from tempo.net.metrics_api import MetricsHandlers
from tempo.net.notify import NotifyCounts
from tempo.net.peer import EntryCheck, FrameReader
from tempo.net.routes import ROUTES, Handler, Route, Router, bind
from tempo.net.starts_api import StartsHandlers
from tempo.node import ClusterMember, Standalone
from tempo.node.membership import Membership
from tempo.raft import Message
from tempo.rate import TokenBucket
from tempo.schema import (
    BackfillIn,
    BackfillOut,
    BatchAck,
    BatchItemResult,
    CancelIn,
    ClaimIn,
    ClaimOut,
    ClusterNode,
    ClusterOut,
    DigestOut,
    EventOut,
    EventsPage,
    GraphEdgeOut,
    GraphOut,
    Health,
    HeartbeatIn,
    HeartbeatOut,
    HeartbeatsAck,
    HeartbeatsIn,
    Instant,
    JobBatchCreate,
    JobBatchResult,
    JobCounts,
    JobCreate,
    JobsPage,
    NodeIn,
    PauseIn,
    PreviewIn,
    PreviewOut,
    Rejected,
    ResultIn,
    ResultsIn,
    RunCalendarOut,
    RunOut,
    RunsPage,
    SignalsIn,
    SignalsOut,
)

log = logging.getLogger("tempo.http")
# Who may call each route, whether a follower answers it itself and the
# query parameters it takes are in its entry of net/routes.py. `stale` (a
# follower's read) is taken by every route, and read before those are
# checked (`_elsewhere`).
_create = decoders(JobCreate)
_batch = decoders(JobBatchCreate)


class _JobBatchTyped(msgspec.Struct, forbid_unknown_fields=True):
    """`JobBatchCreate` with its items decoded: the fast path of a batch with
    no bad item, which decodes to exactly what the item-by-item path does."""

    jobs: Annotated[list[JobCreate], Meta(min_length=1, max_length=limits.batch_jobs_max)]


_batch_typed = decoders(_JobBatchTyped)


class _KeyOnly(msgspec.Struct):
    """A batch item the decoder rejected, read again for its request key
    alone (its other fields, known or not, are skipped)."""

    request_key: str | None = None


_key_only = decoders(_KeyOnly)
_preview = decoders(PreviewIn)
_backfill = decoders(BackfillIn)
_pause = decoders(PauseIn)
_node_in = decoders(NodeIn)
_claim = decoders(ClaimIn)
_heartbeat = decoders(HeartbeatIn)
_heartbeats = decoders(HeartbeatsIn)
_signals = decoders(SignalsIn)
_result = decoders(ResultIn)
_results = decoders(ResultsIn)
_json_enc = msgspec.json.Encoder()
_instant = msgspec.json.Decoder(Instant)


class Api(MetricsHandlers, CalendarHandlers, StartsHandlers):
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
        self.openapi_body = _json_enc.encode(openapi.document())
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

    # -- jobs ----------------------------------------------------------------

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

    def _check_creates(self, owner: str, count: int) -> None:
        """Spends `count` of the owner's create tokens, or refuses the whole
        request with 429 before anything is proposed. A request needs as many
        tokens as it has items, or a full bucket when it has more items than
        the bucket holds; the debt it leaves is paid off before the next fits."""
        owner_limits = self.limits_of(owner)
        if owner_limits.creates_per_s is None:
            return
        now_ms = clock.monotonic_ms()  # a rate: a duration, not an instant
        bucket = self.create_buckets.get(owner)
        if bucket is None:
            assert owner_limits.create_burst is not None
            bucket = TokenBucket(owner_limits.creates_per_s, owner_limits.create_burst, now_ms)
            self.create_buckets[owner] = bucket
        wait_ms = bucket.wait_ms(now_ms, count)
        if wait_ms > 0:
            self.rate_limited[owner] += 1
            retry_after_s = max(1, -(-wait_ms // 1000))
            raise errors.RateLimited(
                f"owner {owner} may create {owner_limits.creates_per_s:g} jobs a second "
                f"(bursts of {owner_limits.create_burst}); retry in {retry_after_s} s",
                retry_after_s,
            )
        bucket.take(now_ms, count)

    async def create_job(self, request: Request) -> Response:
        body = decode(request, _create)
        self._check_creates(self.owner(request), 1)
        [outcome] = await self.jobs.create(self.owner(request), [body], from_msgpack=request.is_msgpack)
        if isinstance(outcome, errors.TempoError):
            raise outcome
        if outcome.new:
            return _tagged(encode(request, self.job_view(outcome.job), 201), outcome.job.version)
        # An existing job: with its outcome.
        return _tagged(encode(request, self.job_view(outcome.job), 200), outcome.job.version)

    async def create_batch(self, request: Request) -> Response:
        items: Sequence[JobCreate | errors.TempoError] | None = _decode_batch_at_once(request)
        rejected_keys_of: dict[int, str] = {}
        if items is None:
            items, rejected_keys_of = self._decode_batch_items(request)
        self._check_creates(self.owner(request), len(items))
        outcomes = await self.jobs.create(
            self.owner(request), items, from_msgpack=request.is_msgpack, rejected_keys_of=rejected_keys_of
        )
        shared: dict[Any, Any] = {}
        # The edges of the items that name some (docs/semantics.md "Dependencies"), read only then.
        edges = self.store.deps_views([o.job.id for o in outcomes if isinstance(o, Created)]) if any(
            not isinstance(i, errors.TempoError) and (i.schedule.after or i.schedule.requires) for i in items
        ) else {}
        # Their calendars likewise (docs/semantics.md "Calendars"): a view as a single create's.
        named = any(not isinstance(i, errors.TempoError) and i.schedule.calendar for i in items)
        results = []
        for start in range(0, len(outcomes), limits.batch_slice_items):
            if start:
                await trio.lowlevel.checkpoint()  # the views in slices: docs/operations.md "Event-loop lag"
            results += [
                self._batch_item(o, shared, edges, named) for o in outcomes[start : start + limits.batch_slice_items]
            ]
        return encode(request, JobBatchResult(results))

    def _batch_item(
        self, outcome: Created | errors.TempoError, shared: dict[Any, Any], edges: dict[str, Any], calendars: bool
    ) -> BatchItemResult:
        if isinstance(outcome, errors.TempoError):
            problem = problem_of(outcome)
            return BatchItemResult(problem.status, problem=problem)
        job = outcome.job
        use = self.store.calendar_use(job.id) if calendars else None
        view = views.job_view(job, shared, calendar=use, next_run_ms=self._next_run(job, use))
        return BatchItemResult(201 if outcome.new else 200, job=views.with_deps(view, edges.get(job.id)))

    def _decode_batch_items(self, request: Request) -> tuple[list[JobCreate | errors.TempoError], dict[int, str]]:
        """Item by item, so each item's problem names paths inside that item;
        and the request key of each item the decoder rejected, by its place,
        so a later item with that key gets its answer (docs/api.md "POST
        /v1/jobs/batch")."""
        batch = decode(request, _batch)
        which = 1 if request.is_msgpack else 0
        decoder = _create[which]
        items: list[JobCreate | errors.TempoError] = []
        rejected_keys_of: dict[int, str] = {}
        for i, raw in enumerate(batch.jobs):
            try:
                items.append(decoder.decode(raw))
                continue
            except msgspec.MsgspecError as exc:
                items.append(invalid_from_msgspec(exc, kind=decoder.type))
            except RecursionError:
                items.append(errors.Invalid.at("", "the item is nested too deeply"))
            key = _rejected_key(raw, which)
            if key is not None:
                rejected_keys_of[i] = key
        return items, rejected_keys_of

    def job_view(self, job: Any) -> Any:
        """The job with what its runs came to (docs/api.md "Outcomes")."""
        use = self.store.calendar_use(job.id)
        view = views.job_view(job, outcome=self.store.job_outcome(job.id), calendar=use, next_run_ms=self._next_run(job, use))
        return views.with_deps(view, self.store.deps_views([job.id]).get(job.id))

    def _next_run(self, job: Job, use: object) -> int | None:
        """`next_run_at`: with a calendar, when the next run happens under
        it as it is now (docs/semantics.md "Calendars")."""
        return job.next_run_at_ms if use is None else self.jobs.calendars.next_run_ms(job, self.jobs.now_ms())

    @staticmethod
    def if_match(request: Request, of: str = "job") -> set[int] | None:
        return _if_match(request, of)

    def _job_answer(self, request: Request, job: Job) -> Response:
        """A job's answer, with its version as the ETag."""
        return _tagged(encode(request, self.job_view(job)), job.version)

    async def get_job(self, request: Request, job_id: str) -> Response:
        return self._job_answer(request, self.store.get_job(self._owner_of_job(request, job_id), job_id))

    async def patch_job(self, request: Request, job_id: str) -> Response:
        """A JSON merge patch (RFC 7396) of the job's mutable fields
        (docs/api.md "Change a job")."""
        owner = self._owner_of_job(request, job_id)
        patch = decode(request, _patch_body)
        for name in patch:
            if name not in _PATCHABLE:
                raise errors.Invalid.at(name, _FIXED_WHY.get(name, "unknown field"))
        if request.is_msgpack:
            # The merged body is read back as JSON, which would spell a
            # binary value as a base64 string.
            for name in ("payload", "labels", "notify"):
                if name in patch:
                    check_json_value(patch[name], name)
        wanted = _if_match(request)
        for _ in range(limits.patch_tries_max):
            job = self.store.get_job(owner, job_id)
            if wanted is not None and job.version not in wanted:
                raise errors.VersionMismatch(f"job {job_id} is at version {job.version}")
            body = _patched(self.job_view(job), patch)
            try:
                changed = await self.jobs.patch(
                    job, body, from_msgpack=request.is_msgpack, keep_notify="notify" not in patch
                )
            except errors.VersionMismatch:
                if wanted is not None:
                    raise
                continue  # changed since it was read: merged again onto the new version
            return self._job_answer(request, changed)
        raise errors.Conflict(f"job {job_id} kept changing while this patch was applied: send it again")

    async def list_jobs(self, request: Request) -> Response:
        limit = _limit(request)
        cursor = request.query.get("cursor") or None
        if cursor is not None and not ids.is_job_id(cursor):
            raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
        match = _job_filter(request)
        labels = _label_filter(request)
        if self._sees_all(request):
            found, next_cursor = self.store.list_all_jobs(limit, cursor, match, labels)
        else:
            found, next_cursor = self.store.list_jobs(self.owner(request), limit, cursor, match, labels)
        outcomes = self.store.job_outcomes([j.id for j in found])
        shared: dict[Any, Any] = {}
        edges = self.store.deps_views([j.id for j in found])
        page = []
        for j in found:
            use = self.store.calendar_use(j.id)
            view = views.job_view(j, shared, outcomes.get(j.id), use, next_run_ms=self._next_run(j, use))
            page.append(views.with_deps(view, edges.get(j.id)))
        return encode(request, JobsPage(page, next_cursor))

    async def pause_job(self, request: Request, job_id: str) -> Response:
        """`POST /v1/jobs/{id}/pause`, its body optional: `{"note": ...}`.
        The job keeps who paused it (the token's owner and role)."""
        note = decode(request, _pause).note if request.body else None
        principal = request.principal
        job = await self.jobs.pause(
            self._owner_of_job(request, job_id), job_id, by=(principal.owner, principal.role), note=note
        )
        return self._job_answer(request, job)

    async def resume_job(self, request: Request, job_id: str) -> Response:
        return self._job_answer(request, await self.jobs.resume(self._owner_of_job(request, job_id), job_id))

    async def delete_job(self, request: Request, job_id: str) -> Response:
        await self.jobs.delete(self._owner_of_job(request, job_id), job_id)
        return Response(204, b"", request_content_type(request))

    async def trigger_job(self, request: Request, job_id: str) -> Response:
        run = await self.jobs.trigger(self._owner_of_job(request, job_id), job_id)
        return encode(request, views.run_view(run), 201)

    async def backfill_job(self, request: Request, job_id: str) -> Response:
        body = decode(request, _backfill)
        created, existing = await self.jobs.backfill(self._owner_of_job(request, job_id), job_id, body)
        return encode(request, BackfillOut(created, existing))

    # -- runs ------------------------------------------------------------------

    async def list_runs(self, request: Request, job_id: str) -> Response:
        limit = _limit(request)
        since_ms = _instant_param(request, "since")
        until_ms = _instant_param(request, "until")
        cursor = request.query.get("cursor") or None
        cursor_ms = None
        if cursor is not None:
            if not _decimal(cursor) or len(cursor) > 16:
                raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
            cursor_ms = int(cursor)
        found, next_ms = self.store.list_runs(
            self._owner_of_job(request, job_id), job_id, since_ms=since_ms, until_ms=until_ms, limit=limit, cursor_ms=cursor_ms
        )
        next_cursor = None if next_ms is None else str(next_ms)
        return encode(request, RunsPage([self.run_view(r) for r in found], next_cursor))

    async def cancel_run(self, request: Request, run_id: str) -> Response:
        """`POST /v1/runs/{id}/cancel` (docs/api.md "Cancel a run"): the job
        owner's (an admin's for every owner); answers the run as it is now."""
        if request.body:
            decode(request, _no_body)
        run = await self.jobs.cancel_run(self._owner_of_run(request, run_id), run_id)
        self.cancels["requested" if run.status == "claimed" else "cancelled"] += 1
        return encode(request, views.run_detail_view(run, self.run_view(run)))

    async def get_run(self, request: Request, run_id: str) -> Response:
        run, _ = self.store.get_run(self._owner_of_run(request, run_id), run_id)
        detail = views.run_detail_view(run, self.run_view(run))
        if run.triggered:  # a dependent job's runs are made as triggered ones are
            detail.caused_by = views.cause_views(self.store.caused_by(run.job_id, run.nominal_ms))
        return encode(request, detail)

    async def job_graph(self, request: Request, job_id: str) -> Response:
        """`GET /v1/jobs/{id}/graph?depth=N` (docs/api.md): the edges up and
        down from the job, `depth` steps each way."""
        raw = request.query.get("depth", str(limits.deps_graph_depth_default))
        if not _decimal(raw) or not 1 <= int(raw) <= limits.deps_graph_depth_max:
            raise errors.Invalid.at("query.depth", f"an integer from 1 to {limits.deps_graph_depth_max}")
        depth = int(raw)
        up, down, cut = self.store.deps_graph(self._owner_of_job(request, job_id), job_id, depth)
        return encode(request, GraphOut(
            job_id, depth, [GraphEdgeOut(p, c) for p, c in up], [GraphEdgeOut(p, c) for p, c in down], cut
        ))

    async def list_all_runs(self, request: Request) -> Response:
        """Runs across the owner's jobs (an admin's: every owner's), from
        the runs-by-status index (docs/api.md "GET /v1/runs")."""
        limit = _limit(request)
        status = request.query.get("status")
        if status is not None and status not in STATUS_CODE:
            raise errors.Invalid.at("query.status", f"one of {', '.join(STATUSES)}")
        since_ms = _instant_param(request, "since")
        until_ms = _instant_param(request, "until")
        raw_cursor = request.query.get("cursor") or None
        cursor = None
        if raw_cursor is not None:
            try:
                cursor = bytes.fromhex(raw_cursor)
            except ValueError:
                cursor = None
            if cursor is None or len(cursor) != ORDER_TAIL_BYTES:
                raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
        owner = None if self._sees_all(request) else self.owner(request)
        found, next_tail = self.store.list_owner_runs(
            owner, status=status, limit=limit, cursor=cursor, since_ms=since_ms, until_ms=until_ms
        )
        next_cursor = None if next_tail is None else next_tail.hex()
        return encode(request, RunsPage([self.run_view(r) for r in found], next_cursor))

    def run_view(self, run: Run) -> RunOut:
        """The stored run, with the lease as heartbeats extended it in memory."""
        view = views.run_view(run)
        if run.status == "waiting" and self.store.has_calendar(run.job_id):
            view.calendar = self._calendar_note(run)
        if run.status == "claimed":
            lease_ms = self.dispatcher.lease_of(run.job_id, run.nominal_ms, run.attempt)
            if lease_ms is not None:
                view.lease_expires_at = clock.iso_from_ms(lease_ms)
        return view

    def _calendar_note(self, run: Run) -> RunCalendarOut | msgspec.UnsetType:
        """What the job's calendar will do with the waiting run at its
        claim (docs/semantics.md "Calendars"); unset: it runs where it waits."""
        job = self.store.get_job_any(run.job_id)
        note = None if job is None else self.jobs.calendars.claim_note(job, run, self.jobs.now_ms())
        if note is None:
            return msgspec.UNSET
        action, at_ms, why = note
        assert action in ("skip", "move")
        return RunCalendarOut("skip" if action == "skip" else "move", why, None if at_ms is None else clock.iso_from_ms(at_ms))

    # -- workers -----------------------------------------------------------------

    def _queues(self, request: Request, names: list[str]) -> list[str]:
        return [f"{self.owner(request)}\x00{name}" for name in names]

    async def claim(self, request: Request) -> Response:
        body = decode(request, _claim)
        allowed = request.principal.queues
        if allowed is not None and not set(body.queues) <= allowed:
            raise errors.Forbidden(f"this token may claim only from {sorted(allowed)}")
        # A queue named twice counts once (the dispatcher takes distinct queues).
        queues = self._queues(request, list(dict.fromkeys(body.queues)))
        key = None
        if body.claim_key is not None:
            # A pattern's `$` also matches before a final newline.
            if body.claim_key.endswith("\n"):
                raise errors.Invalid.at("claim_key", "must not end with a newline")
            key = ClaimKey(self.owner(request), body.claim_key, queues_hash(body.queues))
        claimed: list[ClaimedRun] = []
        # A claim follows its client (docs/api.md "Claims and disconnects"):
        # one that leaves while the claim waits ends the wait and takes
        # nothing; one that leaves before the answer's head is sent gets
        # nothing sent, and the runs claimed for it go back to waiting.
        async with watching(request.receive) as client:
            with self._long_poll(body.wait_s), client.scope:
                # Lets a disconnect already queued be seen before runs are taken.
                await trio.lowlevel.checkpoint()
                claimed = await self.dispatcher.claim(queues, body.worker, body.max_runs, body.wait_s, key, body.ahead_ms)
            claimed_views = []
            for start in range(0, len(claimed), limits.batch_slice_items):
                if start:
                    # The views in slices (docs/operations.md "Event-loop
                    # lag"); not a point of cancellation: the runs are claimed.
                    await trio.lowlevel.cancel_shielded_checkpoint()
                claimed_views += [
                    views.claimed_view(c.run, c.job) for c in claimed[start : start + limits.batch_slice_items]
                ]
            response = encode(request, ClaimOut(claimed_views, self.server_time(body.ahead_ms)))
            if not claimed:
                self._retry_hint(response)
            if not client.gone:
                await send_head(request.send, response)
        if client.gone:
            self.dispatcher.release(claimed)
            response.sent = True  # to nobody: the client has gone
        else:
            await send_body(request.send, response)
        return response

    async def heartbeat(self, request: Request, run_id: str) -> Response:
        body = decode(request, _heartbeat)
        if not self._may_touch(request, run_id):
            raise errors.NotFound(f"no run {run_id}")
        expires_ms, cancel = self.dispatcher.beat(self.owner(request), run_id, body.attempt)
        return encode(request, HeartbeatOut(clock.iso_or_none(expires_ms), cancel))

    async def heartbeats(self, request: Request) -> Response:
        body = decode(request, _heartbeats)
        ack = HeartbeatsAck([], [])
        for item in body.heartbeats:
            if not self._may_touch(request, item.run_id):
                ack.rejected.append(Rejected(item.run_id, "not_found"))
                continue
            try:
                _, cancel = self.dispatcher.beat(self.owner(request), item.run_id, item.attempt)
            except errors.TempoError as exc:
                ack.rejected.append(Rejected(item.run_id, exc.type))
            else:
                ack.accepted.append(item.run_id)
                if cancel is not None:
                    ack.cancel[item.run_id] = cancel
        return encode(request, ack)

    async def signals(self, request: Request) -> Response:
        """A worker's long poll of its runs' signals (docs/api.md "Signals"):
        answered as soon as one of them is to stop, or empty after `wait_s`.
        It extends no lease. Runs this token may not touch are left out, as
        unknown ones are: their heartbeats say what became of them."""
        body = decode(request, _signals)
        runs = [(item.run_id, item.attempt) for item in body.runs if self._may_touch(request, item.run_id)]
        found: dict[str, RunCancel] = {}
        # A poll ends when its client leaves (a worker that polls again
        # with more runs), and frees its slot at once.
        async with watching(request.receive) as client:
            with self._long_poll(body.wait_s), client.scope:
                found = await self.dispatcher.signals(self.owner(request), runs, body.wait_s)
        response = encode(request, SignalsOut(found))
        return response if found else self._retry_hint(response)

    async def result(self, request: Request, run_id: str) -> Response:
        body = decode(request, _result)
        _check_texts(body.output, body.error, "")
        parsed = ids.parse_run_id(run_id)
        if parsed is None or not self._may_touch(request, run_id):
            raise errors.NotFound(f"no run {run_id}")
        result = Result(parsed[0], parsed[1], body.attempt, body.ok, body.output, body.error)
        [outcome] = await self.dispatcher.report(self.owner(request), [result])
        if isinstance(outcome, errors.TempoError):
            raise outcome
        return encode(request, self.run_view(outcome))

    async def results(self, request: Request) -> Response:
        body = decode(request, _results)
        ack = BatchAck([], [])
        batch: list[Result] = []
        names: list[str] = []
        may_touch_all = request.principal.queues is None
        for i, item in enumerate(body.results):
            if item.output is not None or item.error is not None:
                _check_texts(item.output, item.error, f"results[{i}].")
            parsed = ids.parse_run_id(item.run_id)
            if parsed is None or not (may_touch_all or self._may_touch(request, item.run_id)):
                ack.rejected.append(Rejected(item.run_id, "not_found"))
                continue
            batch.append(Result(parsed[0], parsed[1], item.attempt, item.ok, item.output, item.error))
            names.append(item.run_id)
        outcomes = await self.dispatcher.report(self.owner(request), batch) if batch else []
        for run_id, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, errors.TempoError):
                ack.rejected.append(Rejected(run_id, outcome.type))
            else:
                ack.accepted.append(run_id)
        return encode(request, ack)

    # -- events ------------------------------------------------------------------

    async def events(self, request: Request) -> Response:
        limit = _limit(request)
        order = request.query.get("order", "asc")
        if order not in ("asc", "desc"):
            raise errors.Invalid.at("query.order", "asc or desc")
        if order == "desc":
            return self._events_desc(request, limit)
        for name in ("before", "job_id"):
            if name in request.query:
                raise errors.Invalid.at(f"query.{name}", "only with order=desc")
        after_raw = request.query.get("after") or "0"
        if not _decimal(after_raw) or len(after_raw) > 19:
            raise errors.Invalid.at("query.after", "not a cursor this server gave out")
        wait_s = _wait_param(request)
        after = int(after_raw)
        read = self._event_reader(request, after, limit)
        found: list[tuple[str | None, int, Event]] = []
        if wait_s > 0:
            # A long poll ends when its client leaves, and frees its slot.
            async with watching(request.receive) as client:
                with self._long_poll(wait_s), trio.move_on_after(wait_s), client.scope:
                    while not (found := read()):
                        await self.dispatcher.events_changed.wait()
        if not found:
            found = read()
        events = [
            EventOut(str(seq), e.type, clock.iso_from_ms(e.at_ms), e.job_id, e.run_id, e.detail, owner)
            for owner, seq, e in found
        ]
        response = encode(request, EventsPage(events, events[-1].cursor if events else after_raw))
        return response if events else self._retry_hint(response)

    def _events_desc(self, request: Request, limit: int) -> Response:
        """`GET /v1/events?order=desc`: a page newest first, from `before`
        (docs/api.md "Events"); `next_cursor` is null once the oldest event
        kept was read."""
        for name in ("after", "wait_s"):
            if name in request.query:
                raise errors.Invalid.at(f"query.{name}", "only with order=asc (newest first pages with before)")
        before_raw = request.query.get("before")
        if before_raw is not None and (not _decimal(before_raw) or len(before_raw) > 19):
            raise errors.Invalid.at("query.before", "not a cursor this server gave out")
        job_id = request.query.get("job_id")
        if job_id is not None and not ids.is_job_id(job_id):
            raise errors.Invalid.at("query.job_id", "not a job ID")
        sees_all = self._sees_all(request)
        found, next_seq = self.store.list_events_desc(
            None if sees_all else self.owner(request), None if before_raw is None else int(before_raw), limit, job_id,
        )
        events = [
            EventOut(str(seq), e.type, clock.iso_from_ms(e.at_ms), e.job_id, e.run_id, e.detail,
                     owner if sees_all else None)
            for owner, seq, e in found
        ]
        return encode(request, EventsPage(events, None if next_seq is None else str(next_seq)))

    async def job_counts(self, request: Request) -> Response:
        """`GET /v1/jobs/counts`: from the counts apply keeps, whatever the
        number of jobs (docs/api.md "Count jobs by state")."""
        counts = self.store.job_counts(None if self._sees_all(request) else self.owner(request))
        return encode(request, JobCounts(**counts))

    def _event_reader(self, request: Request, after: int, limit: int) -> Callable[[], list[tuple[str | None, int, Event]]]:
        """How `GET /v1/events` reads a page: the token's owner's feed, or
        for an admin every owner's, merged by sequence (the cursor is the
        sequence, one counter over all owners), each event naming its owner."""
        if self._sees_all(request):
            def every_owner() -> list[tuple[str | None, int, Event]]:
                return [(owner, seq, e) for owner, seq, e in self.store.events_of_all(after, limit)]

            return every_owner
        owner = self.owner(request)

        def own() -> list[tuple[str | None, int, Event]]:
            return [(None, seq, e) for seq, e in self.store.list_events(owner, after, limit)]

        return own

    async def preview(self, request: Request) -> Response:
        body = decode(request, _preview)
        calendar, loc = preview_calendar(body)
        if calendar is not None:
            async with self.previews_computing:
                return await self.calendar_preview(request, body, calendar, loc, self.jobs.now_ms())
        # One preview computes at a time: its slices leave the loop free
        # between them only if no other preview's slice is waiting to run.
        async with self.previews_computing:
            found, timezone = await preview_occurrences(body, self.jobs.now_ms())
            # Spelled out in slices too: 1,000 RFC 3339 strings are milliseconds.
            occurrences = []
            for start in range(0, len(found), limits.preview_slice_times):
                if start:
                    await trio.lowlevel.checkpoint()
                occurrences += views.occurrence_views(found[start : start + limits.preview_slice_times], timezone)
        return encode(request, PreviewOut([o.at for o in occurrences], occurrences))

    # -- operations ------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return encode(request, Health("ok"))

    async def readyz(self, request: Request) -> Response:
        refused = self.jobs.committer.storage.refused
        reason: str | None
        if not self.started:
            reason = "starting"
        elif refused is not None:
            reason = f"writes refused: {refused.detail}"
        else:
            reason = (
                self.entry_check.refusal(self.node.view().applied_index)
                or self.node.not_ready()
                or self.jobs.committer.stalled()
            )
        if reason is None:
            return encode(request, Health("ready"))
        return Response(503, _json_enc.encode(Health("not ready", reason)), headers=[(b"retry-after", b"1")])

    async def cluster(self, request: Request) -> Response:
        """This node's own view (a single node leads a cluster of one, term 0)."""
        view = self.node.view()
        nodes = [ClusterNode(member.id, member.url, role) for member, role in view.roles]
        out = ClusterOut(view.node, view.leader, view.term, view.commit_index, view.applied_index, nodes)
        return encode(request, out)

    async def cluster_digest(self, request: Request) -> Response:
        """A SHA-256 of every table at this node's applied index: replicas at
        one index hold the same digest."""
        applied, digest = await trio.to_thread.run_sync(self.store.digest)
        return encode(request, DigestOut(self.node.node_id, applied, digest))

    async def add_node(self, request: Request) -> Response:
        """Makes a running, empty node (`tempo serve --join`) a voter."""
        body = decode(request, _node_in)
        # A pattern's `$` also matches before a final newline (Python's re,
        # which msgspec uses): "n1\n" would pass and become a member no
        # process can start as.
        for loc, text in (("id", body.id), ("url", body.url)):
            if text.endswith("\n"):
                raise errors.Invalid.at(loc, "must not end with a newline")
        await self._members().add(body.id, body.url)
        return await self.cluster(request)

    async def remove_node(self, request: Request, node_id: str) -> Response:
        await self._members().remove(node_id)
        return await self.cluster(request)

    def _members(self) -> Membership:
        if self.membership is None:
            raise errors.Conflict("a single node has no members to change; start it as a cluster")
        return self.membership

    async def raft(self, request: Request, receive: ASGIReceiveCallable | None = None) -> Response:
        """Raft messages from a peer (net/peer.py); answered once stepped."""
        if self.on_peer_messages is None:
            raise errors.NotFound("this node is not a cluster member")
        self.peer_auth.check(request.headers.get(b"authorization"))
        assert receive is not None
        if self._peer_streams_closed:
            raise errors.ShuttingDown("the node is shutting down")
        reader = FrameReader(entries=self.entry_check)
        # Cancelled by `close_peer_streams`: the stream ends at once.
        scope = trio.CancelScope()
        self._peer_streams.add(scope)
        try:
            with scope:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise errors.Invalid.at("", "the peer went away")
                    assert message["type"] == "http.request", "an HTTP request receives its body or a disconnect"
                    messages = reader.feed(message.get("body", b""))
                    if messages:
                        self.on_peer_messages(messages)
                    if not message.get("more_body", False):
                        reader.close()
                        return Response(204, b"", b"application/octet-stream")
        finally:
            self._peer_streams.discard(scope)
            self.peer_frames_dropped += reader.dropped
        raise errors.ShuttingDown("the node is shutting down")

    async def openapi(self, request: Request) -> Response:
        return Response(200, self.openapi_body)


# What a patch may name (docs/api.md "Change a job"), and why it may not name
# the other fields of a job's view.
_PATCHABLE = frozenset({
    "name", "target", "payload", "schedule", "retry", "lease_s", "jitter_s", "labels", "notify", "timeout_s",
    "overlap", "catchup",
})
# Objects a patch merges into the job's key by key (RFC 7396); the other
# fields it names are replaced whole. `schedule` merges too, with the rule
# for its kinds (`_merge_schedule`).
_MERGED = frozenset({"retry", "labels", "notify", "catchup"})
_FIXED_WHY = dict.fromkeys(
    ("id", "owner", "state", "created_at", "next_run_at", "request_key", "version", "last_run", "runs",
     "paused", "runs_left", "dependents"),
    "cannot be changed by a patch",
)
# A schedule's kinds, which exclude each other, and the keys that go only
# with one kind (or, for the end conditions, only with a repeating one):
# they leave with the kind a patch removes (docs/api.md "Change a job").
_SCHEDULE_KINDS = ("at", "cron", "every_s", "after")
_KIND_ONLY_KEYS = {"at": (), "cron": ("timezone", "dst"), "every_s": ("start_at",), "after": ()}
_REPEATING_ONLY_KEYS = ("end_at", "max_runs", "requires", "calendar", "on_excluded")
_patch_body = decoders(dict[str, Any])
_no_body = decoders(CancelIn)
_create_json = _create[0]


def _tagged(response: Response, version: int) -> Response:
    response.headers.append((b"etag", f'"{version}"'.encode()))
    return response


def _if_match(request: Request, of: str = "job") -> set[int] | None:
    """The versions `If-Match` names; None without the header (or with
    `*`, any version of a job that exists). A well-formed tag that is not
    a version this server gave out matches none (`412`); a header that is
    not `*` or a list of quoted tags is `400` (docs/api.md "Versions")."""
    raw = request.headers.get(b"if-match")
    if raw is None:
        return None
    text = raw.decode("latin-1").strip()
    if text == "*":
        return None
    versions: set[int] = set()
    for tag in text.split(","):
        tag = tag.strip().removeprefix("W/")
        if not (len(tag) >= 2 and tag[0] == tag[-1] == '"' and '"' not in tag[1:-1]):
            raise errors.Invalid.at(
                "header.if-match", f'expected "*" or the {of}\'s version as its ETag gives it, in quotes: "<version>", e.g. "3"'
            )
        inner = tag[1:-1]
        if inner.isdecimal() and len(inner) <= 19:
            versions.add(int(inner))
    return versions


def _merge_patch(target: object, patch: object) -> object:
    """RFC 7396: a patch object merges into an object key by key, `null`
    removing the key; any other value replaces the target whole."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_patch(merged.get(key), value)
    return merged


def _merge_schedule(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`patch` merged into the job's schedule key by key (RFC 7396, `dst`
    too), so a new `cron` keeps the zone and the DST policy. A schedule has
    one kind: a patch that would leave two is `400` naming both, and one
    that removes the kind (`"cron": null`) removes the keys only that kind
    takes (a cron's `timezone` and `dst`, an `every_s`'s `start_at`; a
    repeating schedule's end conditions when the new kind is `at`), unless
    the patch names them, when they are checked with the new kind as a
    create checks them (docs/api.md "Change a job")."""
    merged = _merge_patch(current, patch)
    assert isinstance(merged, dict)
    kinds = [kind for kind in _SCHEDULE_KINDS if merged.get(kind) is not None]
    if len(kinds) > 1:
        old = [kind for kind in kinds if current.get(kind) is not None]
        both = " and ".join(kinds)
        why = (
            f"a schedule has one kind, and this patch leaves {both}: remove the old one with null, "
            f'e.g. {{"schedule": {{"{old[0] if old else kinds[0]}": null, ...}}}}'
        )
        raise errors.Invalid(f"schedule: {why}", [(f"schedule.{kind}", why) for kind in kinds])
    for kind in _SCHEDULE_KINDS:
        if current.get(kind) is None or merged.get(kind) is not None:
            continue  # not the old kind, or kept
        gone = _KIND_ONLY_KEYS[kind] + (_REPEATING_ONLY_KEYS if kinds == ["at"] else ()) + (
            ("requires", "calendar", "on_excluded") if kinds == ["after"] else ())  # a clock schedule's
        for key in gone:
            if key not in patch:
                merged.pop(key, None)
    if "calendar" in patch and patch["calendar"] is None and "on_excluded" not in patch:
        merged.pop("on_excluded", None)  # it goes with its calendar, as a kind's keys go with the kind
    return merged


def _patched(view: Any, patch: dict[str, Any]) -> JobCreate:
    """The job's create body after `patch`, decoded as a create is, so a
    field it leaves invalid is `400` at the same `loc`. `payload` is
    replaced whole, never merged: it is the client's own value; `schedule`
    merges by `_merge_schedule` (docs/api.md)."""
    current = msgspec.to_builtins(view)
    # `notify` only when the patch names it: a job's own setting is kept
    # as it is otherwise, even where the server's config has none now.
    base = {
        name: current[name] for name in _PATCHABLE
        if current.get(name) is not None and (name != "notify" or name in patch)
    }
    # A kept `catchup` is checked with the new schedule as a create checks it.
    for name, value in patch.items():
        if value is None:
            base.pop(name, None)
        elif name == "schedule" and isinstance(value, dict) and isinstance(base.get(name), dict):
            base[name] = _merge_schedule(base[name], value)
        elif name in _MERGED:
            base[name] = _merge_patch(base.get(name), value)
        else:
            base[name] = value
    try:
        return _create_json.decode(_json_enc.encode(base))
    except msgspec.MsgspecError as exc:
        raise invalid_from_msgspec(exc, kind=JobCreate) from None
    except RecursionError:
        raise errors.Invalid.at("", "the body is nested too deeply") from None


def request_content_type(request: Request) -> bytes:
    return b"application/msgpack" if request.wants_msgpack else b"application/json"


def _decode_batch_at_once(request: Request) -> list[JobCreate] | None:
    """All items in one decode, or None when any item (or the batch) is bad:
    then the items are decoded one by one for their problems."""
    try:
        return _batch_typed[1 if request.is_msgpack else 0].decode(request.body).jobs
    except (msgspec.MsgspecError, RecursionError):
        return None


def _rejected_key(raw: msgspec.Raw, which: int) -> str | None:
    """The request key of a batch item the decoder rejected, or None when it
    has none that a valid item could have (absent, not a string, too long)."""
    try:
        key = _key_only[which].decode(raw).request_key
    except (msgspec.MsgspecError, RecursionError):
        return None
    return key if key is not None and len(key) <= limits.request_key_chars_max else None


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


def _check_query(route: Route, request: Request) -> None:
    """Refuses a query parameter the route does not take (its `query` in
    net/routes.py): a filter that does not exist must not answer as if it
    had matched everything."""
    takes = route.query
    for name in request.query:
        if name not in takes:
            if takes:
                raise errors.Invalid.at(f"query.{name}", f"not a parameter of this path; it takes {', '.join(sorted(takes))}")
            raise errors.Invalid.at(f"query.{name}", "not a parameter of this path; it takes none")


_JOB_STATES = ("active", "paused", "completed")


def _job_filter(request: Request) -> Callable[[Any], bool] | None:
    """The filter of `GET /v1/jobs` (docs/api.md "GET /v1/jobs") on what
    a job's record holds, or None; labels are `_label_filter`'s."""
    state = request.query.get("state")
    if state is not None and state not in _JOB_STATES:
        raise errors.Invalid.at("query.state", f"one of {', '.join(_JOB_STATES)}")
    target = request.query.get("target")
    if target is not None and not 1 <= len(target) <= limits.target_chars_max:
        raise errors.Invalid.at("query.target", f"1 to {limits.target_chars_max} characters")
    name_prefix = request.query.get("name_prefix")
    if name_prefix is not None and not 1 <= len(name_prefix) <= limits.name_chars_max:
        raise errors.Invalid.at("query.name_prefix", f"1 to {limits.name_chars_max} characters")
    if state is None and target is None and name_prefix is None:
        return None

    def match(job: Any) -> bool:
        return (
            (state is None or job.state == state)
            and (target is None or job.target == target)
            and (name_prefix is None or (job.name is not None and job.name.startswith(name_prefix)))
        )

    return match


def _label_filter(request: Request) -> list[tuple[str, str]]:
    """The `label` filters of `GET /v1/jobs` (docs/api.md "GET /v1/jobs"):
    `key:value` each, every one a job must carry."""
    given = query_values(request.raw_query, "label") if "label" in request.query else []
    if len(given) > limits.job_labels_max:
        raise errors.Invalid.at("query.label", f"at most {limits.job_labels_max} label filters")
    found = []
    for text in given:
        name, colon, value = text.partition(":")
        if not colon:
            raise errors.Invalid.at("query.label", f"{text[:80]!r} is not key:value (e.g. team:payments)")
        if not check_label_key(name):
            raise errors.Invalid.at(
                "query.label", f"the key {name[:80]!r} is not 1-{limits.label_key_chars_max} characters of a-z 0-9 . _ / -"
            )
        if len(value) > limits.label_value_chars_max:
            raise errors.Invalid.at("query.label", f"a value is at most {limits.label_value_chars_max} characters")
        found.append((name, value))
    return found


def _decimal(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes "²" and other digits
    that int() refuses."""
    return text.isascii() and text.isdigit()


def _limit(request: Request) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return limits.page_limit_default
    # The length check first: int() refuses strings of over 4300 digits.
    if not _decimal(raw) or len(raw) > 4 or not 1 <= int(raw) <= limits.page_limit_max:
        raise errors.Invalid.at("query.limit", f"an integer from 1 to {limits.page_limit_max}")
    return int(raw)


def _check_texts(output: str | None, error: str | None, prefix: str) -> None:
    for name, text in (("output", output), ("error", error)):
        # Encoded only when it may be over: a character is at most 4 bytes.
        if (
            text is not None
            and len(text) * 4 > limits.output_bytes_max
            and len(text.encode()) > limits.output_bytes_max
        ):
            raise errors.TooLarge.at(f"{prefix}{name}", f"more than {limits.output_bytes_max} bytes")


def _wait_param(request: Request) -> float:
    raw = request.query.get("wait_s")
    if raw is None:
        return 0.0
    try:
        wait_s = float(raw)
    except ValueError:
        wait_s = -1.0
    if not 0 <= wait_s <= limits.events_wait_s_max:
        raise errors.Invalid.at("query.wait_s", f"a number from 0 to {limits.events_wait_s_max}")
    return wait_s


def _instant_param(request: Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        at_ms = clock.ms_from_datetime(_instant.decode(_json_enc.encode(raw)))
    except msgspec.MsgspecError:
        raise errors.Invalid.at(f"query.{name}", "an RFC 3339 time with an offset") from None
    if not limits.instant_ms_min <= at_ms <= limits.instant_ms_max:
        raise errors.Invalid.at(f"query.{name}", "outside years 0001 to 9999 in UTC")
    # No run is before 1970: an earlier bound means the same as 1970, and
    # keys hold unsigned milliseconds.
    return max(0, at_ms)


async def _lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
