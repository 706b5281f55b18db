"""The `[executor]` config table (docs/operations.md "Target policy"): the
networks and host names `allow` opens, the policy a config makes, and the
host a notification URL needs."""

import ipaddress

import pytest

from tempo import config
from tempo.targets import TargetPolicy


def test_the_config_table():
    parsed = config.parse('[executor]\nallow = ["10.0.0.0/8", "Hooks.Internal.Example", "::1"]\n')
    assert parsed.executor.allow_networks == (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128"))
    assert parsed.executor.allow_hosts == frozenset({"hooks.internal.example"})
    assert config.parse("").executor == config.ExecutorConfig()


@pytest.mark.parametrize(("text", "message"), [
    ('[executor]\nallow = "10.0.0.0/8"\n', "executor.allow: a list of networks"),
    ("[executor]\nallow = [1]\n", "executor.allow: a list of networks"),
    ('[executor]\nallow = ["10.0.0.1/8"]\n', "executor.allow[0]: '10.0.0.1/8' is not a network"),
    ('[executor]\nallow = ["ok.example", "not a host"]\n', "executor.allow[1]: 'not a host' is neither"),
    ("[executor]\ndeny = []\n", "executor: unknown keys ['deny']"),
    ('executor = "x"\n', "executor: a table ([executor])"),
    ("[executor]\nallow = [" + ", ".join(['"10.0.0.0/8"'] * 1001) + "]\n", "executor.allow: at most 1000"),
])
def test_bad_executor_tables_are_refused(text, message):
    with pytest.raises(config.ConfigError) as refused:
        config.parse(text)
    assert str(refused.value).startswith(message), refused.value


def test_the_policy_of_a_config_follows_its_tokens():
    peers = frozenset({"192.0.2.1"})
    assert config.parse("").target_policy(peers) == TargetPolicy(loopback_allowed=True)
    secured = config.parse(f'[[tokens]]\nsha256 = "{"a" * 64}"\nowner = "o"\nrole = "client"\n'
                           '[executor]\nallow = ["hooks.internal.example"]\n')
    policy = secured.target_policy(peers)
    assert not policy.loopback_allowed and policy.peer_hosts == peers
    assert policy.allow_hosts == frozenset({"hooks.internal.example"})


@pytest.mark.parametrize("url", ["http:///nohost", "https://", "http://:80/x", "http://host:99999/"])
def test_a_notify_url_needs_a_host_and_a_port_that_is_one(url):
    assert not config.notify_url_ok(url)
    assert config.notify_url_ok("https://hooks.example.com:8443/tempo")
