"""Byte keys of the LMDB tables, big-endian so byte order is time order.

runs:        minute u32 | shard u8 | due ms u64 | job ID (26 bytes) | nominal ms u64
runs by job: job ID (26 bytes) | nominal ms u64
jobs by owner: owner | 0x00 | job ID (26 bytes)
request keys:  owner | 0x00 | request key
events:        owner | 0x00 | sequence u64
runs by status: owner | 0x00 | status u8 | ms u64 | job ID (26 bytes) | nominal ms u64
               (ms: the due time of an open run, the end of a finished one)
claim keys:    b"k" | owner | 0x00 | claim key
  expiring at: b"x" | expires ms u64 | owner | 0x00 | claim key
jobs by label: owner | 0x00 | label hash (16 bytes) | job ID (26 bytes)
               (the hash of one key -> value pair: `label_hash`)

Every key fits LMDB's bound (limits.py "Storage bounds"): the edge bounds
owners and request keys in bytes, and apply checks `owner_fits` and
`request_key_fits` before it makes a key; making a longer one is a
programmer error.

The runs key carries the nominal time after the job ID (docs/design.md names
minute, shard, due ms, job ID): a retried run and a triggered run of one job
can fall due in the same millisecond, and the suffix keeps their rows apart
without changing the scan order.
"""

import functools
import hashlib
import struct

from tempo import ids, limits

