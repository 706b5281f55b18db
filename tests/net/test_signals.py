"""`POST /v1/signals` against a real `tempo serve`: a worker's long poll of
its runs, answered as soon as one is asked to stop (docs/api.md "Signals",
docs/semantics.md "Cancelling a run")."""

import threading
import time

import httpx
import pytest

from conftest import job_body, unique
from problems import assert_problem


def _claimed(http: httpx.Client, **overrides) -> dict:
    queue = unique("q")
    body = job_body(target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"}, **overrides)
    assert http.post("/v1/jobs", json=body).status_code == 201
    [run] = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 10}).json()["runs"]
    return run


def test_a_poll_answers_when_its_run_is_cancelled_and_not_before(http: httpx.Client) -> None:
    run = _claimed(http, lease_s=300)
    asked = {"worker": "w", "runs": [{"run_id": run["id"], "attempt": 1}]}
    started_s = time.monotonic()
    assert http.post("/v1/signals", json=asked | {"wait_s": 0.3}).json() == {"cancel": {}}
    assert time.monotonic() - started_s >= 0.3
    timer = threading.Timer(0.5, lambda: http.post(f"/v1/runs/{run['id']}/cancel").raise_for_status())
    started_s = time.monotonic()
    timer.start()
    try:
        answer = http.post("/v1/signals", json=asked | {"wait_s": 30})
    finally:
        timer.join()
    took_s = time.monotonic() - started_s
    assert answer.status_code == 200 and answer.json() == {"cancel": {run["id"]: "requested"}}
    assert 0.5 <= took_s < 1.5, took_s
    # Asked again, it answers at once; the lease was not extended by it.
    assert http.post("/v1/signals", json=asked | {"wait_s": 30}).json() == {"cancel": {run["id"]: "requested"}}
    # The worker that finished first reports ok: the run is done, as it happened.
    done = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True, "output": "sent"})
    assert done.status_code == 200 and done.json()["status"] == "done", done.text


def test_a_poll_answers_at_the_runs_timeout(http: httpx.Client) -> None:
    run = _claimed(http, lease_s=300, timeout_s=1, retry={"max_attempts": 1, "backoff_s": [0]})
    answer = http.post("/v1/signals", json={"worker": "w", "runs": [{"run_id": run["id"], "attempt": 1}], "wait_s": 30})
    assert answer.json() == {"cancel": {run["id"]: "timeout"}}
    assert http.get(f"/v1/runs/{run['id']}").json()["status"] in ("claimed", "failed")


@pytest.mark.parametrize(("body", "loc"), [
    ({"runs": [{"run_id": "r_x", "attempt": 1}]}, "worker"),
    ({"worker": "w"}, "runs"),
    ({"worker": "w", "runs": []}, "runs"),
    ({"worker": "w", "runs": [{"run_id": "r_x", "attempt": 1}], "wait_s": 61}, "wait_s"),
    ({"worker": "w", "runs": [{"run_id": "r_x", "attempt": -1}]}, "runs[0].attempt"),
    ({"worker": "w", "runs": [{"run_id": "r_x", "attempt": 1}], "lease": 1}, "lease"),
])
def test_bad_input_is_400_at_its_field(http: httpx.Client, body: dict, loc: str) -> None:
    assert_problem(http.post("/v1/signals", json=body), 400, type_="validation", loc=loc)


def test_unknown_runs_and_stale_attempts_are_not_its_business(http: httpx.Client) -> None:
    run = _claimed(http)
    body = {"worker": "w", "runs": [{"run_id": "r_bogus", "attempt": 1}, {"run_id": run["id"], "attempt": 9}]}
    assert http.post("/v1/signals", json=body | {"wait_s": 0}).json() == {"cancel": {}}
