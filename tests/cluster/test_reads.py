"""A deposed leader never answers a read older than a write the new leader
acknowledged (docs/semantics.md "Reads"): the leader is paused (SIGSTOP)
and cut off, the other two elect a leader that acknowledges a patch, and
the old one is resumed still believing it leads. Every plain GET to it is
`503` or a redirect until it steps down; `?stale=true` answers its old state."""

import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from .conftest import Cluster, client, rfc3339_ms, role_of

# CheckQuorum steps a cut-off leader down within two election timeouts (2 s);
# a loaded machine gets one more second.
watch_s = 3.0


def test_a_deposed_leader_answers_no_read_older_than_an_acknowledged_write(make_cluster):
    cluster: Cluster = make_cluster()
    old = cluster.wait_leader()
    due = rfc3339_ms(datetime.now(UTC) + timedelta(hours=1))
    with client() as http:
        r = http.post(f"{old.url}/v1/jobs", json={"name": "before", "target": "queue:q", "schedule": {"at": due}})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

    old.signal(signal.SIGSTOP)
    try:
        cluster.isolate(old)
        new = cluster.wait_leader(among=cluster.others(old), timeout_s=10)
        with client(follow=False) as http:
            r = http.patch(f"{new.url}/v1/jobs/{job_id}", json={"name": "after"})
        assert r.status_code == 200 and r.json()["name"] == "after", r.text
    finally:
        old.signal(signal.SIGCONT)

    answers: list[tuple[int, str]] = []
    started = time.monotonic()
    with client(5.0, follow=False) as http:
        while time.monotonic() - started < watch_s:
            r = http.get(f"{old.url}/v1/jobs/{job_id}")
            answers.append((r.status_code, r.json().get("name") or r.json().get("type", "")))
            view = cluster.status(old)
            if view is not None and role_of(view, old.id) != "leader":
                break
        stale = http.get(f"{old.url}/v1/jobs/{job_id}?stale=true")
    counts = Counter(answers)
    print(f"{old.id} resumed, deposed by {new.id}: plain GETs answered {dict(counts)}")
    assert answers, "no GET was answered"
    assert all(status in (307, 503) for status, _ in answers), (
        f"the deposed {old.id} answered a read older than an acknowledged write: {dict(counts)}"
    )
    assert stale.status_code == 200, stale.text
    assert stale.json()["name"] == "before"  # its own state, by choice
    assert int(stale.headers["tempo-applied-index"]) > 0
