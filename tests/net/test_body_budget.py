"""The byte budget for request bodies in flight (docs/operations.md
"Limits"): a request whose declared body does not fit what is left is `503`
with Retry-After before a byte of it is read; a body without a length
(chunked) takes its share as it arrives and is refused once over; every
request gives its share back once answered, however it ended.

In-process (the ASGI app called as hypercorn would call it), then against a
real `tempo serve` with a small budget."""

import contextlib
import json
import socket
import threading

import httpx
import pytest
import trio
import trio.testing

from conftest import configured_server, metric, wait_for
from tempo.config import HttpLimits

from .asgi_calls import call, standalone_api
from .raw_http import read_answer

BUDGET_BYTES = 1000


@pytest.fixture
def api(tmp_path):
    with standalone_api(tmp_path / "data", http_limits=HttpLimits(body_bytes_in_flight_max=BUDGET_BYTES)) as made:
        yield made


def preview_body(size: int) -> bytes:
    """A valid `POST /v1/schedules/preview` body of exactly `size` bytes."""
    body = b'{"schedule": {"every_s": 60}, "count": 1}'
    assert len(body) <= size
    return body + b" " * (size - len(body))


def length(size: int) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", str(size).encode())]


class Holder:
    """A request whose body stops arriving after its first chunk until
    `go` is set: it holds its share of the budget meanwhile."""

    def __init__(self, api, chunks: list[bytes], headers):
        self.api, self.chunks, self.headers = api, chunks, headers
        self.go = trio.Event()
        self.answer = None

    async def on_receive(self, n: int) -> None:
        if n == 1:
            await self.go.wait()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        self.answer = await call(
            self.api, "POST", "/v1/schedules/preview", self.chunks, self.headers, on_receive=self.on_receive
        )


async def test_a_declared_body_over_what_is_left_is_503_with_none_of_it_held(api):
    body = preview_body(600)
    holder = Holder(api, [body[:100], body[100:]], length(600))
    async with trio.open_nursery() as nursery:
        await nursery.start(holder.run)
        await trio.testing.wait_all_tasks_blocked()
        assert api.bodies.used_bytes == 600
        refused = await call(api, "POST", "/v1/schedules/preview", [preview_body(500)], length(500))
        # Read and dropped (discard_body), so the answer reaches the client;
        # none of it is held.
        assert refused.status == 503 and refused.receives == 1
        assert api.bodies.used_bytes == 600
        assert refused.problem()["type"] == "overloaded"
        assert refused.headers[b"retry-after"] == b"1"
        # What fits is served meanwhile.
        fits = await call(api, "POST", "/v1/schedules/preview", [preview_body(400)], length(400))
        assert fits.status == 200, fits.body
        holder.go.set()
    assert holder.answer.status == 200
    assert api.bodies.used_bytes == 0
    again = await call(api, "POST", "/v1/schedules/preview", [preview_body(500)], length(500))
    assert again.status == 200
    assert api.bodies.refused == 1


async def test_a_chunked_body_takes_its_share_as_it_arrives_and_is_refused_once_over(api):
    body = preview_body(600)
    holder = Holder(api, [body[:100], body[100:]], length(600))
    async with trio.open_nursery() as nursery:
        await nursery.start(holder.run)
        await trio.testing.wait_all_tasks_blocked()
        chunked = preview_body(800)
        chunks = [chunked[i : i + 200] for i in range(0, 800, 200)]
        refused = await call(api, "POST", "/v1/schedules/preview", chunks, [(b"content-type", b"application/json")])
        assert refused.status == 503 and refused.problem()["type"] == "overloaded"
        assert refused.headers[b"retry-after"] == b"1"
        # 200 and 400 bytes fit beside the 600 held; 600 does not, and the
        # rest is read and dropped.
        assert refused.receives == 4
        assert api.bodies.used_bytes == 600
        holder.go.set()
    assert api.bodies.used_bytes == 0
    served = await call(api, "POST", "/v1/schedules/preview", chunks, [(b"content-type", b"application/json")])
    assert served.status == 200


async def test_a_declared_body_over_the_route_bound_is_413_with_none_of_it_held(api):
    answer = await call(api, "POST", "/v1/jobs", [b"{}"], length((1 << 20) + 1))
    assert answer.status == 413 and answer.receives == 1  # read and dropped
    assert api.bodies.used_bytes == 0 and api.bodies.refused == 0


@pytest.mark.parametrize(
    ("chunks", "status"),
    [
        ([b'{"count": "x"}'], 400),  # read whole, refused by validation
        ([b'{"sched', None], 400),  # the client goes away in the middle of it
    ],
    ids=["invalid body", "client gone"],
)
async def test_every_way_a_request_ends_gives_its_share_back(api, chunks, status):
    answer = await call(api, "POST", "/v1/schedules/preview", chunks, length(300))
    assert answer.status == status
    assert api.bodies.used_bytes == 0


