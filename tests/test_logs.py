"""JSON log lines (`tempo serve --log-format json`, tempo/logs.py)."""

import json
import logging
import sys
import time
from datetime import UTC, datetime

import httpx

from conftest import free_port
from tempo import clock, ids, limits
from tempo.engine.dispatch import log_failed_attempts
from tempo.engine.records import Run
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


def test_failed_attempts_are_logged_with_ids_and_capped_per_commit(caplog):
    def job(i: int) -> str:
        return ids.job_id_from_int(1_800_000_000_000, i)

    retried = Run(job(1), 1000, 5000, "waiting", attempt=1, error="boom")
    failed = Run(job(2), 2000, 2000, "failed", attempt=4, error="lease expired")
    done = Run(job(3), 3000, 3000, "done", attempt=1)
    with caplog.at_level(logging.INFO, logger="tempo.dispatch"):
        log_failed_attempts([retried, None, failed, done])
    assert [(r.levelname, r.job_id, r.run_id, r.attempt, r.status) for r in caplog.records] == [
        ("INFO", job(1), ids.run_id(job(1), 1000), 1, "waiting"),
        ("WARNING", job(2), ids.run_id(job(2), 2000), 4, "failed"),
    ]
    assert "boom" in caplog.records[0].getMessage() and "lease expired" in caplog.records[1].getMessage()
    caplog.clear()
    many = [Run(job(i), 1000, 1000, "waiting", attempt=1, error="x") for i in range(limits.run_log_lines_max + 5)]
    with caplog.at_level(logging.INFO, logger="tempo.dispatch"):
        log_failed_attempts(many)
    assert len(caplog.records) == limits.run_log_lines_max + 1
    assert caplog.records[-1].getMessage() == "and 5 more failed attempts in the same commit"


def test_a_failed_attempt_without_error_text_is_logged_without_none(caplog):
    """A worker may report a failure without `error`: the line says so in
    words, never `failed (None)` or `: None`."""
    job_id = ids.job_id_from_int(1_800_000_000_000, 1)
    retried = Run(job_id, 1000, 5000, "waiting", attempt=1)
    failed = Run(job_id, 2000, 2000, "failed", attempt=2)
    with caplog.at_level(logging.INFO, logger="tempo.dispatch"):
        log_failed_attempts([retried, failed])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and not any("None" in line for line in lines), lines
    assert lines[0].endswith(f"attempt 1 failed (no error text); retry due at {clock.iso_from_ms(5000)}")
    assert lines[1].endswith("failed for good at attempt 2 (no error text)")
