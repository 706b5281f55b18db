"""The route table: every endpoint of the HTTP API, declared once.

Each `Route` names its method, path, handler, who may call it, its
parameters (the query ones are the only ones a request may carry), and its
request and response types. The router (`Router`), the auth needs, the
strict query-parameter check (net/api.py) and the OpenAPI paths
(net/openapi.py) are all built from `ROUTES`, so an endpoint is added by one
entry here, its handler, its schema and its docs (docs/design.md "Adding an
endpoint"). Another application on the same server (a console) declares
its own table of `Route`s and binds it to its own handlers the same way.
"""

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tempo import errors, limits, schema
from tempo.net import auth

# A handler takes the request and the path's parameters, in path order.
Handler = Callable[..., Awaitable[Any]]
JSON_AND_MSGPACK = ("application/json", "application/msgpack")


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter of a route, as OpenAPI describes it; `where` is `path`,
    `query` or `header`."""

    name: str
    where: str
    schema: Mapping[str, Any]
    description: str
    required: bool = False
    # More keys of the parameter's OpenAPI object (`style`, `explode`).
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Links:
    """Operations that take an ID from an answer: a client's next steps."""

    operation_ids: tuple[str, ...]
    parameter: str
    expression: str


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer of a route: its body's struct (`kind`, in JSON or
    MessagePack), or a body of another kind (`media` and its JSON Schema
    `body`), or none."""

    description: str
    kind: type | None = None
    media: tuple[str, ...] = JSON_AND_MSGPACK
    body: Mapping[str, Any] | None = None
    links: Links | None = None


def problem(description: str) -> Answer:
    """A problem+json answer (docs/api.md "Errors")."""
    return Answer(description, schema.Problem, media=("application/problem+json",))


@dataclass(frozen=True, slots=True)
class Route:
    """One method on one path. `name` labels the route in /metrics and
    logs, and is shared by every method of a path. `local`: answered by the
    node asked, never redirected to the leader (docs/api.md "General
    rules"). `bounded`: counted in `requests_in_flight_max`. `operation_id`
    None: not in the OpenAPI document (the peers' raft stream)."""

    method: str
    path: str
    name: str
    handler: str  # the name of the handler's method on the application
    operation_id: str | None
    summary: str = ""
    needs: str = auth.CLIENT
    params: tuple[Param, ...] = ()
    body: type | None = None
    body_required: bool = True
    body_media: tuple[str, ...] = JSON_AND_MSGPACK
    answers: Mapping[str, Answer] = field(default_factory=dict)
    local: bool = False
    bounded: bool = True
    writes: bool = False  # a node that cannot store the write answers 507
    query: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "query", frozenset(p.name for p in self.params if p.where == "query"))
        in_path = [part[1:-1] for part in self.path.split("/") if part.startswith("{")]
        declared = [p.name for p in self.params if p.where == "path"]
        assert in_path == declared, (self.path, declared)
        assert self.method in {"GET", "POST", "PATCH", "DELETE", "PUT"}, self.method


# -- the table -------------------------------------------------------------------

_JOB_ID = Param("id", "path", {"type": "string"}, "the job ID", True)
_RUN_ID = Param("run_id", "path", {"type": "string"}, "the run ID", True)
_LIMIT = Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}, "page size (default 100)")
_CURSOR = Param("cursor", "query", {"type": "string"}, "next_cursor of the previous page")
# The operations that take a job's or a run's ID from an answer.
JOB_LINKS = Links(
    ("getJob", "deleteJob", "pauseJob", "resumeJob", "triggerJob", "listRuns", "updateJob"), "id", "$response.body#/id"
)
RUN_LINKS = Links(("getRun", "cancelRun"), "run_id", "$response.body#/id")
_JOB = Answer("the job", schema.JobOut, links=JOB_LINKS)
_STALE = problem("stale_attempt: the attempt is no longer current")
_TOO_LARGE = problem("too large")
_RATE = problem("over the owner's create rate")
_PAGE = Answer("a page", schema.RunsPage)
_SINCE_UNTIL = (
    Param("since", "query", {"type": "string", "format": "date-time"}, "nominal_at >= since"),
    Param("until", "query", {"type": "string", "format": "date-time"}, "nominal_at < until"),
)
_CLUSTER_AFTER = Answer("the cluster after the change", schema.ClusterOut)


