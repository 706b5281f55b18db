"""A range of missed slots as a row of the job's run history: written by
apply with its `run.missed` event, listed with the job's runs and under
`status=missed`, dropped with its history bucket, and rebuilt into the
runs index (docs/semantics.md "Catch-up after missed slots")."""

from tempo import limits
from tempo.engine.commands import (
    BackfillJob,
    Claim,
    ClaimRuns,
    CreateJobs,
    DropHistory,
    PauseJob,
    ResumeJob,
)
from tempo.engine.records import Missed
from tempo.engine.store import Store

from .store_hooks import forget_run_index
from .test_history import OWNER, T0, Log, new_job

MIN_MS = 60_000


def missed_rows(store: Store, job_id: str) -> list[tuple[int, str | None, int | None, int | None]]:
    runs, _ = store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=100, cursor_ms=None)
    return [(r.nominal_ms, r.reason, r.missed_until_ms, r.missed_count) for r in runs if r.status == "missed"]


def claim_with_catch_up(log: Log, store: Store) -> tuple[str, int, int]:
    """A minutely job whose first run is claimed a day late: the claim's
    catch-up runs the latest slot and records the ones between."""
    made = new_job(T0, schedule={"every_s": 60})
    jid = made.job.id
    log.apply(CreateJobs(T0, [made]))
    s0 = store.get_job(OWNER, jid).slot_ms
    at_ms = s0 + limits.day_ms + 30_000
    latest = s0 + limits.day_ms
    missed = [Missed("policy", s0 + MIN_MS, latest, 1439)]
    log.apply(ClaimRuns(at_ms, "w1", [Claim(jid, s0, at_ms + MIN_MS, latest, at_ms, missed=missed)]))
    return jid, s0, at_ms


def test_a_catch_up_writes_a_missed_row_in_history(store):
    log = Log(store)
    jid, s0, at_ms = claim_with_catch_up(log, store)
    assert missed_rows(store, jid) == [(s0 + MIN_MS, "policy", s0 + limits.day_ms, 1439)]
    [row] = [r for r in store.list_runs(OWNER, jid, since_ms=None, until_ms=None, limit=10, cursor_ms=None)[0]
             if r.status == "missed"]
    assert (row.due_ms, row.finished_ms, row.attempt) == (s0 + MIN_MS, at_ms, 0)
    events = [e for _, e in store.list_events(OWNER, 0, 100) if e.type == "run.missed"]
    assert [e.detail["count"] for e in events] == [1439]  # the event is kept too


def test_status_missed_lists_the_rows_and_only_them(store):
    log = Log(store)
    jid, s0, _ = claim_with_catch_up(log, store)
    runs, cursor = store.list_owner_runs(OWNER, status="missed", limit=10, cursor=None)
    assert [(r.job_id, r.nominal_ms, r.status) for r in runs] == [(jid, s0 + MIN_MS, "missed")]
    assert cursor is None
    everything, _ = store.list_owner_runs(OWNER, status=None, limit=10, cursor=None)
    assert "missed" in {r.status for r in everything}
    done, _ = store.list_owner_runs(OWNER, status="done", limit=10, cursor=None)
    assert done == []


def test_a_pause_records_its_range_in_history(store):
    log = Log(store)
    made = new_job(T0, schedule={"every_s": 60})
    jid = made.job.id
    log.apply(CreateJobs(T0, [made]))
    s0 = store.get_job(OWNER, jid).slot_ms
    log.apply(PauseJob(T0 + 1000, OWNER, jid))
    resume_ms = s0 + 10 * MIN_MS + 5
    nxt = s0 + 11 * MIN_MS
    log.apply(ResumeJob(resume_ms, OWNER, jid, nxt, nxt, [Missed("paused", s0 + MIN_MS, nxt, 10)]))
    assert missed_rows(store, jid) == [(s0 + MIN_MS, "paused", nxt, 10)]


def test_retention_drops_the_row_with_its_bucket(store):
    log = Log(store)
    jid, _, at_ms = claim_with_catch_up(log, store)
    day = at_ms // limits.day_ms
    log.apply(DropHistory(at_ms + 40 * limits.day_ms, day + 1))
    assert missed_rows(store, jid) == []
    assert store.list_owner_runs(OWNER, status="missed", limit=10, cursor=None) == ([], None)


def test_the_runs_index_rebuilt_at_open_holds_the_row(store, tmp_path):
    log = Log(store)
    _, s0, _ = claim_with_catch_up(log, store)
    forget_run_index(store)
    store.close()
    again = Store(str(tmp_path / "s"), map_bytes=64 << 20)
    try:
        runs, _ = again.list_owner_runs(OWNER, status="missed", limit=10, cursor=None)
        assert [r.nominal_ms for r in runs] == [s0 + MIN_MS]
    finally:
        again.close()


def test_a_backfill_of_the_first_missed_slot_runs_it(store):
    log = Log(store)
    jid, s0, at_ms = claim_with_catch_up(log, store)
    [made] = log.apply(BackfillJob(at_ms + 1, OWNER, jid, [s0 + MIN_MS, s0 + 2 * MIN_MS]))
    assert [r.nominal_ms for r in made] == [s0 + MIN_MS, s0 + 2 * MIN_MS]
    runs, _ = store.list_runs(OWNER, jid, since_ms=s0 + MIN_MS, until_ms=s0 + MIN_MS + 1, limit=10, cursor_ms=None)
    assert [(r.status, r.backfill) for r in runs] == [("waiting", True)]
