"""Durability: a job acknowledged with 2xx survives SIGKILL of the server at
any moment (docs/api.md "General rules": a 2xx to a write means the change is durable)."""

import random
import threading
import time

import httpx

from conftest import unique

WRITERS = 3
BATCH_ITEMS = 50


def writer(url: str, seed: int, acked: dict, stop: threading.Event) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=10.0) as http:
        while not stop.is_set():
            bodies = [
                {
                    "target": f"queue:crash-{rng.randrange(4)}",
                    "schedule": rng.choice([{"at": "2031-01-01T00:00:00Z"}, {"every_s": 3600}]),
                    "request_key": unique("crash"),
                    "payload": {"n": rng.randrange(1 << 30)},
                }
                for _ in range(1 if rng.random() < 0.5 else BATCH_ITEMS)
            ]
            try:
                if len(bodies) == 1:
                    r = http.post("/v1/jobs", json=bodies[0])
                    jobs = [r.json()] if r.status_code == 201 else []
                else:
                    r = http.post("/v1/jobs/batch", json={"jobs": bodies})
                    jobs = [x["job"] for x in r.json()["results"]] if r.status_code == 200 else []
            except (httpx.HTTPError, ValueError):
                return  # the server is gone; what was acknowledged is recorded
            if r.status_code == 503:
                return  # shutting down: refused, so not acknowledged
            if r.status_code not in (200, 201):
                acked[("error", len(acked))] = r.text  # fails check_acknowledged
                return
            for body, job in zip(bodies, jobs, strict=True):
                acked[job["id"]] = (body, job)


def all_jobs(http: httpx.Client) -> dict:
    found, cursor = {}, None
    while True:
        page = http.get("/v1/jobs", params={"limit": 1000} | ({"cursor": cursor} if cursor else {})).json()
        found.update((j["id"], j) for j in page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            return found


def check_acknowledged(http: httpx.Client, acked: dict, rng: random.Random) -> None:
    errors = [v for k, v in acked.items() if isinstance(k, tuple)]
    assert not errors, errors[:3]
    stored = all_jobs(http)
    missing = [job_id for job_id in acked if job_id not in stored]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged jobs lost, e.g. {missing[:3]}"
    for job_id, (_, job) in acked.items():
        assert stored[job_id] == job
    ids = list(acked)
    sample = set(ids[-50:]) | set(rng.sample(ids, min(150, len(ids))))
    for job_id in sample:
        body, job = acked[job_id]
        runs = http.get(f"/v1/jobs/{job_id}/runs").json()["runs"]
        assert [(r["status"], r["due_at"]) for r in runs] == [("waiting", job["next_run_at"])]
        again = http.post("/v1/jobs", json=body)
        assert again.status_code == 200 and again.json()["id"] == job_id


def test_acknowledged_jobs_survive_sigkill(fresh_server):
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    print(f"seed {seed}")
    acked: dict = {}
    for round_ in range(2):
        stop = threading.Event()
        threads = [
            threading.Thread(target=writer, args=(fresh_server.url, rng.randrange(1 << 32), acked, stop))
            for _ in range(WRITERS)
        ]
        before = len(acked)
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.3, 1.2))
        fresh_server.kill()
        stop.set()
        for t in threads:
            t.join(timeout=15)
            assert not t.is_alive()
        assert len(acked) > before, f"round {round_}: nothing was acknowledged (seed {seed})"
        print(f"round {round_}: {len(acked)} jobs acknowledged")
        fresh_server.start()
        with httpx.Client(base_url=fresh_server.url, timeout=30.0) as http:
            check_acknowledged(http, acked, rng)
    fresh_server.stop()


def test_pause_and_delete_survive_sigkill(fresh_server):
    with httpx.Client(base_url=fresh_server.url, timeout=10.0) as http:
        kept = http.post("/v1/jobs", json={"target": "queue:c", "schedule": {"every_s": 60}}).json()
        paused = http.post("/v1/jobs", json={"target": "queue:c", "schedule": {"every_s": 60}}).json()
        gone = http.post("/v1/jobs", json={"target": "queue:c", "schedule": {"every_s": 60}}).json()
        assert http.post(f"/v1/jobs/{paused['id']}/pause").status_code == 200
        assert http.delete(f"/v1/jobs/{gone['id']}").status_code == 204
        trigger = http.post(f"/v1/jobs/{kept['id']}/trigger").json()
    fresh_server.kill()
    fresh_server.start()
    with httpx.Client(base_url=fresh_server.url, timeout=10.0) as http:
        assert http.get(f"/v1/jobs/{kept['id']}").json() == kept
        assert http.get(f"/v1/runs/{trigger['id']}").json() == {**trigger, "attempts": [], "caused_by": []}
        assert http.get(f"/v1/jobs/{paused['id']}").json()["state"] == "paused"
        assert http.get(f"/v1/jobs/{gone['id']}").status_code == 404


def test_sigterm_under_load_exits_0_and_keeps_what_it_acknowledged(fresh_server):
    rng = random.Random()
    acked: dict = {}
    stop = threading.Event()
    threads = [
        threading.Thread(target=writer, args=(fresh_server.url, rng.randrange(1 << 32), acked, stop))
        for _ in range(WRITERS)
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    fresh_server.stop()  # asserts exit status 0
    stop.set()
    for t in threads:
        t.join(timeout=15)
        assert not t.is_alive()
    assert acked
    fresh_server.start()
    with httpx.Client(base_url=fresh_server.url, timeout=30.0) as http:
        check_acknowledged(http, acked, rng)
