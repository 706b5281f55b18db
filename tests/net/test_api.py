"""The HTTP API of docs/api.md against a real `tempo serve` process."""

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import msgspec
import pytest

from conftest import job_body, job_count, unique
from problems import assert_problem

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
JOB_FIELDS = {
    "id", "name", "owner", "target", "payload", "schedule", "retry", "lease_s",
    "jitter_s", "state", "created_at", "next_run_at",
    "notify", "last_run", "runs", "catchup", "version", "labels", "timeout_s",
    "paused", "runs_left", "overlap", "dependents",
}
RUN_FIELDS = {
    "id", "job_id", "nominal_at", "due_at", "status", "attempt", "worker",
    "lease_expires_at", "started_at", "finished_at", "output", "error", "backfill",
    "reason", "missed_from", "missed_until", "count",  # a missed row's range; null on other runs
    "cancel_requested", "timeout_at",  # what may stop a claimed run
    "buffered",  # a waiting run the job's overlap policy holds back
}
MSGPACK = "application/msgpack"


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def create(http, **fields):
    r = http.post("/v1/jobs", json=job_body(**fields))
    assert r.status_code == 201, r.text
    return r.json()


# -- operations ----------------------------------------------------------------


def test_health_ready_metrics_openapi(http):
    assert http.get("/healthz").status_code == 200
    assert http.get("/readyz").status_code == 200
    http.get("/v1/jobs")
    metrics = http.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "# TYPE tempo_http_requests_total counter" in metrics.text
    assert 'tempo_http_requests_total{route="jobs",status="200"}' in metrics.text
    doc = http.get("/v1/openapi.json")
    assert doc.status_code == 200 and doc.headers["content-type"].startswith("application/json")
    spec = doc.json()
    assert spec["openapi"].startswith("3.1")
    for path in ("/v1/jobs", "/v1/jobs/batch", "/v1/jobs/{id}", "/v1/schedules/preview"):
        assert path in spec["paths"], path


def test_the_openapi_document_speaks_msgpack_when_asked_as_every_v1_endpoint(http):
    as_json = http.get("/v1/openapi.json").json()
    answer = http.get("/v1/openapi.json", headers={"accept": MSGPACK})
    assert answer.status_code == 200 and answer.headers["content-type"] == MSGPACK
    assert msgspec.msgpack.decode(answer.content) == as_json


def test_unknown_path_and_method(http):
    assert_problem(http.get("/v1/nothing"), 404, type_="not_found")
    r = http.put("/v1/jobs")
    assert r.status_code == 405 and r.headers["content-type"].startswith("application/problem+json")


# -- jobs ------------------------------------------------------------------------


def test_create_answers_the_job_with_defaults(http):
    r = http.post("/v1/jobs", json={"target": "queue:reports", "schedule": {"at": "2030-01-01T10:00:00+02:00"}})
    assert r.status_code == 201 and r.headers["content-type"] == "application/json"
    job = r.json()
    assert set(job) == JOB_FIELDS
    assert job["id"].startswith("j_") and len(job["id"]) == 28
    assert job["owner"] == "default" and job["name"] is None and job["payload"] is None
    assert job["retry"] == {"max_attempts": 4, "backoff_s": [10, 60, 600]}
    assert job["lease_s"] == 60 and job["jitter_s"] == 0 and job["state"] == "active"
    assert job["schedule"] == {"at": "2030-01-01T08:00:00.000Z"}
    assert job["next_run_at"] == "2030-01-01T08:00:00.000Z"
    assert TIME.match(job["created_at"])
    assert http.get(f"/v1/jobs/{job['id']}").json() == job


def test_create_keeps_every_field(http):
    body = {
        "name": "nightly-report",
        "target": "https://example.com/hook",
        "payload": {"any": ["json", 1, 2.5, True, None]},
        "schedule": {"cron": "0 * * * *", "timezone": "Europe/Berlin"},
        "retry": {"max_attempts": 7, "backoff_s": [1, 2]},
        "lease_s": 30,
        "jitter_s": 0,
        "request_key": unique(),
    }
    job = http.post("/v1/jobs", json=body).json()
    for name in ("name", "target", "payload", "schedule", "retry", "lease_s", "jitter_s"):
        assert job[name] == body[name], name
    preview = http.post("/v1/schedules/preview", json={"schedule": body["schedule"], "count": 1, "after": job["created_at"]})
    assert job["next_run_at"] == preview.json()["times"][0]
    assert job["next_run_at"].endswith(":00:00.000Z")


