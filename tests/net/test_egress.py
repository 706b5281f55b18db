"""The target policy at delivery (net/egress.py): every address a name
resolves to at connect time is checked, and the connection goes to the
address checked. The resolver is the test's, so names resolve to what each
case needs; connections go to loopback only."""

import logging

import httpx
import pytest

from net.notify_endpoint import serving
from net.test_executor_urls import _Reports
from tempo.engine.dispatch import ClaimedRun
from tempo.engine.records import Job, Run, Schedule
from tempo.net import egress
from tempo.net.executor import HttpExecutor
from tempo.targets import TargetPolicy

TENANTS = TargetPolicy(loopback_allowed=False)
JOB_ID = "j_01H0000000000000000000000A"
LIMITS = httpx.Limits(max_connections=4)


@pytest.fixture
def answers(monkeypatch):
    """What each name resolves to, one list per lookup in turn."""
    table: dict[str, list[list[str]]] = {}
    asked: list[str] = []

    async def resolve(name, port, timeout_s):
        asked.append(name)
        return table[name].pop(0) if len(table[name]) > 1 else table[name][0]

    monkeypatch.setattr(egress, "_resolve", resolve)
    table["asked"] = asked  # type: ignore[assignment] - the test reads the names looked up
    return table


async def test_a_name_that_rebinds_to_loopback_is_refused_at_connect_time(answers):
    answers["rebind.example"] = [["93.184.216.34"], ["127.0.0.1"]]
    assert TENANTS.why_url_refused("http://rebind.example/") is None  # create time: a name passes
    backend = egress.PolicyBackend(TENANTS)
    assert await backend.addresses("rebind.example", 80, 5.0) == ["93.184.216.34"]
    with pytest.raises(egress.TargetRefused, match=r"rebind\.example resolves to a loopback address"):
        await backend.addresses("rebind.example", 80, 5.0)


@pytest.mark.parametrize("found", [["93.184.216.34", "10.0.0.1"], ["169.254.169.254"], ["::ffff:127.0.0.1"],
                                   ["fd00::1", "2606:4700::1111"],
                                   ["64:ff9b::a9fe:a9fe"], ["2002:a00:1::"], ["::7f00:1"]])
async def test_a_name_with_any_refused_address_is_refused_whole(answers, found):
    answers["mixed.example"] = [found]
    with pytest.raises(egress.TargetRefused, match="target policy"):
        await egress.PolicyBackend(TENANTS).addresses("mixed.example", 80, 5.0)


async def test_literal_addresses_and_allowed_names_are_not_looked_up(answers):
    policy = TargetPolicy(loopback_allowed=False, allow_hosts=frozenset({"hooks.internal.example"}))
    backend = egress.PolicyBackend(policy)
    assert await backend.addresses("hooks.internal.example", 80, 5.0) == ["hooks.internal.example"]
    assert await backend.addresses("93.184.216.34", 80, 5.0) == ["93.184.216.34"]
    with pytest.raises(egress.TargetRefused, match=r"::1 is a loopback"):
        await backend.addresses("[::1]", 80, 5.0)
    with pytest.raises(egress.TargetRefused, match=r"localhost is a loopback name"):
        await backend.addresses("localhost", 80, 5.0)
    assert answers["asked"] == []


@pytest.mark.parametrize("literal", ["[64:ff9b::a9fe:a9fe]", "[64:ff9b:1::a9fe:a9fe]", "[2002:a9fe:a9fe::]",
                                     "[::a9fe:a9fe]", "[::127.0.0.1]"])
async def test_a_literal_ipv6_address_embedding_a_refused_ipv4_address_is_refused_at_connect_time(answers, literal):
    with pytest.raises(egress.TargetRefused, match="target policy"):
        await egress.PolicyBackend(TENANTS).addresses(literal, 80, 5.0)
    assert answers["asked"] == []


async def test_the_connection_goes_to_the_checked_address_with_the_names_host_header(answers):
    with serving(None) as endpoint:
        port = endpoint.url.rsplit(":", 1)[1]
        answers["pinned.example"] = [["127.0.0.1"]]
        transport = egress.policy_transport(TargetPolicy(), LIMITS)
        async with httpx.AsyncClient(transport=transport) as client:
            answer = await client.post(f"http://pinned.example:{port}/pin", content=b"{}")
        assert answer.status_code == 200
        [received] = endpoint.at("/pin")
        assert received.headers["host"] == f"pinned.example:{port}"
        answers["pinned.example"] = [["127.0.0.1"]]
        async with httpx.AsyncClient(transport=egress.policy_transport(TENANTS, LIMITS)) as client:
            with pytest.raises(egress.TargetRefused):
                await client.post(f"http://pinned.example:{port}/refused", content=b"{}")
        assert endpoint.at("/refused") == []


async def test_a_refused_delivery_fails_its_attempt_with_a_clear_error_and_a_log_line(caplog):
    caplog.set_level(logging.WARNING, "tempo.executor")
    with serving(None) as endpoint:
        job = Job(JOB_ID, "acme", None, f"{endpoint.url}/executor", None, Schedule(at_ms=0), 4, (10,), 60, 0,
                  "active", 0, None, 0, 0)
        reports = _Reports()
        executor = HttpExecutor(reports, policy=TENANTS)  # type: ignore[arg-type] - only report() is used
        executor.in_flight = 1
        async with httpx.AsyncClient(transport=egress.policy_transport(TENANTS, LIMITS)) as client:
            await executor._deliver(client, ClaimedRun(Run(JOB_ID, 0, 0, "claimed", attempt=1), job))
        assert endpoint.at("/executor") == []
    [result] = reports.results
    assert not result.ok and result.error.startswith("refused by the target policy: 127.0.0.1 is a loopback address")
    assert "delivery failed: refused by the target policy" in caplog.text
