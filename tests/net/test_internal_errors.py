"""An exception that is not a TempoError, met while answering (a bug, or
damaged data read back): the client gets `500` problem+json with an
`error_id`, the log has one line with that ID and the traceback, /metrics
counts it, and the node serves on (docs/api.md "Errors", docs/operations.md
"Logs")."""

import json
import logging
import re

import httpx
import pytest

from conftest import damage_job_record, job_body
from tempo import errors
from tempo.net import openapi
from tempo.net.peer import encode_frames
from tempo.raft import MESSAGE_ENCODER, Heartbeat

from .asgi_calls import call, standalone_api

ERROR_ID = re.compile(r"^[0-9a-f]{16}$")


@pytest.fixture
def api(tmp_path):
    with standalone_api(tmp_path / "data") as made:
        yield made


def internal_errors(text: str) -> float:
    found = re.search(r"^tempo_http_internal_errors_total (\S+)$", text, re.M)
    assert found, "tempo_http_internal_errors_total not in /metrics"
    return float(found.group(1))


def check_internal(answer, caplog) -> str:
    assert answer.status == 500
    problem = answer.problem()
    assert problem["type"] == "internal" and problem["status"] == 500 and problem["errors"] == []
    assert ERROR_ID.match(problem["error_id"]), problem
    assert problem["error_id"] in problem["detail"]
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.name == "tempo.http" and record.error_id == problem["error_id"]
    assert record.exc_info is not None
    return problem["error_id"]


async def test_an_unexpected_exception_in_a_handler_is_a_500_problem_logged_once(api, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(api.store, "list_jobs", broken)
    with caplog.at_level(logging.INFO, logger="tempo"):
        answer = await call(api, "GET", "/v1/jobs")
    check_internal(answer, caplog)
    assert isinstance(caplog.records[0].exc_info[1], KeyError)
    metrics = await call(api, "GET", "/metrics")
    assert internal_errors(metrics.body.decode()) == 1
    assert 'tempo_http_requests_total{route="jobs",status="500"} 1' in metrics.body.decode()
    # Error IDs differ from one error to the next.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tempo"):
        again = await call(api, "GET", "/v1/jobs")
    assert again.problem()["error_id"] != answer.problem()["error_id"]
    assert internal_errors((await call(api, "GET", "/metrics")).body.decode()) == 2


async def test_an_expected_error_is_its_own_problem_and_not_logged_as_internal(api, caplog):
    with caplog.at_level(logging.INFO, logger="tempo"):
        answer = await call(api, "GET", "/v1/jobs/j_nope")
    assert answer.status == 404 and answer.problem()["type"] == "not_found"
    assert "error_id" not in answer.problem()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert internal_errors((await call(api, "GET", "/metrics")).body.decode()) == 0


def test_every_operation_declares_the_500_problem():
    document = openapi.document()
    assert "InternalProblem" in document["components"]["schemas"]
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            declared = operation["responses"].get("500")
            assert declared is not None, (method, path)
            schema = declared["content"]["application/problem+json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/InternalProblem"}, (method, path)


async def test_an_error_in_the_peer_stream_is_a_500_problem(api, caplog):
    def step(messages):
        raise RuntimeError("a bug in step")

    api.on_peer_messages = step
    with caplog.at_level(logging.INFO, logger="tempo"):
        answer = await call(api, "POST", "/v1/raft", [_one_frame()])
    check_internal(answer, caplog)


async def test_an_error_type_missing_from_the_status_table_is_a_500_problem(api, monkeypatch, caplog):
    class Unmapped(errors.TempoError):
        type = "unmapped"

    def broken(*args, **kwargs):
        raise Unmapped("no status for this one")

    monkeypatch.setattr(api.store, "list_jobs", broken)
    with caplog.at_level(logging.INFO, logger="tempo"):
        answer = await call(api, "GET", "/v1/jobs")
    check_internal(answer, caplog)


def _one_frame() -> bytes:
    return encode_frames([MESSAGE_ENCODER.encode(Heartbeat(term=1, src=2, dst=1, commit=0))])


# -- a real node, a record damaged on disk --------------------------------------


def test_a_corrupt_record_read_by_the_job_list_is_a_500_problem_with_a_logged_error_id(json_server):
    with httpx.Client(base_url=json_server.url, timeout=10) as http:
        damaged = http.post("/v1/jobs", json=job_body()).json()
    damage_job_record(json_server, damaged["id"])
    with httpx.Client(base_url=json_server.url, timeout=10) as http:
        answer = http.get("/v1/jobs")
        assert answer.status_code == 500
        assert answer.headers["content-type"] == "application/problem+json"
        problem = answer.json()
        assert problem["type"] == "internal" and ERROR_ID.match(problem["error_id"])
        assert internal_errors(http.get("/metrics").text) == 1
        # The node serves on: other requests are answered as before.
        assert http.get("/healthz").status_code == 200
        assert http.post("/v1/jobs", json=job_body()).status_code == 201
    json_server.stop()
    records = [json.loads(line) for line in json_server.log_path.read_text().splitlines() if line.startswith("{")]
    logged = [r for r in records if r.get("error_id") == problem["error_id"]]
    assert len(logged) == 1, records
    [line] = logged
    assert line["level"] == "ERROR" and line["logger"] == "tempo.http" and line["route"] == "jobs"
    assert "Traceback" in line["exception"] and "a stored Job does not decode" in line["exception"]
