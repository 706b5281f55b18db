"""A leader flooded with connections that send their headers slowly goes on
replicating and serving (docs/operations.md "Limits"): a write through a
follower (redirected to the leader) commits, a follower restarted during
the flood connects to the leader again and catches up, and the leader's
probes answer.

The flood comes from addresses of its own (127.0.0.10 and up), straight to
the leader's listening port, and keeps hundreds of connections open (it
opens new ones as the leader closes old ones) for the whole test."""

import select
import socket
import threading
import time

from .conftest import client

CONFIG = "[http]\nconnections_max = 64\nrequests_in_flight_max = 32\nlong_polls_max = 16\n"
FLOOD_SOURCES = [f"127.0.0.{i}" for i in range(10, 16)]
FLOOD_PER_SOURCE = 60
SLOW_HEAD = b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-slow: "
JOB = {"target": "queue:flood", "schedule": {"every_s": 3600}}


class SlowHeaders:
    """Keeps `per_source` connections to (host, port) open from each source,
    each having sent part of a request head and nothing more."""

    def __init__(self, host: str, port: int, sources: list[str], per_source: int):
        self.target = (host, port)
        self.sources = sources
        self.per_source = per_source
        self.open: dict[str, list[socket.socket]] = {ip: [] for ip in sources}
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "SlowHeaders":
        self._top_up()
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for sockets in self.open.values():
            for sock in sockets:
                sock.close()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._top_up()

    def _top_up(self) -> None:
        for ip, sockets in self.open.items():
            readable = select.select(sockets, [], [], 0)[0] if sockets else []
            for sock in readable:  # answered or closed by the server
                sockets.remove(sock)
                sock.close()
            while len(sockets) < self.per_source:
                try:
                    sock = socket.create_connection(self.target, timeout=2, source_address=(ip, 0))
                    sock.sendall(SLOW_HEAD)
                except OSError:
                    break
                sockets.append(sock)
                self.opened += 1


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
