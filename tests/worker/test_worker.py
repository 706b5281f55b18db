"""tempo.worker and `tempo worker` against a real `tempo serve` process."""

import json
import signal
import subprocess
import time
from datetime import UTC, datetime

import httpx
import pytest
import trio

from conftest import Server, tempo_command, unique
from tempo.worker import Worker, clip_text

wait_timeout_s = 15.0


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def create(server: Server, queue: str, **extra) -> dict:
    body = {"target": f"queue:{queue}", "schedule": {"at": now_iso()}} | extra
    response = httpx.post(f"{server.url}/v1/jobs", json=body, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()


def runs_of(server: Server, job_id: str) -> list[dict]:
    response = httpx.get(f"{server.url}/v1/jobs/{job_id}/runs", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["runs"]


async def wait_for_status(server: Server, job_id: str, status: str, timeout_s: float = wait_timeout_s) -> dict:
    with trio.fail_after(timeout_s):
        while True:
            runs = runs_of(server, job_id)
            if runs and runs[0]["status"] == status:
                return runs[0]
            await trio.sleep(0.05)


async def test_handler_output_lands_as_done(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue, payload={"n": 3})
    seen = []

    async def handler(run: dict) -> str:
        seen.append(run)
        return f"n={run['payload']['n']}"

    worker = Worker([server.url], "w-done", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        run = await wait_for_status(server, job["id"], "done")
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert run["output"] == "n=3"
    assert run["attempt"] == 1 and run["worker"] == "w-done"
    assert [r["job_id"] for r in seen] == [job["id"]]
    assert worker.counts["ok"] == 1


async def test_raising_handler_is_retried_after_backoff(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue, retry={"max_attempts": 2, "backoff_s": [1]})
    attempts: list[tuple[int, float]] = []

    async def handler(run: dict) -> None:
        attempts.append((run["attempt"], time.monotonic()))
        raise ValueError(f"boom {run['attempt']}")

    worker = Worker([server.url], "w-fail", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        run = await wait_for_status(server, job["id"], "failed")
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert [a for a, _ in attempts] == [1, 2]
    assert attempts[1][1] - attempts[0][1] >= 0.9  # backoff_s[0] = 1, to the millisecond
    assert run["attempt"] == 2
    assert "ValueError: boom 2" in run["error"]


async def test_heartbeats_hold_a_run_past_its_lease(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue, lease_s=1)
    claims = []

    async def handler(run: dict) -> str:
        claims.append(run["attempt"])
        await trio.sleep(3.5)  # over three leases
        return "slow"

    worker = Worker([server.url], "w-slow", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        run = await wait_for_status(server, job["id"], "done")
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert claims == [1]
    assert run["attempt"] == 1 and run["output"] == "slow"


async def test_deleted_job_cancels_its_handler(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue, lease_s=1)
    started, cancelled = trio.Event(), trio.Event()

    async def handler(run: dict) -> str:
        started.set()
        try:
            await trio.sleep(30)
        finally:
            cancelled.set()
        return "never"

    worker = Worker([server.url], "w-del", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(wait_timeout_s):
            await started.wait()
        assert httpx.delete(f"{server.url}/v1/jobs/{job['id']}", timeout=10).status_code == 204
        with trio.fail_after(5):  # the next heartbeat, at lease_s/3, answers not_found
            await cancelled.wait()
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert worker.counts["lost"] == 1 and worker.counts["ok"] == 0


async def test_stop_past_grace_reports_failure(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue, retry={"max_attempts": 1, "backoff_s": [1]})
    started = trio.Event()

    async def handler(run: dict) -> None:
        started.set()
        await trio.sleep(30)

    worker = Worker([server.url], "w-stop", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(wait_timeout_s):
            await started.wait()
        with trio.fail_after(10):
            await worker.stop(grace_s=0.2)
    run = await wait_for_status(server, job["id"], "failed", timeout_s=5)
    assert "worker stopped" in run["error"]


async def test_unreachable_url_is_skipped(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue)

    async def handler(run: dict) -> str:
        return "ok"

    # The first URL refuses connections; the worker moves on to the second.
    worker = Worker(["http://127.0.0.1:9", server.url], "w-failover", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_for_status(server, job["id"], "done")
        with trio.fail_after(10):
            await worker.stop(grace_s=1)


def test_clip_text_notes_the_cut() -> None:
    assert clip_text("short") == "short"
    clipped = clip_text("é" * 100_000)
    assert len(clipped.encode()) <= 64 << 10
    assert clipped.endswith("[tempo: truncated, 200000 bytes in all]")


def _cli_worker(server: Server, queue: str, *command: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*tempo_command(), "worker", "--url", server.url, "--queue", queue, "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def _stop_cli_worker(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=5)
        pytest.fail(f"tempo worker did not stop on SIGTERM: {out.decode(errors='replace')}")
    assert proc.returncode == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


async def test_cli_worker_gives_payload_and_env(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue, payload={"x": [1, "two"]})
    proc = _cli_worker(server, queue, "sh", "-c", 'cat; echo "$TEMPO_RUN_ID $TEMPO_ATTEMPT $TEMPO_JOB_ID"')
    try:
        run = await wait_for_status(server, job["id"], "done")
    finally:
        _stop_cli_worker(proc)
    payload_line, env_line = run["output"].splitlines()
    assert json.loads(payload_line) == {"x": [1, "two"]}
    assert env_line == f"{run['id']} 1 {job['id']}"


async def test_cli_worker_reports_exit_status_and_stderr(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue, retry={"max_attempts": 1, "backoff_s": [1]})
    proc = _cli_worker(server, queue, "sh", "-c", "echo to-stdout; echo it broke >&2; exit 3")
    try:
        run = await wait_for_status(server, job["id"], "failed")
    finally:
        _stop_cli_worker(proc)
    assert run["error"].startswith("CommandFailed: exit status 3")
    assert run["error"].endswith("it broke")


def test_cli_worker_exits_2_on_a_refused_claim(server: Server) -> None:
    # A queue name outside A-Z a-z 0-9 . _ - makes the claim a 400: no retry fixes that.
    done = subprocess.run(
        [*tempo_command(), "worker", "--url", server.url, "--queue", "no spaces!", "--", "true"],
        capture_output=True, text=True, timeout=20,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "POST /v1/claim answered 400" in done.stderr


async def test_worker_reconnects_after_server_restart(fresh_server: Server) -> None:
    queue = unique("q")

    async def handler(run: dict) -> str:
        return "after restart"

    fresh_server.stop()
    worker = Worker([fresh_server.url], "w-restart", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await trio.sleep(0.5)  # a few refused claims, backing off
        await trio.to_thread.run_sync(fresh_server.start)
        job = create(fresh_server, queue)
        run = await wait_for_status(fresh_server, job["id"], "done")
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert run["output"] == "after restart"


class _Fake:
    """A thread HTTP server answering every POST with one fixed status."""

    def __init__(self, status: int, location: str | None = None):
        import http.server
        import threading

        fake = self
        self.hits = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                fake.hits += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                if location:
                    self.send_header("Location", location + self.path)
                if status == 503:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


async def test_follows_307_and_skips_503(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue)
    no_leader, follower = _Fake(503), _Fake(307, location=server.url)

    async def handler(run: dict) -> str:
        return "via redirect"

    try:
        worker = Worker([no_leader.url, follower.url], "w-307", {queue: handler}, wait_s=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            run = await wait_for_status(server, job["id"], "done")
            with trio.fail_after(10):
                await worker.stop(grace_s=1)
    finally:
        no_leader.close()
        follower.close()
    assert run["output"] == "via redirect"
    assert no_leader.hits >= 1 and follower.hits >= 1
    # The leader a redirect named is asked first from then on.
    assert worker.transport.urls[worker.transport._index] == server.url


async def test_cli_worker_kills_the_command_when_the_lease_is_lost(server: Server, tmp_path) -> None:
    import os

    queue = unique("q")
    job = create(server, queue, lease_s=1)
    pid_file = tmp_path / "pid"
    proc = _cli_worker(server, queue, "sh", "-c", f"echo $$ > {pid_file}; exec sleep 30")
    try:
        with trio.fail_after(wait_timeout_s):
            while not pid_file.exists() or not pid_file.read_text().strip():
                await trio.sleep(0.05)
        pid = int(pid_file.read_text())
        assert httpx.delete(f"{server.url}/v1/jobs/{job['id']}", timeout=10).status_code == 204
        with trio.fail_after(5):  # the next heartbeat answers not_found; the command dies
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                await trio.sleep(0.05)
    finally:
        _stop_cli_worker(proc)


async def test_concurrency_bounds_running_handlers(server: Server) -> None:
    queue = unique("q")
    jobs = [create(server, queue) for _ in range(6)]
    running, peak = [0], [0]

    async def handler(run: dict) -> str:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await trio.sleep(0.2)
        running[0] -= 1
        return "ok"

    worker = Worker([server.url], "w-conc", {queue: handler}, max_runs=10, concurrency=2, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for job in jobs:
            await wait_for_status(server, job["id"], "done")
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert peak[0] == 2 and worker.counts["ok"] == 6


async def test_a_refused_result_does_not_block_the_others(server: Server, monkeypatch) -> None:
    import tempo.worker

    monkeypatch.setattr(tempo.worker, "clip_text", lambda text, *args: text)  # let 70 KB through
    queue = unique("q")
    big, fine = create(server, queue, payload="big"), create(server, queue, payload="fine")

    async def handler(run: dict) -> str:
        return "x" * 70_000 if run["payload"] == "big" else "fine"

    worker = Worker([server.url], "w-413", {queue: handler}, max_runs=2, concurrency=2, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        run = await wait_for_status(server, fine["id"], "done")
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert run["output"] == "fine"
    assert runs_of(server, big["id"])[0]["status"] == "claimed"  # its result was dropped
    assert worker.counts["rejected"] >= 1


def test_clip_text_replaces_lone_surrogates() -> None:
    assert clip_text("a\ud800b") == "a?b"
