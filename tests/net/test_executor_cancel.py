"""The HTTP executor aborts a delivery at the attempt's timeout, and when the
run is cancelled (docs/semantics.md "Run timeouts", "Cancelling a run"),
against a real `tempo serve` and a slow local target."""

import threading
import time

import httpx

from conftest import Arrival, endpoint, job_body

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
