"""Running jobs through a real `tempo serve` process: on time, retried,
fenced, delivered over HTTP, and none lost when the server is SIGKILLed."""

import json
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from conftest import Arrival, Server, endpoint, unique


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def now() -> datetime:
    return datetime.now(UTC)


def create(client: httpx.Client, **body) -> dict:
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def claim(client: httpx.Client, queue: str, runs_max: int = 100, wait_s: float = 0, worker: str = "w1") -> list:
    answer = client.post("/v1/claim", json={"worker": worker, "queues": [queue], "max_runs": runs_max, "wait_s": wait_s})
    assert answer.status_code == 200, answer.text
    return answer.json()["runs"]


def result(client: httpx.Client, run: dict, ok: bool = True, **extra) -> httpx.Response:
    return client.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": ok, **extra})


@pytest.fixture(scope="module")
def client(server: Server):
    with httpx.Client(base_url=server.url, timeout=30.0) as c:
        yield c


def test_a_one_off_runs_within_a_second_of_due(client):
    queue = unique("q")
    due = now() + timedelta(seconds=1.5)
    job = create(client, target=f"queue:{queue}", schedule={"at": iso(due)}, payload={"n": 1})
    [run] = claim(client, queue, wait_s=5)
    claimed_at = now()
    assert run["job_id"] == job["id"] and run["payload"] == {"n": 1} and run["target"] == f"queue:{queue}"
    assert run["attempt"] == 1 and run["status"] == "claimed" and run["lease_s"] == 60
    assert timedelta(0) <= claimed_at - parse(run["due_at"]) < timedelta(seconds=1)
    shown = client.get(f"/v1/jobs/{job['id']}").json()
    assert shown["state"] == "active" and shown["next_run_at"] is None  # its run is claimed
    assert result(client, run, output="fine").json()["status"] == "done"
    assert client.get(f"/v1/jobs/{job['id']}").json()["state"] == "completed"


def test_a_failing_run_is_retried_per_backoff_then_failed_with_an_event(client):
    queue = unique("q")
    job = create(client, target=f"queue:{queue}", schedule={"at": iso(now())},
                 retry={"max_attempts": 2, "backoff_s": [1]})
    [first] = claim(client, queue, wait_s=2)
    failed_at = now()
    waiting = result(client, first, ok=False, error="boom").json()
    assert waiting["status"] == "waiting" and waiting["error"] == "boom"
    assert timedelta(seconds=0.9) <= parse(waiting["due_at"]) - failed_at <= timedelta(seconds=1.5)
    [second] = claim(client, queue, wait_s=3)
    assert second["attempt"] == 2 and second["id"] == first["id"]
    assert result(client, second, ok=False, error="boom again").json()["status"] == "failed"
    events = client.get("/v1/events", params={"limit": 1000}).json()["events"]
    mine = [e for e in events if e["job_id"] == job["id"] and e["type"] != "job.created"]
    assert [e["type"] for e in mine] == ["run.failed", "job.completed"]
    assert mine[0]["run_id"] == first["id"] and mine[0]["detail"]["attempt"] == 2


def test_an_expired_lease_redelivers_and_the_old_attempt_is_fenced(client):
    queue = unique("q")
    create(client, target=f"queue:{queue}", schedule={"at": iso(now())}, lease_s=1)
    [first] = claim(client, queue, wait_s=2, worker="frozen")
    [second] = claim(client, queue, wait_s=4, worker="fresh")
    assert second["id"] == first["id"] and second["attempt"] == 2 and second["worker"] == "fresh"
    beat = client.post(f"/v1/runs/{first['id']}/heartbeat", json={"attempt": 1})
    assert beat.status_code == 409 and beat.json()["type"] == "stale_attempt"
    assert beat.headers["content-type"].startswith("application/problem+json")
    late = result(client, first)
    assert late.status_code == 409 and late.json()["type"] == "stale_attempt"
    assert result(client, second).json()["attempt"] == 2
    again = result(client, second)
    assert again.status_code == 200 and again.json()["status"] == "done"


