"""Schedule end conditions (`end_at`, `max_runs`) against a real `tempo
serve` (docs/api.md "Jobs", docs/semantics.md "End conditions"): shown,
previewed, patched, held by the runs a worker claims, and every bad
value a problem naming its field."""

from datetime import UTC, datetime, timedelta

import httpx

from conftest import job_body, unique, wait_for

MERGE = {"content-type": "application/merge-patch+json"}
EVENTUALLY_S = 30.0


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def _create(http: httpx.Client, **overrides) -> dict:
    answer = http.post("/v1/jobs", json=job_body(**overrides))
    assert answer.status_code == 201, answer.text
    return answer.json()


def _claim(http: httpx.Client, queue: str) -> dict:
    """One run of `queue`, waiting for it as long as needed."""
    def one():
        runs = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 5}).json()["runs"]
        return runs[0] if runs else None

    return wait_for(one, EVENTUALLY_S)


def _done(http: httpx.Client, run: dict) -> None:
    answer = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": True})
    assert answer.status_code == 200, answer.text


def _completions(http: httpx.Client, job_id: str) -> list[dict]:
    events = http.get("/v1/events", params={"limit": 1000}).json()["events"]
    return [e["detail"] for e in events if e["job_id"] == job_id and e["type"] == "job.completed"]


def test_end_conditions_are_shown_and_runs_left_counts_down(http: httpx.Client) -> None:
    end = datetime.now(UTC) + timedelta(days=30)
    job = _create(http, schedule={"every_s": 3600, "end_at": _iso(end), "max_runs": 5})
    assert job["schedule"]["end_at"] == _iso(end) and job["schedule"]["max_runs"] == 5
    assert job["runs_left"] == 5
    plain = _create(http, schedule={"every_s": 3600})
    assert plain["runs_left"] is None and "end_at" not in plain["schedule"]


def test_max_runs_runs_that_many_slots_then_the_job_is_completed(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"every_s": 1, "max_runs": 2})
    # A triggered run is not counted.
    triggered = http.post(f"/v1/jobs/{job['id']}/trigger").json()
    first = _claim(http, queue)
    if first["id"] != triggered["id"]:
        _done(http, first)
        first = _claim(http, queue)
    _done(http, first)
    seen = []
    while len(seen) < 2:
        run = _claim(http, queue)
        assert run["id"] != triggered["id"]
        seen.append(run["id"])
        _done(http, run)
    final = wait_for(lambda: (j := http.get(f"/v1/jobs/{job['id']}").json())["state"] == "completed" and j, EVENTUALLY_S)
    assert final["runs_left"] == 0 and final["next_run_at"] is None
    assert http.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 2}).json()["runs"] == []
    assert _completions(http, job["id"]) == [{"status": "done", "reason": "max_runs"}]


def test_end_at_leaves_no_slot_after_it(http: httpx.Client) -> None:
    queue = unique("q")
    end = datetime.now(UTC) + timedelta(seconds=3)
    job = _create(http, target=f"queue:{queue}", schedule={"every_s": 1, "end_at": _iso(end)})
    end_ms = int(end.timestamp() * 1000)
    while True:
        run = _claim(http, queue)
        _done(http, run)
        assert int(datetime.fromisoformat(run["nominal_at"]).timestamp() * 1000) <= end_ms
        state = http.get(f"/v1/jobs/{job['id']}").json()
        if state["state"] == "completed":
            break
        assert state["next_run_at"] is not None, "an active job has its next run planned"
    assert _completions(http, job["id"]) == [{"status": "done", "reason": "end_at"}]


def test_preview_honours_end_at_and_max_runs(http: httpx.Client) -> None:
    body = {"schedule": {"every_s": 60, "end_at": "2030-01-01T00:05:00Z"}, "after": "2030-01-01T00:00:00Z", "count": 100}
    times = [o["at"] for o in http.post("/v1/schedules/preview", json=body).json()["occurrences"]]
    assert times == [f"2030-01-01T00:0{m}:00.000Z" for m in range(1, 6)]
    body = {"schedule": {"cron": "0 * * * *", "max_runs": 3}, "after": "2030-01-01T00:00:00Z", "count": 100}
    assert len(http.post("/v1/schedules/preview", json=body).json()["occurrences"]) == 3


