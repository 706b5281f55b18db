"""One node of three on a small tmpfs that fills (docs/operations.md "Disk
full"): the node stays up and says that writes are refused, the other two
go on acknowledging writes (whether the full node was leading or following),
and once space returns it catches up to the same tables."""

import os
import time
import uuid

import httpx

from .conftest import Cluster, client

FILLER_BYTES = 6 << 20  # freed later: the space that returns
BATCH_JOBS = 100
PAYLOAD_CHARS = 1000
BATCHES_MAX = 400  # far more than the tmpfs holds (in the raft log and the tables)
BATCHES_AFTER = 5  # written while the node is full: few enough for the freed space to hold
BATCH_TIMEOUT_S = 30.0
CATCH_UP_TIMEOUT_S = 60.0


def batch() -> dict:
    return {"jobs": [
        {"target": "queue:disk", "schedule": {"at": "2031-01-01T00:00:00Z"},
         "request_key": f"disk-{uuid.uuid4().hex}", "payload": {"pad": "x" * PAYLOAD_CHARS}}
        for _ in range(BATCH_JOBS)
    ]}


class Writer:
    """Posts batches to the nodes in turn (redirects followed), from the last
    that acknowledged one, until one acknowledges each; every other answer
    is noted in `answers`. A 507 (the full node led) and a 503 (an election)
    are answers a client retries, as is a dropped connection (a redirect
    answered before the body was read)."""

    def __init__(self, cluster: Cluster, http: httpx.Client):
        self.cluster = cluster
        self.http = http
        self.k = 0
        self.answers: list[str] = []

    def post(self, body: dict) -> list[str]:
        """The batch's job IDs, once a node acknowledged it."""
        deadline_s = time.monotonic() + BATCH_TIMEOUT_S
        while True:
            node = self.cluster.nodes[self.k % len(self.cluster.nodes)]
            try:
                r = self.http.post(f"{node.url}/v1/jobs/batch", json=body)
                if r.status_code == 200:
                    return [item["job"]["id"] for item in r.json()["results"]]
                self.answers.append(f"{node.id}: {r.status_code} {r.json().get('type')}")
                assert r.status_code in (503, 507), r.text
            except httpx.HTTPError as exc:
                self.answers.append(f"{node.id}: {type(exc).__name__}")
            self.k += 1
            self.cluster.assert_running()
            assert time.monotonic() < deadline_s, f"no node acknowledged a batch: {self.answers[-12:]}"
            time.sleep(0.1)


def refused(http: httpx.Client, url: str) -> bool:
    return "tempo_storage_writes_refused 1" in http.get(f"{url}/metrics").text.splitlines()


def test_a_member_on_a_full_disk_stays_up_and_the_others_go_on(tmp_path, small_disk):
    cluster = Cluster(tmp_path / "c")
    full = cluster.nodes[0]
    full.data_dir = small_disk / full.id
    filler = small_disk / "filler"
    with open(filler, "wb") as f:
        f.write(os.urandom(FILLER_BYTES))
    acked: list[str] = []
    try:
        cluster.start()
        with client(timeout_s=10.0) as http:
            writer = Writer(cluster, http)
            for _ in range(BATCHES_MAX):
                acked += writer.post(batch())
                cluster.assert_running()  # the full node too: it must not exit
                if refused(http, full.url):
                    break
            assert refused(http, full.url), "the tmpfs never filled"
            for _ in range(BATCHES_AFTER):
                acked += writer.post(batch())
            # The full node is up, answers, and says why it is not ready.
            assert full.alive
            assert http.get(f"{full.url}/healthz").status_code == 200
            ready = http.get(f"{full.url}/readyz")
            assert ready.status_code == 503 and "writes refused" in ready.json()["reason"], ready.text
            leader = cluster.wait_leader(cluster.others(full))

            filler.unlink()
            cluster.wait_converged(CATCH_UP_TIMEOUT_S)
            cluster.wait_ready(cluster.nodes)
            missing = [job_id for job_id in acked if http.get(f"{leader.url}/v1/jobs/{job_id}").status_code != 200]
            assert not missing, f"{len(missing)} of {len(acked)} acknowledged jobs lost, e.g. {missing[:3]}"
            print(f"{len(acked)} jobs acknowledged; other answers: {len(writer.answers)}, e.g. {writer.answers[:6]}")
    finally:
        cluster.cleanup()