_RUN = struct.Struct(">IBQ26sQ")
_NOMINAL = struct.Struct(">Q")
_SEQ = struct.Struct(">Q")
RUN_KEY_BYTES = _RUN.size
# Offsets of the due ms and of (job ID, nominal ms) in a runs key.
_DUE = struct.Struct(">Q")
DUE_AT = 5  # the due ms, then the job ID and nominal ms: the order within a minute that matters
_SLOT = struct.Struct(">26sQ")
_SLOT_AT = 13
_NOMINAL_AT = 39
assert _SLOT_AT + _SLOT.size == RUN_KEY_BYTES and _NOMINAL_AT + _NOMINAL.size == RUN_KEY_BYTES
JOB_KEY_BYTES = ids.ULID_CHARS
assert limits.job_key_bytes == JOB_KEY_BYTES and _SEQ.size == limits.event_seq_bytes
# The time domain (limits.py `stored_ms_min`): every millisecond field of a
# key is unsigned, so it holds nothing before `_MS_MIN`; a runs key's 32-bit
# minute holds up to `limits.time_ms_max`. Each key maker asserts the lower
# end (an instant below it is a gap in the checks before apply, which must
# stop the node with a message rather than a struct.error); the upper end
# of an instant is checked where it is decoded (records.py `Ms`), and a
# lookup by a client's run ID may go past it, up to what a u64 holds.
_MS_MIN = limits.stored_ms_min
assert _MS_MIN == 0 and limits.time_ms_max // limits.minute_ms < 1 << 32
assert len(_RUN.pack(limits.time_ms_max // limits.minute_ms, 255, limits.time_ms_max, bytes(26), (1 << 64) - 1)) == RUN_KEY_BYTES


def job_key(job_id: str) -> bytes:
    assert len(job_id) == ids.JOB_ID_CHARS
    return job_id[2:].encode()


def job_id_of(key: bytes) -> str:
    assert len(key) == JOB_KEY_BYTES
    return "j_" + key.decode()


def minute_of(due_ms: int) -> int:
    return due_ms // limits.minute_ms


def run_key_of(job_key_bytes: bytes, job_id: str, nominal_ms: int, due_ms: int) -> bytes:
    """The runs key of a run of job `job_id`, whose key (`job_key(job_id)`)
    the caller has at hand."""
    assert len(job_key_bytes) == JOB_KEY_BYTES
    assert due_ms >= _MS_MIN and nominal_ms >= _MS_MIN, "an instant before the stored time domain reached a key"
    return _RUN.pack(due_ms // limits.minute_ms, ids.shard_of(job_id), due_ms, job_key_bytes, nominal_ms)


def new_run_keys(job_key_bytes: bytes, job_id: str, nominal_ms: int, due_ms: int) -> tuple[bytes, bytes]:
    """(`run_key_of(...)`, `by_job_key_of(job_key_bytes, nominal_ms)`) in
    one call: a batch of creates makes 1,000 of each."""
    assert len(job_key_bytes) == JOB_KEY_BYTES
    assert due_ms >= _MS_MIN and nominal_ms >= _MS_MIN, "an instant before the stored time domain reached a key"
    return (
        _RUN.pack(due_ms // limits.minute_ms, ids.shard_of(job_id), due_ms, job_key_bytes, nominal_ms),
        job_key_bytes + _NOMINAL.pack(nominal_ms),
    )


def due_of(key: bytes) -> int:
    """The due ms of a runs key, without the rest."""
    due_ms: int = _DUE.unpack_from(key, DUE_AT)[0]
    return due_ms


def nominal_of(key: bytes) -> int:
    """The nominal ms of a runs key, its last field."""
    nominal_ms: int = _NOMINAL.unpack_from(key, _NOMINAL_AT)[0]
    return nominal_ms


def slot_of(key: bytes) -> tuple[str, int]:
    """(job ID, nominal ms) of a runs key, without the rest: the dispatcher
    names a run's lease by these."""
    job, nominal_ms = _SLOT.unpack_from(key, _SLOT_AT)
    return "j_" + job.decode(), nominal_ms


def minute_prefix(minute: int) -> bytes:
    return struct.pack(">I", minute)


def by_job_key(job_id: str, nominal_ms: int) -> bytes:
    assert nominal_ms >= _MS_MIN, "an instant before the stored time domain reached a key"
    return job_key(job_id) + _NOMINAL.pack(nominal_ms)


def by_job_key_of(job_key_bytes: bytes, nominal_ms: int) -> bytes:
    assert len(job_key_bytes) == JOB_KEY_BYTES
    assert nominal_ms >= _MS_MIN, "an instant before the stored time domain reached a key"
    return job_key_bytes + _NOMINAL.pack(nominal_ms)


def parse_by_job_key(key: bytes) -> tuple[str, int]:
    return job_id_of(key[:JOB_KEY_BYTES]), _NOMINAL.unpack(key[JOB_KEY_BYTES:])[0]


@functools.lru_cache(maxsize=1024)
def owner_fits(owner: str) -> bool:
    """Whether every key `owner` starts fits LMDB: at most
    `limits.owner_key_bytes_max` bytes of UTF-8, no NUL (the separator).
    Cached as `owner_prefix`: a batch's items share one owner."""
    encoded = owner.encode()
    return len(encoded) <= limits.owner_key_bytes_max and b"\x00" not in encoded


def request_key_fits(owner: str, key: str) -> bool:
    """Whether `request_key(owner, key)` fits LMDB; `owner_fits(owner)` holds."""
    size = len(owner.encode()) + limits.owner_separator_bytes + len(key.encode())
    return len(key) > 0 and size <= limits.lmdb_key_bytes_max


@functools.lru_cache(maxsize=1024)
def owner_prefix(owner: str) -> bytes:
    """Cached: every event key of a batch of results starts with one owner's."""
    assert owner_fits(owner), "an owner past LMDB's key bound reached a key"
    return owner.encode() + b"\x00"


def owner_job_key(owner: str, job_id: str) -> bytes:
    return owner_prefix(owner) + job_key(job_id)


def request_key(owner: str, key: str) -> bytes:
    assert request_key_fits(owner, key), "a request key past LMDB's key bound reached a key"
    return owner_prefix(owner) + key.encode()


def event_key(owner: str, seq: int) -> bytes:
    return owner_prefix(owner) + _SEQ.pack(seq)


def parse_event_key(key: bytes) -> tuple[str, int]:
    owner, _, seq = key.partition(b"\x00")
    return owner.decode(), _SEQ.unpack(seq)[0]


# -- the runs index by owner and status (engine/tables/writes.py) ----------

STATUSES = ("waiting", "claimed", "done", "failed", "cancelled", "missed", "skipped")
STATUS_CODE = {status: code for code, status in enumerate(STATUSES)}
# A finished status that `STATUSES` does not name (one a later change adds
# before this index learns it) is kept under this code, and listed only when
# no status is asked for.
OTHER_STATUS_CODE = 255


def status_code(status: str) -> int:
    return STATUS_CODE.get(status, OTHER_STATUS_CODE)
_STATUS_TAIL = struct.Struct(">BQ26sQ")
STATUS_TAIL_BYTES = _STATUS_TAIL.size
_AFTER_STATUS = struct.Struct(">Q26sQ")


@functools.lru_cache(maxsize=1024)
def _status_owner(owner: str) -> bytes:
    """The owner's part of a runs-by-status key: `owner_prefix`, or for an
    owner past `limits.owner_bytes_max` (only an entry logged before the
    config bounded owners in bytes has one, and no token can name it) its
    head and a hash, so the key fits LMDB."""
    prefix = owner_prefix(owner)
    if len(prefix) <= limits.owner_bytes_max + limits.owner_separator_bytes:
        return prefix
    digest = hashlib.sha256(prefix).digest()[:16].replace(b"\x00", b"\x01")
    return prefix[: limits.owner_bytes_max - len(digest)] + digest + b"\x00"


def status_key(owner: str, status_code: int, at_ms: int, job_id: str, nominal_ms: int) -> bytes:
    """The index key of a run of `owner`'s job `job_id` with `status_code`
    (`STATUS_CODE`), at `at_ms`."""
    assert at_ms >= _MS_MIN and nominal_ms >= _MS_MIN, "an instant before the stored time domain reached a key"
    return _status_owner(owner) + _STATUS_TAIL.pack(status_code, at_ms, job_key(job_id), nominal_ms)


# For apply's hot paths (engine/tables/writes.py), which spell a runs-by-status
# key out as `status_head(owner) + STATUS_TAIL.pack(code, ms, job key,
# nominal ms)`, `status_key_of` without its call and checks: the job key and
# the instants come from rows and runs apply read, which hold them in range.
STATUS_TAIL = _STATUS_TAIL
status_head = _status_owner


def status_key_of(owner: str, status_code: int, at_ms: int, job_key_bytes: bytes, nominal_ms: int) -> bytes:
    """`status_key` from the job's key (`job_key(job_id)`), which apply has at hand."""
    assert len(job_key_bytes) == JOB_KEY_BYTES
    assert at_ms >= _MS_MIN and nominal_ms >= _MS_MIN, "an instant before the stored time domain reached a key"
    return _status_owner(owner) + _STATUS_TAIL.pack(status_code, at_ms, job_key_bytes, nominal_ms)


def status_prefix(owner: str, status_code: int) -> bytes:
    return _status_owner(owner) + bytes((status_code,))


def order_tail(at_ms: int, job_id: str, nominal_ms: int) -> bytes:
    """(ms, job ID, nominal ms) as bytes: the order of a runs listing and its cursor."""
    assert at_ms >= _MS_MIN and nominal_ms >= _MS_MIN, "an instant before the stored time domain reached a key"
    return _AFTER_STATUS.pack(at_ms, job_key(job_id), nominal_ms)


ORDER_TAIL_BYTES = _AFTER_STATUS.size
# -- claim keys (limits.py "Idempotent claims") ------------------------------------

CLAIM_KEY_HEAD = b"k"
CLAIM_KEY_EXPIRY_HEAD = b"x"
_EXPIRES = struct.Struct(">Q")
assert len(CLAIM_KEY_HEAD) == len(CLAIM_KEY_EXPIRY_HEAD) == limits.claim_key_head_bytes
assert _EXPIRES.size == limits.claim_key_expiry_bytes


def claim_key_fits(owner: str, key: str) -> bool:
    """Whether both keys of a claim key's record fit LMDB; `owner_fits(owner)` holds."""
    size = (
        limits.claim_key_head_bytes + limits.claim_key_expiry_bytes + len(owner.encode())
        + limits.owner_separator_bytes + len(key.encode())
    )
    return len(key) > 0 and size <= limits.lmdb_key_bytes_max


def claim_key(owner: str, key: str) -> bytes:
    assert claim_key_fits(owner, key), "a claim key past LMDB's key bound reached a key"
    return CLAIM_KEY_HEAD + owner_prefix(owner) + key.encode()


def claim_key_expiry(expires_ms: int, owner: str, key: str) -> bytes:
    return claim_key_expiry_of(expires_ms, claim_key(owner, key))


def claim_key_expiry_of(expires_ms: int, record_key: bytes) -> bytes:
    """The expiry index key of the record at `record_key` (a `claim_key`)."""
    assert record_key.startswith(CLAIM_KEY_HEAD)
    assert expires_ms >= _MS_MIN, "an instant before the stored time domain reached a key"
    return CLAIM_KEY_EXPIRY_HEAD + _EXPIRES.pack(expires_ms) + record_key[limits.claim_key_head_bytes :]


def parse_claim_key_expiry(key: bytes) -> tuple[int, bytes]:
    """(expires ms, the record's key) of an expiry index key."""
    assert key.startswith(CLAIM_KEY_EXPIRY_HEAD)
    head = limits.claim_key_head_bytes
    expires_ms = _EXPIRES.unpack_from(key, head)[0]
    return expires_ms, CLAIM_KEY_HEAD + key[head + _EXPIRES.size :]


# -- the jobs index by label (engine/tables/writes.py `relabel`) -----------------------------


def label_hash(name: str, value: str) -> bytes:
    """A label's (key, value) pair in `limits.label_hash_bytes`: a value may be
    256 characters, past what a key of LMDB holds beside an owner. A key has
    no NUL (`limits.LABEL_KEY_PATTERN`), so the pair is spelled unambiguously."""
    return hashlib.blake2b(name.encode() + b"\x00" + value.encode(), digest_size=limits.label_hash_bytes).digest()


def label_prefix(owner: str, name: str, value: str) -> bytes:
    """Every key of the index for `owner`'s jobs labelled `name` = `value`:
    the job key follows, so the jobs sort by ID (their creation) under it."""
    return _status_owner(owner) + label_hash(name, value)


def label_key(owner: str, name: str, value: str, job_key_bytes: bytes) -> bytes:
    assert len(job_key_bytes) == JOB_KEY_BYTES
    return label_prefix(owner, name, value) + job_key_bytes
