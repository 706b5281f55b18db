"""A claim whose answer was lost with its leader (SIGKILLed right after the
claim was committed) is retried with its `claim_key` at the new leader, and
gets the same runs at the same attempts: nothing waits for a lease to run
out (docs/semantics.md "Idempotent claims")."""

import json
import time
import uuid
from http.client import HTTPConnection

from .conftest import Cluster, client

PAST = "2026-01-01T00:00:00Z"
JOBS = 12
# Far below the lease (60 s): a run stranded until its lease ran out would
# not be done by then.
settle_s = 20.0


def claimed_on(cluster: Cluster, node, job_ids: list[str]) -> dict[str, tuple[str, int, str | None]]:
    """run ID → (status, attempt, worker) of each job's run, as `node` holds it."""
    out = {}
    with client(2.0, follow=False) as http:
        for job_id in job_ids:
            r = http.get(f"{node.url}/v1/jobs/{job_id}/runs", params={"stale": "true"})
            if r.status_code != 200:
                continue
            for run in r.json()["runs"]:
                out[run["id"]] = (run["status"], run["attempt"], run["worker"])
    return out


def test_a_claim_retried_with_its_key_after_the_leader_died_gets_the_same_runs(make_cluster):
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    queue, key = f"q-{uuid.uuid4().hex[:8]}", f"ck-{uuid.uuid4().hex}"
    with client(5.0) as http:
        job_ids = []
        for _ in range(JOBS):
            r = http.post(f"{leader.url}/v1/jobs", json={"target": f"queue:{queue}", "schedule": {"at": PAST}})
            assert r.status_code == 201, r.text
            job_ids.append(r.json()["id"])
    time.sleep(0.5)  # every run due and ready on the leader
    follower = cluster.others(leader)[0]

    # The claim goes straight to the leader's own port; its answer is never read.
    body = {"worker": "w1", "queues": [queue], "max_runs": JOBS // 2, "wait_s": 5, "claim_key": key}
    conn = HTTPConnection(leader.host, leader.listen_port, timeout=10)
    conn.request("POST", "/v1/claim", body=json.dumps(body), headers={"content-type": "application/json"})
    deadline_s = time.monotonic() + 10
    while True:
        held = {rid: v for rid, v in claimed_on(cluster, follower, job_ids).items() if v[0] == "claimed"}
        if held:
            break  # one command: all the claim's runs at once
        assert time.monotonic() < deadline_s, "the claim was not committed"
        time.sleep(0.02)
    killed_at = time.monotonic()
    leader.kill()
    conn.close()
    new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
    assert len(held) == JOBS // 2 and {v[1:] for v in held.values()} == {(1, "w1")}

    with client(5.0) as http:
        # To any node: the other survivor redirects to the new leader.
        other = next(n for n in cluster.others(leader) if n is not new)
        r = http.post(f"{other.url}/v1/claim", json=body)
        assert r.status_code == 200, r.text
        again = r.json()["runs"]
        assert {r["id"]: (r["status"], r["attempt"], r["worker"]) for r in again} == held
        assert all(r["lease_expires_at"] for r in again)
        # The rest go to another claim; none of the keyed ones with them.
        r = http.post(f"{new.url}/v1/claim", json={"worker": "w2", "queues": [queue], "max_runs": JOBS, "wait_s": 2})
        rest = r.json()["runs"]
        assert {x["id"] for x in rest}.isdisjoint(held) and len(rest) == JOBS - len(held)
        results = [{"run_id": x["id"], "attempt": x["attempt"], "ok": True} for x in again + rest]
        r = http.post(f"{new.url}/v1/results", json={"results": results})
        assert r.status_code == 200 and len(r.json()["accepted"]) == JOBS, r.text
    done_s = time.monotonic() - killed_at
    final = claimed_on(cluster, new, job_ids)
    assert len(final) == JOBS and all(v[0] == "done" and v[1] == 1 for v in final.values()), final
    assert done_s < settle_s
    print(f"killed {leader.id}; {new.id} answered the retry; every run done {done_s:.2f} s after the kill")
