"""Failover (`--spawn 3 --kill-leader-at-s T`): T seconds after the due
instant (steady mode: the first due time) the leader, as its own
`GET /v1/cluster` said a second before, gets SIGKILL; `--restart-after-s`
(default 3) after that it is started again with the same data dir and
arguments. From the SIGKILL on, a probe sends small creates (into a queue
nobody claims, due in 2099) round-robin over the other nodes until one is
answered 2xx: the time to the first write. The time to the first claim and
the first accepted result after the SIGKILL come from the workers. Workers
and creators retry over every URL (`tempo.worker.Transport`). A claim the
dead leader had committed but could not answer is handed out again only when
its lease runs out, so in this mode jobs get `lease_s` of `--lease-s`
(default 10, not the server's 60) and claims with attempt > 1 are counted as
`redelivered`. The killed node is started again and must be ready before the
cluster is stopped.
"""

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from tempo.loadgen.options import Options
from tempo.loadgen.spawn import Cluster, SpawnError

leader_lookup_timeout_s = 15.0
# The leader is looked up this long ahead of the instant: under a spike it
# can take a busy leader most of a second to answer /v1/cluster.
leader_lookup_ahead_s = 1.0
probe_request_timeout_s = 1.0
probe_gap_s = 0.01
probe_timeout_s = 60.0
restart_ready_timeout_s = 30.0


@dataclass
class Failover:
    """What `fail_over` did and saw; UNIX times, None until it happened."""

    kill_at_s: float  # planned: the due instant + --kill-leader-at-s
    restart_after_s: float
    node: str | None = None
    term: int | None = None
    killed_at_s: float | None = None
    first_write_at_s: float | None = None
    first_write_by: str | None = None
    restarted_at_s: float | None = None
    ready_again_at_s: float | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


def create_once(http: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, str] | None:
    """`POST /v1/jobs` of `body` at `url` (with a client that follows
    redirects): the UNIX arrival time of a 2xx and the URL that answered it,
    or None for any other answer or none."""
    try:
        answer = http.post(url + "/v1/jobs", json=body)
    except httpx.HTTPError:
        return None
    if not 200 <= answer.status_code < 300:
        return None
    final = httpx.URL(str(answer.url))
    return time.time(), f"{final.scheme}://{final.host}:{final.port}"


def first_write(urls: list[str], queue_name: str, deadline_s: float) -> tuple[float, str] | None:
    """Sends small creates round-robin over `urls` (redirects followed) until
    one is answered 2xx; its UNIX arrival time and the URL that answered it,
    or None at `deadline_s` (monotonic)."""
    body = {"target": f"queue:{queue_name}-probe", "schedule": {"at": "2099-01-01T00:00:00Z"}}
    k = 0
    with httpx.Client(timeout=probe_request_timeout_s, follow_redirects=True) as http:
        while time.monotonic() < deadline_s:
            url = urls[k % len(urls)]
            k += 1
            written = create_once(http, url, body | {"request_key": f"probe-{uuid.uuid4().hex}"})
            if written is not None:
                return written
            time.sleep(probe_gap_s)
    return None


def fail_over(cluster: Cluster, plan: Failover, queue_name: str, stop: threading.Event) -> None:
    """Thread: at `plan.kill_at_s` SIGKILL the leader, probe for the first
    write after it, restart the node `restart_after_s` after the SIGKILL and
    wait until it is ready again."""
    try:
        if stop.wait(max(0.0, plan.kill_at_s - leader_lookup_ahead_s - time.time())):
            return
        node, plan.term = cluster.leader(leader_lookup_timeout_s)
        plan.node = node.id
        if stop.wait(max(0.0, plan.kill_at_s - time.time())):
            return
        plan.killed_at_s = node.kill()
        probe: list[tuple[float, str] | None] = [None]
        others = [u for u in cluster.urls if u != node.url]
        prober = threading.Thread(
            target=lambda: probe.__setitem__(0, first_write(others, queue_name, time.monotonic() + probe_timeout_s)),
            daemon=True,
        )
        prober.start()
        stop.wait(max(0.0, plan.killed_at_s + plan.restart_after_s - time.time()))
        node.start()
        plan.restarted_at_s = time.time()
        cluster.wait_ready([node], restart_ready_timeout_s)
        plan.ready_again_at_s = time.time()
        prober.join(timeout=probe_timeout_s)
        if probe[0] is None:
            plan.error = f"no write succeeded within {probe_timeout_s:g} s of killing the leader"
        else:
            plan.first_write_at_s, by_url = probe[0]
            answered = cluster.by_url(by_url)
            plan.first_write_by = answered.id if answered else by_url
    except SpawnError as exc:
        plan.error = str(exc)
    finally:
        plan.done.set()


def start_failover(opts: Options, cluster: Cluster | None, origin_s: float,
                   queue_name: str) -> tuple[Failover | None, threading.Event, threading.Thread | None]:
    stop = threading.Event()
    if opts.kill_leader_at_s is None:
        return None, stop, None
    assert cluster is not None and len(cluster.nodes) >= 3
    plan = Failover(kill_at_s=origin_s + opts.kill_leader_at_s, restart_after_s=opts.restart_after_s)
    thread = threading.Thread(target=fail_over, args=(cluster, plan, queue_name, stop), daemon=True)
    thread.start()
    return plan, stop, thread


def end_failover(plan: Failover | None, stop: threading.Event, thread: threading.Thread | None) -> None:
    """Waits for the kill-restart cycle to finish (a collect that ended early
    does not cut it short: the restarted node must be ready before the cluster
    stops); stops it only if it has not started yet."""
    if plan is None or thread is None:
        return
    if plan.killed_at_s is None and time.time() < plan.kill_at_s:
        stop.set()
    thread.join(timeout=probe_timeout_s + restart_ready_timeout_s + leader_lookup_timeout_s)
    if plan.killed_at_s is None and plan.error is None:
        plan.error = "the run ended before the leader was killed; give a smaller --kill-leader-at-s"
