"""Run history by day buckets: where finished runs go, how every read finds
them, and `DropHistory` dropping exactly the old buckets, deterministically."""

import json
from pathlib import Path

import msgspec
import pytest
import trio

from tempo import errors, ids, limits
from tempo.engine import keys
from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    CreateJobs,
    DeleteJob,
    DropHistory,
    PauseJob,
    ReportResults,
    Result,
    ResumeJob,
    TriggerJob,
)
from tempo.engine.jobs import Jobs
from tempo.engine.retention import Retention, before_day
from tempo.engine.store import Store, bucket_name
from tempo.schema import JobCreate

from .test_store import Log as StoreLog

OWNER = "default"
DAY = limits.day_ms
D0 = 20_833  # 2027-01-15
T0 = D0 * DAY + 8 * 3_600_000
LIVE = ("jobs", "jobs_by_owner", "runs", "runs_by_job", "request_keys", "open_minutes")
MAKER = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither


def new_job(at_ms: int, **fields):
    fields.setdefault("target", "queue:reports")
    fields.setdefault("schedule", {"at": "2027-01-15T08:00:00Z"})
    return MAKER.new_job(OWNER, msgspec.json.decode(json.dumps(fields), type=JobCreate), at_ms, from_msgpack=False)


class Log(StoreLog):
    """tests/engine/test_store.py's log of entries, and a finished run in one call."""

    def finish(self, job_id: str, nominal_ms: int, at_ms: int, *, ok: bool = True):
        """Claims the run and reports its first attempt at `at_ms`."""
        [run] = self.apply(ClaimRuns(at_ms, "w1", [Claim(job_id, nominal_ms, at_ms + 60_000, one_off=True)]))[0]
        assert run is not None and run.attempt == 1
        [outcome] = self.apply(ReportResults(at_ms, OWNER, [Result(job_id, nominal_ms, 1, ok, "out", None)]))[0]
        return outcome


@pytest.fixture
def store(tmp_path: Path):
    s = Store(str(tmp_path / "s"), map_bytes=64 << 20)
    yield s
    s.close()


def one_off(log: Log, at_ms: int = T0, **fields):
    made = new_job(at_ms, **fields)
    log.apply(CreateJobs(at_ms, [made]))
    return made.job


def bucket_rows(store: Store, day: int, head: bytes = b"") -> list[bytes]:
    return [key for key, _ in store.dump()[bucket_name(day % limits.history_buckets)] if key.startswith(head)]


def test_a_finished_run_moves_to_the_bucket_of_the_day_it_finished(store):
    log = Log(store)
    job = one_off(log)
    later = one_off(log, schedule={"at": "2030-01-01T00:00:00Z"})
    finished_at = (D0 + 1) * DAY + 5  # just after midnight: the next day's bucket
    run = log.finish(job.id, job.slot_ms, finished_at)
    assert run.status == "done"
    assert store.history_days() == [D0, D0 + 1]  # D0: the jobs' `job.created` events
    dump = store.dump()
    assert [keys.slot_of(k)[0] for k, _ in dump["runs"]] == [later.id]
    assert [keys.parse_by_job_key(k)[0] for k, _ in dump["runs_by_job"]] == [later.id]
    assert bucket_rows(store, D0 + 1, b"r") == [b"r" + keys.by_job_key(job.id, job.slot_ms)]
    assert len(bucket_rows(store, D0 + 1, b"e")) == 1  # job.completed
    found, _ = store.get_run(OWNER, ids.run_id(job.id, job.slot_ms))
    assert (found.status, found.finished_ms, found.output) == ("done", finished_at, "out")
    assert store.get_run_any(job.id, job.slot_ms) == found


def test_a_failed_run_and_its_events_go_to_the_bucket(store):
    log = Log(store)
    job = one_off(log, retry={"max_attempts": 1})
    run = log.finish(job.id, job.slot_ms, T0 + 1000, ok=False)
    assert run.status == "failed"
    events = store.list_events(OWNER, 0, 10)
    assert [(e.type, e.at_ms) for _, e in events] == [
        ("job.created", T0), ("run.failed", T0 + 1000), ("job.completed", T0 + 1000)
    ]
    assert store.dump()["events"] == []
    assert len(bucket_rows(store, D0)) == 5  # the run, its runs-by-status row and three events
    assert [seq for seq, _ in store.list_events(OWNER, events[1][0], 10)] == [events[2][0]]
    assert store.list_events("someone-else", 0, 10) == []


