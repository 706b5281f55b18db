"""A job's outcome is visible and runs and jobs can be filtered, against a
real `tempo serve` (docs/api.md "Outcomes", "GET /v1/jobs", "GET
/v1/runs"): a failed one-off shows `last_run` failed and its counts, a run shows
every attempt, `GET /v1/jobs` filters by state, target and name prefix, and
`GET /v1/runs` lists runs across jobs by status and time, cursor-paged;
each bad filter value is a 400 naming it."""

import hashlib
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from conftest import configured_server, job_body, unique
from problems import assert_problem


def now_iso(delta_s: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_s)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def claim_one(http: httpx.Client, queue: str) -> dict:
    r = http.post("/v1/claim", json={"worker": "w-test", "queues": [queue], "wait_s": 5})
    assert r.status_code == 200, r.text
    [run] = r.json()["runs"]
    return run


def failed_one_off(http: httpx.Client, name: str | None = None) -> tuple[dict, str]:
    """A one-off of two attempts, due now, both reported failed: the job and its queue."""
    queue = unique("q")
    job = http.post("/v1/jobs", json=job_body(
        target=f"queue:{queue}", schedule={"at": now_iso(-1)}, retry={"max_attempts": 2, "backoff_s": [0]},
        name=name,
    )).json()
    for attempt in (1, 2):
        run = claim_one(http, queue)
        assert run["attempt"] == attempt
        r = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": attempt, "ok": False, "error": f"boom {attempt}"})
        assert r.status_code == 200, r.text
    return job, queue


def test_a_failed_one_off_shows_its_last_run_and_counts(http):
    job, _ = failed_one_off(http)
    got = http.get(f"/v1/jobs/{job['id']}").json()
    assert got["state"] == "completed"  # docs/api.md's states; the outcome is in last_run
    assert got["last_run"]["status"] == "failed"
    assert got["last_run"]["attempt"] == 2 and got["last_run"]["error"] == "boom 2"
    assert got["last_run"]["finished_at"] is not None and got["last_run"]["id"].startswith("r_")
    assert got["runs"] == {"done": 0, "failed": 1, "cancelled": 0, "skipped": 0}
    listed = [j for j in http.get("/v1/jobs", params={"limit": 1000}).json()["jobs"] if j["id"] == job["id"]]
    assert listed and listed[0]["last_run"]["status"] == "failed"


def test_a_new_job_has_no_last_run(http):
    job = http.post("/v1/jobs", json=job_body()).json()
    got = http.get(f"/v1/jobs/{job['id']}").json()
    assert got["last_run"] is None and got["runs"] == {"done": 0, "failed": 0, "cancelled": 0, "skipped": 0}


def test_a_run_shows_every_attempt(http):
    job, _ = failed_one_off(http)
    run_id = http.get(f"/v1/jobs/{job['id']}").json()["last_run"]["id"]
    run = http.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "failed"
    assert [(a["attempt"], a["worker"], a["ok"], a["error"]) for a in run["attempts"]] == [
        (1, "w-test", False, "boom 1"), (2, "w-test", False, "boom 2"),
    ]
    for attempt in run["attempts"]:
        assert attempt["claimed_at"] <= attempt["ended_at"]


def test_a_claimed_run_shows_its_current_attempt_open(http):
    queue = unique("q")
    http.post("/v1/jobs", json=job_body(target=f"queue:{queue}", schedule={"at": now_iso(-1)}))
    run = claim_one(http, queue)
    got = http.get(f"/v1/runs/{run['id']}").json()
    assert [(a["attempt"], a["ended_at"], a["ok"]) for a in got["attempts"]] == [(1, None, None)]