def _job_routes() -> tuple[Route, ...]:
    return (
        Route("POST", "/v1/jobs", "jobs", "create_job", "createJob", "Create a job", body=schema.JobCreate,
              answers={"201": _JOB, "200": _JOB, "409": problem("request key reused"), "413": _TOO_LARGE,
                       "429": _RATE}, writes=True),
        Route("GET", "/v1/jobs", "jobs", "list_jobs", "listJobs",
              "The owner's jobs (an admin token's: every owner's), newest first",
              answers={"200": Answer("a page", schema.JobsPage)}, params=(
                  Param("state", "query", {"type": "string", "enum": ["active", "paused", "completed"]},
                        "only jobs in this state"),
                  Param("target", "query", {"type": "string"}, "only jobs with exactly this target"),
                  Param("name_prefix", "query", {"type": "string"}, "only jobs whose name starts with this"),
                  Param("label", "query", {
                      "type": "array", "maxItems": limits.job_labels_max,
                      "items": {"type": "string", "pattern": r"^[a-z0-9._/-]{1,63}:"},
                  }, "key:value; only jobs with this label; repeated: with every one of them",
                      extra={"style": "form", "explode": True}),
                  _LIMIT, _CURSOR,
              )),
        Route("GET", "/v1/jobs/counts", "jobs_counts", "job_counts", "countJobs",
              "How many of the owner's jobs (an admin token's: every owner's) are in each state",
              answers={"200": Answer("the counts", schema.JobCounts)}),
        Route("POST", "/v1/jobs/batch", "jobs_batch", "create_batch", "createJobs", "Create many jobs",
              body=schema.JobBatchCreate, answers={
                  "200": Answer("one result per item", schema.JobBatchResult), "413": _TOO_LARGE, "429": _RATE,
              }, writes=True),
        Route("GET", "/v1/jobs/{id}", "job", "get_job", "getJob", "One job", params=(_JOB_ID,),
              answers={"200": _JOB}),
        Route("DELETE", "/v1/jobs/{id}", "job", "delete_job", "deleteJob", "Delete a job", params=(_JOB_ID,),
              answers={"204": Answer("deleted"),
                       "409": problem("has_dependents: other jobs depend on it (named in detail)")}, writes=True),
        Route("PATCH", "/v1/jobs/{id}", "job", "patch_job", "updateJob",
              "Change a job in place (a JSON merge patch of its mutable fields)",
              body=schema.JobPatch, body_media=("application/merge-patch+json", *JSON_AND_MSGPACK),
              params=(_JOB_ID, Param("If-Match", "header", {"type": "string"},
                                     'only if the job is at this version: its ETag, `"<version>"` (a list of '
                                     'them, or `*`); any other form is `400` at `If-Match`')),
              answers={"200": _JOB, "409": problem("the job kept changing under the patch; send it again"),
                       "412": problem("version_mismatch: `If-Match` names another version than the job's")},
              writes=True),
        Route("POST", "/v1/jobs/{id}/pause", "job_pause", "pause_job", "pauseJob",
              "Pause a job, with an optional note", body=schema.PauseIn, body_required=False, params=(_JOB_ID,),
              answers={"200": _JOB}, writes=True),
        Route("POST", "/v1/jobs/{id}/resume", "job_resume", "resume_job", "resumeJob", "Resume a job",
              params=(_JOB_ID,), answers={"200": _JOB}, writes=True),
        Route("POST", "/v1/jobs/{id}/trigger", "job_trigger", "trigger_job", "triggerJob", "Run a job now",
              params=(_JOB_ID,), answers={"201": Answer("the run", schema.RunOut, links=RUN_LINKS)}, writes=True),
        Route("POST", "/v1/jobs/{id}/backfill", "job_backfill", "backfill_job", "backfillJob",
              "Runs for a job's past slots in [from, until), due at once", body=schema.BackfillIn,
              params=(_JOB_ID,), answers={"200": Answer("runs made, and slots that had one", schema.BackfillOut)},
              writes=True),
        Route("GET", "/v1/jobs/{id}/graph", "job_graph", "job_graph", "jobGraph",
              "The jobs a job depends on and those that depend on it, as edges", params=(
                  _JOB_ID,
                  Param("depth", "query",
                        {"type": "integer", "minimum": 1, "maximum": limits.deps_graph_depth_max},
                        f"steps up and down from the job (default {limits.deps_graph_depth_default})"),
              ), answers={"200": Answer("the edges", schema.GraphOut)}),
        Route("GET", "/v1/jobs/{id}/runs", "job_runs", "list_runs", "listRuns", "A job's runs, newest first",
              params=(_JOB_ID, *_SINCE_UNTIL, _LIMIT, _CURSOR), answers={"200": _PAGE}),
    )


