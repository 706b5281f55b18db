"""TLS (docs/operations.md "TLS"): the `[tls]` config table, with
certificates of a throwaway CA made here (trustme)."""

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from tempo.config import ConfigError, Tls, load, parse
from tempo.net.client import Client
from tempo.net.tls import TlsError


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
