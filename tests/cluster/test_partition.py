"""A leader cut off from the other two by the proxies (clients still reach
it): it acknowledges no write, steps down (CheckQuorum), hands out no run, and
after the heal the cluster converges."""

import threading
import time
import uuid
from datetime import UTC, datetime

import httpx

from .conftest import Cluster, Node, Workload, client, rfc3339_ms, role_of

# Election timeout 1-2 s (10-20 ticks of 100 ms); CheckQuorum steps a cut-off
# leader down at its next check, 1-2 s after the cut; 1 s more for polling and
# a loaded machine.
step_down_timeout_s = 3.0
election_timeout_s = 6.0


def probe_body() -> dict:
    return {"target": "queue:probe", "schedule": {"at": rfc3339_ms(datetime.now(UTC))},
            "request_key": f"probe-{uuid.uuid4().hex}"}


def direct_post(node: Node, path: str, body: dict, timeout_s: float) -> tuple[str, dict | None]:
    """A POST to `node` itself (no redirect followed): its status (or the error)
    in short, and the body of a 2xx."""
    with client(timeout_s, follow=False) as http:
        try:
            r = http.post(f"{node.url}{path}", json=body)
        except httpx.HTTPError as exc:
            return type(exc).__name__, None
    if r.status_code < 300:
        return str(r.status_code), r.json()
    return f"{r.status_code} {r.text[:120]}", None


def watch_failover(cluster: Cluster, old: Node, cut_at: float) -> tuple[float | None, Node | None, float | None]:
    """Seconds after the cut until `old` stopped calling itself leader, the
    node the other two then agreed on and when: each watched on its own."""
    others = cluster.others(old)
    stepped_s = elected_s = None
    new = None
    while time.monotonic() - cut_at < election_timeout_s and (stepped_s is None or new is None):
        cluster.assert_running()
        view = cluster.status(old)
        if stepped_s is None and view is not None and (view["leader"] != old.id or role_of(view, old.id) != "leader"):
            stepped_s = time.monotonic() - cut_at
        views = [cluster.status(o) for o in others]
        leaders = {v["leader"] if v else None for v in views}
        if new is None and len(leaders) == 1 and not leaders & {None, old.id}:
            new = cluster.node(leaders.pop())
            elected_s = time.monotonic() - cut_at
        time.sleep(0.02)
    return stepped_s, new, elected_s


