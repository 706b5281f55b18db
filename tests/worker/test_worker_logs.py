"""`tempo worker` and tempo.worker say what they do: a start line, a line
per run, losing and regaining the server, and the shutdown; text or JSON."""

import http.server
import json
import logging
import re
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime

import httpx
import pytest
import trio

from conftest import Server, tempo_command, unique
from tempo.net.agent import USER_AGENT
from tempo.worker import Worker, WorkerError

wait_timeout_s = 15.0


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def create(server: Server, queue: str, **extra: object) -> dict[str, str]:
    body = {"target": f"queue:{queue}", "schedule": {"at": now_iso()}} | extra
    response = httpx.post(f"{server.url}/v1/jobs", json=body, timeout=10)
    assert response.status_code == 201, response.text
    job: dict[str, str] = response.json()
    return job


def first_run(server: Server, job_id: str) -> dict[str, str]:
    with httpx.Client(timeout=10) as http:
        deadline_s = time.monotonic() + wait_timeout_s
        while time.monotonic() < deadline_s:
            runs = http.get(f"{server.url}/v1/jobs/{job_id}/runs").json()["runs"]
            if runs and runs[0]["status"] in ("done", "failed"):
                run: dict[str, str] = runs[0]
                return run
            time.sleep(0.05)
    pytest.fail(f"job {job_id}: no finished run within {wait_timeout_s} s")


async def wait_for_message(caplog: pytest.LogCaptureFixture, pattern: str) -> logging.LogRecord:
    with trio.fail_after(wait_timeout_s):
        while True:
            for record in caplog.records:
                if record.name == "tempo.worker" and re.search(pattern, record.getMessage()):
                    return record
            await trio.sleep(0.05)


