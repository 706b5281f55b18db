"""The `catchup` field of a job: null for the default, part of a
request key's body, bounded, and only for repeating schedules (docs/api.md)."""

import pytest

from conftest import unique


def body(**extra) -> dict:
    return {"target": "queue:cf", "schedule": {"every_s": 60}} | extra


def test_catchup_is_shown_when_not_the_default(http):
    job = http.post("/v1/jobs", json=body(catchup={"policy": "all", "window_s": 60})).json()
    assert job["catchup"] == {"window_s": 60, "policy": "all", "max_runs": 1000}
    default = http.post("/v1/jobs", json=body(catchup={"policy": "latest", "max_runs": 1000})).json()
    assert default["catchup"] is None
    assert http.get(f"/v1/jobs/{default['id']}").json()["catchup"] is None


def test_catchup_is_part_of_the_request_key_body(http):
    key = unique("cf")
    first = http.post("/v1/jobs", json=body(request_key=key))
    assert first.status_code == 201
    # The default spelled out is the same body.
    same = http.post("/v1/jobs", json=body(request_key=key, catchup={"policy": "latest"}))
    assert same.status_code == 200 and same.json()["id"] == first.json()["id"]
    other = http.post("/v1/jobs", json=body(request_key=key, catchup={"policy": "none"}))
    assert other.status_code == 409 and other.json()["type"] == "request_key_reused"


@pytest.mark.parametrize(
    ("extra", "loc"),
    [
        ({"catchup": {"window_s": 31_536_001}}, "catchup.window_s"),
        ({"catchup": {"window_s": -1}}, "catchup.window_s"),
        ({"catchup": {"max_runs": 0}}, "catchup.max_runs"),
        ({"catchup": {"max_runs": 1001}}, "catchup.max_runs"),
        ({"catchup": {"policy": "first"}}, "catchup.policy"),
        ({"catchup": {"extra": 1}}, "catchup.extra"),
        ({"schedule": {"at": "2030-01-01T00:00:00Z"}, "catchup": {"policy": "none"}}, "catchup"),
    ],
)
def test_bad_catchup_is_400_naming_the_field(http, extra, loc):
    r = http.post("/v1/jobs", json=body(**extra))
    assert r.status_code == 400, r.text
    assert [e["loc"] for e in r.json()["errors"]] == [loc]
