"""A catch-up decision taken by one leader is kept by the next: the runs
and the `run.missed` record it made are replicated state, so a new leader
goes on with the same `all` catch-up rather than deciding again, and nothing
is doubled (docs/semantics.md "Catch-up after missed slots")."""

import signal
import time
from datetime import datetime

from .conftest import Cluster, client


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def claim_one(url: str, queue: str) -> list[int]:
    with client(timeout_s=10) as http:
        r = http.post(f"{url}/v1/claim", json={"worker": "w", "queues": [queue], "max_runs": 1, "wait_s": 3})
        assert r.status_code == 200, r.text
        return [ms(run["nominal_at"]) for run in r.json()["runs"]]


def test_a_catch_up_is_kept_across_a_failover(make_cluster):
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    with client(timeout_s=10) as http:
        r = http.post(f"{leader.url}/v1/jobs", json={
            "target": "queue:cu", "schedule": {"every_s": 1}, "lease_s": 3600,
            "catchup": {"policy": "all", "max_runs": 3},
        })
        assert r.status_code == 201, r.text
        job = r.json()
    job_id, s0 = job["id"], ms(job["created_at"]) + 1000
    time.sleep(6.5)  # no worker: the slots after the waiting one pass without a run
    # The old leader decides: run the first three missed slots in order (the
    # waiting one first: its next slot passed too), record the rest.
    assert claim_one(leader.url, "cu") == [s0]
    with client(timeout_s=10) as http:
        events = http.get(f"{leader.url}/v1/events").json()["events"]
    decided = [e["detail"] for e in events if e["type"] == "run.missed" and e["job_id"] == job_id]
    [(reason, start)] = [(d["reason"], ms(d["missed_from"])) for d in decided]
    assert (reason, start) == ("policy", s0 + 3000)
    assert claim_one(leader.url, "cu") == [s0 + 1000]
    leader.signal(signal.SIGKILL)
    new = cluster.wait_leader(among=cluster.others(leader), timeout_s=15)
    time.sleep(1.5)  # more slots pass: the new leader must not take them for a new decision
    claimed = []
    for _ in range(3):
        claimed += claim_one(new.url, "cu")
    end = ms(decided[0]["missed_until"])
    # The catch-up goes on where the old leader left it, then the schedule
    # after the range it recorded.
    assert claimed[:1] == [s0 + 2000] and claimed[1] >= end
    with client(timeout_s=10) as http:
        events = http.get(f"{new.url}/v1/events").json()["events"]
        runs = http.get(f"{new.url}/v1/jobs/{job_id}/runs", params={"limit": 1000}).json()["runs"]
    assert [e["detail"] for e in events if e["type"] == "run.missed" and e["job_id"] == job_id][:1] == decided
    # The range is a `missed` row of the job's runs on the new leader too
    # (the first; later slots may have been caught up since).
    rows = sorted((ms(r["missed_from"]), ms(r["missed_until"]), r["reason"]) for r in runs if r["status"] == "missed")
    assert rows[0] == (s0 + 3000, end, "policy")
    nominal = sorted(ms(r["nominal_at"]) for r in runs if r["status"] != "missed")
    assert len(nominal) == len(set(nominal))
    # No run in the recorded range; after it, the schedule goes on.
    assert [t for t in nominal if t < end] == [s0 + k * 1000 for k in range(3)]
    leader.start()
    cluster.wait_converged()
