"""The composition root: one node, its services, and the root nursery."""

import gc
import ipaddress
import logging
import os
import re
import resource
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

import hypercorn.config
import hypercorn.trio
import trio

from tempo import clock, errors, limits
from tempo.config import Config, ConfigError, Tls
from tempo.config import load as load_config
from tempo.engine import (
    Changes,
    CommandLog,
    Committer,
    Corrupt,
    DataDirError,
    Dispatcher,
    Identity,
    Jobs,
    RaftLog,
    Retention,
    Store,
    hold_data_dir,
    member_identity,
    single_identity,
)
from tempo.logs import JsonFormatter, NodeFilter, TextFormatter
from tempo.metrics import Pauses
from tempo.net import http as http_server
from tempo.net.api import Api
from tempo.net.auth import Authenticator
from tempo.net.executor import HttpExecutor
from tempo.net.notify import Notifier
from tempo.net.peer import PeerTransport, local_address_of
from tempo.net.tls import client_context
from tempo.node import ClusterMember, Member, Standalone, raft_id_of
from tempo.node.membership import Membership
from tempo.node.replica import Phase, Replica
from tempo.raft import Message
from tempo.targets import TargetPolicy
from tempo.ui import Console
from tempo.ui.security import derive_key

_NODE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
log = logging.getLogger("tempo.server")


@dataclass(frozen=True)
class ClusterOptions:
    me: Member
    members: tuple[Member, ...]


@dataclass(frozen=True)
class ServeOptions:
    data_dir: str = "tempo-data"
    host: str = "127.0.0.1"
    port: int = 8700
    insecure: bool = False
    log_format: str = "text"  # text | json (docs/operations.md "Logs")
    config_path: str | None = None
    cluster: ClusterOptions | None = None
    join: bool = False
    snapshot_entries: int = limits.snapshot_entries
    # Tests only (docs/operations.md "Retention"): days added to the clock
    # the retention service reads, so a test can age history.
    retention_skew_days: int = 0


def peer_hosts(options: ServeOptions) -> frozenset[str]:
    """The hosts of this node's `--listen` and of every `--peers` URL, as
    the target policy compares them (tempo/targets.py): an address in its
    canonical form, a name in lower case."""
    hosts = [options.host]
    if options.cluster is not None:
        hosts += [urlsplit(m.url).hostname or "" for m in options.cluster.members]
    found = set()
    for host in filter(None, hosts):
        try:
            found.add(str(ipaddress.ip_address(host)))
        except ValueError:
            found.add(host.lower().rstrip("."))
    return frozenset(found)


