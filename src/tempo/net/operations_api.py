"""The node's own routes, mixed into `net/api.py`'s `Api`: liveness and
readiness, the cluster's view, digest and membership (docs/operations.md),
the peers' raft stream (net/peer.py) and the OpenAPI document."""

from collections.abc import Callable

import msgspec
import trio
from hypercorn.typing import ASGIReceiveCallable

from tempo import errors
from tempo.net.asgi import MSGPACK, Request, Response, decode, decoders, encode
from tempo.net.auth import PeerAuth
from tempo.net.handlers import Handlers
from tempo.net.peer import EntryCheck, FrameReader
from tempo.node import ClusterMember, Standalone
from tempo.node.membership import Membership
from tempo.raft import Message
from tempo.schema import ClusterNode, ClusterOut, DigestOut, Health, NodeIn

_node_in = decoders(NodeIn)
_json_enc = msgspec.json.Encoder()


class OperationsHandlers(Handlers):
    """`/healthz`, `/readyz`, `/v1/cluster...`, `/v1/raft` and `/v1/openapi.json`."""

    # Set up by `Api.__init__`.
    node: Standalone | ClusterMember
    started: bool
    entry_check: EntryCheck
    membership: Membership | None
    on_peer_messages: Callable[[list[Message]], None] | None
    peer_auth: PeerAuth
    peer_frames_dropped: int
    openapi_body: bytes
    openapi_msgpack: bytes
    # The peers' streams open now, which `Api.close_peer_streams` ends.
    _peer_streams: set[trio.CancelScope]
    _peer_streams_closed: bool

    async def healthz(self, request: Request) -> Response:
        return encode(request, Health("ok"))

    async def readyz(self, request: Request) -> Response:
        refused = self.jobs.committer.storage.refused
        reason: str | None
        if not self.started:
            reason = "starting"
        elif refused is not None:
            reason = f"writes refused: {refused.detail}"
        else:
            reason = (
                self.entry_check.refusal(self.node.view().applied_index)
                or self.node.not_ready()
                or self.jobs.committer.stalled()
            )
        if reason is None:
            return encode(request, Health("ready"))
        return Response(503, _json_enc.encode(Health("not ready", reason)), headers=[(b"retry-after", b"1")])

    async def cluster(self, request: Request) -> Response:
        """This node's own view (a single node leads a cluster of one, term 0)."""
        view = self.node.view()
        nodes = [ClusterNode(member.id, member.url, role) for member, role in view.roles]
        out = ClusterOut(view.node, view.leader, view.term, view.commit_index, view.applied_index, nodes)
        return encode(request, out)

    async def cluster_digest(self, request: Request) -> Response:
        """A SHA-256 of every table at this node's applied index: replicas at
        one index hold the same digest."""
        applied, digest = await trio.to_thread.run_sync(self.store.digest)
        return encode(request, DigestOut(self.node.node_id, applied, digest))

    async def add_node(self, request: Request) -> Response:
        """Makes a running, empty node (`tempo serve --join`) a voter."""
        body = decode(request, _node_in)
        # A pattern's `$` also matches before a final newline (Python's re,
        # which msgspec uses): "n1\n" would pass and become a member no
        # process can start as.
        for loc, text in (("id", body.id), ("url", body.url)):
            if text.endswith("\n"):
                raise errors.Invalid.at(loc, "must not end with a newline")
        await self._members().add(body.id, body.url)
        return await self.cluster(request)

    async def remove_node(self, request: Request, node_id: str) -> Response:
        await self._members().remove(node_id)
        return await self.cluster(request)

    def _members(self) -> Membership:
        if self.membership is None:
            raise errors.Conflict("a single node has no members to change; start it as a cluster")
        return self.membership

    async def raft(self, request: Request, receive: ASGIReceiveCallable | None = None) -> Response:
        """Raft messages from a peer (net/peer.py); answered once stepped."""
        if self.on_peer_messages is None:
            raise errors.NotFound("this node is not a cluster member")
        self.peer_auth.check(request.headers.get(b"authorization"))
        assert receive is not None
        if self._peer_streams_closed:
            raise errors.ShuttingDown("the node is shutting down")
        reader = FrameReader(entries=self.entry_check)
        # Cancelled by `close_peer_streams`: the stream ends at once.
        scope = trio.CancelScope()
        self._peer_streams.add(scope)
        try:
            with scope:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise errors.Invalid.at("", "the peer went away")
                    assert message["type"] == "http.request", "an HTTP request receives its body or a disconnect"
                    messages = reader.feed(message.get("body", b""))
                    if messages:
                        self.on_peer_messages(messages)
                    if not message.get("more_body", False):
                        reader.close()
                        return Response(204, b"", b"application/octet-stream")
        finally:
            self._peer_streams.discard(scope)
            self.peer_frames_dropped += reader.dropped
        raise errors.ShuttingDown("the node is shutting down")

    async def openapi(self, request: Request) -> Response:
        """JSON, or MessagePack when asked, as every `/v1` endpoint (docs/api.md
        "Encoding and content negotiation"); both made once."""
        if request.wants_msgpack:
            return Response(200, self.openapi_msgpack, MSGPACK)
        return Response(200, self.openapi_body)
