"""Job and run identifiers.

A job ID is `j_` and a ULID: 48 bits of creation milliseconds and 80 random
bits in Crockford base32, so IDs sort by creation time (the jobs listing is
newest first without an index of its own). The randomness is passed in: the
edge draws it, never `apply`.

A run ID is derived from its job ID and its nominal time (`r_`, the job's 26
characters, then the nominal milliseconds in 10 base32 characters), so one slot
of one job can only ever have one run, and the ID alone locates the run.
"""

import hashlib
import zlib

from tempo import limits

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
ULID_CHARS = 26
NOMINAL_CHARS = 10
JOB_ID_CHARS = 2 + ULID_CHARS
RUN_ID_CHARS = 2 + ULID_CHARS + NOMINAL_CHARS


def _b32(value: int, chars: int) -> str:
    assert 0 <= value < 1 << (5 * chars)
    out = []
    for _ in range(chars):
        value, digit = divmod(value, 32)
        out.append(_ALPHABET[digit])
    return "".join(reversed(out))


def _unb32(text: str) -> int:
    value = 0
    for c in text:
        value = value * 32 + _INDEX[c]
    return value


def new_job_id(at_ms: int, random_bytes: bytes) -> str:
    assert len(random_bytes) == 10
    assert 0 <= at_ms < 1 << 48
    return "j_" + _b32((at_ms << 80) | int.from_bytes(random_bytes, "big"), ULID_CHARS)


def is_job_id(text: str) -> bool:
    return (
        len(text) == JOB_ID_CHARS
        and text.startswith("j_")
        and all(c in _INDEX for c in text[2:])
        and _INDEX[text[2]] < 8  # 26 chars carry 130 bits; a ULID has 128
    )


def run_id(job_id: str, nominal_ms: int) -> str:
    assert is_job_id(job_id)
    return "r_" + job_id[2:] + _b32(nominal_ms, NOMINAL_CHARS)


def parse_run_id(text: str) -> tuple[str, int] | None:
    """(job ID, nominal ms), or None when `text` is no run ID."""
    if len(text) != RUN_ID_CHARS or not text.startswith("r_"):
        return None
    body = text[2:]
    if not all(c in _INDEX for c in body):
        return None
    job_id = "j_" + body[:ULID_CHARS]
    if not is_job_id(job_id):
        return None
    return job_id, _unb32(body[ULID_CHARS:])


def shard_of(job_id: str) -> int:
    """Stable across processes and versions (unlike `hash`)."""
    return zlib.crc32(job_id.encode()) % limits.run_shards


def jitter_ms(run_id_text: str, jitter_s: int) -> int:
    """A delay in [0, jitter_s] seconds fixed by the run ID (API.md `jitter_s`)."""
    if jitter_s == 0:
        return 0
    digest = hashlib.blake2b(run_id_text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter_s * 1000 + 1)
