"""The server's TOML config file (`tempo serve --config FILE`).

```toml
[[tokens]]
sha256 = "hex SHA-256 of the token"
owner = "acme"
role = "client"          # client | worker | admin
queues = ["reports"]     # worker tokens only: the queues it may claim from

# A cluster with tokens: the secret its nodes present to each other (the
# same on every node; at least 32 characters).
peer_token = "..."

# TLS for the API and the traffic between nodes (docs/operations.md "TLS").
# Paths are PEM files; a relative path is relative to this file's directory.
[tls]
cert_file = "node.crt"   # this node's certificate (its chain may follow it)
key_file = "node.key"    # its private key, unencrypted
ca_file = "ca.crt"       # optional: the CA that signed the other nodes'
                         # certificates (default: the system trust store)
```

With `[tls]` the node serves https:// only, and its `--peers` URLs must be
https://. The files are checked when the config is read: readable, a
certificate, a key that belongs to it, a CA file holding certificates.
"""

import os
import re
import ssl
import tomllib
from dataclasses import dataclass, field

_HEX64 = re.compile(r"[0-9a-f]{64}")
_QUEUE = re.compile(r"[A-Za-z0-9._-]{1,200}")
ROLES = ("client", "worker", "admin")


class ConfigError(Exception):
    """The config file is unreadable or wrong; the message names the place."""


@dataclass(frozen=True)
class Token:
    sha256: bytes
    owner: str
    role: str
    queues: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Tls:
    """Absolute paths of the PEM files of `[tls]`."""

    cert_file: str
    key_file: str
    ca_file: str | None = None


@dataclass(frozen=True)
class Config:
    tokens: tuple[Token, ...] = field(default_factory=tuple)
    peer_token: str | None = None
    tls: Tls | None = None


def _token(i: int, raw: object) -> Token:
    where = f"tokens[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a table")
    unknown = set(raw) - {"sha256", "owner", "role", "queues"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    digest, owner, role = raw.get("sha256"), raw.get("owner"), raw.get("role")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest.lower()):
        raise ConfigError(f"{where}.sha256: 64 hex digits")
    if not isinstance(owner, str) or not 0 < len(owner) <= 200 or "\x00" in owner:
        raise ConfigError(f"{where}.owner: 1-200 characters")
    if role not in ROLES:
        raise ConfigError(f"{where}.role: one of {', '.join(ROLES)}")
    queues = raw.get("queues", [])
    if not isinstance(queues, list) or not all(isinstance(q, str) and _QUEUE.fullmatch(q) for q in queues):
        raise ConfigError(f"{where}.queues: a list of queue names")
    if queues and role != "worker":
        raise ConfigError(f"{where}.queues: only worker tokens have queues")
    return Token(bytes.fromhex(digest), owner, role, frozenset(queues))


def _tls_path(key: str, raw: dict, base_dir: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(f"tls.{key}: a path to a PEM file")
    path = os.path.join(base_dir, os.path.expanduser(value))
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"tls.{key}: cannot read {path}: {exc.strerror}") from None
    return path


def _no_password() -> bytes:
    raise ConfigError("tls.key_file: the key is encrypted; give tempo an unencrypted key "
                      "(e.g. `openssl pkey -in KEY -out KEY.plain`), readable by its user only")


def _check_certificates(key: str, path: str) -> None:
    """The file holds at least one PEM certificate."""
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as exc:
        raise ConfigError(f"tls.{key}: no PEM certificate in {path} ({exc.reason or exc})") from None


def _tls(raw: object, base_dir: str) -> Tls:
    if not isinstance(raw, dict):
        raise ConfigError("tls: a table ([tls])")
    unknown = set(raw) - {"cert_file", "key_file", "ca_file"}
    if unknown:
        raise ConfigError(f"tls: unknown keys {sorted(unknown)}")
    cert_file, key_file, ca_file = (_tls_path(k, raw, base_dir) for k in ("cert_file", "key_file", "ca_file"))
    if cert_file is None:
        raise ConfigError("tls.cert_file: required with [tls] (this node's certificate, PEM)")
    if key_file is None:
        raise ConfigError("tls.key_file: required with [tls] (the private key of tls.cert_file, PEM)")
    _check_certificates("cert_file", cert_file)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_file, key_file, password=_no_password)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"tls.key_file: not a PEM private key that belongs to tls.cert_file ({exc.reason or exc})"
        ) from None
    if ca_file is not None:
        _check_certificates("ca_file", ca_file)
    return Tls(cert_file, key_file, ca_file)


def parse(text: str, base_dir: str = ".") -> Config:
    """The config in `text`; `[tls]` paths are relative to `base_dir`, and the
    files they name are read to check them."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not TOML: {exc}") from None
    unknown = set(data) - {"tokens", "peer_token", "tls"}
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)}")
    raw_tokens = data.get("tokens", [])
    if not isinstance(raw_tokens, list):
        raise ConfigError("tokens: an array of tables ([[tokens]])")
    tokens = tuple(_token(i, raw) for i, raw in enumerate(raw_tokens))
    if len({t.sha256 for t in tokens}) != len(tokens):
        raise ConfigError("tokens: the same token twice")
    peer_token = data.get("peer_token")
    if peer_token is not None and (not isinstance(peer_token, str) or len(peer_token) < 32):
        raise ConfigError("peer_token: a string of at least 32 characters")
    tls = _tls(data["tls"], os.path.abspath(base_dir)) if "tls" in data else None
    return Config(tokens, peer_token, tls)


def load(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    return parse(text, base_dir=os.path.dirname(os.path.abspath(path)))
