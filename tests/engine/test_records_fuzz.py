"""Stored records and log entries: bytes that are not a valid record or
entry raise `records.Corrupt` and nothing else, and are never applied."""

from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import examples_max, garbage
from tempo import limits
from tempo.engine import keys, records
from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    CreateJobs,
    DeleteJob,
    ExpireLeases,
    Expiry,
    PauseJob,
    ReportResults,
    Result,
    ResumeJob,
    SetMember,
    TriggerJob,
    decode_entry,
    encode_entry,
)
from tempo.engine.jobs import Jobs
from tempo.engine.records import Corrupt, Event, Job, RequestKeyEntry, Run, Schedule
from tempo.engine.store import Created, Store
from tempo.raft import ConfState, Entry, EntryKind, HardState, SnapshotMeta
from tempo.schema import JobCreate

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
ms = st.integers(0, limits.time_ms_max)
job_ids = st.sampled_from(["j_01H0000000000000000000000A", "j_7ZZZZZZZZZZZZZZZZZZZZZZZZZ"])
texts = st.text(max_size=12)

schedules = st.one_of(
    st.builds(Schedule, at_ms=ms),
    st.builds(Schedule, cron=st.just("0 * * * *"), timezone=st.sampled_from([None, "Europe/Berlin"])),
    st.builds(Schedule, every_s=st.integers(1, 10**6), start_at_ms=st.none() | st.integers(-(2**62), 2**62)),
)
jobs = st.builds(
    Job, id=job_ids, owner=texts, name=st.none() | texts, target=st.just("queue:q"),
    payload=st.none() | st.integers(-(2**63), 2**63) | texts, schedule=schedules, max_attempts=st.integers(1, 100),
    backoff_s=st.lists(st.integers(0, 86400), min_size=1, max_size=3).map(tuple), lease_s=st.integers(1, 3600),
    jitter_s=st.integers(0, 3600), state=st.sampled_from(["active", "paused", "completed"]),
    created_at_ms=ms, request_key=st.none() | texts, slot_ms=st.none() | ms, next_run_at_ms=st.none() | ms,
)
runs = st.builds(
    Run, job_id=job_ids, nominal_ms=ms, due_ms=ms,
    status=st.sampled_from(["waiting", "claimed", "done", "failed", "cancelled"]),
    attempt=st.integers(0, 100), worker=st.none() | texts, lease_expires_ms=st.none() | ms,
    started_ms=st.none() | ms, finished_ms=st.none() | ms, output=st.none() | texts, error=st.none() | texts,
    triggered=st.booleans(),
)
events = st.builds(Event, type=st.just("run.failed"), at_ms=ms, job_id=job_ids,
                   run_id=st.none() | texts, detail=st.dictionaries(texts, st.integers(-(2**63), 2**63), max_size=2))
request_keys = st.builds(RequestKeyEntry, job_id=job_ids, body_hash=st.binary(min_size=32, max_size=32))
# Run IDs carry 50 bits of nominal time, and commands take it from clients.
nominals = st.integers(0, (1 << 50) - 1)
encoder = msgspec.msgpack.Encoder()
JOB = "j_01H0000000000000000000000A"


raft_entries = st.builds(Entry, term=st.integers(0, 2**40), index=st.integers(1, 2**40),
                         kind=st.sampled_from(list(EntryKind)), data=st.binary(max_size=32))
hard_states = st.builds(HardState, term=st.integers(0, 2**40), vote=st.integers(0, 9), commit=st.integers(0, 2**40))
snapshot_metas = st.builds(SnapshotMeta, index=st.integers(0, 2**40), term=st.integers(0, 2**40),
                           conf=st.builds(ConfState, voters=st.lists(st.integers(1, 9), max_size=5).map(tuple)))


@pytest.mark.parametrize(
    ("kind", "valid"),
    [(Job, jobs), (Run, runs), (Event, events), (RequestKeyEntry, request_keys),
     (Entry, raft_entries), (HardState, hard_states), (SnapshotMeta, snapshot_metas)],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_a_record_decoder_raises_only_corrupt(kind, valid):
    decoder = records.Decoder(kind)

    @settings(max_examples=examples_max, derandomize=True)
    @given(raw=garbage(valid.map(encoder.encode)))
    def check(raw):
        try:
            value = decoder.decode(raw)
        except Corrupt:
            return
        assert isinstance(value, kind)
        assert decoder.decode(encoder.encode(value)) == value

    check()


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        (Run, [JOB, -1, 0, "waiting"]),
        (Run, [JOB, limits.time_ms_max + 1, 0, "waiting"]),
        (Run, [JOB, 0, 0, "lost"]),
        (Run, ["j_01", 0, 0, "waiting"]),
        (Job, [JOB, "o", None, "queue:q", None, [None, None, None, 0], 1, [], 1, 0, "active", 0, None, None, None]),
        (Event, ["run.failed", -5, JOB, None, {}]),
        (RequestKeyEntry, [JOB]),
    ],
)
def test_values_outside_a_records_bounds_are_corrupt(kind, fields):
    with pytest.raises(Corrupt, match=kind.__name__):
        records.Decoder(kind).decode(encoder.encode(fields))


# -- log entries -----------------------------------------------------------------

