"""Catch-up after a real downtime: a server is stopped while slots of
every-second jobs pass, started again, and its catch-up runs and `run.missed`
records are read over HTTP (docs/semantics.md "Catch-up after missed slots")."""

import time
from datetime import datetime

import httpx

from conftest import unique

DOWNTIME_S = 6.0


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def create(http: httpx.Client, catchup: dict | None) -> tuple[str, str, int]:
    queue = unique("cu")
    body: dict = {"target": f"queue:{queue}", "schedule": {"every_s": 1}, "lease_s": 3600}
    if catchup is not None:
        body["catchup"] = catchup
    r = http.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["catchup"] == (None if catchup in (None, {"policy": "latest"}) else {
        "window_s": None, "policy": "latest", "max_runs": 1000} | catchup)
    return job["id"], queue, ms(job["created_at"]) + 1000  # the first slot


def claim_all(http: httpx.Client, queue: str, claims: int) -> list[int]:
    """Nominal times of the runs `claims` claims took, one run per claim."""
    nominal = []
    for _ in range(claims):
        r = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "max_runs": 1, "wait_s": 2})
        assert r.status_code == 200, r.text
        nominal += [ms(run["nominal_at"]) for run in r.json()["runs"]]
    return nominal


def missed_of(http: httpx.Client, job_id: str) -> list[tuple[str, int, int, int]]:
    events = http.get("/v1/events", params={"limit": 1000}).json()["events"]
    return [
        (e["detail"]["reason"], ms(e["detail"]["missed_from"]), ms(e["detail"]["missed_until"]), e["detail"]["count"])
        for e in events
        if e["type"] == "run.missed" and e["job_id"] == job_id
    ]


def runs_of(http: httpx.Client, job_id: str) -> list[int]:
    """Nominal times of the job's runs, without its `missed` rows."""
    runs = http.get(f"/v1/jobs/{job_id}/runs", params={"limit": 1000}).json()["runs"]
    return sorted(ms(r["nominal_at"]) for r in runs if r["status"] != "missed")


def test_each_catch_up_policy_after_a_downtime(fresh_server):
    """The run that was waiting when the server stopped is the first missed
    slot: the policy decides on it as on the others (none of them ran it
    before its next slot)."""
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        jobs = {
            "default": create(http, None),
            "latest": create(http, {"policy": "latest"}),
            "all": create(http, {"policy": "all", "max_runs": 2}),
            "none": create(http, {"policy": "none"}),
            "window": create(http, {"policy": "all", "window_s": 2}),
            "window0": create(http, {"window_s": 0}),
        }
    fresh_server.stop()
    time.sleep(DOWNTIME_S)
    fresh_server.start()
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        claimed = {name: claim_all(http, queue, 2) for name, (_, queue, _) in jobs.items()}
        for name in ("default", "latest"):
            job_id, _, s0 = jobs[name]
            # One run, at the latest slot; the slots before it, the waiting one first, are recorded.
            latest = claimed[name][0]
            assert latest >= s0 + 4000
            assert missed_of(http, job_id) == [("policy", s0, latest, (latest - s0) // 1000)]

        job_id, _, s0 = jobs["all"]
        [(reason, start, end, count)] = missed_of(http, job_id)
        # Two runs in all: the waiting one and the slot after it; the rest up to the latest recorded.
        assert claimed["all"][:2] == [s0, s0 + 1000]
        assert (reason, start) == ("policy", s0 + 2000) and count == (end - start) // 1000
        assert [t for t in runs_of(http, job_id) if t < end] == [s0, s0 + 1000]

        job_id, _, s0 = jobs["none"]
        [(reason, start, end, count)] = missed_of(http, job_id)
        assert (reason, start) == ("policy", s0) and count == (end - start) // 1000 >= 4
        # No missed slot ran, the waiting one included: the schedule after the outage.
        assert all(t >= end for t in claimed["none"])
        assert all(t >= end for t in runs_of(http, job_id))

        job_id, _, s0 = jobs["window"]
        [(reason, start, end, count)] = missed_of(http, job_id)
        assert (reason, start) == ("outside_window", s0) and count == (end - start) // 1000
        # The slots of the last two seconds ran, in order, from the one after the range.
        assert claimed["window"] == [end, end + 1000]
        assert [t for t in runs_of(http, job_id) if t < end] == []

        job_id, _, s0 = jobs["window0"]
        ranges = missed_of(http, job_id)
        assert ranges[0][:2] == ("outside_window", s0)
        assert s0 not in runs_of(http, job_id)


def test_slots_passed_while_paused_are_one_record(fresh_server):
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        job_id, _, s0 = create(http, None)
        assert http.post(f"/v1/jobs/{job_id}/pause").status_code == 200
        time.sleep(3.5)
        job = http.post(f"/v1/jobs/{job_id}/resume").json()
        next_ms = ms(job["next_run_at"])
        [(reason, start, end, count)] = missed_of(http, job_id)
        # The slot of the cancelled run is in the history; the ones after it until resume are not run.
        assert (reason, start, end) == ("paused", s0 + 1000, next_ms)
        assert count == (end - start) // 1000 >= 2
