"""The clients' side of idempotent claims (docs/semantics.md "Idempotent
claims"): the worker library and `Client.claim` send a new `claim_key` with
each claim and send a claim whose outcome is unknown again with the same
key; the worker waits out `Retry-After` on an empty claim answer. Driven
against an in-process fake server, so the lost answers are exact."""

import json
import random

import httpx
import msgspec
import pytest
import trio

from tempo import worker as worker_module
from tempo.net import client as client_module
from tempo.net.client import Client, OutcomeUnknown
from tempo.worker import Worker

RUN = {
    "id": "r_1", "job_id": "j_1", "nominal_at": "2027-01-01T00:00:00.000Z", "due_at": "2027-01-01T00:00:00.000Z",
    "status": "claimed", "attempt": 1, "worker": "w1", "lease_expires_at": "2027-01-01T00:01:00.000Z",
    "started_at": "2027-01-01T00:00:00.000Z", "finished_at": None, "output": None, "error": None,
    "target": "queue:q", "payload": None, "lease_s": 60,
}


class FakeServer:
    """Answers the worker's claims from a script; heartbeats and results
    are accepted; signals polls are not served."""

    def __init__(self, script: list):
        self.script = script
        self.claims: list[tuple[float, dict]] = []
        self.results: list[dict] = []
        self.done = trio.Event()

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = msgspec.msgpack.decode(request.content)
        if request.url.path == "/v1/claim":
            self.claims.append((trio.current_time(), body))
            if not self.script:
                self.done.set()
                return httpx.Response(200, json={"runs": []}, headers={"retry-after": "1"})
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step
        if request.url.path == "/v1/signals":
            # As a server without signals: the worker learns cancels from heartbeats.
            return httpx.Response(404, json={"type": "not_found", "detail": "no such path /v1/signals"})
        if request.url.path == "/v1/results":
            self.results += body["results"]
            return httpx.Response(200, json={"accepted": [r["run_id"] for r in body["results"]], "rejected": []})
        return httpx.Response(200, json={"accepted": [h["run_id"] for h in body["heartbeats"]], "rejected": []})


def fake_worker(server: FakeServer, handlers) -> Worker:
    made = Worker(["http://n1:1", "http://n2:2"], "w1", handlers, wait_s=0, rng=random.Random(7))
    made.transport._http = httpx.AsyncClient(transport=httpx.MockTransport(server.handle))
    return made


async def test_a_claim_whose_answer_was_lost_is_sent_again_with_its_key(autojump_clock):
    server = FakeServer([
        httpx.ReadTimeout("the answer was lost"),
        httpx.Response(500, json={"type": "internal"}),
        httpx.Response(503, json={"type": "not_leader"}),
        httpx.Response(200, json={"runs": [RUN]}),
        httpx.Response(200, json={"runs": []}, headers={"retry-after": "1"}),
    ])
    ran = []

    async def handler(run):
        ran.append(run["id"])
        return "ok"

    made = fake_worker(server, {"q": handler})
    async with trio.open_nursery() as nursery:
        await nursery.start(made.run)
        with trio.fail_after(30):
            await server.done.wait()
        await made.stop(grace_s=1)
    keys = [body["claim_key"] for _, body in server.claims]
    # Four sends of one claim (lost, 500, 503, answered), then new claims.
    assert len(set(keys[:4])) == 1 and keys[4] != keys[0] and keys[5] != keys[4]
    assert all(k and len(k) <= 128 for k in keys)
    assert ran == ["r_1"] and [r["run_id"] for r in server.results] == ["r_1"]
    # The empty answer's Retry-After: 1 was waited out before the next claim.
    assert server.claims[5][0] - server.claims[4][0] >= 1.0


