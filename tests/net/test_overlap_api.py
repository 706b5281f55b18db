"""A job's `overlap` policy against a real `tempo serve` (docs/api.md
"Jobs", docs/semantics.md "Overlap"): every policy, with slots one second
apart and a worker that holds a run."""

import re

import httpx
import pytest

from conftest import job_body, unique, wait_for

MERGE = {"content-type": "application/merge-patch+json"}
EVENTUALLY_S = 20.0


def _create(http: httpx.Client, **overrides) -> dict:
    answer = http.post("/v1/jobs", json=job_body(**overrides))
    assert answer.status_code == 201, answer.text
    return answer.json()


def _every_second(http: httpx.Client, overlap: str, **overrides) -> tuple[dict, str]:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"every_s": 1}, overlap=overlap, **overrides)
    return job, queue


def _claim(http: httpx.Client, queue: str, wait_s: float = 10) -> list[dict]:
    answer = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": wait_s})
    assert answer.status_code == 200, answer.text
    return answer.json()["runs"]


def _runs(http: httpx.Client, job_id: str) -> list[dict]:
    """The job's runs, oldest slot first."""
    return list(reversed(http.get(f"/v1/jobs/{job_id}/runs", params={"limit": 1000}).json()["runs"]))


def _counter(http: httpx.Client, name: str, labels: str = "") -> float:
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", http.get("/metrics").text, re.M)
    assert found, f"{name}{labels} not in /metrics"
    return float(found.group(1))


def _done(http: httpx.Client, run: dict) -> dict:
    answer = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": True})
    assert answer.status_code == 200, answer.text
    return answer.json()


# -- the field ----------------------------------------------------------------------


def test_overlap_is_shown_created_and_patched(http: httpx.Client) -> None:
    assert _create(http, schedule={"every_s": 60})["overlap"] == "allow"
    assert _create(http)["overlap"] == "allow"  # a one-off: always allow
    job = _create(http, schedule={"every_s": 60}, overlap="skip")
    assert job["overlap"] == "skip"
    assert http.get(f"/v1/jobs/{job['id']}").json()["overlap"] == "skip"
    patched = http.patch(f"/v1/jobs/{job['id']}", json={"overlap": "buffer_all"}, headers=MERGE)
    assert patched.status_code == 200, patched.text
    assert patched.json()["overlap"] == "buffer_all" and patched.json()["version"] == 2
    back = http.patch(f"/v1/jobs/{job['id']}", json={"overlap": None}, headers=MERGE)
    assert back.json()["overlap"] == "allow"


@pytest.mark.parametrize("value", ["sometimes", "", 1, True, ["skip"], {"policy": "skip"}])
def test_a_bad_policy_is_400_at_overlap(http: httpx.Client, value: object) -> None:
    answer = http.post("/v1/jobs", json=job_body(schedule={"every_s": 60}, overlap=value))
    assert answer.status_code == 400 and answer.headers["content-type"] == "application/problem+json"
    assert [e["loc"] for e in answer.json()["errors"]] == ["overlap"]
    job = _create(http, schedule={"every_s": 60})
    patched = http.patch(f"/v1/jobs/{job['id']}", json={"overlap": value}, headers=MERGE)
    assert patched.status_code == 400
    assert [e["loc"] for e in patched.json()["errors"]] == ["overlap"]


def test_a_one_off_takes_no_policy_but_allow(http: httpx.Client) -> None:
    answer = http.post("/v1/jobs", json=job_body(overlap="skip"))
    assert answer.status_code == 400
    assert [e["loc"] for e in answer.json()["errors"]] == ["overlap"]
    assert _create(http, overlap="allow")["overlap"] == "allow"


# -- the policies ---------------------------------------------------------------------


def test_allow_lets_runs_overlap(http: httpx.Client) -> None:
    _job, queue = _every_second(http, "allow")
    [first] = _claim(http, queue)
    [second] = _claim(http, queue)
    assert first["id"] != second["id"]


