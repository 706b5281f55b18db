"""The store's state machine: deterministic apply, replay, and each command."""

import json
from pathlib import Path

import msgspec
import pytest

from tempo import clock, errors, ids
from tempo.engine import keys
from tempo.engine.commands import (
    CreateJobs,
    DeleteJob,
    PauseJob,
    ResumeJob,
    TriggerJob,
    encode_entry,
)
from tempo.engine.jobs import Jobs
from tempo.engine.plan import slot_after_ms
from tempo.engine.records import Run
from tempo.engine.store import Created, Store
from tempo.schema import JobCreate

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def body(**fields) -> JobCreate:
    fields.setdefault("target", "queue:reports")
    fields.setdefault("schedule", {"at": "2027-02-01T00:00:00Z"})
    return msgspec.json.decode(json.dumps(fields), type=JobCreate)


def new_job(maker: Jobs, at_ms: int, **fields):
    return maker.new_job(OWNER, body(**fields), at_ms, from_msgpack=False)


class Log:
    """Entries applied to a store in order, kept to feed a second store."""

    def __init__(self, store: Store):
        self.store = store
        self.entries: list[bytes] = []

    def apply(self, *commands):
        data = encode_entry(list(commands))
        self.entries.append(data)
        return self.store.apply_entry(len(self.entries), data)[0]


def scenario(log: Log) -> dict:
    """Create (with a key reused and one in conflict), pause, trigger, resume,
    delete, and a key released by delete; answers the jobs it made."""
    maker = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
    a = new_job(maker, T0, request_key="a", name="one-off")
    b = new_job(maker, T0, request_key="b", schedule={"every_s": 60})
    c = new_job(maker, T0, schedule={"cron": "0 * * * *", "timezone": "Europe/Berlin"})
    [outcomes] = log.apply(CreateJobs(T0, [a, b, c]))
    assert [o.new for o in outcomes] == [True, True, True]

    again = new_job(maker, T0 + 1, request_key="a", name="one-off")
    clash = new_job(maker, T0 + 1, request_key="b", schedule={"every_s": 61})
    [outcomes] = log.apply(CreateJobs(T0 + 1, [again, clash]))
    assert isinstance(outcomes[0], Created) and not outcomes[0].new
    assert outcomes[0].job.id == a.job.id
    assert isinstance(outcomes[1], errors.RequestKeyReused)

    bid = b.job.id
    [paused] = log.apply(PauseJob(T0 + 2, OWNER, bid))
    [run] = log.apply(TriggerJob(T0 + 3, OWNER, bid))
    slot = slot_after_ms(b.job.schedule, b.job.created_at_ms, T0 + 4, inclusive=False)
    [resumed] = log.apply(ResumeJob(T0 + 4, OWNER, bid, slot, slot))
    [deleted, missing] = log.apply(DeleteJob(T0 + 5, OWNER, a.job.id), PauseJob(T0 + 5, OWNER, a.job.id))
    assert deleted is None and isinstance(missing, errors.NotFound)
    reborn = new_job(maker, T0 + 6, request_key="a", name="one-off")
    [outcomes] = log.apply(CreateJobs(T0 + 6, [reborn]))
    assert outcomes[0].new and outcomes[0].job.id == reborn.job.id != a.job.id
    return {"a": a.job, "b": b.job, "c": c.job, "paused": paused, "run": run, "resumed": resumed}


def test_two_stores_fed_the_same_entries_are_byte_identical(tmp_path):
    first = Store(str(tmp_path / "one"), map_bytes=64 << 20)
    second = Store(str(tmp_path / "two"), map_bytes=64 << 20)
    try:
        log = Log(first)
        scenario(log)
        for index, data in enumerate(log.entries, start=1):
            second.apply_entry(index, data)
        assert first.dump() == second.dump()
        assert first.applied_index() == second.applied_index() == len(log.entries)
    finally:
        first.close()
        second.close()


def test_replaying_an_applied_index_changes_nothing(store):
    log = Log(store)
    scenario(log)
    before = store.dump()
    for index, data in enumerate(log.entries, start=1):
        outcomes, _ = store.apply_entry(index, data)
        assert all(isinstance(o, errors.Conflict) for o in outcomes)
    assert store.dump() == before
    assert store.applied_index() == len(log.entries)


