"""The target policy (tempo/targets.py, docs/operations.md "Target
policy"): which addresses and names tempo's own HTTP requests may reach."""

import ipaddress

import pytest

from tempo.targets import PolicyError, TargetPolicy, parse_allow

TENANTS = TargetPolicy(loopback_allowed=False)  # a node with tokens
LOCAL = TargetPolicy()  # a node without tokens


@pytest.mark.parametrize(("url", "why"), [
    ("http://127.0.0.1:8080/hook", "loopback"),
    ("http://127.9.9.9/", "loopback"),
    ("http://[::1]:9/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://10.1.2.3/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://[fd00::1]/", "unique-local"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://100.64.0.1/", "not a globally routable"),
    ("http://localhost:8700/", "loopback name"),
    ("http://LocalHost./", "loopback name"),
    ("http://api.localhost/", "loopback name"),
    ("http://2130706433/", "dotted decimal"),
    ("http://0x7f.1/", "dotted decimal"),
    ("http://127.1/", "dotted decimal"),
    ("http:///nohost", "no host"),
])
def test_with_tokens_what_is_not_globally_routable_is_refused_by_what_the_url_says(url, why):
    found = TENANTS.why_url_refused(url)
    assert found is not None and why in found


@pytest.mark.parametrize("url", [
    "https://hooks.example.com/tempo", "http://93.184.216.34/", "http://[2606:4700::1111]:8443/x",
    "http://internal-looking-name/",  # a name is checked on delivery, against what it resolves to then
])
def test_with_tokens_global_addresses_and_names_pass_at_create_time(url):
    assert TENANTS.why_url_refused(url) is None


def test_without_tokens_loopback_stays_allowed_and_the_rest_is_refused():
    assert LOCAL.why_url_refused("http://127.0.0.1:9/") is None
    assert LOCAL.why_url_refused("http://localhost:9/") is None
    assert LOCAL.why_url_refused("http://[::1]:9/") is None
    assert "link-local" in LOCAL.why_url_refused("http://169.254.169.254/")
    assert "private" in LOCAL.why_url_refused("http://10.0.0.1/")


def test_allow_opens_networks_and_names_and_wins_over_the_rest():
    policy = TargetPolicy(
        loopback_allowed=False, allow_networks=(ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32")),
        allow_hosts=frozenset({"hooks.internal.example", "localhost"}), peer_hosts=frozenset({"10.0.0.5"}),
    )
    for url in ("http://10.20.30.40/", "http://127.0.0.1:1/", "http://hooks.internal.example/x",
                "http://HOOKS.internal.example./", "http://localhost:2/", "http://10.0.0.5/"):
        assert policy.why_url_refused(url) is None, url
    assert policy.why_url_refused("http://127.0.0.2/") is not None
    assert policy.why_url_refused("http://192.168.0.1/") is not None
    assert policy.allows_name("hooks.internal.example") and not policy.allows_name("other.example")


def test_the_clusters_own_nodes_are_refused_whatever_their_address():
    policy = TargetPolicy(loopback_allowed=False, peer_hosts=frozenset({"93.184.216.34", "node-b.example"}))
    assert "cluster" in policy.why_url_refused("http://93.184.216.34:8700/")
    assert "cluster" in policy.why_url_refused("http://[::ffff:93.184.216.34]/")
    assert "cluster" in policy.why_url_refused("http://NODE-B.example/")
    assert policy.why_url_refused("http://93.184.216.35/") is None


@pytest.mark.parametrize(("entry", "parsed"), [
    ("10.0.0.0/8", ipaddress.ip_network("10.0.0.0/8")),
    ("192.0.2.7", ipaddress.ip_network("192.0.2.7/32")),
    ("fd00::/8", ipaddress.ip_network("fd00::/8")),
    ("Hooks.Internal.Example", "hooks.internal.example"),
    ("localhost", "localhost"),
])
def test_allow_entries(entry, parsed):
    assert parse_allow(entry) == parsed


@pytest.mark.parametrize("entry", ["10.0.0.1/8", "10.0.0.0/33", "127.1", "a b", "", "-x.example", "http://x/", "::g"])
def test_bad_allow_entries_are_refused(entry):
    with pytest.raises(PolicyError):
        parse_allow(entry)


EMBEDDED = ["64:ff9b::a9fe:a9fe", "64:ff9b::a00:1", "64:ff9b::7f00:1", "64:ff9b:1::a9fe:a9fe", "64:ff9b:1::808:808",
            "2002:a9fe:a9fe::", "2002:a00:1::1", "::a9fe:a9fe", "::7f00:1", "::127.0.0.1", "::10.0.0.1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2"]


@pytest.mark.parametrize("address", EMBEDDED)
def test_with_tokens_an_ipv6_address_embedding_a_refused_ipv4_address_is_refused(address):
    # ipaddress reports NAT64, 6to4 and IPv4-compatible addresses global; the
    # request goes to the IPv4 address inside (docs/operations.md "Target policy").
    assert TENANTS.why_address_refused(ipaddress.ip_address(address)) is not None
    assert TENANTS.why_url_refused(f"http://[{address}]:8080/hook") is not None


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "::8.8.8.8", "2606:4700::1111"])
def test_with_tokens_an_ipv6_address_embedding_a_global_ipv4_address_passes(address):
    assert TENANTS.why_address_refused(ipaddress.ip_address(address)) is None


def test_allow_opens_an_embedding_range_it_names_and_the_embedded_networks_it_names():
    nat64 = TargetPolicy(loopback_allowed=False, allow_networks=(ipaddress.ip_network("64:ff9b::/96"),))
    assert nat64.why_url_refused("http://[64:ff9b::a00:1]/") is None
    ten = TargetPolicy(loopback_allowed=False, allow_networks=(ipaddress.ip_network("10.0.0.0/8"),))
    assert ten.why_url_refused("http://[64:ff9b::a00:1]/") is None
    assert ten.why_url_refused("http://[64:ff9b::a9fe:a9fe]/") is not None


def test_the_clusters_own_nodes_are_refused_inside_nat64_too():
    policy = TargetPolicy(loopback_allowed=False, peer_hosts=frozenset({"93.184.216.34"}))
    assert "cluster" in policy.why_url_refused("http://[64:ff9b::93.184.216.34]/")


def test_without_tokens_loopback_inside_an_ipv6_address_stays_allowed_and_the_rest_is_refused():
    assert LOCAL.why_url_refused("http://[::127.0.0.1]/") is None
    assert LOCAL.why_url_refused("http://[64:ff9b::a9fe:a9fe]/") is not None
