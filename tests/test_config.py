"""The config file's `[limits]` and `[[owners]]` (fairness between owners)."""

import pytest

from tempo import limits
from tempo.config import UNLIMITED, ConfigError, OwnerLimits, parse


def test_no_limits_means_unlimited_for_everyone():
    config = parse("")
    assert config.limits_of("anyone") == UNLIMITED
    assert config.limits_of("anyone").runs_in_flight_max is None


def test_defaults_apply_to_every_owner_and_a_rate_gets_a_bursts_of_one_second():
    config = parse("[limits]\nruns_in_flight_max = 10\nclaims_per_s = 2.5\ncreates_per_s = 0.5\n")
    assert config.limits_of("acme") == OwnerLimits(10, 2.5, 3, 0.5, 1)
    assert config.limits_of("globex") == config.limits_of("acme")


def test_an_owner_overrides_key_by_key_and_may_lift_a_default():
    config = parse(
        "[limits]\nruns_in_flight_max = 10\nclaims_per_s = 5\nclaim_burst = 20\ncreates_per_s = 1\n"
        '[[owners]]\nname = "acme"\nruns_in_flight_max = 1000\nclaim_burst = 50\n'
        '[[owners]]\nname = "admin"\nruns_in_flight_max = "unlimited"\nclaims_per_s = "unlimited"\n'
        'creates_per_s = "unlimited"\n'
    )
    assert config.limits_of("acme") == OwnerLimits(1000, 5.0, 50, 1.0, 1)
    assert config.limits_of("admin") == UNLIMITED
    assert config.limits_of("other") == OwnerLimits(10, 5.0, 20, 1.0, 1)


def test_an_owner_alone_may_be_limited():
    config = parse('[[owners]]\nname = "greedy"\nruns_in_flight_max = 3\ncreates_per_s = 100\ncreate_burst = 1000\n')
    assert config.limits_of("greedy") == OwnerLimits(3, None, None, 100.0, 1000)
    assert config.limits_of("other") == UNLIMITED


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[limits]\nruns_in_flight_max = 0\n", "limits.runs_in_flight_max"),
        ("[limits]\nruns_in_flight_max = 1.5\n", "limits.runs_in_flight_max"),
        ("[limits]\nruns_in_flight_max = true\n", "limits.runs_in_flight_max"),
        (f"[limits]\nruns_in_flight_max = {limits.owner_limit_max + 1}\n", "limits.runs_in_flight_max"),
        ('[limits]\nruns_in_flight_max = "unlimited"\n', "limits.runs_in_flight_max"),
        ("[limits]\nclaims_per_s = 0\n", "limits.claims_per_s"),
        ("[limits]\nclaims_per_s = -1\n", "limits.claims_per_s"),
        ('[limits]\nclaims_per_s = "5"\n', "limits.claims_per_s"),
        ("[limits]\nclaims_per_s = nan\n", "limits.claims_per_s"),
        ("[limits]\nclaims_per_s = inf\n", "limits.claims_per_s"),
        ("[limits]\nclaim_burst = 5\n", "limits.claim_burst: goes with claims_per_s"),
        ("[limits]\ncreates_per_s = 1\ncreate_burst = 0\n", "limits.create_burst"),
        ("[limits]\nclaims_per_sec = 5\n", "limits: unknown keys ['claims_per_sec']"),
        ("limits = 5\n", "limits: a table"),
        ('[[owners]]\nruns_in_flight_max = 5\n', "owners[0].name"),
        ('[[owners]]\nname = ""\n', "owners[0].name"),
        ('[[owners]]\nname = "a"\n[[owners]]\nname = "a"\n', "owners[1].name: 'a' is listed twice"),
        ('[[owners]]\nname = "a"\nqueues = []\n', "owners[0]: unknown keys ['queues']"),
        ('[[owners]]\nname = "a"\nclaim_burst = "unlimited"\n', "owners[0].claim_burst"),
        ('[[owners]]\nname = "a"\nclaims_per_s = "unlimited"\nclaim_burst = 3\n', "owners[0].claim_burst: claims_per_s is unlimited"),
        ('[owners]\nname = "a"\n', "owners: an array of tables"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_key(text, named):
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert named in str(caught.value)


def test_the_documented_example_parses_as_it_reads():
    """The TOML example in config.py's docstring is a file an operator may
    copy: every key lands where its comment says (top-level keys first)."""
    import tempo.config

    example = tempo.config.__doc__.split("```toml\n", 1)[1].split("```", 1)[0]
    # Placeholders filled in; [tls] names files that are not here (tests/net/test_tls.py).
    text = example.split("[tls]")[0] + "[http]" + example.split("[http]", 1)[1]
    text = text.replace('peer_token = "..."', 'peer_token = "' + "x" * 32 + '"')
    config = parse(text.replace("hex SHA-256 of the token", "ab" * 32))
    assert config.peer_token == "x" * 32 and config.retention_days == 30
    assert [t.owner for t in config.tokens] == ["acme"] and config.tokens[0].role == "worker"
    assert config.limits_of("acme").runs_in_flight_max == 1000
    assert config.limits_of("other").runs_in_flight_max == 100
    assert config.http.connections_max == 4096
