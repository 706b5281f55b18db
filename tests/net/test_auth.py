"""Bearer tokens against a real server started with --config (docs/operations.md "Tokens")."""

import subprocess
from datetime import UTC, datetime

import pytest

from conftest import as_token, configured_server, free_port, tempo_command, tokens_config, unique

TOKENS = {
    "acme-client": ("acme", "client", None),
    "acme-worker": ("acme", "worker", ["reports"]),
    "globex-client": ("globex", "client", None),
    "acme-admin": ("acme", "admin", None),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with configured_server(tmp_path_factory.mktemp("auth"), tokens_config(TOKENS)) as srv:
        yield srv


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_no_token_or_an_unknown_one_is_401(secured):
    for token in (None, "nope"):
        with as_token(secured, token) as c:
            answer = c.get("/v1/jobs")
            assert answer.status_code == 401 and answer.json()["type"] == "unauthorized"
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert c.get("/v1/cluster").status_code == 401
            assert c.get("/healthz").status_code == 200 and c.get("/metrics").status_code == 200


def test_owners_are_isolated(secured):
    with as_token(secured, "acme-client") as acme, as_token(secured, "globex-client") as globex:
        job = acme.post("/v1/jobs", json={"target": "queue:reports", "schedule": {"at": "2030-01-01T00:00:00Z"}}).json()
        assert job["owner"] == "acme"
        assert globex.get(f"/v1/jobs/{job['id']}").status_code == 404
        assert globex.post(f"/v1/jobs/{job['id']}/pause").status_code == 404
        assert globex.delete(f"/v1/jobs/{job['id']}").status_code == 404
        assert job["id"] not in [j["id"] for j in globex.get("/v1/jobs").json()["jobs"]]
        assert acme.get(f"/v1/jobs/{job['id']}").status_code == 200
        assert globex.get("/v1/cluster").status_code == 200


def test_roles_limit_what_a_token_does(secured):
    with as_token(secured, "acme-client") as client, as_token(secured, "acme-worker") as worker, \
            as_token(secured, "acme-admin") as admin:
        claim = {"worker": "w", "queues": ["reports"]}
        assert client.post("/v1/claim", json=claim).status_code == 403
        assert admin.post("/v1/claim", json=claim).status_code == 403
        assert worker.post("/v1/jobs", json={"target": "queue:reports", "schedule": {"at": now_iso()}}).status_code == 403
        assert admin.get("/v1/jobs").status_code == 200
        forbidden = worker.post("/v1/claim", json={"worker": "w", "queues": ["other"]})
        assert forbidden.status_code == 403 and forbidden.json()["type"] == "forbidden"


def test_a_worker_claims_its_owners_runs_of_its_queues_only(secured):
    with as_token(secured, "acme-client") as client, as_token(secured, "acme-worker") as worker, \
            as_token(secured, "globex-client") as globex:
        mine = client.post("/v1/jobs", json={"target": "queue:reports", "schedule": {"at": now_iso()},
                                             "request_key": unique()}).json()
        other = globex.post("/v1/jobs", json={"target": "queue:reports", "schedule": {"at": now_iso()}}).json()
        seen = []
        for _ in range(5):
            seen += worker.post("/v1/claim", json={"worker": "w", "queues": ["reports"], "max_runs": 100,
                                                   "wait_s": 0.5}).json()["runs"]
        ids = {r["job_id"] for r in seen}
        assert mine["id"] in ids and other["id"] not in ids
        run = next(r for r in seen if r["job_id"] == mine["id"])
        done = worker.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": True})
        assert done.status_code == 200


def test_tokens_allow_a_non_loopback_listen_and_no_tokens_refuse_it(tmp_path):
    argv = [*tempo_command(), "serve", "--data-dir", str(tmp_path / "d"), "--listen", f"0.0.0.0:{free_port()}"]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "--insecure" in refused.stderr
    (tmp_path / "bad.toml").write_text('[[tokens]]\nsha256 = "xyz"\nowner = "a"\nrole = "client"\n')
    bad = subprocess.run([*argv, "--config", str(tmp_path / "bad.toml")], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "tokens[0].sha256" in bad.stderr
