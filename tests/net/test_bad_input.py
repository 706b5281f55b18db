"""Bad input of every class the issue names: each answer is a 4xx
problem+json naming the field, never a 5xx, and a rejected request changes
nothing."""

import json

import msgspec
import pytest

from conftest import job_body, job_count
from problems import assert_problem

GOOD = {"target": "queue:bad-input", "schedule": {"at": "2030-01-01T00:00:00Z"}}


def with_(**fields):
    body = json.loads(json.dumps(GOOD))
    for path, value in fields.items():
        where = body
        *parents, last = path.split("__")
        for name in parents:
            where = where.setdefault(name, {})
        where[last] = value
    return body


def without(name):
    body = dict(GOOD)
    del body[name]
    return body


@pytest.fixture(autouse=True)
def nothing_changes(http):
    before = job_count(http)
    yield
    assert job_count(http) == before, "a rejected request created a job"


BODIES = {
    # Malformed or the wrong shape as a whole.
    "malformed": (b"{", ""),
    "truncated": (b'{"target": "queue:a", "schedule": {"at"', ""),
    "empty body": (b"", ""),
    "not utf-8": (b'{"target": "queue:\xff", "schedule": {}}', ""),
    "NaN": (b'{"target": "queue:a", "schedule": {"every_s": NaN}}', ""),
    "array": ([], ""),
    "string": ("job", ""),
    "number": (5, ""),
    "null": (None, ""),
    "deeply nested": (b'{"target": "queue:a", "payload": ' + b"[" * 5000 + b"]" * 5000 + b"}", ""),
    # Unknown fields, named by their own path.
    "unknown top": (with_(foo=1), "foo"),
    "unknown schedule": (with_(schedule__foo=1), "schedule.foo"),
    "unknown retry": (with_(retry__bar=1), "retry.bar"),
    # Missing required fields, named by the path they should have had.
    "no target": (without("target"), "target"),
    "no schedule": (without("schedule"), "schedule"),
    # Wrong types.
    "target int": (with_(target=5), "target"),
    "schedule string": (with_(schedule="hourly"), "schedule"),
    "name int": (with_(name=5), "name"),
    "lease string": (with_(lease_s="60"), "lease_s"),
    "lease float": (with_(lease_s=1.5), "lease_s"),
    "lease bool": (with_(lease_s=True), "lease_s"),
    "jitter null": (with_(jitter_s=None), "jitter_s"),
    "retry list": (with_(retry=[1]), "retry"),
    "max_attempts string": (with_(retry__max_attempts="4"), "retry.max_attempts"),
    "backoff string": (with_(retry__backoff_s="10"), "retry.backoff_s"),
    "backoff item string": (with_(retry__backoff_s=[10, "x"]), "retry.backoff_s[1]"),
    "every_s string": ({"target": "queue:a", "schedule": {"every_s": "60"}}, "schedule.every_s"),
    "cron int": ({"target": "queue:a", "schedule": {"cron": 5}}, "schedule.cron"),
    "request_key int": (with_(request_key=5), "request_key"),
    # Out of range.
    "lease 0": (with_(lease_s=0), "lease_s"),
    "lease 3601": (with_(lease_s=3601), "lease_s"),
    "jitter -1": (with_(jitter_s=-1), "jitter_s"),
    "jitter 3601": (with_(jitter_s=3601), "jitter_s"),
    "max_attempts 0": (with_(retry__max_attempts=0), "retry.max_attempts"),
    "max_attempts 101": (with_(retry__max_attempts=101), "retry.max_attempts"),
    "backoff empty": (with_(retry__backoff_s=[]), "retry.backoff_s"),
    "backoff 21": (with_(retry__backoff_s=[1] * 21), "retry.backoff_s"),
    "backoff -1": (with_(retry__backoff_s=[-1]), "retry.backoff_s[0]"),
    "backoff 86401": (with_(retry__backoff_s=[10, 86401]), "retry.backoff_s[1]"),
    "every_s 0": ({"target": "queue:a", "schedule": {"every_s": 0}}, "schedule.every_s"),
    "payload int over 64 bits": (with_(payload={"n": 2**70}), "payload"),
    # Times.
    "at without offset": (with_(schedule__at="2030-01-01T00:00:00"), "schedule.at"),
    "at not a time": (with_(schedule__at="tomorrow"), "schedule.at"),
    "at date only": (with_(schedule__at="2030-01-01"), "schedule.at"),
    "at before 1970": (with_(schedule__at="1969-12-31T23:59:59Z"), "schedule.at"),
    "start_at before 1970": (
        {"target": "queue:a", "schedule": {"every_s": 60, "start_at": "1969-12-31T23:59:59.999Z"}},
        "schedule.start_at",
    ),
    "end_at before 1970": (
        {"target": "queue:a", "schedule": {"every_s": 60, "end_at": "0001-01-01T00:00:00Z"}}, "schedule.end_at",
    ),
    "start_at without offset": (
        {"target": "queue:a", "schedule": {"every_s": 60, "start_at": "2030-01-01T00:00:00"}},
        "schedule.start_at",
    ),
    # Schedules.
    "unknown zone": ({"target": "queue:a", "schedule": {"cron": "@daily", "timezone": "Mars/Olympus"}}, "schedule.timezone"),
    "zone path": ({"target": "queue:a", "schedule": {"cron": "@daily", "timezone": "../etc/passwd"}}, "schedule.timezone"),
    "cron minute 61": ({"target": "queue:a", "schedule": {"cron": "61 * * * *"}}, "schedule.cron"),
    "cron 3 fields": ({"target": "queue:a", "schedule": {"cron": "* * *"}}, "schedule.cron"),
    "cron 6 fields": ({"target": "queue:a", "schedule": {"cron": "0 * * * * *"}}, "schedule.cron"),
    "cron unknown macro": ({"target": "queue:a", "schedule": {"cron": "@sometimes"}}, "schedule.cron"),
    "cron never": ({"target": "queue:a", "schedule": {"cron": "0 0 30 2 *"}}, "schedule.cron"),
    # Day 31 of months that have none, OR-ed with weekdays: its day-of-month
    # field can never match, which once cost seconds per occurrence.
    "cron dead day": ({"target": "queue:a", "schedule": {"cron": "0 0 31 4,6,9,11 1-5"}}, "schedule.cron"),
    "cron empty": ({"target": "queue:a", "schedule": {"cron": ""}}, "schedule.cron"),
    "two kinds": ({"target": "queue:a", "schedule": {"at": "2030-01-01T00:00:00Z", "every_s": 5}}, "schedule"),
    "three kinds": (
        {"target": "queue:a", "schedule": {"at": "2030-01-01T00:00:00Z", "every_s": 5, "cron": "@daily"}},
        "schedule",
    ),
    "no kind": ({"target": "queue:a", "schedule": {}}, "schedule"),
    "timezone with at": (with_(schedule__timezone="UTC"), "schedule.timezone"),
    "timezone with every_s": ({"target": "queue:a", "schedule": {"every_s": 5, "timezone": "UTC"}}, "schedule.timezone"),
    "start_at with cron": (
        {"target": "queue:a", "schedule": {"cron": "@daily", "start_at": "2030-01-01T00:00:00Z"}},
        "schedule.start_at",
    ),
    "start_at with at": (with_(schedule__start_at="2030-01-01T00:00:00Z"), "schedule.start_at"),
    # Targets.
    "target empty": (with_(target=""), "target"),
    "target bare": (with_(target="reports"), "target"),
    "target ftp": (with_(target="ftp://example.com/x"), "target"),
    "queue empty": (with_(target="queue:"), "target"),
    "queue space": (with_(target="queue:a b"), "target"),
    "queue slash": (with_(target="queue:a/b"), "target"),
    "queue 201": (with_(target="queue:" + "q" * 201), "target"),
    "url no host": (with_(target="http:///path"), "target"),
    "url bad port": (with_(target="http://example.com:99999/"), "target"),
    # Lengths.
    "name 201": (with_(name="n" * 201), "name"),
    "target 2049": (with_(target="https://example.com/" + "p" * 2029), "target"),
    "request_key 201": (with_(request_key="k" * 201), "request_key"),
    "request_key empty": (with_(request_key=""), "request_key"),
}


