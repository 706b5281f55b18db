"""Notifications (docs/semantics.md "Notifications", docs/operations.md
"Notifications"): a real `tempo serve` with a `[notify]` table posts signed
notices to a local HTTPS endpoint whose certificate comes from a throwaway
CA (trustme). The signature is checked with the snippet docs/operations.md
shows; each event type, the owner's default, retries after a 500, a notice
that survives a crash of the node, and runs that do not wait for an
endpoint that hangs."""

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from conftest import Server, unique, wait_for

from .notify_endpoint import SECRET, Endpoint, https_endpoint, serving

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
notice_timeout_s = 15.0


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path]:
    root = tmp_path_factory.mktemp("notify-ca")
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(root / "ca.pem"))
    return authority, root / "ca.pem"


@pytest.fixture
def endpoint(ca: tuple[trustme.CA, Path]) -> Iterator[Endpoint]:
    with https_endpoint(ca[0]) as found:
        yield found


@pytest.fixture
def other_endpoint(ca: tuple[trustme.CA, Path]) -> Iterator[Endpoint]:
    """A second HTTPS endpoint, on another port: another host to the notifier."""
    with https_endpoint(ca[0]) as found:
        yield found


@pytest.fixture
def plain_target() -> Iterator[Endpoint]:
    """A plain HTTP endpoint: the target of http jobs the executor delivers."""
    with serving(None) as found:
        yield found


def _config(tmp_path: Path, ca_file: Path, owner_url: str | None) -> Path:
    lines = ["[notify]", f'secret = "{SECRET}"', f'ca_file = "{ca_file}"']
    if owner_url is not None:
        lines += ["[[notify.owners]]", 'name = "default"', f'url = "{owner_url}"', 'events = ["run.failed"]']
    path = tmp_path / "tempo.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def node(tmp_path: Path, ca: tuple[trustme.CA, Path], endpoint: Endpoint) -> Iterator[Server]:
    config = _config(tmp_path, ca[1], endpoint.url + "/owner")
    srv = Server(tmp_path / "data", extra_args=("--config", str(config)))
    try:
        yield srv.start()
    finally:
        srv.cleanup()


@pytest.fixture
def api(node: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=node.url, timeout=30) as client:
        yield client


def _docs_verify():
    """The `verify` function of the snippet in docs/operations.md."""
    text = DOCS.read_text()
    found = re.search(r"<!-- verify-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert found, "docs/operations.md lost its verify snippet"
    scope: dict = {}
    exec(found.group(1), scope)
    return scope["verify"]


def _job(api: httpx.Client, notify: dict | None, **extra) -> dict:
    body = {"target": f"queue:{unique('q')}", "schedule": {"at": "2030-01-01T00:00:00Z"},
            "retry": {"max_attempts": 1, "backoff_s": [0]}} | extra
    if notify is not None:
        body["notify"] = notify
    created = api.post("/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    return created.json()


def _run_once(api: httpx.Client, job: dict, ok: bool, *, trigger: bool = False) -> str:
    """Makes the job's run due (trigger) or takes its due run, claims it and reports `ok`."""
    if trigger:
        assert api.post(f"/v1/jobs/{job['id']}/trigger").status_code == 201
    queue = job["target"].removeprefix("queue:")
    claimed = api.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 5}).json()["runs"]
    assert len(claimed) == 1, claimed
    run = claimed[0]
    result = api.post(f"/v1/runs/{run['id']}/result",
                      json={"attempt": run["attempt"], "ok": ok, "error": None if ok else "boom"})
    assert result.status_code == 200, result.text
    return run["id"]


def _wait_notices(endpoint: Endpoint, path: str, count: int) -> list[dict]:
    """The notices taken at `path`, in the feed's order: up to 16 are in
    flight at once, so they may arrive in another."""
    wait_for(lambda: len(endpoint.ok_at(path)) >= count, notice_timeout_s)
    return sorted(endpoint.ok_at(path), key=lambda notice: int(notice["id"]))