def _run_routes() -> tuple[Route, ...]:
    statuses = ["waiting", "claimed", "done", "failed", "cancelled", "missed", "skipped"]
    return (
        Route("GET", "/v1/runs", "runs", "list_all_runs", "listAllRuns",
              "Runs of the owner's jobs (an admin token's: every owner's), newest first", params=(
                  Param("status", "query", {"type": "string", "enum": statuses}, "only runs in this status"),
                  Param("since", "query", {"type": "string", "format": "date-time"},
                        "listed at >= since (finished_at of done, failed, missed and skipped runs, due_at of the "
                        "others)"),
                  Param("until", "query", {"type": "string", "format": "date-time"}, "listed at < until"),
                  _LIMIT, _CURSOR,
              ), answers={"200": _PAGE}),
        Route("GET", "/v1/runs/{run_id}", "run", "get_run", "getRun", "One run, with its attempts",
              params=(_RUN_ID,), answers={"200": Answer("the run", schema.RunDetailOut)}),
        Route("POST", "/v1/runs/{run_id}/cancel", "run_cancel", "cancel_run", "cancelRun",
              "Cancel a run: a waiting one at once, a claimed one asked to stop", params=(_RUN_ID,),
              answers={"200": Answer("the run as it is now", schema.RunDetailOut),
                       "409": problem("run_finished: the run finished already")}, writes=True),
        Route("POST", "/v1/schedules/preview", "preview", "preview", "previewSchedule", "When a schedule runs",
              body=schema.PreviewIn, answers={"200": Answer("the times", schema.PreviewOut)}),
    )


def _worker_routes() -> tuple[Route, ...]:
    return (
        Route("POST", "/v1/claim", "claim", "claim", "claim", "Take due runs", needs=auth.WORKER,
              body=schema.ClaimIn, answers={
                  "200": Answer("the claimed runs", schema.ClaimOut),
                  "409": problem("claim_key_reused: the claim key was used by another worker or for other queues"),
              }, writes=True),
        Route("POST", "/v1/runs/{run_id}/heartbeat", "run_heartbeat", "heartbeat", "heartbeat", "Extend a lease",
              needs=auth.WORKER, body=schema.HeartbeatIn, params=(_RUN_ID,),
              answers={"200": Answer("the new lease, and whether to stop", schema.HeartbeatOut), "409": _STALE}),
        Route("POST", "/v1/runs/{run_id}/result", "run_result", "result", "reportResult", "Report a result",
              needs=auth.WORKER, body=schema.ResultIn, params=(_RUN_ID,),
              answers={"200": Answer("the run", schema.RunOut), "409": _STALE,
                       "413": problem("output too large")}, writes=True),
        Route("POST", "/v1/heartbeats", "heartbeats", "heartbeats", "heartbeats", "Extend many leases",
              needs=auth.WORKER, body=schema.HeartbeatsIn,
              answers={"200": Answer("accepted and rejected runs, and which to stop", schema.HeartbeatsAck)}),
        Route("POST", "/v1/signals", "signals", "signals", "signals",
              "Wait for any of a worker's runs to be asked to stop (a cancel, cancel_other, its timeout)",
              needs=auth.WORKER, body=schema.SignalsIn, answers={
                  "200": Answer("the runs to stop and why; empty when the wait ended with none", schema.SignalsOut),
              }),
        Route("POST", "/v1/starts", "starts", "starts", "starts",
              "Ask whether runs claimed ahead of their due times may start (pre-dispatch)",
              needs=auth.WORKER, body=schema.StartsIn, answers={
                  "200": Answer("the runs to start at their due times, and those not to start", schema.StartsOut),
              }, writes=True),
        Route("POST", "/v1/results", "results", "results", "reportResults", "Report many results",
              needs=auth.WORKER, body=schema.ResultsIn,
              answers={"200": Answer("accepted and rejected runs", schema.BatchAck),
                       "413": problem("output too large")}, writes=True),
        Route("GET", "/v1/events", "events", "events", "listEvents",
              "The owner's events (an admin token's: every owner's), oldest first or newest first",
              answers={"200": Answer("a page", schema.EventsPage)}, params=(
                  Param("after", "query", {"type": "string"}, "a cursor; oldest first only"),
                  Param("wait_s", "query", {"type": "number", "minimum": 0, "maximum": 60},
                        "long-poll seconds; oldest first only"),
                  Param("order", "query", {"type": "string", "enum": ["asc", "desc"]},
                        "asc (the default): oldest first, from `after`; desc: newest first, from `before`"),
                  Param("before", "query", {"type": "string"}, "a cursor; newest first only"),
                  Param("job_id", "query", {"type": "string"}, "only this job's events; newest first only"),
                  _LIMIT,
              )),
    )