def test_runs_of_a_job_list_open_and_finished_newest_first_with_cursor(store):
    log = Log(store)
    made = new_job(T0, schedule={"every_s": 60})
    jid = made.job.id
    log.apply(CreateJobs(T0, [made]))
    slots = []
    for day in range(3):
        # Each day: claim the waiting run (which makes the next) and finish it.
        job = store.get_job(OWNER, jid)
        at_ms = T0 + day * DAY + 60_000
        slot, nxt = job.slot_ms, job.slot_ms + 60_000
        log.apply(ClaimRuns(at_ms, "w1", [Claim(jid, slot, at_ms + 60_000, nxt, nxt)]))
        log.apply(ReportResults(at_ms, OWNER, [Result(jid, slot, 1, True)]))
        slots.append(slot)
    assert store.history_days() == [D0, D0 + 1, D0 + 2]
    waiting = store.get_job(OWNER, jid).slot_ms
    expected = [waiting, *reversed(slots)]
    seen, cursor = [], None
    while True:
        page, cursor = store.list_runs(OWNER, jid, since_ms=None, until_ms=None, limit=2, cursor_ms=cursor)
        seen += [r.nominal_ms for r in page]
        if cursor is None:
            break
    assert seen == expected
    window, _ = store.list_runs(OWNER, jid, since_ms=slots[1], until_ms=waiting, limit=10, cursor_ms=None)
    assert [r.nominal_ms for r in window] == [slots[2], slots[1]]
    assert [r.status for r in store.list_runs(OWNER, jid, since_ms=None, until_ms=None, limit=10, cursor_ms=None)[0]] \
        == ["waiting", "done", "done", "done"]


def test_a_repeated_result_of_a_finished_run_is_answered_again(store):
    log = Log(store)
    job = one_off(log)
    first = log.finish(job.id, job.slot_ms, T0 + 1000)
    [again, other, wrong_attempt] = log.apply(ReportResults(T0 + 2000, OWNER, [
        Result(job.id, job.slot_ms, 1, True, "out", None),
        Result(job.id, job.slot_ms, 1, True, "something else", None),
        Result(job.id, job.slot_ms, 2, True, "out", None),
    ]))[0]
    assert again == first
    assert isinstance(other, errors.StaleAttempt) and isinstance(wrong_attempt, errors.StaleAttempt)
    [stranger] = log.apply(ReportResults(T0 + 2000, "someone-else", [Result(job.id, job.slot_ms, 1, True, "out")]))[0]
    assert isinstance(stranger, errors.NotFound)
    assert store.get_run(OWNER, ids.run_id(job.id, job.slot_ms))[0].finished_ms == T0 + 1000


def test_resume_brings_the_cancelled_run_back_from_history(store):
    log = Log(store)
    made = new_job(T0, schedule={"every_s": 3600})
    jid, slot = made.job.id, made.job.slot_ms
    log.apply(CreateJobs(T0, [made]))
    log.apply(PauseJob(T0 + 1000, OWNER, jid))
    assert store.dump()["runs"] == [] and store.history_days() == [D0]
    assert store.get_run(OWNER, ids.run_id(jid, slot))[0].status == "cancelled"
    [job] = log.apply(ResumeJob(T0 + 2000, OWNER, jid, slot, slot))
    assert job.state == "active" and job.next_run_at_ms == slot
    assert bucket_rows(store, D0, b"r") == []  # the job's events stay: created, paused, resumed
    run, _ = store.get_run(OWNER, ids.run_id(jid, slot))
    assert run.status == "waiting" and run.due_ms == slot
    assert store.open_minutes(0, 1 << 32, 10) == [keys.minute_of(slot)]


def test_resume_of_a_one_off_whose_cancelled_run_was_dropped_makes_it_anew(store):
    log = Log(store)
    job = one_off(log, schedule={"at": "2027-01-15T09:00:00Z"})
    log.apply(PauseJob(T0 + 1000, OWNER, job.id))
    log.apply(DropHistory(T0 + 40 * DAY, D0 + 10))
    with pytest.raises(errors.NotFound):
        store.get_run(OWNER, ids.run_id(job.id, job.slot_ms))
    late = T0 + 40 * DAY
    [resumed] = log.apply(ResumeJob(late, OWNER, job.id, job.slot_ms, late))
    assert resumed.state == "active" and resumed.next_run_at_ms == late
    run, _ = store.get_run(OWNER, ids.run_id(job.id, job.slot_ms))
    assert (run.status, run.due_ms, run.attempt) == ("waiting", late, 0)
    # An entry from before one-offs carried their due time: due at once too.
    other = one_off(log, schedule={"at": "2027-01-15T09:00:00Z"})
    log.apply(PauseJob(T0 + 1000, OWNER, other.id), DropHistory(late, D0 + 10))
    [resumed] = log.apply(ResumeJob(late + 5, OWNER, other.id, None, None))
    assert resumed.next_run_at_ms == late + 5


