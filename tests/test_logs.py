"""JSON log lines (`tempo serve --log-format json`, tempo/logs.py)."""

import json
import logging
import sys
import time
from datetime import UTC, datetime

import httpx
import pytest

from conftest import Server, free_port
from tempo.logs import JsonFormatter, NodeFilter


def _record(msg: str, *args, extra: dict | None = None, exc_info=None) -> logging.LogRecord:
    logger = logging.getLogger("tempo.test")
    return logger.makeRecord("tempo.test", logging.WARNING, __file__, 1, msg, args, exc_info, extra=extra)


def test_a_record_is_one_json_object_with_its_extra_fields():
    record = _record("run %s failed\nbadly", "r_1", extra={"job_id": "j_1", "run_id": "r_1", "attempt": 3})
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "WARNING" and out["logger"] == "tempo.test"
    assert out["message"] == "run r_1 failed\nbadly"
    assert (out["job_id"], out["run_id"], out["attempt"]) == ("j_1", "r_1", 3)
    assert datetime.fromisoformat(out["time"].replace("Z", "+00:00")).tzinfo == UTC
    assert out["time"].endswith("Z") and len(out["time"]) == len("2026-12-02T10:00:00.000Z")
    assert not {"args", "msg", "levelno", "pathname"} & set(out)


def test_an_exception_and_an_odd_value_stay_inside_the_line():
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record("failed", extra={"thing": object()}, exc_info=sys.exc_info())
    out = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in out["exception"]
    assert out["thing"].startswith("<object")


def test_the_node_filter_names_the_node():
    record = _record("x")
    NodeFilter("n2").filter(record)
    assert json.loads(JsonFormatter().format(record))["node"] == "n2"


@pytest.fixture
def json_server(tmp_path):
    srv = Server(tmp_path / "data", extra_args=("--log-format", "json"))
    try:
        yield srv.start()
    finally:
        srv.cleanup()


def test_serve_with_json_logs_writes_parsable_lines_with_run_and_job_ids(json_server):
    closed = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: the delivery fails
    with httpx.Client(base_url=json_server.url, timeout=10.0) as client:
        job = client.post("/v1/jobs", json={
            "target": closed, "schedule": {"at": "2020-01-01T00:00:00Z"}, "retry": {"max_attempts": 1},
        }).json()
        deadline_s = time.monotonic() + 15
        while True:
            [run] = client.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
            if run["status"] == "failed":
                break
            assert time.monotonic() < deadline_s, run
            time.sleep(0.1)
    json_server.stop()
    lines = json_server.log_path.read_text().splitlines()
    others = [line for line in lines if not line.startswith("tempo serving on ")]  # that one is stdout
    assert len(others) == len(lines) - 1
    records = [json.loads(line) for line in others]  # every log line is one JSON object
    assert records
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record)
    mine = [r for r in records if r.get("run_id") == run["id"]]
    assert {r["logger"] for r in mine} == {"tempo.executor", "tempo.dispatch"}
    for record in mine:
        assert record["job_id"] == job["id"] and record["attempt"] == 1 and record["level"] == "WARNING"