def _node_routes() -> tuple[Route, ...]:
    # The probes are outside `requests_in_flight_max`, so an overloaded node
    # still answers its monitoring (each is answered at once).
    health = Answer("serving", schema.Health)
    return (
        Route("GET", "/healthz", "healthz", "healthz", "healthz", "Liveness", needs=auth.PUBLIC, local=True,
              bounded=False, answers={"200": health}),
        Route("GET", "/metrics", "metrics", "metrics", "metrics", "Prometheus metrics", needs=auth.PUBLIC,
              local=True, bounded=False, answers={"200": Answer("text format", media=("text/plain",),
                                                                body={"type": "string"})}),
        Route("GET", "/v1/openapi.json", "openapi", "openapi", "openapi", "This document", needs=auth.PUBLIC,
              local=True, answers={"200": Answer("OpenAPI 3.1", media=("application/json",),
                                                 body={"type": "object"})}),
        Route("GET", "/v1/cluster", "cluster", "cluster", "getCluster", "This node's view of the cluster",
              needs=auth.ANY, local=True,
              answers={"200": Answer("nodes, leader, term and indexes", schema.ClusterOut)}),
        Route("GET", "/v1/cluster/digest", "cluster_digest", "cluster_digest", "getClusterDigest",
              "A SHA-256 of this node's tables at its applied index", needs=auth.ANY, local=True,
              answers={"200": Answer("index and digest", schema.DigestOut)}),
        Route("POST", "/v1/cluster/nodes", "cluster_nodes", "add_node", "addNode",
              "Add a voter (admin): a node started with `tempo serve --join`", needs=auth.ADMIN,
              body=schema.NodeIn, answers={
                  "200": _CLUSTER_AFTER,
                  "409": problem("a member already, a change is under way, or a single node"),
              }, writes=True),
        Route("DELETE", "/v1/cluster/nodes/{node_id}", "cluster_node", "remove_node", "removeNode",
              "Remove a voter (admin)", needs=auth.ADMIN,
              params=(Param("node_id", "path", {"type": "string"}, "the node ID", True),),
              answers={"200": _CLUSTER_AFTER, "404": problem("no such member"),
                       "409": problem("a change is under way, or a single node")}, writes=True),
        Route("GET", "/readyz", "readyz", "readyz", "readyz", "Readiness", needs=auth.PUBLIC, local=True,
              bounded=False, answers={"200": Answer("ready", schema.Health),
                                      "503": Answer("not ready", schema.Health)}),
        # The peers' raft stream (net/peer.py): the handler checks the
        # cluster's peer token itself and reads the body as it streams; it
        # is outside `requests_in_flight_max`, so replication never starves
        # behind clients. Not a client's operation, so not in the document.
        Route("POST", "/v1/raft", "raft", "raft", None, needs=auth.PUBLIC, bounded=False),
    )


_CALENDAR_NAME = Param("name", "path", {"type": "string", "pattern": r"^[a-z0-9._-]{1,63}$"}, "the calendar's name", True)
_CALENDAR = Answer("the calendar", schema.CalendarOut)
_CALENDAR_IF_MATCH = Param("If-Match", "header", {"type": "string"},
                           'only if the calendar is at this version: its ETag, `"<version>"` (`"0"`: only if '
                           "there is none)")