class ServeError(Exception):
    """A reason `tempo serve` cannot start, for the operator."""


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ServeError(f"--listen wants HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_cluster(node: str | None, peers: str | None) -> ClusterOptions | None:
    """`--node ID --peers ID=URL,...`, or None for a node alone."""
    if node is None and peers is None:
        return None
    if not node or not peers:
        raise ServeError("a cluster node needs both --node and --peers")
    members: list[Member] = []
    for item in peers.split(","):
        node_id, sep, url = item.strip().partition("=")
        if not sep or not _NODE_ID.fullmatch(node_id):
            raise ServeError(f"--peers wants ID=URL,... with IDs of letters, digits, - and _; got {item!r}")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None or parts.path not in ("", "/"):
            raise ServeError(f"--peers: {node_id}'s URL must be http(s)://HOST:PORT, got {url!r}")
        members.append(Member(node_id, url.rstrip("/"), raft_id_of(node_id)))
    if len({m.id for m in members}) != len(members):
        raise ServeError("--peers names a node twice")
    if len({m.raft_id for m in members}) != len(members):
        raise ServeError("--peers: two node IDs collide; rename one")
    me = next((m for m in members if m.id == node), None)
    if me is None:
        raise ServeError(f"--node {node} is not in --peers")
    return ClusterOptions(me, tuple(members))


def default_listen(cluster: ClusterOptions | None) -> str:
    """Without --listen: a cluster node listens on its own entry's address."""
    if cluster is None:
        return "127.0.0.1:8700"
    parts = urlsplit(cluster.me.url)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{host}:{parts.port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_options(options: ServeOptions, config: Config) -> None:
    if not config.tokens and not options.insecure and not is_loopback(options.host):
        raise ServeError(
            f"refusing to listen on {options.host} with no tokens configured: "
            "anyone who reaches it could do anything; use --insecure to do so anyway"
        )


def check_tls(options: ServeOptions, config: Config) -> None:
    """A cluster's nodes all speak https (with `[tls]`) or all plain http."""
    if options.cluster is None:
        return
    schemes = {urlsplit(m.url).scheme for m in options.cluster.members}
    if len(schemes) > 1:
        raise ServeError("--peers mixes http:// and https:// URLs; a cluster's nodes all use one or the other")
    if config.tls is None and schemes == {"https"}:
        raise ServeError("--peers are https:// URLs but this node has no [tls] in --config (cert_file, key_file)")
    if config.tls is not None and schemes == {"http"}:
        raise ServeError("--config has [tls], so this node serves https only; give --peers as https:// URLs")


def _hypercorn_config(options: ServeOptions, tls: Tls | None = None) -> hypercorn.config.Config:
    config = hypercorn.config.Config()
    host = f"[{options.host}]" if ":" in options.host else options.host
    config.bind = [f"{host}:{options.port}"]
    if tls is not None:
        config.certfile, config.keyfile = tls.cert_file, tls.key_file
        config.ssl_handshake_timeout = limits.tls_handshake_timeout_s
        # HTTP/1.1 only, as over plain http: tempo's clients and peers speak
        # it, and the server's limits and its guard (net/http.py) are h11's.
        config.alpn_protocols = ["http/1.1"]
    config.accesslog = None
    config.errorlog = None  # tempo prints its own one line when ready
    config.graceful_timeout = limits.shutdown_grace_s
    # limits.py "The edge": what hypercorn bounds itself.
    config.keep_alive_timeout = limits.keep_alive_timeout_s
    config.read_timeout = limits.read_timeout_s  # type: ignore[assignment]  # hypercorn annotates int; it takes any seconds
    config.h11_max_incomplete_size = limits.header_bytes_max
    config.backlog = limits.listen_backlog
    return config


def _connections_max(wanted: int) -> int:
    """`wanted`, unless the open-file limit is too low for it even once
    raised to its hard limit: then as many as that leaves room for."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + limits.fds_reserved
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        allowed = max(1, soft - limits.fds_reserved)
        log.warning("open-file limit %d: at most %d connections instead of %d", soft, allowed, wanted)
        return allowed
    return wanted


async def serve(options: ServeOptions, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Runs one node until SIGTERM or SIGINT; in-flight writes finish first."""
    try:
        config = load_config(options.config_path) if options.config_path else Config()
    except ConfigError as exc:
        raise ServeError(f"--config: {exc}") from None
    check_options(options, config)
    check_tls(options, config)
    if options.cluster is not None and config.tokens and config.peer_token is None:
        raise ServeError("--config: a cluster with tokens needs a peer_token for its nodes")
    try:
        http_server.check_bindable(options.host, options.port)
    except OSError as exc:
        raise ServeError(f"--listen {options.host}:{options.port}: cannot listen there: {exc.strerror or exc}") from None
    http_server.GATE.connections_max = _connections_max(config.http.connections_max)
    http_server.GATE.per_address_max = min(config.http.connections_per_address_max, http_server.GATE.connections_max)
    # The directory is taken before the store opens it (opening may write:
    # an identity record, an adopted directory); one that does not exist
    # yet is taken once the store has made it.
    held_fd = _hold(options.data_dir) if os.path.isdir(options.data_dir) else None  # noqa: ASYNC240 - at start-up, no task runs yet
    try:
        store = open_store(options, config)
    except BaseException:
        if held_fd is not None:
            os.close(held_fd)
        raise
    try:
        if held_fd is None:
            held_fd = _hold(options.data_dir)
    except BaseException:
        store.close()
        raise
    try:
        # The node's one clock (clock.py): every stamp and due time comes
        # from it, starting from the last stamp this store applied.
        node_clock = clock.Clock(floor_ms=store.stamp_ms())
        if options.cluster is None:
            await _serve_alone(options, config, store, node_clock, task_status)
        else:
            await _serve_member(options, config, store, node_clock, task_status)
    finally:
        store.close()
        os.close(held_fd)


def _hold(path: str) -> int:
    """`hold_data_dir`, its refusal a ServeError (exit status 2)."""
    try:
        return hold_data_dir(path)
    except DataDirError as exc:
        raise ServeError(str(exc)) from None


def identity_of(options: ServeOptions) -> Identity:
    """What this start says the data directory is (docs/operations.md
    "Data directory"): a founder's cluster ID is a fingerprint of --peers."""
    cluster = options.cluster
    if cluster is None:
        return single_identity()
    founders = None if options.join else [(m.id, m.url) for m in cluster.members]
    return member_identity(cluster.me.id, founders)


def open_store(options: ServeOptions, config: Config) -> Store:
    """The store, once its directory passed the checks (engine/datadir.py);
    any damage or mismatch is a ServeError: exit status 2."""
    try:
        store = Store(options.data_dir, identity=identity_of(options), map_bytes=config.storage.map_bytes)
    except DataDirError as exc:
        raise ServeError(str(exc)) from None
    if store.adopted:
        assert store.identity is not None  # an adopted directory is given this node's identity
        log.info("%s: written by an earlier version; recorded as %s", options.data_dir, store.identity.describe())
    return store


def _observe_stamps(node_clock: clock.Clock) -> Callable[[Changes], None]:
    """A listener of applied entries: the clock never answers below a stamp
    applied here, so this node continues from it when it leads."""

    def observe(changes: Changes) -> None:
        node_clock.observe(changes.stamp_ms)

    return observe


def _app(api: Api, config: Config) -> Api | Console:
    """The API, with the web console at /ui in front of it unless the
    config turns it off (docs/ui.md)."""
    if not config.ui.enabled:
        return api
    key = derive_key([t.sha256 for t in config.tokens], config.peer_token)
    return Console(api, auth_enabled=bool(config.tokens), key=key, tls=config.tls is not None)


async def _serve_alone(
    options: ServeOptions, config: Config, store: Store, node_clock: clock.Clock, task_status: trio.TaskStatus[str]
) -> None:
    committer = Committer(store)
    committer.listeners.append(_observe_stamps(node_clock))
    jobs = Jobs(store, committer, now_ms=node_clock.now_ms)
    policy = jobs.target_policy = config.target_policy(peer_hosts(options))
    dispatcher = Dispatcher(store, committer, limits_of=config.limits_of, now_ms=node_clock.now_ms)
    committer.claims_first(dispatcher.claim_backlog_until)
    retention = _retention(options, config, store, committer, node_clock)
    node = Standalone(store.applied_index)
    api = Api(
        store, jobs, dispatcher, node=node, auth=Authenticator(config.tokens), limits_of=config.limits_of,
        http_limits=config.http, clock=node_clock,
    )
    notifier = _notifier(config, store, committer, dispatcher, node_clock, jobs, api)
    stop = trio.Event()
    stopping = _Stopping()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_signals, signals, stop, stopping, api)
            await nursery.start(_probe_lag, api.pauses, stop)
            await nursery.start(committer.run)
            async with trio.open_nursery() as services:
                await _start_leader_services(services, dispatcher, retention, notifier, policy)
                async with trio.open_nursery() as http:
                    binds = await http.start(
                        partial(hypercorn.trio.serve, _app(api, config), _hypercorn_config(options, config.tls), shutdown_trigger=stop.wait)
                    )
                    node.url = binds[0]
                    api.started = True
                    print(f"tempo serving on {binds[0]}", flush=True)
                    task_status.started(binds[0])
                # hypercorn has returned: no request is in flight any more.
                # The dispatcher holds soft state only; stop it, then let
                # the committer write what is pending and return.
                services.cancel_scope.cancel()
            committer.close()
    stopping.done()


async def _serve_member(
    options: ServeOptions, config: Config, store: Store, node_clock: clock.Clock, task_status: trio.TaskStatus[str]
) -> None:
    cluster = options.cluster
    assert cluster is not None
    # A founder's first start founds the cluster with every --peers entry as
    # a voter; a node started with --join starts empty and waits to be added.
    founders = () if options.join else tuple(m.raft_id for m in cluster.members)
    try:
        raft_log = RaftLog(store, voters=founders)
    except (ValueError, DataDirError) as exc:
        raise ServeError(str(exc)) from None
    except Corrupt as exc:
        raise ServeError(
            f"{options.data_dir}: {exc}; restore the data directory from a backup, or replace this member "
            "with an empty one (docs/operations.md \"Corrupt data\")"
        ) from None
    # With [tls] the peers are https:// URLs (check_tls), verified against ca_file.
    verify = client_context(config.tls.ca_file) if config.tls is not None else None
    transport = PeerTransport({}, local_address=local_address_of(options.host), token=config.peer_token, verify=verify)
    names = {m.raft_id: m.id for m in cluster.members}
    replica = Replica(
        store, raft_log, cluster.me.raft_id, transport.send, snapshot_entries=options.snapshot_entries,
        name_of=lambda raft_id: names.get(raft_id, str(raft_id)),
    )
    replica.listeners.append(_observe_stamps(node_clock))
    jobs = Jobs(store, replica, now_ms=node_clock.now_ms)
    jobs.target_policy = config.target_policy(peer_hosts(options))
    dispatcher = Dispatcher(store, replica, limits_of=config.limits_of, now_ms=node_clock.now_ms)
    node = ClusterMember(replica, cluster.me, list(cluster.members))
    node.refresh(store.members())
    transport.peers_at_start = node.peer_urls()

    def on_changes(changes: Changes) -> None:
        if changes.members:
            node.refresh(store.members())
            transport.set_peers(node.peer_urls())

    replica.listeners.append(on_changes)

    def on_peer_messages(messages: list[Message]) -> None:
        for message in messages:
            replica.step(message)

    api = Api(
        store, jobs, dispatcher, node=node, auth=Authenticator(config.tokens),
        on_peer_messages=on_peer_messages, peer_token=config.peer_token, membership=Membership(node),
        limits_of=config.limits_of,
        http_limits=config.http,
        clock=node_clock,
    )
    notifier = _notifier(config, store, replica, dispatcher, node_clock, jobs, api)
    stop = trio.Event()
    stopping = _Stopping()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(_probe_lag, api.pauses, stop)
            await nursery.start(transport.run)
            await nursery.start(replica.run)
            await nursery.start(
                partial(_lead, notifier=notifier, policy=jobs.target_policy), replica, dispatcher,
                _retention(options, config, store, replica, node_clock),
            )
            nursery.start_soon(_watch_signals, signals, stop, stopping, api, replica)
            async with trio.open_nursery() as http:
                binds = await http.start(
                    partial(hypercorn.trio.serve, _app(api, config), _hypercorn_config(options, config.tls), shutdown_trigger=stop.wait)
                )
                api.started = True
                # A node started with --join is no member until the cluster adds it.
                role = "waiting to be added" if options.join else f"of {len(cluster.members)}"
                print(f"tempo serving on {binds[0]} as {cluster.me.id} {role}", flush=True)
                task_status.started(binds[0])
            # Nothing is in flight any more; what this node wrote is durable,
            # and the others go on without it.
            nursery.cancel_scope.cancel()
    stopping.done()


def _retention(
    options: ServeOptions, config: Config, store: Store, committer: CommandLog, node_clock: clock.Clock
) -> Retention:
    return Retention(
        store, committer, retention_days=config.retention_days, now_ms=node_clock.now_ms,
        skew_ms=options.retention_skew_days * limits.day_ms,
    )


def _notifier(
    config: Config, store: Store, committer: CommandLog, dispatcher: Dispatcher, node_clock: clock.Clock,
    jobs: Jobs, api: Api,
) -> Notifier | None:
    """The notifier, when the config has a `[notify]` table (net/notify.py)."""
    if config.notify is None:
        return None
    jobs.notify_enabled = True
    notifier = Notifier(
        store, committer, config.notify, now_ms=node_clock.now_ms, events_changed=lambda: dispatcher.events_changed,
        policy=jobs.target_policy,
    )
    api.notify_counts = notifier.counts
    return notifier


async def _start_leader_services(
    services: trio.Nursery, dispatcher: Dispatcher, retention: Retention, notifier: Notifier | None,
    policy: TargetPolicy | None,
) -> None:
    """Starts in `services` what only the leader (or a single node) runs:
    the dispatcher, the HTTP executor, retention and the notifier."""
    await services.start(dispatcher.run)
    await services.start(HttpExecutor(dispatcher, policy=policy).run)
    await services.start(retention.run)
    if notifier is not None:
        await services.start(notifier.run)


async def _lead(
    replica: Replica,
    dispatcher: Dispatcher,
    retention: Retention,
    *,
    notifier: Notifier | None = None,
    policy: TargetPolicy | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Runs the dispatcher, the HTTP executor, retention and the notifier
    while this node leads (with an entry of its term applied), and stops them the moment it
    does not."""
    changed = trio.Event()

    def poke() -> None:
        changed.set()

    replica.on_phase.append(poke)
    task_status.started()
    while True:
        while replica.phase is not Phase.LEADING:
            await changed.wait()
            changed = trio.Event()
        try:
            async with trio.open_nursery() as services:
                await _start_leader_services(services, dispatcher, retention, notifier, policy)
                while replica.phase is Phase.LEADING:
                    await changed.wait()
                    changed = trio.Event()
                services.cancel_scope.cancel()
        except* errors.NotLeader:
            pass  # a write failed as leadership went: the loop looks again
        dispatcher.reset()


async def _probe_lag(
    pauses: Pauses, stop: trio.Event, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Sleeps `limits.event_loop_probe_s` at a time and records how late it
    wakes: how long something held the trio thread (docs/operations.md
    "Event-loop lag"). Garbage collections are timed beside it. It ends once
    `stop` is set, so the nursery that owns it can finish."""
    gc.callbacks.append(pauses.on_gc)
    try:
        task_status.started()
        while not stop.is_set():
            deadline_s = trio.current_time() + limits.event_loop_probe_s
            await trio.sleep_until(deadline_s)
            pauses.observe_lag(max(0.0, trio.current_time() - deadline_s))
    finally:
        gc.callbacks.remove(pauses.on_gc)


class _Stopping:
    """When the stop began (trio time), for its last log line."""

    def __init__(self) -> None:
        self.at_s: float | None = None

    def done(self) -> None:
        if self.at_s is not None:
            log.info("stopped in %.2f s", trio.current_time() - self.at_s)


async def _watch_signals(
    signals: AsyncIterator[int], stop: trio.Event, stopping: _Stopping, api: Api, replica: Replica | None = None
) -> None:
    """On SIGTERM or SIGINT, stops the node in phases, one log line each
    (docs/operations.md "Stopping"), then sets `stop` for the HTTP server."""
    async for signum in signals:
        stopping.at_s = trio.current_time()
        log.info("stopping on %s", signal.Signals(signum).name)
        if replica is not None:
            # From now on it never campaigns nor takes leadership back.
            replica.stop_campaigning()
        log.info("stopping: long polls answered (%d waiting)", api.answer_long_polls())
        if replica is not None:
            await _hand_over(replica)
        waited, left = await api.finish_requests(trio.current_time() + limits.shutdown_requests_s)
        log.info("stopping: %d requests in flight answered%s", waited - left, f", {left} not yet" if left else "")
        if replica is not None:
            log.info("stopping: %d peer streams closed", api.close_peer_streams())
        stop.set()
        return


async def _hand_over(replica: Replica) -> None:
    """A leader hands leadership over first, so the cluster does not wait
    out an election timeout."""
    if not replica.transfer_leadership():
        log.info("stopping: not the leader, no leadership to hand over")
        return
    started_s = trio.current_time()
    log.info("stopping: handing over leadership")
    with trio.move_on_after(limits.transfer_wait_s):
        while replica.phase in (Phase.LEADING, Phase.ELECTED):
            await trio.sleep(limits.raft_tick_ms / 1000)
    if replica.phase in (Phase.LEADING, Phase.ELECTED):
        log.warning("stopping: leadership not handed over after %.2f s", trio.current_time() - started_s)
    else:
        log.info("stopping: leadership handed over in %.2f s", trio.current_time() - started_s)


def main(options: ServeOptions) -> int:
    # Apply runs on a worker thread beside the event loop (engine/commit.py),
    # and each time the trio thread wakes it must win the GIL back from it:
    # a thread that wants the GIL waits up to this interval (5 ms by
    # default) before asking for it. A shorter one bounds the event loop's
    # lag (docs/operations.md "Event-loop lag").
    sys.setswitchinterval(limits.gil_switch_interval_s)
    http_server.install()
    # tempo's own log lines (leadership, peers, runs) on stderr; not the
    # libraries'. Each line names the node in a cluster.
    handler = logging.StreamHandler()
    if options.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    if options.cluster is not None:
        handler.addFilter(NodeFilter(options.cluster.me.id))
    root = logging.getLogger("tempo")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        trio.run(serve, options)
    except ServeError as exc:
        print(f"tempo serve: {exc}", file=sys.stderr)
        return 2
    return 0