def test_delete_removes_finished_runs_too(store):
    log = Log(store)
    job = one_off(log)
    keep = one_off(log)
    log.finish(job.id, job.slot_ms, T0 + 1000)
    log.finish(keep.id, keep.slot_ms, T0 + 1000)
    [deleted] = log.apply(DeleteJob(T0 + 2000, OWNER, job.id))
    assert deleted is None
    assert bucket_rows(store, D0, b"r") == [b"r" + keys.by_job_key(keep.id, keep.slot_ms)]
    with pytest.raises(errors.NotFound):
        store.get_run(OWNER, ids.run_id(job.id, job.slot_ms))


def test_trigger_skips_a_slot_held_by_a_finished_run(store):
    log = Log(store)
    job = one_off(log, schedule={"at": "2030-01-01T00:00:00Z"})
    [first] = log.apply(TriggerJob(T0, OWNER, job.id))
    log.finish(job.id, first.nominal_ms, T0 + 10)
    [second] = log.apply(TriggerJob(T0, OWNER, job.id))
    assert second.nominal_ms == T0 + 1
    assert store.get_run(OWNER, ids.run_id(job.id, T0))[0].status == "done"


def history_scenario(log: Log) -> dict:
    """Runs finished on days D0..D0+3, a failure's events, open runs and
    paused jobs; answers the jobs."""
    out = {}
    for day in range(4):
        job = one_off(log, T0 + day * DAY, retry={"max_attempts": 1}, schedule={"at": "2027-01-15T08:00:00Z"})
        log.finish(job.id, job.slot_ms, T0 + day * DAY, ok=day != 1)
        out[day] = job
    out["waiting"] = one_off(log, schedule={"at": "2030-01-01T00:00:00Z"})
    claimed = out["claimed"] = one_off(log)
    log.apply(ClaimRuns(T0, "w1", [Claim(claimed.id, claimed.slot_ms, T0 + 60_000, one_off=True)]))
    return out


def test_drop_history_drops_exactly_the_buckets_before_the_day(store):
    log = Log(store)
    jobs = history_scenario(log)
    assert store.history_days() == [D0, D0 + 1, D0 + 2, D0 + 3]
    # Six job.created, four job.completed, one run.failed.
    assert len(store.list_events(OWNER, 0, 20)) == 11
    before = store.dump()
    log.apply(DropHistory(T0 + 3 * DAY, D0 + 2))
    assert store.history_days() == [D0 + 2, D0 + 3]
    after = store.dump()
    for table in LIVE:
        assert after[table] == before[table], table
    for day in (0, 1):
        with pytest.raises(errors.NotFound):
            store.get_run(OWNER, ids.run_id(jobs[day].id, jobs[day].slot_ms))
        assert store.get_job(OWNER, jobs[day].id).state == "completed"
        assert after[bucket_name((D0 + day) % limits.history_buckets)] == []
    for day in (2, 3):
        assert store.get_run(OWNER, ids.run_id(jobs[day].id, jobs[day].slot_ms))[0].status == "done"
    assert store.get_run(OWNER, ids.run_id(jobs["waiting"].id, jobs["waiting"].slot_ms))[0].status == "waiting"
    assert store.get_run(OWNER, ids.run_id(jobs["claimed"].id, jobs["claimed"].slot_ms))[0].status == "claimed"
    kept = store.list_events(OWNER, 0, 20)
    assert [seq for seq, _ in kept] == [6, 7, 8, 9]  # the job.created and job.completed of days 2 and 3
    assert [e.job_id for _, e in kept] == [jobs[2].id, jobs[2].id, jobs[3].id, jobs[3].id]
    # The feed goes on from a cursor of a dropped event.
    late = one_off(log, T0 + 3 * DAY, retry={"max_attempts": 1})
    log.finish(late.id, late.slot_ms, T0 + 3 * DAY, ok=False)
    assert [(seq, e.type) for seq, e in store.list_events(OWNER, 2, 20)][4:] == [
        (12, "job.created"), (13, "run.failed"), (14, "job.completed")
    ]
    assert [seq for seq, _ in store.list_events(OWNER, 10, 20)] == [12, 13, 14]
    [nothing] = log.apply(DropHistory(T0 + 3 * DAY, D0 + 2))
    assert nothing is None and store.history_days() == [D0 + 2, D0 + 3]