def _calendar_routes() -> tuple[Route, ...]:
    """Calendars (docs/api.md "Calendars"): an owner's days that schedules leave out or move from."""
    return (
        Route("GET", "/v1/calendars", "calendars", "list_calendars", "listCalendars", "The owner's calendars, by name",
              params=(_LIMIT, _CURSOR), answers={"200": Answer("a page", schema.CalendarsPage)}),
        Route("PUT", "/v1/calendars/{name}", "calendar", "put_calendar", "putCalendar",
              "Create or replace a calendar (its holidays resolved to dates now)", body=schema.CalendarIn,
              params=(_CALENDAR_NAME, _CALENDAR_IF_MATCH),
              answers={"201": _CALENDAR, "200": _CALENDAR,
                       "412": problem("version_mismatch: `If-Match` names another version than the calendar's")},
              writes=True),
        Route("GET", "/v1/calendars/{name}", "calendar", "get_calendar", "getCalendar", "One calendar",
              params=(_CALENDAR_NAME,), answers={"200": _CALENDAR}),
        Route("DELETE", "/v1/calendars/{name}", "calendar", "delete_calendar", "deleteCalendar",
              "Delete a calendar no job uses", params=(_CALENDAR_NAME, _CALENDAR_IF_MATCH),
              answers={"204": Answer("deleted"), "409": problem("in_use: jobs or calendars use it; they are named")},
              writes=True),
    )


# In the order of the OpenAPI document's paths.
ROUTES: tuple[Route, ...] = (
    *_job_routes(), *_run_routes(), *_calendar_routes(), *_worker_routes(), *_node_routes()
)


# -- the router ------------------------------------------------------------------


class _Node:
    """A segment of the paths: its literal children, then its parameter child."""

    __slots__ = ("literal", "methods", "param")

    def __init__(self) -> None:
        self.literal: dict[str, _Node] = {}
        self.param: _Node | None = None
        self.methods: dict[str, tuple[Route, Handler]] | None = None


def bind(routes: Iterable[Route], app: object) -> list[tuple[Route, Handler]]:
    """Each route with its handler, the method of `app` that it names."""
    return [(route, getattr(app, route.handler)) for route in routes]


class Router:
    """Finds the route of a method and path. A literal segment is preferred
    to a parameter at the same place (`/v1/jobs/batch` before
    `/v1/jobs/{id}`), with a parameter tried when the literal's branch
    finds nothing further on; a parameter matches any segment, even an
    empty one. Paths without parameters are found with one dict lookup,
    so the hot paths (`/v1/claim`, `/v1/results`, `/v1/heartbeats`) cost
    no more than a match statement."""

    def __init__(self, bound: Iterable[tuple[Route, Handler]]):
        self._root = _Node()
        self._static: dict[str, dict[str, tuple[Route, Handler]]] = {}
        self.routes: list[Route] = []  # every route it finds, in the order given
        names: dict[str, str] = {}
        for route, handler in bound:
            self.routes.append(route)
            node = self._root
            for part in route.path.strip("/").split("/"):
                if part.startswith("{"):
                    node.param = node.param or _Node()
                    node = node.param
                else:
                    node = node.literal.setdefault(part, _Node())
            if node.methods is None:
                node.methods = {}
            assert route.method not in node.methods, f"{route.method} {route.path} is declared twice"
            named = names.setdefault(route.path, route.name)
            assert named == route.name, f"{route.path} has two names"
            node.methods[route.method] = (route, handler)
            if "{" not in route.path:
                self._static[route.path.strip("/")] = node.methods

    def find(self, method: str, path: str) -> tuple[Route, Handler, tuple[str, ...]]:
        """The route, its handler and the path's parameters; `404` for no
        such path, `405` for a path without this method."""
        stripped = path.strip("/")
        args: list[str] = []
        methods = self._static.get(stripped)
        if methods is None:
            methods = _walk(self._root, stripped.split("/"), 0, args)
            if methods is None:
                raise errors.NotFound(f"no such path {path}")
        found = methods.get(method)
        if found is None:
            raise errors.MethodNotAllowed(f"{method} is not allowed on {path}")
        return found[0], found[1], tuple(args)


def _walk(node: _Node, parts: list[str], at: int, args: list[str]) -> dict[str, tuple[Route, Handler]] | None:
    """The methods of the path `parts[at:]` below `node`, appending the
    parameters it passes to `args` (and removing them again on a dead end)."""
    if at == len(parts):
        return node.methods
    child = node.literal.get(parts[at])
    if child is not None:
        found = _walk(child, parts, at + 1, args)
        if found is not None:
            return found
    if node.param is not None:
        args.append(parts[at])
        found = _walk(node.param, parts, at + 1, args)
        if found is not None:
            return found
        args.pop()
    return None
