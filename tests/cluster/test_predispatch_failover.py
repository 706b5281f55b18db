"""Pre-dispatch through a failover (docs/semantics.md "Pre-dispatch"; docs/api.md
"POST /v1/claim", "POST /v1/starts"): a run held ahead from a leader that is
then SIGKILLed is still the worker's at the new leader, with its lease counted
from its `due_at`, a repeat of its claim key answers it at the same attempt,
and the new leader answers `POST /v1/starts` with `start` no earlier than
100 ms before its due time. A cancel or pause the new leader acknowledges
more than 100 ms before the due time stops it: `stop`, and it never starts."""

import time
import uuid
from datetime import datetime

import httpx
import pytest

from tempo import clock, limits

from .conftest import Cluster, Node, client

# Due this far after the create: room for the claim, the SIGKILL, an election
# (1–2 s, more on a loaded machine) and the checks, all before the due time.
DUE_IN_S = 7.0
LEASE_S = 10  # a new leader's lease from its takeover ends before due_at + LEASE_S
ELECTION_TIMEOUT_S = 15.0
# How long a write to a just-elected leader is tried again on 503 or a
# connection error (it is not serving until an entry of its term is applied).
RETRY_S = 10.0
# The server's clock and ours are one machine's; an answer's time is taken
# after it arrived, so this only covers rounding.
CLOCK_SLACK_MS = 50


def _ms(iso: str) -> int:
    return clock.ms_from_datetime(datetime.fromisoformat(iso))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _send(http: httpx.Client, method: str, url: str, **kwargs) -> httpx.Response:
    """The request, sent again on a 503 or a connection error for up to
    RETRY_S, as a client of a leader just elected does. Only idempotent
    requests go through here (a keyed claim, starts, cancel, pause, reads)."""
    deadline_s = time.monotonic() + RETRY_S
    while True:
        try:
            answer = http.request(method, url, **kwargs)
            if answer.status_code != 503:
                return answer
            why = f"503 {answer.text[:200]}"
        except httpx.TransportError as exc:
            why = repr(exc)
        assert time.monotonic() < deadline_s, f"{method} {url}: no answer but {why} for {RETRY_S} s"
        time.sleep(0.1)


def _hold_a_run_ahead(cluster: Cluster, http: httpx.Client, claim_key: str | None = None
                      ) -> tuple[Node, dict, dict, int]:
    """A one-off due in DUE_IN_S, claimed ahead from the leader: (the leader,
    the claim sent, the held run, its due time in ms)."""
    leader = cluster.wait_leader()
    queue = f"q-{uuid.uuid4().hex[:8]}"
    due_ms = _now_ms() + int(DUE_IN_S * 1000)
    created = http.post(f"{leader.url}/v1/jobs", json={
        "target": f"queue:{queue}", "schedule": {"at": clock.iso_from_ms(due_ms)}, "lease_s": LEASE_S,
        "retry": {"max_attempts": 3, "backoff_s": [1]},
    })
    assert created.status_code == 201, created.text
    claim = {"worker": "w1", "queues": [queue], "ahead_ms": limits.claim_ahead_ms_max, "wait_s": 5}
    if claim_key is not None:
        claim["claim_key"] = claim_key
    answer = http.post(f"{leader.url}/v1/claim", json=claim)
    assert answer.status_code == 200, answer.text
    runs = answer.json()["runs"]
    assert len(runs) == 1, f"the claim ahead took {runs}"
    [run] = runs
    assert run["job_id"] == created.json()["id"] and run["status"] == "claimed" and run["attempt"] == 1
    assert _ms(run["due_at"]) == due_ms
    assert _ms(run["lease_expires_at"]) == due_ms + LEASE_S * 1000
    assert _now_ms() < due_ms - 1000, "the claim ahead came too late for the scenario"
    return leader, claim, run, due_ms


def _fail_over(cluster: Cluster, leader: Node) -> Node:
    """SIGKILLs `leader`; the leader the other two then agree on."""
    leader.kill()
    new = cluster.wait_leader(among=cluster.others(leader), timeout_s=ELECTION_TIMEOUT_S)
    assert new is not leader
    return new


def _starts(http: httpx.Client, url: str, run: dict) -> tuple[dict, int]:
    """POST /v1/starts for the held run: the answer, and when it came (ms)."""
    body = {"worker": "w1", "runs": [{"run_id": run["id"], "attempt": run["attempt"]}]}
    answer = _send(http, "POST", f"{url}/v1/starts", json=body)
    answered_ms = _now_ms()
    assert answer.status_code == 200, answer.text
    return answer.json(), answered_ms


