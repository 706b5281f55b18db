"""The OpenAPI 3.1 document, generated from the structs that validate requests."""

from typing import Any

import msgspec

from tempo import limits, schema

_REF = "#/components/schemas/{name}"
_STRUCTS = (
    schema.NodeIn,
    schema.DigestOut,
    schema.JobCreate,
    schema.JobPatch,
    schema.JobBatchCreate,
    schema.JobBatchResult,
    schema.JobOut,
    schema.JobsPage,
    schema.RunOut,
    schema.RunDetailOut,
    schema.RunsPage,
    schema.PreviewIn,
    schema.PreviewOut,
    schema.BackfillIn,
    schema.PauseIn,
    schema.BackfillOut,
    schema.Problem,
    schema.InternalProblem,
    schema.Health,
    schema.ClaimIn,
    schema.ClaimOut,
    schema.HeartbeatIn,
    schema.HeartbeatOut,
    schema.HeartbeatsIn,
    schema.SignalsIn,
    schema.SignalsOut,
    schema.ResultIn,
    schema.ResultsIn,
    schema.BatchAck,
    schema.HeartbeatsAck,
    schema.EventsPage,
    schema.ClusterOut,
)


def _ref(kind: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=kind.__name__)}


def _json(kind: type, description: str) -> dict[str, Any]:
    """An answer in JSON, or in MessagePack of the same shape (docs/api.md "General rules")."""
    return {"description": description, "content": _both(kind)}


def _both(kind: type) -> dict[str, Any]:
    return {media: {"schema": _ref(kind)} for media in ("application/json", "application/msgpack")}


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/problem+json": {"schema": _ref(schema.Problem)}}}


def _op(
    summary: str,
    ok: dict[str, dict[str, Any]],
    *,
    body: type | None = None,
    params: list[dict[str, Any]] | None = None,
    local: bool = False,
    role: bool = True,
) -> dict[str, Any]:
    """One operation with the problems every route of its kind may answer:
    400 bad input, 401 no valid token, 403 a role that may not (`role`), 404,
    413 a body over its bound, 307 to the leader (unless `local`: answered
    by the node asked, docs/api.md "General rules"), 503 no leader or overloaded, and
    500 an unexpected error."""
    operation: dict[str, Any] = {"summary": summary, "responses": dict(ok)}
    problems = [("400", "invalid input"), ("401", "no valid bearer token")]
    if role:
        problems.append(("403", "this token's role may not do this"))
    problems.append(("404", "not found"))
    if body is not None:
        problems.append(("413", "the body is too large"))
    problems.append(("503", "no leader known, a read the leader could not confirm, or overloaded; "
                     "retry after `Retry-After` seconds"))
    for status, text in problems:
        operation["responses"].setdefault(status, _problem(text))
    operation["responses"]["500"] = _INTERNAL
    if not local:
        operation["responses"]["307"] = _REDIRECT
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": _both(body),
        }
    if params:
        operation["parameters"] = params
    operation["security"] = [{"bearer": []}]
    return operation


def _optional_body(operation: dict[str, Any]) -> dict[str, Any]:
    """An operation whose body may be left out (empty)."""
    operation["requestBody"]["required"] = False
    return operation


_REDIRECT = {
    "description": "not the leader: the same request goes to `Location` (reads too, unless `?stale=true`)",
    "headers": {"Location": {"description": "the same path and query on the leader", "schema": {"type": "string"}}},
    "content": {"application/problem+json": {"schema": _ref(schema.Problem)}},
}


# Any route may meet an error the server did not expect (docs/api.md "Errors").
_INTERNAL = {
    "description": "an unexpected error; the server's log has it under `error_id`",
    "content": {"application/problem+json": {"schema": _ref(schema.InternalProblem)}},
}


def _public(summary: str, responses: dict[str, Any]) -> dict[str, Any]:
    """A route that needs no token and is answered by the node asked."""
    return {"summary": summary, "responses": {**responses, "500": _INTERNAL}, "security": []}


def _param(name: str, where: str, kind: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": kind, "description": description}


_STALE = _param(
    "stale", "query", {"type": "string", "enum": ["true"]},
    "`true`: answered by the node asked from what it has applied, which may lag the leader (header "
    "`Tempo-Applied-Index`), without the leader's ReadIndex round; any other value is as if absent",
)
_JOB_ID = _param("id", "path", {"type": "string"}, "the job ID", True)
_PAGE = [
    _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}, "page size (default 100)"),
    _param("cursor", "query", {"type": "string"}, "next_cursor of the previous page"),
]


