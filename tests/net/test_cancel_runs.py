"""Run timeouts (`timeout_s`) and `POST /v1/runs/{id}/cancel` against a real
`tempo serve` (docs/api.md "Cancel a run", "Heartbeats"; docs/semantics.md
"Run timeouts", "Cancelling a run")."""

import re

import httpx
import pytest

from conftest import configured_server, job_body, tokens_config, unique, wait_for

MERGE = {"content-type": "application/merge-patch+json"}
EVENTUALLY_S = 20.0  # a generous bound for what the lease check does within a second or two


def _create(http: httpx.Client, **overrides) -> dict:
    answer = http.post("/v1/jobs", json=job_body(**overrides))
    assert answer.status_code == 201, answer.text
    return answer.json()


def _claim_one(http: httpx.Client, queue: str) -> dict:
    [run] = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 10}).json()["runs"]
    return run

AUDIT = ("job.created", "job.updated", "job.paused", "job.resumed", "job.deleted")


def _events(http: httpx.Client, job_id: str) -> list[dict]:
    """The events of the job's runs and outcome, not its audit trail (`job.created`, ...)."""
    feed = http.get("/v1/events", params={"limit": 1000}).json()["events"]
    return [e for e in feed if e["job_id"] == job_id and e["type"] not in AUDIT]


def _counter(http: httpx.Client, name: str, labels: str = "") -> float:
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", http.get("/metrics").text, re.M)
    assert found, f"{name}{labels} not in /metrics"
    return float(found.group(1))


# -- timeout_s ---------------------------------------------------------------------


def test_timeout_s_is_shown_patched_and_removed(http: httpx.Client) -> None:
    job = _create(http, timeout_s=30)
    assert job["timeout_s"] == 30
    patched = http.patch(f"/v1/jobs/{job['id']}", json={"timeout_s": 90}, headers=MERGE)
    assert patched.status_code == 200, patched.text
    assert patched.json()["timeout_s"] == 90 and patched.json()["version"] == 2
    removed = http.patch(f"/v1/jobs/{job['id']}", json={"timeout_s": None}, headers=MERGE)
    assert removed.json()["timeout_s"] is None
    assert _create(http)["timeout_s"] is None


@pytest.mark.parametrize("value", [0, 86_401, -1, 1.5, "10", True])
def test_a_timeout_out_of_bounds_is_400_at_its_field(http: httpx.Client, value: object) -> None:
    answer = http.post("/v1/jobs", json=job_body(timeout_s=value))
    assert answer.status_code == 400
    assert [e["loc"] for e in answer.json()["errors"]] == ["timeout_s"]
    job = _create(http)
    patched = http.patch(f"/v1/jobs/{job['id']}", json={"timeout_s": value}, headers=MERGE)
    assert patched.status_code == 400
    assert [e["loc"] for e in patched.json()["errors"]] == ["timeout_s"]


def test_a_timeout_ends_the_attempt_whatever_heartbeats_say(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"}, timeout_s=1,
                  lease_s=60, retry={"max_attempts": 2, "backoff_s": [0]})
    run = _claim_one(http, queue)
    assert run["timeout_s"] == 1 and run["timeout_at"] is not None
    beat = http.post(f"/v1/runs/{run['id']}/heartbeat", json={"attempt": 1})
    assert beat.status_code == 200 and beat.json()["cancel"] is None
    assert "cancel" in beat.json()  # present, null, while the attempt goes on

    def told_to_stop() -> dict | None:
        answer = http.post(f"/v1/runs/{run['id']}/heartbeat", json={"attempt": 1})
        assert answer.status_code == 200, answer.text
        return answer.json() if answer.json()["cancel"] is not None else None

    assert wait_for(told_to_stop, EVENTUALLY_S) == {"lease_expires_at": None, "cancel": "timeout"}
    # In the batch form too: accepted, with a `cancel` entry.
    ack = http.post("/v1/heartbeats", json={"heartbeats": [{"run_id": run["id"], "attempt": 1}]}).json()
    assert ack == {"accepted": [run["id"]], "rejected": [], "cancel": {run["id"]: "timeout"}}
    # A result for it is stale.
    late = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True})
    assert late.status_code == 409 and late.json()["type"] == "stale_attempt"
    got = http.get(f"/v1/runs/{run['id']}").json()
    assert got["error"] == "timeout" and got["attempts"][0]["error"] == "timeout" and got["attempts"][0]["ok"] is False
    # The retry policy applies: the next attempt is claimed, and the old one is stale now.
    again = _claim_one(http, queue)
    assert again["id"] == run["id"] and again["attempt"] == 2
    stale = http.post(f"/v1/runs/{run['id']}/heartbeat", json={"attempt": 1})
    assert stale.status_code == 409 and stale.json()["type"] == "stale_attempt"
    assert http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 2, "ok": True}).json()["status"] == "done"
    assert job["timeout_s"] == 1
    assert _counter(http, "tempo_runs_timed_out_total") >= 1