async def test_a_request_that_fails_unexpectedly_gives_its_share_back(api, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    # Where the API looks it up: it imports the name from the engine's face.
    monkeypatch.setattr("tempo.net.jobs_api.preview_occurrences", broken)
    answer = await call(api, "POST", "/v1/schedules/preview", [preview_body(300)], length(300))
    assert answer.status == 500
    assert api.bodies.used_bytes == 0


async def test_a_body_that_stops_arriving_gives_its_share_back(api, autojump_clock):
    async def stall(n: int) -> None:
        if n == 1:
            await trio.sleep_forever()

    answer = await call(
        api, "POST", "/v1/schedules/preview", [b"{", b"}"], length(300), on_receive=stall,
    )
    assert answer.status == 408
    assert api.bodies.used_bytes == 0


async def test_the_budget_is_in_metrics(api):
    text = (await call(api, "GET", "/metrics")).body.decode()
    assert "tempo_http_body_bytes_in_flight 0" in text.splitlines()
    assert f"tempo_http_body_bytes_in_flight_max {BUDGET_BYTES}" in text.splitlines()
    assert "tempo_http_bodies_refused_total 0" in text.splitlines()


# -- a real node with a small budget ---------------------------------------------

BUDGET_MIB = 32  # the least the config allows: one batch body of the largest size
CONFIG = f"[http]\nbody_bytes_in_flight_max = {BUDGET_MIB << 20}\nbody_read_timeout_s = 30.0\n"
LARGE_BYTES = 20 << 20  # two do not fit at once


@pytest.fixture(scope="module")
def budget_server(tmp_path_factory):
    with configured_server(tmp_path_factory.mktemp("budget"), CONFIG) as srv:
        yield srv


def batch_body(size: int) -> bytes:
    """A valid batch of 100 jobs whose payloads pad it to exactly `size` bytes."""
    item = {"target": "queue:budget", "schedule": {"at": "2031-01-01T00:00:00Z"}, "payload": ""}
    overhead = len(json.dumps({"jobs": [item] * 100}).encode())
    item["payload"] = "x" * ((size - overhead) // 100)
    body = json.dumps({"jobs": [item] * 100}).encode()
    return body + b" " * (size - len(body))


def head(size: int | None) -> bytes:
    framing = f"content-length: {size}" if size is not None else "transfer-encoding: chunked"
    return f"POST /v1/jobs/batch HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{framing}\r\n\r\n".encode()


def in_flight(http: httpx.Client) -> float:
    return metric(http, "tempo_http_body_bytes_in_flight")


def check_refused(status: int, headers: dict, body: bytes) -> None:
    assert status == 503, body
    assert headers["content-type"] == "application/problem+json"
    assert json.loads(body)["type"] == "overloaded"
    assert headers["retry-after"] == "1"


def test_large_bodies_beside_one_held_are_503_with_none_of_them_held(budget_server):
    body = batch_body(LARGE_BYTES)
    with httpx.Client(base_url=budget_server.url, timeout=30) as http, \
            socket.create_connection(("127.0.0.1", budget_server.port), timeout=30) as holder:
        holder.sendall(head(LARGE_BYTES) + body[: 1 << 20])  # then nothing, for now
        wait_for(lambda: in_flight(http) == LARGE_BYTES)
        # Declared lengths that do not fit: answered from the headers alone.
        for _ in range(4):
            with socket.create_connection(("127.0.0.1", budget_server.port), timeout=10) as sock:
                sock.sendall(head(LARGE_BYTES))
                check_refused(*read_answer(sock))
        # A chunked body is read until it does not fit.
        with socket.create_connection(("127.0.0.1", budget_server.port), timeout=10) as sock:
            sock.sendall(head(None))
            piece = b"x" * (1 << 20)
            try:
                for _ in range(BUDGET_MIB):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused while this was sending
            check_refused(*read_answer(sock))
        wait_for(lambda: in_flight(http) == LARGE_BYTES)  # what it read is given back
        # Small requests fit beside the one held.
        small = http.post("/v1/jobs", json={"target": "queue:budget", "schedule": {"at": "2031-01-01T00:00:00Z"}})
        assert small.status_code == 201, small.text
        holder.sendall(body[1 << 20 :])
        status, _, answer = read_answer(holder)
        assert status == 200, answer
        assert len(json.loads(answer)["results"]) == 100
        wait_for(lambda: in_flight(http) == 0)
        # Once the held body is answered, a large one is served again.
        retried = http.post("/v1/jobs/batch", content=body, headers={"content-type": "application/json"})
        assert retried.status_code == 200
        assert in_flight(http) == 0


def test_concurrent_large_bodies_get_200_or_503_and_the_budget_comes_back(budget_server):
    body = batch_body(LARGE_BYTES)
    answers: list[tuple[int, dict, bytes]] = []

    def one() -> None:
        with socket.create_connection(("127.0.0.1", budget_server.port), timeout=60) as sock:
            # A refusal (503) may come before the body was read.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(head(LARGE_BYTES) + body)
            answers.append(read_answer(sock))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(status for status, _, _ in answers)
    assert len(statuses) == 6 and set(statuses) <= {200, 503}, statuses
    assert 200 in statuses
    for answer in answers:
        if answer[0] == 503:
            check_refused(*answer)
    with httpx.Client(base_url=budget_server.url, timeout=30) as http:
        wait_for(lambda: in_flight(http) == 0)
        retried = http.post("/v1/jobs/batch", content=body, headers={"content-type": "application/json"})
        assert retried.status_code == 200
