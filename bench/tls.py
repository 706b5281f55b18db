"""What TLS costs: the same requests over http and over https, against one
node and against a 3-node cluster (whose peer links are then https too).

    .venv/bin/python bench/tls.py [--connections N] [--creates N] [--batches N] [--batch-size B]

Starts its own nodes (temporary data dirs, free loopback ports; certificates
from a throwaway CA made with trustme, of the test extra) and prints, for
plain and TLS side by side:

- new connection: one `GET /healthz` per new connection, one after another
  (TCP connect, plus the TLS handshake with TLS), on one node;
- create, kept alive: sequential `POST /v1/jobs` over one kept-alive
  connection to the leader, p50 and p99 latency (a majority fsync and, on the
  cluster, one replication round trip over the peer links);
- batch create: `POST /v1/jobs/batch` of B jobs, two at a time, jobs/s.

Clients and nodes share the machine's CPUs; compare the columns, not the
absolute figures with other machines.
"""

import argparse
import json
import os
import ssl
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import trustme

sys.path.insert(0, os.path.dirname(__file__))
from _server import Cluster, Node, free_port, table

ready_timeout_s = 60.0
stop_timeout_s = 30.0
request_timeout_s = 60.0


def body(i: int) -> dict:
    return {"target": f"queue:bench-tls-{i % 16}", "schedule": {"at": "2031-01-01T00:00:00Z"}, "payload": {"i": i}}


class Nodes(Cluster):
    """`size` nodes on loopback (`tempo.loadgen.spawn`), with `[tls]` when
    `ca` is given: https URLs, peer links included."""

    def __init__(self, root: Path, size: int, ca: trustme.CA | None):
        self.ca = ca
        self.scheme = "https" if ca else "http"
        self.verify: ssl.SSLContext | bool = True
        self.ca_file: str | None = None
        if ca is not None:
            self.ca_file = str(root / "ca.pem")
            ca.cert_pem.write_to_path(self.ca_file)
            self.verify = ssl.create_default_context(cafile=self.ca_file)
        super().__init__(root, size)

    def make_node(self, index: int, extra_args: tuple[str, ...]) -> Node:
        node_id, port = f"n{index}", free_port()
        if self.ca is not None:
            cert = self.ca.issue_cert("127.0.0.1")
            cert.cert_chain_pems[0].write_to_path(str(self.root / f"{node_id}.crt"))
            cert.private_key_pem.write_to_path(str(self.root / f"{node_id}.key"))
            config = self.root / f"{node_id}.toml"
            config.write_text(f'[tls]\ncert_file = "{node_id}.crt"\nkey_file = "{node_id}.key"\nca_file = "ca.pem"\n')
            extra_args = (*extra_args, "--config", str(config))
        return Node(self.root / node_id, port=port, node_id=node_id, url=f"{self.scheme}://127.0.0.1:{port}",
                    extra_args=extra_args, ca_file=self.ca_file)

    def __enter__(self) -> "Nodes":
        self.start(ready_timeout_s)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(stop_timeout_s)

    def leader_url(self) -> str:
        return self.leader()[0].url


def new_connections(nodes: Nodes, count: int) -> float:
    """Mean ms of a `GET /healthz` on a new connection each time."""
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(verify=nodes.verify, limits=limits, timeout=request_timeout_s) as http:
        started = time.perf_counter()
        for _ in range(count):
            assert http.get(f"{nodes.urls[0]}/healthz").status_code == 200
        return (time.perf_counter() - started) / count * 1000


def creates(nodes: Nodes, count: int) -> tuple[float, float]:
    """p50 and p99 ms of sequential creates over one kept-alive connection."""
    url = nodes.leader_url()
    latencies_ms = []
    with httpx.Client(verify=nodes.verify, timeout=request_timeout_s) as http:
        http.get(f"{url}/healthz")  # the connection (and handshake) outside the figures
        for i in range(count):
            started = time.perf_counter()
            assert http.post(f"{url}/v1/jobs", json=body(i)).status_code == 201
            latencies_ms.append((time.perf_counter() - started) * 1000)
    latencies_ms.sort()
    return latencies_ms[len(latencies_ms) // 2], latencies_ms[min(len(latencies_ms) - 1, int(len(latencies_ms) * 0.99))]


def batches(nodes: Nodes, count: int, size: int) -> float:
    """Jobs/s of `count` batch creates of `size` jobs, two in flight."""
    url = nodes.leader_url()
    payloads = [json.dumps({"jobs": [body(k * size + i) for i in range(size)]}).encode() for k in range(count)]
    headers = {"content-type": "application/json"}

    def send(payload: bytes) -> int:
        answer = http.post(f"{url}/v1/jobs/batch", content=payload, headers=headers)
        assert answer.status_code == 200, answer.text[:300]
        return len(answer.json()["results"])

    # One client, made before the clock starts: making one loads a trust
    # store (tens of ms), which is not what is measured here.
    with httpx.Client(verify=nodes.verify, timeout=request_timeout_s) as http, ThreadPoolExecutor(2) as pool:
        for warm in pool.map(lambda _: http.get(f"{url}/healthz"), range(2)):
            assert warm.status_code == 200
        started = time.perf_counter()
        done = sum(pool.map(send, payloads))
        return done / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--creates", type=int, default=300)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args()
    ca = trustme.CA()
    figures: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory(prefix="tempo-bench-tls-") as tmp:
        for size in (1, 3):
            for tls in (False, True):
                root = Path(tmp) / f"{size}-{'tls' if tls else 'plain'}"
                root.mkdir()
                column = "https" if tls else "http"
                with Nodes(root, size, ca if tls else None) as nodes:
                    if size == 1:
                        figures["new connection, 1 node (ms)", column] = f"{new_connections(nodes, args.connections):.2f}"
                    p50, p99 = creates(nodes, args.creates)
                    figures[f"create kept alive, {size} node(s), p50 / p99 (ms)", column] = f"{p50:.1f} / {p99:.1f}"
                    rate = batches(nodes, args.batches, args.batch_size)
                    figures[f"batch of {args.batch_size}, {size} node(s) (jobs/s)", column] = f"{rate:,.0f}"
    rows = [(name, figures.get((name, "http"), "-"), figures.get((name, "https"), "-"))
            for name in dict.fromkeys(name for name, _ in figures)]
    print(f"tempo over http and https, fsync on, {os.cpu_count()} CPUs (clients and nodes share them)")
    print(table(rows, ("figure", "http", "https")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