def test_skip_records_slots_skipped_while_a_run_runs(http: httpx.Client) -> None:
    before = _counter(http, "tempo_runs_skipped_total", '{reason="overlap"}')
    job, queue = _every_second(http, "skip")
    [first] = _claim(http, queue)
    # Slots come due every second while it runs: none is handed out.
    assert _claim(http, queue, wait_s=3) == []
    skipped = [r for r in _runs(http, job["id"]) if r["status"] == "skipped"]
    assert skipped and all(r["reason"] == "overlap" and r["attempt"] == 0 for r in skipped)
    listed = http.get("/v1/runs", params={"status": "skipped", "limit": 1000}).json()["runs"]
    assert {r["id"] for r in skipped} <= {r["id"] for r in listed}
    # Slots go on being skipped while the test reads: the job's count lies
    # between what the history held before and after it was read.
    shown = http.get(f"/v1/jobs/{job['id']}").json()
    after = [r for r in _runs(http, job["id"]) if r["status"] == "skipped"]
    assert len(skipped) <= shown["runs"]["skipped"] <= len(after)
    assert [r["status"] for r in _runs(http, job["id"])].count("waiting") == 1  # the next slot's run
    assert _counter(http, "tempo_runs_skipped_total", '{reason="overlap"}') >= before + len(skipped)
    events = http.get("/v1/events", params={"limit": 1000}).json()["events"]
    assert {e["run_id"] for e in events if e["type"] == "run.skipped"} >= {r["id"] for r in skipped}
    # Once it ended, the next slot runs.
    _done(http, first)
    [later] = _claim(http, queue)
    assert later["nominal_at"] > first["nominal_at"]


def test_a_timeout_ends_the_running_run(http: httpx.Client) -> None:
    """Running is from the claim until the result, or until the lease or
    timeout ends it: a `skip` job's next slot runs once a run's timeout
    ended its attempt, while that run waits a minute for its retry."""
    _job, queue = _every_second(http, "skip", timeout_s=1, retry={"max_attempts": 3, "backoff_s": [60]})
    [first] = _claim(http, queue)
    # It heartbeats on: the timeout ends the attempt whatever the heartbeats say.
    def told_to_stop() -> bool:
        beat = http.post(f"/v1/runs/{first['id']}/heartbeat", json={"attempt": 1}).json()
        return beat.get("cancel") == "timeout"
    wait_for(told_to_stop, EVENTUALLY_S)
    [later] = _claim(http, queue)
    assert later["id"] != first["id"]


def test_buffer_one_runs_one_slot_after_the_running_one(http: httpx.Client) -> None:
    job, queue = _every_second(http, "buffer_one")
    [first] = _claim(http, queue)
    assert _claim(http, queue, wait_s=3) == []
    runs = _runs(http, job["id"])
    buffered = [r for r in runs if r["buffered"]]
    assert len(buffered) == 1 and buffered[0]["status"] == "waiting"
    assert buffered[0]["due_at"].startswith("9999-12-31")
    assert [r["status"] for r in runs if r["nominal_at"] > buffered[0]["nominal_at"]].count("skipped") >= 1
    _done(http, first)
    [next_run] = _claim(http, queue)
    assert next_run["id"] == buffered[0]["id"] and not next_run["buffered"]


def test_buffer_all_runs_every_slot_in_order(http: httpx.Client) -> None:
    job, queue = _every_second(http, "buffer_all")
    [run] = _claim(http, queue)
    assert _claim(http, queue, wait_s=3) == []
    buffered = [r["id"] for r in _runs(http, job["id"]) if r["buffered"]]
    assert len(buffered) >= 2
    assert not [r for r in _runs(http, job["id"]) if r["status"] == "skipped"]
    http.patch(f"/v1/jobs/{job['id']}", json={"schedule": {"every_s": 3600}}, headers=MERGE)
    for expected in buffered:
        _done(http, run)
        [run] = _claim(http, queue)
        assert run["id"] == expected
    _done(http, run)


def test_cancel_other_asks_the_running_run_to_stop(http: httpx.Client) -> None:
    _job, queue = _every_second(http, "cancel_other")
    [first] = _claim(http, queue)
    [second] = _claim(http, queue)
    assert second["id"] != first["id"]
    beat = http.post(f"/v1/runs/{first['id']}/heartbeat", json={"attempt": 1}).json()
    assert beat["cancel"] == "requested"
    assert http.get(f"/v1/runs/{first['id']}").json()["cancel_requested"] is True
    # Stopped as asked, it reports a failure: recorded cancelled, no retry.
    stopped = http.post(f"/v1/runs/{first['id']}/result", json={"attempt": 1, "ok": False, "error": "stopped"})
    assert stopped.status_code == 200 and stopped.json()["status"] == "cancelled", stopped.text


def test_triggered_runs_obey_the_policy(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"every_s": 3600}, overlap="skip")
    first = http.post(f"/v1/jobs/{job['id']}/trigger").json()
    [claimed] = _claim(http, queue)
    assert claimed["id"] == first["id"]
    second = http.post(f"/v1/jobs/{job['id']}/trigger").json()
    assert _claim(http, queue, wait_s=1) == []
    shown = wait_for(lambda: (r := http.get(f"/v1/runs/{second['id']}").json())["status"] == "skipped" and r, EVENTUALLY_S)
    assert shown["reason"] == "overlap"
