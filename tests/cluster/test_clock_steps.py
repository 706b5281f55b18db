"""A takeover by nodes whose wall clocks are an hour behind the old
leader's (docs/semantics.md "Clocks"): the new leader continues from the
stamps the old one applied, so runs keep coming, no slot runs twice, a
claimed run is handed out again after a full lease from the takeover, and
new jobs list first. The clocks are shifted with libfaketime, as in
tests/test_clock_steps.py."""

import time
from pathlib import Path

import pytest

from conftest import LIBFAKETIME

from .conftest import Cluster, client

pytestmark = pytest.mark.skipif(not LIBFAKETIME, reason="libfaketime not found (Debian package faketime)")


# How long a claim retries a `503` (see `claim`).
no_leader_retry_s = 15.0


def set_offset(path: Path, offset_s: float) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{offset_s:+.3f}\n")
    tmp.replace(path)


def claim(http, url: str, queue: str, wait_s: float, worker: str = "w1") -> list:
    """A claim; a `503` (a leader just elected, not serving yet, or none
    known while an election runs) is retried, as a worker would, for up to
    `no_leader_retry_s`: on a loaded 2-core machine the three nodes, their
    proxies and libfaketime's file reads can miss a heartbeat and hold an
    election before the failover this test makes (seen in CI: 503 for 5 s
    before the kill)."""
    deadline_s = time.monotonic() + no_leader_retry_s
    while True:
        body = {"worker": worker, "queues": [queue], "max_runs": 1, "wait_s": wait_s}
        answer = http.post(f"{url}/v1/claim", json=body)
        if answer.status_code != 503 or time.monotonic() > deadline_s:
            break
        time.sleep(0.1)
    assert answer.status_code == 200, answer.text
    return answer.json()["runs"]


def test_a_new_leader_an_hour_behind_continues_from_the_stamps(tmp_path: Path):
    cluster = Cluster(tmp_path / "c")
    files = {}
    for node in cluster.nodes:
        files[node.id] = tmp_path / f"{node.id}.faketime"
        set_offset(files[node.id], 0.0)
        node.env = {
            "LD_PRELOAD": LIBFAKETIME[0],
            "FAKETIME_TIMESTAMP_FILE": str(files[node.id]),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }
    try:
        cluster.start()
        leader = cluster.wait_leader()
        with client(30.0) as http:
            every = http.post(f"{leader.url}/v1/jobs", json={"target": "queue:every", "schedule": {"every_s": 1}})
            assert every.status_code == 201, every.text
            held_job = http.post(f"{leader.url}/v1/jobs", json={
                "target": "queue:held", "schedule": {"at": "2020-01-01T00:00:00Z"}, "lease_s": 5,
            })
            assert held_job.status_code == 201, held_job.text
            [held] = claim(http, leader.url, "held", 5, worker="gone")
            [first] = claim(http, leader.url, "every", 5)
            nominals = [first["nominal_at"]]
            for node in cluster.others(leader):
                set_offset(files[node.id], -3600.0)
            leader.kill()
            killed_s = time.monotonic()
            new = cluster.wait_leader(among=cluster.others(leader), timeout_s=15)
            for _ in range(3):
                runs = claim(http, new.url, "every", 6)
                assert runs, f"no run within 6 s of the takeover:\n{cluster.logs()}"
                nominals.append(runs[0]["nominal_at"])
            assert nominals == sorted(set(nominals)), "a slot ran twice, or out of order"
            [again] = claim(http, new.url, "held", 15, worker="fresh")
            assert again["id"] == held["id"] and again["attempt"] == 2
            assert time.monotonic() - killed_s <= 15 + 5 + 4
            newer = http.post(f"{new.url}/v1/jobs", json={"target": "queue:q", "schedule": {"every_s": 60}}).json()
            listed = http.get(f"{new.url}/v1/jobs", params={"limit": 1}).json()["jobs"]
            assert [j["id"] for j in listed] == [newer["id"]]
            steps = http.get(f"{new.url}/metrics").text
            assert 'tempo_clock_steps_total{direction="backward"}' in steps
    finally:
        cluster.cleanup()
