"""Schemathesis against a live `tempo serve`: no 5xx, and every answer is one
the OpenAPI document declares (status, content type and body schema)."""

import time

import msgspec
import pytest
import schemathesis
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from conftest import job_body, unique
from tempo.net import openapi


@schemathesis.serializer("application/msgpack")
def _to_msgpack(context, value):
    try:
        return {"data": msgspec.msgpack.encode(value)}
    except OverflowError:
        reject()  # an integer MessagePack cannot hold: no request to send


@schemathesis.deserializer("application/msgpack")
def _from_msgpack(context, response):
    return msgspec.msgpack.decode(response.content)


# `not_a_server_error` fails on any 5xx, the 500 the document declares for
# every operation (an unexpected error, docs/api.md "Errors") included.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
examples_per_operation = 200
# A soft bound on the whole run: once the operations tested so far took this
# long (a slow or busy machine), the rest get `examples_late` each.
run_s_max = 120.0
examples_late = 10
# Seconds a generated long poll may wait at most (claims, events).
wait_s_max = 0.05
# Chains of linked calls, and calls per chain at most.
sequences = 50
steps_per_sequence = 6
OPERATIONS = [(path, method.upper()) for path, methods in openapi.document()["paths"].items() for method in methods]


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(f"{server.url}/v1/openapi.json", timeout=10)


@pytest.fixture(scope="module")
def started_s() -> float:
    return time.monotonic()


@pytest.fixture
def known_ids(http) -> dict[str, str]:
    """A job of the test's own with a claimed run, so that routes taking an
    ID are fuzzed with one that exists too, not only with random strings."""
    queue = unique("fuzz")
    job = http.post("/v1/jobs", json=job_body(target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"}))
    assert job.status_code == 201, job.text
    claimed = http.post("/v1/claim", json={"worker": "fuzz", "queues": [queue], "wait_s": 5}).json()["runs"]
    assert len(claimed) == 1, claimed
    return {"id": job.json()["id"], "run_id": claimed[0]["id"]}


@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[f"{m} {p}" for p, m in OPERATIONS])
def test_api_answers_as_documented(api_schema, server, known_ids, started_s, path, method):
    operation = api_schema[path][method]
    strategies = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]
    known = {name: value for name, value in known_ids.items() if "{" + name + "}" in path}
    if known:
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=known))
    cases = st.one_of(strategies)

    late = time.monotonic() - started_s > run_s_max

    @settings(max_examples=examples_late if late else examples_per_operation, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck), database=None)
    @given(case=cases)
    def check(case):
        _bound_long_polls(case)
        case.call_and_validate(base_url=server.url, checks=CHECKS, timeout=10)

    check()


def _bound_long_polls(case) -> None:
    """A long poll may wait up to 60 s (docs/api.md): cap the generated wait so
    that no example stalls the run; any other value is left as generated."""
    if isinstance(case.body, dict) and isinstance(case.body.get("wait_s"), int | float):
        case.body["wait_s"] = min(case.body["wait_s"], wait_s_max)
    if isinstance(case.query, dict) and "wait_s" in case.query:
        try:
            if float(case.query["wait_s"]) > wait_s_max:
                case.query["wait_s"] = str(wait_s_max)
        except (TypeError, ValueError):
            pass


def test_api_sequences_answer_as_documented(api_schema, server):
    """Chains that follow the document's links (create a job, then read,
    pause, trigger, delete it, read its runs), so the routes that need an
    existing job or run are fuzzed with real IDs too."""

    # Operations whose answers depend on timing (whether a run fell due by
    # now, whether a long poll saw an event) stay out of the chains: a chain
    # must draw the same steps from the same answers each time it is replayed,
    # or hypothesis stops with FlakyStrategyDefinition. They are fuzzed one by
    # one above. The run listings are among them: the runs of the jobs made
    # before change as time passes (a lease runs out, a retry falls due, the
    # server's executor delivers a URL target), and a chain drew the next
    # step's parameters from that list (a CI run: "GET /v1/runs -> 200" then
    # DeleteJob, FlakyStrategyDefinition on the replay).
    timed = r"^/v1/(claim|events|heartbeats|results|runs|jobs/\{id\}/runs|runs/\{run_id\}/(heartbeat|result))$"

    class Sequences(api_schema.exclude(path_regex=timed).as_state_machine()):
        def before_call(self, case):
            _bound_long_polls(case)

        def get_call_kwargs(self, case):
            return {"base_url": server.url, "timeout": 10}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)

    Sequences.run(settings=settings(
        max_examples=sequences, stateful_step_count=steps_per_sequence, derandomize=True, deadline=None,
        suppress_health_check=list(HealthCheck), database=None,
    ))



