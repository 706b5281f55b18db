"""Claims follow their clients (docs/api.md "Claims and disconnects"),
against a real `tempo serve`: a long poll whose connection is reset leaves at
once, frees its long-poll slot and takes no run, so a live worker gets it.

Connections are reset (RST, via SO_LINGER 0), as a killed worker's are."""

import json
import re
import socket
import struct
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from conftest import unique

ABORTED_POLLS = 40
POLL_WAIT_S = 30


@pytest.fixture
def http(fresh_server):
    with httpx.Client(base_url=fresh_server.url, timeout=10.0) as client:
        yield client


def long_polls(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    found = re.search(r"^tempo_http_long_polls_in_flight (\S+)$", text, re.M)
    assert found
    return float(found.group(1))


def wait_for(predicate, timeout_s: float) -> float:
    """Seconds until `predicate()` held; fails after `timeout_s`."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout_s, "timed out"
        time.sleep(0.02)
    return time.monotonic() - started


def open_poll(port: int, queue: str, worker: str) -> socket.socket:
    """A claim long poll sent whole on a fresh connection, not read."""
    body = json.dumps({"worker": worker, "queues": [queue], "wait_s": POLL_WAIT_S}).encode()
    head = (
        "POST /v1/claim HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(head + body)
    return sock


def open_events_poll(port: int) -> socket.socket:
    """An event read long poll on a fresh connection, not read."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(f"GET /v1/events?wait_s={POLL_WAIT_S} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    return sock


def reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def at_iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def test_aborted_long_polls_free_their_slots_at_once(fresh_server, http):
    queue = unique("q")
    polls = [open_poll(fresh_server.port, queue, f"dead-{i}") for i in range(ABORTED_POLLS // 2)]
    polls += [open_events_poll(fresh_server.port) for _ in range(ABORTED_POLLS // 2)]
    wait_for(lambda: long_polls(http) == ABORTED_POLLS, timeout_s=10)
    for sock in polls:
        reset(sock)
    # Within a few seconds, not after their `wait_s` of 30 s.
    wait_for(lambda: long_polls(http) == 0, timeout_s=3)
    assert http.get("/healthz").status_code == 200


def test_a_reset_long_poll_takes_no_run_and_a_live_worker_gets_it(fresh_server, http):
    queue = unique("q")
    due = datetime.now(UTC) + timedelta(seconds=2)
    created = http.post("/v1/jobs", json={"target": f"queue:{queue}", "schedule": {"at": at_iso(due)}, "lease_s": 60})
    assert created.status_code == 201, created.text
    dead = [open_poll(fresh_server.port, queue, f"dead-{i}") for i in range(5)]
    wait_for(lambda: long_polls(http) == len(dead), timeout_s=10)
    for sock in dead:
        reset(sock)
    # The run falls due while no live claim waits: nobody may take it.
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 0.5)
    live = http.post("/v1/claim", json={"worker": "live", "queues": [queue], "wait_s": 3})
    assert live.status_code == 200, live.text
    runs = live.json()["runs"]
    assert [(r["job_id"], r["worker"], r["attempt"]) for r in runs] == [(created.json()["id"], "live", 1)]
