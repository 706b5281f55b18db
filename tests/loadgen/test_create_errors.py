"""How `tempo loadgen` names a failed creation: by the kind of failure (a
refused batch, an overrun), not by words that happen to stand in a server's
answer, and without the exception groups the creating tasks raise in."""

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import tempo_command

run_timeout_s = 60


class RefusingServer(BaseHTTPRequestHandler):
    """Ready, and answers every batch create 400 with a problem whose detail
    happens to say "overran"."""

    def do_GET(self) -> None:  # the name http.server calls
        self._answer(200 if self.path == "/readyz" else 404, {"status": "ok"}, "application/json")

    def do_POST(self) -> None:  # the name http.server calls
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path == "/v1/jobs/batch":
            problem = {"type": "about:blank", "title": "bad request", "status": 400,
                       "detail": "the queue overran its bound"}
            self._answer(400, problem, "application/problem+json")
        else:
            self._answer(404, {"status": 404}, "application/problem+json")

    def _answer(self, status: int, body: dict, kind: str) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), RefusingServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_refused_batch_is_reported_as_refused_even_when_its_text_says_overran(refusing_url: str) -> None:
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--url", refusing_url, "--jobs", "10", "--workers", "1",
         "--due-in-s", "20", "--no-report", "--no-progress"],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "tempo loadgen: POST /v1/jobs/batch answered 400: " in done.stderr, done.stderr
    assert "the queue overran its bound" in done.stderr, done.stderr
    assert "creation overran the due instant" not in done.stderr, done.stderr
    assert "ExceptionGroup" not in done.stderr, done.stderr


def test_an_overrun_says_how_many_jobs_were_created_and_what_to_change() -> None:
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--spawn", "1", "--jobs", "20000", "--due-in-s", "0.05",
         "--batch", "50", "--workers", "1", "--no-progress", "--no-report"],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "tempo loadgen: creation overran the due instant: " in done.stderr, done.stderr
    assert "jobs created in 0.05 s; give a larger --due-in-s" in done.stderr, done.stderr
    assert "ExceptionGroup" not in done.stderr, done.stderr
