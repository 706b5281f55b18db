"""Peer frames: a corrupt frame is dropped and counted, never stepped; only
a broken framing (an oversized length, a stream cut inside a frame) ends
the stream, with a 4xx error."""

import contextlib
import struct

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzing import examples_max, garbage, mutated
from tempo import errors, limits
from tempo.engine.commands import DeleteJob, encode_entry
from tempo.net.api import Api, _entry_problem
from tempo.net.asgi import Request
from tempo.net.auth import PeerAuth
from tempo.net.peer import EntryCheck, FrameReader, encode_frames
from tempo.raft import (
    MESSAGE_DECODER,
    MESSAGE_ENCODER,
    AppendRequest,
    ConfChange,
    Entry,
    EntryKind,
    Heartbeat,
    VoteRequest,
    malformed,
)

JOB = "j_01H0000000000000000000000A"
node_ids = st.integers(1, 5)
terms = st.integers(0, 50)


@st.composite
def append_requests(draw: st.DrawFn) -> AppendRequest:
    """A well-formed append: consecutive entries whose terms never fall."""
    term = draw(terms)
    prev_term = draw(st.integers(0, term))
    prev_index = draw(st.integers(0, 1000))
    entries = []
    entry_term = prev_term
    for index in range(prev_index + 1, prev_index + 1 + draw(st.integers(0, 4))):
        entry_term = draw(st.integers(entry_term, term))
        if draw(st.booleans()):
            data = encode_entry([DeleteJob(draw(st.integers(0, limits.time_ms_max)), "default", JOB)])
            entries.append(Entry(entry_term, index, EntryKind.NORMAL, data))
        else:
            change = ConfChange(draw(st.integers(0, 1)), draw(node_ids))
            entries.append(Entry(entry_term, index, EntryKind.CONF_CHANGE, MESSAGE_ENCODER.encode(change)))
    src, dst = draw(st.lists(node_ids, min_size=2, max_size=2, unique=True))
    return AppendRequest(term, src, dst, prev_index, prev_term, entries, draw(st.integers(0, 2000)))


@st.composite
def heartbeats(draw: st.DrawFn) -> Heartbeat:
    src, dst = draw(st.lists(node_ids, min_size=2, max_size=2, unique=True))
    return Heartbeat(draw(terms), src, dst, draw(st.integers(0, 2000)), draw(st.binary(max_size=8)))


valid_messages = st.one_of(append_requests(), heartbeats())
valid_frames = valid_messages.map(MESSAGE_ENCODER.encode)


def _well_formed(message) -> bool:
    return malformed(message) is None and all(
        _entry_problem(e.data) is None
        for e in getattr(message, "entries", ())
        if e.kind == EntryKind.NORMAL and e.data
    )


@settings(max_examples=examples_max, derandomize=True)
@given(frames=st.lists(garbage(valid_frames), min_size=1, max_size=5), chunk=st.integers(1, 64))
def test_corrupt_frames_are_dropped_and_the_others_delivered(frames, chunk):
    """The framing stays intact (each frame carries its true length), so
    every frame is either delivered well formed or dropped and counted."""
    reader = FrameReader(_entry_problem)
    stream = encode_frames(frames)
    delivered = []
    for at in range(0, len(stream), chunk):
        delivered += reader.feed(stream[at : at + chunk])
    reader.close()
    assert len(delivered) + reader.dropped == len(frames)
    assert all(_well_formed(m) for m in delivered)


@settings(max_examples=examples_max, derandomize=True)
@given(stream=garbage(valid_frames.map(lambda f: encode_frames([f]))))
def test_a_corrupt_stream_raises_only_the_transport_errors(stream):
    reader = FrameReader(_entry_problem)
    try:
        delivered = reader.feed(stream)
        reader.close()
    except (errors.Invalid, errors.TooLarge):
        return
    assert all(_well_formed(m) for m in delivered)


@settings(max_examples=examples_max, derandomize=True)
@given(message=valid_messages)
def test_well_formed_messages_round_trip_and_pass(message):
    reader = FrameReader(_entry_problem)
    assert reader.feed(encode_frames([MESSAGE_ENCODER.encode(message)])) == [message]
    assert reader.dropped == 0


@settings(max_examples=examples_max, derandomize=True)
@given(frame=mutated(valid_frames))
def test_the_message_decoder_raises_only_its_decode_error(frame):
    with contextlib.suppress(msgspec.DecodeError):  # ValidationError is one too
        MESSAGE_DECODER.decode(frame)


