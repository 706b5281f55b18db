"""One time domain (docs/api.md "Times"): every instant the API accepts in a
field that is stored (`schedule.at`, `schedule.start_at`, `schedule.end_at`,
a backfill's `from` and `until`) round-trips through every key maker and
through apply, on a node that decodes the entry as a follower would; every
other instant of years 1 to 9999 is 400 at its field, naming the range.

Found by issue 26: a backfill of a range before 1970 (or in year 1), and an
`every_s` job with a `start_at` before 1970, reached a key as a negative
millisecond, which crashed apply (struct.error) on a node alone and made the
followers of a cluster refuse the entry."""

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tempo import clock, errors, ids, limits
from tempo.engine import keys
from tempo.engine.commands import BackfillJob, CreateJobs, decode_entry, encode_entry
from tempo.engine.jobs import Jobs, backfill_slots, schedule_record
from tempo.engine.store import Store
from tempo.schema import BackfillIn, JobCreate

MAKER = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
JOB = ids.job_id_from_int(1_800_000_000_000, 7)
# The instants of years 1 to 9999 (what RFC 3339 spells), with the ends of
# the stored domain and their neighbours drawn often.
EDGES = [
    limits.instant_ms_min, limits.instant_ms_min + 1, limits.stored_ms_min - 60_000, limits.stored_ms_min - 1,
    limits.stored_ms_min, limits.stored_ms_min + 1, 1_800_000_000_000, limits.stored_ms_max - 1,
    limits.stored_ms_max,
]
instants = st.sampled_from(EDGES) | st.integers(limits.instant_ms_min, limits.instant_ms_max)
FIELDS = ["schedule.at", "schedule.start_at", "schedule.end_at", "from", "until"]


def stored(at_ms: int) -> bool:
    return limits.stored_ms_min <= at_ms <= limits.stored_ms_max


def check_keys(job_id: str, at_ms: int) -> None:
    """`at_ms` (and the latest due time tempo derives from it: jitter and a
    retry's backoff added) through every key maker that takes an instant."""
    job_key = keys.job_key(job_id)
    late_ms = at_ms + (limits.jitter_s_max + limits.backoff_gap_s_max) * 1000
    for nominal_ms, due_ms in ((at_ms, at_ms), (at_ms, late_ms)):
        runs_key, by_job = keys.new_run_keys(job_key, job_id, nominal_ms, due_ms)
        assert runs_key == keys.run_key_of(job_key, job_id, nominal_ms, due_ms)
        assert (keys.due_of(runs_key), *keys.slot_of(runs_key)) == (due_ms, job_id, nominal_ms)
        assert keys.nominal_of(runs_key) == nominal_ms
        assert keys.parse_by_job_key(by_job) == (job_id, nominal_ms) == keys.parse_by_job_key(
            keys.by_job_key(job_id, nominal_ms)
        )
        assert keys.by_job_key_of(job_key, nominal_ms) == by_job
        status = keys.status_key("default", keys.STATUS_CODE["done"], due_ms, job_id, nominal_ms)
        assert status[-keys.STATUS_TAIL_BYTES] == keys.STATUS_CODE["done"]
        assert status == keys.status_key_of("default", keys.STATUS_CODE["done"], due_ms, job_key, nominal_ms)
        assert status.endswith(keys.order_tail(due_ms, job_id, nominal_ms))
    expiry = keys.claim_key_expiry(late_ms, "default", "k")
    assert keys.parse_claim_key_expiry(expiry) == (late_ms, keys.claim_key("default", "k"))


def schedule_of(field: str, at_ms: int) -> dict:
    iso = clock.iso_from_ms(at_ms)
    if field == "schedule.at":
        return {"at": iso}
    if field == "schedule.start_at":
        return {"every_s": 60, "start_at": iso}
    return {"every_s": 60, "end_at": iso}


@contextlib.contextmanager
def store() -> Iterator[Store]:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as root:
        made = Store(os.path.join(root, "s"), map_bytes=64 << 20)
        try:
            yield made
        finally:
            made.close()


def apply_as_a_follower(s: Store, commands: list) -> list:
    """The entry as a follower gets it: encoded, decoded by the one decoder
    every node has (it refuses what keys cannot hold), then applied."""
    data = encode_entry(commands)
    decode_entry(data)
    outcomes, _ = s.apply_entry(s.applied_index() + 1, data)
    return outcomes


def create(s: Store, field: str, at_ms: int, now_ms: int) -> str | None:
    """The job a create with `at_ms` in `field` makes, applied; None when
    the API refuses it (then at `field`, naming the stored range)."""
    body = msgspec.json.decode(
        json.dumps({"target": "queue:q", "schedule": schedule_of(field, at_ms)}), type=JobCreate
    )
    try:
        item = MAKER.new_job("default", body, now_ms, from_msgpack=False, job_id=JOB, patching=True)
    except errors.Invalid as exc:
        assert not stored(at_ms), f"{field}: an instant in the stored domain refused: {exc}"
        assert [loc for loc, _ in exc.errors] == [field]
        assert "1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z" in exc.errors[0][1]
        return None
    assert stored(at_ms), f"{field}: {clock.iso_from_ms(at_ms)} accepted, outside the stored domain"
    check_keys(JOB, at_ms)
    [made] = apply_as_a_follower(s, [CreateJobs(now_ms, [item])])
    assert not isinstance(made, errors.TempoError), made
    return JOB


