"""Apply counts a job's outcome once a transaction however many of its runs
finish in one entry, and moves rows through one cursor a table: the tables
it leaves equal those of the same runs finished one entry each, and those
`build_run_index` (engine/tables/build.py) rebuilds from the runs alone."""

from pathlib import Path

from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    CreateJobs,
    DeleteJob,
    ReportResults,
    Result,
    TriggerJob,
)
from tempo.engine.store import Store

from .store_hooks import forget_run_index
from .test_history import OWNER, T0, Log, new_job


def runs_of_one_job(log: Log, count: int) -> tuple[str, list[int]]:
    """A one-off and `count - 1` triggered runs of it, all waiting."""
    made = new_job(T0, retry={"max_attempts": 1, "backoff_s": [0]})
    log.apply(CreateJobs(T0, [made]))
    job = made.job
    for n in range(count - 1):
        log.apply(TriggerJob(T0 + 1 + n, OWNER, job.id))
    assert job.slot_ms is not None
    nominals = [job.slot_ms] + [T0 + 1 + n for n in range(count - 1)]
    return job.id, nominals


def finish_all(log: Log, job_id: str, nominals: list[int], at_ms: int, *, one_entry: bool) -> None:
    claims = [Claim(job_id, nominal_ms, at_ms + 60_000) for nominal_ms in nominals]
    results = [Result(job_id, nominal_ms, 1, i % 3 != 1, "out", None if i % 3 != 1 else "boom")
               for i, nominal_ms in enumerate(nominals)]
    if one_entry:
        log.apply(ClaimRuns(at_ms, "w1", claims), ReportResults(at_ms + 1, OWNER, results))
        return
    for claim, result in zip(claims, results, strict=True):
        log.apply(ClaimRuns(at_ms, "w1", [claim]))
        log.apply(ReportResults(at_ms + 1, OWNER, [result]))


def tables_after(tmp_path: Path, name: str, *, one_entry: bool, delete: bool = False) -> dict:
    store = Store(str(tmp_path / name), map_bytes=64 << 20)
    try:
        log = Log(store)
        job_id, nominals = runs_of_one_job(log, 7)
        other_id, other_nominals = runs_of_one_job(log, 3)
        at_ms = T0 + 10 * 60_000
        finish_all(log, job_id, nominals, at_ms, one_entry=one_entry)
        if delete:
            # Finished and deleted in one entry: no outcome is left behind.
            claims = [Claim(other_id, n, at_ms + 60_000) for n in other_nominals]
            results = [Result(other_id, n, 1, True, "out", None) for n in other_nominals]
            log.apply(ClaimRuns(at_ms, "w1", claims), ReportResults(at_ms + 1, OWNER, results),
                      DeleteJob(at_ms + 2, OWNER, other_id))
            assert store.job_outcome(other_id) is None
        outcome = store.job_outcome(job_id)
        assert outcome is not None and (outcome.done, outcome.failed) == (5, 2)
        tables = store.dump()
        forget_run_index(store)
        store.close()
        store = Store(str(tmp_path / name), map_bytes=64 << 20)
        assert store.dump() == tables, "the index and outcomes as a rebuild from the runs makes them"
        return {name: rows for name, rows in tables.items() if name not in ("meta",)}
    finally:
        store.close()


def test_runs_of_one_job_finished_in_one_entry_count_as_one_at_a_time(tmp_path: Path):
    batched = tables_after(tmp_path, "one", one_entry=True)
    apart = tables_after(tmp_path, "apart", one_entry=False)
    # Job IDs differ between the two stores; what is kept under them may not.
    assert [v for _, v in batched["job_outcomes"]] == [v for _, v in apart["job_outcomes"]]
    assert {name: len(rows) for name, rows in batched.items()} == {name: len(rows) for name, rows in apart.items()}


def test_a_job_deleted_in_the_entry_its_runs_finish_in_leaves_no_outcome(tmp_path: Path):
    tables_after(tmp_path, "d", one_entry=True, delete=True)
