"""The API of a cluster as docs/api.md states it: followers redirect to the leader
(`307`, same path and query), `?stale=true` reads are served locally, no
leader means `503` with `Retry-After: 1`, and a dead node can be replaced by
a fresh one (`--join`, `POST/DELETE /v1/cluster/nodes`)."""

import signal
from datetime import UTC, datetime, timedelta

from .conftest import Node, client, role_of

JOB = {"target": "queue:api", "schedule": {"every_s": 3600}}


def create(leader: Node) -> dict:
    with client() as http:
        r = http.post(f"{leader.url}/v1/jobs", json=JOB)
    assert r.status_code == 201, r.text
    return r.json()


def test_a_follower_redirects_writes_and_reads_to_the_leader(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_leader()
    follower = cluster.others(leader)[0]
    with client(follow=False) as http:
        r = http.post(f"{follower.url}/v1/jobs?x=1", json=JOB)
        assert r.status_code == 307
        assert r.headers["location"] == f"{leader.url}/v1/jobs?x=1"
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "not_leader"
        r = http.get(f"{follower.url}/v1/jobs?limit=5")
        assert r.status_code == 307
        assert r.headers["location"] == f"{leader.url}/v1/jobs?limit=5"
        # Never redirected: answered by the node asked.
        for path in ("/healthz", "/readyz", "/metrics", "/v1/openapi.json", "/v1/cluster", "/v1/cluster/digest"):
            assert http.get(follower.url + path).status_code == 200, path
        view = http.get(f"{follower.url}/v1/cluster").json()
        assert view["node"] == follower.id
        assert view["leader"] == leader.id
        assert {n["id"]: n["url"] for n in view["nodes"]} == {n.id: n.url for n in cluster.nodes}
        assert role_of(view, follower.id) == "follower"
        assert role_of(view, leader.id) == "leader"
    with client() as http:  # following the redirect keeps method and body
        r = http.post(f"{follower.url}/v1/jobs", json=JOB)
        assert r.status_code == 201, r.text


def test_stale_reads_are_served_by_any_node(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_leader()
    job = create(leader)
    index = cluster.digest(leader)["applied_index"]
    with client(follow=False) as http:
        for node in cluster.others(leader):
            cluster.wait_applied(node, index, timeout_s=5)
            r = http.get(f"{node.url}/v1/jobs/{job['id']}?stale=true")
            assert r.status_code == 200, r.text
            assert r.json() == job
            # A write stays a write: `stale` does not make a follower take it.
            r = http.post(f"{node.url}/v1/jobs/{job['id']}/pause?stale=true")
            assert r.status_code == 307


def test_no_leader_means_503_with_retry_after(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_leader()
    for node in cluster.others(leader):
        node.kill()
    cluster.wait_stepped_down(leader, timeout_s=10)
    with client(follow=False) as http:
        for method, path in (("POST", "/v1/jobs"), ("GET", "/v1/jobs")):
            r = http.request(method, leader.url + path, json=JOB if method == "POST" else None)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "1"
            assert r.json()["type"] == "no_quorum"
        assert http.get(f"{leader.url}/readyz").status_code == 503
        assert http.get(f"{leader.url}/v1/cluster").json()["leader"] is None


def test_a_dead_node_is_replaced_by_a_fresh_one(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_leader()
    jobs = [create(leader) for _ in range(5)]
    dead = cluster.others(leader)[0]
    dead.kill()
    with client() as http:
        r = http.delete(f"{leader.url}/v1/cluster/nodes/{dead.id}")
        assert r.status_code == 200, r.text
        assert dead.id not in {n["id"] for n in r.json()["nodes"]}
    # n4: an empty data dir, --join, the current members and itself as peers.
    fresh = Node(4, cluster.root, "", ())
    survivors = [n for n in cluster.nodes if n is not dead]
    fresh.peers = ",".join(f"{n.id}={n.url}" for n in [*survivors, fresh])
    fresh.extra_args = ("--join",)
    cluster.nodes.append(fresh)
    fresh.proxy.start()
    fresh.start()
    with client() as http:
        r = http.post(f"{leader.url}/v1/cluster/nodes", json={"id": fresh.id, "url": fresh.url})
        assert r.status_code == 200, r.text
        assert fresh.id in {n["id"] for n in r.json()["nodes"]}
        jobs.append(create(leader))
        index = cluster.digest(leader)["applied_index"]
        cluster.wait_applied(fresh, index, timeout_s=15)
        # It said it was no member yet, rather than "n4 of 3".
        assert f"as {fresh.id} waiting to be added" in fresh.log_tail()
        digests = {cluster.digest(n)["digest"] for n in [*survivors, fresh]}
        assert len(digests) == 1
        for job in jobs:
            assert http.get(f"{fresh.url}/v1/jobs/{job['id']}?stale=true").status_code == 200
        # Adding a member twice, and removing one that is not, are refused.
        r = http.post(f"{leader.url}/v1/cluster/nodes", json={"id": fresh.id, "url": fresh.url})
        assert r.status_code == 409, r.text
        assert http.delete(f"{leader.url}/v1/cluster/nodes/n9").status_code == 404
        r = http.post(f"{leader.url}/v1/cluster/nodes", json={"id": "bad id", "url": "x"})
        assert r.status_code == 400
        assert {e["loc"] for e in r.json()["errors"]} <= {"id", "url"}
    # The new member counts in the majority: with the old leader gone, the
    # two left elect a leader and go on.
    dead.expected_down = True
    leader.kill()
    new_leader = cluster.wait_leader(among=[n for n in survivors if n is not leader] + [fresh], timeout_s=15)
    create(new_leader)
    # A pre-vote is logged as the question it asks, not as a candidacy in
    # the term the node is in already.
    tail = new_leader.log_tail()
    assert "asking whether it could win term" in tail and "candidate in term" not in tail


def test_sigterm_on_the_leader_hands_leadership_over(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_leader()
    leader.signal(signal.SIGTERM)
    assert leader.proc.wait(timeout=15) == 0
    assert "handing leadership over to" in leader.log_tail()
    new_leader = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
    due = datetime.now(UTC) + timedelta(seconds=1)
    with client() as http:
        r = http.post(f"{new_leader.url}/v1/jobs", json={"target": "queue:api", "schedule": {"at": due.isoformat()}})
        assert r.status_code == 201, r.text
