"""`CreateJobs` puts a command's new runs and index rows per table at its end:
the tables and answers must be what one item at a time gives."""

import gc
import json

import msgspec
import pytest

from tempo import errors, limits
from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    CreateJobs,
    DeleteJob,
    PauseJob,
    ReportResults,
    Result,
    ResumeJob,
    TriggerJob,
    encode_entry,
)
from tempo.engine.jobs import Jobs, payloads_pass
from tempo.engine.store import Created
from tempo.schema import JobCreate

OWNER = "default"
T0 = 20_833 * limits.day_ms + 8 * 3_600_000  # 2027-01-15T08:00:00Z
MAKER = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither


def new_job(at_ms: int, **fields):
    fields.setdefault("target", "queue:reports")
    fields.setdefault("schedule", {"at": "2027-01-15T08:00:00Z"})
    return MAKER.new_job(OWNER, msgspec.json.decode(json.dumps(fields), type=JobCreate), at_ms, from_msgpack=False)


def _items(n: int, **fields):
    return [new_job(T0, **fields, payload={"i": i}) for i in range(n)]


def test_a_batch_writes_the_tables_one_item_at_a_time_writes(two_stores):
    batch, items = two_stores
    made = _items(30, request_key=None) + _items(5, schedule={"every_s": 60})
    batch.apply_entry(1, encode_entry([CreateJobs(T0, made)]))
    items.apply_entry(1, encode_entry([CreateJobs(T0, [m]) for m in made]))
    assert batch.dump() == items.dump()
    assert batch.digest() == items.digest()
    with batch.env.begin() as txn:
        assert txn.stat(batch.db["runs"])["entries"] == 35
        assert txn.stat(batch.db["runs_by_job"])["entries"] == 35
        assert txn.stat(batch.db["jobs_by_owner"])["entries"] == 35


def test_a_request_key_repeated_in_one_batch_sees_the_first_items_run(two_stores):
    batch, _ = two_stores
    first = new_job(T0, request_key="k1", payload={"a": 1})
    again = new_job(T0, request_key="k1", payload={"a": 1})
    other = new_job(T0, request_key="k1", payload={"a": 2})
    [outcomes], changes = batch.apply_entry(1, encode_entry([CreateJobs(T0, [first, again, other])]))
    assert isinstance(outcomes[0], Created) and outcomes[0].new
    assert isinstance(outcomes[1], Created) and not outcomes[1].new
    assert outcomes[1].job.id == first.job.id
    # Its run was written before the answer was read: the job shows it due.
    assert outcomes[1].job.next_run_at_ms == first.job.next_run_at_ms is not None
    assert type(outcomes[2]).__name__ == "RequestKeyReused"
    assert len(changes.woken) == 1


def test_a_later_command_in_the_entry_reads_the_batchs_runs(two_stores):
    batch, _ = two_stores
    made = new_job(T0)
    [_, paused], changes = batch.apply_entry(
        1, encode_entry([CreateJobs(T0, [made]), PauseJob(T0 + 1, OWNER, made.job.id)])
    )
    assert paused.state == "paused"
    [run] = batch.list_runs(OWNER, made.job.id, since_ms=None, until_ms=None, limit=10, cursor_ms=None)[0]
    assert run.status == "cancelled"
    assert len(changes.left) == 1


@pytest.mark.parametrize(
    ("payloads", "from_msgpack", "passes"),
    [
        ([{"i": 1}, None, [1, "x"], 2**63 - 1], False, True),
        ([{"i": 1}, 2**64], False, False),  # an integer MessagePack cannot hold
        ([{"i": 1}, -(2**63) - 1], False, False),
        ([{"i": 1}, "x" * limits.payload_bytes_max], False, False),  # one too large
        ([b"raw"], True, False),  # a value JSON has not
        ([{1: "x"}], True, False),  # a key that is no string
        ([{"i": 1}, "x" * (limits.payload_bytes_max // 2)] * 2, False, False),  # too large only together
    ],
)
def test_payloads_pass_only_when_every_item_would(payloads, from_msgpack, passes):
    assert payloads_pass(payloads, from_msgpack=from_msgpack) is passes


def test_a_batch_with_one_bad_payload_names_that_item_only():
    bodies = [{"target": "queue:x", "schedule": {"at": "2027-01-15T08:00:00Z"}, "payload": p}
              for p in ({"i": 1}, {"big": 2**64}, "x" * (limits.payload_bytes_max + 1), {"i": 2})]
    items = [msgspec.json.decode(json.dumps(b), type=JobCreate) for b in bodies]
    passed = payloads_pass([i.payload for i in items], from_msgpack=False)
    assert not passed
    outcomes = []
    for item in items:
        try:
            outcomes.append(MAKER.new_job(OWNER, item, T0, from_msgpack=False, payload_passed=passed))
        except errors.TempoError as exc:
            outcomes.append(exc)
    assert [type(o).__name__ for o in outcomes] == ["NewJob", "Invalid", "TooLarge", "NewJob"]
    assert outcomes[1].errors[0][0] == outcomes[2].errors[0][0] == "payload"


def test_a_batchs_items_commands_and_views_are_untracked_by_the_cycle_collector():
    from tempo.net.views import job_view

    made = new_job(T0, payload={"i": 1})
    item = msgspec.json.decode(b'{"target":"queue:x","schedule":{"at":"2027-01-15T08:00:00Z"}}', type=JobCreate)
    assert not any(gc.is_tracked(x) for x in (item, item.schedule, item.retry, made, job_view(made.job)))


def test_apply_commands_leaves_the_tables_apply_entry_leaves(two_stores):
    """A node alone hands apply its commands unencoded (`Store.apply_commands`);
    a cluster's replicas apply the encoded entry. Both must write the same
    bytes and answer the same outcomes."""
    unencoded, encoded = two_stores
    one_off = new_job(T0, payload={"nested": [1, 2.5, None, True, "ü"], "big": 2**63 - 1}, name="n")
    every = new_job(T0, schedule={"every_s": 60}, request_key="k", retry={"max_attempts": 2, "backoff_s": [1]})
    cron = new_job(T0, schedule={"cron": "0 * * * *", "timezone": "Europe/Berlin"}, jitter_s=30)
    slot = one_off.job.slot_ms
    entries = [
        [CreateJobs(T0, [one_off, every, cron, new_job(T0, schedule={"every_s": 60}, request_key="k")])],
        [ClaimRuns(T0 + 1_000, "w1", [Claim(one_off.job.id, slot, T0 + 61_000, one_off=True)]),
         PauseJob(T0 + 1_000, OWNER, every.job.id)],
        [ReportResults(T0 + 2_000, OWNER, [Result(one_off.job.id, slot, 1, True, "out")]),
         ResumeJob(T0 + 3_000, OWNER, every.job.id, T0 + 60_000, T0 + 60_000),
         TriggerJob(T0 + 3_000, OWNER, cron.job.id),
         DeleteJob(T0 + 4_000, OWNER, cron.job.id),
         DeleteJob(T0 + 4_000, OWNER, cron.job.id)],
    ]
    datas = [encode_entry(commands) for commands in entries]  # before apply may touch the commands
    for index, (commands, data) in enumerate(zip(entries, datas, strict=True), start=1):
        got, _ = unencoded.apply_commands(index, commands)
        want, _ = encoded.apply_entry(index, data)
        assert [repr(o) for o in got] == [repr(o) for o in want]
    assert unencoded.dump() == encoded.dump()
    assert unencoded.digest() == encoded.digest()
