"""The target policy: which addresses tempo's own HTTP requests may reach
(docs/operations.md "Target policy").

A job's `http(s)://` target and a `notify.url` make the server send a
request where a client chose. With tokens configured, clients are tenants
that must not reach inside the network through it: the cloud metadata
address, the node's own API on loopback, a database on a private range,
the cluster's other nodes. So by default only globally routable addresses
are reached, and `[executor] allow` opens chosen ranges and host names.

The check runs twice. At create and patch time (engine/jobs.py), on what
the URL says: a literal address, a name that always means this machine
(`localhost`), or a node of the cluster named in `--peers`; other names are
not resolved there (a create must not wait on DNS, and what a name resolves
to may change). At delivery (net/egress.py), on every address the name
resolves to at connect time, and the connection goes to the address that
was checked, so a name that resolves to a public address at create time and
to 127.0.0.1 later (DNS rebinding) is refused then.

Pure: no sockets, no DNS; the standard library's `ipaddress` knows the
address classes.
"""

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# A host name of `[executor] allow`: letters, digits, `-` and `.` (ASCII:
# an internationalized name is given in its punycode form, as in a URL).
_HOST_NAME = re.compile(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# A host made only of numbers (decimal, octal or 0x hex) and dots: C's
# inet_aton, which getaddrinfo uses, reads `2130706433`, `0x7f.1` and
# `127.1` as 127.0.0.1.
_NUMERIC_HOST = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*\.?")


class PolicyError(ValueError):
    """An `[executor] allow` entry that is neither a network nor a host name."""


def parse_allow(entry: str) -> Network | str:
    """An `allow` entry: an address or a network in CIDR form
    (`10.0.0.0/8`, `fd00::/8`, `192.0.2.7`), else a host name, lower case."""
    try:
        return ipaddress.ip_network(entry, strict=True)
    except ValueError as exc:
        if "/" in entry or _NUMERIC_HOST.fullmatch(entry.lower()) or ":" in entry:
            raise PolicyError(f"{entry!r} is not a network: {exc}") from None
    name = entry.lower().rstrip(".")
    if not _HOST_NAME.fullmatch(name):
        raise PolicyError(f"{entry!r} is neither a network (10.0.0.0/8) nor a host name (hooks.internal.example)")
    return name


def _why_not_global(address: Address) -> str | None:
    """Why `address` is not a globally routable one, or None if it is."""
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (169.254.169.254 is the cloud metadata service)"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    if isinstance(address, ipaddress.IPv6Address) and address in _UNIQUE_LOCAL:
        return "a unique-local address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "not a globally routable address"
    return None


_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
# IPv6 ranges whose addresses carry an IPv4 address in their last 32 bits,
# a request to which reaches that IPv4 address (through a NAT64 gateway, or
# the host's own IPv4 stack); ipaddress reports most of them global. The
# local-use NAT64 range is not routable on the internet and may embed the
# IPv4 address elsewhere than in the last 32 bits, so it is refused whole.
# docs/operations.md "Target policy".
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a request to `address` reaches, when `address` is
    one that embeds it: IPv4-mapped, NAT64 (64:ff9b::/96), 6to4
    (2002::/16), IPv4-compatible (::/96 but :: and ::1, which are the
    unspecified and the loopback address) or IPv4-translated
    (::ffff:0:0:0/96). Teredo (2001::/32) is not global and refused whole."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    if address in _NAT64 or address in _IPV4_TRANSLATED:
        return low32
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        return low32
    return None


@dataclass(frozen=True)
class TargetPolicy:
    """What tempo's HTTP requests may reach. The default is the policy of a
    node without tokens: loopback is allowed too, so a local try-out works.

    `allow_networks` and `allow_hosts` (`[executor] allow`) win over every
    other rule, the cluster's own nodes included: they are the operator's
    choice. `peer_hosts`: the hosts of `--peers` (names or addresses,
    lower case), refused whatever class their addresses are of."""

    loopback_allowed: bool = True
    allow_networks: tuple[Network, ...] = ()
    allow_hosts: frozenset[str] = frozenset()
    peer_hosts: frozenset[str] = field(default_factory=frozenset)

    def allows_name(self, host: str) -> bool:
        """Whether the host name (not an address) is opened by `allow`."""
        return host.lower().rstrip(".") in self.allow_hosts

    def why_address_refused(self, address: Address) -> str | None:
        """Why a request may not go to `address`, or None if it may. An IPv6
        address that embeds an IPv4 address (`embedded_ipv4`) is refused
        when the IPv4 address is; `allow` opens either."""
        if any(address in network for network in self.allow_networks):
            return None
        if str(address) in self.peer_hosts:
            return "an address of this cluster's nodes"
        if isinstance(address, ipaddress.IPv6Address):
            return self._why_ipv6_refused(address)
        return self._why_class_refused(address)

    def _why_ipv6_refused(self, address: ipaddress.IPv6Address) -> str | None:
        if address in _NAT64_LOCAL_USE:
            return "a local-use NAT64 address (64:ff9b:1::/48), not globally routable"
        inner = embedded_ipv4(address)
        if inner is None:
            return self._why_class_refused(address)
        why = self.why_address_refused(inner)
        # Not the IPv4 address itself: a resolved name's addresses are not
        # the tenant's to read (net/egress.py).
        return None if why is None else f"an IPv6 address that embeds {why}"

    def _why_class_refused(self, address: Address) -> str | None:
        why = _why_not_global(address)
        if why == "a loopback address" and self.loopback_allowed:
            return None
        return why

    def why_url_refused(self, url: str) -> str | None:
        """Why a request to `url` is refused by what it says alone (create
        and patch time), or None if it may go, its name to be checked at
        delivery. `url` passed the URL checks (engine/jobs.py) already."""
        host = (urlsplit(url).hostname or "").lower()
        if not host:
            return "the URL has no host"
        try:
            address = ipaddress.ip_address(host.partition("%")[0])
        except ValueError:
            return self._why_name_refused(host)
        why = self.why_address_refused(address)
        return None if why is None else f"{host} is {why}"

    def _why_name_refused(self, host: str) -> str | None:
        name = host.rstrip(".")
        if name in self.allow_hosts:
            return None
        if _NUMERIC_HOST.fullmatch(name):
            return f"{host} is an address in a form other than dotted decimal: write it as a.b.c.d"
        if name in self.peer_hosts:
            return f"{host} is a node of this cluster"
        if (name == "localhost" or name.endswith(".localhost")) and not self.loopback_allowed:
            # RFC 6761: these names are loopback, whatever DNS says.
            return f"{host} is a loopback name"
        return None


def explain(why: str) -> str:
    """The message of a refusal, for a problem's `msg` and a run's `error`."""
    return (f"refused by the target policy: {why}; an operator may open it with [executor] allow "
            "(docs/operations.md \"Target policy\")")
