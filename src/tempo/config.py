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

# Limits at the edge (docs/operations.md "Limits"); each key is optional and
# defaults to the bound of the same name in tempo/limits.py.
[http]
connections_max = 4096          # connections open at once; more: 503, closed
requests_in_flight_max = 2048   # requests handled at once; more: 503 overloaded
long_polls_max = 1024           # of those, claims/events with wait_s > 0
body_read_timeout_s = 30.0      # a body must arrive whole this fast; else 408
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
class HttpLimits:
    """The `[http]` table: the edge limits an operator may tune."""

    connections_max: int = limits.connections_max
    requests_in_flight_max: int = limits.requests_in_flight_max
    long_polls_max: int = limits.long_polls_max
    body_read_timeout_s: float = limits.body_read_timeout_s


@dataclass(frozen=True)
class Config:
    tokens: tuple[Token, ...] = field(default_factory=tuple)
    peer_token: str | None = None
    http: HttpLimits = field(default_factory=HttpLimits)


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
    unknown = set(data) - {"tokens", "peer_token", "http"}
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
    return Config(tokens, peer_token, _http(data.get("http", {})))


def _http(raw: object) -> HttpLimits:
    if not isinstance(raw, dict):
        raise ConfigError("http: a table")
    unknown = set(raw) - set(HttpLimits.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"http: unknown keys {sorted(unknown)}")
    for name in ("connections_max", "requests_in_flight_max", "long_polls_max"):
        value = raw.get(name, 1)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limits.http_setting_max:
            raise ConfigError(f"http.{name}: an integer from 1 to {limits.http_setting_max}")
    timeout_s = raw.get("body_read_timeout_s", limits.body_read_timeout_s)
    low_s, high_s = limits.body_read_timeout_s_min, limits.body_read_timeout_s_max
    if not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool) or not low_s <= timeout_s <= high_s:
        raise ConfigError(f"http.body_read_timeout_s: a number of seconds from {low_s:g} to {high_s:g}")
    http = HttpLimits(**{**raw, "body_read_timeout_s": float(timeout_s)})
    if not http.long_polls_max <= http.requests_in_flight_max <= http.connections_max:
        raise ConfigError("http: needs long_polls_max <= requests_in_flight_max <= connections_max")
    return http


def load(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            return parse(f.read())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
