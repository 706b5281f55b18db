"""The server's TOML config file (`tempo serve --config FILE`).

```toml
# Top-level keys come before the first [table] or [[array]] (TOML).
# A cluster with tokens: the secret its nodes present to each other (the
# same on every node; at least 32 characters).
peer_token = "..."

# Days finished runs and events are kept (1-366, default 30): history is
# dropped by whole days once every run in a day finished longer ago than
# this. In a cluster, give every node the same value (the leader's applies).
retention_days = 30

[[tokens]]
sha256 = "hex SHA-256 of the token"
owner = "acme"
role = "worker"          # client | worker | admin
queues = ["reports"]     # worker tokens only: the queues it may claim from

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

# TLS for the API and the traffic between nodes (docs/operations.md "TLS").
# Paths are PEM files; a relative path is relative to this file's directory.
[tls]
cert_file = "node.crt"   # this node's certificate (its chain may follow it)
key_file = "node.key"    # its private key, unencrypted
ca_file = "ca.crt"       # optional: the CA that signed the other nodes'
                         # certificates (default: the system trust store)

# Limits at the edge (docs/operations.md "Limits"); each key is optional and
# defaults to the bound of the same name in tempo/limits.py.
[http]
connections_max = 4096          # connections open at once; more: the oldest
                                # idle one is closed, else 503
requests_in_flight_max = 2048   # requests handled at once; more: 503 overloaded
long_polls_max = 1024           # of those, claims/events with wait_s > 0
body_read_timeout_s = 30.0      # a body must arrive whole this fast; else 408
body_bytes_in_flight_max = 268435456  # bytes of request bodies held at once
                                # (at least 33554432); more: 503 overloaded
connections_per_address_max = 1024  # connections from one client address
                                # (default: a quarter of connections_max)

# Notifications (docs/operations.md "Notifications"): signed POSTs to a URL
# when a run fails for good, a job completes or a job recovers. Without
# this table no notification is sent, and a job with `notify` is refused.
[notify]
secret = "change-me-to-32-or-more-random-characters"  # the HMAC-SHA256 key
                         # of the Tempo-Signature header (32 characters at least)
# ca_file = "hooks-ca.crt"  # optional: the CA that signed the endpoints'
                         # certificates (default: the system trust store)

# An owner's default, for its jobs that have no `notify` of their own.
[[notify.owners]]
name = "acme"
url = "https://hooks.example.com/tempo"
events = ["run.failed", "job.recovered"]  # default: all three

# The target policy (docs/operations.md "Target policy"): with tokens, the
# HTTP executor and notifications reach globally routable addresses only;
# these networks and host names are opened as well.
[executor]
allow = ["10.0.0.0/8", "hooks.internal.example"]

# The data directory (docs/operations.md "Disk full").
[storage]
map_bytes = 68719476736  # the LMDB map: the most data.mdb may hold. Left out,
                         # it is the data file plus the disk's free space at
                         # start, and grows when it fills while the disk has
                         # room; given, it is fixed.

# The web console at /ui (docs/ui.md); on by default.
[ui]
enabled = false
```

Positive integers for `runs_in_flight_max`, `claim_burst` and
`create_burst`, positive numbers for the rates, each at most
`limits.owner_limit_max`. The limits are soft state on the leader, not
replicated (engine/dispatch.py, net/jobs_api.py).

With `[tls]` the node serves https:// only, and its `--peers` URLs must be
https://. The files are checked when the config is read: readable, a
certificate, a key that belongs to it, a CA file holding certificates.
"""

import math
import os
import re
import ssl
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from tempo import limits, targets

_HEX64 = re.compile(r"[0-9a-f]{64}")
_QUEUE = re.compile(rf"[A-Za-z0-9._-]{{1,{limits.queue_name_chars_max}}}")  # ASCII: as many bytes
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
class Tls:
    """Absolute paths of the PEM files of `[tls]`."""

    cert_file: str
    key_file: str
    ca_file: str | None = None


@dataclass(frozen=True)
class HttpLimits:
    """The `[http]` table: the edge limits an operator may tune."""

    connections_max: int = limits.connections_max
    requests_in_flight_max: int = limits.requests_in_flight_max
    long_polls_max: int = limits.long_polls_max
    body_read_timeout_s: float = limits.body_read_timeout_s
    body_bytes_in_flight_max: int = limits.body_bytes_in_flight_max
    connections_per_address_max: int = limits.connections_per_address_max


@dataclass(frozen=True)
class Storage:
    """The `[storage]` table."""

    map_bytes: int | None = None  # None: sized to the disk, and grows


