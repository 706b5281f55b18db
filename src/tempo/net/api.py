"""The HTTP API of API.md as an ASGI application."""

from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec

from tempo import clock, errors, ids, limits
from tempo.engine import jobs as jobviews
from tempo.engine.jobs import Jobs
from tempo.engine.store import Created, Store
from tempo.net import openapi
from tempo.net.asgi import (
    PROBLEM,
    Request,
    Response,
    decode,
    decoders,
    encode,
    invalid_from_msgspec,
    parse_query,
    problem_of,
    problem_response,
    read_body,
    send_response,
)
from tempo.schema import (
    Instant,
    BatchItemResult,
    Health,
    JobBatchCreate,
    JobBatchResult,
    JobCreate,
    JobsPage,
    PreviewIn,
    PreviewOut,
    RunsPage,
)

_create = decoders(JobCreate)
_batch = decoders(JobBatchCreate)
_preview = decoders(PreviewIn)
_json_enc = msgspec.json.Encoder()
_instant = msgspec.json.Decoder(Instant)


class Api:
    """Routes requests to the services; owns no state but counters."""

    def __init__(self, store: Store, jobs: Jobs, *, is_ready: Callable[[], bool]):
        self.store = store
        self.jobs = jobs
        self.is_ready = is_ready
        self.requests: Counter[tuple[str, int]] = Counter()
        self.openapi_body = _json_enc.encode(openapi.document())

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
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
        )
        route = "unknown"
        try:
            request.query = parse_query(scope.get("query_string", b""))
            limit = limits.batch_body_bytes_max if path == "/v1/jobs/batch" else limits.body_bytes_max
            request.body = await read_body(receive, limit)
            route, handler = self.route(request)
            response = await handler(request)
        except errors.TempoError as exc:
            response = problem_response(exc)
        self.requests[(route, response.status)] += 1
        await send_response(send, response)

    def route(self, request: Request) -> tuple[str, Callable]:
        parts = request.path.strip("/").split("/")
        method = request.method
        table = self._routes(parts)
        if table is None:
            raise errors.NotFound(f"no such path {request.path}")
        name, by_method = table
        handler = by_method.get(method)
        if handler is None:
            raise errors.MethodNotAllowed(f"{method} is not allowed on {request.path}")
        return name, handler

    def _routes(self, parts: list[str]) -> tuple[str, dict[str, Callable]] | None:
        match parts:
            case ["healthz"]:
                return "healthz", {"GET": self.healthz}
            case ["readyz"]:
                return "readyz", {"GET": self.readyz}
            case ["metrics"]:
                return "metrics", {"GET": self.metrics}
            case ["v1", "openapi.json"]:
                return "openapi", {"GET": self.openapi}
            case ["v1", "jobs"]:
                return "jobs", {"POST": self.create_job, "GET": self.list_jobs}
            case ["v1", "jobs", "batch"]:
                return "jobs_batch", {"POST": self.create_batch}
            case ["v1", "jobs", job_id]:
                return "job", {"GET": _bind(self.get_job, job_id), "DELETE": _bind(self.delete_job, job_id)}
            case ["v1", "jobs", job_id, "pause"]:
                return "job_pause", {"POST": _bind(self.pause_job, job_id)}
            case ["v1", "jobs", job_id, "resume"]:
                return "job_resume", {"POST": _bind(self.resume_job, job_id)}
            case ["v1", "jobs", job_id, "trigger"]:
                return "job_trigger", {"POST": _bind(self.trigger_job, job_id)}
            case ["v1", "jobs", job_id, "runs"]:
                return "job_runs", {"GET": _bind(self.list_runs, job_id)}
            case ["v1", "runs", run_id]:
                return "run", {"GET": _bind(self.get_run, run_id)}
            case ["v1", "schedules", "preview"]:
                return "preview", {"POST": self.preview}
        return None

    # -- jobs ----------------------------------------------------------------

    def owner(self, request: Request) -> str:
        return "default"  # auth off: every request acts as owner `default`

    async def create_job(self, request: Request) -> Response:
        body = decode(request, _create)
        [outcome] = await self.jobs.create(self.owner(request), [body], from_msgpack=request.is_msgpack)
        if isinstance(outcome, errors.TempoError):
            raise outcome
        return encode(request, jobviews.job_view(outcome.job), 201 if outcome.new else 200)

    async def create_batch(self, request: Request) -> Response:
        batch = decode(request, _batch)
        decoder = _create[1 if request.is_msgpack else 0]
        items: list[Any] = []
        for raw in batch.jobs:
            try:
                items.append(decoder.decode(raw))
            except msgspec.MsgspecError as exc:
                items.append(invalid_from_msgspec(exc))
            except RecursionError:
                items.append(errors.Invalid.at("", "the item is nested too deeply"))
        outcomes = await self.jobs.create(self.owner(request), items, from_msgpack=request.is_msgpack)
        return encode(request, JobBatchResult([_batch_item(o) for o in outcomes]))

    async def get_job(self, request: Request, job_id: str) -> Response:
        return encode(request, jobviews.job_view(self.store.get_job(self.owner(request), job_id)))

    async def list_jobs(self, request: Request) -> Response:
        limit = _limit(request)
        cursor = request.query.get("cursor") or None
        if cursor is not None and not ids.is_job_id(cursor):
            raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
        found, next_cursor = self.store.list_jobs(self.owner(request), limit, cursor)
        return encode(request, JobsPage([jobviews.job_view(j) for j in found], next_cursor))

    async def pause_job(self, request: Request, job_id: str) -> Response:
        return encode(request, jobviews.job_view(await self.jobs.pause(self.owner(request), job_id)))

    async def resume_job(self, request: Request, job_id: str) -> Response:
        return encode(request, jobviews.job_view(await self.jobs.resume(self.owner(request), job_id)))

    async def delete_job(self, request: Request, job_id: str) -> Response:
        await self.jobs.delete(self.owner(request), job_id)
        return Response(204, b"", request_content_type(request))

    async def trigger_job(self, request: Request, job_id: str) -> Response:
        run = await self.jobs.trigger(self.owner(request), job_id)
        return encode(request, jobviews.run_view(run), 201)

    # -- runs ------------------------------------------------------------------

    async def list_runs(self, request: Request, job_id: str) -> Response:
        limit = _limit(request)
        since_ms = _instant_param(request, "since")
        until_ms = _instant_param(request, "until")
        cursor = request.query.get("cursor") or None
        cursor_ms = None
        if cursor is not None:
            if not cursor.isdigit() or len(cursor) > 16:
                raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
            cursor_ms = int(cursor)
        found, next_ms = self.store.list_runs(
            self.owner(request), job_id, since_ms=since_ms, until_ms=until_ms, limit=limit, cursor_ms=cursor_ms
        )
        next_cursor = None if next_ms is None else str(next_ms)
        return encode(request, RunsPage([jobviews.run_view(r) for r in found], next_cursor))

    async def get_run(self, request: Request, run_id: str) -> Response:
        run, _ = self.store.get_run(self.owner(request), run_id)
        return encode(request, jobviews.run_view(run))

    async def preview(self, request: Request) -> Response:
        body = decode(request, _preview)
        times = jobviews.preview_ms(body, clock.now_ms())
        return encode(request, PreviewOut([clock.iso_from_ms(t) for t in times]))

    # -- operations ------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return encode(request, Health("ok"))

    async def readyz(self, request: Request) -> Response:
        if self.is_ready():
            return encode(request, Health("ready"))
        return Response(503, _json_enc.encode(Health("not ready")), headers=[(b"retry-after", b"1")])

    async def openapi(self, request: Request) -> Response:
        return Response(200, self.openapi_body)

    async def metrics(self, request: Request) -> Response:
        lines = [
            "# HELP tempo_http_requests_total HTTP requests answered, by route and status.",
            "# TYPE tempo_http_requests_total counter",
        ]
        for (route, status), count in sorted(self.requests.items()):
            lines.append(f'tempo_http_requests_total{{route="{route}",status="{status}"}} {count}')
        committer = self.jobs.committer
        lines += [
            "# HELP tempo_commit_batches_total Group-commit batches written (one fsync each).",
            "# TYPE tempo_commit_batches_total counter",
            f"tempo_commit_batches_total {committer.batches_committed}",
            "# HELP tempo_commit_commands_total Commands written by group commit.",
            "# TYPE tempo_commit_commands_total counter",
            f"tempo_commit_commands_total {committer.commands_committed}",
        ]
        body = ("\n".join(lines) + "\n").encode()
        return Response(200, body, b"text/plain; version=0.0.4")


