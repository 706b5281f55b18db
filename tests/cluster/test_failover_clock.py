"""A failover keeps true time (docs/semantics.md "Clocks"): a follower that
observed the leader's stamps for 20 s, and then leads, answers its wall
clock. Its `created_at` is the wall clock, `tempo_clock_lead_seconds` shows
no lead, and a one-off is not handed out before its due time.

Before the clock's monotonic reference moved with each observed stamp, the
new leader's scheduler time ran ahead by half of all the time it had
followed (10 s after the 20 s followed here, twice the 5 s a one-off
waits), and a run due 5 s later was handed out at once."""

import re
import time
from datetime import UTC, datetime, timedelta

from .conftest import Cluster, client, rfc3339_ms

FOLLOW_S = 20.0
CREATE_EVERY_S = 1.0
# The bounds (a process test may state them): a stamp within 100 ms
# of the wall clock, a lead of at most 0.1 s.
STAMP_SLACK_MS = 100
LEAD_MAX_S = 0.1
DUE_IN_S = 5.0


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def lead_s(metrics: str) -> float:
    found = re.search(r"^tempo_clock_lead_seconds (\S+)$", metrics, re.MULTILINE)
    assert found, "tempo_clock_lead_seconds is missing from /metrics"
    return float(found.group(1))


def post_retrying(http, url: str, body: dict) -> dict:
    """A write to a leader just elected: a `503` (not serving yet) is tried
    again for a few seconds, as a client would."""
    deadline_s = time.monotonic() + 10
    while True:
        answer = http.post(url, json=body)
        if answer.status_code != 503 or time.monotonic() > deadline_s:
            break
        time.sleep(0.1)
    assert answer.status_code in (200, 201), answer.text
    result: dict = answer.json()
    return result


def test_a_new_leader_answers_its_wall_clock_after_following(make_cluster):
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    with client(10.0) as http:
        # One create a second: the followers observe a stamp a second.
        started_s = time.monotonic()
        for k in range(int(FOLLOW_S / CREATE_EVERY_S)):
            body = {"target": "queue:follow", "schedule": {"every_s": 3600}}
            answer = http.post(f"{leader.url}/v1/jobs", json=body)
            assert answer.status_code == 201, answer.text
            time.sleep(max(0.0, started_s + (k + 1) * CREATE_EVERY_S - time.monotonic()))
        leader.kill()
        new = cluster.wait_leader(among=cluster.others(leader), timeout_s=15)

        before_ms = time.time_ns() // 1_000_000
        job = post_retrying(http, f"{new.url}/v1/jobs", {"target": "queue:after", "schedule": {"every_s": 3600}})
        after_ms = time.time_ns() // 1_000_000
        created_ms = ms(job["created_at"])
        assert before_ms - STAMP_SLACK_MS <= created_ms <= after_ms + STAMP_SLACK_MS, (
            f"created_at {job['created_at']} is {created_ms - after_ms} ms past the wall clock"
        )

        assert lead_s(http.get(f"{new.url}/metrics").text) <= LEAD_MAX_S

        due = datetime.now(UTC) + timedelta(seconds=DUE_IN_S)
        due_ms = ms(rfc3339_ms(due))
        post_retrying(http, f"{new.url}/v1/jobs", {"target": "queue:once", "schedule": {"at": rfc3339_ms(due)}})
        claim = {"worker": "w", "queues": ["once"], "max_runs": 1, "wait_s": DUE_IN_S + 5}
        answer = http.post(f"{new.url}/v1/claim", json=claim, timeout=DUE_IN_S + 10)
        handed_ms = time.time_ns() // 1_000_000
        assert answer.status_code == 200, answer.text
        runs = answer.json()["runs"]
        assert runs, "the one-off was not handed out within 5 s of its due time"
        assert handed_ms >= due_ms, f"handed out {due_ms - handed_ms} ms before its due time"
