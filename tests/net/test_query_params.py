"""Query parameters are strict: a parameter an endpoint does not take is
`400 validation` at `query.<name>` (issue: `GET /v1/jobs?state=paused`
answered every job). The parameters each endpoint takes are docs/api.md's;
`stale` is taken by every route (a follower's read, docs/api.md "General rules")."""

import pytest
import trio

from .asgi_calls import call, standalone_api

RUN_ID = "r_" + "0" * 36
JOB_ID = "j_" + "0" * 26
# (method, path, the parameters it takes, with a valid value each).
ROUTES = [
    ("GET", "/v1/jobs", {"limit": "5", "cursor": "", "state": "paused", "target": "queue:q", "name_prefix": "n"}),
    ("GET", "/v1/runs", {"status": "failed", "since": "2027-01-01T00:00:00Z", "until": "2028-01-01T00:00:00Z",
                         "limit": "5", "cursor": ""}),
    ("POST", "/v1/jobs", {}),
    ("POST", "/v1/jobs/batch", {}),
    ("GET", f"/v1/jobs/{JOB_ID}", {}),
    ("DELETE", f"/v1/jobs/{JOB_ID}", {}),
    ("POST", f"/v1/jobs/{JOB_ID}/pause", {}),
    ("POST", f"/v1/jobs/{JOB_ID}/resume", {}),
    ("POST", f"/v1/jobs/{JOB_ID}/trigger", {}),
    ("GET", f"/v1/jobs/{JOB_ID}/runs", {"since": "2027-01-01T00:00:00Z", "until": "2028-01-01T00:00:00Z",
                                        "limit": "5", "cursor": ""}),
    ("GET", f"/v1/runs/{RUN_ID}", {}),
    ("POST", "/v1/claim", {}),
    ("POST", f"/v1/runs/{RUN_ID}/heartbeat", {}),
    ("POST", f"/v1/runs/{RUN_ID}/result", {}),
    ("POST", "/v1/heartbeats", {}),
    ("POST", "/v1/results", {}),
    ("GET", "/v1/events", {"after": "0", "wait_s": "0", "limit": "5"}),
    ("POST", "/v1/schedules/preview", {}),
    ("GET", "/v1/cluster", {}),
    ("GET", "/v1/cluster/digest", {}),
    ("POST", "/v1/cluster/nodes", {}),
    ("DELETE", "/v1/cluster/nodes/n9", {}),
    ("GET", "/healthz", {}),
    ("GET", "/readyz", {}),
    ("GET", "/metrics", {}),
    ("GET", "/v1/openapi.json", {}),
]


@pytest.fixture
async def api(tmp_path):
    with standalone_api(tmp_path / "data") as made:
        async with trio.open_nursery() as nursery:
            # Writes to jobs that do not exist are answered once committed.
            await nursery.start(made.jobs.committer.run)
            with trio.fail_after(30):
                yield made
            nursery.cancel_scope.cancel()


def query(params: dict[str, str]) -> str:
    return "&".join(f"{name}={value}" for name, value in params.items())


@pytest.mark.parametrize(("method", "path", "takes"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
async def test_a_parameter_the_endpoint_does_not_take_is_400_at_its_name(api, method, path, takes):
    for unknown in ("state", "label", "nope", "x"):
        if unknown in takes or (path, unknown) == ("/v1/jobs", "label"):
            continue  # a filter of this path (`label`: 400 of its own, test_outcomes_filters.py)
        answer = await call(api, method, f"{path}?{query(takes | {unknown: 'paused'})}", [b"{}"])
        assert answer.status == 400, (unknown, answer.body)
        problem = answer.problem()
        assert problem["type"] == "validation"
        assert [e["loc"] for e in problem["errors"]] == [f"query.{unknown}"], problem


@pytest.mark.parametrize(("method", "path", "takes"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
async def test_the_parameters_the_endpoint_takes_are_not_refused(api, method, path, takes):
    answer = await call(api, method, f"{path}?{query(takes | {'stale': 'true'})}", [b"{}"])
    if answer.status == 400:
        locs = [e["loc"] for e in answer.problem()["errors"]]
        assert not any(loc.startswith("query") for loc in locs), locs


async def test_a_job_listing_with_a_filter_it_does_not_have_is_refused(api):
    answer = await call(api, "GET", "/v1/jobs?colour=red")
    assert answer.status == 400
    assert answer.problem()["errors"][0]["loc"] == "query.colour"
    assert "limit" in answer.problem()["errors"][0]["msg"]  # it names what the path takes


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/jobs?limit=1&limit=2", "limit"),
        ("/v1/jobs?state=paused&limit=5&state=active", "state"),
        ("/v1/runs?status=failed&status=done", "status"),
        (f"/v1/jobs/{JOB_ID}/runs?since=2027-01-01T00:00:00Z&since=2028-01-01T00:00:00Z", "since"),
        ("/v1/events?after=0&after=5", "after"),
    ],
)
async def test_a_parameter_given_twice_is_400_at_its_name(api, path, name):
    # Which of the two would count is a guess the server does not make.
    answer = await call(api, "GET", path)
    assert answer.status == 400, answer.body
    assert [e["loc"] for e in answer.problem()["errors"]] == [f"query.{name}"]


async def test_the_parameters_that_take_a_list_may_be_given_twice(api):
    assert (await call(api, "GET", "/v1/jobs?label=team:a&label=env:prod")).status == 200
    assert (await call(api, "GET", "/v1/jobs?stale=true&stale=true")).status == 200