def test_times_are_truncated_to_the_millisecond(http):
    job = create(http, schedule={"at": "2030-01-01T00:00:00.123999+00:00"})
    assert job["schedule"]["at"] == "2030-01-01T00:00:00.123Z"


def test_a_past_one_off_runs_at_once(http):
    job = create(http, schedule={"at": "2001-01-01T00:00:00Z"})
    assert job["schedule"]["at"] == "2001-01-01T00:00:00.000Z"
    assert ms(job["next_run_at"]) >= ms(job["created_at"])
    [run] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert run["nominal_at"] == "2001-01-01T00:00:00.000Z" and run["status"] == "waiting"


def test_same_request_key_and_same_body_answer_the_same_job(http):
    key = unique()
    first = http.post("/v1/jobs", json={"target": "queue:a", "schedule": {"at": "2030-01-01T00:00:00Z"}, "request_key": key})
    assert first.status_code == 201
    same = [
        # Key order.
        {"request_key": key, "schedule": {"at": "2030-01-01T00:00:00Z"}, "target": "queue:a"},
        # An equal instant with another offset.
        {"target": "queue:a", "schedule": {"at": "2030-01-01T05:30:00+05:30"}, "request_key": key},
        # Defaults spelled out.
        {
            "target": "queue:a", "schedule": {"at": "2030-01-01T00:00:00.000Z"}, "request_key": key,
            "name": None, "payload": None, "retry": {"max_attempts": 4, "backoff_s": [10, 60, 600]},
            "lease_s": 60, "jitter_s": 0,
        },
    ]
    for body in same:
        again = http.post("/v1/jobs", json=body)
        assert again.status_code == 200, (body, again.text)
        assert again.json() == first.json()
    other = http.post("/v1/jobs", json={"target": "queue:b", "schedule": {"at": "2030-01-01T00:00:00Z"}, "request_key": key})
    assert_problem(other, 409, type_="request_key_reused")


def test_cron_timezone_default_spelled_out_is_the_same_body(http):
    key = unique()
    first = http.post("/v1/jobs", json=job_body(schedule={"cron": "@daily"}, request_key=key, target="queue:c"))
    second = http.post("/v1/jobs", json=job_body(schedule={"cron": "@daily", "timezone": "UTC"}, request_key=key, target="queue:c"))
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]


def test_every_s_first_run_is_one_period_after_creation(http):
    job = create(http, schedule={"every_s": 300})
    assert ms(job["next_run_at"]) == ms(job["created_at"]) + 300_000
    [run] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert run["nominal_at"] == run["due_at"] == job["next_run_at"]


def test_start_at_in_the_future_is_the_first_run(http):
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    job = create(http, schedule={"every_s": 3600, "start_at": start.isoformat()})
    assert job["next_run_at"] == iso(start)
    assert job["schedule"]["start_at"] == iso(start)


def test_start_at_in_the_past_stays_on_its_grid_without_catch_up(http):
    start = datetime.now(UTC) - timedelta(seconds=1000, milliseconds=500)
    start_ms = ms(iso(start))
    job = create(http, schedule={"every_s": 60, "start_at": iso(start)})
    next_ms = ms(job["next_run_at"])
    assert (next_ms - start_ms) % 60_000 == 0
    assert ms(job["created_at"]) <= next_ms < ms(job["created_at"]) + 60_000
    runs = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert len(runs) == 1


# -- batch -------------------------------------------------------------------------


