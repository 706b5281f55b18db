"""Idempotent claims against a real `tempo serve` (docs/api.md "POST /v1/claim",
docs/semantics.md "Idempotent claims"): the same claim sent again with its
`claim_key` answers the same runs and takes no new ones."""

import time

import pytest

from conftest import metric, unique, wait_for

PAST = "2026-01-01T00:00:00Z"  # due at once


def due_jobs(http, queue: str, count: int, lease_s: int = 60) -> list[str]:
    ids = []
    for _ in range(count):
        r = http.post("/v1/jobs", json={"target": f"queue:{queue}", "schedule": {"at": PAST}, "lease_s": lease_s})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


def claim(http, worker: str, queues: list[str], key: str | None, max_runs: int = 10, wait_s: float = 0):
    body = {"worker": worker, "queues": queues, "max_runs": max_runs, "wait_s": wait_s}
    if key is not None:
        body["claim_key"] = key
    return http.post("/v1/claim", json=body)


def claim_until(http, worker: str, queue: str, key: str | None, count: int) -> list[dict]:
    """Runs become due within a dispatcher tick of their creation."""
    r = claim(http, worker, [queue], key, max_runs=count, wait_s=5)
    assert r.status_code == 200, r.text
    return r.json()["runs"]


def problem(r, status: int, type_: str, loc: str | None = None) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == type_
    if loc is not None:
        assert loc in [e["loc"] for e in body["errors"]], body
    return body


def test_the_same_claim_again_answers_the_same_runs_and_takes_no_new_ones(http):
    queue, key = unique("q"), unique("ck")
    jobs = due_jobs(http, queue, 3)
    wait_for(lambda: len(http.get(f"/v1/jobs/{jobs[2]}/runs").json()["runs"]) == 1)
    time.sleep(0.3)  # all three due and in the ready queue
    first = claim_until(http, "w1", queue, key, 2)
    assert len(first) == 2 and {r["attempt"] for r in first} == {1}
    repeats = metric(http, "tempo_claim_key_repeats_total")
    again = claim(http, "w1", [queue], key, max_runs=2)
    assert again.status_code == 200, again.text
    repeat = again.json()["runs"]
    assert [(r["id"], r["attempt"], r["worker"]) for r in repeat] == [(r["id"], r["attempt"], r["worker"]) for r in first]
    assert all(r["lease_expires_at"] for r in repeat)
    assert all(r["target"] == f"queue:{queue}" and r["lease_s"] == 60 for r in repeat)
    assert metric(http, "tempo_claim_key_repeats_total") == repeats + 1
    # The third run was not taken by the repeat: another claim gets it.
    [third] = claim_until(http, "w1", queue, None, 10)
    assert third["id"] not in {r["id"] for r in first} and third["attempt"] == 1


def test_a_key_with_another_worker_or_other_queues_is_409(http):
    queue, key = unique("q"), unique("ck")
    due_jobs(http, queue, 1)
    assert len(claim_until(http, "w1", queue, key, 1)) == 1
    problem(claim(http, "w2", [queue], key), 409, "claim_key_reused")
    problem(claim(http, "w1", [queue, unique("other")], key), 409, "claim_key_reused")
    # The same set, in another order and with a repeat, is the same claim.
    r = claim(http, "w1", [queue, queue], key)
    assert r.status_code == 200 and len(r.json()["runs"]) == 1


@pytest.mark.parametrize("bad", ["", "x" * 129, "has space", "tab\tkey", "é", "line\n", 7, None])
def test_a_bad_claim_key_is_400_at_claim_key(http, bad):
    body = {"worker": "w1", "queues": ["q"], "claim_key": bad}
    r = http.post("/v1/claim", json=body)
    if bad is None:
        assert r.status_code == 200  # null: no key
        return
    problem(r, 400, "validation", "claim_key")


def test_a_retry_after_the_lease_passed_to_another_worker_answers_without_it(http):
    """Fencing by attempt: the run went back to waiting and was claimed
    again by w2 (attempt 2); the old key's retry is not answered with it."""
    queue, key = unique("q"), unique("ck")
    [job_id] = due_jobs(http, queue, 1, lease_s=1)
    [first] = claim_until(http, "w1", queue, key, 1)
    wait_for(lambda: http.get(f"/v1/runs/{first['id']}").json()["status"] == "waiting", timeout_s=5)
    [second] = claim_until(http, "w2", queue, None, 1)
    assert second["id"] == first["id"] and second["attempt"] == 2
    r = claim(http, "w1", [queue], key)
    assert r.status_code == 200 and r.json()["runs"] == []
    run = http.get(f"/v1/runs/{first['id']}").json()
    assert (run["worker"], run["attempt"], run["status"]) == ("w2", 2, "claimed")
    assert job_id == run["job_id"]


def test_an_empty_claim_records_nothing(http):
    queue, key = unique("q"), unique("ck")
    r = claim(http, "w1", [queue], key)
    assert r.status_code == 200 and r.json()["runs"] == []
    due_jobs(http, queue, 1)
    assert len(claim_until(http, "w1", queue, key, 1)) == 1