def test_a_run_held_ahead_starts_after_a_failover_with_its_lease_from_due_at(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    key = f"ck-{uuid.uuid4().hex}"
    with client(timeout_s=DUE_IN_S + 20) as http:
        leader, claim, run, due_ms = _hold_a_run_ahead(cluster, http, claim_key=key)
        lease_floor_ms = due_ms + LEASE_S * 1000
        new = _fail_over(cluster, leader)
        elected_ms = _now_ms()
        print(f"killed {leader.id}; {new.id} leads {due_ms - elected_ms} ms before due_at")

        # The run as the new leader holds it, before anything renews its
        # lease: a takeover's full lease, counted from the takeover, would end
        # before due_at + lease_s.
        got = _send(http, "GET", f"{new.url}/v1/runs/{run['id']}")
        assert got.status_code == 200, got.text
        shown = got.json()
        assert (shown["status"], shown["attempt"], shown["worker"]) == ("claimed", 1, "w1"), shown
        assert shown["cancel_requested"] is False
        print(f"the new leader shows lease_expires_at at due_at + lease_s "
              f"{_ms(shown['lease_expires_at']) - lease_floor_ms:+d} ms")
        assert _ms(shown["lease_expires_at"]) >= lease_floor_ms, (
            f"the new leader's lease ends {lease_floor_ms - _ms(shown['lease_expires_at'])} ms before "
            f"due_at + lease_s: {shown['lease_expires_at']}, due_at {shown['due_at']}")

        # The claim sent again with its key: the same run at the same attempt,
        # its lease still counted from due_at.
        repeat = _send(http, "POST", f"{new.url}/v1/claim", json=claim)
        repeated_ms = _now_ms()
        assert repeat.status_code == 200, repeat.text
        again = repeat.json()
        assert [(r["id"], r["attempt"], r["status"], r["worker"]) for r in again["runs"]] == [
            (run["id"], 1, "claimed", "w1")], again
        [held] = again["runs"]
        assert _ms(held["due_at"]) == due_ms
        assert _ms(held["lease_expires_at"]) >= lease_floor_ms, (
            f"the repeat's lease ends {lease_floor_ms - _ms(held['lease_expires_at'])} ms before due_at + lease_s")
        assert _ms(held["lease_expires_at"]) <= max(lease_floor_ms, repeated_ms + LEASE_S * 1000) + CLOCK_SLACK_MS
        assert "server_time" in again and _ms(again["server_time"]) <= repeated_ms + CLOCK_SLACK_MS

        checked_ms = _now_ms()
        assert checked_ms < due_ms - limits.predispatch_stop_ms, (
            f"the failover took too long for the scenario: checked {checked_ms - due_ms} ms after due_at")

        # May it start? Yes, and not before the stop point.
        answer, answered_ms = _starts(http, new.url, run)
        assert answer == {"start": [run["id"]], "stop": []}
        assert answered_ms >= due_ms - limits.predispatch_stop_ms - CLOCK_SLACK_MS, (
            f"answered {due_ms - answered_ms} ms before due_at")

        # The worker runs it and reports: done at attempt 1.
        ended = _send(http, "POST", f"{new.url}/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True})
        assert ended.status_code == 200 and ended.json()["status"] == "done", ended.text
        final = _send(http, "GET", f"{new.url}/v1/runs/{run['id']}").json()
        assert [(a["attempt"], a["worker"], a["ok"]) for a in final["attempts"]] == [(1, "w1", True)]


@pytest.mark.parametrize("action", ["cancel", "pause"])
def test_a_stop_the_new_leader_acknowledged_before_the_stop_point_means_no_start(make_cluster, action: str) -> None:
    cluster: Cluster = make_cluster()
    with client(timeout_s=DUE_IN_S + 20) as http:
        leader, _, run, due_ms = _hold_a_run_ahead(cluster, http)
        new = _fail_over(cluster, leader)

        if action == "cancel":
            done = _send(http, "POST", f"{new.url}/v1/runs/{run['id']}/cancel")
            acked_ms = _now_ms()
            assert done.status_code == 200, done.text
            # A held run stopped before it started ends at once.
            assert done.json()["status"] == "cancelled", done.json()
        else:
            done = _send(http, "POST", f"{new.url}/v1/jobs/{run['job_id']}/pause")
            acked_ms = _now_ms()
            assert done.status_code == 200, done.text
            assert done.json()["paused"] is not None, done.json()
        print(f"killed {leader.id}; {new.id} acknowledged the {action} {due_ms - acked_ms} ms before due_at")
        assert acked_ms < due_ms - limits.predispatch_stop_ms - CLOCK_SLACK_MS, (
            f"the failover took too long for the scenario: the {action} was acknowledged "
            f"{acked_ms - due_ms} ms after due_at")

        answer, _ = _starts(http, new.url, run)
        assert answer == {"start": [], "stop": [run["id"]]}, (
            f"the {action} was acknowledged {due_ms - acked_ms} ms before due_at, starts answered {answer}")

        # It never started: cancelled, with no attempt that ran; the job has
        # no other run, and the queue hands nothing out past the due time.
        got = _send(http, "GET", f"{new.url}/v1/runs/{run['id']}")
        assert got.status_code == 200, got.text
        shown = got.json()
        assert (shown["status"], shown["attempt"]) == ("cancelled", 1), shown
        assert shown["attempts"] == [], f"a stopped held run lists attempts: {shown['attempts']}"
        runs = _send(http, "GET", f"{new.url}/v1/jobs/{run['job_id']}/runs").json()["runs"]
        assert [(r["id"], r["status"]) for r in runs] == [(run["id"], "cancelled")], runs
        if action == "cancel":
            events = _send(http, "GET", f"{new.url}/v1/events",
                           params={"order": "desc", "job_id": run["job_id"]}).json()["events"]
            cancelled = [e for e in events if e["type"] == "run.cancelled"]
            assert [(e["run_id"], e["detail"]) for e in cancelled] == [
                (run["id"], {"attempt": 1, "claimed": True})], events
        queue = run["target"].removeprefix("queue:")
        wait_s = max(1, int((due_ms - _now_ms()) / 1000) + 2)
        late = _send(http, "POST", f"{new.url}/v1/claim", json={"worker": "w2", "queues": [queue], "wait_s": wait_s})
        assert late.status_code == 200 and late.json()["runs"] == [], late.text
        assert _now_ms() >= due_ms, "the late claim did not wait past due_at"
