"""The console on a three-node cluster serving TLS, with tokens (docs/ui.md
"On a follower", "Security"): one cluster for the module. Over https the
session and CSRF cookies are `Secure`; a follower sends a page to the same
page on the leader, query and all, answers its own cluster page, and
refuses a form, doing nothing, with a link to the leader."""

import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import trustme

from conftest import Server, free_port, job_body, tokens_config
from ui.helpers import Browserless

pytestmark = pytest.mark.process  # three `tempo serve` processes for the module
TOKENS = {"acme-client": ("acme", "client", None)}
PEER_TOKEN = "ui-cluster-peer-token-of-32-characters-at-least"
ready_timeout_s = 40.0
leader_timeout_s = 20.0


class TlsNode(Server):
    """A `tempo serve` cluster member with `[tls]`, asked over https."""

    def __init__(self, data_dir: Path, ca_file: Path, port: int, extra_args: tuple[str, ...]):
        super().__init__(data_dir, port, extra_args)
        self.url = f"https://127.0.0.1:{port}"
        self.ca_file = str(ca_file)

    def wait_ready(self, timeout_s: float = ready_timeout_s) -> float:
        return super().wait_ready(timeout_s)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("ui-cluster")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    ports = [free_port() for _ in range(3)]
    peers = ",".join(f"n{k}=https://127.0.0.1:{port}" for k, port in enumerate(ports, 1))
    nodes = []
    for k, port in enumerate(ports, 1):
        cert = ca.issue_cert("127.0.0.1", "localhost")
        cert.cert_chain_pems[0].write_to_path(str(root / f"n{k}.crt"))
        cert.private_key_pem.write_to_path(str(root / f"n{k}.key"))
        config = root / f"n{k}.toml"
        config.write_text(f'peer_token = "{PEER_TOKEN}"\n\n[tls]\ncert_file = "n{k}.crt"\nkey_file = "n{k}.key"\n'
                          f'ca_file = "ca.pem"\n\n' + tokens_config(TOKENS))
        nodes.append(TlsNode(root / f"n{k}", root / "ca.pem", port,
                             ("--node", f"n{k}", "--peers", peers, "--config", str(config))))
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:  # each start waits for a quorum
            for started in [pool.submit(node.start) for node in nodes]:
                started.result()
        yield nodes, ssl.create_default_context(cafile=str(root / "ca.pem"))
    finally:
        for node in nodes:
            node.cleanup()


def _roles(nodes: list[TlsNode], verify: ssl.SSLContext) -> tuple[TlsNode, TlsNode]:
    """(the leader, a follower) as the first node's `/v1/cluster` says."""
    deadline_s = time.monotonic() + leader_timeout_s
    with httpx.Client(verify=verify, timeout=5, headers={"authorization": "Bearer acme-client"}) as http:
        while (view := http.get(f"{nodes[0].url}/v1/cluster").json())["leader"] is None:
            assert time.monotonic() < deadline_s, f"no leader: {view}"
            time.sleep(0.2)
    leader = next(n for n in nodes if n.data_dir.name == view["leader"])
    return leader, next(n for n in nodes if n is not leader)


def _browser(node: TlsNode, verify: ssl.SSLContext) -> Browserless:
    b = Browserless(node.url)
    b.http.close()
    b.http = httpx.Client(base_url=node.url, verify=verify, timeout=30, follow_redirects=False)
    return b


def test_over_tls_the_session_and_csrf_cookies_are_secure(cluster) -> None:
    nodes, verify = cluster
    leader, _ = _roles(nodes, verify)
    with _browser(leader, verify) as b:
        form = b.get("/ui/login")
        assert "Secure" in form.headers["set-cookie"] and "tempo_csrf=" in form.headers["set-cookie"]
        ok = b.login("acme-client")
        assert ok.status_code == 303, ok.text
        cookie = ok.headers["set-cookie"]
        assert "tempo_session=" in cookie and "Secure" in cookie and "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert b.get("/ui/jobs").status_code == 200


def test_a_follower_sends_pages_to_the_leader_serves_its_own_cluster_page_and_refuses_forms(cluster) -> None:
    nodes, verify = cluster
    leader, follower = _roles(nodes, verify)
    with httpx.Client(base_url=leader.url, verify=verify, headers={"authorization": "Bearer acme-client"}) as api:
        job = api.post("/v1/jobs", json=job_body(labels={"team": "ui"})).json()
    with _browser(follower, verify) as b:
        assert b.login("acme-client").status_code == 303
        sent = b.get("/ui/jobs?label=team%3Aui&state=active")
        assert sent.status_code == 303
        assert sent.headers["location"] == f"{leader.url}/ui/jobs?label=team%3Aui&state=active"
        assert b.get(f"/ui/jobs/{job['id']}").headers["location"] == f"{leader.url}/ui/jobs/{job['id']}"
        # Its own view of the cluster is the follower's to show.
        own = b.get("/ui/cluster")
        assert own.status_code == 200
        assert f"<dt>this node</dt><dd>{follower.data_dir.name}</dd>" in own.text
        assert f"<dt>leader</dt><dd>{leader.data_dir.name}</dd>" in own.text
        # A form is not done here: nothing changes, and the page names the leader.
        refused = b.http.post(f"/ui/jobs/{job['id']}/pause", data={"csrf": b.csrf("/ui/cluster"), "note": "x"})
        assert refused.status_code == 503 and f'href="{leader.url}/ui/jobs/{job["id"]}"' in refused.text
    with _browser(leader, verify) as b:
        b.login("acme-client")
        shown = b.get(f"/ui/jobs/{job['id']}")
        assert shown.status_code == 200 and "active" in shown.text
