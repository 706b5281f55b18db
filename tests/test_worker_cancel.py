"""The worker side of run timeouts and cancels (docs/semantics.md "Run
timeouts", "Cancelling a run"): the `tempo.worker` library cancels the
handler's task scope when a heartbeat answer says `cancel`, and `tempo
worker` sends its command SIGTERM."""

from pathlib import Path

import httpx
import pytest
import trio

from conftest import Server, unique
from tempo.worker import Worker
from test_worker import _cli_worker, _stop_cli_worker, create, now_iso, wait_for_status

EVENTUALLY_S = 20.0  # generous: a heartbeat comes at lease_s/3, the lease check within a second


async def _run_id_when_claimed(server: Server, job_id: str) -> str:
    run = await wait_for_status(server, job_id, "claimed", EVENTUALLY_S)
    return run["id"]


async def test_a_cancelled_run_has_its_handler_cancelled_and_its_result_recorded_cancelled(server: Server) -> None:
    queue = unique("q")
    job = create(server, queue, lease_s=3, retry={"max_attempts": 3, "backoff_s": [0]})
    started, cancelled = trio.Event(), trio.Event()

    async def handler(run: dict) -> str:
        started.set()
        try:
            await trio.sleep(60)
        finally:
            cancelled.set()
        return "never"

    worker = Worker([server.url], "w-cancel", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(EVENTUALLY_S):
            await started.wait()
        run_id = await _run_id_when_claimed(server, job["id"])
        asked = httpx.post(f"{server.url}/v1/runs/{run_id}/cancel", timeout=10)
        assert asked.status_code == 200 and asked.json()["cancel_requested"] is True
        with trio.fail_after(EVENTUALLY_S):
            await cancelled.wait()
        run = await wait_for_status(server, job["id"], "cancelled", EVENTUALLY_S)
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert run["attempt"] == 1  # no retry, though attempts were left
    detail = httpx.get(f"{server.url}/v1/runs/{run_id}", timeout=10).json()
    assert detail["attempts"][0]["error"].startswith("cancelled")
    assert worker.counts["failed"] == 1 and worker.counts["lost"] == 0


async def test_a_timeout_cancels_the_handler_and_sends_no_result(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    queue = unique("q")
    job = create(server, queue, lease_s=30, timeout_s=1, retry={"max_attempts": 1, "backoff_s": [0]})
    cancelled = trio.Event()

    async def handler(run: dict) -> str:
        assert run["timeout_s"] == 1
        try:
            await trio.sleep(60)
        finally:
            cancelled.set()
        return "never"

    worker = Worker([server.url], "w-timeout", {queue: handler}, wait_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        # Its lease is 30 s: what ends the handler well before is the timeout.
        with trio.fail_after(EVENTUALLY_S):
            await cancelled.wait()
        run = await wait_for_status(server, job["id"], "failed", EVENTUALLY_S)
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert run["error"] == "timeout"
    assert worker.counts["lost"] == 1 and worker.counts["failed"] == 0 and worker.counts["rejected"] == 0
    # Two lines: why the handler is cancelled, and the attempt's end.
    lines = [r.getMessage() for r in caplog.records if r.name == "tempo.worker" and run["id"] in r.getMessage()]
    assert len(lines) == 2 and "lost (timeout)" in lines[0] and " lost in " in lines[1], lines


async def test_tempo_worker_sends_its_command_sigterm_on_a_cancel(server: Server, tmp_path: Path) -> None:
    queue = unique("q")
    job = create(server, queue, lease_s=3, schedule={"at": now_iso()})
    marker = tmp_path / "term"
    script = f'trap "echo got-term > {marker}; exit 0" TERM; echo started; while true; do sleep 0.05; done'
    proc = _cli_worker(server, queue, "sh", "-c", script)
    try:
        run_id = await _run_id_when_claimed(server, job["id"])
        httpx.post(f"{server.url}/v1/runs/{run_id}/cancel", timeout=10).raise_for_status()
        run = await wait_for_status(server, job["id"], "cancelled", EVENTUALLY_S)
    finally:
        _stop_cli_worker(proc)
    assert marker.read_text().strip() == "got-term"
    assert run["attempt"] == 1
