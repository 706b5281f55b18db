"""A corrupt stored record: a read that meets it fails with the error
logged, and a write that would apply over it stops the node instead."""

import time

import httpx

from conftest import job_body
from tempo.engine import keys
from tempo.engine.store import Store

exit_timeout_s = 20.0


def test_a_corrupt_job_record_fails_reads_and_stops_the_node_on_apply(fresh_server):
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        job = http.post("/v1/jobs", json=job_body()).json()
    fresh_server.stop()
    store = Store(str(fresh_server.data_dir))
    try:
        with store.env.begin(write=True) as txn:
            assert txn.replace(keys.job_key(job["id"]), b"\x9f\xc1", db=store.db["jobs"]) is not None
    finally:
        store.close()
    fresh_server.start()
    with httpx.Client(base_url=fresh_server.url, timeout=10) as http:
        read = http.get(f"/v1/jobs/{job['id']}")
        assert read.status_code == 500
        assert fresh_server.proc.poll() is None
        try:
            http.post(f"/v1/jobs/{job['id']}/pause")
        except httpx.HTTPError:
            pass  # the node may stop before it answers
    deadline_s = time.monotonic() + exit_timeout_s
    while fresh_server.proc.poll() is None and time.monotonic() < deadline_s:
        time.sleep(0.05)
    assert fresh_server.proc.returncode not in (None, 0)
    assert "a stored Job does not decode" in fresh_server.log()
