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

# Fairness between owners (docs/operations.md "Fairness between owners").
# Defaults for every owner; each key is optional, and a key left out means no
# limit of that kind.
[limits]
runs_in_flight_max = 100  # runs claimed and not finished, per owner
claims_per_s = 50         # runs claimed per second (token bucket) ...
claim_burst = 100         # ... holding this many (default: claims_per_s, at least 1)
creates_per_s = 20        # jobs created per second; over it, 429 ...
create_burst = 200        # ... holding this many (default: creates_per_s, at least 1)

# Overrides for one owner: the keys given replace the defaults above, the
# others are inherited. `runs_in_flight_max`, `claims_per_s` and
# `creates_per_s` may be "unlimited" to lift a default for this owner.
[[owners]]
name = "acme"
runs_in_flight_max = 1000
claims_per_s = "unlimited"
```

Positive integers for `runs_in_flight_max`, `claim_burst` and
`create_burst`, positive numbers for the rates, each at most
`limits.owner_limit_max`. The limits are soft state on the leader, not
replicated (engine/dispatch.py, net/api.py).
"""

import math
import re
import tomllib
from dataclasses import dataclass, field, fields, replace

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
class OwnerLimits:
    """One owner's limits; None is no limit of that kind. A burst is the
    bucket's size, set whenever its rate is."""

    runs_in_flight_max: int | None = None
    claims_per_s: float | None = None
    claim_burst: int | None = None
    creates_per_s: float | None = None
    create_burst: int | None = None

    def __post_init__(self) -> None:
        assert (self.claims_per_s is None) == (self.claim_burst is None)
        assert (self.creates_per_s is None) == (self.create_burst is None)


UNLIMITED = OwnerLimits()


@dataclass(frozen=True)
class Config:
    tokens: tuple[Token, ...] = field(default_factory=tuple)
    peer_token: str | None = None
    retention_days: int = limits.retention_days_default
    # `[limits]` for every owner, and `[[owners]]` with their overrides applied.
    limits: OwnerLimits = UNLIMITED
    owners: dict[str, OwnerLimits] = field(default_factory=dict)

    def limits_of(self, owner: str) -> OwnerLimits:
        return self.owners.get(owner, self.limits)


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


_LIMIT_KEYS = ("runs_in_flight_max", "claims_per_s", "claim_burst", "creates_per_s", "create_burst")
_MAY_BE_UNLIMITED = ("runs_in_flight_max", "claims_per_s", "creates_per_s")
_INTEGERS = ("runs_in_flight_max", "claim_burst", "create_burst")


def _limit_value(where: str, key: str, value: object, *, override: bool) -> float | int | str:
    if override and key in _MAY_BE_UNLIMITED and value == "unlimited":
        return value
    top = limits.owner_limit_max
    if key in _INTEGERS:
        # TOML booleans are not integers here, though Python thinks so.
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            also = ' or "unlimited"' if override and key in _MAY_BE_UNLIMITED else ""
            raise ConfigError(f"{where}.{key}: an integer from 1 to {top}{also}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value <= top):
        also = ' or "unlimited"' if override else ""
        raise ConfigError(f"{where}.{key}: a number above 0 and at most {top}{also}")
    return float(value)


def _limits(where: str, raw: object, base: OwnerLimits, *, override: bool) -> OwnerLimits:
    """`raw`'s keys over `base`; a rate given without its burst gets a burst
    of one second's worth (at least 1)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a table")
    allowed = {"name", *_LIMIT_KEYS} if override else set(_LIMIT_KEYS)
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    given = {k: _limit_value(where, k, raw[k], override=override) for k in _LIMIT_KEYS if k in raw}
    merged = {f.name: getattr(base, f.name) for f in fields(OwnerLimits)}
    for rate, burst in (("claims_per_s", "claim_burst"), ("creates_per_s", "create_burst")):
        if burst in given and rate not in given and merged[rate] is None:
            raise ConfigError(f"{where}.{burst}: goes with {rate}")
        if given.get(rate) == "unlimited":
            if burst in given:
                raise ConfigError(f"{where}.{burst}: {rate} is unlimited")
            given[rate] = given[burst] = None
        elif rate in given and burst not in given:
            given[burst] = max(1, math.ceil(given[rate]))  # type: ignore[arg-type]
    if given.get("runs_in_flight_max") == "unlimited":
        given["runs_in_flight_max"] = None
    return replace(base, **given)


def _owners(raw_owners: object, defaults: OwnerLimits) -> dict[str, OwnerLimits]:
    if not isinstance(raw_owners, list):
        raise ConfigError("owners: an array of tables ([[owners]])")
    if len(raw_owners) > limits.config_owners_max:
        raise ConfigError(f"owners: at most {limits.config_owners_max}")
    owners: dict[str, OwnerLimits] = {}
    for i, raw in enumerate(raw_owners):
        where = f"owners[{i}]"
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str) or not 0 < len(name) <= 200 or "\x00" in name:
            raise ConfigError(f"{where}.name: 1-200 characters")
        if name in owners:
            raise ConfigError(f"{where}.name: {name!r} is listed twice")
        owners[name] = _limits(where, raw, defaults, override=True)
    return owners


def parse(text: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not TOML: {exc}") from None
    unknown = set(data) - {"tokens", "peer_token", "retention_days", "limits", "owners"}
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
    defaults = _limits("limits", data.get("limits", {}), UNLIMITED, override=False)
    owners = _owners(data.get("owners", []), defaults)
    return Config(tokens, peer_token, retention_days, defaults, owners)


def load(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            return parse(f.read())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