def test_a_slot_reused_around_the_ring_drops_its_old_day(store):
    log = Log(store)
    old = one_off(log)
    log.finish(old.id, old.slot_ms, T0)
    later = T0 + limits.history_buckets * DAY
    new = one_off(log, later)
    log.finish(new.id, new.slot_ms, later)
    assert store.history_days() == [D0 + limits.history_buckets]
    with pytest.raises(errors.NotFound):
        store.get_run(OWNER, ids.run_id(old.id, old.slot_ms))
    # A clock that far behind again: the run joins the newer day's bucket.
    back = one_off(log, T0)
    log.finish(back.id, back.slot_ms, T0)
    assert store.history_days() == [D0 + limits.history_buckets]
    assert store.get_run(OWNER, ids.run_id(back.id, back.slot_ms))[0].status == "done"


def test_two_stores_fed_the_same_entries_agree_byte_for_byte(two_stores):
    first, second = two_stores
    log = Log(first)
    history_scenario(log)
    log.apply(DropHistory(T0 + 3 * DAY, D0 + 1))
    for index, data in enumerate(log.entries, start=1):
        second.apply_entry(index, data)
    assert first.dump() == second.dump()
    assert first.digest() == second.digest()


def test_a_restore_replaces_the_buckets_with_the_snapshots(two_stores):
    source, target = two_stores
    history_scenario(Log(source))
    log = Log(target)
    stray = one_off(log, T0 + 30 * DAY)
    log.finish(stray.id, stray.slot_ms, T0 + 30 * DAY)  # a bucket the snapshot does not have
    index, data = source.snapshot_data()
    target.write(lambda txn: target.restore_in(txn, index, data))
    assert target.history_days() == [D0, D0 + 1, D0 + 2, D0 + 3]
    assert target.dump() == source.dump()
    assert target.digest() == source.digest()


def test_the_digest_sees_a_bucket(two_stores):
    first, second = two_stores
    for store in (first, second):
        log = Log(store)
        job = one_off(log)
        log.finish(job.id, job.slot_ms, T0 if store is first else T0 + DAY)
    assert first.digest()[0] == second.digest()[0]
    assert first.digest()[1] != second.digest()[1]


def test_before_day_keeps_the_whole_period():
    assert before_day(T0, 30) == D0 - 30
    # A run finished at the very end of day D0 - 30 ends its bucket's day at D0 - 29 00:00,
    # 30 days before D0 + 1 00:00: kept until then.
    assert before_day((D0 + 1) * DAY - 1, 30) == D0 - 30
    assert before_day((D0 + 1) * DAY, 30) == D0 - 29
    with pytest.raises(AssertionError):
        before_day(T0, 0)


class FakeCommitter:
    """Applies each command as its own entry, as the single node's committer does."""

    def __init__(self, store: Store):
        self.log = Log(store)
        self.commands = []

    async def submit(self, command):
        self.commands.append(command)
        [outcome] = self.log.apply(command)
        return outcome


async def test_the_service_proposes_a_drop_only_when_a_bucket_is_due(store):
    committer = FakeCommitter(store)
    history_scenario(committer.log)
    now = [T0 + 3 * DAY]
    retention = Retention(store, committer, retention_days=1, now_ms=lambda: now[0])
    assert await retention.drop_due()
    assert [type(c).__name__ for c in committer.commands] == ["DropHistory"]
    assert committer.commands[0].before_day == D0 + 2
    assert store.history_days() == [D0 + 2, D0 + 3]
    assert not await retention.drop_due()
    assert len(committer.commands) == 1
    now[0] += DAY
    async with trio.open_nursery() as nursery:
        await nursery.start(retention.run)
        while store.history_days() != [D0 + 3]:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert retention.buckets_dropped == 3


async def test_a_skewed_retention_period_stamps_scheduler_time(store):
    """`--retention-skew-days` (tests) counts the period days ahead, but
    the drop is stamped with scheduler time: every node's clock takes the
    stamps it applies as a floor (server.py `_observe_stamps`), so a stamp
    days ahead would move the cluster's time days ahead for good."""
    committer = FakeCommitter(store)
    history_scenario(committer.log)
    retention = Retention(store, committer, retention_days=1, now_ms=lambda: T0, skew_ms=3 * DAY)
    assert await retention.drop_due()
    [drop] = committer.commands
    assert drop.before_day == D0 + 2  # the period counted from three days on
    assert drop.at_ms == T0
