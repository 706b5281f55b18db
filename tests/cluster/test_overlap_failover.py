"""The overlap policy holds across a failover (docs/semantics.md "Overlap"):
it is decided in apply from replicated state, so after the leader is
SIGKILLed while a run is running, the new leader still skips (`skip`) or
still buffers one run (`buffer_one`) for the slots that fall due."""

import time

from .conftest import Cluster, client

SLOTS_S = 1  # a slot every second
HELD_S = 4.0  # slots that fall due on the new leader while the first run runs


def _claim(http, url: str, queue: str, wait_s: float = 5) -> list[dict]:
    answer = http.post(f"{url}/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": wait_s})
    assert answer.status_code == 200, answer.text
    return answer.json()["runs"]


def _runs(http, url: str, job_id: str) -> list[dict]:
    return list(reversed(http.get(f"{url}/v1/jobs/{job_id}/runs", params={"limit": 1000}).json()["runs"]))


def _start(cluster: Cluster, http, queue: str, overlap: str) -> tuple[str, dict, str]:
    """The job, its first run claimed on the leader, and the new leader's URL
    once that leader was killed."""
    leader = cluster.wait_leader()
    created = http.post(f"{leader.url}/v1/jobs", json={
        "target": f"queue:{queue}", "schedule": {"every_s": SLOTS_S}, "lease_s": 120, "overlap": overlap,
    })
    assert created.status_code == 201, created.text
    job = created.json()
    [first] = _claim(http, leader.url, queue)
    leader.kill()
    new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
    # Slots fall due on the new leader while the first run still runs (its
    # 120 s lease: the new leader grants it a full one).
    deadline_s = time.monotonic() + HELD_S
    answered = 0
    while time.monotonic() < deadline_s:
        answer = http.post(f"{new.url}/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 0.5})
        if answer.status_code != 200:
            time.sleep(0.1)  # the new leader settling in (503 with Retry-After): ask again
            continue
        assert answer.json()["runs"] == [], "a slot ran beside the running run"
        answered += 1
    assert answered > 0, "the new leader answered no claim"
    return job["id"], first, new.url


def test_skip_still_skips_after_a_failover(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    with client(timeout_s=10) as http:
        job_id, first, url = _start(cluster, http, "ov-skip", "skip")
        runs = _runs(http, url, job_id)
        skipped = [r for r in runs if r["status"] == "skipped"]
        assert len(skipped) >= 2 and all(r["reason"] == "overlap" for r in skipped)
        assert [r["status"] for r in runs].count("waiting") == 1  # the next slot's run
        assert [r["status"] for r in runs].count("claimed") == 1
        done = http.post(f"{url}/v1/runs/{first['id']}/result", json={"attempt": 1, "ok": True})
        assert done.status_code == 200, done.text
        [later] = _claim(http, url, "ov-skip")
        assert later["nominal_at"] > skipped[-1]["nominal_at"]


def test_buffer_one_still_buffers_one_after_a_failover(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    with client(timeout_s=10) as http:
        job_id, first, url = _start(cluster, http, "ov-buf", "buffer_one")
        runs = _runs(http, url, job_id)
        buffered = [r for r in runs if r["buffered"]]
        assert len(buffered) == 1 and buffered[0]["status"] == "waiting"
        assert len([r for r in runs if r["status"] == "skipped"]) >= 1
        done = http.post(f"{url}/v1/runs/{first['id']}/result", json={"attempt": 1, "ok": True})
        assert done.status_code == 200, done.text
        [next_run] = _claim(http, url, "ov-buf")
        assert next_run["id"] == buffered[0]["id"]
