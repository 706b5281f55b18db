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

# Days finished runs and events are kept (1-366, default 30): history is
# dropped by whole days once every run in a day finished longer ago than
# this. In a cluster, give every node the same value (the leader's applies).
retention_days = 30
```
"""

import re
import tomllib
from dataclasses import dataclass, field

from tempo import limits

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
class Config:
    tokens: tuple[Token, ...] = field(default_factory=tuple)
    peer_token: str | None = None
    retention_days: int = limits.retention_days_default


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


def parse(text: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not TOML: {exc}") from None
    unknown = set(data) - {"tokens", "peer_token", "retention_days"}
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
    retention_days = data.get("retention_days", limits.retention_days_default)
    lo, hi = limits.retention_days_min, limits.retention_days_max
    if type(retention_days) is not int or not lo <= retention_days <= hi:
        raise ConfigError(f"retention_days: a whole number of days, {lo}-{hi}")
    return Config(tokens, peer_token, retention_days)


def load(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            return parse(f.read())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
