"""Bad input is answered in plain words (issue 25 finding 7): the valid
values of an enum, the expected type in words, an example of an RFC 3339
time; the field path (`loc`) stays msgspec's. And a malformed `If-Match`
is `400` naming the header, not `412`."""

import httpx
import pytest

from conftest import job_body
from problems import assert_problem
from tempo.net import words
from tempo.schema import JobCreate

MERGE = {"content-type": "application/merge-patch+json"}


def _msg(answer: httpx.Response, loc: str) -> str:
    problem = assert_problem(answer, 400, type_="validation", loc=loc)
    return problem["errors"][0]["msg"]


def test_an_enum_lists_its_valid_values(http: httpx.Client) -> None:
    msg = _msg(http.post("/v1/jobs", json=job_body(schedule={"every_s": 60}, overlap="sometimes")), "overlap")
    assert "sometimes" in msg and "enum" not in msg.lower()
    for value in ("allow", "skip", "buffer_one", "buffer_all", "cancel_other"):
        assert f'"{value}"' in msg, msg


def test_a_nested_optional_enum_lists_its_values(http: httpx.Client) -> None:
    body = job_body(schedule={"every_s": 60}, catchup={"policy": "sometimes"})
    msg = _msg(http.post("/v1/jobs", json=body), "catchup.policy")
    assert all(f'"{v}"' in msg for v in ("latest", "all", "none")), msg


def test_a_wrong_type_is_named_in_words(http: httpx.Client) -> None:
    msg = _msg(http.post("/v1/jobs", json=job_body(schedule={"every_s": "60"})), "schedule.every_s")
    assert msg == "expected an integer or null, got a string", msg


def test_a_bad_time_gives_an_example(http: httpx.Client) -> None:
    msg = _msg(http.post("/v1/jobs", json=job_body(schedule={"at": "tomorrow"})), "schedule.at")
    assert "RFC 3339" in msg and "2027-01-01T09:00:00Z" in msg and "RFC3339" not in msg, msg
    msg = _msg(http.post("/v1/jobs", json=job_body(schedule={"at": "2030-01-01T00:00:00"})), "schedule.at")
    assert "offset" in msg and "2027-01-01T09:00:00Z" in msg, msg


def test_bounds_and_unknown_fields_in_words(http: httpx.Client) -> None:
    assert _msg(http.post("/v1/jobs", json=job_body(lease_s=0)), "lease_s").startswith("expected an integer at least")
    assert "unknown field" in _msg(http.post("/v1/jobs", json=job_body(nope=1)), "nope")
    body = job_body()
    del body["target"]
    assert _msg(http.post("/v1/jobs", json=body), "target") == "a required field is missing"


def test_a_batch_item_and_a_patch_speak_alike(http: httpx.Client) -> None:
    answer = http.post("/v1/jobs/batch", json={"jobs": [job_body(schedule={"every_s": 60}, overlap="x")]})
    assert answer.status_code == 200, answer.text
    problem = answer.json()["results"][0]["problem"]
    assert problem["errors"][0]["loc"] == "overlap" and '"buffer_one"' in problem["errors"][0]["msg"]
    job = http.post("/v1/jobs", json=job_body(schedule={"every_s": 60})).json()
    msg = _msg(http.patch(f"/v1/jobs/{job['id']}", json={"overlap": "x"}, headers=MERGE), "overlap")
    assert '"buffer_one"' in msg, msg


@pytest.mark.parametrize("raw", ["banana", "3", '"1', 'W/1', '"1", banana', ""])
def test_a_malformed_if_match_is_400_naming_the_header(http: httpx.Client, raw: str) -> None:
    job = http.post("/v1/jobs", json=job_body()).json()
    answer = http.patch(f"/v1/jobs/{job['id']}", json={"name": "x"}, headers=MERGE | {"if-match": raw})
    msg = _msg(answer, "header.if-match")
    assert '"<version>"' in msg and "*" in msg, msg
    assert http.get(f"/v1/jobs/{job['id']}").json()["version"] == 1, "a refused patch changed the job"


def test_a_well_formed_if_match_of_another_tag_is_still_412(http: httpx.Client) -> None:
    job = http.post("/v1/jobs", json=job_body()).json()
    for raw in ('"banana"', '"9"', 'W/"9", "8"'):
        answer = http.patch(f"/v1/jobs/{job['id']}", json={"name": "x"}, headers=MERGE | {"if-match": raw})
        assert_problem(answer, 412, type_="version_mismatch")


def test_words_keep_an_unknown_message_and_resolve_paths() -> None:
    assert words.plain("something new") == "something new"
    assert words.enum_values(JobCreate, ".catchup.policy") == ["all", "latest", "none"]
    assert words.enum_values(JobCreate, ".nope") == []
    assert words.type_words("int | null") == "an integer or null"