async def test_a_worker_told_to_claim_without_keys_sends_none_and_runs_what_it_claims(autojump_clock):
    """`claim_keys=False` (`tempo loadgen --no-claim-keys`, for a server
    from before claim keys, which refuses the field)."""
    server = FakeServer([httpx.Response(200, json={"runs": [RUN]})])
    ran = []

    async def handler(run):
        ran.append(run["id"])
        return "ok"

    made = Worker(["http://n1:1"], "w1", {"q": handler}, wait_s=0, rng=random.Random(7), claim_keys=False)
    made.transport._http = httpx.AsyncClient(transport=httpx.MockTransport(server.handle))
    async with trio.open_nursery() as nursery:
        await nursery.start(made.run)
        with trio.fail_after(30):
            await server.done.wait()
        await made.stop(grace_s=1)
    assert len(server.claims) >= 2
    assert all(set(body) == {"worker", "queues", "max_runs", "wait_s"} for _, body in server.claims)
    assert ran == ["r_1"] and [r["run_id"] for r in server.results] == ["r_1"]


async def test_a_claim_no_server_answers_gives_up_after_its_bound_and_claims_anew(autojump_clock):
    from tempo import limits

    server = FakeServer([httpx.ConnectError("down")] * 10_000)
    made = fake_worker(server, {"q": lambda run: None})
    async with trio.open_nursery() as nursery:
        await nursery.start(made.run)
        await trio.sleep(limits.claim_retry_s_max * 2.5)
        await made.stop(grace_s=0)
    keys = [body["claim_key"] for _, body in server.claims]
    times = {}
    for at_s, body in server.claims:
        times.setdefault(body["claim_key"], []).append(at_s)
    assert 2 <= len(times) <= 4
    for sent in list(times.values())[:-1]:
        assert sent[-1] - sent[0] <= limits.claim_retry_s_max
    assert len(keys) > len(times)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"max_runs": 0}, ValueError, "max_runs"),
        ({"max_runs": 1001}, ValueError, "max_runs"),
        ({"max_runs": 1.5}, TypeError, "max_runs"),
        ({"concurrency": 0}, ValueError, "concurrency"),
        ({"wait_s": 61}, ValueError, "wait_s"),
        ({"worker_id": ""}, ValueError, "worker_id"),
        ({"worker_id": 7}, TypeError, "worker_id"),
        ({"handlers": {}}, ValueError, "handlers"),
        ({"urls": []}, ValueError, "urls"),
    ],
)
def test_bad_worker_arguments_raise_exceptions_naming_the_parameter(kwargs, error, name):
    """Exceptions, not `assert`: `python -O` strips asserts."""
    args = {"urls": ["http://127.0.0.1:1"], "worker_id": "w1", "handlers": {"q": None}} | kwargs
    with pytest.raises(error, match=name):
        Worker(args.pop("urls"), args.pop("worker_id"), args.pop("handlers"), **args)


def test_a_command_handler_needs_a_command():
    with pytest.raises(ValueError, match="argv"):
        worker_module.command_handler([])


def test_one_unavailable():
    assert worker_module.Unavailable is client_module.Unavailable


def test_client_claim_sends_a_claim_with_an_unknown_outcome_again_with_its_key():
    sent: list[dict] = []
    script: list = [httpx.ReadError("broke"), httpx.Response(502, text="bad gateway"), httpx.Response(200, json={"runs": [RUN]})]

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        step = script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    with Client(["http://n1:1"], transport=httpx.MockTransport(handle), rng=random.Random(1)) as client:
        runs = client.claim("w1", ["q"], max_runs=5)
        assert runs == [RUN]
        assert len(sent) == 3 and len({s["claim_key"] for s in sent}) == 1
        assert sent[0] | {"claim_key": None} == {"worker": "w1", "queues": ["q"], "max_runs": 5, "wait_s": 0,
                                                  "claim_key": None}
        # Without a key, a claim whose connection broke is not sent again.
        script[:] = [httpx.ReadError("broke")]
        with pytest.raises(OutcomeUnknown):
            client.request("POST", "/v1/claim", {"worker": "w1", "queues": ["q"]})
