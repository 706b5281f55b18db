"""Job and run IDs: round trips and order (docs/style.md "Tests": hypothesis for keys)."""

from hypothesis import given
from hypothesis import strategies as st

from tempo import ids

at_ms = st.integers(min_value=0, max_value=(1 << 48) - 1)
random10 = st.binary(min_size=10, max_size=10)
nominal_ms = st.integers(min_value=0, max_value=(1 << 50) - 1)
job_ids = st.builds(ids.new_job_id, at_ms, random10)


@given(at_ms, random10)
def test_job_id_shape(at, rnd):
    job_id = ids.new_job_id(at, rnd)
    assert len(job_id) == ids.JOB_ID_CHARS
    assert ids.is_job_id(job_id)


@given(at_ms, st.integers(min_value=0, max_value=1 << 80), st.integers(min_value=0, max_value=3000))
def test_job_ids_of_a_batch_are_those_made_one_by_one(at, first, count):
    count = min(count, (1 << 80) - first)
    made = ids.job_ids_from_int(at, first, count)
    assert made == [ids.job_id_from_int(at, first + k) for k in range(count)]
    assert made == sorted(made)


@given(at_ms, random10, at_ms, random10)
def test_job_ids_sort_by_time(at_a, rnd_a, at_b, rnd_b):
    a, b = ids.new_job_id(at_a, rnd_a), ids.new_job_id(at_b, rnd_b)
    if at_a < at_b:
        assert a < b
    if (at_a, rnd_a) < (at_b, rnd_b):
        assert a < b
    if (at_a, rnd_a) == (at_b, rnd_b):
        assert a == b


@given(job_ids, nominal_ms)
def test_run_id_round_trip(job_id, nominal):
    run_id = ids.run_id(job_id, nominal)
    assert len(run_id) == ids.RUN_ID_CHARS
    assert ids.parse_run_id(run_id) == (job_id, nominal)


@given(job_ids, nominal_ms, nominal_ms)
def test_run_ids_of_one_job_sort_by_nominal_time(job_id, a, b):
    if a < b:
        assert ids.run_id(job_id, a) < ids.run_id(job_id, b)


@given(st.text(max_size=60))
def test_parse_run_id_never_raises(text):
    parsed = ids.parse_run_id(text)
    if parsed is not None:
        assert ids.run_id(*parsed) == text


def test_parse_run_id_rejects_near_misses():
    job_id = ids.new_job_id(1_700_000_000_000, bytes(10))
    good = ids.run_id(job_id, 5)
    assert ids.parse_run_id(good[:-1]) is None
    assert ids.parse_run_id("x" + good[1:]) is None
    assert ids.parse_run_id(good[:-1] + "U") is None  # U is not Crockford base32
    assert ids.parse_run_id("r_8" + good[3:]) is None  # over 128 bits
    assert not ids.is_job_id("j_" + "8" * 26)
    assert not ids.is_job_id(job_id[:-1])


@given(job_ids, st.integers(min_value=0, max_value=3600))
def test_jitter_is_fixed_and_bounded(job_id, jitter_s):
    run_id = ids.run_id(job_id, 0)
    delay = ids.jitter_ms(run_id, jitter_s)
    assert 0 <= delay <= jitter_s * 1000
    assert delay == ids.jitter_ms(run_id, jitter_s)


@given(job_ids)
def test_shard_is_stable_and_in_range(job_id):
    assert 0 <= ids.shard_of(job_id) < 64
    assert ids.shard_of(job_id) == ids.shard_of(job_id)
