"""TLS for the API and between the nodes (docs/operations.md "TLS"): the
`[tls]` config table, a real node serving https with a certificate of a
throwaway CA made here (trustme), clients that trust that CA and clients that
do not, and a three-node cluster that replicates over https."""

import json
import os
import re
import socket
import ssl
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import trio
import trustme
from cryptography.hazmat.primitives import serialization

from conftest import Server, free_port, tempo_command, unique
from tempo import server as server_module
from tempo.config import Config, ConfigError, Tls, load, parse
from tempo.net.client import Client, Unavailable
from tempo.net.tls import TlsError, certificate_refused, client_context, ssl_error_of
from tempo.worker import Worker

cli_timeout_s = 30
cluster_ready_timeout_s = 30.0
replicated_timeout_s = 10.0


@dataclass(frozen=True)
class Pki:
    """A CA and certificates for 127.0.0.1 signed by it, as PEM files in `root`."""

    root: Path
    ca: trustme.CA

    @property
    def ca_file(self) -> Path:
        return self.root / "ca.pem"

    @property
    def other_ca_file(self) -> Path:
        """A CA that signed none of the certificates."""
        return self.root / "other-ca.pem"

    def node_files(self, name: str) -> tuple[Path, Path]:
        """(certificate, key) of a new certificate for 127.0.0.1 and localhost."""
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        cert_file, key_file = self.root / f"{name}.crt", self.root / f"{name}.key"
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        cert.private_key_pem.write_to_path(str(key_file))
        return cert_file, key_file

    def config(self, name: str, *, ca: bool = True) -> Path:
        """A config file with `[tls]` for a node called `name` (relative paths)."""
        cert_file, key_file = self.node_files(name)
        lines = ["[tls]", f'cert_file = "{cert_file.name}"', f'key_file = "{key_file.name}"']
        if ca:
            lines.append(f'ca_file = "{self.ca_file.name}"')
        path = self.root / f"{name}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    trustme.CA().cert_pem.write_to_path(str(root / "other-ca.pem"))
    return Pki(root, ca)


class TlsServer(Server):
    """A `tempo serve` with `[tls]`: its URL is https, and readiness is asked
    over https trusting the test's CA."""

    def __init__(self, data_dir: Path, ca_file: Path, port: int | None = None, extra_args: tuple[str, ...] = ()):
        super().__init__(data_dir, port, extra_args)
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca_file = str(ca_file)

    def wait_ready(self, timeout_s: float = cluster_ready_timeout_s) -> float:
        return super().wait_ready(timeout_s)


@pytest.fixture(scope="module")
def tls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory):
    srv = TlsServer(tmp_path_factory.mktemp("tls") / "data", pki.ca_file,
                    extra_args=("--config", str(pki.config("single"))))
    try:
        yield srv.start()
    finally:
        srv.cleanup()


def tempo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("TEMPO_URL", "TEMPO_TOKEN", "TEMPO_CA_FILE")}
    return subprocess.run([*tempo_command(), *args], capture_output=True, text=True, timeout=cli_timeout_s,
                          env=full_env | (env or {}))


# -- the [tls] table ------------------------------------------------------------------


def test_tls_paths_are_relative_to_the_config_files_directory(pki: Pki, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # not where the files are
    config = load(str(pki.config("rel")))
    assert config.tls == Tls(str(pki.root / "rel.crt"), str(pki.root / "rel.key"), str(pki.ca_file))
    assert parse("").tls is None


def test_ca_file_is_optional(pki: Pki) -> None:
    config = load(str(pki.config("noca", ca=False)))
    assert config.tls is not None and config.tls.ca_file is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('tls = "on"', "tls: a table"),
        ('[tls]\ncert_file = "n.crt"\nkey_file = "n.key"\ncert = "x"', "tls: unknown keys ['cert']"),
        ('[tls]\nkey_file = "n.key"', "tls.cert_file: required"),
        ('[tls]\ncert_file = "n.crt"', "tls.key_file: required"),
        ('[tls]\nca_file = "ca.pem"', "tls.cert_file: required"),
        ('[tls]\ncert_file = 7\nkey_file = "n.key"', "tls.cert_file: a path"),
        ('[tls]\ncert_file = "missing.crt"\nkey_file = "n.key"', "tls.cert_file: cannot read"),
        ('[tls]\ncert_file = "n.crt"\nkey_file = "missing.key"', "tls.key_file: cannot read"),
        ('[tls]\ncert_file = "junk.pem"\nkey_file = "n.key"', "tls.cert_file: no PEM certificate"),
        ('[tls]\ncert_file = "n.key"\nkey_file = "n.key"', "tls.cert_file: no PEM certificate"),
        ('[tls]\ncert_file = "n.crt"\nkey_file = "junk.pem"', "tls.key_file: not a PEM private key"),
        ('[tls]\ncert_file = "n.crt"\nkey_file = "other.key"', "tls.key_file: not a PEM private key that belongs"),
        ('[tls]\ncert_file = "n.crt"\nkey_file = "n.key"\nca_file = "junk.pem"', "tls.ca_file: no PEM certificate"),
        ('[tls]\ncert_file = "n.crt"\nkey_file = "n.key"\nca_file = "nope.pem"', "tls.ca_file: cannot read"),
    ],
)
def test_bad_tls_tables_name_the_key(pki: Pki, tmp_path: Path, body: str, message: str) -> None:
    for name in ("n", "other"):
        cert_file, key_file = pki.node_files(name)
        os.replace(cert_file, tmp_path / f"{name}.crt")
        os.replace(key_file, tmp_path / f"{name}.key")
    (tmp_path / "junk.pem").write_text("not a PEM file\n")
    (tmp_path / "ca.pem").write_bytes(pki.ca_file.read_bytes())
    parse('[tls]\ncert_file = "n.crt"\nkey_file = "n.key"\nca_file = "ca.pem"', str(tmp_path))  # the good one
    with pytest.raises(ConfigError) as caught:
        parse(body, str(tmp_path))
    assert message in str(caught.value)