def _bind(handler: Callable, arg: str) -> Callable:
    async def bound(request: Request) -> Response:
        return await handler(request, arg)

    return bound


def request_content_type(request: Request) -> bytes:
    return b"application/msgpack" if request.wants_msgpack else b"application/json"


def _batch_item(outcome: Created | errors.TempoError) -> BatchItemResult:
    if isinstance(outcome, errors.TempoError):
        problem = problem_of(outcome)
        return BatchItemResult(problem.status, problem=problem)
    return BatchItemResult(201 if outcome.new else 200, job=jobviews.job_view(outcome.job))


def _limit(request: Request) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return limits.page_limit_default
    # The length check first: int() refuses strings of over 4300 digits.
    if not raw.isdigit() or len(raw) > 4 or not 1 <= int(raw) <= limits.page_limit_max:
        raise errors.Invalid.at("query.limit", f"an integer from 1 to {limits.page_limit_max}")
    return int(raw)


def _instant_param(request: Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        # No run is before 1970: an earlier bound means the same as 1970, and
        # keys hold unsigned milliseconds.
        return max(0, clock.ms_from_datetime(_instant.decode(_json_enc.encode(raw))))
    except msgspec.MsgspecError:
        raise errors.Invalid.at(f"query.{name}", "an RFC 3339 time with an offset") from None


async def _lifespan(receive: Callable, send: Callable) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


__all__ = ["Api", "PROBLEM"]
