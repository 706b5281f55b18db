"""The HTTP executor aborts a delivery at the attempt's timeout, and when the
run is cancelled (docs/semantics.md "Run timeouts", "Cancelling a run"),
against a real `tempo serve` and a slow local target."""

import threading
import time

import httpx
import trio

from conftest import Arrival, endpoint, job_body
from tempo.engine.dispatch import ClaimedRun
from tempo.engine.records import Job, Run, Schedule
from tempo.net.executor import HttpExecutor

EVENTUALLY_S = 20.0  # well under the 60 s the slow target takes, and the 120 s lease
SLOW_S = 60.0


def _slow(release: threading.Event):
    def answer(arrival: Arrival) -> tuple[int, bytes]:
        release.wait(SLOW_S)
        return 200, b""

    return answer


def _run_when(http: httpx.Client, job_id: str, status: str) -> dict:
    deadline_s = time.monotonic() + EVENTUALLY_S
    while True:
        runs = http.get(f"/v1/jobs/{job_id}/runs").json()["runs"]
        if runs and runs[0]["status"] == status:
            return runs[0]
        assert time.monotonic() < deadline_s, f"the run is {runs[0]['status'] if runs else None}, not {status}"
        time.sleep(0.05)


def test_a_delivery_is_aborted_at_the_timeout(http: httpx.Client) -> None:
    release = threading.Event()
    with endpoint(_slow(release)) as target:
        try:
            job = http.post("/v1/jobs", json=job_body(
                target=target.url + "/slow", schedule={"at": "2020-01-01T00:00:00Z"}, timeout_s=1, lease_s=120,
                retry={"max_attempts": 1, "backoff_s": [0]},
            )).json()
            run = _run_when(http, job["id"], "failed")
        finally:
            release.set()
    assert run["error"] == "timeout"
    assert len(target.seen) == 1


def test_a_delivery_is_aborted_when_its_run_is_cancelled(http: httpx.Client) -> None:
    release = threading.Event()
    with endpoint(_slow(release)) as target:
        try:
            job = http.post("/v1/jobs", json=job_body(
                target=target.url + "/slow", schedule={"at": "2020-01-01T00:00:00Z"}, lease_s=120,
                retry={"max_attempts": 3, "backoff_s": [0]},
            )).json()
            claimed = _run_when(http, job["id"], "claimed")
            deadline_s = time.monotonic() + EVENTUALLY_S
            while not target.seen:  # the request is in flight
                assert time.monotonic() < deadline_s
                time.sleep(0.05)
            assert http.post(f"/v1/runs/{claimed['id']}/cancel").json()["cancel_requested"] is True
            run = _run_when(http, job["id"], "cancelled")
        finally:
            release.set()
    assert run["attempt"] == 1
    detail = http.get(f"/v1/runs/{run['id']}").json()
    assert detail["attempts"][0]["error"].startswith("cancelled")


# -- the executor alone, on a fake dispatcher: it aborts by itself ------------------

JOB_ID = "j_01H0000000000000000000000A"
NOW_MS = 1_800_000_000_000


class _Dispatcher:
    """What `HttpExecutor._deliver` uses of the dispatcher: its clock and report()."""

    def __init__(self) -> None:
        self.results: list = []

    def now_ms(self) -> int:
        return NOW_MS

    async def report(self, owner, results):
        self.results += results
        return [None] * len(results)


def _claimed(url: str, timeout_at_ms: int | None) -> ClaimedRun:
    job = Job(JOB_ID, "default", None, url, None, Schedule(at_ms=0), 4, (10,), 120, 0, "active", 0, None, 0, 0)
    return ClaimedRun(Run(JOB_ID, 0, 0, "claimed", attempt=1, timeout_at_ms=timeout_at_ms), job)


async def test_the_executor_aborts_its_request_at_the_timeout() -> None:
    release = threading.Event()
    with endpoint(_slow(release)) as target:
        dispatcher = _Dispatcher()
        executor = HttpExecutor(dispatcher)  # type: ignore[arg-type] - only now_ms() and report() are used
        executor.in_flight = 1
        started_s = time.monotonic()
        try:
            with trio.fail_after(EVENTUALLY_S):
                async with httpx.AsyncClient() as client:
                    await executor._deliver(client, _claimed(target.url, NOW_MS + 500))
        finally:
            release.set()
    [result] = dispatcher.results
    assert not result.ok and result.error == "timeout"
    assert time.monotonic() - started_s < EVENTUALLY_S


async def test_the_executor_aborts_its_request_when_its_run_is_asked_to_stop() -> None:
    release = threading.Event()
    with endpoint(_slow(release)) as target:
        dispatcher = _Dispatcher()
        executor = HttpExecutor(dispatcher)  # type: ignore[arg-type] - only now_ms() and report() are used
        executor.in_flight = 1
        executor._scopes[(JOB_ID, 0)] = (1, trio.CancelScope())
        try:
            async with httpx.AsyncClient() as client, trio.open_nursery() as nursery:
                nursery.start_soon(executor._deliver, client, _claimed(target.url, None))
                with trio.fail_after(EVENTUALLY_S):
                    while not target.seen:
                        await trio.sleep(0.02)
                executor._stop([(JOB_ID, 0), ("j_other", 5)])
        finally:
            release.set()
    [result] = dispatcher.results
    assert not result.ok and result.error.startswith("cancelled")
    assert executor._scopes == {} and executor.in_flight == 0