def test_a_timeout_with_no_attempt_left_fails_the_run(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"}, timeout_s=1,
                  retry={"max_attempts": 1, "backoff_s": [0]})
    run = _claim_one(http, queue)
    failed = wait_for(lambda: (r := http.get(f"/v1/runs/{run['id']}").json())["status"] == "failed" and r, EVENTUALLY_S)
    assert failed["error"] == "timeout"
    assert [e["type"] for e in _events(http, job["id"])] == ["run.failed", "job.completed"]


# -- POST /v1/runs/{id}/cancel ---------------------------------------------------------


def test_a_waiting_run_of_a_repeating_job_is_cancelled_and_the_schedule_goes_on(http: httpx.Client) -> None:
    job = _create(http, schedule={"every_s": 3600})
    [waiting] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    answer = http.post(f"/v1/runs/{waiting['id']}/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "cancelled" and answer.json()["finished_at"] is not None
    runs = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert [r["status"] for r in runs] == ["waiting", "cancelled"]  # exactly one waiting run, the next slot's
    assert runs[0]["nominal_at"] > waiting["nominal_at"]
    shown = http.get(f"/v1/jobs/{job['id']}").json()
    assert shown["state"] == "active" and shown["next_run_at"] == runs[0]["due_at"]
    assert shown["runs"]["cancelled"] == 1
    assert [e["type"] for e in _events(http, job["id"])] == ["run.cancelled"]
    # Again: the same answer, nothing more.
    assert http.post(f"/v1/runs/{waiting['id']}/cancel").json()["status"] == "cancelled"
    assert len(http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]) == 2


def test_a_waiting_one_off_run_cancelled_completes_its_job(http: httpx.Client) -> None:
    job = _create(http)
    [waiting] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert http.post(f"/v1/runs/{waiting['id']}/cancel", json={}).json()["status"] == "cancelled"
    shown = http.get(f"/v1/jobs/{job['id']}").json()
    assert shown["state"] == "completed" and shown["next_run_at"] is None
    completed = [e for e in _events(http, job["id"]) if e["type"] == "job.completed"]
    assert [e["detail"]["status"] for e in completed] == ["cancelled"]


def test_a_claimed_run_is_asked_to_stop_and_its_result_is_recorded_cancelled(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"},
                  retry={"max_attempts": 5, "backoff_s": [0]})
    run = _claim_one(http, queue)
    assert http.get(f"/v1/runs/{run['id']}").json()["cancel_requested"] is False
    before = _counter(http, "tempo_run_cancels_total", '{result="requested"}')
    asked = http.post(f"/v1/runs/{run['id']}/cancel")
    assert asked.status_code == 200, asked.text
    assert asked.json()["status"] == "claimed" and asked.json()["cancel_requested"] is True
    assert http.post(f"/v1/runs/{run['id']}/cancel").json()["cancel_requested"] is True  # idempotent
    assert _counter(http, "tempo_run_cancels_total", '{result="requested"}') == before + 2
    beat = http.post(f"/v1/runs/{run['id']}/heartbeat", json={"attempt": 1}).json()
    assert beat["cancel"] == "requested" and beat["lease_expires_at"] is not None
    ack = http.post("/v1/heartbeats", json={"heartbeats": [{"run_id": run["id"], "attempt": 1}]}).json()
    assert ack["cancel"] == {run["id"]: "requested"}
    # A failure with attempts left: cancelled all the same, no retry.
    ended = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": False, "error": "stopped"})
    assert ended.status_code == 200 and ended.json()["status"] == "cancelled"
    got = http.get(f"/v1/runs/{run['id']}").json()
    assert got["attempts"][0]["error"] == "stopped" and got["cancel_requested"] is False
    assert http.get(f"/v1/jobs/{job['id']}").json()["state"] == "completed"
    assert "run.cancelled" in [e["type"] for e in _events(http, job["id"])]
    finished = http.post(f"/v1/runs/{run['id']}/cancel")
    assert finished.status_code == 200 and finished.json()["status"] == "cancelled"


