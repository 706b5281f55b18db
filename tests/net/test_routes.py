"""The route table (net/routes.py) and the router built from it."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo import errors
from tempo.net import auth
from tempo.net.api import Api
from tempo.net.routes import ROUTES, Param, Route, Router, bind


def _router(routes=ROUTES) -> Router:
    return Router(bind(routes, Api))


ROUTER = _router()


def _find(method: str, path: str) -> tuple[str, tuple[str, ...]]:
    route, _, args = ROUTER.find(method, path)
    return route.name, args


def test_paths_find_their_route_and_parameters():
    assert _find("POST", "/v1/claim") == ("claim", ())
    assert _find("POST", "/v1/runs/r_1/heartbeat") == ("run_heartbeat", ("r_1",))
    assert _find("DELETE", "/v1/cluster/nodes/n2") == ("cluster_node", ("n2",))
    assert _find("GET", "/v1/jobs") == ("jobs", ())
    assert _find("POST", "/v1/jobs") == ("jobs", ())


def test_the_handler_is_the_one_the_route_names():
    route, handler, _ = ROUTER.find("POST", "/v1/runs/r_1/result")
    assert route.handler == "result"
    assert handler is Api.result


def test_a_literal_segment_wins_over_a_parameter_but_gives_way_further_on():
    assert _find("POST", "/v1/jobs/batch") == ("jobs_batch", ())
    # No literal route goes on below `batch`: the parameter route does.
    assert _find("GET", "/v1/jobs/batch/runs") == ("job_runs", ("batch",))
    assert _find("POST", "/v1/jobs/batch/pause") == ("job_pause", ("batch",))


def test_slashes_at_either_end_are_ignored_and_a_parameter_may_be_empty():
    assert _find("GET", "//healthz//") == ("healthz", ())
    assert _find("POST", "/v1/jobs//pause") == ("job_pause", ("",))
    assert _find("GET", "/v1/jobs/") == ("jobs", ())


@pytest.mark.parametrize("path", ["/", "", "/v1", "/v1/jobs/a/b/c", "/v1//jobs", "/v1/cluster/digest/x", "/nope"])
def test_no_such_path_is_404(path):
    with pytest.raises(errors.NotFound, match=f"no such path {path}$"):
        ROUTER.find("GET", path)


def test_a_path_without_the_method_is_405():
    with pytest.raises(errors.MethodNotAllowed, match="PUT is not allowed on /v1/jobs/j_1"):
        ROUTER.find("PUT", "/v1/jobs/j_1")
    with pytest.raises(errors.MethodNotAllowed):
        ROUTER.find("GET", "/v1/claim")


def test_query_parameters_come_from_the_declared_parameters():
    route, _, _ = ROUTER.find("GET", "/v1/jobs/j_1/runs")
    assert route.query == {"since", "until", "limit", "cursor"}  # not the path's `id`
    route, _, _ = ROUTER.find("POST", "/v1/claim")
    assert route.query == frozenset()


def test_who_may_call_comes_from_the_table():
    needs = {route.name: route.needs for route in ROUTES}
    assert needs["claim"] == needs["run_result"] == needs["heartbeats"] == auth.WORKER
    assert needs["healthz"] == needs["metrics"] == auth.PUBLIC
    assert needs["cluster"] == auth.ANY
    assert needs["cluster_nodes"] == auth.ADMIN
    assert needs["jobs"] == auth.CLIENT


def test_a_route_declared_twice_is_refused():
    twice = (*ROUTES, Route("POST", "/v1/claim", "claim", "claim", None))
    with pytest.raises(AssertionError, match="declared twice"):
        _router(twice)


def test_a_path_with_two_names_is_refused():
    other = (*ROUTES, Route("PUT", "/v1/claim", "claim_put", "claim", None))
    with pytest.raises(AssertionError, match="two names"):
        _router(other)


def test_path_parameters_must_be_declared():
    with pytest.raises(AssertionError):
        Route("GET", "/v1/things/{thing_id}", "thing", "get_thing", None)


def test_another_table_registers_the_same_way():
    class Console:
        async def page(self, request, name):
            return name

    name = Param("name", "path", {"type": "string"}, "the page", True)
    console = (Route("GET", "/ui/{name}", "ui_page", "page", None, needs=auth.ANY, params=(name,)),)
    app = Console()
    router = Router([*bind(ROUTES, Api), *bind(console, app)])
    route, handler, args = router.find("GET", "/ui/jobs")
    assert (route.name, args) == ("ui_page", ("jobs",))
    assert handler == app.page
    assert router.find("POST", "/v1/claim")[0].name == "claim"


def _reference(method: str, path: str) -> tuple[str, tuple[str, ...]] | None:
    """The route a path names, by the rule alone: among the templates that
    match segment by segment, the one with a literal where the others have
    a parameter, earliest first."""
    parts = path.strip("/").split("/")
    best = None
    for route in ROUTES:
        template = route.path.strip("/").split("/")
        if len(template) != len(parts):
            continue
        if not all(t.startswith("{") or t == p for t, p in zip(template, parts, strict=True)):
            continue
        rank = tuple(t.startswith("{") for t in template)
        if best is None or rank < best[0]:
            best = (rank, route.path)
    if best is None:
        return None
    template = best[1].strip("/").split("/")
    args = tuple(p for t, p in zip(template, parts, strict=True) if t.startswith("{"))
    names = {route.method: route.name for route in ROUTES if route.path == best[1]}
    return (names[method], args) if method in names else ("405", args)


_SEGMENTS = st.sampled_from(
    ["v1", "jobs", "runs", "batch", "cluster", "nodes", "digest", "pause", "runs", "heartbeat", "result", "claim",
     "healthz", "events", "schedules", "preview", "x", ""]
)


@settings(derandomize=True, max_examples=500)
@given(st.sampled_from(["GET", "POST", "DELETE", "PATCH"]), st.lists(_SEGMENTS, min_size=1, max_size=5))
def test_the_router_agrees_with_the_rule(method, segments):
    path = "/" + "/".join(segments)
    expected = _reference(method, path)
    try:
        found = _find(method, path)
    except errors.NotFound:
        found = None
    except errors.MethodNotAllowed:
        found = ("405", expected[1] if expected else ())
    assert found == expected, path
