"""Pre-dispatch at the worker against a real `tempo serve` (docs/semantics.md
"Pre-dispatch"): runs claimed ahead of their due time start at it; a
cancel or a pause acknowledged more than 100 ms before it means the run
never starts, in the `tempo.worker` library and in `tempo worker`."""

import gc
import subprocess
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import trio

from conftest import Server, tempo_command, unique
from tempo.worker import Worker

from .test_worker import _stop_cli_worker, runs_of, wait_for_status

DUE_IN_S = 3.0
EVENTUALLY_S = 20.0


def _iso(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, UTC).isoformat(timespec="milliseconds")


def _create_due(server: Server, queue: str, due_s: float) -> dict:
    body = {"target": f"queue:{queue}", "schedule": {"at": _iso(due_s)}}
    response = httpx.post(f"{server.url}/v1/jobs", json=body, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()


async def _wait_claimed(server: Server, job_ids: list[str]) -> list[dict]:
    return [await wait_for_status(server, job_id, "claimed", EVENTUALLY_S) for job_id in job_ids]


async def test_held_runs_start_at_their_due_time_unless_stopped_before(server: Server) -> None:
    queue = unique("q")
    due_s = time.time() + DUE_IN_S
    cancelled, paused, kept = (_create_due(server, queue, due_s) for _ in range(3))
    started: dict[str, float] = {}

    async def handler(run: dict) -> str:
        started[run["job_id"]] = time.time()
        return "ran"

    worker = Worker([server.url], "w-ahead", {queue: handler}, wait_s=1, ahead_ms=5000)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        runs = await _wait_claimed(server, [cancelled["id"], paused["id"], kept["id"]])
        assert time.time() < due_s - 1, "claimed ahead, with time to stop two of them"
        assert started == {}
        asked = httpx.post(f"{server.url}/v1/runs/{runs[0]['id']}/cancel", timeout=10)
        assert asked.status_code == 200 and asked.json()["status"] == "cancelled", asked.text
        assert httpx.post(f"{server.url}/v1/jobs/{paused['id']}/pause", timeout=10).status_code == 200
        done = await wait_for_status(server, kept["id"], "done", EVENTUALLY_S)
        await trio.sleep(0.5)
        with trio.fail_after(10):
            await worker.stop(grace_s=1)
    assert list(started) == [kept["id"]]
    assert due_s - 0.05 <= started[kept["id"]] < due_s + 1.0
    assert done["attempt"] == 1 and done["output"] == "ran"
    assert worker.counts["not_started"] == 2 and worker.counts["ok"] == 1
    assert [r["status"] for r in runs_of(server, cancelled["id"])] == ["cancelled"]
    assert [r["status"] for r in runs_of(server, paused["id"])] == ["cancelled"]


def _cli_worker_ahead(server: Server, queue: str, *command: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*tempo_command(), "worker", "--url", server.url, "--queue", queue, "--concurrency", "4", "--ahead-ms", "5000",
         "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


async def test_tempo_worker_never_starts_a_command_cancelled_before_its_due_time(server: Server, tmp_path: Path) -> None:
    queue = unique("q")
    due_s = time.time() + DUE_IN_S
    cancelled, kept = (_create_due(server, queue, due_s) for _ in range(2))
    marks = tmp_path / "marks"
    marks.mkdir()
    # Each run the command starts leaves a file named after its job.
    script = f'import os, pathlib; pathlib.Path("{marks}", os.environ["TEMPO_JOB_ID"]).touch()'
    proc = _cli_worker_ahead(server, queue, "python3", "-c", script)
    try:
        runs = await _wait_claimed(server, [cancelled["id"], kept["id"]])
        assert time.time() < due_s - 1
        asked = httpx.post(f"{server.url}/v1/runs/{runs[0]['id']}/cancel", timeout=10)
        assert asked.status_code == 200 and asked.json()["status"] == "cancelled", asked.text
        await wait_for_status(server, kept["id"], "done", EVENTUALLY_S)
        await trio.sleep(0.5)
    finally:
        _stop_cli_worker(proc)
    assert sorted(p.name for p in marks.iterdir()) == [kept["id"]]


def _wave_worker(server: Server, name: str, queue: str, handler: Callable[[dict], Awaitable[None]]) -> Worker:
    """A worker that holds the 20 runs of a wave (claims 5 s ahead)."""
    return Worker([server.url], name, {queue: handler}, wait_s=1, ahead_ms=5000, concurrency=20)


async def _run_until_done(server: Server, worker: Worker, jobs: list[dict]) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for job in jobs:
            await wait_for_status(server, job["id"], "done", EVENTUALLY_S)
        with trio.fail_after(10):
            await worker.stop(grace_s=1)


async def test_every_handler_of_a_wave_starts_before_any_result_is_filed(server: Server) -> None:
    """Held runs due at one instant start on one event: a handler that
    returns at once does not make the next one of the wave wait for its
    result's bookkeeping (docs/semantics.md "Pre-dispatch")."""
    queue = unique("q")
    due_s = time.time() + DUE_IN_S
    jobs = [_create_due(server, queue, due_s) for _ in range(20)]
    finished_before: dict[str, int] = {}
    started_at: list[float] = []

    async def handler(run: dict) -> None:
        started_at.append(time.time())
        finished_before[run["job_id"]] = worker.counts["ok"]

    worker = _wave_worker(server, "w-wave", queue, handler)
    await _run_until_done(server, worker, jobs)
    assert worker.counts["ok"] == 20
    assert finished_before == {job["id"]: 0 for job in jobs}, sorted(finished_before.values())


async def test_the_cycle_collector_is_held_off_while_a_wave_wakes_and_back_after(server: Server) -> None:
    """A wave's tasks wake with the collector off, so no full collection
    lands among them; it is on again once they have (docs/semantics.md
    "Pre-dispatch")."""
    queue = unique("q")
    due_s = time.time() + DUE_IN_S
    jobs = [_create_due(server, queue, due_s) for _ in range(20)]
    collector_on: list[bool] = []

    async def handler(run: dict) -> None:
        collector_on.append(gc.isenabled())

    assert gc.isenabled()
    worker = _wave_worker(server, "w-gc", queue, handler)
    await _run_until_done(server, worker, jobs)
    assert collector_on == [False] * 20
    assert gc.isenabled()