def test_an_encrypted_key_is_refused_without_prompting(pki: Pki, tmp_path: Path) -> None:
    cert_file, key_file = pki.node_files("enc")
    key = serialization.load_pem_private_key(key_file.read_bytes(), None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"secret"))
    (tmp_path / "enc.key").write_bytes(encrypted)
    with pytest.raises(ConfigError, match=r"tls\.key_file: the key is encrypted"):
        parse(f'[tls]\ncert_file = "{cert_file}"\nkey_file = "enc.key"', str(tmp_path))


# -- clients -------------------------------------------------------------------------


def test_a_ca_file_that_cannot_be_used_is_a_clear_error(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(TlsError, match="cannot read"):
        Client(["https://127.0.0.1:1"], ca_file=str(tmp_path / "missing.pem"))
    (tmp_path / "junk.pem").write_text("junk")
    with pytest.raises(TlsError, match="no PEM certificate"):
        Client(["https://127.0.0.1:1"], ca_file=str(tmp_path / "junk.pem"))


def test_the_ssl_error_behind_a_connection_error_is_found() -> None:
    refused = ssl.SSLCertVerificationError(1, "certificate verify failed")
    wrapped = httpx.ConnectError("")
    wrapped.__cause__ = trio.BrokenResourceError()
    wrapped.__cause__.__cause__ = refused
    assert ssl_error_of(wrapped) is refused and certificate_refused(wrapped)
    eof = httpx.ConnectError("")
    eof.__context__ = ssl.SSLEOFError(8, "EOF in violation of protocol")
    assert ssl_error_of(eof) is eof.__context__ and not certificate_refused(eof)
    plain = httpx.ConnectError("[Errno 111] Connection refused")
    plain.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert ssl_error_of(plain) is None and not certificate_refused(plain)


# -- which peers go with which config ---------------------------------------------------


def _options(peers: str | None) -> server_module.ServeOptions:
    cluster = server_module.parse_cluster("n1", peers) if peers else None
    return server_module.ServeOptions(cluster=cluster)


@pytest.mark.parametrize(
    ("peers", "tls", "message"),
    [
        ("n1=https://127.0.0.1:1,n2=http://127.0.0.1:2", True, "mixes http:// and https://"),
        ("n1=https://127.0.0.1:1,n2=http://127.0.0.1:2", False, "mixes http:// and https://"),
        ("n1=https://127.0.0.1:1,n2=https://127.0.0.1:2", False, "no [tls]"),
        ("n1=http://127.0.0.1:1,n2=http://127.0.0.1:2", True, "give --peers as https://"),
        ("n1=https://127.0.0.1:1,n2=https://127.0.0.1:2", True, None),
        ("n1=http://127.0.0.1:1,n2=http://127.0.0.1:2", False, None),
        (None, True, None),
        (None, False, None),
    ],
)
def test_peers_schemes_must_match_the_tls_config(peers: str | None, tls: bool, message: str | None) -> None:
    config = Config(tls=Tls("c.pem", "k.pem") if tls else None)
    if message is None:
        server_module.check_tls(_options(peers), config)
    else:
        with pytest.raises(server_module.ServeError, match=message.replace("[", r"\[").replace("]", r"\]")):
            server_module.check_tls(_options(peers), config)


def test_serve_refuses_https_peers_without_tls_and_a_bad_tls_table(pki: Pki, tmp_path: Path) -> None:
    port = free_port()
    serve = ["serve", "--data-dir", str(tmp_path / "d"), "--node", "n1"]
    refused = tempo(*serve, "--peers", f"n1=https://127.0.0.1:{port}")
    assert refused.returncode == 2 and "no [tls] in --config" in refused.stderr
    (tmp_path / "bad.toml").write_text(f'[tls]\ncert_file = "{pki.ca_file}"\n')
    bad = tempo(*serve, "--peers", f"n1=https://127.0.0.1:{port}", "--config", str(tmp_path / "bad.toml"))
    assert bad.returncode == 2 and "tls.key_file: required" in bad.stderr


def test_tls_does_not_lift_the_rule_on_public_addresses_without_tokens(pki: Pki, tmp_path: Path) -> None:
    refused = tempo("serve", "--data-dir", str(tmp_path / "d"), "--listen", f"0.0.0.0:{free_port()}",
                    "--config", str(pki.config("public")))
    assert refused.returncode == 2 and "--insecure" in refused.stderr


# -- one node over https ----------------------------------------------------------------


def test_it_says_it_serves_https(tls_server: TlsServer) -> None:
    assert f"tempo serving on https://127.0.0.1:{tls_server.port}" in tls_server.log()


def test_create_and_read_back_over_https(tls_server: TlsServer, pki: Pki) -> None:
    with Client([tls_server.url], ca_file=str(pki.ca_file)) as client:
        job = client.create_job({"target": f"queue:{unique('q')}", "schedule": {"at": "2030-01-01T00:00:00Z"}})
        assert client.get_job(job["id"]) == job


def test_a_client_that_does_not_trust_the_ca_is_refused_at_once(tls_server: TlsServer, pki: Pki, monkeypatch) -> None:
    monkeypatch.delenv("TEMPO_CA_FILE", raising=False)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{tls_server.url}/healthz", verify=client_context(None))  # the system trust store
    for ca_file in (str(pki.other_ca_file), None):
        started = time.monotonic()
        with Client([tls_server.url], ca_file=ca_file) as client, pytest.raises(Unavailable) as caught:
            client.get_job("j_nope")
        # A certificate that is refused will be refused again: no 10 s of retries.
        assert time.monotonic() - started < 5.0
        assert "certificate" in str(caught.value) and tls_server.url in str(caught.value)


def test_the_ca_file_comes_from_tempo_ca_file(tls_server: TlsServer, pki: Pki, monkeypatch) -> None:
    monkeypatch.setenv("TEMPO_CA_FILE", str(pki.ca_file))
    with Client([tls_server.url]) as client:
        assert client.list_jobs(limit=1)["jobs"] is not None


def test_plain_http_to_the_tls_port_fails_and_the_node_goes_on(tls_server: TlsServer, pki: Pki) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{tls_server.port}/healthz", timeout=5.0)
    healthz = httpx.get(f"{tls_server.url}/healthz", verify=client_context(str(pki.ca_file)), timeout=5.0)
    assert healthz.status_code == 200


def test_http2_is_not_offered(tls_server: TlsServer, pki: Pki) -> None:
    context = client_context(str(pki.ca_file))
    context.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=5.0) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.selected_alpn_protocol() == "http/1.1"


