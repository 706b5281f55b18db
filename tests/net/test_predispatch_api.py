"""Pre-dispatch over HTTP against a real `tempo serve` (docs/api.md
"POST /v1/claim", "POST /v1/starts"; docs/semantics.md "Pre-dispatch"):
`ahead_ms` on a claim, the server's time in its answer, and the leader's
word on whether a held run starts."""

import json
import time
from datetime import datetime

import httpx
import pytest

from conftest import job_body, unique
from problems import assert_problem
from tempo import clock, ids, limits


def _ms(iso: str) -> int:
    return clock.ms_from_datetime(datetime.fromisoformat(iso))


def _job_due_in(http: httpx.Client, seconds: float, **overrides) -> tuple[str, int]:
    queue = unique("q")
    due_ms = int(time.time() * 1000) + int(seconds * 1000)
    body = job_body(target=f"queue:{queue}", schedule={"at": clock.iso_from_ms(due_ms)}, **overrides)
    assert http.post("/v1/jobs", json=body).status_code == 201
    return queue, due_ms


@pytest.mark.parametrize("ahead", [-1, limits.claim_ahead_ms_max + 1, "5", 1.5, None])
def test_a_bad_ahead_ms_is_400_at_it(http: httpx.Client, ahead: object) -> None:
    body = {"worker": "w", "queues": ["q"], "ahead_ms": ahead}
    assert_problem(http.post("/v1/claim", json=body), 400, type_="validation", loc="ahead_ms")


def test_a_claim_without_ahead_ms_takes_no_run_before_its_due_time(http: httpx.Client) -> None:
    queue, _ = _job_due_in(http, 3)
    answer = http.post("/v1/claim", json={"worker": "w", "queues": [queue]})
    assert answer.status_code == 200 and answer.json() == {"runs": []}
    answer = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "ahead_ms": 0})
    assert answer.json() == {"runs": []}


def test_a_claim_ahead_hands_out_the_run_with_its_due_time_and_the_servers_time(http: httpx.Client) -> None:
    queue, due_ms = _job_due_in(http, 3, lease_s=30)
    before_ms = int(time.time() * 1000)
    answer = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "ahead_ms": 5000, "wait_s": 5}).json()
    after_ms = int(time.time() * 1000)
    [run] = answer["runs"]
    assert _ms(run["due_at"]) == due_ms
    assert run["status"] == "claimed" and run["attempt"] == 1
    assert _ms(run["lease_expires_at"]) == due_ms + 30_000
    server_ms = _ms(answer["server_time"])
    assert before_ms - 1000 <= server_ms <= after_ms + 1000 and server_ms < due_ms


def test_a_repeated_claim_key_keeps_the_lease_from_the_due_time(http: httpx.Client) -> None:
    queue, due_ms = _job_due_in(http, 4, lease_s=30)
    body = {"worker": "w", "queues": [queue], "ahead_ms": 6000, "claim_key": unique("ck")}
    [first] = http.post("/v1/claim", json=body).json()["runs"]
    [again] = http.post("/v1/claim", json=body).json()["runs"]
    assert again["id"] == first["id"] and again["attempt"] == 1
    assert abs(_ms(again["lease_expires_at"]) - (due_ms + 30_000)) <= 200


def test_starts_answers_no_earlier_than_the_stop_point_and_says_start(http: httpx.Client) -> None:
    queue, due_ms = _job_due_in(http, 2)
    [run] = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "ahead_ms": 5000}).json()["runs"]
    body = {"worker": "w", "runs": [{"run_id": run["id"], "attempt": 1}]}
    answer = http.post("/v1/starts", json=body)
    answered_ms = int(time.time() * 1000)
    assert answer.status_code == 200 and answer.json() == {"start": [run["id"]], "stop": []}
    assert answered_ms >= due_ms - limits.predispatch_stop_ms - 50  # the clocks are one machine's


