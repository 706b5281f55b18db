"""The composition root: one node, its services, and the root nursery."""

import ipaddress
import signal
import sys
from dataclasses import dataclass
from functools import partial

import hypercorn.config
import hypercorn.trio
import trio

from tempo import limits
from tempo.config import Config, ConfigError
from tempo.config import load as load_config
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.net.api import Api
from tempo.net.auth import Authenticator
from tempo.net.executor import HttpExecutor


@dataclass(frozen=True)
class ServeOptions:
    data_dir: str = "tempo-data"
    host: str = "127.0.0.1"
    port: int = 8700
    insecure: bool = False
    config_path: str | None = None


class ServeError(Exception):
    """A reason `tempo serve` cannot start, for the operator."""


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ServeError(f"--listen wants HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


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


def _hypercorn_config(options: ServeOptions) -> hypercorn.config.Config:
    config = hypercorn.config.Config()
    host = f"[{options.host}]" if ":" in options.host else options.host
    config.bind = [f"{host}:{options.port}"]
    config.accesslog = None
    config.errorlog = None  # tempo prints its own one line when ready
    config.graceful_timeout = limits.shutdown_grace_s
    config.keep_alive_timeout = 75
    return config


async def serve(options: ServeOptions, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Runs one node until SIGTERM or SIGINT; in-flight writes finish first."""
    try:
        config = load_config(options.config_path) if options.config_path else Config()
    except ConfigError as exc:
        raise ServeError(f"--config: {exc}") from None
    check_options(options, config)
    store = Store(options.data_dir)
    try:
        committer = Committer(store)
        jobs = Jobs(store, committer)
        dispatcher = Dispatcher(store, committer)
        ready = False
        api = Api(store, jobs, dispatcher, is_ready=lambda: ready, auth=Authenticator(config.tokens))
        stop = trio.Event()
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_signals, signals, stop)
                await nursery.start(committer.run)
                async with trio.open_nursery() as services:
                    await services.start(dispatcher.run)
                    await services.start(HttpExecutor(dispatcher).run)
                    async with trio.open_nursery() as http:
                        binds = await http.start(
                            partial(hypercorn.trio.serve, api, _hypercorn_config(options), shutdown_trigger=stop.wait)
                        )
                        ready = True
                        url = binds[0]
                        api.url = url
                        print(f"tempo serving on {url}", flush=True)
                        task_status.started(url)
                    # hypercorn has returned: no request is in flight any more.
                    # The dispatcher holds soft state only; stop it, then let
                    # the committer write what is pending and return.
                    services.cancel_scope.cancel()
                committer.close()
    finally:
        store.close()


async def _watch_signals(signals, stop: trio.Event) -> None:
    async for _ in signals:
        stop.set()
        return


def main(options: ServeOptions) -> int:
    try:
        trio.run(serve, options)
    except ServeError as exc:
        print(f"tempo serve: {exc}", file=sys.stderr)
        return 2
    return 0