def test_partitioned_leader_steps_down_and_never_dispatches(make_cluster):
    cluster: Cluster = make_cluster()
    work = Workload(cluster).start(writers=3, workers=2)
    work.wait_acked(40, timeout_s=20)
    old = cluster.wait_leader()
    others = cluster.others(old)
    # The partition works by source IP: the nodes must dial from their own address.
    for other in others:
        assert old.host in other.proxy.sources_seen, (
            f"{other.id}'s proxy saw {sorted(other.proxy.sources_seen)}, never {old.host}: "
            "peer connections do not come from the --listen host"
        )

    cluster.isolate(old)
    cut_at = time.monotonic()
    outcomes: dict[str, tuple[str, dict | None]] = {}
    pinned_claims: list[tuple[str, dict | None]] = []
    stop_pinned = threading.Event()

    def write_to_old() -> None:
        outcomes["at cut"] = direct_post(old, "/v1/jobs", probe_body(), timeout_s=8.0)

    def claim_at_old() -> None:
        # A worker that talks to the old leader only, as one that did not hear of the new.
        claim = {"worker": "pinned", "queues": [work.queue], "max_runs": 50, "wait_s": 1}
        while not stop_pinned.is_set():
            pinned_claims.append(direct_post(old, "/v1/claim", claim, timeout_s=4.0))
            time.sleep(0.1)

    threads = [threading.Thread(target=write_to_old), threading.Thread(target=claim_at_old)]
    for t in threads:
        t.start()
    try:
        stepped_s, new, elected_s = watch_failover(cluster, old, cut_at)
        assert new is not None, f"no new leader {election_timeout_s} s after the cut"
        outcomes["after step-down"] = direct_post(old, "/v1/jobs", probe_body(), timeout_s=4.0)
        # The majority side goes on without it.
        work.wait_acked(len(work.acked) + 40, timeout_s=20)
    finally:
        stop_pinned.set()
        for t in threads:
            t.join(timeout=15)
    print(f"{old.id} cut off: stepped down after {stepped_s} s, {new.id} led after {elected_s:.2f} s; "
          f"direct writes to {old.id}: {outcomes}; claims at {old.id}: {sorted({c for c, _ in pinned_claims})}")
    assert new is not old
    assert outcomes.keys() == {"at cut", "after step-down"}
    assert not any(body is not None for _, body in outcomes.values()), f"the cut-off {old.id} acknowledged {outcomes}"
    handed_by_old = [body["runs"] for _, body in pinned_claims if body is not None and body["runs"]]
    with work.lock:
        work.handed.extend((r["id"], r["attempt"], "pinned", r["job_id"]) for runs in handed_by_old for r in runs)
    assert not handed_by_old, f"the cut-off {old.id} handed out runs: {handed_by_old[:2]}"

    cluster.heal()
    healed = cluster.wait_leader(timeout_s=10)
    drain_s = work.drain()
    print(f"healed: all follow {healed.id}; drained in {drain_s:.2f} s")
    cluster.check(work)
    # Last, so that a slow step-down does not hide what the checks above find.
    assert stepped_s is not None and stepped_s <= step_down_timeout_s, (
        f"the cut-off {old.id} still called itself leader {step_down_timeout_s} s after the cut "
        f"(it stopped after {stepped_s} s; {new.id} led after {elected_s:.2f} s)"
    )


def direct_get(node: Node, path: str) -> httpx.Response:
    with client(3.0, follow=False) as http:
        return http.get(f"{node.url}{path}")


def test_partitioned_follower_rejoins_without_deposing_the_leader(make_cluster):
    cluster: Cluster = make_cluster()
    work = Workload(cluster).start(writers=3, workers=2)
    work.wait_acked(30, timeout_s=20)
    leader = cluster.wait_leader()
    follower = cluster.others(leader)[0]
    # A follower sends writes and reads to the leader's --peers URL, path and query kept.
    r = direct_get(follower, "/v1/jobs?limit=5")
    assert (r.status_code, r.headers.get("location")) == (307, f"{leader.url}/v1/jobs?limit=5"), r.text[:300]
    with client(3.0, follow=False) as http:
        r = http.post(f"{follower.url}/v1/jobs", json=probe_body())
    assert (r.status_code, r.headers.get("location")) == (307, f"{leader.url}/v1/jobs"), r.text[:300]
    assert direct_get(follower, "/v1/jobs?limit=5&stale=true").status_code == 200
    assert cluster.view(follower)["node"] == follower.id

    term = cluster.view(leader)["term"]
    cluster.isolate(follower)
    acked_at_cut = len(work.acked)
    time.sleep(4.0)  # two election timeouts and more: the follower tries, and fails, to be elected
    assert cluster.wait_leader(among=cluster.others(follower), timeout_s=2) is leader
    acked_in_cut = len(work.acked) - acked_at_cut
    alone = cluster.view(follower)
    cluster.heal()
    # PreVote: the one that was cut off has not raised its term, so it deposes no one.
    rejoined = cluster.wait_leader(timeout_s=10)
    after = cluster.view(leader)
    work.wait_acked(len(work.acked) + 30, timeout_s=20)
    drain_s = work.drain()
    print(f"{follower.id} cut off 4 s ({acked_in_cut} jobs acknowledged meanwhile; its view then {alone}); "
          f"after the heal {rejoined.id} leads in term {after['term']} (was {term}); drained in {drain_s:.2f} s")
    assert acked_in_cut > 0
    cluster.check(work)
    assert rejoined is leader and after["term"] == term, f"the rejoining {follower.id} deposed {leader.id}: {after}"