def post(http, path, body, **headers):
    if isinstance(body, bytes):
        return http.post(path, content=body, headers={"content-type": "application/json"} | headers)
    return http.post(path, json=body, headers=headers)


@pytest.mark.parametrize("case", list(BODIES))
def test_bad_create(http, case):
    body, loc = BODIES[case]
    assert_problem(post(http, "/v1/jobs", body), 400, type_="validation", loc=loc)


@pytest.mark.parametrize("case", [c for c in BODIES if not isinstance(BODIES[c][0], bytes)])
def test_bad_create_in_msgpack(http, case):
    body, loc = BODIES[case]
    if case == "payload int over 64 bits":
        pytest.skip("MessagePack cannot carry such an integer")
    r = http.post("/v1/jobs", content=msgspec.msgpack.encode(body), headers={"content-type": "application/msgpack"})
    assert_problem(r, 400, type_="validation", loc=loc)


@pytest.mark.parametrize("case", [c for c in BODIES if not isinstance(BODIES[c][0], bytes) and isinstance(BODIES[c][0], dict)])
def test_bad_item_in_a_batch_names_paths_inside_the_item(http, case):
    body, loc = BODIES[case]
    r = http.post("/v1/jobs/batch", json={"jobs": [body]})
    assert r.status_code == 200, r.text
    [result] = r.json()["results"]
    assert result["status"] == 400 and "job" not in result
    assert [e["loc"] for e in result["problem"]["errors"]] == [loc]