def test_an_index_gap_stops_apply(store):
    with pytest.raises(AssertionError):
        store.apply_entry(2, encode_entry([PauseJob(T0, OWNER, "j_x")]))


def test_create_stores_job_and_waiting_run(store):
    log = Log(store)
    made = new_job(Jobs(None, None), T0, schedule={"every_s": 300})
    log.apply(CreateJobs(T0, [made]))
    job = store.get_job(OWNER, made.job.id)
    assert job.slot_ms == job.next_run_at_ms == T0 + 300_000
    runs, cursor = store.list_runs(OWNER, job.id, since_ms=None, until_ms=None, limit=10, cursor_ms=None)
    assert cursor is None
    assert [(r.nominal_ms, r.due_ms, r.status) for r in runs] == [(T0 + 300_000, T0 + 300_000, "waiting")]
    key = keys.run_key_of(keys.job_key(job.id), job.id, T0 + 300_000, T0 + 300_000)
    assert dict(store.dump()["runs"])[key]
    with pytest.raises(errors.NotFound):
        store.get_job("someone-else", job.id)


def test_pause_cancels_the_waiting_run_and_is_idempotent(store):
    log = Log(store)
    jobs = scenario(log)
    bid = jobs["b"].id
    assert jobs["paused"].state == "paused" and jobs["paused"].next_run_at_ms is None
    [again] = log.apply(PauseJob(T0 + 10, OWNER, bid))  # resumed in the scenario
    assert again.state == "paused" and again.next_run_at_ms is None
    run, _ = store.get_run(OWNER, ids.run_id(bid, again.slot_ms))
    assert run.status == "cancelled"
    before = store.dump()
    [twice] = log.apply(PauseJob(T0 + 11, OWNER, bid))
    assert twice.state == "paused"
    after = store.dump()
    del before["meta"], after["meta"]
    assert before == after  # only the applied index moved
    runs, _ = store.list_runs(OWNER, bid, since_ms=None, until_ms=None, limit=10, cursor_ms=None)
    assert "waiting" not in [r.status for r in runs if not r.triggered]


def test_trigger_runs_now_even_when_paused_and_moves_to_a_free_slot(store):
    log = Log(store)
    jobs = scenario(log)
    run: Run = jobs["run"]
    assert run.triggered and run.status == "waiting"
    assert run.nominal_ms == run.due_ms == T0 + 3
    [second] = log.apply(TriggerJob(T0 + 3, OWNER, jobs["b"].id))
    assert second.nominal_ms == T0 + 4
    assert store.get_job(OWNER, jobs["b"].id).slot_ms == jobs["resumed"].slot_ms


def test_resume_of_a_repeating_job_reuses_the_cancelled_slot(store):
    log = Log(store)
    made = new_job(Jobs(None, None), T0, schedule={"every_s": 60})
    jid = made.job.id
    log.apply(CreateJobs(T0, [made]))
    log.apply(PauseJob(T0 + 1000, OWNER, jid))
    slot = slot_after_ms(made.job.schedule, T0, T0 + 2000, inclusive=False)
    assert slot == T0 + 60_000
    [job] = log.apply(ResumeJob(T0 + 2000, OWNER, jid, slot, slot))
    assert job.state == "active" and job.next_run_at_ms == T0 + 60_000
    runs, _ = store.list_runs(OWNER, jid, since_ms=None, until_ms=None, limit=10, cursor_ms=None)
    assert [(r.nominal_ms, r.status) for r in runs] == [(T0 + 60_000, "waiting")]
    [same] = log.apply(ResumeJob(T0 + 3000, OWNER, jid, slot, slot))
    assert same.state == "active"


def test_resume_of_a_one_off_past_its_time_is_due_at_once(store):
    log = Log(store)
    made = new_job(Jobs(None, None), T0, schedule={"at": "2027-01-15T08:01:00Z"})
    jid = made.job.id
    log.apply(CreateJobs(T0, [made]))
    log.apply(PauseJob(T0 + 1, OWNER, jid))
    late = T0 + 3_600_000
    [job] = log.apply(ResumeJob(late, OWNER, jid, None, None))
    assert job.state == "active" and job.next_run_at_ms == late
    run, _ = store.get_run(OWNER, ids.run_id(jid, T0 + 60_000))
    assert run.status == "waiting" and run.due_ms == late


