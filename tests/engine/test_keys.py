"""LMDB keys: round trips, and byte order equal to the order the scans rely on."""

from hypothesis import given
from hypothesis import strategies as st

from tempo import ids, limits
from tempo.engine import keys

job_ids = st.builds(
    ids.new_job_id,
    st.integers(min_value=0, max_value=(1 << 48) - 1),
    st.binary(min_size=10, max_size=10),
)
millis = st.integers(min_value=0, max_value=(1 << 44) - 1)
owners = st.text(
    alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20
)


def run_order(job_id: str, nominal: int, due: int) -> tuple:
    return (keys.minute_of(due), ids.shard_of(job_id), due, job_id, nominal)


def run_key(job_id: str, nominal: int, due: int) -> bytes:
    return keys.run_key_of(keys.job_key(job_id), job_id, nominal, due)


@given(job_ids, millis, millis)
def test_run_key_round_trip(job_id, nominal, due):
    key = run_key(job_id, nominal, due)
    assert len(key) == keys.RUN_KEY_BYTES
    assert (keys.due_of(key), *keys.slot_of(key)) == (due, job_id, nominal)
    assert key.startswith(keys.minute_prefix(keys.minute_of(due)) + bytes([ids.shard_of(job_id)]))


@given(job_ids, millis, millis)
def test_a_new_runs_keys_made_together_are_those_made_apart(job_id, nominal, due):
    made = keys.new_run_keys(keys.job_key(job_id), job_id, nominal, due)
    assert made == (run_key(job_id, nominal, due), keys.by_job_key(job_id, nominal))


@given(job_ids, millis, millis)
def test_run_key_fields_read_alone_match_the_key_made(job_id, nominal, due):
    key = run_key(job_id, nominal, due)
    assert keys.due_of(key) == due
    assert keys.nominal_of(key) == nominal
    assert keys.slot_of(key) == (job_id, nominal)


@given(st.lists(st.tuples(job_ids, millis, millis), min_size=2, max_size=20))
def test_run_key_order_is_minute_shard_due_job_nominal(rows):
    by_bytes = sorted(rows, key=lambda r: run_key(*r))
    by_tuple = sorted(rows, key=lambda r: run_order(*r))
    assert [run_key(*r) for r in by_bytes] == [run_key(*r) for r in by_tuple]


@given(millis, millis)
def test_minute_prefixes_order_like_minutes(a, b):
    ma, mb = keys.minute_of(a), keys.minute_of(b)
    assert (keys.minute_prefix(ma) < keys.minute_prefix(mb)) == (ma < mb)
    assert ma == a // limits.minute_ms


@given(job_ids, millis)
def test_by_job_key_round_trip(job_id, nominal):
    assert keys.parse_by_job_key(keys.by_job_key(job_id, nominal)) == (job_id, nominal)


@given(job_ids, millis, millis)
def test_by_job_key_order_is_nominal_order(job_id, a, b):
    ka, kb = keys.by_job_key(job_id, a), keys.by_job_key(job_id, b)
    assert (ka < kb) == (a < b)
    assert ka.startswith(keys.job_key(job_id))


@given(job_ids, job_ids, millis, millis)
def test_by_job_keys_group_by_job(a, b, na, nb):
    if a < b:
        assert keys.by_job_key(a, na) < keys.by_job_key(b, nb)


@given(job_ids)
def test_job_key_round_trip(job_id):
    assert keys.job_id_of(keys.job_key(job_id)) == job_id


@given(owners, job_ids, job_ids)
def test_owner_job_keys_sort_by_job_id_within_owner(owner, a, b):
    ka, kb = keys.owner_job_key(owner, a), keys.owner_job_key(owner, b)
    assert ka.startswith(keys.owner_prefix(owner))
    assert (ka < kb) == (a < b)


@given(owners, owners, job_ids)
def test_owner_prefixes_do_not_overlap(a, b, job_id):
    if a != b:
        assert not keys.owner_job_key(a, job_id).startswith(keys.owner_prefix(b))


@given(owners, st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_event_key_round_trip(owner, seq):
    assert keys.parse_event_key(keys.event_key(owner, seq)) == (owner, seq)


@given(owners, st.integers(min_value=0, max_value=(1 << 64) - 1), st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_event_keys_order_by_sequence(owner, a, b):
    assert (keys.event_key(owner, a) < keys.event_key(owner, b)) == (a < b)