def test_bad_items_of_other_shapes_in_a_batch(http):
    r = http.post("/v1/jobs/batch", json={"jobs": [5, [], None, "x"]})
    assert r.status_code == 200
    for result in r.json()["results"]:
        assert result["status"] == 400 and result["problem"]["errors"][0]["loc"] == ""


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (b"{", ""),
        ([], ""),
        ({}, "jobs"),
        ({"jobs": "x"}, "jobs"),
        ({"jobs": []}, "jobs"),
        ({"jobs": [GOOD] * 1001}, "jobs"),
        ({"jobs": [GOOD], "foo": 1}, "foo"),
    ],
)
def test_bad_batch_as_a_whole(http, body, loc):
    assert_problem(post(http, "/v1/jobs/batch", body), 400, type_="validation", loc=loc)


def test_payload_over_64_kib_is_too_large(http):
    assert_problem(http.post("/v1/jobs", json=with_(payload="x" * (64 * 1024))), 413, type_="too_large", loc="payload")
    # 64 KiB encoded as JSON, quotes included, is still fine.
    job = http.post("/v1/jobs", json=with_(payload="x" * (64 * 1024 - 2)))
    assert job.status_code == 201
    assert http.delete(f"/v1/jobs/{job.json()['id']}").status_code == 204


def test_body_over_1_mib_is_too_large(http):
    body = json.dumps(with_(name="n")).encode()
    padded = body[:-1] + b" " * (1 << 20) + b"}"
    assert_problem(http.post("/v1/jobs", content=padded), 413, type_="too_large", loc="")
    assert_problem(http.post("/v1/schedules/preview", content=padded), 413, type_="too_large")


def test_batch_body_over_32_mib_is_too_large(http):
    padded = b'{"jobs": [' + b" " * (32 << 20) + b"]}"
    assert_problem(http.post("/v1/jobs/batch", content=padded), 413, type_="too_large", loc="")


QUERIES = [
    ("/v1/jobs?limit=0", "query.limit"),
    ("/v1/jobs?limit=1001", "query.limit"),
    ("/v1/jobs?limit=-1", "query.limit"),
    ("/v1/jobs?limit=x", "query.limit"),
    ("/v1/jobs?limit=", "query.limit"),
    ("/v1/jobs?limit=" + "9" * 5000, "query.limit"),
    # Digits int() reads that are not ASCII: refused on every page.
    ("/v1/jobs?limit=\u0663", "query.limit"),
    ("/v1/calendars?limit=\u0663", "query.limit"),
    ("/v1/calendars?limit=0", "query.limit"),
    ("/v1/runs?limit=\u0663", "query.limit"),
    ("/v1/jobs?cursor=nonsense", "query.cursor"),
    ("/v1/jobs/{job}/runs?limit=0", "query.limit"),
    ("/v1/jobs/{job}/runs?since=yesterday", "query.since"),
    ("/v1/jobs/{job}/runs?since=2030-01-01T00:00:00", "query.since"),
    ("/v1/jobs/{job}/runs?until=2030-13-01T00:00:00Z", "query.until"),
    ("/v1/jobs/{job}/runs?cursor=abc", "query.cursor"),
    ("/v1/jobs/{job}/runs?cursor=-5", "query.cursor"),
]


@pytest.fixture(scope="module")
def a_job(http):
    # Made before the module's first count, so `nothing_changes` sees it.
    return http.post("/v1/jobs", json=job_body(schedule={"every_s": 60})).json()


@pytest.mark.parametrize(("path", "loc"), QUERIES)
def test_bad_query_parameters(http, a_job, path, loc):
    assert_problem(http.get(path.format(job=a_job["id"])), 400, type_="validation", loc=loc)


