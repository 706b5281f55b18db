"""SIGTERM on a single node: long polls are answered at once, and the
process exits well within the HTTP server's grace (docs/operations.md
"Stopping")."""

import signal
import threading
import time

import httpx

from conftest import Server, metric, wait_for

# The goal is 2 s; the bound asserted leaves room for a loaded machine, and
# stays far below the 10 s the server would otherwise wait.
exit_s_max = 5.0


def test_sigterm_answers_long_polls_empty_and_exits_fast(fresh_server: Server):
    srv = fresh_server
    answers: dict[str, httpx.Response | BaseException] = {}

    def poll(name: str, method: str, path: str, **kwargs) -> None:
        try:
            answers[name] = httpx.request(method, f"{srv.url}{path}", timeout=40.0, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            answers[name] = exc

    threads = [
        threading.Thread(target=poll, args=("claim", "POST", "/v1/claim"),
                         kwargs={"json": {"worker": "w-1", "queues": ["nothing-due"], "wait_s": 30}}),
        threading.Thread(target=poll, args=("events", "GET", "/v1/events?after=0&wait_s=30")),
    ]
    for thread in threads:
        thread.start()
    with httpx.Client(base_url=srv.url) as http:
        wait_for(lambda: metric(http, "tempo_http_long_polls_in_flight") == 2)
    signalled_at = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    code = srv.proc.wait(timeout=20)
    exit_s = time.monotonic() - signalled_at
    for thread in threads:
        thread.join(timeout=5)
    print(f"SIGTERM with two long polls in flight: exited {code} after {exit_s:.2f} s")
    assert code == 0, srv.log()
    assert exit_s < exit_s_max, srv.log()
    claim = answers["claim"]
    assert isinstance(claim, httpx.Response), claim
    assert claim.status_code == 200
    assert claim.json() == {"runs": []}
    assert claim.headers.get("retry-after") == "1"
    events = answers["events"]
    assert isinstance(events, httpx.Response), events
    assert events.status_code == 200
    assert events.json()["events"] == []
    assert events.headers.get("retry-after") == "1"
    log = srv.log()
    for phase in ("stopping: long polls answered", "requests in flight answered", "stopped in"):
        assert phase in log, log