def test_removing_a_node_of_a_single_node_is_a_documented_409(http):
    """Found by the fuzzing above: the answer was right, the document lacked it."""
    answer = http.delete("/v1/cluster/nodes/n9")
    assert answer.status_code == 409
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"] == "conflict"
    declared = http.get("/v1/openapi.json").json()["paths"]["/v1/cluster/nodes/{node_id}"]["delete"]["responses"]
    assert "409" in declared


def test_a_start_at_before_1970_is_400_and_the_server_serves_on(http, server):
    """Found by the fuzzing above (with more examples): a bound on stored
    schedule times stopped the node on this create. Such a start is now
    outside the stored time domain (docs/api.md "Times"): 400 at the field."""
    body = job_body(schedule={"every_s": 444010, "start_at": "0041-08-03T04:01:20Z"})
    answer = http.post("/v1/jobs", json=body)
    assert answer.status_code == 400 and [e["loc"] for e in answer.json()["errors"]] == ["schedule.start_at"]
    assert http.get("/readyz").status_code == 200
    assert server.proc.poll() is None


def test_a_claim_naming_a_queue_twice_claims_its_runs_once(http):
    """Found by the fuzzing above (with more examples): a queue listed twice
    whose runs ran out mid-claim answered 500."""
    queue = unique("twice")
    for _ in range(2):
        body = job_body(target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"})
        assert http.post("/v1/jobs", json=body).status_code == 201
    claim = {"worker": "w", "queues": [queue, queue, queue], "max_runs": 10, "wait_s": 5}
    runs = http.post("/v1/claim", json=claim).json()["runs"]
    while len(runs) < 2:  # the second run may fall due a moment later
        more = http.post("/v1/claim", json=claim)
        assert more.status_code == 200, more.text
        runs += more.json()["runs"]
    assert len({run["id"] for run in runs}) == len(runs) == 2


@pytest.mark.parametrize(
    "target",
    ["https://T\u0083\U0002a9f1zr/x", "http://a\x1fb/", "http://a b/", "http://ex\u00e4mple.org/"],
    ids=["not IDNA", "control character", "space", "not ASCII"],
)
def test_a_url_target_the_executor_cannot_send_to_is_refused(http, server, target):
    """Found by the fuzzing above: such a job was created, and the HTTP
    executor's client raised on its URL when it fell due, stopping the node."""
    body = job_body(target=target, schedule={"at": "2020-01-01T00:00:00Z"})
    answer = http.post("/v1/jobs", json=body)
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["loc"] == "target"
    assert server.proc.poll() is None


@pytest.mark.parametrize(
    ("path", "loc"),
    [("/v1/events?after=2\u00b3", "query.after"), ("/v1/jobs?limit=\u00b9", "query.limit"),
     ("/v1/jobs?cursor=x&limit=\u0663", "query.limit")],
    ids=["superscript cursor", "superscript limit", "arabic-indic limit"],
)
def test_digits_that_are_not_ascii_are_a_400(http, path, loc):
    """Found by the fuzzing above: str.isdigit() let "2³" through to int(),
    which refused it with a 500."""
    answer = http.get(path)
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["loc"] == loc


def test_a_runs_cursor_of_non_ascii_digits_is_a_400(http, known_ids):
    answer = http.get(f"/v1/jobs/{known_ids['id']}/runs", params={"cursor": "\u00b2"})
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["loc"] == "query.cursor"