def test_batch_mixed_items(http):
    ok_key, bad_key, dup_key = unique(), unique(), unique()
    items = [
        job_body(request_key=ok_key),
        {"target": "queue:x", "schedule": {"cron": "not a cron"}, "request_key": bad_key},
        {"target": "queue:x", "schedule": {"at": "2030-01-01T00:00:00Z"}, "retry": {"max_attempts": 0}},
        {"target": "queue:x", "schedule": {"at": "2030-01-01T00:00:00Z", "foo": 1}},
        {"target": "queue:x", "schedule": {"cron": "not a cron"}, "request_key": bad_key},
        {"target": "queue:y", "schedule": {"every_s": 5}, "request_key": dup_key},
        {"target": "queue:y", "schedule": {"every_s": 5}, "request_key": dup_key},
        {"target": "queue:z", "schedule": {"every_s": 5}, "request_key": dup_key},
        {"schedule": {"every_s": 5}},
        {"target": "queue:x", "schedule": {"every_s": 5}, "payload": "x" * (65 * 1024)},
    ]
    before = job_count(http)
    r = http.post("/v1/jobs/batch", json={"jobs": items})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [201, 400, 400, 400, 400, 201, 200, 409, 400, 413]
    assert results[1]["problem"]["errors"][0]["loc"] == "schedule.cron"
    assert results[2]["problem"]["errors"][0]["loc"] == "retry.max_attempts"
    assert results[3]["problem"]["errors"][0]["loc"] == "schedule.foo"
    assert results[4] == results[1]
    assert results[5]["job"]["id"] == results[6]["job"]["id"]
    assert results[7]["problem"]["type"] == "request_key_reused"
    assert results[8]["problem"]["errors"][0]["loc"] == "target"
    assert results[9]["problem"]["type"] == "too_large"
    assert results[9]["problem"]["errors"][0]["loc"] == "payload"
    assert job_count(http) == before + 2
    single = http.post("/v1/jobs", json=job_body(request_key=ok_key) | {"target": items[0]["target"]})
    assert single.status_code == 200 and single.json()["id"] == results[0]["job"]["id"]
    for x in results:
        if "job" in x:
            assert set(x["job"]) == JOB_FIELDS and "problem" not in x
        else:
            assert set(x["problem"]) >= {"type", "title", "status", "detail", "errors"}


def test_batch_of_1000_and_over(http):
    before = job_count(http)
    items = [job_body(name=f"b{i}") for i in range(1000)]
    r = http.post("/v1/jobs/batch", json={"jobs": items})
    assert r.status_code == 200
    results = r.json()["results"]
    assert len(results) == 1000 and {x["status"] for x in results} == {201}
    assert [x["job"]["name"] for x in results] == [f"b{i}" for i in range(1000)]
    assert job_count(http) == before + 1000
    assert_problem(http.post("/v1/jobs/batch", json={"jobs": items + items[:1]}), 400, type_="validation", loc="jobs")
    assert_problem(http.post("/v1/jobs/batch", json={"jobs": []}), 400, type_="validation", loc="jobs")
    assert job_count(http) == before + 1000


def test_batch_in_msgpack(http):
    items = [job_body(), {"target": "queue:x", "schedule": {}}]
    r = http.post("/v1/jobs/batch", content=msgspec.msgpack.encode({"jobs": items}), headers={"content-type": MSGPACK})
    assert r.status_code == 200 and r.headers["content-type"] == MSGPACK
    results = msgspec.msgpack.decode(r.content)["results"]
    assert [x["status"] for x in results] == [201, 400]
    assert results[1]["problem"]["errors"][0]["loc"] == "schedule"


# -- listing -------------------------------------------------------------------------


def test_jobs_list_newest_first_with_cursors(http):
    made = [create(http, name=f"page-{i}")["id"] for i in range(5)]
    first = http.get("/v1/jobs", params={"limit": 2}).json()
    assert [j["id"] for j in first["jobs"]] == made[::-1][:2]
    second = http.get("/v1/jobs", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [j["id"] for j in second["jobs"]] == made[::-1][2:4]
    seen, cursor = [], None
    while True:
        page = http.get("/v1/jobs", params={"limit": 7} | ({"cursor": cursor} if cursor else {})).json()
        assert len(page["jobs"]) <= 7
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen))
    assert set(made) <= set(seen)
    default = http.get("/v1/jobs").json()
    assert len(default["jobs"]) == min(100, len(seen))


