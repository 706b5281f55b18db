"""Raft messages between nodes, over the node's one HTTP port.

Each node keeps one sender task per peer, which holds a long-lived streaming
POST to the peer's `/v1/raft` open (chunked, as etcd streams its raft
messages): its body is length-prefixed MessagePack frames, one raft message
per frame, written as they are queued, and the peer steps each message as its
frame arrives. Messages for a peer wait in a bounded queue; everything queued
while a write was in progress goes out in the next one. Raft tolerates lost
messages, so a full queue drops its oldest frame and a broken stream drops what
was in it; the sender then backs off (with jitter) before it opens a new one.
Every write is bounded in time (a peer that stops reading breaks the stream),
and a stream is closed and reopened every `peer_stream_s`.

Outgoing connections start from the node's own listen address when that is one
IP, so a peer (or a fault injector in front of it) sees which node calls.
"""

import ipaddress
import logging
import random
import ssl
import struct
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import msgspec
import trio

from tempo import errors, limits
from tempo.net.tls import ssl_error_of
from tempo.raft import (
    MESSAGE_DECODER,
    MESSAGE_ENCODER,
    AppendRequest,
    Entry,
    EntryKind,
    Message,
    malformed,
)

log = logging.getLogger("tempo.peer")
_LEN = struct.Struct(">I")
FRAMES = "application/x-tempo-raft"


def encode_frames(frames: list[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(frame)) + frame for frame in frames)


class EntryCheck:
    """A follower's check of its leader's entries, shared by every stream
    of the node (docs/operations.md "Readiness and health").

    A leader decodes each entry before it proposes it, with the decoder
    every node has (engine/commandlog.py `Intake.checked`), so a follower
    refuses one only when it decodes otherwise: a node of another version,
    or damage. The leader sends the entry again and again (about ten times
    a second); the follower must not spin on it. Each entry (term, index)
    is decoded and logged once: the latest refused one is remembered and
    its copies are dropped unread. It is counted once (`refused`, in
    /metrics), and the node is not ready (`refusal`) until its applied
    index reaches that entry's (a leader that replaced it)."""

    def __init__(self, entry_problem: Callable[[bytes], str | None]) -> None:
        self._entry_problem = entry_problem
        self.refused = 0
        # (term, index, why) of the latest entry refused, or None.
        self.last: tuple[int, int, str] | None = None

    def problem(self, message: AppendRequest) -> str | None:
        """Why `message` carries an entry this node cannot apply, or None."""
        for entry in message.entries:
            if entry.kind != EntryKind.NORMAL or not entry.data:
                continue
            why = self._problem_of(entry)
            if why is not None:
                return why
        return None

    def _problem_of(self, entry: Entry) -> str | None:
        last = self.last
        if last is not None and (last[0], last[1]) == (entry.term, entry.index):
            return last[2]
        why = self._entry_problem(entry.data)
        if why is not None:
            self.refused += 1
            self.last = (entry.term, entry.index, why)
            log.error(
                "the leader's log entry %d (term %d) does not decode on this node, which is not ready until "
                "it applies past it (a node of another version?): %s", entry.index, entry.term, why,
            )
        return why

    def refusal(self, applied_index: int) -> str | None:
        """Why this node is not ready on account of an entry it refused, or None."""
        last = self.last
        if last is None or applied_index >= last[1]:
            return None
        return f"the leader's log entry {last[1]} (term {last[0]}) does not decode on this node: {last[2]}"