def test_delete_removes_job_runs_and_request_key(store):
    log = Log(store)
    made = new_job(Jobs(None, None), T0, request_key="gone", schedule={"every_s": 60})
    jid = made.job.id
    log.apply(CreateJobs(T0, [made]))
    log.apply(TriggerJob(T0 + 5, OWNER, jid))
    [deleted] = log.apply(DeleteJob(T0 + 6, OWNER, jid))
    assert deleted is None
    dump = store.dump()
    for table in ("jobs", "jobs_by_owner", "runs", "runs_by_job", "request_keys"):
        assert dump[table] == [], table
    with pytest.raises(errors.NotFound):
        store.get_job(OWNER, jid)
    with pytest.raises(errors.NotFound):
        store.get_run(OWNER, ids.run_id(jid, T0 + 5))
    [again, trigger, resume] = log.apply(
        DeleteJob(T0 + 7, OWNER, jid), TriggerJob(T0 + 7, OWNER, jid), ResumeJob(T0 + 7, OWNER, jid, None, None)
    )
    assert all(isinstance(o, errors.NotFound) for o in (again, trigger, resume))


def test_list_jobs_newest_first_with_cursor(store):
    log = Log(store)
    maker = Jobs(None, None)
    made = [new_job(maker, T0 + i, name=f"n{i}") for i in range(5)]
    log.apply(CreateJobs(T0, made))
    page, cursor = store.list_jobs(OWNER, 2, None)
    seen = [j.id for j in page]
    while cursor is not None:
        page, cursor = store.list_jobs(OWNER, 2, cursor)
        seen += [j.id for j in page]
    assert seen == [m.job.id for m in reversed(made)]


def test_scan_minute_answers_runs_by_due_time_then_job_id_not_by_shard(store):
    maker = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
    due_ms = [T0 + 5_000, T0 + 1_000, T0 + 5_000, T0 + 1_000] * 10
    made = [new_job(maker, T0 - 60_000 + i, schedule={"at": clock.iso_from_ms(d)}) for i, d in enumerate(due_ms)]
    Log(store).apply(CreateJobs(T0 - 60_000, made))
    assert len({ids.shard_of(m.job.id) for m in made}) > 10  # the table holds them shard by shard
    found = store.scan_minute(keys.minute_of(T0), T0, T0 + 60_000)
    order = [(run.due_ms, run.job_id) for _, run, _ in found]
    assert len(order) == len(made)
    assert order == sorted((m.first_due_ms, m.job.id) for m in made)


def test_the_highest_stamp_is_kept_with_the_data_and_reported_with_each_entry(tmp_path: Path):
    """A restart and a new leader start their clocks from it (clock.py)."""
    path = str(tmp_path / "stamps")
    store = Store(path, map_bytes=64 << 20)
    assert store.stamp_ms() == 0
    made = new_job(Jobs(None, None), T0, schedule={"every_s": 60})  # type: ignore[arg-type]
    entries = [
        [CreateJobs(T0, [made])],
        [PauseJob(T0 + 5_000, OWNER, made.job.id), TriggerJob(T0 + 2_000, OWNER, made.job.id)],
        [],  # a raft no-op or configuration entry
        [ResumeJob(T0 + 1_000, OWNER, made.job.id, None, None)],  # stamped below: the highest stays
    ]
    reported = []
    for index, commands in enumerate(entries, start=1):
        _, changes = store.apply_entry(index, encode_entry(commands) if commands else b"")
        reported.append(changes.stamp_ms)
    assert reported == [T0, T0 + 5_000, T0 + 5_000, T0 + 5_000]
    assert store.stamp_ms() == T0 + 5_000
    # A replayed entry changes nothing, the stamp included.
    store.apply_entry(2, encode_entry([PauseJob(T0 + 9_000, OWNER, made.job.id)]))
    assert store.stamp_ms() == T0 + 5_000
    index, data = store.snapshot_data()
    store.close()
    reopened = Store(path, map_bytes=64 << 20)
    assert reopened.stamp_ms() == T0 + 5_000
    reopened.close()
    copy = Store(str(tmp_path / "copy"), map_bytes=64 << 20)
    copy.write(lambda txn: copy.restore_in(txn, index, data))
    assert copy.stamp_ms() == T0 + 5_000  # a snapshot carries it
    copy.close()