def test_runs_list_newest_first_with_since_until_and_cursors(http):
    job = create(http, schedule={"every_s": 3600})
    runs = [http.post(f"/v1/jobs/{job['id']}/trigger").json() for _ in range(4)]
    nominal = sorted([r["nominal_at"] for r in runs] + [job["next_run_at"]], reverse=True)
    assert len(set(nominal)) == 5
    url = f"/v1/jobs/{job['id']}/runs"
    everything = http.get(url).json()
    assert [r["nominal_at"] for r in everything["runs"]] == nominal and everything["next_cursor"] is None
    assert all(set(r) == RUN_FIELDS for r in everything["runs"])
    walked, cursor = [], None
    while True:
        page = http.get(url, params={"limit": 2} | ({"cursor": cursor} if cursor else {})).json()
        walked += [r["nominal_at"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert walked == nominal
    window = http.get(url, params={"since": nominal[3], "until": nominal[1]}).json()["runs"]
    assert [r["nominal_at"] for r in window] == nominal[2:4]
    offset = datetime.fromisoformat(nominal[3].replace("Z", "+00:00")).astimezone(ZoneInfo("Asia/Tokyo"))
    assert http.get(url, params={"since": offset.isoformat()}).json()["runs"] == everything["runs"][:4]


def test_get_run(http):
    job = create(http, schedule={"every_s": 60})
    [run] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    got = http.get(f"/v1/runs/{run['id']}")
    assert got.status_code == 200 and got.json() == run | {"attempts": [], "caused_by": []}
    assert run["job_id"] == job["id"] and run["attempt"] == 0 and run["worker"] is None
    for name in ("nominal_at", "due_at"):
        assert TIME.match(run[name])


# -- pause, resume, delete, trigger -------------------------------------------------


def test_pause_and_resume_are_idempotent(http):
    job = create(http, schedule={"every_s": 3600})
    paused = http.post(f"/v1/jobs/{job['id']}/pause")
    assert paused.status_code == 200
    assert paused.json()["state"] == "paused" and paused.json()["next_run_at"] is None
    assert http.post(f"/v1/jobs/{job['id']}/pause").json() == paused.json()
    [run] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert run["status"] == "cancelled"
    resumed = http.post(f"/v1/jobs/{job['id']}/resume")
    assert resumed.status_code == 200
    assert resumed.json()["state"] == "active"
    assert resumed.json()["next_run_at"] == job["next_run_at"]  # the same slot, the same run
    assert http.post(f"/v1/jobs/{job['id']}/resume").json() == resumed.json()
    [run] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert run["status"] == "waiting"


def test_trigger_a_paused_job(http):
    job = create(http, schedule={"every_s": 3600})
    http.post(f"/v1/jobs/{job['id']}/pause")
    before = datetime.now(UTC)
    r = http.post(f"/v1/jobs/{job['id']}/trigger")
    assert r.status_code == 201
    run = r.json()
    assert set(run) == RUN_FIELDS and run["status"] == "waiting" and run["job_id"] == job["id"]
    assert run["due_at"] == run["nominal_at"]
    assert abs(ms(run["nominal_at"]) - before.timestamp() * 1000) < 5000
    after = http.get(f"/v1/jobs/{job['id']}").json()
    assert after["state"] == "paused" and after["next_run_at"] is None
    again = http.post(f"/v1/jobs/{job['id']}/trigger").json()
    assert again["id"] != run["id"]


def test_delete_then_everything_is_404(http):
    job = create(http, schedule={"every_s": 60}, request_key=unique())
    [run] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    r = http.delete(f"/v1/jobs/{job['id']}")
    assert r.status_code == 204 and r.content == b""
    for response in (
        http.get(f"/v1/jobs/{job['id']}"),
        http.get(f"/v1/jobs/{job['id']}/runs"),
        http.get(f"/v1/runs/{run['id']}"),
        http.delete(f"/v1/jobs/{job['id']}"),
        http.post(f"/v1/jobs/{job['id']}/pause"),
        http.post(f"/v1/jobs/{job['id']}/resume"),
        http.post(f"/v1/jobs/{job['id']}/trigger"),
    ):
        assert_problem(response, 404, type_="not_found")
    assert job["id"] not in [j["id"] for j in http.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]]


# -- MessagePack ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expect_msgpack"),
    [(None, True), ("*/*", True), (MSGPACK, True), ("application/json", False)],
)
def test_msgpack_request_negotiation(http, accept, expect_msgpack):
    headers = {"content-type": MSGPACK} | ({"accept": accept} if accept else {})
    r = http.post("/v1/jobs", content=msgspec.msgpack.encode(job_body(payload={"a": [1, 2]})), headers=headers)
    assert r.status_code == 201
    if expect_msgpack:
        assert r.headers["content-type"] == MSGPACK
        job = msgspec.msgpack.decode(r.content)
    else:
        assert r.headers["content-type"] == "application/json"
        job = r.json()
    assert job["payload"] == {"a": [1, 2]} and TIME.match(job["created_at"])


