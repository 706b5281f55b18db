"""Endpoints that take no fields (`POST /v1/jobs/{id}/resume`, `.../trigger`,
`DELETE /v1/jobs/{id}`, `POST /v1/runs/{id}/cancel`): a body is empty or
`{}`; any other is a 400 that names what was sent, and the job is left as it
was (docs/api.md "General rules": unknown fields are rejected, not ignored)."""

import httpx
import pytest

from conftest import job_body
from problems import assert_problem

JSON = {"content-type": "application/json"}
MSGPACK = {"content-type": "application/msgpack"}

NO_FIELDS = [
    ("POST", "/v1/jobs/{job}/resume"),
    ("POST", "/v1/jobs/{job}/trigger"),
    ("DELETE", "/v1/jobs/{job}"),
    ("POST", "/v1/runs/{run}/cancel"),
]


def _job(http: httpx.Client) -> tuple[dict, dict]:
    """A repeating job and its waiting run."""
    job = http.post("/v1/jobs", json=job_body(schedule={"every_s": 60})).json()
    [run] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    return job, run


@pytest.mark.parametrize(("method", "path"), NO_FIELDS)
@pytest.mark.parametrize(
    ("body", "headers", "loc"),
    [
        (b'{"foo": 1}', JSON, "foo"),
        (b"not json at all", JSON, ""),
        (b"[]", JSON, ""),
        (b"{}{}", JSON, ""),
        (b"\x81\xa3foo\x01", MSGPACK, "foo"),  # {"foo": 1}
    ],
)
def test_a_body_with_anything_in_it_is_400_and_changes_nothing(http, method, path, body, headers, loc):
    job, run = _job(http)
    before = http.get(f"/v1/jobs/{job['id']}").json()
    answer = http.request(method, path.format(job=job["id"], run=run["id"]), content=body, headers=headers)
    assert_problem(answer, 400, type_="validation", loc=loc)
    assert http.get(f"/v1/jobs/{job['id']}").json() == before, "a refused request changed the job"
    assert http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"] == [run], "a refused request changed the runs"


@pytest.mark.parametrize(("method", "path"), NO_FIELDS)
@pytest.mark.parametrize(("body", "headers"), [(b"", JSON), (b"{}", JSON), (b"\x80", MSGPACK)])
def test_an_empty_body_or_object_is_taken(http, method, path, body, headers):
    job, run = _job(http)
    answer = http.request(method, path.format(job=job["id"], run=run["id"]), content=body, headers=headers)
    assert answer.status_code in (200, 201, 204), answer.text


def test_a_calendars_delete_with_a_field_is_400_and_leaves_it(http):
    name = f"no-fields-{id(http)}"
    assert http.put(f"/v1/calendars/{name}", json={"timezone": "UTC"}).status_code == 201
    answer = http.request("DELETE", f"/v1/calendars/{name}", content=b'{"force": true}', headers=JSON)
    assert_problem(answer, 400, type_="validation", loc="force")
    assert http.get(f"/v1/calendars/{name}").status_code == 200
    assert http.request("DELETE", f"/v1/calendars/{name}", content=b"{}", headers=JSON).status_code == 204


def test_a_node_removal_with_a_field_is_400_before_anything_else(http):
    # A single node has no members to change (409), but the body is looked at first.
    answer = http.request("DELETE", "/v1/cluster/nodes/n2", content=b'{"now": true}', headers=JSON)
    assert_problem(answer, 400, type_="validation", loc="now")
