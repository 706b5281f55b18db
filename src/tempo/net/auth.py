"""Bearer tokens: who is asking, and may they (docs/operations.md "Tokens")."""

import hashlib
import hmac
from dataclasses import dataclass

from tempo import errors
from tempo.config import Token

# What each route needs: nothing, any valid token, a client's or admin's, or
# a worker's (claims, heartbeats and results are for worker tokens only).
PUBLIC, ANY, CLIENT, WORKER, ADMIN = "public", "any", "client", "worker", "admin"
NO_AUTH_OWNER = "default"


@dataclass(frozen=True, slots=True)
class Principal:
    owner: str
    role: str
    queues: frozenset[str] | None  # None: every queue (auth off)


ANONYMOUS = Principal(NO_AUTH_OWNER, "admin", None)
ANONYMOUS_WORKER = Principal(NO_AUTH_OWNER, "worker", None)


class Authenticator:
    def __init__(self, tokens: tuple[Token, ...]):
        self.tokens = tokens

    @property
    def enabled(self) -> bool:
        return bool(self.tokens)

    def identify(self, authorization: bytes | None) -> Token | None:
        if not authorization or authorization[:7].lower() != b"bearer ":
            return None
        digest = hashlib.sha256(authorization[7:].strip()).digest()
        found = None
        # Compare with every token, in constant time each, so the answer's
        # timing tells nothing about which stored hash came close.
        for token in self.tokens:
            if hmac.compare_digest(digest, token.sha256):
                found = token
        return found

    def check(self, need: str, authorization: bytes | None) -> Principal:
        if need == PUBLIC:
            return ANONYMOUS
        if not self.enabled:
            return ANONYMOUS_WORKER if need == WORKER else ANONYMOUS
        token = self.identify(authorization)
        if token is None:
            raise errors.Unauthorized("a valid bearer token is required")
        if need == WORKER and token.role != "worker":
            raise errors.Forbidden("claims, heartbeats and results are for worker tokens")
        if need == ADMIN and token.role != "admin":
            raise errors.Forbidden("cluster operations are for admin tokens")
        if need == CLIENT and token.role == "worker":
            raise errors.Forbidden("a worker token may only claim, heartbeat and report")
        return Principal(token.owner, token.role, token.queues if token.role == "worker" else None)


class PeerAuth:
    """What a node asks of a peer's raft request: the cluster's peer token,
    when auth is on (the same secret on every node)."""

    def __init__(self, peer_token: str | None):
        self.digest = None if peer_token is None else hashlib.sha256(peer_token.encode()).digest()

    def check(self, authorization: bytes | None) -> None:
        if self.digest is None:
            return
        if not authorization or authorization[:7].lower() != b"bearer ":
            raise errors.Unauthorized("a peer request needs the cluster's peer token")
        if not hmac.compare_digest(hashlib.sha256(authorization[7:].strip()).digest(), self.digest):
            raise errors.Unauthorized("a peer request needs the cluster's peer token")