def test_a_run_asked_to_stop_ends_cancelled_when_no_result_comes_within_its_lease(http: httpx.Client) -> None:
    queue = unique("q")
    _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"}, lease_s=1)
    run = _claim_one(http, queue)
    http.post(f"/v1/runs/{run['id']}/cancel").raise_for_status()
    ended = wait_for(lambda: (r := http.get(f"/v1/runs/{run['id']}").json())["status"] == "cancelled" and r, EVENTUALLY_S)
    assert ended["attempt"] == 1 and ended["error"] == "lease expired"
    late = http.post(f"/v1/runs/{run['id']}/heartbeat", json={"attempt": 1})
    assert late.json() == {"lease_expires_at": None, "cancel": "requested"}


def test_a_finished_run_is_409_run_finished(http: httpx.Client) -> None:
    queue = unique("q")
    _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"})
    run = _claim_one(http, queue)
    http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True}).raise_for_status()
    answer = http.post(f"/v1/runs/{run['id']}/cancel")
    assert answer.status_code == 409
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["type"] == "run_finished"


@pytest.mark.parametrize("run_id", ["r_nope", "r_" + "0" * 40, "x"])
def test_an_unknown_run_is_404(http: httpx.Client, run_id: str) -> None:
    answer = http.post(f"/v1/runs/{run_id}/cancel")
    assert answer.status_code == 404 and answer.json()["type"] == "not_found"


def test_a_body_with_fields_is_400(http: httpx.Client) -> None:
    job = _create(http)
    [waiting] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    answer = http.post(f"/v1/runs/{waiting['id']}/cancel", json={"why": "no"})
    assert answer.status_code == 400 and [e["loc"] for e in answer.json()["errors"]] == ["why"]
    assert http.get(f"/v1/runs/{waiting['id']}").json()["status"] == "waiting"


def test_the_owner_cancels_its_runs_a_worker_may_not_and_an_admin_cancels_any(tmp_path) -> None:
    config = tokens_config({
        "c-acme": ("acme", "client", None),
        "c-other": ("other", "client", None),
        "w-acme": ("acme", "worker", ["q"]),
        "admin": ("ops", "admin", None),
    })
    with configured_server(tmp_path, config) as srv:
        def client(token: str) -> httpx.Client:
            return httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {token}"}, timeout=30)

        with client("c-acme") as acme, client("c-other") as other, client("w-acme") as worker, client("admin") as admin:
            ids = []
            for _ in range(2):
                job = acme.post("/v1/jobs", json=job_body(target="queue:q")).json()
                ids.append(acme.get(f"/v1/jobs/{job['id']}/runs").json()["runs"][0]["id"])
            assert other.post(f"/v1/runs/{ids[0]}/cancel").status_code == 404
            assert worker.post(f"/v1/runs/{ids[0]}/cancel").status_code == 403
            assert httpx.post(f"{srv.url}/v1/runs/{ids[0]}/cancel").status_code == 401
            assert acme.post(f"/v1/runs/{ids[0]}/cancel").json()["status"] == "cancelled"
            assert admin.post(f"/v1/runs/{ids[1]}/cancel").json()["status"] == "cancelled"