class FrameReader:
    """Splits a stream of length-prefixed frames into raft messages, as the
    chunks of a request body arrive.

    A frame that is not a well-formed raft message (it does not decode, or
    `raft.malformed` names what no correct node sends, or an entry's data is
    refused by `entry_problem`) is dropped, logged and counted in `dropped`:
    raft sends again what is still needed, and a corrupt frame is never
    stepped or applied. A length over the frame bound loses the framing, so
    it ends the stream (`errors.TooLarge`), as does a stream that ends inside
    a frame (`errors.Invalid`)."""

    def __init__(
        self, entry_problem: Callable[[bytes], str | None] | None = None, *, entries: EntryCheck | None = None
    ) -> None:
        self._buffer = bytearray()
        self._entry_problem = entry_problem
        # The node's check of its leader's entries, in place of `entry_problem`.
        self._entries = entries
        self.dropped = 0

    def feed(self, chunk: bytes) -> list[Message]:
        buffer = self._buffer
        buffer += chunk
        out: list[Message] = []
        at = 0
        while len(buffer) - at >= _LEN.size:
            (size,) = _LEN.unpack_from(buffer, at)
            if size > limits.peer_frame_bytes_max:
                raise errors.TooLarge.at("", f"a frame of {size} bytes is over {limits.peer_frame_bytes_max}")
            if len(buffer) - at - _LEN.size < size:
                break
            start = at + _LEN.size
            message = self._message(memoryview(buffer)[start : start + size])
            if message is not None:
                out.append(message)
            at = start + size
        del buffer[:at]
        return out

    def _message(self, frame: memoryview) -> Message | None:
        try:
            message = MESSAGE_DECODER.decode(frame)
        except msgspec.MsgspecError as exc:
            self._drop(f"not a raft message: {exc}")
            return None
        problem = malformed(message)
        if problem is None and isinstance(message, AppendRequest):
            if self._entries is not None:
                problem = self._entries.problem(message)
                if problem is not None:
                    self.dropped += 1  # logged once per entry by the check
                    return None
            elif self._entry_problem is not None:
                problem = next(filter(None, map(self._entry_problem, _normal_data(message))), None)
        if problem is not None:
            self._drop(f"{type(message).__name__} from {message.src}: {problem}")
            return None
        return message

    def _drop(self, why: str) -> None:
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 100 == 0:
            log.warning("dropped a corrupt peer frame (%d in this stream): %s", self.dropped, why)

    def close(self) -> None:
        if self._buffer:
            raise errors.Invalid.at("", "the stream ends inside a frame")


def _normal_data(message: AppendRequest) -> Iterator[bytes]:
    return (e.data for e in message.entries if e.kind == EntryKind.NORMAL and e.data)


class _Peer:
    __slots__ = ("dropped", "failing_since_s", "failures", "frames", "id", "logged_at_s", "scope", "sent", "url", "wake")

    def __init__(self, peer_id: int, url: str):
        self.scope = trio.CancelScope()
        self.id = peer_id
        self.url = url.rstrip("/") + "/v1/raft"
        self.frames: deque[bytes] = deque()
        self.wake = trio.Event()
        self.sent = 0
        self.dropped = 0
        self.failures = 0
        # Since when the streams to this peer fail (trio time), and when that
        # was last logged; None while they work.
        self.failing_since_s: float | None = None
        self.logged_at_s = 0.0


