"""The target policy against real servers (docs/operations.md "Target
policy"): with tokens, a job or a notification aimed at loopback, link-local
or private addresses is refused at create and patch time, and a delivery
whose host resolves to such an address is refused at connect time; an
`[executor] allow` entry opens a range; without tokens, loopback stays
allowed. Every request of these tests goes to loopback: the refusals of
other ranges are asserted from the answers, with nothing sent there."""

import socket
import time
from datetime import UTC, datetime

import pytest

from conftest import as_token, configured_server, job_body, tokens_config
from net.notify_endpoint import SECRET, serving

TOKENS = {"tenant": ("acme", "client", None)}
CONFIG = tokens_config(TOKENS) + f'\n[notify]\nsecret = "{SECRET}"\n'
RUN_WAIT_S = 20.0


@pytest.fixture(scope="module")
def receiver():
    """A loopback HTTP endpoint that counts what it is sent."""
    with serving(None) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with configured_server(tmp_path_factory.mktemp("policy"), CONFIG) as srv:
        yield srv


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finished_run(client, job_id: str) -> dict:
    deadline_s = time.monotonic() + RUN_WAIT_S
    while time.monotonic() < deadline_s:
        runs = client.get(f"/v1/jobs/{job_id}/runs").json()["runs"]
        if runs and runs[0]["status"] in ("done", "failed"):
            return runs[0]
        time.sleep(0.1)
    raise AssertionError(f"no finished run of {job_id} within {RUN_WAIT_S} s: {runs}")


def _loopback_name() -> str | None:
    """A name of this machine that resolves to loopback only (its host
    name, often, in a container), which the create check lets through."""
    name = socket.gethostname().lower()
    if name == "localhost" or name.endswith(".localhost"):
        return None
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    except OSError:
        return None
    return name if found and all(a.startswith("127.") or a == "::1" for a in found) else None


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "169.254.169.254", "10.0.0.1", "192.168.1.1",
                                  "[fd00::1]", "0.0.0.0", "2130706433", "[64:ff9b::a9fe:a9fe]",
                                  "[64:ff9b::a00:1]", "[64:ff9b:1::a9fe:a9fe]", "[2002:a9fe:a9fe::]",
                                  "[::a9fe:a9fe]", "[::7f00:1]", "[::127.0.0.1]"])
def test_a_target_or_a_notify_url_inside_the_network_is_400_at_create(secured, receiver, host):
    port = receiver.url.rsplit(":", 1)[1]
    with as_token(secured, "tenant") as c:
        refused = c.post("/v1/jobs", json=job_body(target=f"http://{host}:{port}/x", schedule={"at": now_iso()}))
        assert refused.status_code == 400, refused.text
        [error] = refused.json()["errors"]
        assert error["loc"] == "target" and "target policy" in error["msg"] and "[executor] allow" in error["msg"]
        refused = c.post("/v1/jobs", json=job_body(notify={"url": f"http://{host}:{port}/n"}))
        assert refused.status_code == 400 and refused.json()["errors"][0]["loc"] == "notify.url", refused.text
    assert receiver.arrived_at("/x") == 0


def test_a_patch_to_a_loopback_target_is_400(secured, receiver):
    merge = {"content-type": "application/merge-patch+json"}
    with as_token(secured, "tenant") as c:
        job = c.post("/v1/jobs", json=job_body()).json()
        refused = c.patch(f"/v1/jobs/{job['id']}", json={"target": f"{receiver.url}/patched"}, headers=merge)
        assert refused.status_code == 400 and refused.json()["errors"][0]["loc"] == "target", refused.text
        refused = c.patch(f"/v1/jobs/{job['id']}", json={"notify": {"url": f"{receiver.url}/n"}}, headers=merge)
        assert refused.status_code == 400 and refused.json()["errors"][0]["loc"] == "notify.url", refused.text
        assert c.get(f"/v1/jobs/{job['id']}").json()["target"] == job["target"]


def test_a_notify_url_without_a_host_is_400(secured):
    with as_token(secured, "tenant") as c:
        for url in ("http:///nohost", "https://:443/x"):
            refused = c.post("/v1/jobs", json=job_body(notify={"url": url}))
            assert refused.status_code == 400 and refused.json()["errors"][0]["loc"] == "notify.url", refused.text
            refused = c.post("/v1/jobs", json=job_body(target=url))
            assert refused.status_code == 400 and refused.json()["errors"][0]["loc"] == "target", refused.text


def test_a_name_that_resolves_to_loopback_is_refused_at_delivery(secured, receiver):
    name = _loopback_name()
    if name is None:
        pytest.skip("this machine's host name does not resolve to loopback only")
    port = receiver.url.rsplit(":", 1)[1]
    with as_token(secured, "tenant") as c:
        job = c.post("/v1/jobs", json=job_body(target=f"http://{name}:{port}/by-name", schedule={"at": now_iso()},
                                               retry={"max_attempts": 1}))
        assert job.status_code == 201, job.text
        run = finished_run(c, job.json()["id"])
    assert run["status"] == "failed" and run["error"].startswith(f"refused by the target policy: {name} resolves to "), run
    assert "127.0.0.1" not in run["error"], "the address a name resolves to stays the operator's"
    assert receiver.arrived_at("/by-name") == 0
    assert "delivery failed: refused by the target policy" in secured.log()


def test_an_allow_entry_lets_a_loopback_target_through(tmp_path, receiver):
    config = CONFIG + '\n[executor]\nallow = ["127.0.0.0/8"]\n'
    with configured_server(tmp_path, config) as srv, as_token(srv, "tenant") as c:
        job = c.post("/v1/jobs", json=job_body(target=f"{receiver.url}/allowed", schedule={"at": now_iso()}))
        assert job.status_code == 201, job.text
        run = finished_run(c, job.json()["id"])
        assert run["status"] == "done", run
        refused = c.post("/v1/jobs", json=job_body(target="http://169.254.169.254/", schedule={"at": now_iso()}))
        assert refused.status_code == 400 and "link-local" in refused.json()["errors"][0]["msg"]
    assert receiver.arrived_at("/allowed") == 1


def test_without_tokens_a_loopback_target_is_delivered(tmp_path, receiver):
    with configured_server(tmp_path, "") as srv, as_token(srv, None) as c:
        job = c.post("/v1/jobs", json=job_body(target=f"{receiver.url}/local", schedule={"at": now_iso()}))
        assert job.status_code == 201, job.text
        assert finished_run(c, job.json()["id"])["status"] == "done"
        refused = c.post("/v1/jobs", json=job_body(target="http://169.254.169.254/latest/meta-data/"))
        assert refused.status_code == 400 and refused.json()["errors"][0]["loc"] == "target"
    assert receiver.arrived_at("/local") == 1


def test_a_batch_names_the_refused_item(secured, receiver):
    with as_token(secured, "tenant") as c:
        answer = c.post("/v1/jobs/batch", json={"jobs": [job_body(), job_body(target=f"{receiver.url}/batch")]})
    assert answer.status_code == 200, answer.text
    first, second = answer.json()["results"]
    assert first["status"] == 201
    assert second["status"] == 400 and second["problem"]["errors"][0]["loc"] == "target", second