@dataclass(frozen=True)
class ExecutorConfig:
    """The `[executor]` table: the networks and host names that tempo's HTTP
    requests (targets and notifications) may reach although the target
    policy would refuse them (docs/operations.md "Target policy")."""

    allow_networks: tuple[targets.Network, ...] = ()
    allow_hosts: frozenset[str] = frozenset()


NOTIFY_EVENTS = ("run.failed", "job.completed", "job.recovered")


@dataclass(frozen=True)
class NotifyTarget:
    url: str
    events: tuple[str, ...]


@dataclass(frozen=True)
class NotifyConfig:
    """The `[notify]` table: the signing secret, the CA to verify the
    endpoints by (None: the system's), and owners' default targets."""

    secret: str
    ca_file: str | None = None
    owners: dict[str, NotifyTarget] = field(default_factory=dict)


@dataclass(frozen=True)
class UiConfig:
    """`[ui]`: the web console at /ui (docs/ui.md), on unless `enabled = false`."""

    enabled: bool = True


@dataclass(frozen=True)
class Config:
    tokens: tuple[Token, ...] = field(default_factory=tuple)
    peer_token: str | None = None
    retention_days: int = limits.retention_days_default
    # `[limits]` for every owner, and `[[owners]]` with their overrides applied.
    limits: OwnerLimits = UNLIMITED
    owners: dict[str, OwnerLimits] = field(default_factory=dict)
    tls: Tls | None = None
    http: HttpLimits = field(default_factory=HttpLimits)
    storage: Storage = field(default_factory=Storage)
    notify: NotifyConfig | None = None
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    ui: UiConfig = field(default_factory=UiConfig)

    def limits_of(self, owner: str) -> OwnerLimits:
        return self.owners.get(owner, self.limits)

    def target_policy(self, peer_hosts: frozenset[str] = frozenset()) -> targets.TargetPolicy:
        """The target policy of this config: with tokens, clients are
        tenants, and loopback and the cluster's own nodes (`peer_hosts`)
        are refused too; without, the node listens on loopback only, its
        clients are local users, and a local try-out may target loopback."""
        return targets.TargetPolicy(
            loopback_allowed=not self.tokens, allow_networks=self.executor.allow_networks,
            allow_hosts=self.executor.allow_hosts, peer_hosts=peer_hosts if self.tokens else frozenset(),
        )


_OWNER_RULE = (
    f"1-{limits.owner_chars_max} characters and at most {limits.owner_bytes_max} bytes in UTF-8, "
    "without NUL (an owner name is part of the store's keys)"
)


def _owner_name_ok(name: object) -> TypeGuard[str]:
    """An owner name fits the store's keys (limits.py "Storage bounds")."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= limits.owner_chars_max
        and len(name.encode()) <= limits.owner_bytes_max
        and "\x00" not in name
    )


def _table(where: str, raw: object, keys: set[str], *, shape: str = "a table") -> dict[Any, Any]:
    """`raw` if it is a TOML table of no keys but `keys`; else ConfigError
    naming `where`. Its values are still unchecked (hence Any): each caller
    checks the ones it reads."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {shape}")
    unknown = set(raw) - keys
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    return raw


def _token(i: int, raw: object) -> Token:
    where = f"tokens[{i}]"
    raw = _table(where, raw, {"sha256", "owner", "role", "queues"})
    digest, owner, role = raw.get("sha256"), raw.get("owner"), raw.get("role")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest.lower()):
        raise ConfigError(f"{where}.sha256: 64 hex digits")
    if not _owner_name_ok(owner):
        raise ConfigError(f"{where}.owner: {_OWNER_RULE}")
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
    raw = _table(where, raw, {"name", *_LIMIT_KEYS} if override else set(_LIMIT_KEYS))
    given: dict[str, float | int | str | None] = {
        k: _limit_value(where, k, raw[k], override=override) for k in _LIMIT_KEYS if k in raw
    }
    merged = {f.name: getattr(base, f.name) for f in fields(OwnerLimits)}
    for rate, burst in (("claims_per_s", "claim_burst"), ("creates_per_s", "create_burst")):
        if burst in given and rate not in given and merged[rate] is None:
            raise ConfigError(f"{where}.{burst}: goes with {rate}")
        rate_per_s = given.get(rate)
        if rate_per_s == "unlimited":
            if burst in given:
                raise ConfigError(f"{where}.{burst}: {rate} is unlimited")
            given[rate] = given[burst] = None
        elif isinstance(rate_per_s, float) and burst not in given:
            given[burst] = max(1, math.ceil(rate_per_s))
    if given.get("runs_in_flight_max") == "unlimited":
        given["runs_in_flight_max"] = None
    merged.update(given)
    return OwnerLimits(
        runs_in_flight_max=_count_or_none(merged["runs_in_flight_max"]),
        claims_per_s=_rate_or_none(merged["claims_per_s"]),
        claim_burst=_count_or_none(merged["claim_burst"]),
        creates_per_s=_rate_or_none(merged["creates_per_s"]),
        create_burst=_count_or_none(merged["create_burst"]),
    )


