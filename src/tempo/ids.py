"""Job and run identifiers.

A job ID is `j_` and a ULID: 48 bits of creation milliseconds and 80 random
bits in Crockford base32, so IDs sort by creation time (the jobs listing is
newest first without an index of its own). The randomness is passed in: the
edge draws it, never `apply`.

A run ID is derived from its job ID and its nominal time (`r_`, the job's 26
characters, then the nominal milliseconds in 10 base32 characters), so one slot
of one job can only ever have one run, and the ID alone locates the run.
"""

import functools
import hashlib
import re
import zlib

from tempo import limits

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two base32 digits a lookup: run IDs are made for every run shown or claimed.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
# Crockford's digits to the digits `int(..., 32)` reads (0-9, then a-v).
_TO_INT_BASE32 = bytes.maketrans(_ALPHABET.encode(), b"0123456789abcdefghijklmnopqrstuv")
_SHIFTS = {chars: tuple(range(5 * chars - 10, -10, -10)) for chars in (10, 16, 26)}
_DIGIT = "[0-9A-HJKMNP-TV-Z]"
# 26 characters carry 130 bits; a ULID has 128, so the first digit is 0-7.
JOB_ID_PATTERN = f"^j_[0-7]{_DIGIT}{{25}}$"
# A cluster node's ID, as --node, --peers and POST /v1/cluster/nodes take it.
NODE_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_JOB_ID = re.compile(JOB_ID_PATTERN)
_RUN_ID = re.compile(f"r_[0-7]{_DIGIT}{{35}}")
ULID_CHARS = 26
NOMINAL_CHARS = 10
JOB_ID_CHARS = 2 + ULID_CHARS
RUN_ID_CHARS = 2 + ULID_CHARS + NOMINAL_CHARS
assert NOMINAL_CHARS == 10 and JOB_ID_CHARS == 28  # run_id and parse_run_id unroll five pairs


def _b32(value: int, chars: int) -> str:
    assert 0 <= value < 1 << (5 * chars) and chars % 2 == 0
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS[chars]])


def new_job_id(at_ms: int, random_bytes: bytes) -> str:
    assert len(random_bytes) == 10
    assert 0 <= at_ms < 1 << 48
    # 26 digits = 130 bits: 10 digits of (two zero bits and) the milliseconds,
    # then 16 digits of the 80 random bits.
    return _time_prefix(at_ms) + _random_digits(int.from_bytes(random_bytes, "big"))


def job_id_from_int(at_ms: int, random_80: int) -> str:
    """`new_job_id` with the 80 random bits as an integer."""
    assert 0 <= at_ms < 1 << 48
    return _time_prefix(at_ms) + _random_digits(random_80)


def job_ids_from_int(at_ms: int, first_random_80: int, count: int) -> list[str]:
    """`job_id_from_int(at_ms, first_random_80 + k)` for k in range(count).
    A batch of creates takes its IDs this way: neighbours differ in their
    last two digits only, so the first 14 digits of the random part are
    spelled once per 1,024 IDs rather than once per ID."""
    assert 0 <= at_ms < 1 << 48 and count >= 0
    assert first_random_80 >= 0 and first_random_80 + count <= 1 << 80
    prefix = _time_prefix(at_ms)
    pairs = _PAIRS
    out: list[str] = []
    value, end = first_random_80, first_random_80 + count
    while value < end:
        high = value >> 10
        head = prefix + _random_digits(high << 10)[:-2]
        stop = min(end, (high + 1) << 10)
        out += [head + pairs[low & 1023] for low in range(value, stop)]
        value = stop
    return out


def _random_digits(value: int) -> str:
    """`_b32(value, 16)` unrolled: a batch of 1,000 creates makes 1,000 IDs."""
    assert 0 <= value < 1 << 80
    p = _PAIRS
    return (
        f"{p[value >> 70]}{p[(value >> 60) & 1023]}{p[(value >> 50) & 1023]}{p[(value >> 40) & 1023]}"
        f"{p[(value >> 30) & 1023]}{p[(value >> 20) & 1023]}{p[(value >> 10) & 1023]}{p[value & 1023]}"
    )


@functools.lru_cache(maxsize=1024)
def _time_prefix(at_ms: int) -> str:
    return "j_" + _b32(at_ms, 10)


def is_job_id(text: str) -> bool:
    return _JOB_ID.fullmatch(text) is not None


def run_id(job_id: str, nominal_ms: int) -> str:
    assert len(job_id) == JOB_ID_CHARS and 0 <= nominal_ms < 1 << 50
    p = _PAIRS  # NOMINAL_CHARS digits, two at a time, unrolled: this is hot
    return (
        f"r_{job_id[2:]}{p[nominal_ms >> 40]}{p[(nominal_ms >> 30) & 1023]}"
        f"{p[(nominal_ms >> 20) & 1023]}{p[(nominal_ms >> 10) & 1023]}{p[nominal_ms & 1023]}"
    )


def parse_run_id(text: str) -> tuple[str, int] | None:
    """(job ID, nominal ms), or None when `text` is no run ID."""
    if _RUN_ID.fullmatch(text) is None:
        return None
    # The nominal digits (checked above) as `int` reads base 32: one
    # translation and one `int` for the ten, where results arrive by the
    # thousand.
    return "j_" + text[2:28], int(text[28:].encode().translate(_TO_INT_BASE32), 32)


def shard_of(job_id: str) -> int:
    """Stable across processes and versions (unlike `hash`)."""
    return zlib.crc32(job_id.encode()) % limits.run_shards


def jitter_ms(run_id_text: str, jitter_s: int) -> int:
    """A delay in [0, jitter_s] seconds fixed by the run ID (docs/api.md `jitter_s`)."""
    if jitter_s == 0:
        return 0
    digest = hashlib.blake2b(run_id_text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter_s * 1000 + 1)
