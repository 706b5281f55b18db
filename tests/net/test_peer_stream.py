"""The peer sender against a fake peer on a real loopback socket: after the
peer cuts a stream without answering (a restart), the sender opens a new one
and the messages queued since reach the peer; a peer that refuses every
stream stays visible in the log for as long as it does."""

import logging
from functools import partial

import h11
import trio

from tempo import limits
from tempo.net.peer import FrameReader, PeerTransport
from tempo.raft import Heartbeat

delivery_timeout_s = 10.0


class FakePeer:
    """Serves `/v1/raft` streams: cuts the first `cut` of them after their
    first frame, without an answer; steps the frames of the others."""

    def __init__(self, cut: int, refuse: bool = False) -> None:
        self.cut = cut
        self.refuse = refuse
        self.streams = 0
        self.received: list = []
        self.arrived = trio.Event()

    async def handle(self, stream: trio.SocketStream) -> None:
        self.streams += 1
        cutting = self.streams <= self.cut
        conn = h11.Connection(h11.SERVER)
        reader = FrameReader()
        async with stream:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Data):
                    messages = reader.feed(bytes(event.data))
                    if messages and cutting:
                        return  # the peer goes away in the middle of the stream
                    if messages and self.refuse:
                        # An error answered before the body ends (what a
                        # raft route that fails to step a message does).
                        await stream.send_all(conn.send(h11.Response(
                            status_code=500, headers=[("content-length", "0"), ("connection", "close")])))
                        await stream.send_all(conn.send(h11.EndOfMessage()))
                        return
                    self.received += messages
                    if messages:
                        self.arrived.set()
                if isinstance(event, h11.EndOfMessage):
                    await stream.send_all(conn.send(h11.Response(status_code=204, headers=[])))
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                    return


async def _heartbeats(transport: PeerTransport, sent: list[int]) -> None:
    # A leader's heartbeats, one a tick, as the replica loop sends them.
    k = 0
    while True:
        k += 1
        transport.send([Heartbeat(1, 1, 2, k, b"")])
        sent.append(k)
        await trio.sleep(0.1)


async def test_after_a_cut_stream_the_next_messages_arrive(nursery) -> None:
    peer = FakePeer(cut=1)
    [listener] = await nursery.start(partial(trio.serve_tcp, peer.handle, 0, host="127.0.0.1"))
    port = listener.socket.getsockname()[1]
    transport = PeerTransport({2: f"http://127.0.0.1:{port}"})
    await nursery.start(transport.run)
    sent: list[int] = []
    nursery.start_soon(_heartbeats, transport, sent)
    with trio.fail_after(delivery_timeout_s):
        await peer.arrived.wait()
    assert peer.streams >= 2
    assert all(isinstance(m, Heartbeat) for m in peer.received)
    # Messages keep arriving on the new stream.
    seen = len(peer.received)
    await trio.sleep(1.0)
    assert len(peer.received) >= seen + 5, (seen, len(peer.received), peer.streams)


async def test_a_peer_that_refuses_every_stream_is_logged_while_it_does(nursery, monkeypatch, caplog) -> None:
    monkeypatch.setattr(limits, "peer_failure_log_s", 0.5, raising=False)
    peer = FakePeer(cut=0, refuse=True)
    [listener] = await nursery.start(partial(trio.serve_tcp, peer.handle, 0, host="127.0.0.1"))
    port = listener.socket.getsockname()[1]
    transport = PeerTransport({2: f"http://127.0.0.1:{port}"})
    await nursery.start(transport.run)
    with caplog.at_level(logging.WARNING, logger="tempo.peer"):
        nursery.start_soon(_heartbeats, transport, [])
        await trio.sleep(3.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "tempo.peer"]
    assert peer.streams >= 3
    # The first failure, and then one line per half second while they go on.
    assert len(lines) >= 3, lines
    assert all("500" in line and "failures in a row" in line for line in lines), lines