def _count_or_none(value: object) -> int | None:
    # _limit_value checked the type; "unlimited" is None by now.
    assert value is None or (isinstance(value, int) and not isinstance(value, bool))
    return value


def _rate_or_none(value: object) -> float | None:
    # _limit_value made every rate a float; "unlimited" is None by now.
    assert value is None or isinstance(value, float)
    return value


def _owner_tables(raw_owners: object, where: str) -> list[object]:
    """A config's list of owners' tables (`[[owners]]`, `[[notify.owners]]`),
    within `limits.config_owners_max`."""
    if not isinstance(raw_owners, list):
        raise ConfigError(f"{where}: an array of tables ([[{where}]])")
    if len(raw_owners) > limits.config_owners_max:
        raise ConfigError(f"{where}: at most {limits.config_owners_max}")
    return raw_owners


def _owners(raw_owners: object, defaults: OwnerLimits) -> dict[str, OwnerLimits]:
    owners: dict[str, OwnerLimits] = {}
    for i, raw in enumerate(_owner_tables(raw_owners, "owners")):
        where = f"owners[{i}]"
        name = raw.get("name") if isinstance(raw, dict) else None
        if not _owner_name_ok(name):
            raise ConfigError(f"{where}.name: {_OWNER_RULE}")
        if name in owners:
            raise ConfigError(f"{where}.name: {name!r} is listed twice")
        owners[name] = _limits(where, raw, defaults, override=True)
    return owners


def _tls_path(key: str, raw: dict[str, object], base_dir: str) -> str | None:
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
    raw = _table("tls", raw, {"cert_file", "key_file", "ca_file"}, shape="a table ([tls])")
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
    unknown = set(data) - {"tokens", "peer_token", "retention_days", "limits", "owners", "tls", "http", "storage",
                          "notify", "executor", "ui"}
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
    tls = _tls(data["tls"], os.path.abspath(base_dir)) if "tls" in data else None
    return Config(
        tokens, peer_token, retention_days, defaults, owners, tls, _http(data.get("http", {})),
        storage=_storage(data.get("storage", {})),
        notify=_notify(data["notify"], os.path.abspath(base_dir)) if "notify" in data else None,
        executor=_executor(data.get("executor", {})),
        ui=_ui(data.get("ui", {})),
    )


def _ui(raw: object) -> UiConfig:
    raw = _table("ui", raw, {"enabled"}, shape="a table ([ui])")
    enabled = raw.get("enabled", True)
    if type(enabled) is not bool:
        raise ConfigError("ui.enabled: true or false")
    return UiConfig(enabled)


def _executor(raw: object) -> ExecutorConfig:
    raw = _table("executor", raw, {"allow"}, shape="a table ([executor])")
    entries = raw.get("allow", [])
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ConfigError("executor.allow: a list of networks (10.0.0.0/8) and host names (hooks.internal.example)")
    if len(entries) > limits.executor_allow_entries_max:
        raise ConfigError(f"executor.allow: at most {limits.executor_allow_entries_max} entries")
    networks: list[targets.Network] = []
    hosts: set[str] = set()
    for i, entry in enumerate(entries):
        try:
            parsed = targets.parse_allow(entry)
        except targets.PolicyError as exc:
            raise ConfigError(f"executor.allow[{i}]: {exc}") from None
        if isinstance(parsed, str):
            hosts.add(parsed)
        else:
            networks.append(parsed)
    return ExecutorConfig(tuple(networks), frozenset(hosts))


def notify_url_ok(url: object) -> bool:
    """An http(s) URL of printable ASCII without spaces, within its bound,
    with a host and a valid port (the executor's rule for targets): a URL
    such as `http:///nohost` could never be delivered."""
    if not (
        isinstance(url, str) and url.startswith(("http://", "https://"))
        and len(url) <= limits.notify_url_chars_max and url.isascii() and url.isprintable() and " " not in url
    ):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return False
    return bool(parts.hostname)


