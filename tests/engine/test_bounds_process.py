"""Storage bounds against a real `tempo serve`: a request key or an owner
past its byte bound is refused at the edge, and the node stays up."""

import hashlib
import subprocess

import httpx

from conftest import Server, free_port, job_body, tempo_command, unique
from tempo import limits

CLEF = "\U0001d11e"  # four bytes in UTF-8
LONG_KEY = CLEF * 126  # 126 characters, 504 bytes


def text_of_bytes(count: int) -> str:
    return CLEF * (count // 4) + "k" * (count % 4)


def test_a_request_key_past_the_byte_bound_is_400_and_the_node_stays_up(server, http):
    answer = http.post("/v1/jobs", json=job_body(request_key=LONG_KEY))
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert [e["loc"] for e in answer.json()["errors"]] == ["request_key"]
    assert str(limits.request_key_bytes_max) in answer.json()["errors"][0]["msg"]
    batch = http.post("/v1/jobs/batch", json={"jobs": [job_body(request_key=LONG_KEY), job_body()]})
    assert batch.status_code == 200, batch.text
    [refused, created] = batch.json()["results"]
    assert refused["status"] == 400 and [e["loc"] for e in refused["problem"]["errors"]] == ["request_key"]
    assert created["status"] == 201
    assert server.proc.poll() is None, server.log()
    # The bound itself is fine, and idempotent as any key.
    key = text_of_bytes(limits.request_key_bytes_max)
    at_bound = job_body(request_key=key)
    first = http.post("/v1/jobs", json=at_bound)
    again = http.post("/v1/jobs", json=at_bound)
    assert first.status_code == 201, first.text
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]


def test_the_node_restarts_after_the_long_key(fresh_server):
    with httpx.Client(base_url=fresh_server.url, timeout=30) as http:
        assert http.post("/v1/jobs", json=job_body(request_key=LONG_KEY)).status_code == 400
    fresh_server.restart()
    with httpx.Client(base_url=fresh_server.url, timeout=30) as http:
        assert http.post("/v1/jobs", json=job_body(request_key=unique())).status_code == 201


def config(owner: str) -> str:
    digest = hashlib.sha256(b"the-token").hexdigest()
    return f'[[tokens]]\nsha256 = "{digest}"\nowner = "{owner}"\nrole = "client"\n'


def test_an_owner_past_the_byte_bound_is_refused_at_config_load(tmp_path):
    (tmp_path / "tempo.toml").write_text(config(CLEF * 200), encoding="utf-8")
    argv = [*tempo_command(), "serve", "--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{free_port()}",
            "--config", str(tmp_path / "tempo.toml")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert "tokens[0].owner" in done.stderr and f"{limits.owner_bytes_max} bytes" in done.stderr


def test_an_owner_and_a_request_key_at_their_bounds_work(tmp_path):
    owner = text_of_bytes(limits.owner_bytes_max)
    (tmp_path / "tempo.toml").write_text(config(owner), encoding="utf-8")
    srv = Server(tmp_path / "data", extra_args=("--config", str(tmp_path / "tempo.toml")))
    try:
        srv.start()
        headers = {"authorization": "Bearer the-token"}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as http:
            key = text_of_bytes(limits.request_key_bytes_max)
            body = job_body(request_key=key)
            created = http.post("/v1/jobs", json=body)
            assert created.status_code == 201, created.text
            assert created.json()["owner"] == owner
            again = http.post("/v1/jobs", json=body)
            assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
            listed = http.get("/v1/jobs").json()["jobs"]
            assert [job["id"] for job in listed] == [created.json()["id"]]
            srv.restart()
            assert http.get(f"/v1/jobs/{created.json()['id']}").status_code == 200
    finally:
        srv.cleanup()
