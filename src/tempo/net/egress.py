"""The target policy at delivery (tempo/targets.py, docs/operations.md
"Target policy"): the HTTP executor's and the notifier's connections are
made through `PolicyBackend`, which resolves the host itself, checks every
address it resolves to, and connects to a checked address.

The check is at connect time, in the network backend of httpcore (the
transport under httpx), and not before the request: a check made before
would resolve the name once, and the client would resolve it again to
connect, which a DNS server that answers differently each time (DNS
rebinding) would get past. The connection is pinned to the address
checked; TLS still verifies the certificate against the URL's host name
(SNI), and the `Host` header is the URL's, because the request is made to
the URL as written. A connection kept alive was checked when it was made.

Proxies from the environment (`HTTP_PROXY`, ...) are not used: the policy
checks the address tempo connects to, which would be the proxy's.
"""

import ipaddress
import logging
import socket
import ssl
from collections.abc import Iterable

import httpcore
import httpx
import trio

from tempo import targets

log = logging.getLogger("tempo.egress")


class TargetRefused(Exception):
    """The target policy refused every address of a request's host; its
    message says why (`targets.explain`)."""


class PolicyBackend(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, with each TCP connection checked by `policy`
    and pinned to the address checked."""

    def __init__(self, policy: targets.TargetPolicy) -> None:
        self.policy = policy
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.addresses(host, port, timeout)
        failure: Exception | None = None
        # Each checked address in the resolver's order, as a client that
        # resolved the name itself would try them; none other is tried.
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None, "a host resolves to at least one address"
        raise failure

    async def addresses(self, host: str, port: int, timeout_s: float | None) -> list[str]:
        """The addresses to connect to for `host`: itself when it is an
        address the policy allows, or a name `allow` opens; else what it
        resolves to, each allowed. `TargetRefused` when one is not: a
        name that resolves to any refused address is refused whole."""
        name = host.strip("[]")
        try:
            literal: targets.Address | None = ipaddress.ip_address(name.partition("%")[0])
        except ValueError:
            literal = None
        if literal is not None:
            why = self.policy.why_address_refused(literal)
            if why is not None:
                raise TargetRefused(targets.explain(f"{name} is {why}"))
            return [name]
        if self.policy.allows_name(name):
            return [name]
        why_name = self.policy.why_url_refused(f"http://{name}/")
        if why_name is not None:
            raise TargetRefused(targets.explain(why_name))
        resolved = await _resolve(name, port, timeout_s)
        for address in resolved:
            why = self.policy.why_address_refused(ipaddress.ip_address(address.partition("%")[0]))
            if why is not None:
                # Not the address itself: the run's `error` is the tenant's to
                # read, and the answers of the cluster's DNS are not.
                raise TargetRefused(targets.explain(f"{name} resolves to {why}"))
        if not resolved:
            raise httpcore.ConnectError(f"{name} resolves to no address")
        return resolved

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _resolve(name: str, port: int, timeout_s: float | None) -> list[str]:
    """The addresses `name` resolves to now, each once, in the resolver's order."""
    try:
        with trio.fail_after(float("inf") if timeout_s is None else timeout_s):
            found = await trio.socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except trio.TooSlowError:
        raise httpcore.ConnectTimeout(f"resolving {name} took over {timeout_s} s") from None
    except OSError as exc:
        raise httpcore.ConnectError(f"cannot resolve {name}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def policy_transport(
    policy: targets.TargetPolicy, limits: httpx.Limits, verify: ssl.SSLContext | bool = True
) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose connections go through `PolicyBackend`.

    httpx does not take a network backend itself: its transport is built
    as usual, then its connection pool is made again with the backend
    (`_pool`, the one attribute the transport uses; checked against httpx
    0.28 and 0.29)."""
    # verify=False: the context made here is replaced below, and loading the
    # CA certificates twice would cost 40-120 ms twice.
    transport = httpx.AsyncHTTPTransport(verify=False, limits=limits, trust_env=False)
    assert isinstance(transport._pool, httpcore.AsyncConnectionPool), "httpx's transport holds an httpcore pool"
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=PolicyBackend(policy),
    )
    return transport
