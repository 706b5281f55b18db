"""The HTTP executor and the client name themselves `User-Agent:
tempo/<version>` (not `python-httpx/…`) to the targets and servers they
talk to."""

import json
import time
from datetime import UTC, datetime
from importlib import metadata

import httpx
import pytest

from conftest import Arrival, Endpoint, endpoint
from tempo.net.client import Client

EXPECTED = f"tempo/{metadata.version('tempo')}"


def answer(arrival: Arrival) -> tuple[int, bytes]:
    """`{}` to a delivery, an empty page of jobs to a GET."""
    return 200, (b"{}" if arrival.method == "POST" else json.dumps({"jobs": [], "next_cursor": None}).encode())


@pytest.fixture
def target():
    with endpoint(answer) as srv:
        yield srv


def agents(target: Endpoint) -> list[str | None]:
    return [arrival.headers.get("user-agent") for arrival in target.seen]


def test_a_target_sees_the_executor_as_tempo(fresh_server, target):
    with httpx.Client(base_url=fresh_server.url, timeout=10) as client:
        job = client.post("/v1/jobs", json={
            "target": f"{target.url}/hook", "schedule": {"at": datetime.now(UTC).isoformat()},
        }).json()
        deadline_s = time.monotonic() + 15
        while (runs := client.get(f"/v1/jobs/{job['id']}/runs").json()["runs"])[0]["status"] != "done":
            assert time.monotonic() < deadline_s, runs
            time.sleep(0.1)
    assert agents(target) == [EXPECTED]


def test_the_client_names_itself_tempo(target):
    with Client(target.url) as client:
        client.request("GET", "/v1/jobs")
    assert agents(target) == [EXPECTED]
