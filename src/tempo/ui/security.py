"""The console's session cookie, CSRF tokens and response headers
(docs/ui.md "Security")."""

import hashlib
import hmac
import secrets
from collections.abc import Iterable

from itsdangerous import BadSignature, URLSafeTimedSerializer

SESSION_COOKIE = "tempo_session"
CSRF_COOKIE = "tempo_csrf"
# How long a login lasts; the cookie is refused after this even if kept.
SESSION_AGE_S = 12 * 3600
# No inline script or style, nothing from elsewhere, no framing
# (docs/ui.md "Security"): htmx and the console's script come from /ui/static.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


def derive_key(token_hashes: Iterable[bytes], peer_token: str | None) -> bytes:
    """The signing key, derived from the config: the stored hashes of the
    tokens (and the peer token), so that every node of a cluster with the
    same config signs alike, and a change of tokens ends every session.
    Without tokens there is nothing secret in the config: a key made at
    start serves (a restart then asks forms to be sent again)."""
    hashes = sorted(token_hashes)
    if not hashes:
        return secrets.token_bytes(32)
    material = b"".join(hashes) + (peer_token or "").encode()
    return hmac.new(material, b"tempo ui session key v1", hashlib.sha256).digest()


class Sessions:
    def __init__(self, key: bytes):
        self.key = key
        self.serializer = URLSafeTimedSerializer(key, salt="tempo-ui-session")

    def seal(self, token: str) -> str:
        return self.serializer.dumps(token)

    def open(self, cookie: str | None) -> str | None:
        """The token in a session cookie, or None when it is missing,
        forged or too old."""
        if not cookie:
            return None
        try:
            token = self.serializer.loads(cookie, max_age=SESSION_AGE_S)
        except BadSignature:
            return None
        return token if isinstance(token, str) else None

    def csrf_for(self, seed: str) -> str:
        """The CSRF token of a browser: an HMAC of its CSRF cookie, which a
        page of another site can neither read nor set (SameSite=Strict)."""
        return hmac.new(self.key, b"csrf:" + seed.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, seed: str | None, given: str | None) -> bool:
        if not seed or not given:
            return False
        return hmac.compare_digest(self.csrf_for(seed), given)


def cookie(name: str, value: str, *, secure: bool, max_age_s: int | None = None) -> bytes:
    parts = [f"{name}={value}", "Path=/ui", "HttpOnly", "SameSite=Strict"]
    if secure:
        parts.append("Secure")
    if max_age_s is not None:
        parts.append(f"Max-Age={max_age_s}")
    return "; ".join(parts).encode()