def test_json_request_with_msgpack_accept(http):
    job = create(http)
    r = http.get(f"/v1/jobs/{job['id']}", headers={"accept": MSGPACK})
    assert r.headers["content-type"] == MSGPACK
    assert msgspec.msgpack.decode(r.content) == job
    listing = http.get("/v1/jobs", params={"limit": 1}, headers={"accept": MSGPACK})
    assert set(msgspec.msgpack.decode(listing.content)) == {"jobs", "next_cursor"}


@pytest.mark.parametrize(
    ("accept", "expect_msgpack"),
    [
        (f"{MSGPACK};q=0, application/json", False),
        (f"{MSGPACK}; q=0.000, application/json", False),
        (f"{MSGPACK};q=0.5, application/json", True),
        ("application/json;q=0", False),  # a JSON request: JSON refused names no MessagePack type
    ],
)
def test_a_type_refused_with_q_0_is_not_named(http, accept, expect_msgpack):
    # RFC 9110 12.4.2: a weight of 0 means "not acceptable".
    job = create(http)
    r = http.get(f"/v1/jobs/{job['id']}", headers={"accept": accept})
    assert r.status_code == 200
    assert (r.headers["content-type"] == MSGPACK) is expect_msgpack, r.headers["content-type"]


def test_a_msgpack_request_refusing_json_is_answered_in_msgpack(http):
    headers = {"content-type": MSGPACK, "accept": "application/json;q=0, */*;q=0.1"}
    r = http.post("/v1/jobs", content=msgspec.msgpack.encode(job_body()), headers=headers)
    assert r.status_code == 201 and r.headers["content-type"] == MSGPACK


def test_msgpack_errors_are_problem_json(http):
    r = http.post(
        "/v1/jobs",
        content=msgspec.msgpack.encode({"target": "queue:x", "schedule": {"every_s": 0}}),
        headers={"content-type": MSGPACK, "accept": MSGPACK},
    )
    assert_problem(r, 400, type_="validation", loc="schedule.every_s")
    assert_problem(http.get("/v1/jobs/j_nope", headers={"accept": MSGPACK}), 404, type_="not_found")


@pytest.mark.parametrize("payload", [b"\x00\x01", {"k": b"bin"}, [1, msgspec.msgpack.Ext(1, b"x")]])
def test_msgpack_binary_payload_is_rejected_at_payload(http, payload):
    before = job_count(http)
    r = http.post("/v1/jobs", content=msgspec.msgpack.encode(job_body(payload=payload)), headers={"content-type": MSGPACK})
    assert_problem(r, 400, type_="validation", loc="payload")
    assert job_count(http) == before



@pytest.mark.parametrize("payload", [float("nan"), {"k": float("inf")}, [1, float("-inf")]])
def test_msgpack_non_finite_payload_is_rejected_at_payload(http, payload):
    """JSON has no NaN or infinity: stored, it would come back null."""
    before = job_count(http)
    r = http.post("/v1/jobs", content=msgspec.msgpack.encode(job_body(payload=payload)), headers={"content-type": MSGPACK})
    assert_problem(r, 400, type_="validation", loc="payload")
    assert job_count(http) == before

def test_msgpack_times_stay_strings(http):
    r = http.post(
        "/v1/schedules/preview",
        content=msgspec.msgpack.encode({"schedule": {"every_s": 60}, "after": "2030-01-01T00:00:00Z", "count": 2}),
        headers={"content-type": MSGPACK},
    )
    assert msgspec.msgpack.decode(r.content)["times"] == ["2030-01-01T00:01:00.000Z", "2030-01-01T00:02:00.000Z"]


# -- schedules ---------------------------------------------------------------------------


def test_preview_example_of_api_md(http):
    r = http.post(
        "/v1/schedules/preview",
        json={"schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"}, "after": "2027-03-27T00:00:00Z", "count": 5},
    )
    assert r.status_code == 200
    times = r.json()["times"]
    assert times[:2] == ["2027-03-27T01:30:00.000Z", "2027-03-28T01:00:00.000Z"]
    assert times[2:] == ["2027-03-29T00:30:00.000Z", "2027-03-30T00:30:00.000Z", "2027-03-31T00:30:00.000Z"]