def test_cli_ca_file_flag_and_env(tls_server: TlsServer, pki: Pki) -> None:
    create = ("jobs", "create", "--target", f"queue:{unique('q')}", "--at", "2030-01-01T00:00:00Z", "--json")
    made = tempo(*create, "--url", tls_server.url, "--ca-file", str(pki.ca_file))
    assert made.returncode == 0, made.stderr
    job = json.loads(made.stdout)
    got = tempo("jobs", "get", job["id"], "--json", env={"TEMPO_URL": tls_server.url, "TEMPO_CA_FILE": str(pki.ca_file)})
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == job
    untrusted = tempo("jobs", "get", job["id"], "--url", tls_server.url)
    assert untrusted.returncode == 2 and "certificate" in untrusted.stderr
    missing = tempo("jobs", "list", "--url", tls_server.url, "--ca-file", str(pki.root / "missing.pem"))
    assert missing.returncode == 2 and "--ca-file" in missing.stderr and "missing.pem" in missing.stderr


async def test_the_worker_library_over_https(tls_server: TlsServer, pki: Pki) -> None:
    queue = unique("q")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    with Client([tls_server.url], ca_file=str(pki.ca_file)) as client:
        job = client.create_job({"target": f"queue:{queue}", "schedule": {"at": now}})
    handled = trio.Event()

    async def handler(run: dict) -> str:
        handled.set()
        return "done over https"

    worker = Worker([tls_server.url], "w-tls", {queue: handler}, wait_s=1, ca_file=str(pki.ca_file))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(15):
            await handled.wait()
            while worker.counts["ok"] < 1:
                await trio.sleep(0.05)
        await worker.stop(grace_s=1)
    with Client([tls_server.url], ca_file=str(pki.ca_file)) as client:
        runs = client.list_runs(job["id"])["runs"]
    assert [(r["status"], r["output"]) for r in runs] == [("done", "done over https")]


