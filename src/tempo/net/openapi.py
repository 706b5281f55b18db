"""The OpenAPI 3.1 document, generated from the structs that validate requests."""

from typing import Any

import msgspec

from tempo import schema
from tempo.net import auth, routes

_REF = "#/components/schemas/{name}"
# The order in which the components have always been served; a struct
# that a new route names comes after these (`_structs`).
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
    schema.StartsIn,
    schema.StartsOut,
    schema.ResultIn,
    schema.ResultsIn,
    schema.BatchAck,
    schema.HeartbeatsAck,
    schema.EventsPage,
    schema.ClusterOut,
)


def _ref(kind: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=kind.__name__)}


def _answer(answer: routes.Answer) -> dict[str, Any]:
    """One answer as OpenAPI has it: a struct in JSON or MessagePack of the
    same shape (docs/api.md "General rules"), a problem, another body, or none."""
    out: dict[str, Any] = {"description": answer.description}
    if answer.kind is not None:
        out["content"] = {media: {"schema": _ref(answer.kind)} for media in answer.media}
    elif answer.body is not None:
        out["content"] = {media: {"schema": dict(answer.body)} for media in answer.media}
    if answer.links is not None:
        out["links"] = {
            name: {"operationId": name, "parameters": {answer.links.parameter: answer.links.expression}}
            for name in answer.links.operation_ids
        }
    return out


def _problem(description: str) -> dict[str, Any]:
    return _answer(routes.problem(description))


def _op(route: routes.Route) -> dict[str, Any]:
    """One operation with the problems every route of its kind may answer:
    400 bad input, 401 no valid token, 403 a role that may not (all but
    the routes any token may call), 404, 413 a body over its bound, 307 to
    the leader (unless `local`: answered by the node asked, docs/api.md
    "General rules"), 503 no leader or overloaded, and 500 an unexpected
    error."""
    operation: dict[str, Any] = {
        "summary": route.summary,
        "responses": {status: _answer(answer) for status, answer in route.answers.items()},
    }
    problems = [("400", "invalid input"), ("401", "no valid bearer token")]
    if route.needs != auth.ANY:
        problems.append(("403", "this token's role may not do this"))
    problems.append(("404", "not found"))
    if route.body is not None:
        problems.append(("413", "the body is too large"))
    problems.append(("503", "no leader known, a read the leader could not confirm, or overloaded; "
                     "retry after `Retry-After` seconds"))
    for status, text in problems:
        operation["responses"].setdefault(status, _problem(text))
    operation["responses"]["500"] = _INTERNAL
    if not route.local:
        operation["responses"]["307"] = _REDIRECT
    if route.body is not None:
        operation["requestBody"] = {
            "required": route.body_required,
            "content": {media: {"schema": _ref(route.body)} for media in route.body_media},
        }
    if route.params:
        operation["parameters"] = [_param(param) for param in route.params]
    operation["security"] = [{"bearer": []}]
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


def _public(route: routes.Route) -> dict[str, Any]:
    """A route that needs no token and is answered by the node asked."""
    responses = {status: _answer(answer) for status, answer in route.answers.items()}
    return {"summary": route.summary, "responses": {**responses, "500": _INTERNAL}, "security": []}


def _param(param: routes.Param) -> dict[str, Any]:
    return {
        "name": param.name, "in": param.where, "required": param.required, "schema": dict(param.schema),
        "description": param.description, **param.extra,
    }


_STALE = _param(routes.Param(
    "stale", "query", {"type": "string", "enum": ["true"]},
    "`true`: answered by the node asked from what it has applied, which may lag the leader (header "
    "`Tempo-Applied-Index`, on its errors too), without the leader's ReadIndex round; any other value "
    "is 400 at `query.stale`, on every node",
))


def documented() -> list[routes.Route]:
    """The routes of the document: all but those without an operationId."""
    return [route for route in routes.ROUTES if route.operation_id is not None]


def _structs() -> list[type]:
    """The structs of the components: those the document has always listed,
    in their order, then any other a route names (a new endpoint's)."""
    found: list[type] = list(_STRUCTS)
    for route in documented():
        kinds = [route.body, *(answer.kind for answer in route.answers.values())]
        found += [kind for kind in kinds if kind is not None and kind not in found]
    return found


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for route in documented():
        operation = _public(route) if route.needs == auth.PUBLIC else _op(route)
        operation["operationId"] = route.operation_id
        if route.writes:
            operation["responses"]["507"] = _problem(
                "insufficient_storage: the disk or the data file is full; writes resume by themselves once "
                "there is room (`Retry-After`)"
            )
        if route.method == "GET" and not route.local:
            # Every read that goes to the leader may opt out of its
            # confirmation (docs/semantics.md "Reads").
            operation["parameters"] = [*operation.get("parameters", []), _STALE]
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    return paths


def document() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(_structs(), ref_template=_REF)
    # Defaults are Python values there (a tuple, a struct); the document
    # holds them as JSON has them, as it is served.
    components = msgspec.json.decode(msgspec.json.encode(components))
    paths = _paths()
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