def test_preview_kinds_and_defaults(http):
    def times(body):
        r = http.post("/v1/schedules/preview", json=body)
        assert r.status_code == 200, r.text
        return r.json()["times"]

    assert len(times({"schedule": {"cron": "* * * * *"}})) == 10
    assert times({"schedule": {"every_s": 90}, "after": "2030-01-01T00:00:00Z", "count": 2}) == [
        "2030-01-01T00:01:30.000Z", "2030-01-01T00:03:00.000Z",
    ]
    assert times({"schedule": {"at": "2030-01-01T00:00:00Z"}, "after": "2029-01-01T00:00:00Z"}) == ["2030-01-01T00:00:00.000Z"]
    assert times({"schedule": {"at": "2030-01-01T00:00:00Z"}, "after": "2030-01-01T00:00:00Z"}) == []
    assert times({"schedule": {"every_s": 60, "start_at": "2030-01-01T00:00:30Z"}, "after": "2030-01-01T00:00:00Z", "count": 2}) == [
        "2030-01-01T00:00:30.000Z", "2030-01-01T00:01:30.000Z",
    ]
    assert len(times({"schedule": {"cron": "@hourly"}, "count": 1000})) == 1000
    assert_problem(http.post("/v1/schedules/preview", json={"schedule": {"cron": "@hourly"}, "count": 1001}), 400, type_="validation", loc="count")
    assert_problem(http.post("/v1/schedules/preview", json={"schedule": {"cron": "61 * * * *"}}), 400, type_="validation")


def test_resumed_every_s_job_stays_on_its_grid(http):
    job = create(http, schedule={"every_s": 1})
    http.post(f"/v1/jobs/{job['id']}/pause")
    time.sleep(1.3)
    paused_at_ms = int(time.time() * 1000)
    resumed = http.post(f"/v1/jobs/{job['id']}/resume").json()
    next_ms = ms(resumed["next_run_at"])
    assert (next_ms - ms(job["created_at"])) % 1000 == 0
    assert paused_at_ms < next_ms <= paused_at_ms + 1000 + 200
    statuses = [r["status"] for r in http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]]
    assert statuses == ["waiting", "cancelled"]


def test_resumed_past_one_off_is_due_at_once(http):
    job = create(http, schedule={"at": "2020-01-01T00:00:00Z"})
    http.post(f"/v1/jobs/{job['id']}/pause")
    before_ms = int(time.time() * 1000)
    resumed = http.post(f"/v1/jobs/{job['id']}/resume").json()
    assert resumed["state"] == "active"
    assert before_ms - 50 <= ms(resumed["next_run_at"]) <= int(time.time() * 1000) + 50
    [run] = http.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert run["nominal_at"] == "2020-01-01T00:00:00.000Z" and run["due_at"] == resumed["next_run_at"]


def test_preview_times_are_rfc_3339_in_early_years(http):
    r = http.post("/v1/schedules/preview", json={"schedule": {"cron": "@daily"}, "after": "0001-01-01T00:00:00Z", "count": 1})
    assert r.json()["times"] == ["0001-01-02T00:00:00.000Z"]


def test_stale_reads_are_answered_on_a_single_node(http):
    assert http.get("/v1/jobs", params={"stale": "true", "limit": 1}).status_code == 200


def test_concurrent_creates_with_one_request_key_make_one_job(server):
    key = unique()
    body = job_body(request_key=key)
    answers: list = []

    def post() -> None:
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            answers.append(client.post("/v1/jobs", json=body))

    threads = [threading.Thread(target=post) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status_code for r in answers) == [200] * 15 + [201]
    assert len({r.json()["id"] for r in answers}) == 1


def test_openapi_is_generated_from_the_request_schemas(http):
    spec = http.get("/v1/openapi.json").json()
    schemas = spec["components"]["schemas"]
    create_schema = schemas["JobCreate"]
    assert set(create_schema["required"]) == {"target", "schedule"}
    assert create_schema["additionalProperties"] is False
    assert (create_schema["properties"]["lease_s"]["minimum"], create_schema["properties"]["lease_s"]["maximum"]) == (1, 3600)
    refs = []

    def walk(node):
        if isinstance(node, dict):
            refs.extend(v for k, v in node.items() if k == "$ref")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    assert refs
    for ref in refs:
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schemas, ref