def test_heartbeats_keep_a_run_and_show_in_its_lease(client):
    queue = unique("q")
    create(client, target=f"queue:{queue}", schedule={"at": iso(now())}, lease_s=1)
    [run] = claim(client, queue, wait_s=2)
    for _ in range(5):  # 2.5 s: past two and a half leases
        time.sleep(0.5)
        beat = client.post("/v1/heartbeats", json={"heartbeats": [{"run_id": run["id"], "attempt": 1}]}).json()
        assert beat == {"accepted": [run["id"]], "rejected": []}
    shown = client.get(f"/v1/runs/{run['id']}").json()
    assert shown["status"] == "claimed" and parse(shown["lease_expires_at"]) > now()
    assert claim(client, queue) == []


def test_a_repeating_job_keeps_its_schedule_while_a_run_is_slow(client):
    queue = unique("q")
    job = create(client, target=f"queue:{queue}", schedule={"every_s": 1})
    [first] = claim(client, queue, wait_s=3)
    [second] = claim(client, queue, wait_s=3)  # the first never reports
    gap = parse(second["nominal_at"]) - parse(first["nominal_at"])
    assert gap == timedelta(seconds=1)
    created = parse(job["created_at"])
    assert parse(first["nominal_at"]) - created == timedelta(seconds=1)
    client.delete(f"/v1/jobs/{job['id']}")


def test_worker_endpoints_reject_bad_input_cleanly(client):
    queue = unique("q")
    assert claim(client, unique("nobody")) == []
    cases = [
        ("/v1/claim", {"worker": "w", "queues": ["bad name!"]}, 400, "queues[0]"),
        ("/v1/claim", {"worker": "w", "queues": [queue], "max_runs": 1001}, 400, "max_runs"),
        ("/v1/claim", {"queues": [queue]}, 400, "worker"),
        ("/v1/claim", {"worker": "w", "queues": [queue], "wait_s": 61}, 400, "wait_s"),
        ("/v1/runs/r_nope/heartbeat", {"attempt": 1}, 404, None),
        ("/v1/runs/r_nope/result", {"attempt": 1, "ok": True}, 404, None),
        ("/v1/runs/r_nope/result", {"attempt": 1}, 400, "ok"),
        ("/v1/heartbeats", {"heartbeats": []}, 400, "heartbeats"),
        ("/v1/results", {"results": [{"run_id": "x", "attempt": 1, "ok": True, "extra": 1}]}, 400, "results[0].extra"),
    ]
    for path, body, status, loc in cases:
        answer = client.post(path, json=body)
        assert answer.status_code == status, (path, body, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        if loc is not None:
            assert loc in [e["loc"] for e in answer.json()["errors"]], (path, answer.json())
    create(client, target=f"queue:{queue}", schedule={"at": iso(now())})
    [run] = claim(client, queue, wait_s=2)
    big = result(client, run, output="x" * (64 * 1024 + 1))
    assert big.status_code == 413 and big.json()["errors"][0]["loc"] == "output"
    assert client.get(f"/v1/runs/{run['id']}").json()["status"] == "claimed"
    unknown = client.post("/v1/results", json={"results": [{"run_id": "r_nope", "attempt": 1, "ok": True}]}).json()
    assert unknown == {"accepted": [], "rejected": [{"run_id": "r_nope", "type": "not_found"}]}


def test_metrics_export_dispatch_counters(client):
    text = client.get("/metrics").text
    for name in ("tempo_runs_due_total", "tempo_runs_claimed_total", "tempo_runs_done_total",
                 "tempo_runs_failed_total", "tempo_runs_expired_total", "tempo_runs_due_not_claimed",
                 "tempo_claim_lateness_seconds_bucket", "tempo_claim_lateness_seconds_count"):
        assert f"\n{name}" in text, name


# -- the HTTP executor ---------------------------------------------------------


def answer(arrival: Arrival) -> tuple[int, bytes]:
    """The target's answer, failing on demand: /slow after 2.5 s, /fail with 500."""
    if arrival.path.startswith("/slow"):
        time.sleep(2.5)
    return (500 if arrival.path.startswith("/fail") else 204), b""


@pytest.fixture
def target():
    with endpoint(answer) as srv:
        yield srv


def wait_for_run(client, job_id: str, status: str, timeout_s: float = 10) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = client.get(f"/v1/jobs/{job_id}/runs").json()["runs"]
        if runs and runs[0]["status"] == status:
            return runs[0]
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} has no {status} run: {runs}")