def _patch_op(job: dict[str, Any]) -> dict[str, Any]:
    """`PATCH /v1/jobs/{id}`: a merge patch, as `application/merge-patch+json`
    or plain JSON (or MessagePack), with an optional `If-Match`."""
    operation = _op(
        "Change a job in place (a JSON merge patch of its mutable fields)",
        {"200": job, "409": _problem("the job kept changing under the patch; send it again"),
         "412": _problem("version_mismatch: `If-Match` names another version than the job's")},
        body=schema.JobPatch,
        params=[_JOB_ID, _param("If-Match", "header", {"type": "string"},
                                'only if the job is at this version: its ETag, `"<version>"` (a list of '
                                'them, or `*`); any other form is `400` at `If-Match`')],
    )
    operation["requestBody"]["content"] = {"application/merge-patch+json": {"schema": _ref(schema.JobPatch)}} | (
        operation["requestBody"]["content"]
    )
    return operation


def _paths() -> dict[str, Any]:
    job = _json(schema.JobOut, "the job") | {"links": _links(_JOB_LINKS, "id", "$response.body#/id")}
    run = _json(schema.RunOut, "the run") | {"links": _links(_RUN_LINKS, "run_id", "$response.body#/id")}
    return {
        "/v1/jobs": {
            "post": _op("Create a job", {"201": job, "200": job, "409": _problem("request key reused"),
                                          "413": _problem("too large"),
                                          "429": _problem("over the owner's create rate")}, body=schema.JobCreate),
            "get": _op("The owner's jobs (an admin token's: every owner's), newest first", {"200": _json(schema.JobsPage, "a page")}, params=[
                _param("state", "query", {"type": "string", "enum": ["active", "paused", "completed"]},
                       "only jobs in this state"),
                _param("target", "query", {"type": "string"}, "only jobs with exactly this target"),
                _param("name_prefix", "query", {"type": "string"}, "only jobs whose name starts with this"),
                _param("label", "query", {
                    "type": "array", "maxItems": limits.job_labels_max,
                    "items": {"type": "string", "pattern": r"^[a-z0-9._/-]{1,63}:"},
                }, "key:value; only jobs with this label; repeated: with every one of them") | {
                    "style": "form", "explode": True,
                },
                *_PAGE,
            ]),
        },
        "/v1/jobs/batch": {
            "post": _op("Create many jobs", {"200": _json(schema.JobBatchResult, "one result per item"),
                                              "413": _problem("too large"),
                                              "429": _problem("over the owner's create rate")},
                        body=schema.JobBatchCreate),
        },
        "/v1/jobs/{id}": {
            "get": _op("One job", {"200": job}, params=[_JOB_ID]),
            "delete": _op("Delete a job", {"204": {"description": "deleted"}}, params=[_JOB_ID]),
            "patch": _patch_op(job),
        },
        "/v1/jobs/{id}/pause": {"post": _optional_body(
            _op("Pause a job, with an optional note", {"200": job}, body=schema.PauseIn, params=[_JOB_ID]))},
        "/v1/jobs/{id}/resume": {"post": _op("Resume a job", {"200": job}, params=[_JOB_ID])},
        "/v1/jobs/{id}/trigger": {
            "post": _op("Run a job now", {"201": run}, params=[_JOB_ID]),
        },
        "/v1/jobs/{id}/backfill": {
            "post": _op("Runs for a job's past slots in [from, until), due at once",
                        {"200": _json(schema.BackfillOut, "runs made, and slots that had one")},
                        body=schema.BackfillIn, params=[_JOB_ID]),
        },
        "/v1/jobs/{id}/runs": {
            "get": _op("A job's runs, newest first", {"200": _json(schema.RunsPage, "a page")}, params=[
                _JOB_ID,
                _param("since", "query", {"type": "string", "format": "date-time"}, "nominal_at >= since"),
                _param("until", "query", {"type": "string", "format": "date-time"}, "nominal_at < until"),
                *_PAGE,
            ]),
        },
        "/v1/runs": {
            "get": _op("Runs of the owner's jobs (an admin token's: every owner's), newest first",
                       {"200": _json(schema.RunsPage, "a page")}, params=[
                _param("status", "query",
                       {"type": "string", "enum": ["waiting", "claimed", "done", "failed", "cancelled", "missed", "skipped"]},
                       "only runs in this status"),
                _param("since", "query", {"type": "string", "format": "date-time"},
                       "listed at >= since (finished_at of done, failed, missed and skipped runs, due_at of the others)"),
                _param("until", "query", {"type": "string", "format": "date-time"}, "listed at < until"),
                *_PAGE,
            ]),
        },
        "/v1/runs/{run_id}": {
            "get": _op("One run, with its attempts", {"200": _json(schema.RunDetailOut, "the run")},
                       params=[_param("run_id", "path", {"type": "string"}, "the run ID", True)]),
        },
        "/v1/runs/{run_id}/cancel": {
            "post": _op("Cancel a run: a waiting one at once, a claimed one asked to stop",
                        {"200": _json(schema.RunDetailOut, "the run as it is now"),
                         "409": _problem("run_finished: the run finished already")},
                        params=[_param("run_id", "path", {"type": "string"}, "the run ID", True)]),
        },
        "/v1/schedules/preview": {
            "post": _op("When a schedule runs", {"200": _json(schema.PreviewOut, "the times")}, body=schema.PreviewIn),
        },
        **_worker_paths(),
        "/healthz": {"get": _public("Liveness", {"200": _json(schema.Health, "serving")})},
        "/metrics": {"get": _public("Prometheus metrics", {
            "200": {"description": "text format", "content": {"text/plain": {"schema": {"type": "string"}}}}})},
        "/v1/openapi.json": {"get": _public("This document", {
            "200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}}})},
        "/v1/cluster": {"get": _op("This node's view of the cluster", {
            "200": _json(schema.ClusterOut, "nodes, leader, term and indexes")}, local=True, role=False)},
        "/v1/cluster/digest": {"get": _op("A SHA-256 of this node's tables at its applied index",
                                          {"200": _json(schema.DigestOut, "index and digest")},
                                          local=True, role=False)},
        "/v1/cluster/nodes": {"post": _op(
            "Add a voter (admin): a node started with `tempo serve --join`",
            {"200": _json(schema.ClusterOut, "the cluster after the change"),
             "409": _problem("a member already, a change is under way, or a single node")}, body=schema.NodeIn)},
        "/v1/cluster/nodes/{node_id}": {"delete": _op(
            "Remove a voter (admin)", {"200": _json(schema.ClusterOut, "the cluster after the change"),
                                       "404": _problem("no such member"),
                                       "409": _problem("a change is under way, or a single node")},
            params=[_param("node_id", "path", {"type": "string"}, "the node ID", True)])},
        "/readyz": {"get": _public("Readiness", {
            "200": _json(schema.Health, "ready"), "503": _json(schema.Health, "not ready")})},
    }


def _worker_paths() -> dict[str, Any]:
    run_id = _param("run_id", "path", {"type": "string"}, "the run ID", True)
    ack = _json(schema.BatchAck, "accepted and rejected runs")
    stale = _problem("stale_attempt: the attempt is no longer current")
    return {
        "/v1/claim": {"post": _op("Take due runs", {
            "200": _json(schema.ClaimOut, "the claimed runs"),
            "409": _problem("claim_key_reused: the claim key was used by another worker or for other queues"),
        }, body=schema.ClaimIn)},
        "/v1/runs/{run_id}/heartbeat": {"post": _op(
            "Extend a lease", {"200": _json(schema.HeartbeatOut, "the new lease, and whether to stop"), "409": stale},
            body=schema.HeartbeatIn, params=[run_id])},
        "/v1/runs/{run_id}/result": {"post": _op(
            "Report a result", {"200": _json(schema.RunOut, "the run"), "409": stale,
                                "413": _problem("output too large")},
            body=schema.ResultIn, params=[run_id])},
        "/v1/heartbeats": {"post": _op(
            "Extend many leases", {"200": _json(schema.HeartbeatsAck, "accepted and rejected runs, and which to stop")},
            body=schema.HeartbeatsIn)},
        "/v1/signals": {"post": _op(
            "Wait for any of a worker's runs to be asked to stop (a cancel, cancel_other, its timeout)",
            {"200": _json(schema.SignalsOut, "the runs to stop and why; empty when the wait ended with none")},
            body=schema.SignalsIn)},
        "/v1/results": {"post": _op("Report many results", {"200": ack, "413": _problem("output too large")},
                                    body=schema.ResultsIn)},
        "/v1/events": {"get": _op("The owner's events (an admin token's: every owner's), oldest first", {
            "200": _json(schema.EventsPage, "a page")}, params=[
            _param("after", "query", {"type": "string"}, "a cursor"),
            _param("wait_s", "query", {"type": "number", "minimum": 0, "maximum": 60}, "long-poll seconds"),
            _PAGE[0],
        ])},
    }


# operationId of each operation: names for clients, links and docs/reference.md.
OPERATION_IDS = {
    ("/v1/jobs", "post"): "createJob",
    ("/v1/jobs", "get"): "listJobs",
    ("/v1/jobs/batch", "post"): "createJobs",
    ("/v1/jobs/{id}", "get"): "getJob",
    ("/v1/jobs/{id}", "delete"): "deleteJob",
    ("/v1/jobs/{id}", "patch"): "updateJob",
    ("/v1/jobs/{id}/pause", "post"): "pauseJob",
    ("/v1/jobs/{id}/resume", "post"): "resumeJob",
    ("/v1/jobs/{id}/trigger", "post"): "triggerJob",
    ("/v1/jobs/{id}/backfill", "post"): "backfillJob",
    ("/v1/jobs/{id}/runs", "get"): "listRuns",
    ("/v1/runs/{run_id}", "get"): "getRun",
    ("/v1/runs", "get"): "listAllRuns",
    ("/v1/runs/{run_id}/cancel", "post"): "cancelRun",
    ("/v1/schedules/preview", "post"): "previewSchedule",
    ("/v1/claim", "post"): "claim",
    ("/v1/runs/{run_id}/heartbeat", "post"): "heartbeat",
    ("/v1/runs/{run_id}/result", "post"): "reportResult",
    ("/v1/heartbeats", "post"): "heartbeats",
    ("/v1/signals", "post"): "signals",
    ("/v1/results", "post"): "reportResults",
    ("/v1/events", "get"): "listEvents",
    ("/healthz", "get"): "healthz",
    ("/readyz", "get"): "readyz",
    ("/metrics", "get"): "metrics",
    ("/v1/openapi.json", "get"): "openapi",
    ("/v1/cluster", "get"): "getCluster",
    ("/v1/cluster/digest", "get"): "getClusterDigest",
    ("/v1/cluster/nodes", "post"): "addNode",
    ("/v1/cluster/nodes/{node_id}", "delete"): "removeNode",
}
# Operations that write: a node that cannot store the write answers 507.
_WRITES = frozenset({
    "createJob", "createJobs", "deleteJob", "updateJob", "pauseJob", "resumeJob", "triggerJob", "claim", "reportResult",
    "reportResults", "addNode", "removeNode", "backfillJob", "cancelRun",
})
# OpenAPI links: which operations take an ID from which answer (a client's
# next steps, and what stateful API tests chain).
_JOB_LINKS = ("getJob", "deleteJob", "pauseJob", "resumeJob", "triggerJob", "listRuns", "updateJob")
_RUN_LINKS = ("getRun", "cancelRun")


def _links(names: tuple[str, ...], parameter: str, expression: str) -> dict[str, Any]:
    return {name: {"operationId": name, "parameters": {parameter: expression}} for name in names}


def document() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(_STRUCTS, ref_template=_REF)
    # Defaults are Python values there (a tuple, a struct); the document
    # holds them as JSON has them, as it is served.
    components = msgspec.json.decode(msgspec.json.encode(components))
    paths = _paths()
    for (path, method), operation_id in OPERATION_IDS.items():
        paths[path][method]["operationId"] = operation_id
        if operation_id in _WRITES:
            paths[path][method]["responses"]["507"] = _problem(
                "insufficient_storage: the disk or the data file is full; writes resume by themselves once "
                "there is room (`Retry-After`)"
            )
        if method == "get" and "307" in paths[path][method]["responses"]:
            # Every read that goes to the leader may opt out of its
            # confirmation (docs/semantics.md "Reads").
            operation = paths[path][method]
            operation["parameters"] = [*operation.get("parameters", []), _STALE]
    return {
        "openapi": "3.1.0",
        "info": {"title": "tempo", "version": "1", "description": "The tempo job scheduler's HTTP API."},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "a token of the config file; none is needed while the server has no tokens",
            }},
        },
    }