def test_patch_max_runs_completes_and_reopens_the_job(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"every_s": 1, "max_runs": 10})
    _done(http, _claim(http, queue))
    lowered = http.patch(f"/v1/jobs/{job['id']}", json={"schedule": {"every_s": 1, "max_runs": 1}}, headers=MERGE)
    assert lowered.status_code == 200, lowered.text
    assert lowered.json()["state"] == "completed" and lowered.json()["runs_left"] == 0
    assert lowered.json()["next_run_at"] is None
    raised = http.patch(f"/v1/jobs/{job['id']}", json={"schedule": {"every_s": 1, "max_runs": 3}}, headers=MERGE)
    assert raised.json()["state"] == "active" and raised.json()["runs_left"] == 2
    assert raised.json()["next_run_at"] is not None
    # Another field patched keeps the schedule's end conditions.
    renamed = http.patch(f"/v1/jobs/{job['id']}", json={"name": "renamed"}, headers=MERGE).json()
    assert renamed["schedule"]["max_runs"] == 3


def test_patch_end_at_before_now_completes_and_later_reopens(http: httpx.Client) -> None:
    job = _create(http, schedule={"every_s": 3600})
    past = _iso(datetime.now(UTC) - timedelta(hours=1))
    ended = http.patch(f"/v1/jobs/{job['id']}", json={"schedule": {"every_s": 3600, "end_at": past}}, headers=MERGE)
    assert ended.status_code == 200, ended.text
    assert ended.json()["state"] == "completed"
    assert _completions(http, job["id"]) == [{"reason": "end_at"}]
    later = _iso(datetime.now(UTC) + timedelta(days=2))
    reopened = http.patch(f"/v1/jobs/{job['id']}", json={"schedule": {"every_s": 3600, "end_at": later}}, headers=MERGE)
    assert reopened.json()["state"] == "active" and reopened.json()["next_run_at"] is not None


def test_bad_end_conditions_are_problems_at_their_field(http: httpx.Client) -> None:
    soon = _iso(datetime.now(UTC) + timedelta(days=1))
    cases = [
        ({"at": "2030-01-01T00:00:00Z", "end_at": soon}, "schedule.end_at"),
        ({"at": "2030-01-01T00:00:00Z", "max_runs": 2}, "schedule.max_runs"),
        ({"every_s": 60, "max_runs": 0}, "schedule.max_runs"),
        ({"every_s": 60, "max_runs": 1_000_000_001}, "schedule.max_runs"),
        ({"every_s": 60, "max_runs": "3"}, "schedule.max_runs"),
        ({"every_s": 60, "end_at": "tomorrow"}, "schedule.end_at"),
        ({"every_s": 60, "end_at": "2030-01-01T00:00:00"}, "schedule.end_at"),  # no offset
        ({"every_s": 60, "end_at": "2001-01-01T00:00:00Z"}, "schedule.end_at"),  # no slot up to it
        ({"every_s": 60, "start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}, "schedule.end_at"),
        ({"cron": "0 0 1 1 *", "end_at": soon}, "schedule.end_at"),
    ]
    for schedule, loc in cases:
        answer = http.post("/v1/jobs", json=job_body(schedule=schedule))
        assert answer.status_code == 400, (schedule, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert [e["loc"] for e in answer.json()["errors"]] == [loc], (schedule, answer.text)
    job = _create(http, schedule={"every_s": 60})
    for schedule, loc in cases[2:6]:
        answer = http.patch(f"/v1/jobs/{job['id']}", json={"schedule": schedule}, headers=MERGE)
        assert answer.status_code == 400 and [e["loc"] for e in answer.json()["errors"]] == [loc], answer.text
    for field in ("runs_left", "paused"):
        answer = http.patch(f"/v1/jobs/{job['id']}", json={field: 3}, headers=MERGE)
        assert answer.status_code == 400 and [e["loc"] for e in answer.json()["errors"]] == [field]
    preview = http.post("/v1/schedules/preview", json={"schedule": {"at": "2030-01-01T00:00:00Z", "max_runs": 1}})
    assert preview.status_code == 400 and [e["loc"] for e in preview.json()["errors"]] == ["schedule.max_runs"]
