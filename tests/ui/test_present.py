"""How the console shows values (src/tempo/ui/present.py)."""

from datetime import UTC, datetime

from tempo.ui.present import Chart, countdown, local_time, schedule_words

METRICS = """# TYPE tempo_runs_claimed_total counter
tempo_runs_claimed_total {claimed}
# TYPE tempo_claim_lateness_seconds histogram
tempo_claim_lateness_seconds_bucket{{le="0.01"}} {a}
tempo_claim_lateness_seconds_bucket{{le="0.1"}} {b}
tempo_claim_lateness_seconds_bucket{{le="1.0"}} {c}
tempo_claim_lateness_seconds_bucket{{le="+Inf"}} {c}
tempo_claim_lateness_seconds_sum 1.0
tempo_claim_lateness_seconds_count {c}
"""


def test_schedules_in_words_name_their_zone():
    assert schedule_words({"cron": "30 2 * * *", "timezone": "Europe/Berlin"}) == "At 02:30 (Europe/Berlin)"
    assert schedule_words({"every_s": 300}) == "every 5m"
    assert schedule_words({"at": "2030-01-01T00:00:00.000Z"}) == "once, at 2030-01-01T00:00:00.000Z"
    after = {"jobs": ["j_A", "j_B"], "on": "failed", "all": False, "within_s": None}
    assert schedule_words({"after": after}) == "after j_A or j_B failed"


def test_instants_in_the_jobs_zone_and_countdowns():
    assert local_time("2027-03-28T01:30:00.000Z", "Europe/Berlin") == "2027-03-28 03:30:00 CEST"
    now = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    assert countdown("2026-12-05T10:04:12.000Z", now) == "in 4m 12s"
    assert countdown("2026-12-05T09:59:00.000Z", now) == "1m ago"


def test_the_chart_reads_rate_and_lateness_quantiles_between_samples():
    chart = Chart()
    chart.observe(METRICS.format(claimed=100, a=0, b=0, c=0), 10.0)
    chart.observe(METRICS.format(claimed=300, a=90, b=99, c=100), 12.0)
    [(ago, rate, p50, p99)] = chart.points()
    assert ago == 0.0 and rate == 100.0  # 200 claims in 2 s
    assert p50 == 0.01 and p99 == 0.1  # the bucket bounds the quantiles fall in
    assert chart.svg()["rate"]


def test_a_session_cookie_opens_only_as_sealed_and_with_the_same_key():
    from tempo.ui.security import Sessions, cookie, derive_key

    key = derive_key([b"\x01" * 32], None)
    assert key == derive_key([b"\x01" * 32], None)  # from the config: every node alike
    assert key != derive_key([b"\x02" * 32], None)  # other tokens: every session ends
    sessions = Sessions(key)
    sealed = sessions.seal("acme-client")
    assert sessions.open(sealed) == "acme-client"
    assert sessions.open(sealed[:-2] + ("AA" if not sealed.endswith("AA") else "BB")) is None
    assert sessions.open("acme-client") is None and sessions.open(None) is None
    assert Sessions(derive_key([b"\x02" * 32], None)).open(sealed) is None
    assert sessions.csrf_ok("seed", sessions.csrf_for("seed"))
    assert not sessions.csrf_ok("seed", sessions.csrf_for("other")) and not sessions.csrf_ok(None, "x")
    assert b"Secure" in cookie("s", "v", secure=True) and b"Secure" not in cookie("s", "v", secure=False)