def _notify(raw: object, base_dir: str) -> NotifyConfig:
    raw = _table("notify", raw, {"secret", "ca_file", "owners"}, shape="a table ([notify])")
    secret = raw.get("secret")
    if not isinstance(secret, str) or len(secret) < limits.notify_secret_chars_min:
        raise ConfigError(f"notify.secret: a string of at least {limits.notify_secret_chars_min} characters")
    owners: dict[str, NotifyTarget] = {}
    for i, item in enumerate(_owner_tables(raw.get("owners", []), "notify.owners")):
        name, target = _notify_owner(f"notify.owners[{i}]", item)
        if name in owners:
            raise ConfigError(f"notify.owners[{i}].name: {name!r} is listed twice")
        owners[name] = target
    return NotifyConfig(secret, _notify_ca_file(raw, base_dir), owners)


def _notify_ca_file(raw: dict[str, object], base_dir: str) -> str | None:
    if "ca_file" not in raw:
        return None
    value = raw["ca_file"]
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError("notify.ca_file: a path to a PEM file")
    ca_file = os.path.join(base_dir, os.path.expanduser(value))
    try:
        ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"notify.ca_file: no PEM certificate readable in {ca_file} ({exc})") from None
    return ca_file


def _notify_owner(where: str, item: object) -> tuple[str, NotifyTarget]:
    item = _table(where, item, {"name", "url", "events"})
    name, url = item.get("name"), item.get("url")
    if not isinstance(name, str) or not _owner_name_ok(name):
        raise ConfigError(f"{where}.name: {_OWNER_RULE}")
    if not isinstance(url, str) or not notify_url_ok(url):
        raise ConfigError(f"{where}.url: an http:// or https:// URL of printable ASCII with a host, "
                          f"at most {limits.notify_url_chars_max} characters")
    events = item.get("events", list(NOTIFY_EVENTS))
    if not isinstance(events, list) or not events or not all(e in NOTIFY_EVENTS for e in events):
        raise ConfigError(f"{where}.events: a non-empty list of {', '.join(NOTIFY_EVENTS)}")
    return name, NotifyTarget(url, tuple(dict.fromkeys(events)))


def _storage(raw: object) -> Storage:
    raw = _table("storage", raw, {"map_bytes"})
    map_bytes = raw.get("map_bytes")
    low, high = limits.lmdb_map_bytes_min, limits.lmdb_map_bytes_max
    if map_bytes is not None and (type(map_bytes) is not int or not low <= map_bytes <= high):
        raise ConfigError(f"storage.map_bytes: a whole number of bytes from {low} to {high}")
    return Storage(map_bytes)


def _http(raw: object) -> HttpLimits:
    raw = _table("http", raw, set(HttpLimits.__dataclass_fields__))
    for name in ("connections_max", "requests_in_flight_max", "long_polls_max", "connections_per_address_max"):
        value = raw.get(name, 1)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limits.http_setting_max:
            raise ConfigError(f"http.{name}: an integer from 1 to {limits.http_setting_max}")
    timeout_s = raw.get("body_read_timeout_s", limits.body_read_timeout_s)
    low_s, high_s = limits.body_read_timeout_s_min, limits.body_read_timeout_s_max
    if not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool) or not low_s <= timeout_s <= high_s:
        raise ConfigError(f"http.body_read_timeout_s: a number of seconds from {low_s:g} to {high_s:g}")
    budget = raw.get("body_bytes_in_flight_max", limits.body_bytes_in_flight_max)
    low, high = limits.body_bytes_in_flight_setting_min, limits.body_bytes_in_flight_setting_max
    if not isinstance(budget, int) or isinstance(budget, bool) or not low <= budget <= high:
        raise ConfigError(f"http.body_bytes_in_flight_max: an integer number of bytes from {low} to {high}")
    per_address = raw.get(
        "connections_per_address_max",
        max(1, raw.get("connections_max", limits.connections_max) // limits.connections_per_address_share),
    )
    http = HttpLimits(**{**raw, "body_read_timeout_s": float(timeout_s), "connections_per_address_max": per_address})
    if not http.long_polls_max <= http.requests_in_flight_max <= http.connections_max:
        raise ConfigError("http: needs long_polls_max <= requests_in_flight_max <= connections_max")
    if http.connections_per_address_max > http.connections_max:
        raise ConfigError("http: needs connections_per_address_max <= connections_max")
    return http


def load(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    return parse(text, base_dir=os.path.dirname(os.path.abspath(path)))
