"""An admin token does everything but claim (docs/operations.md "Tokens"):
it lists, reads and acts on every owner's jobs and runs, not only its own
owner's; what it creates is its own owner's; clients stay kept apart."""

import hashlib

import httpx
import pytest

from conftest import configured_server, job_body

TOKENS = {
    "acme-client": ("acme", "client"),
    "globex-client": ("globex", "client"),
    "ops-admin": ("ops", "admin"),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    config = "\n".join(
        f'[[tokens]]\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\nowner = "{owner}"\nrole = "{role}"\n'
        for token, (owner, role) in TOKENS.items()
    )
    with configured_server(tmp_path_factory.mktemp("admin"), config) as srv:
        yield srv


def as_(srv, token: str) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture(scope="module")
def jobs(secured):
    """One job of acme's and one of globex's, globex's the newer."""
    with as_(secured, "acme-client") as acme, as_(secured, "globex-client") as globex:
        made = acme.post("/v1/jobs", json=job_body()).json(), globex.post("/v1/jobs", json=job_body()).json()
    return made


def test_an_admin_lists_every_owners_jobs_newest_first(secured, jobs):
    acme_job, globex_job = jobs
    with as_(secured, "ops-admin") as admin:
        listed = admin.get("/v1/jobs").json()
        ids = [j["id"] for j in listed["jobs"]]
        assert ids.index(globex_job["id"]) < ids.index(acme_job["id"])
        assert {j["owner"] for j in listed["jobs"]} >= {"acme", "globex"}
        # Pages follow each other across owners.
        first = admin.get("/v1/jobs", params={"limit": 1}).json()
        second = admin.get("/v1/jobs", params={"limit": 1, "cursor": first["next_cursor"]}).json()
        assert [j["id"] for j in first["jobs"] + second["jobs"]] == ids[:2]


def test_an_admin_reads_any_owners_job_and_runs(secured, jobs):
    acme_job, _ = jobs
    with as_(secured, "ops-admin") as admin:
        got = admin.get(f"/v1/jobs/{acme_job['id']}")
        assert got.status_code == 200 and got.json()["owner"] == "acme"
        runs = admin.get(f"/v1/jobs/{acme_job['id']}/runs")
        assert runs.status_code == 200
        [run] = runs.json()["runs"]
        one = admin.get(f"/v1/runs/{run['id']}")
        assert one.status_code == 200 and one.json()["job_id"] == acme_job["id"]


def test_an_admin_acts_on_any_owners_job(secured):
    with as_(secured, "acme-client") as acme, as_(secured, "ops-admin") as admin:
        job = acme.post("/v1/jobs", json=job_body(schedule={"every_s": 3600})).json()
        paused = admin.post(f"/v1/jobs/{job['id']}/pause")
        assert paused.status_code == 200 and paused.json()["state"] == "paused"
        assert acme.get(f"/v1/jobs/{job['id']}").json()["state"] == "paused"
        resumed = admin.post(f"/v1/jobs/{job['id']}/resume")
        assert resumed.status_code == 200 and resumed.json()["state"] == "active"
        triggered = admin.post(f"/v1/jobs/{job['id']}/trigger")
        assert triggered.status_code == 201 and triggered.json()["job_id"] == job["id"]
        assert acme.get(f"/v1/runs/{triggered.json()['id']}").status_code == 200
        assert admin.delete(f"/v1/jobs/{job['id']}").status_code == 204
        assert acme.get(f"/v1/jobs/{job['id']}").status_code == 404
        assert admin.get(f"/v1/jobs/{job['id']}").status_code == 404


def test_an_admin_creates_as_its_own_owner_and_still_may_not_claim(secured):
    with as_(secured, "ops-admin") as admin, as_(secured, "acme-client") as acme:
        mine = admin.post("/v1/jobs", json=job_body())
        assert mine.status_code == 201 and mine.json()["owner"] == "ops"
        assert acme.get(f"/v1/jobs/{mine.json()['id']}").status_code == 404
        assert admin.post("/v1/claim", json={"worker": "w", "queues": ["q"]}).status_code == 403


def test_clients_still_see_only_their_own_owners_jobs(secured, jobs):
    acme_job, globex_job = jobs
    with as_(secured, "globex-client") as globex:
        ids = [j["id"] for j in globex.get("/v1/jobs").json()["jobs"]]
        assert globex_job["id"] in ids and acme_job["id"] not in ids
        assert globex.get(f"/v1/jobs/{acme_job['id']}").status_code == 404
        assert globex.post(f"/v1/jobs/{acme_job['id']}/trigger").status_code == 404


def test_an_admin_gets_404_for_a_job_or_run_no_one_has(secured):
    with as_(secured, "ops-admin") as admin:
        assert admin.get("/v1/jobs/j_01JEXAMPLE0000000000000000").status_code == 404
        assert admin.get("/v1/runs/r_0000000000000000000000000000000000AB").status_code == 404