def test_each_event_is_sent_signed(api: httpx.Client, endpoint: Endpoint) -> None:
    verify = _docs_verify()
    job = _job(api, {"url": endpoint.url + "/all"}, schedule={"at": "2020-01-01T00:00:00Z"})
    assert job["notify"] == {"url": endpoint.url + "/all", "events": ["run.failed", "job.completed", "job.recovered"]}
    run_id = _run_once(api, job, ok=False)
    notices = _wait_notices(endpoint, "/all", 2)
    assert [(n["type"], n["job_id"], n["run_id"]) for n in notices] == [
        ("run.failed", job["id"], run_id), ("job.completed", job["id"], run_id)
    ]
    assert notices[0]["detail"] == {"attempt": 1, "error": "boom"} and notices[0]["owner"] == "default"
    # A triggered run that ends done after a run that failed: recovered.
    _run_once(api, job, ok=True, trigger=True)
    recovered = _wait_notices(endpoint, "/all", 3)[2]
    assert recovered["type"] == "job.recovered" and recovered["detail"] == {"failed_runs": 1}
    # The ids are the events' cursors in the feed.
    # The job's audit events (`job.created`) are in the feed, never sent.
    feed = api.get("/v1/events").json()["events"]
    assert next(e["type"] for e in feed if e["job_id"] == job["id"]) == "job.created"
    sent = [e["cursor"] for e in feed if e["job_id"] == job["id"] and e["type"] != "job.created"]
    assert [n["id"] for n in _wait_notices(endpoint, "/all", 3)] == sent
    for received in endpoint.at("/all"):
        header = received.headers["tempo-signature"]
        assert re.fullmatch(r"t=\d+,v1=[0-9a-f]{64}", header)
        assert verify(SECRET.encode(), header, received.body)
        assert not verify(b"another secret, also long enough!", header, received.body)
        assert not verify(SECRET.encode(), header, received.body + b" ")
        assert received.headers["user-agent"].startswith("tempo/")
    # A success after a success recovers nothing; one notice per run, not per attempt.
    _run_once(api, job, ok=True, trigger=True)
    time.sleep(0.5)
    assert len(endpoint.ok_at("/all")) == 3


def test_one_notice_per_run_that_fails_for_good_not_per_attempt(api: httpx.Client, endpoint: Endpoint) -> None:
    job = _job(api, {"url": endpoint.url + "/attempts", "events": ["run.failed"]},
               retry={"max_attempts": 2, "backoff_s": [0]})
    _run_once(api, job, ok=False, trigger=True)  # attempt 1: retried
    _run_once(api, job, ok=False)  # attempt 2: the run fails for good
    notices = _wait_notices(endpoint, "/attempts", 1)
    time.sleep(0.5)
    assert len(endpoint.ok_at("/attempts")) == 1 and notices[0]["detail"]["attempt"] == 2


def test_the_owner_default_and_the_events_asked_for(api: httpx.Client, endpoint: Endpoint) -> None:
    job = _job(api, None, schedule={"at": "2020-01-01T00:00:00Z"})
    assert job["notify"] is None
    _run_once(api, job, ok=False)
    notices = _wait_notices(endpoint, "/owner", 1)
    time.sleep(0.5)
    # The owner's default asks for run.failed only: no job.completed.
    assert [n["type"] for n in endpoint.ok_at("/owner") if n["job_id"] == job["id"]] == ["run.failed"]
    assert notices[0]["job_id"] == job["id"]


def test_a_notice_answered_500_is_tried_again(api: httpx.Client, endpoint: Endpoint) -> None:
    job = _job(api, {"url": endpoint.url + "/flaky", "events": ["run.failed"]})
    _run_once(api, job, ok=False, trigger=True)
    notices = _wait_notices(endpoint, "/flaky", 1)
    tries = endpoint.at("/flaky")
    assert [r.status for r in tries] == [500, 200]
    assert tries[0].notice["id"] == tries[1].notice["id"] == notices[0]["id"]
    metrics = api.get("/metrics").text
    assert re.search(r"^tempo_notification_retries_total [1-9]", metrics, re.M)
    assert re.search(r'^tempo_notifications_sent_total\{type="run.failed"\} [1-9]', metrics, re.M)