def backfill(s: Store, field: str, at_ms: int) -> None:
    """A backfill with `at_ms` as its `from` (until a minute on) or its
    `until` (from a minute before), of a job whose every slot is after it."""
    now_ms = limits.stored_ms_max - 100_000  # the job's next slot is the last minute of 9999
    body = msgspec.json.decode(b'{"target":"queue:q","schedule":{"every_s":60,"start_at":"1970-01-01T00:00:00Z"}}',
                               type=JobCreate)
    item = MAKER.new_job("default", body, now_ms, from_msgpack=False, job_id=JOB)
    job = msgspec.msgpack.decode(msgspec.msgpack.encode(item.job), type=type(item.job))  # as apply stores it
    apply_as_a_follower(s, [CreateJobs(now_ms, [item])])
    assert job.slot_ms is not None
    from_ms, until_ms = (at_ms, at_ms + 60_000) if field == "from" else (at_ms - 60_000, at_ms)
    # The other end, within what RFC 3339 spells.
    from_ms, until_ms = max(from_ms, limits.instant_ms_min), min(until_ms, limits.instant_ms_max)
    spec = msgspec.json.decode(
        json.dumps({"from": clock.iso_from_ms(from_ms), "until": clock.iso_from_ms(until_ms)}), type=BackfillIn
    )
    try:
        slots = trio.run(backfill_slots, job, spec, now_ms)
    except errors.Invalid as exc:
        locs = [loc for loc, _ in exc.errors]
        if locs == ["until"] and until_ms > now_ms:
            return  # a range in the future, or past the job's scheduled slot: not the time domain's rule
        refused = from_ms if locs == ["from"] else until_ms
        assert not stored(refused), f"{locs}: an instant in the stored domain refused: {exc}"
        assert "1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z" in exc.errors[0][1]
        return
    assert stored(from_ms) and stored(until_ms), f"{clock.iso_from_ms(from_ms)}: accepted outside the stored domain"
    for slot_ms in slots:
        check_keys(JOB, slot_ms)
    [made] = apply_as_a_follower(s, [BackfillJob(now_ms, "default", JOB, slots)])
    assert not isinstance(made, errors.TempoError), made
    assert len(made) == len(slots)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIELDS), instants)
@example("from", -3_600_000)  # issue 26: 1969-12-31T23:00:00Z to 1970
@example("from", limits.instant_ms_min)  # issue 26: a year-1 range
@example("schedule.start_at", -315_619_200_000)  # issue 26: every_s from 1960
def test_every_accepted_instant_round_trips_through_the_keys_and_apply(field, at_ms):
    with store() as s:
        if field in ("from", "until"):
            backfill(s, field, at_ms)
        else:
            create(s, field, at_ms, now_ms=max(at_ms, 1_800_000_000_000))


@pytest.mark.parametrize("field", ["schedule.at", "schedule.start_at", "schedule.end_at"])
def test_a_stored_field_before_1970_is_400_at_the_field(field):
    body = msgspec.json.decode(
        json.dumps({"target": "queue:q", "schedule": schedule_of(field, -1)}), type=JobCreate
    )
    with pytest.raises(errors.Invalid) as caught:
        schedule_record(body.schedule)
    assert caught.value.errors == [
        (field, "a time from 1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z in UTC, the instants tempo stores")
    ]


def test_the_key_encodings_hold_both_ends_of_the_stored_domain():
    check_keys(JOB, limits.stored_ms_min)
    check_keys(JOB, limits.stored_ms_max)
    # A due time at the last instant records hold still has its minute.
    key = keys.run_key_of(keys.job_key(JOB), JOB, limits.stored_ms_max, limits.time_ms_max)
    assert keys.due_of(key) == limits.time_ms_max
    with pytest.raises(AssertionError, match="stored time domain"):
        keys.by_job_key(JOB, limits.stored_ms_min - 1)


def test_jitter_never_moves_a_due_time_past_the_last_instant_answered():
    """Found probing issue 26: an `at` of 9999-12-31T23:59:59.999Z with
    jitter_s 3600 answered `next_run_at` "10000-01-01T00:13:13.746Z", a
    time RFC 3339 cannot spell (docs/api.md "Times")."""
    body = msgspec.json.decode(
        b'{"target":"queue:q","schedule":{"at":"9999-12-31T23:59:59.999Z"},"jitter_s":3600}', type=JobCreate
    )
    made = [MAKER.new_job("default", body, 1_800_000_000_000, from_msgpack=False, job_id=ids.job_id_from_int(
        1_800_000_000_000, n)).job.next_run_at_ms for n in range(20)]
    assert all(due_ms == limits.stored_ms_max for due_ms in made), made
    body = msgspec.json.decode(
        b'{"target":"queue:q","schedule":{"at":"9999-12-31T23:00:00Z"},"jitter_s":3600}', type=JobCreate
    )
    made = [MAKER.new_job("default", body, 1_800_000_000_000, from_msgpack=False, job_id=ids.job_id_from_int(
        1_800_000_000_000, n)).job.next_run_at_ms for n in range(20)]
    slot_ms = limits.stored_ms_max - 3_599_999
    assert all(slot_ms <= due_ms <= limits.stored_ms_max for due_ms in made), made
    assert len(set(made)) > 1, "jitter still spreads the runs within the last hour"
