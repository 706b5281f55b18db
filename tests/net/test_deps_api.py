"""Dependencies over HTTP, against one real `tempo serve` (docs/semantics.md
"Dependencies", docs/api.md): runs made by parents' ends, `on: failed`,
fan-in and fan-out, `within_s`, the cycle, delete and owner checks, the
graph and the views."""

import itertools
import time

import httpx
import pytest

from conftest import as_token, configured_server, tokens_config

# A queue of its own for each job, so a claim takes the run it means.
QUEUES = [f"deps-{n}" for n in range(40)]
_next_queue = itertools.count()
TOKENS = {
    "acme-client": ("acme", "client", None),
    "acme-worker": ("acme", "worker", QUEUES),
    "globex-client": ("globex", "client", None),
}
PAST = "2020-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with configured_server(tmp_path_factory.mktemp("deps"), tokens_config(TOKENS)) as started:
        yield started


@pytest.fixture(scope="module")
def client(srv):
    with as_token(srv, "acme-client") as http:
        yield http


@pytest.fixture(scope="module")
def worker(srv):
    with as_token(srv, "acme-worker") as http:
        yield http


def _job(client: httpx.Client, schedule: dict, **fields) -> dict:
    answer = client.post("/v1/jobs", json={"target": f"queue:{QUEUES[next(_next_queue)]}", "schedule": schedule, **fields})
    assert answer.status_code == 201, answer.text
    return answer.json()


def _one_off(client: httpx.Client, **fields) -> dict:
    return _job(client, {"at": PAST}, **fields)


def _after(client: httpx.Client, *parents: dict, **spec) -> dict:
    return _job(client, {"after": {"jobs": [p["id"] for p in parents], **spec}})


def _run(worker: httpx.Client, job: dict, ok: bool = True) -> dict:
    """Claims the job's due run (waiting for it up to 5 s) and reports its result."""
    queue = job["target"].removeprefix("queue:")
    answer = worker.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 5})
    assert answer.status_code == 200, answer.text
    claimed = answer.json()["runs"]
    assert len(claimed) == 1, claimed
    [run] = claimed
    ended = worker.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": ok})
    assert ended.status_code == 200, ended.text
    return run


def _runs(client: httpx.Client, job: dict, status: str = "waiting") -> list[dict]:
    return [r for r in client.get(f"/v1/jobs/{job['id']}/runs").json()["runs"] if r["status"] == status]


def test_a_chain_runs_each_job_after_the_one_before(client, worker):
    a = _one_off(client)
    b = _after(client, a)
    c = _after(client, b)
    assert b["schedule"] == {"after": {"jobs": [a["id"]], "on": "succeeded", "all": True, "within_s": None}}
    assert b["next_run_at"] is None and _runs(client, b) == []
    a_run = _run(worker, a)
    [b_run] = _runs(client, b)
    detail = client.get(f"/v1/runs/{b_run['id']}").json()
    assert detail["caused_by"] == [{"job_id": a["id"], "run_id": a_run["id"], "attempt": 1, "status": "done"}]
    assert _runs(client, c) == []
    _run(worker, b)
    assert len(_runs(client, c)) == 1
    assert client.get(f"/v1/jobs/{a['id']}").json()["dependents"] == {"jobs": [b["id"]], "count": 1}


def test_on_failed_runs_only_after_the_last_attempt(client, worker):
    a = _one_off(client, retry={"max_attempts": 2, "backoff_s": [0]})
    cleanup = _after(client, a, on="failed")
    _run(worker, a, ok=False)
    assert _runs(client, cleanup) == []  # a retry waits: no end yet
    _run(worker, a, ok=False)
    [run] = _runs(client, cleanup)
    [cause] = client.get(f"/v1/runs/{run['id']}").json()["caused_by"]
    assert (cause["status"], cause["attempt"]) == ("failed", 2)


def test_fan_in_all_makes_one_run_and_any_makes_one_each(client, worker):
    a, b = _one_off(client), _one_off(client)
    both = _after(client, a, b)
    anyone = _after(client, a, b, all=False)
    _run(worker, a)
    assert _runs(client, both) == [] and len(_runs(client, anyone)) == 1
    _run(worker, b)
    assert len(_runs(client, both)) == 1 and len(_runs(client, anyone)) == 2


def test_within_s_lets_an_old_end_expire(client, worker):
    a, b = _one_off(client), _one_off(client)
    both = _after(client, a, b, within_s=1)
    _run(worker, a)
    time.sleep(1.2)
    _run(worker, b)
    assert _runs(client, both) == []  # a's end was too old when b's arrived
    assert client.post(f"/v1/jobs/{a['id']}/trigger").status_code == 201
    _run(worker, a)
    assert len(_runs(client, both)) == 1


def test_a_cycle_is_400_naming_it(client):
    a = _job(client, {"every_s": 3600})
    b = _after(client, a)
    answer = client.patch(f"/v1/jobs/{a['id']}", json={"schedule": {"every_s": None, "after": {"jobs": [b["id"]]}}})
    assert answer.status_code == 400, answer.text
    [item] = answer.json()["errors"]
    assert item["loc"] == "schedule.after.jobs" and f"{a['id']} -> {b['id']} -> {a['id']}" in item["msg"]


