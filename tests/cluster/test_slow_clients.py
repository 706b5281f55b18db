"""A leader flooded with connections that send their headers slowly goes on
replicating and serving (docs/operations.md "Limits"): a write through a
follower (redirected to the leader) commits, a follower restarted during
the flood connects to the leader again and catches up, and the leader's
probes answer.

The flood comes from addresses of its own (127.0.0.10 and up), straight to
the leader's listening port, and keeps hundreds of connections open (it
opens new ones as the leader closes old ones) for the whole test."""

import time

from slow_heads import SlowHeaders

from .conftest import client

CONFIG = "[http]\nconnections_max = 64\nrequests_in_flight_max = 32\nlong_polls_max = 16\n"
FLOOD_SOURCES = [f"127.0.0.{i}" for i in range(10, 16)]
FLOOD_PER_SOURCE = 60
JOB = {"target": "queue:flood", "schedule": {"every_s": 3600}}


def test_a_flooded_leader_keeps_replicating_and_serving(make_cluster, tmp_path):
    config = tmp_path / "tempo.toml"
    config.write_text(CONFIG)
    cluster = make_cluster("--config", str(config))
    leader = cluster.wait_leader()
    follower, restarted = cluster.others(leader)
    with SlowHeaders(leader.host, leader.listen_port, FLOOD_SOURCES, FLOOD_PER_SOURCE) as flood:
        time.sleep(1.0)
        assert flood.opened > 64
        with client() as http:
            created = http.post(f"{follower.url}/v1/jobs", json=JOB)
            assert created.status_code == 201, created.text
            assert http.get(f"{leader.url}/healthz").status_code == 200
            assert http.get(f"{leader.url}/readyz").status_code == 200
        restarted.kill()
        restarted.start()
        with client() as http:
            created = http.post(f"{follower.url}/v1/jobs", json=JOB)
            assert created.status_code == 201, created.text
        with client() as http:
            r = http.get(f"{leader.url}/v1/cluster/digest")
            assert r.status_code == 200, r.text
            index = r.json()["applied_index"]
        cluster.wait_applied(restarted, index, timeout_s=20)
        assert cluster.wait_leader() is leader