class PeerTransport:
    def __init__(
        self,
        peers: dict[int, str],
        *,
        local_address: str | None = None,
        token: str | None = None,
        rng: random.Random | None = None,
        verify: ssl.SSLContext | None = None,
    ):
        """`peers`: raft node ID → URL of every other node; `verify`: the TLS
        context that checks https:// peers (None: httpx's default)."""
        self.peers: dict[int, _Peer] = {}
        self.peers_at_start = peers
        self.local_address = local_address
        self.headers = {"content-type": FRAMES}
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self.rng = rng or random.Random()
        self.verify: ssl.SSLContext | bool = True if verify is None else verify

    def send(self, messages: list[Message]) -> None:
        """Queues messages for their peers; never blocks."""
        for message in messages:
            peer = self.peers.get(message.dst)
            if peer is None:
                continue
            peer.frames.append(MESSAGE_ENCODER.encode(message))
            if len(peer.frames) > limits.peer_queue_frames_max:
                peer.frames.popleft()
                peer.dropped += 1
            peer.wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        transport = httpx.AsyncHTTPTransport(local_address=self.local_address, verify=self.verify) if self.local_address else None
        timeout = httpx.Timeout(limits.peer_timeout_s)
        async with httpx.AsyncClient(transport=transport, timeout=timeout, verify=self.verify) as client, trio.open_nursery() as nursery:
            self._client, self._nursery = client, nursery
            self.set_peers(self.peers_at_start)
            task_status.started()

    def set_peers(self, peers: dict[int, str]) -> None:
        """The cluster's membership changed: start and stop senders to match."""
        for peer_id in list(self.peers):
            if peers.get(peer_id) != self.peers[peer_id].url.removesuffix("/v1/raft"):
                self.peers.pop(peer_id).scope.cancel()
        for peer_id, url in peers.items():
            if peer_id not in self.peers:
                peer = self.peers[peer_id] = _Peer(peer_id, url)
                self._nursery.start_soon(self._sender, peer)

    async def _sender(self, peer: _Peer) -> None:
        with peer.scope:
            await self._send_loop(self._client, peer)

    async def _send_loop(self, client: httpx.AsyncClient, peer: _Peer) -> None:
        """One long-lived streaming POST at a time, reopened after an error
        (with a jittered back-off) or after `peer_stream_s`."""
        backoff_s = limits.peer_backoff_s_min
        while True:
            await peer.wake.wait()
            deadline_s = trio.current_time() + limits.peer_stream_s
            failure: object  # what went wrong, or None for a stream that went through
            try:
                with trio.fail_after(limits.peer_stream_s + limits.peer_timeout_s):
                    response = await client.post(peer.url, content=self._stream(peer, deadline_s), headers=self.headers)
                failure = None if response.status_code == 204 else response
            except (httpx.HTTPError, trio.TooSlowError) as exc:
                failure = ssl_error_of(exc) or exc  # an ssl error says what is wrong; httpx's says ''
            if failure is None:
                self._recovered(peer)
                backoff_s = limits.peer_backoff_s_min
                continue
            self._failed(peer, failure)
            # Messages that waited through the back-off are stale; raft sends
            # what is still needed again.
            await trio.sleep(backoff_s * (0.5 + self.rng.random()))
            backoff_s = min(backoff_s * 2, limits.peer_backoff_s_max)
            peer.dropped += len(peer.frames)
            peer.frames.clear()

    def _failed(self, peer: _Peer, why: object) -> None:
        """Logs the first failure of a run, then one line every
        `peer_failure_log_s` while they go on: a peer that never comes back
        shows in the log however long it takes."""
        now_s = trio.current_time()
        peer.failures += 1
        if peer.failing_since_s is None:
            peer.failing_since_s = now_s
        elif now_s - peer.logged_at_s < limits.peer_failure_log_s:
            return
        peer.logged_at_s = now_s
        log.warning("peer %s: %r (%d failures in a row, for %.1f s)",
                    peer.url, why, peer.failures, now_s - peer.failing_since_s)

    def _recovered(self, peer: _Peer) -> None:
        if peer.failing_since_s is not None:
            log.warning("peer %s: a stream went through again after %d failures in %.1f s",
                        peer.url, peer.failures, trio.current_time() - peer.failing_since_s)
        peer.failures = 0
        peer.failing_since_s = None

    async def _stream(self, peer: _Peer, deadline_s: float) -> AsyncIterator[bytes]:
        """The body of one stream: frames as they are queued, until the deadline."""
        while trio.current_time() < deadline_s:
            if not peer.frames:
                peer.wake = trio.Event()
                with trio.move_on_at(deadline_s):
                    await peer.wake.wait()
                continue
            frames = self._take(peer)
            peer.sent += len(frames)
            yield encode_frames(frames)

    def _take(self, peer: _Peer) -> list[bytes]:
        frames: list[bytes] = []
        size_bytes = 0
        while peer.frames and (not frames or size_bytes + len(peer.frames[0]) <= limits.peer_post_bytes_target):
            frame = peer.frames.popleft()
            frames.append(frame)
            size_bytes += len(frame)
        return frames


def local_address_of(host: str) -> str | None:
    """The address outgoing peer connections start from: the listen host when
    it is one specific IP, else whatever the OS picks."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return None if address.is_unspecified else host
