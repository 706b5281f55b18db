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


# -- repeated headers that auth or routing reads ---------------------------------


def _raw(srv, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b"") -> tuple[int, dict, bytes]:
    """One request sent as written, repeated headers included (an HTTP
    client would merge or refuse them)."""
    import json
    import socket

    from net.raw_http import read_answer

    host, port = srv.url.removeprefix("http://").rsplit(":", 1)
    head = f"{method} {path} HTTP/1.1\r\n"
    if not any(name.lower() == "host" for name, _ in headers):
        head += f"host: {host}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers)
    head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode("latin-1") + body)
        status, answer_headers, answer = read_answer(sock)
    return status, answer_headers, json.loads(answer) if answer else {}


@pytest.mark.parametrize("values", [
    ["Bearer nope", "Bearer acme-client"],
    ["Bearer acme-client", "Bearer nope"],
    ["Bearer acme-client", "Bearer globex-client"],
    ["Bearer acme-client", "Bearer acme-client"],
])
@pytest.mark.parametrize("path", ["/v1/jobs", "/healthz", "/v1/cluster", "/v1/events"])
def test_two_authorization_headers_are_400_on_every_route(secured, values, path):
    status, headers, problem = _raw(secured, "GET", path, [("authorization", v) for v in values])
    assert status == 400, (status, problem)
    assert headers["content-type"] == "application/problem+json"
    assert problem["errors"][0]["loc"] == "header.authorization" and "once" in problem["errors"][0]["msg"]


@pytest.mark.parametrize("name", ["content-type", "if-match", "host"])
def test_other_repeated_headers_that_routing_reads_are_400(secured, name):
    with as_token(secured, "acme-client") as c:
        job = c.post("/v1/jobs", json={"target": "queue:reports", "schedule": {"at": "2030-01-01T00:00:00Z"}}).json()
    value = {"content-type": "application/json", "if-match": '"1"', "host": "127.0.0.1"}[name]
    status, headers, problem = _raw(secured, "PATCH", f"/v1/jobs/{job['id']}",
                                    [("authorization", "Bearer acme-client"), (name, value), (name, value)],
                                    b'{"name": "renamed"}')
    assert status == 400 and headers["content-type"] == "application/problem+json", (status, problem)
    # h11 refuses a second Host before the request reaches tempo's routes.
    if name != "host":
        assert problem["errors"][0]["loc"] == f"header.{name}"
    with as_token(secured, "acme-client") as c:
        assert c.get(f"/v1/jobs/{job['id']}").json()["name"] is None


def _send(srv, request: bytes) -> tuple[int, dict, dict]:
    """`request` sent as written on a fresh connection: its answer."""
    import json
    import socket

    from net.raw_http import read_answer

    host, port = srv.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        status, headers, answer = read_answer(sock)
    return status, headers, json.loads(answer) if answer else {}


def test_two_identical_content_lengths_are_merged_and_two_different_ones_are_400(secured):
    # docs/api.md "Repeated headers": the HTTP parser merges identical values
    # before tempo reads the head (RFC 9110 section 8.6 allows it); the body's
    # length is not in doubt then. Values that differ are refused by it.
    body = b'{"target": "queue:reports", "schedule": {"at": "2030-01-01T00:00:00Z"}}'
    head = (b"POST /v1/jobs HTTP/1.1\r\nhost: tempo\r\nauthorization: Bearer acme-client\r\n"
            b"content-type: application/json\r\nconnection: close\r\n")
    length = b"content-length: %d\r\n" % len(body)
    status, _, job = _send(secured, head + length + length + b"\r\n" + body)
    assert status == 201 and job["target"] == "queue:reports", job
    status, headers, problem = _send(secured, head + length + b"content-length: 2\r\n\r\n" + body)
    assert (status, headers["content-type"], problem["type"]) == (400, "application/problem+json", "validation")


@pytest.mark.parametrize("codings", [["chunked", "chunked"], ["gzip"], ["gzip, chunked"]])
def test_a_transfer_encoding_other_than_one_chunked_is_501_not_implemented(secured, codings):
    head = b"POST /v1/jobs HTTP/1.1\r\nhost: tempo\r\nauthorization: Bearer acme-client\r\n"
    head += b"".join(b"transfer-encoding: %s\r\n" % coding.encode() for coding in codings)
    status, headers, problem = _send(secured, head + b"connection: close\r\n\r\n0\r\n\r\n")
    assert (status, headers["content-type"]) == (501, "application/problem+json"), problem
    assert problem["type"] == "not_implemented" and problem["errors"] == [], problem
    assert "transfer-encoding" in problem["detail"].lower(), problem


def test_one_of_each_header_is_served(secured):
    status, _, body = _raw(secured, "GET", "/v1/jobs", [("authorization", "Bearer acme-client"),
                                                        ("accept", "application/json"), ("accept", "*/*")])
    assert status == 200 and "jobs" in body