def test_jobs_filter_by_state_target_and_name_prefix(http):
    tag = unique("n")
    target = f"queue:{unique('q')}"
    paused = http.post("/v1/jobs", json=job_body(name=f"{tag}-a", target=target)).json()
    http.post(f"/v1/jobs/{paused['id']}/pause")
    active = http.post("/v1/jobs", json=job_body(name=f"{tag}-b", target=target)).json()
    other = http.post("/v1/jobs", json=job_body(name=f"x{tag}")).json()

    def ids(**params) -> list[str]:
        seen, cursor = [], None
        while True:
            page = http.get("/v1/jobs", params=params | {"limit": 1} | ({"cursor": cursor} if cursor else {})).json()
            seen += [j["id"] for j in page["jobs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return seen

    assert ids(name_prefix=tag) == [active["id"], paused["id"]]
    assert ids(name_prefix=tag, state="paused") == [paused["id"]]
    assert ids(target=target, state="active") == [active["id"]]
    assert other["id"] not in ids(target=target)
    assert paused["id"] in ids(state="paused") and active["id"] not in ids(state="paused")


def test_runs_across_jobs_by_status_newest_first_with_cursor(http):
    since = now_iso()
    made = [failed_one_off(http)[0] for _ in range(3)]
    ok_queue = unique("q")
    http.post("/v1/jobs", json=job_body(target=f"queue:{ok_queue}", schedule={"at": now_iso(-1)}))
    run = claim_one(http, ok_queue)
    http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True, "output": "fine"})
    seen, cursor = [], None
    while True:
        params = {"status": "failed", "since": since, "limit": 2} | ({"cursor": cursor} if cursor else {})
        page = http.get("/v1/runs", params=params)
        assert page.status_code == 200, page.text
        seen += page.json()["runs"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert [r["job_id"] for r in seen] == [j["id"] for j in reversed(made)]
    assert all(r["status"] == "failed" for r in seen)
    done = http.get("/v1/runs", params={"status": "done", "since": since}).json()["runs"]
    assert [r["id"] for r in done] == [run["id"]]
    before = http.get("/v1/runs", params={"status": "failed", "until": since, "limit": 1000}).json()["runs"]
    assert not {r["job_id"] for r in before} & {j["id"] for j in made}


@pytest.mark.parametrize(("path", "name", "value"), [
    ("/v1/jobs", "state", "failed"),
    ("/v1/jobs", "state", ""),
    ("/v1/jobs", "target", ""),
    ("/v1/jobs", "target", "q" * 2049),
    ("/v1/jobs", "name_prefix", ""),
    ("/v1/jobs", "name_prefix", "n" * 201),
    ("/v1/jobs", "label", "team=a"),
    ("/v1/jobs", "colour", "red"),
    ("/v1/runs", "status", "lost"),
    ("/v1/runs", "status", ""),
    ("/v1/runs", "since", "yesterday"),
    ("/v1/runs", "since", "2027-01-01T00:00:00"),
    ("/v1/runs", "until", "2027-13-01T00:00:00Z"),
    ("/v1/runs", "cursor", "zz"),
    ("/v1/runs", "cursor", "00"),
    ("/v1/runs", "limit", "0"),
    ("/v1/runs", "limit", "1001"),
    ("/v1/runs", "job_id", "j_x"),
])
def test_a_bad_filter_value_is_400_at_its_name(http, path, name, value):
    assert_problem(http.get(path, params={name: value}), 400, type_="validation", loc=f"query.{name}")


TOKENS = {"acme-client": ("acme", "client"), "globex-client": ("globex", "client"),
          "ops-admin": ("ops", "admin"), "acme-worker": ("acme", "worker"), "globex-worker": ("globex", "worker")}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    config = "\n".join(
        f'[[tokens]]\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\nowner = "{owner}"\nrole = "{role}"\n'
        + ('queues = ["q1"]\n' if role == "worker" else "")
        for token, (owner, role) in TOKENS.items()
    )
    with configured_server(tmp_path_factory.mktemp("runs-scope"), config) as srv:
        yield srv


def as_(srv, token: str) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {token}"}, timeout=30)


def test_runs_listing_is_the_owners_and_an_admins_is_everyones(secured):
    made = {}
    for owner in ("acme", "globex"):
        with as_(secured, f"{owner}-client") as client, as_(secured, f"{owner}-worker") as worker:
            made[owner] = client.post("/v1/jobs", json=job_body(
                target="queue:q1", schedule={"at": now_iso(-1)}, retry={"max_attempts": 1, "backoff_s": [0]})).json()
            run = claim_one(worker, "q1")
            worker.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": False, "error": "x"})
    with as_(secured, "acme-client") as acme:
        assert [r["job_id"] for r in acme.get("/v1/runs", params={"status": "failed"}).json()["runs"]] == [
            made["acme"]["id"]]
    with as_(secured, "ops-admin") as admin:
        got = [r["job_id"] for r in admin.get("/v1/runs", params={"status": "failed"}).json()["runs"]]
        assert got == [made["globex"]["id"], made["acme"]["id"]]


def test_a_repeated_request_key_answers_the_job_with_its_outcome(http):
    key = unique("rk")
    queue = unique("q")
    body = job_body(target=f"queue:{queue}", schedule={"at": now_iso(-1)},
                    retry={"max_attempts": 1, "backoff_s": [0]}, request_key=key)
    job = http.post("/v1/jobs", json=body).json()
    run = claim_one(http, queue)
    http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": False, "error": "no"})
    again = http.post("/v1/jobs", json=body)
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    assert again.json()["last_run"]["status"] == "failed" and again.json()["runs"]["failed"] == 1
