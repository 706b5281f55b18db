"""A request past a storage bound, sent to a real 3-node cluster: it is
answered `400`, and the cluster keeps its leader and takes the next write."""

from .conftest import client

LONG_KEY = "\U0001d11e" * 126  # 126 characters, 504 bytes: owner + key past LMDB's 511


def test_a_long_request_key_leaves_the_cluster_up_with_a_leader(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_leader()
    body = {"target": "queue:bounds", "schedule": {"every_s": 3600}}
    with client() as http:
        answer = http.post(f"{leader.url}/v1/jobs", json=body | {"request_key": LONG_KEY})
        assert answer.status_code == 400, answer.text
        assert [e["loc"] for e in answer.json()["errors"]] == ["request_key"]
        batch = http.post(f"{leader.url}/v1/jobs/batch", json={"jobs": [body | {"request_key": LONG_KEY}]})
        assert batch.status_code == 200 and batch.json()["results"][0]["status"] == 400, batch.text
    cluster.assert_running()
    leader = cluster.wait_leader()
    with client() as http:
        created = http.post(f"{leader.url}/v1/jobs", json=body | {"request_key": "after-the-long-one"})
        assert created.status_code == 201, created.text
    cluster.wait_converged()
