"""The config file's `[http]` table (edge limits)."""

import pytest

from tempo import limits
from tempo.config import ConfigError, HttpLimits, parse


def test_no_http_table_means_the_defaults_of_limits_py():
    http = parse("").http
    assert http == HttpLimits()
    assert http.connections_max == limits.connections_max
    assert http.requests_in_flight_max == limits.requests_in_flight_max
    assert http.long_polls_max == limits.long_polls_max
    assert http.body_read_timeout_s == limits.body_read_timeout_s
    assert http.body_bytes_in_flight_max == limits.body_bytes_in_flight_max
    assert http.connections_per_address_max == limits.connections_per_address_max


def test_http_keys_are_read():
    http = parse(
        "[http]\nconnections_max = 100\nrequests_in_flight_max = 50\nlong_polls_max = 10\nbody_read_timeout_s = 2.5\n"
    ).http
    # Without its own key, one address may hold a quarter of the connections.
    assert http == HttpLimits(100, 50, 10, 2.5, connections_per_address_max=25)
    assert parse("[http]\nbody_read_timeout_s = 5\n").http.body_read_timeout_s == 5
    assert parse("[http]\nconnections_per_address_max = 7\n").http.connections_per_address_max == 7
    assert parse("[http]\nconnections_max = 2\nrequests_in_flight_max = 2\nlong_polls_max = 1\n").http == (
        HttpLimits(2, 2, 1, connections_per_address_max=1)
    )
    budget = parse(f"[http]\nbody_bytes_in_flight_max = {64 << 20}\n").http.body_bytes_in_flight_max
    assert budget == 64 << 20


def test_the_body_budget_takes_at_least_one_largest_body():
    least = limits.batch_body_bytes_max
    assert parse(f"[http]\nbody_bytes_in_flight_max = {least}\n").http.body_bytes_in_flight_max == least
    with pytest.raises(ConfigError, match=r"http\.body_bytes_in_flight_max"):
        parse(f"[http]\nbody_bytes_in_flight_max = {least - 1}\n")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("http = 3", "http: a table"),
        ("[http]\nconnection_max = 5", "http: unknown keys ['connection_max']"),
        ("[http]\nconnections_max = 0", "http.connections_max"),
        ("[http]\nrequests_in_flight_max = true", "http.requests_in_flight_max"),
        ("[http]\nlong_polls_max = 1.5", "http.long_polls_max"),
        ("[http]\nbody_read_timeout_s = 0", "http.body_read_timeout_s"),
        ("[http]\nbody_read_timeout_s = '30'", "http.body_read_timeout_s"),
        ("[http]\nbody_bytes_in_flight_max = 1.5e9", "http.body_bytes_in_flight_max"),
        ("[http]\nbody_bytes_in_flight_max = true", "http.body_bytes_in_flight_max"),
        ("[http]\nbody_bytes_in_flight_max = 0", "http.body_bytes_in_flight_max"),
        (f"[http]\nbody_bytes_in_flight_max = {(1 << 40) + 1}", "http.body_bytes_in_flight_max"),
        ("[http]\nlong_polls_max = 10\nrequests_in_flight_max = 5\nconnections_max = 100", "long_polls_max <="),
        ("[http]\nrequests_in_flight_max = 500\nconnections_max = 100", "requests_in_flight_max <="),
        ("[http]\nconnections_per_address_max = 0", "http.connections_per_address_max"),
        ("[http]\nconnections_per_address_max = 5000", "connections_per_address_max <= connections_max"),
    ],
)
def test_bad_http_values_name_the_key(text, where):
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert where in str(caught.value)