def test_a_tls_node_stops_cleanly_on_sigterm(pki: Pki, tmp_path: Path) -> None:
    srv = TlsServer(tmp_path / "data", pki.ca_file, extra_args=("--config", str(pki.config("stop"))))
    try:
        srv.start()
        with httpx.Client(verify=client_context(str(pki.ca_file)), timeout=5.0) as http:
            assert http.get(f"{srv.url}/healthz").status_code == 200  # its connection stays open
            srv.stop()  # asserts exit status 0
    finally:
        srv.cleanup()


def test_loadgen_over_https(tls_server: TlsServer, pki: Pki) -> None:
    done = tempo("loadgen", "--url", tls_server.url, "--ca-file", str(pki.ca_file), "--jobs", "20",
                 "--due-in-s", "2", "--workers", "1", "--timeout-s", "15", "--no-report", "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^claimed +20$", done.stdout, re.M) and re.search(r"^lost +0$", done.stdout, re.M), done.stdout
    refused = tempo("loadgen", "--url", tls_server.url, "--jobs", "20", "--no-report", "--no-progress")
    assert refused.returncode == 2 and "certificate refused" in refused.stderr


# -- three nodes over https -------------------------------------------------------------


def test_a_three_node_cluster_replicates_over_https(pki: Pki, tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    peers = ",".join(f"n{k}=https://127.0.0.1:{port}" for k, port in enumerate(ports, 1))
    nodes = [
        TlsServer(tmp_path / f"n{k}", pki.ca_file, port, ("--node", f"n{k}", "--peers", peers,
                                                           "--config", str(pki.config(f"n{k}"))))
        for k, port in enumerate(ports, 1)
    ]
    urls = [node.url for node in nodes]
    try:
        # Each start waits until its node is ready, which needs a quorum.
        with ThreadPoolExecutor(len(nodes)) as pool:
            for started in [pool.submit(node.start) for node in nodes]:
                started.result()
        with Client(urls, ca_file=str(pki.ca_file)) as client:
            job = client.create_job({"target": f"queue:{unique('q')}", "schedule": {"at": "2030-01-01T00:00:00Z"}})
        with httpx.Client(verify=client_context(str(pki.ca_file)), timeout=2.0) as http:
            for url in urls:
                deadline_s = time.monotonic() + replicated_timeout_s
                while (answer := http.get(f"{url}/v1/jobs/{job['id']}", params={"stale": "true"})).status_code != 200:
                    assert time.monotonic() < deadline_s, f"{url}: {answer.status_code} {answer.text}"
                    time.sleep(0.05)
                assert answer.json() == job
            deadline_s = time.monotonic() + replicated_timeout_s
            while len(digests := {http.get(f"{url}/v1/cluster/digest").json()["digest"] for url in urls}) != 1:
                assert time.monotonic() < deadline_s, f"digests differ: {digests}"
                time.sleep(0.05)
            # A node is added at an https:// URL only; a plain one could never be reached.
            added = http.post(f"{urls[0]}/v1/cluster/nodes", json={"id": "n4", "url": "http://127.0.0.1:9"},
                              follow_redirects=True)
            assert added.status_code == 400 and added.json()["errors"][0]["loc"] == "url", added.text
        status = tempo("cluster", "status", "--url", urls[0], "--ca-file", str(pki.ca_file))
        assert status.returncode == 0, status.stdout + status.stderr
        assert all(url in status.stdout for url in urls)
        # The leader dies in the middle of its TLS streams to the others: they
        # go on (their servers survive the cut streams), elect one of them and
        # take writes.
        with Client(urls, ca_file=str(pki.ca_file)) as client:
            leader_id = client.request("GET", "/v1/cluster")["leader"]
            leader = nodes[int(leader_id.removeprefix("n")) - 1]
            leader.kill()
            again = client.create_job({"target": f"queue:{unique('q')}", "schedule": {"at": "2030-01-01T00:00:00Z"},
                                       "request_key": unique("k")})  # safe to send again
            assert client.get_job(again["id"]) == again
            assert client.leader_url != leader.url
        assert all(node.proc.poll() is None for node in nodes if node is not leader)
    finally:
        for node in nodes:
            node.cleanup()