def _frame(message) -> bytes:
    return encode_frames([MESSAGE_ENCODER.encode(message)])


def _raw_frame(fields: list) -> bytes:
    return encode_frames([msgspec.msgpack.encode(fields)])


GOOD = Heartbeat(3, 1, 2, 0)
DATA = encode_entry([DeleteJob(1, "default", JOB)])


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(_raw_frame(["hb", -1, 1, 2, 0, b""]), id="negative term"),
        pytest.param(_raw_frame(["hb", 3, 0, 2, 0, b""]), id="no sender"),
        pytest.param(_frame(Heartbeat(3, 2, 2, 0)), id="to itself"),
        pytest.param(_frame(AppendRequest(3, 1, 2, 5, 2, [Entry(3, 7, 0, DATA)], 0)), id="a gap"),
        pytest.param(_frame(AppendRequest(3, 1, 2, 5, 2, [Entry(1, 6, 0, DATA)], 0)), id="term falls"),
        pytest.param(_frame(AppendRequest(3, 1, 2, 5, 2, [Entry(4, 6, 0, DATA)], 0)), id="term after leader's"),
        pytest.param(_raw_frame(["app", 3, 1, 2, 5, 2, [[3, 6, 7, b""]], 0]), id="unknown entry kind"),
        pytest.param(_frame(AppendRequest(3, 1, 2, 5, 2, [Entry(3, 6, 1, b"junk")], 0)), id="bad conf change"),
        pytest.param(_frame(AppendRequest(3, 1, 2, 5, 2, [Entry(3, 6, 0, b"\xc1")], 0)), id="entry not commands"),
        pytest.param(_frame(VoteRequest(3, 1, 2, 9, 4)), id="vote with a later log term"),
        pytest.param(encode_frames([b"\x93\xa2hb"]), id="cut inside the message"),
    ],
)
def test_a_corrupt_frame_between_good_ones_is_dropped(frame):
    reader = FrameReader(_entry_problem)
    assert reader.feed(_frame(GOOD) + frame + _frame(GOOD)) == [GOOD, GOOD]
    assert reader.dropped == 1


def test_an_oversized_length_ends_the_stream():
    reader = FrameReader()
    with pytest.raises(errors.TooLarge):
        reader.feed(struct.pack(">I", limits.peer_frame_bytes_max + 1))


def test_a_stream_cut_inside_a_frame_is_invalid():
    reader = FrameReader()
    assert reader.feed(_frame(GOOD)[:-1]) == []
    with pytest.raises(errors.Invalid):
        reader.close()


async def test_the_raft_route_steps_good_frames_and_counts_the_corrupt_one():
    """Api.raft as a peer's stream reaches it: in chunks that split frames."""
    stepped = []
    api = Api.__new__(Api)  # only what the raft route uses
    api.on_peer_messages = stepped.extend
    api.peer_auth = PeerAuth(None)
    api.peer_frames_dropped = 0
    api.entry_check = EntryCheck(_entry_problem)
    api._peer_streams, api._peer_streams_closed = set(), False
    body = _frame(GOOD) + _raw_frame(["hb", -1, 1, 2, 0, b""]) + _frame(GOOD)
    chunks = [body[:7], body[7:20], body[20:]]
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        return messages.pop(0)

    response = await api.raft(Request("POST", "/v1/raft", {}, {}), receive)
    assert response.status == 204
    assert stepped == [GOOD, GOOD]
    assert api.peer_frames_dropped == 1


async def test_closing_the_peer_streams_ends_an_open_one_and_refuses_new_ones():
    """A stopping node ends its peers' streams instead of waiting for them."""
    api = Api.__new__(Api)  # only what the raft route uses
    api.on_peer_messages = [].extend
    api.peer_auth = PeerAuth(None)
    api.peer_frames_dropped = 0
    api.entry_check = EntryCheck(_entry_problem)
    api._peer_streams, api._peer_streams_closed = set(), False
    outcome = []

    async def receive():
        await trio.sleep_forever()  # a stream with nothing to say yet

    async def stream():
        try:
            await api.raft(Request("POST", "/v1/raft", {}, {}), receive)
        except errors.ShuttingDown as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream)
        await trio.testing.wait_all_tasks_blocked()
        assert api.close_peer_streams() == 1
    assert len(outcome) == 1
    with pytest.raises(errors.ShuttingDown):
        await api.raft(Request("POST", "/v1/raft", {}, {}), receive)