@pytest.mark.parametrize("action", ["cancel", "pause", "delete"])
def test_a_stop_before_the_stop_point_means_the_held_run_does_not_start(http: httpx.Client, action: str) -> None:
    queue, _ = _job_due_in(http, 2)
    [run] = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "ahead_ms": 5000}).json()["runs"]
    if action == "cancel":
        done = http.post(f"/v1/runs/{run['id']}/cancel")
        assert done.status_code == 200 and done.json()["status"] == "cancelled", done.text
    elif action == "pause":
        assert http.post(f"/v1/jobs/{run['job_id']}/pause").status_code == 200
    else:
        assert http.delete(f"/v1/jobs/{run['job_id']}").status_code == 204
    body = {"worker": "w", "runs": [{"run_id": run["id"], "attempt": 1}]}
    assert http.post("/v1/starts", json=body).json() == {"start": [], "stop": [run["id"]]}


def test_a_one_off_moved_later_while_held_runs_once_at_its_new_time(http: httpx.Client) -> None:
    # Pre-dispatch changes when a run is handed out, never which slots run
    # (docs/semantics.md "Pre-dispatch": a patch that moves the schedule).
    queue, due_ms = _job_due_in(http, 3)
    [held] = http.post("/v1/claim", json={"worker": "w1", "queues": [queue], "ahead_ms": 5000}).json()["runs"]
    new_ms = due_ms + 2000
    patched = http.patch(f"/v1/jobs/{held['job_id']}", json={"schedule": {"at": clock.iso_from_ms(new_ms)}},
                         headers={"content-type": "application/merge-patch+json"})
    assert patched.status_code == 200, patched.text
    body = {"worker": "w1", "runs": [{"run_id": held["id"], "attempt": 1}]}
    assert http.post("/v1/starts", json=body).json() == {"start": [], "stop": [held["id"]]}
    runs = http.get(f"/v1/jobs/{held['job_id']}/runs").json()["runs"]
    assert sorted((_ms(r["nominal_at"]), r["status"]) for r in runs) == [(due_ms, "cancelled"), (new_ms, "waiting")]
    claimed = http.post("/v1/claim", json={"worker": "w2", "queues": [queue], "max_runs": 10, "wait_s": 6}).json()["runs"]
    assert [(r["id"], _ms(r["due_at"])) for r in claimed] == [(ids.run_id(held["job_id"], new_ms), new_ms)]


@pytest.mark.parametrize(("body", "loc"), [
    ({"runs": [{"run_id": "r_x", "attempt": 1}]}, "worker"),
    ({"worker": "w", "runs": []}, "runs"),
    ({"worker": "w", "runs": [{"run_id": "r_x", "attempt": 1}] * (limits.starts_runs_max + 1)}, "runs"),
    ({"worker": "w", "runs": [{"run_id": "r_x", "attempt": 1}], "wait_s": 1}, "wait_s"),
])
def test_bad_starts_input_is_400_at_its_field(http: httpx.Client, body: dict, loc: str) -> None:
    assert_problem(http.post("/v1/starts", json=body), 400, type_="validation", loc=loc)


def test_a_call_may_name_a_wave_of_ten_thousand_runs(http: httpx.Client) -> None:
    # A worker asks for a whole wave at once, in fewer calls than it has
    # connections (docs/api.md "POST /v1/starts"): 10,000 runs in JSON as
    # Python writes it, spaces and all, fit the body limit.
    run_ids = [f"r_{ids.job_id_from_int(1_700_000_000_000, i)[2:]}{'0' * ids.NOMINAL_CHARS}" for i in range(10_000)]
    body = json.dumps({"worker": "w", "runs": [{"run_id": r, "attempt": 999} for r in run_ids]})
    answer = http.post("/v1/starts", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json() == {"start": [], "stop": run_ids}


def test_unknown_runs_do_not_start(http: httpx.Client) -> None:
    body = {"worker": "w", "runs": [{"run_id": "r_bogus", "attempt": 1}]}
    assert http.post("/v1/starts", json=body).json() == {"start": [], "stop": ["r_bogus"]}