UNKNOWN_JOB = "j_01JZZZZZZZZZZZZZZZZZZZZZZZ"
UNKNOWN_RUN = "r_01JZZZZZZZZZZZZZZZZZZZZZZZ0000000000"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"/v1/jobs/{UNKNOWN_JOB}"),
        ("GET", "/v1/jobs/not-an-id"),
        ("GET", "/v1/jobs/j_%00"),
        ("DELETE", f"/v1/jobs/{UNKNOWN_JOB}"),
        ("POST", f"/v1/jobs/{UNKNOWN_JOB}/pause"),
        ("POST", f"/v1/jobs/{UNKNOWN_JOB}/resume"),
        ("POST", f"/v1/jobs/{UNKNOWN_JOB}/trigger"),
        ("POST", "/v1/jobs/nope/trigger"),
        ("GET", f"/v1/jobs/{UNKNOWN_JOB}/runs"),
        ("GET", f"/v1/runs/{UNKNOWN_RUN}"),
        ("GET", "/v1/runs/r_nope"),
        ("GET", "/v1/runs/" + "r_" + "Z" * 36),
    ],
)
def test_unknown_ids_are_404(http, method, path):
    assert_problem(http.request(method, path), 404, type_="not_found")


def test_run_id_of_a_real_job_but_no_such_slot_is_404(http, a_job):
    run_id = "r_" + a_job["id"][2:] + "0000000000"
    assert_problem(http.get(f"/v1/runs/{run_id}"), 404, type_="not_found")


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"schedule": {"cron": "61 * * * *"}}, "schedule.cron"),
        ({"schedule": {"cron": "0 0 31 4,6,9,11 1-5"}, "count": 1000}, "schedule.cron"),
        ({"schedule": {"cron": "@daily", "timezone": "Nowhere/Land"}}, "schedule.timezone"),
        ({"schedule": {"at": "2030-01-01T00:00:00Z", "cron": "@daily"}}, "schedule"),
        ({"schedule": {"every_s": 60}, "count": 0}, "count"),
        ({"schedule": {"every_s": 60}, "count": 1001}, "count"),
        ({"schedule": {"every_s": 60}, "after": "2030-01-01T00:00:00"}, "after"),
        ({"schedule": {"every_s": 60}, "foo": 1}, "foo"),
        ({}, "schedule"),
    ],
)
def test_bad_preview(http, body, loc):
    assert_problem(http.post("/v1/schedules/preview", json=body), 400, type_="validation", loc=loc)


def test_rejected_request_key_is_not_taken(http):
    body = with_(request_key="bad-input-key", lease_s=0)
    assert_problem(http.post("/v1/jobs", json=body), 400, loc="lease_s")
    body["lease_s"] = 10
    created = http.post("/v1/jobs", json=body)
    assert created.status_code == 201
    assert http.delete(f"/v1/jobs/{created.json()['id']}").status_code == 204


def test_conflicting_request_key_changes_nothing(http):
    body = with_(request_key="bad-input-conflict")
    first = http.post("/v1/jobs", json=body)
    assert first.status_code == 201
    assert_problem(http.post("/v1/jobs", json=with_(request_key="bad-input-conflict", name="other")), 409, type_="request_key_reused")
    assert http.get(f"/v1/jobs/{first.json()['id']}").json() == first.json()
    assert http.delete(f"/v1/jobs/{first.json()['id']}").status_code == 204


def test_a_refused_body_gets_its_answer_not_a_reset(http):
    """A client sends its whole body before it reads; a body refused unread
    (413 from its Content-Length) is read and dropped, so the answer
    reaches the client rather than a reset connection."""
    padded = b'{"jobs": [' + b" " * (34 << 20) + b"]}"
    for _ in range(5):
        assert_problem(http.post("/v1/jobs/batch", content=padded), 413, type_="too_large", loc="")
        assert_problem(http.post("/v1/jobs", content=padded[: 3 << 20]), 413, type_="too_large", loc="")


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"id": "n4\n", "url": "http://127.0.0.1:9"}, "id"),
        ({"id": "n4", "url": "http://127.0.0.1:9\n"}, "url"),
    ],
)
def test_a_node_id_or_url_ending_in_a_newline_is_400(http, body, loc):
    """A pattern's `$` matches before a final newline: such an ID would
    become a member that no process can start as."""
    assert_problem(http.post("/v1/cluster/nodes", json=body), 400, type_="validation", loc=loc)
