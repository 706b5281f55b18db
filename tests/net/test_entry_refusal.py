"""A follower that still cannot decode its leader's entry (a node of another
version) must not spin (issue 26 finding 2): the leader sends it about ten
times a second; the follower decodes and logs it once, counts it once in
/metrics, drops every copy unread, and answers /readyz 503 with the reason
until it applies past that entry."""

import logging
from types import SimpleNamespace

import msgspec
import pytest

from tempo.engine.commands import encode_entry
from tempo.net.api import Api, _entry_problem
from tempo.net.asgi import Request
from tempo.net.auth import PeerAuth
from tempo.net.peer import EntryCheck, encode_frames
from tempo.raft import MESSAGE_ENCODER, AppendRequest, Entry, EntryKind, Heartbeat

JOB = "j_01H0000000000000000000000A"
# An entry only the follower refuses: a backfill slot before 1970, as a
# leader before issue 26 appended it (msgspec encodes it; `Ms` refuses it).
PLANTED = msgspec.msgpack.encode([["backfill_job", 1_800_000_000_000, "default", JOB, [-3_600_000]]])
GOOD = encode_entry([])


def append(index: int, data: bytes, term: int = 3) -> bytes:
    message = AppendRequest(term, 1, 2, index - 1, 3, [Entry(term, index, EntryKind.NORMAL, data)], index - 1)
    return encode_frames([MESSAGE_ENCODER.encode(message)])


def make_api(applied: list[int]) -> tuple[Api, list]:
    stepped: list = []
    api = Api.__new__(Api)  # only what the raft route, /readyz and the check use
    api.on_peer_messages = stepped.extend
    api.peer_auth = PeerAuth(None)
    api.peer_frames_dropped = 0
    api.entry_check = EntryCheck(_entry_problem)
    api._peer_streams, api._peer_streams_closed = set(), False
    api.started = True
    api.jobs = SimpleNamespace(committer=SimpleNamespace(storage=SimpleNamespace(refused=None), stalled=lambda: None))
    api.node = SimpleNamespace(view=lambda: SimpleNamespace(applied_index=applied[0]), not_ready=lambda: None)
    return api, stepped


async def stream(api: Api, body: bytes) -> None:
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop(0)

    response = await api.raft(Request("POST", "/v1/raft", {}, {}), receive)
    assert response.status == 204


async def test_a_refused_entry_is_decoded_logged_and_counted_once_and_the_node_is_not_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert _entry_problem(PLANTED) is not None and "Expected `int` >= 0" in _entry_problem(PLANTED)
    applied = [4]
    api, stepped = make_api(applied)
    decodes = []
    check = api.entry_check
    check._entry_problem = lambda data: decodes.append(data) or _entry_problem(data)
    ready = await api.readyz(Request("GET", "/readyz", {}, {}))
    assert ready.status == 200
    with caplog.at_level(logging.WARNING):
        for _ in range(10):  # a second of the leader's resends, on new streams and within one
            await stream(api, append(5, PLANTED))
        await stream(api, append(5, PLANTED) * 5 + encode_frames([MESSAGE_ENCODER.encode(Heartbeat(3, 1, 2, 4))]))
    assert [type(m) for m in stepped] == [Heartbeat]  # no copy of the entry was stepped
    assert len(decodes) == 1, "decoded once, its copies dropped unread"
    refusals = [r for r in caplog.records if "does not decode on this node" in r.message]
    assert len(refusals) == 1 and refusals[0].levelname == "ERROR"
    assert check.refused == 1 and api.peer_frames_dropped == 15
    ready = await api.readyz(Request("GET", "/readyz", {}, {}))
    assert ready.status == 503
    reason = msgspec.json.decode(ready.body)["reason"]
    assert reason.startswith("the leader's log entry 5 (term 3) does not decode on this node: ")
    assert "Expected `int` >= 0" in reason
    # A new leader (term 4) replaced the entry, and this node applied past it: ready again.
    await stream(api, append(5, GOOD, term=4))
    assert [type(m) for m in stepped] == [Heartbeat, AppendRequest]
    applied[0] = 5
    assert (await api.readyz(Request("GET", "/readyz", {}, {}))).status == 200


async def test_another_refused_entry_is_logged_and_counted_again(caplog: pytest.LogCaptureFixture) -> None:
    api, _ = make_api([4])
    with caplog.at_level(logging.ERROR):
        for index in (5, 5, 6, 6):
            await stream(api, append(index, PLANTED))
    assert api.entry_check.refused == 2
    assert len([r for r in caplog.records if "does not decode on this node" in r.message]) == 2