async def test_the_worker_logs_start_runs_outage_and_shutdown(
    fresh_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tempo.worker")
    queue = unique("q")

    async def handler(run: dict[str, object]) -> str:
        if run.get("payload") == "fail":
            raise RuntimeError("it broke")
        return "fine"

    worker = Worker([fresh_server.url], "w-logs", {queue: handler}, concurrency=2, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        start = await wait_for_message(caplog, "start")
        assert fresh_server.url in start.getMessage() and queue in start.getMessage()
        assert "concurrency 2" in start.getMessage() and "w-logs" in start.getMessage()

        good = create(fresh_server, queue)
        bad = create(fresh_server, queue, payload="fail", retry={"max_attempts": 1})
        good_run = await trio.to_thread.run_sync(first_run, fresh_server, good["id"])
        bad_run = await trio.to_thread.run_sync(first_run, fresh_server, bad["id"])
        ok = await wait_for_message(caplog, f"run {good_run['id']} attempt 1 ok in [0-9.]+ s")
        failed = await wait_for_message(caplog, f"run {bad_run['id']} attempt 1 failed in [0-9.]+ s: RuntimeError: it broke")
        assert ok.levelno == logging.INFO and failed.levelno == logging.WARNING
        assert vars(ok)["run_id"] == good_run["id"] and vars(ok)["outcome"] == "ok"

        await trio.to_thread.run_sync(fresh_server.kill)
        lost = await wait_for_message(caplog, "no server answers")
        assert lost.levelno == logging.WARNING and fresh_server.url in lost.getMessage()
        await trio.sleep(1.0)
        await trio.to_thread.run_sync(fresh_server.start)
        back = await wait_for_message(caplog, r"answers again after ([0-9.]+) s")
        match = re.search(r"after ([0-9.]+) s", back.getMessage())
        assert match is not None and float(match.group(1)) >= 1.0
        assert back.levelno == logging.INFO

        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    messages = [r.getMessage() for r in caplog.records if r.name == "tempo.worker"]
    assert any(m.startswith("stopping") for m in messages), messages
    assert any(re.match(r"stopped: 2 claimed, 1 ok, 1 failed, 0 lost", m) for m in messages), messages


async def test_the_worker_names_itself_tempo() -> None:
    agents: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            agents.append(self.headers.get("User-Agent", ""))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(400)  # a claim refused: the worker stops
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    async def nothing(run: dict[str, object]) -> None:
        return None

    try:
        worker = Worker([f"http://127.0.0.1:{httpd.server_address[1]}"], "w-ua", {"q": nothing}, wait_s=0)
        with pytest.raises(WorkerError), trio.fail_after(10):
            await worker.run()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert agents == [USER_AGENT]


def _worker(server: Server, queue: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*tempo_command(), "--url", server.url, "worker", "--queue", queue, "--worker-id", "w-cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> list[str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return err.splitlines()


def test_cli_worker_logs_json_lines(server: Server) -> None:
    queue = unique("q")
    proc = _worker(server, queue, "--log-format", "json", "--", "true")
    try:
        job = create(server, queue)
        run = first_run(server, job["id"])
    finally:
        lines = _stop(proc)
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert records[0]["logger"] == "tempo.worker" and "start" in records[0]["message"]
    done = next(r for r in records if r.get("run_id") == run["id"])
    assert done["level"] == "INFO" and done["attempt"] == 1 and done["outcome"] == "ok"
    assert done["worker"] == "w-cli" and done["duration_s"] >= 0
    assert any(r["message"].startswith("stopped") for r in records)


def test_cli_worker_text_lines_escape_what_the_command_wrote(server: Server) -> None:
    queue = unique("q")
    forged = "2030-01-01 00:00:00,000 tempo.worker INFO run forged attempt 1 ok"
    proc = _worker(server, queue, "--", "sh", "-c", f"echo 'broke\n{forged}' >&2; exit 1")
    try:
        job = create(server, queue, retry={"max_attempts": 1})
        run = first_run(server, job["id"])
    finally:
        lines = _stop(proc)
    assert not any(line.startswith(forged) for line in lines), lines
    line = next(line for line in lines if f"run {run['id']} attempt 1 failed" in line)
    assert "broke\\n2030-01-01" in line and " tempo.worker WARNING " in line


def test_runs_lost_at_one_tick_are_named_up_to_a_bound_and_counted_beyond(caplog: pytest.LogCaptureFixture) -> None:
    # A failover leaves thousands of held runs without a heartbeat at once:
    # the worker stops each one's handler, and says so in a few lines.
    from tempo.worker import _Active, lost_lines_max

    worker = Worker(["http://127.0.0.1:9"], "w-lost", {"q": lambda run: None})
    expired = {f"r_{i}": _Active({"id": f"r_{i}", "attempt": 1}, 10, 0.0, 5.0) for i in range(50)}
    still = _Active({"id": "r_kept", "attempt": 1}, 10, 0.0, 20.0)
    worker._active = expired | {"r_kept": still}
    worker._check_at_s = 0.0
    with caplog.at_level(logging.INFO, logger="tempo.worker"):
        worker._due_heartbeats(10.0)
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == lost_lines_max + 1, lines
    assert lines[-1] == "and 40 more runs lost (no heartbeat got through within the lease); cancelling their handlers"
    assert all(a.lost and a.cancel.cancel_called for a in expired.values())
    assert worker._active == {"r_kept": still} and not still.lost


async def test_the_heartbeat_tick_looks_at_the_runs_from_the_earliest_heartbeat_on() -> None:
    # A worker holding thousands of runs does not look at each one every
    # tick; a run started later with an earlier heartbeat is looked at from
    # its own, and a lease that runs out still stops its handler.
    from tempo.worker import heartbeat_tick_s

    async def block(run: dict) -> None:
        await trio.sleep_forever()

    worker = Worker(["http://127.0.0.1:9"], "w-tick", {"q": block})
    async with trio.open_nursery() as nursery:
        worker._handlers_nursery = nursery
        now_s = trio.current_time()
        worker._start({"id": "r_late", "attempt": 1, "target": "queue:q", "lease_s": 60})
        assert worker._due_heartbeats(now_s + 19) == [] and worker._check_at_s == pytest.approx(now_s + 20, abs=0.5)
        worker._start({"id": "r_soon", "attempt": 1, "target": "queue:q", "lease_s": 3})
        soon = worker._active["r_soon"]
        assert worker._due_heartbeats(now_s + 0.5) == []
        assert worker._due_heartbeats(now_s + 1 + heartbeat_tick_s) == [soon]  # its heartbeat, at lease_s / 3
        assert worker._due_heartbeats(now_s + 3 + heartbeat_tick_s) == []  # never answered: its lease ran out
        assert soon.lost and list(worker._active) == ["r_late"]
        nursery.cancel_scope.cancel()