def test_the_executor_delivers_with_the_run_headers(client, target):
    job = create(client, target=f"{target.url}/hook?x=1", schedule={"at": iso(now())}, payload={"hello": [1, 2]})
    run = wait_for_run(client, job["id"], "done")
    [delivery] = target.seen
    path, headers, body = delivery.path, delivery.headers, delivery.body
    assert path == "/hook?x=1" and json.loads(body) == {"hello": [1, 2]}
    assert headers["tempo-run-id"] == run["id"] == headers["idempotency-key"]
    assert headers["tempo-attempt"] == "1" and headers["tempo-job-id"] == job["id"]
    assert headers["content-type"] == "application/json"


def test_the_executor_retries_failures_and_timeouts(client, target):
    failing = create(client, target=f"{target.url}/fail", schedule={"at": iso(now())},
                     retry={"max_attempts": 2, "backoff_s": [0]})
    slow = create(client, target=f"{target.url}/slow", schedule={"at": iso(now())}, lease_s=1,
                  retry={"max_attempts": 1, "backoff_s": [0]})
    failed = wait_for_run(client, failing["id"], "failed")
    assert failed["attempt"] == 2 and "500" in failed["error"]
    timed_out = wait_for_run(client, slow["id"], "failed")
    assert timed_out["attempt"] == 1
    attempts = sorted(a.headers["tempo-attempt"] for a in target.seen if a.path == "/fail")
    assert attempts == ["1", "2"]


# -- crashes -------------------------------------------------------------------


def test_sigkill_with_claimed_and_waiting_runs_loses_none(fresh_server):
    queue = unique("q")
    with httpx.Client(base_url=fresh_server.url, timeout=30.0) as c:
        soon = iso(now())
        later = iso(now() + timedelta(seconds=2))
        bodies = [{"target": f"queue:{queue}", "schedule": {"at": soon if i % 2 else later}, "lease_s": 2}
                  for i in range(200)]
        results = c.post("/v1/jobs/batch", json={"jobs": bodies}).json()["results"]
        job_ids = {r["job"]["id"] for r in results}
        assert len(job_ids) == 200
        held = claim(c, queue, runs_max=60, wait_s=2)
        assert len(held) == 60
    fresh_server.kill()
    fresh_server.start()
    done: set[str] = set()
    attempts: dict[str, set[int]] = {}
    with httpx.Client(base_url=fresh_server.url, timeout=30.0) as c:
        deadline = time.monotonic() + 20
        while len(done) < 200 and time.monotonic() < deadline:
            for run in claim(c, queue, runs_max=100, wait_s=1, worker="after"):
                assert run["attempt"] not in attempts.setdefault(run["id"], set()), "one attempt claimed twice"
                attempts[run["id"]].add(run["attempt"])
                assert result(c, run).status_code == 200
                done.add(run["job_id"])
        assert done == job_ids
        held_ids = {r["id"] for r in held}
        assert all(max(attempts[i]) == 2 for i in held_ids)  # re-delivered after the restart's lease


def test_a_single_node_reports_itself_as_the_leader_of_one(client, server):
    view = client.get("/v1/cluster").json()
    assert view["node"] == view["leader"] == "n1"
    assert view["nodes"] == [{"id": "n1", "url": server.url, "role": "leader"}]
    assert view["commit_index"] == view["applied_index"] >= 1
