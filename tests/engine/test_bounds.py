"""Storage bounds checked at the edge, in bytes as well as characters.

A string that ends up in an LMDB key (an owner, a request key) is bounded in
UTF-8 bytes so that the key fits LMDB's 511 bytes (limits.py "Storage
bounds"): past the bound a request is `400` naming the field, a config is
refused naming the key, and an entry that holds such a command (logged by
an older version) is applied as an error outcome, never an exception."""

import json
from pathlib import Path

import msgspec
import pytest

from tempo import errors, limits
from tempo.config import ConfigError, parse
from tempo.engine.commands import CreateJobs, DeleteJob, encode_entry
from tempo.engine.jobs import Jobs
from tempo.engine.store import Created, Store
from tempo.schema import JobCreate

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
CLEF = "\U0001d11e"  # four bytes in UTF-8
# The example: 126 four-byte characters, within 200 characters,
# 504 bytes, and with the owner past LMDB's 511-byte key.
LONG_KEY = CLEF * 126


def body(**fields) -> JobCreate:
    fields.setdefault("target", "queue:reports")
    fields.setdefault("schedule", {"at": "2027-02-01T00:00:00Z"})
    return msgspec.json.decode(json.dumps(fields), type=JobCreate)


def text_of_bytes(count: int) -> str:
    """A string of exactly `count` UTF-8 bytes, mostly four-byte characters."""
    return CLEF * (count // 4) + "k" * (count % 4)


@pytest.fixture
def store(tmp_path: Path):
    s = Store(str(tmp_path / "s"), map_bytes=64 << 20)
    yield s
    s.close()


def test_the_bounds_fit_lmdbs_key_bound(store):
    assert store.env.max_key_size() >= limits.lmdb_key_bytes_max
    assert limits.owner_bytes_max + 1 + limits.request_key_bytes_max <= limits.lmdb_key_bytes_max
    # 200 ASCII characters fit, as docs/api.md promises.
    assert limits.request_key_bytes_max >= limits.request_key_chars_max
    assert limits.owner_bytes_max >= limits.owner_chars_max


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("k" * limits.request_key_chars_max, True),
        (text_of_bytes(limits.request_key_bytes_max), True),
        (text_of_bytes(limits.request_key_bytes_max + 1), False),
        (LONG_KEY, False),
        ("é" * limits.request_key_chars_max, False),  # 200 characters, 400 bytes
    ],
)
def test_a_request_key_is_bounded_in_bytes_at_the_edge(key, ok):
    maker = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
    parsed = body(request_key=key)
    if ok:
        assert maker.new_job(OWNER, parsed, T0, from_msgpack=False).job.request_key == key
        return
    with pytest.raises(errors.Invalid) as caught:
        maker.new_job(OWNER, parsed, T0, from_msgpack=False)
    assert [loc for loc, _ in caught.value.errors] == ["request_key"]
    assert str(limits.request_key_bytes_max) in caught.value.errors[0][1]


def test_an_owner_at_its_bound_with_a_request_key_at_its_bound_is_stored(store):
    owner = text_of_bytes(limits.owner_bytes_max)
    key = text_of_bytes(limits.request_key_bytes_max)
    item = Jobs(None, None).new_job(owner, body(request_key=key), T0, from_msgpack=False)  # type: ignore[arg-type]
    outcomes, _ = store.apply_entry(1, encode_entry([CreateJobs(T0, [item])]))
    assert isinstance(outcomes[0][0], Created) and outcomes[0][0].new
    again, _ = store.apply_entry(2, encode_entry([CreateJobs(T0, [item])]))
    assert isinstance(again[0][0], Created) and not again[0][0].new
    assert store.list_jobs(owner, 10, None)[0][0].request_key == key