def commands_of(
    job_ids: st.SearchStrategy[str], ms: st.SearchStrategy[int], any_ids: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy:
    """Commands on `job_ids`; pause, resume, delete and trigger, which carry a
    client's job ID unchecked, also on `any_ids`."""
    client_ids = job_ids if any_ids is None else job_ids | any_ids
    return st.one_of(
        st.builds(PauseJob, at_ms=ms, owner=texts, job_id=client_ids),
        st.builds(ResumeJob, at_ms=ms, owner=texts, job_id=client_ids, slot_ms=st.none() | ms, due_ms=st.none() | ms),
        st.builds(DeleteJob, at_ms=ms, owner=texts, job_id=client_ids),
        st.builds(TriggerJob, at_ms=ms, owner=texts, job_id=client_ids),
        st.builds(ClaimRuns, at_ms=ms, worker=texts, claims=st.lists(st.builds(
            Claim, job_id=job_ids, nominal_ms=nominals, lease_expires_ms=ms), max_size=2)),
        st.builds(ReportResults, at_ms=ms, owner=st.none() | texts, results=st.lists(st.builds(
            Result, job_id=job_ids, nominal_ms=nominals, attempt=st.integers(0, 9), ok=st.booleans()), max_size=2)),
        st.builds(ExpireLeases, at_ms=ms, expiries=st.lists(st.builds(
            Expiry, job_id=job_ids, nominal_ms=nominals, attempt=st.integers(0, 9)), max_size=2)),
        st.builds(SetMember, node_id=st.sampled_from(["n1", "n2"]) | texts, url=texts),
    )


commands = commands_of(job_ids, ms, texts)
entries = st.lists(commands, min_size=1, max_size=3).map(encode_entry)


@settings(max_examples=examples_max, derandomize=True)
@given(data=garbage(entries))
def test_the_entry_decoder_raises_only_corrupt(data):
    try:
        decoded = decode_entry(data)
    except Corrupt:
        return
    assert isinstance(decoded, list)
    assert decode_entry(encode_entry(decoded)) == decoded


def test_a_schedule_starting_before_1970_is_no_corrupt_record():
    schedule = Schedule(every_s=444010, start_at_ms=-60_000_000_000_000)
    assert records.Decoder(Schedule).decode(encoder.encode(schedule)) == schedule


def test_commands_carry_what_clients_send_without_being_corrupt():
    """A command holds a client's job ID, or the job ID and nominal time of a
    client's run ID, unchecked (apply answers not_found): such an entry must
    decode, or one request would stop every node that applies it."""
    results = [Result("j_7ZZZZZZZZZZZZZZZZZZZZZZZZZ", (1 << 50) - 1, 1_000_000, True)]
    entry = encode_entry([PauseJob(T0, OWNER, "not a job ID"), ReportResults(T0, OWNER, results)])
    assert len(decode_entry(entry)) == 2


def _created_store(path: Path) -> tuple[Store, str]:
    store = Store(str(path), map_bytes=64 << 20)
    body = msgspec.json.decode(b'{"target": "queue:q", "schedule": {"every_s": 60}}', type=JobCreate)
    made = Jobs(None, None).new_job(OWNER, body, T0, from_msgpack=False)  # type: ignore[arg-type]
    [[created]], _ = store.apply_entry(1, encode_entry([CreateJobs(T0, [made])]))
    assert isinstance(created, Created)
    return store, made.job.id


def test_a_corrupt_entry_is_never_applied(tmp_path):
    store, _ = _created_store(tmp_path / "s")
    try:
        before = store.digest()

        @settings(max_examples=examples_max // 3, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(data=garbage(entries))
        def check(data):
            if not data:
                return  # empty data is the raft no-op, not a corrupt entry
            try:
                decode_entry(data)
            except Corrupt:
                with pytest.raises(Corrupt):
                    store.apply_entry(2, data)
                assert store.digest() == before

        check()
    finally:
        store.close()


def test_valid_but_unexpected_commands_apply_without_crashing(tmp_path):
    """Entries that decode (whatever a bit flip made of them) apply to
    outcomes: a problem per command, never another exception."""
    store, job_id = _created_store(tmp_path / "s")
    near = st.one_of(st.integers(T0 - 10**6, T0 + 10**9), ms)
    entries_for_the_job = st.lists(commands_of(st.just(job_id) | job_ids, near, texts), min_size=1, max_size=3)
    try:
        index = [1]

        @settings(max_examples=examples_max // 3, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(data=garbage(entries_for_the_job.map(encode_entry)))
        def check(data):
            try:
                commands = decode_entry(data)
            except Corrupt:
                return
            outcomes, _ = store.apply_entry(index[0] + 1, encode_entry(commands))
            index[0] += 1
            assert len(outcomes) == len(commands)

        check()
    finally:
        store.close()


def test_a_corrupt_stored_record_stops_a_read_with_corrupt(tmp_path):
    store, job_id = _created_store(tmp_path / "s")
    try:
        with store.env.begin(write=True) as txn:
            txn.put(keys.job_key(job_id), b"\x95\xc1", db=store.db["jobs"])
        with pytest.raises(Corrupt, match="Job"):
            store.get_job(OWNER, job_id)
    finally:
        store.close()


def test_a_snapshot_naming_an_unknown_table_is_corrupt(tmp_path):
    store, _ = _created_store(tmp_path / "s")
    try:
        before = store.digest()
        data = encoder.encode([["no_such_table", []]])
        with pytest.raises(Corrupt, match="no_such_table"):
            store.write(lambda txn: store.restore_in(txn, 9, data))
        with pytest.raises(Corrupt, match="a stored snapshot does not decode"):
            store.write(lambda txn: store.restore_in(txn, 9, b"\xc1"))
        assert store.digest() == before
    finally:
        store.close()
