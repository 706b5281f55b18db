"""One event is one line in the text log: control characters are escaped,
so a target's answer cannot end a line or forge one (tempo/logs.py)."""

import logging
import sys
import time
from datetime import UTC, datetime

import httpx
import pytest

from conftest import Arrival, endpoint
from tempo.logs import TextFormatter, escape_line

FORGED = "2026-12-03 10:00:00,000 tempo.dispatch INFO all good"


def _record(msg: str, *args, exc_info=None) -> logging.LogRecord:
    return logging.getLogger("tempo.test").makeRecord(
        "tempo.test", logging.WARNING, __file__, 1, msg, args, exc_info
    )


def test_a_text_line_escapes_control_characters_in_message_and_arguments():
    record = _record("delivery failed: %s", f"HTTP 500: oops\n{FORGED}\r\x1b[2K\x00\x7f\x85\u2028\tend\\n")
    line = TextFormatter().format(record)
    assert line.splitlines() == [line]
    assert all(ch.isprintable() for ch in line)
    assert line.endswith(
        f"tempo.test WARNING delivery failed: HTTP 500: oops\\n{FORGED}\\r\\x1b[2K\\x00\\x7f\\x85\\u2028\\tend\\\\n"
    )


def test_a_traceback_stays_on_the_line_of_its_event():
    try:
        raise ValueError(f"bad\n{FORGED}")
    except ValueError:
        record = _record("failed", exc_info=sys.exc_info())
    line = TextFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert "\\nTraceback (most recent call last):" in line and f"ValueError: bad\\n{FORGED}" in line


def test_plain_text_is_left_as_it_is():
    text = "run r_1 of job j_1 attempt 2 delivered: é ∑ 😀 {\"a\": [1]}"
    assert escape_line(text) == text


def forging_500(arrival: Arrival) -> tuple[int, bytes]:
    return 500, f"oops\n{FORGED}\r\n".encode()


@pytest.fixture
def target():
    with endpoint(forging_500) as srv:
        yield srv


def test_a_targets_answer_with_newlines_cannot_forge_a_server_log_line(fresh_server, target):
    now = datetime.now(UTC).isoformat()
    with httpx.Client(base_url=fresh_server.url, timeout=10) as client:
        job = client.post("/v1/jobs", json={
            "target": f"{target.url}/hook", "schedule": {"at": now}, "retry": {"max_attempts": 1},
        }).json()
        deadline_s = time.monotonic() + 15
        while (runs := client.get(f"/v1/jobs/{job['id']}/runs").json()["runs"])[0]["status"] != "failed":
            assert time.monotonic() < deadline_s, runs
            time.sleep(0.1)
    fresh_server.stop()
    lines = fresh_server.log_path.read_text().splitlines()
    assert not [line for line in lines if line.startswith(FORGED)]
    mine = [line for line in lines if runs[0]["id"] in line]
    assert mine and all(f"oops\\n{FORGED}\\r\\n" in line for line in mine), mine
