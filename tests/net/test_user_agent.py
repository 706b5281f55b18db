"""The HTTP executor and the client name themselves `User-Agent:
tempo/<version>` (not `python-httpx/…`) to the targets and servers they
talk to."""

import http.server
import json
import threading
import time
from datetime import UTC, datetime
from importlib import metadata

import httpx
import pytest

from tempo.net.client import Client

EXPECTED = f"tempo/{metadata.version('tempo')}"


class _Target(http.server.ThreadingHTTPServer):
    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.agents: list[str | None] = []


class _Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self, body: bytes) -> None:
        self.server.agents.append(self.headers.get("user-agent"))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._answer(b"{}")

    def do_GET(self):
        self._answer(json.dumps({"jobs": [], "next_cursor": None}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def target():
    srv = _Target()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()


def test_a_target_sees_the_executor_as_tempo(fresh_server, target):
    with httpx.Client(base_url=fresh_server.url, timeout=10) as client:
        job = client.post("/v1/jobs", json={
            "target": f"{target.url}/hook", "schedule": {"at": datetime.now(UTC).isoformat()},
        }).json()
        deadline_s = time.monotonic() + 15
        while (runs := client.get(f"/v1/jobs/{job['id']}/runs").json()["runs"])[0]["status"] != "done":
            assert time.monotonic() < deadline_s, runs
            time.sleep(0.1)
    assert target.agents == [EXPECTED]


def test_the_client_names_itself_tempo(target):
    with Client(target.url) as client:
        client.request("GET", "/v1/jobs")
    assert target.agents == [EXPECTED]