def test_a_delete_with_dependents_is_409_naming_them(client):
    a = _one_off(client)
    b = _after(client, a)
    answer = client.delete(f"/v1/jobs/{a['id']}")
    assert answer.status_code == 409 and answer.json()["type"] == "has_dependents"
    assert b["id"] in answer.json()["detail"]
    assert client.delete(f"/v1/jobs/{b['id']}").status_code == 204
    assert client.delete(f"/v1/jobs/{a['id']}").status_code == 204


def test_another_owners_job_is_no_parent_and_is_not_told_of(srv, client):
    with as_token(srv, "globex-client") as globex:
        theirs = _one_off(globex)
    missing = "j_" + "0" * 26
    answers = [
        client.post("/v1/jobs", json={"target": "queue:q", "schedule": {"after": {"jobs": [parent]}}})
        for parent in (theirs["id"], missing)
    ]
    assert [a.status_code for a in answers] == [400, 400]
    assert [a.json()["errors"][0]["msg"] for a in answers] == [f"no job {theirs['id']}", f"no job {missing}"]


def test_the_graph_answers_edges_up_and_down(client):
    a = _one_off(client)
    b = _after(client, a)
    c = _after(client, b)
    graph = client.get(f"/v1/jobs/{b['id']}/graph").json()
    assert graph["upstream"] == [{"parent": a["id"], "child": b["id"]}]
    assert graph["downstream"] == [{"parent": b["id"], "child": c["id"]}] and not graph["truncated"]
    deep = client.get(f"/v1/jobs/{c['id']}/graph", params={"depth": 2}).json()
    assert len(deep["upstream"]) == 2
    assert client.get(f"/v1/jobs/{c['id']}/graph", params={"depth": 0}).status_code == 400


def _gated(client: httpx.Client, parent: dict, **gate) -> dict:
    return _job(client, {"every_s": 1, "requires": {"jobs": [parent["id"]], **gate}})


def test_a_gate_skips_a_slot_whose_parent_did_not_end_naming_it(client, worker):
    parent = _job(client, {"every_s": 3600})
    gated = _gated(client, parent)
    assert gated["schedule"]["requires"] == {"jobs": [parent["id"]], "on": "succeeded", "within_s": None, "wait_s": 0}
    queue = gated["target"].removeprefix("queue:")
    claimed = worker.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 2}).json()["runs"]
    assert claimed == []
    skipped = _runs(client, gated, "skipped")
    assert skipped and skipped[0]["reason"] == "dependency" and parent["id"] in skipped[0]["error"]
    client.delete(f"/v1/jobs/{gated['id']}")


def test_a_gate_waits_for_its_parent_and_then_runs(client, worker):
    parent = _one_off(client)
    gated = _gated(client, parent, wait_s=60)
    queue = gated["target"].removeprefix("queue:")
    for _ in range(10):  # until its first slot fell due and the gate held it
        assert worker.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 0.5}).json()["runs"] == []
        [waiting] = _runs(client, gated)
        if waiting["due_at"] > waiting["nominal_at"]:
            break
    assert waiting["due_at"] > waiting["nominal_at"]
    _run(worker, parent)
    claimed = worker.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 5}).json()["runs"]
    assert [r["id"] for r in claimed] == [waiting["id"]]
    client.delete(f"/v1/jobs/{gated['id']}")


def test_a_batch_and_a_listing_show_the_edges(client):
    a = _one_off(client)
    made = client.post("/v1/jobs/batch", json={"jobs": [
        {"target": f"queue:{QUEUES[next(_next_queue)]}", "schedule": {"after": {"jobs": [a["id"]], "all": False}}},
    ]}).json()["results"]
    assert made[0]["job"]["schedule"]["after"]["all"] is False
    listed = {j["id"]: j for j in client.get("/v1/jobs", params={"limit": 5}).json()["jobs"]}
    assert listed[a["id"]]["dependents"] == {"jobs": [made[0]["job"]["id"]], "count": 1}
    assert listed[made[0]["job"]["id"]]["schedule"]["after"]["jobs"] == [a["id"]]


def test_a_patch_turns_a_gated_clock_job_into_a_dependent_one(client):
    a = _one_off(client)
    gated = _gated(client, a)
    patched = client.patch(f"/v1/jobs/{gated['id']}", json={"schedule": {"every_s": None, "after": {"jobs": [a["id"]]}}})
    assert patched.status_code == 200, patched.text
    assert set(patched.json()["schedule"]) == {"after"} and patched.json()["next_run_at"] is None
    back = client.patch(f"/v1/jobs/{gated['id']}", json={"schedule": {"after": None, "every_s": 3600}})
    assert back.status_code == 200 and back.json()["schedule"] == {"every_s": 3600}
    assert client.get(f"/v1/jobs/{a['id']}").json()["dependents"] == {"jobs": [], "count": 0}