def long_entry(owner: str = OWNER, key: str = LONG_KEY) -> tuple[bytes, str]:
    """An entry as an older version logged it: a create whose request key is
    past the byte bound, beside a create that is fine. Answers it and the
    good job's ID."""
    maker = Jobs(None, None)  # type: ignore[arg-type]
    bad = maker.new_job(owner, body(request_key="short"), T0, from_msgpack=False)
    bad.job.request_key = key
    good = maker.new_job(OWNER, body(request_key="fine"), T0, from_msgpack=False)
    return encode_entry([CreateJobs(T0, [bad, good])]), good.job.id


def test_an_entry_with_a_request_key_past_the_bound_applies_as_an_error_outcome(store):
    data, good_id = long_entry()
    outcomes, _ = store.apply_entry(1, data)
    [[refused, created]] = outcomes
    assert isinstance(refused, errors.Invalid) and [loc for loc, _ in refused.errors] == ["request_key"]
    assert isinstance(created, Created) and created.job.id == good_id
    assert store.applied_index() == 1
    jobs, _ = store.list_jobs(OWNER, 10, None)
    assert [job.id for job in jobs] == [good_id]


def test_an_entry_an_older_version_stored_applies_as_it_did_there(store):
    """A request key past the edge's 255 bytes that still fit LMDB's key was
    stored by versions before the byte bound: replicas of either version
    apply such an entry alike, and the job can be deleted."""
    key = text_of_bytes(limits.lmdb_key_bytes_max - len(OWNER) - 1)
    data, _ = long_entry(key=key)
    [[created, _]], _ = store.apply_entry(1, data)
    assert isinstance(created, Created) and created.job.request_key == key
    [[again, _]], _ = store.apply_entry(2, data)
    assert isinstance(again, Created) and again.job.id == created.job.id and not again.new
    [deleted], _ = store.apply_entry(3, encode_entry([DeleteJob(T0, OWNER, created.job.id)]))
    assert deleted is None
    assert [k for k, _ in store.dump()["request_keys"]] == [f"{OWNER}\x00fine".encode()], "the key was released"


def test_an_entry_with_an_owner_past_the_bound_applies_as_an_error_outcome(store):
    # A config that allowed 200 four-byte characters for an owner (800 bytes).
    owner = CLEF * 200
    maker = Jobs(None, None)  # type: ignore[arg-type]
    plain = maker.new_job(owner, body(), T0, from_msgpack=False)
    keyed = maker.new_job(owner, body(request_key="k"), T0, from_msgpack=False)
    outcomes, _ = store.apply_entry(1, encode_entry([CreateJobs(T0, [plain, keyed])]))
    for outcome in outcomes[0]:
        assert isinstance(outcome, errors.Invalid) and str(limits.owner_bytes_max) in outcome.detail
    assert store.applied_index() == 1


def test_two_stores_applying_the_same_over_bound_entry_agree(two_stores):
    data, _ = long_entry()
    for s in two_stores:
        s.apply_entry(1, data)
    assert two_stores[0].digest() == two_stores[1].digest()


# -- the config ---------------------------------------------------------------------

TOKEN = '[[tokens]]\nsha256 = "' + "ab" * 32 + '"\nrole = "client"\nowner = "{}"\n'


@pytest.mark.parametrize(
    ("owner", "ok"),
    [
        ("a" * limits.owner_chars_max, True),
        (text_of_bytes(limits.owner_bytes_max), True),
        (text_of_bytes(limits.owner_bytes_max + 1), False),
        (CLEF * limits.owner_chars_max, False),  # 200 characters, 800 bytes
        ("a" * (limits.owner_chars_max + 1), False),
    ],
)
def test_an_owner_name_is_bounded_in_bytes_in_the_config(owner, ok):
    for text, named in ((TOKEN.format(owner), "tokens[0].owner"), (f'[[owners]]\nname = "{owner}"\n', "owners[0].name")):
        if ok:
            parse(text)
            continue
        with pytest.raises(ConfigError) as caught:
            parse(text)
        assert named in str(caught.value) and str(limits.owner_bytes_max) in str(caught.value)
