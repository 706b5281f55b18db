"""Disk full is a state, not a crash (docs/operations.md "Disk full").

A real `tempo serve` whose data directory is on a small tmpfs the test mounts
(root only; without the right to mount, the test skips and says so). Writes
fill it; every batch is answered (`507 insufficient_storage` once nothing
fits), the node keeps serving reads, `/healthz` stays 200, `/readyz` and
`/metrics` say writes are refused, and one log line says why. Once space is
freed, writes resume by themselves, and every acknowledged job is there
after a restart.
"""

import os
import time
from pathlib import Path

import httpx

from conftest import Server, unique

FILLER_BYTES = 6 << 20  # freed later: the space that returns
BATCH_JOBS = 100
PAYLOAD_CHARS = 1000
BATCHES_MAX = 1000  # far more than the tmpfs can hold
RESUME_TIMEOUT_S = 20.0


def fill(path: Path, size_bytes: int) -> None:
    with open(path, "wb") as f:
        f.write(os.urandom(size_bytes))


def batch(tag: str) -> dict:
    return {
        "jobs": [
            {
                "target": "queue:disk",
                "schedule": {"at": "2031-01-01T00:00:00Z"},
                "request_key": unique(tag),
                "payload": {"pad": "x" * PAYLOAD_CHARS},
            }
            for _ in range(BATCH_JOBS)
        ]
    }


def metric(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def test_a_full_disk_refuses_writes_keeps_serving_and_resumes_when_space_returns(small_disk: Path, tmp_path: Path):
    filler = small_disk / "filler"
    fill(filler, FILLER_BYTES)
    server = Server(small_disk / "data")
    server.log_path = tmp_path / "server.log"  # the log is not on the full disk
    acked: list[str] = []
    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=30.0) as http:
            refused = None
            for i in range(BATCHES_MAX):
                try:
                    r = http.post("/v1/jobs/batch", json=batch(f"fill{i}"))
                except httpx.HTTPError as exc:
                    raise AssertionError(f"batch {i} got no answer ({exc!r}); the node: {server.log()}") from None
                if r.status_code == 200:
                    acked += [item["job"]["id"] for item in r.json()["results"]]
                    continue
                refused = r
                break
            assert refused is not None, "the tmpfs never filled"
            assert refused.status_code == 507, refused.text
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.json()["type"] == "insufficient_storage"
            assert acked, "nothing fit before the disk was full"

            # Still up: it answers, serves reads, and says why it is not ready.
            for _ in range(5):
                again = http.post("/v1/jobs/batch", json=batch("again"))
                assert again.status_code == 507, again.text
            assert server.proc.poll() is None
            assert http.get("/healthz").status_code == 200
            ready = http.get("/readyz")
            assert ready.status_code == 503
            assert "writes refused" in ready.json().get("reason", ""), ready.text
            assert metric(http, "tempo_storage_writes_refused") == 1
            assert http.get(f"/v1/jobs/{acked[0]}").status_code == 200
            assert http.get(f"/v1/jobs/{acked[-1]}").status_code == 200
            assert server.log().count("writes refused") == 1, server.log()

            # Space returns: writes resume without a restart.
            full_jobs = len(acked)
            filler.unlink()
            freed_at_s = time.monotonic()
            deadline_s = freed_at_s + RESUME_TIMEOUT_S
            while True:
                r = http.post("/v1/jobs", json={"target": "queue:disk", "schedule": {"at": "2031-01-01T00:00:00Z"}})
                if r.status_code == 201:
                    acked.append(r.json()["id"])
                    resumed_s = time.monotonic() - freed_at_s
                    break
                assert r.status_code == 507, r.text
                assert time.monotonic() < deadline_s, f"writes did not resume: {server.log()}"
                time.sleep(0.2)
            deadline_s = time.monotonic() + RESUME_TIMEOUT_S
            while http.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline_s, "/readyz did not come back"
                time.sleep(0.1)
            assert metric(http, "tempo_storage_writes_refused") == 0
            ready_s = time.monotonic() - freed_at_s
            print(f"{full_jobs} jobs in {i} batches filled the disk; after space was freed, a create "
                  f"succeeded in {resumed_s:.2f} s and /readyz was 200 in {ready_s:.2f} s")

        server.restart()
        with httpx.Client(base_url=server.url, timeout=30.0) as http:
            missing = [job_id for job_id in acked if http.get(f"/v1/jobs/{job_id}").status_code != 200]
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged jobs lost, e.g. {missing[:3]}"
    finally:
        server.cleanup()