def test_a_hanging_endpoint_does_not_delay_runs(
    api: httpx.Client, endpoint: Endpoint, other_endpoint: Endpoint, plain_target: Endpoint
) -> None:
    # More notices hang than the notifier delivers at once.
    for _ in range(20):
        job = _job(api, {"url": endpoint.url + "/hang", "events": ["run.failed"]})
        _run_once(api, job, ok=False, trigger=True)
    # The hanging host holds its share of the notifier's slots (4; the
    # bound itself is tested in test_notifier_bounds.py).
    wait_for(lambda: endpoint.arrived_at("/hang") >= 4, notice_timeout_s)
    started = time.monotonic()
    # A run the HTTP executor delivers, and one a worker claims.
    http_job = api.post("/v1/jobs", json={"target": plain_target.url + "/run", "schedule": {"at": "2020-01-01T00:00:00Z"}})
    assert http_job.status_code == 201
    wait_for(lambda: len(plain_target.at("/run")) == 1, notice_timeout_s)
    queue_job = _job(api, None, schedule={"at": "2020-01-01T00:00:00Z"})
    _run_once(api, queue_job, ok=True)
    took_s = time.monotonic() - started
    print(f"an http run and a worker's run took {took_s:.2f} s behind an endpoint that hangs")
    assert took_s < 5.0, f"runs took {took_s:.1f} s behind a hanging notification endpoint"
    assert endpoint.ok_at("/hang") == []  # still hanging: the runs did not wait for it
    # Nor do the notices to another endpoint.
    job = _job(api, {"url": other_endpoint.url + "/other", "events": ["run.failed"]})
    _run_once(api, job, ok=False, trigger=True)
    _wait_notices(other_endpoint, "/other", 1)
    assert endpoint.ok_at("/hang") == []
    endpoint.release.set()
    _wait_notices(endpoint, "/hang", 20)


def test_a_notice_not_yet_sent_survives_a_crash(node: Server, api: httpx.Client, endpoint: Endpoint) -> None:
    job = _job(api, {"url": endpoint.url + "/hang-crash", "events": ["run.failed"]})
    _run_once(api, job, ok=False, trigger=True)
    # The notice is on its way when the node dies: its cursor is not committed.
    wait_for(lambda: endpoint.arrived_at("/hang-crash") == 1, notice_timeout_s)
    node.kill()
    endpoint.release.set()  # the endpoint answers from now on
    restarted_s = time.monotonic()
    node.start()
    wait_for(lambda: endpoint.arrived_at("/hang-crash", restarted_s) == 1, notice_timeout_s)
    notices = _wait_notices(endpoint, "/hang-crash", 2)
    assert {n["id"] for n in notices} == {notices[0]["id"]} and notices[0]["job_id"] == job["id"]
    # A notice delivered and its cursor committed is not sent again.
    time.sleep(2.5)
    node.stop()
    again_s = time.monotonic()
    node.start()
    time.sleep(1.5)
    assert endpoint.arrived_at("/hang-crash", again_s) == 0


def test_bad_notify_settings_are_400_at_the_field(api: httpx.Client, endpoint: Endpoint) -> None:
    base = {"target": "queue:q", "schedule": {"at": "2030-01-01T00:00:00Z"}}
    for notify, loc in [
        ({"url": "ftp://x"}, "notify.url"),
        ({"url": "https://x/ y"}, "notify.url"),
        ({"url": endpoint.url, "events": ["run.lost"]}, "notify.events[0]"),
        ({"url": endpoint.url, "events": []}, "notify.events"),
        ({"url": endpoint.url, "colour": "red"}, "notify.colour"),
        ({}, "notify.url"),
    ]:
        answer = api.post("/v1/jobs", json=base | {"notify": notify})
        assert answer.status_code == 400, (notify, answer.text)
        assert [e["loc"] for e in answer.json()["errors"]] == [loc], (notify, answer.text)


def test_a_server_without_a_notify_table_refuses_notify(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.post("/v1/jobs", json={"target": "queue:q", "schedule": {"at": "2030-01-01T00:00:00Z"},
                                               "notify": {"url": "https://example.com/hook"}})
    assert answer.status_code == 400
    assert [e["loc"] for e in answer.json()["errors"]] == ["notify"]
