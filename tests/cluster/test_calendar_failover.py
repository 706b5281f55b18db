"""A calendar edit and the claims of the job that uses it race across a
failover (docs/semantics.md "Calendars"): the leader is SIGKILLed while a
worker claims a job's runs every second and an edit that excludes today
is sent at once. Every slot of the job is accounted for exactly once (a
run done, or a range recorded skipped or missed), no run is handed out
twice, the runs after the edit are skipped by the calendar, and the nodes
converge on equal digests."""

import datetime as dt
import itertools
import threading
import time

import httpx

from .conftest import Cluster, client

QUEUE = "cal-fo"


def _leader(cluster: Cluster):
    """The leader the nodes that run agree on (a killed one has no say)."""
    return cluster.wait_leader(among=[n for n in cluster.nodes if n.alive], timeout_s=10)


def _work(cluster: Cluster, stop: threading.Event, handed: list[tuple[str, int]]) -> None:
    """Claims from whichever node leads and reports each run done."""
    with client(timeout_s=5) as http:
        while not stop.is_set():
            try:
                leader = _leader(cluster)
                answer = http.post(f"{leader.url}/v1/claim", json={"worker": "w", "queues": [QUEUE], "wait_s": 0.5})
                if answer.status_code != 200:
                    time.sleep(0.1)
                    continue
                for run in answer.json()["runs"]:
                    handed.append((run["id"], run["attempt"]))
                    http.post(f"{leader.url}/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": True})
            except (httpx.HTTPError, AssertionError):
                time.sleep(0.1)  # the leader died under the request: ask the next


def _put(cluster: Cluster, body: dict, deadline_s: float) -> dict:
    with client(timeout_s=5) as http:
        while time.monotonic() < deadline_s:
            try:
                leader = _leader(cluster)
                answer = http.put(f"{leader.url}/v1/calendars/days", json=body)
                if answer.status_code in (200, 201):
                    return answer.json()
            except (httpx.HTTPError, AssertionError):
                pass
            time.sleep(0.1)
    raise AssertionError("the calendar edit was never acknowledged")


def _covered(runs: list[dict]) -> list[tuple[int, int, str]]:
    """Each row's slots as [from, until) in ms: a range row's, or its one slot's."""
    spans = []
    for run in runs:
        start = int(dt.datetime.fromisoformat(run["nominal_at"]).timestamp() * 1000)
        until = run.get("missed_until")
        end = start + 1000 if until is None else int(dt.datetime.fromisoformat(until).timestamp() * 1000)
        spans.append((start, end, run["status"]))
    return sorted(spans)


def test_a_calendar_edit_and_claims_race_across_a_failover(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    deadline_s = time.monotonic() + 60
    _put(cluster, {"timezone": "UTC"}, deadline_s)
    with client(timeout_s=10) as http:
        leader = cluster.wait_leader()
        created = http.post(f"{leader.url}/v1/jobs", json={
            "target": f"queue:{QUEUE}", "schedule": {"every_s": 1, "calendar": "days"}, "lease_s": 30})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        stop = threading.Event()
        handed: list[tuple[str, int]] = []
        worker = threading.Thread(target=_work, args=(cluster, stop, handed), daemon=True)
        worker.start()
        time.sleep(3)
        today = dt.datetime.now(dt.UTC).date()
        excluded = [(today + dt.timedelta(days=n)).isoformat() for n in range(2)]
        edit = threading.Thread(target=_put, args=(cluster, {"timezone": "UTC", "exclude_dates": excluded}, deadline_s))
        edit.start()
        leader.kill()  # while the edit and the claims are in flight
        edit.join()
        before_edit = len(handed)
        time.sleep(3)  # the slots after the edit fall due on the new leader
        stop.set()
        worker.join(timeout=15)
        leader.start()
        cluster.wait_converged()

        new = cluster.wait_leader()
        runs = http.get(f"{new.url}/v1/jobs/{job_id}/runs", params={"limit": 1000}).json()["runs"]
        assert len(set(handed)) == len(handed), "a run was handed out twice"
        assert len({run_id for run_id, attempt in handed if attempt == 1}) == len([a for _, a in handed if a == 1])
        assert before_edit >= 1, "the worker claimed runs before the edit"
        spans = _covered(runs)
        for (start, end, _), (next_start, _, _) in itertools.pairwise(spans):
            assert end == next_start, f"slots lost or doubled around {start}: {spans}"
        skipped = [r for r in runs if r["status"] == "skipped"]
        assert len(skipped) == 1 and skipped[0]["reason"] == "calendar", runs
        waiting = [r for r in runs if r["status"] == "waiting"]
        day_after = (today + dt.timedelta(days=2)).isoformat()
        assert len(waiting) == 1 and waiting[0]["nominal_at"] >= day_after, waiting
        assert all(r["status"] in ("done", "skipped", "missed", "waiting", "claimed") for r in runs)
