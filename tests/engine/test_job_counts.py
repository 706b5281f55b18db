"""Jobs by state per owner (`job_counts`, engine/tables/layout.py): apply
keeps the counts in the transaction that changes a job's state, a store
without them counts them when it opens, and `Store.job_counts` reads them
for one owner or for every owner."""

from pathlib import Path

from tempo.engine.commands import CreateJobs, DeleteJob, PatchJob, PauseJob, ResumeJob
from tempo.engine.jobs import Jobs
from tempo.engine.plan import slot_after_ms
from tempo.engine.store import Store

from .store_hooks import forget_job_counts, job_counts_kept, job_counts_scanned
from .test_store import OWNER, T0, Log, body, scenario


def test_apply_counts_creates_pauses_resumes_and_deletes(store: Store) -> None:
    log = Log(store)
    maker = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
    repeating = [maker.new_job(OWNER, body(schedule={"every_s": 60}), T0, from_msgpack=False) for _ in range(3)]
    other = maker.new_job("globex", body(), T0, from_msgpack=False)
    log.apply(CreateJobs(T0, [*repeating, other]))
    assert store.job_counts(OWNER) == {"active": 3, "paused": 0, "completed": 0}
    assert store.job_counts("globex") == {"active": 1, "paused": 0, "completed": 0}
    assert store.job_counts("nobody") == {"active": 0, "paused": 0, "completed": 0}

    first, second, third = (m.job for m in repeating)
    # Two pauses of one job in one entry count it once; a pause of a paused job changes nothing.
    log.apply(PauseJob(T0 + 1, OWNER, first.id), PauseJob(T0 + 1, OWNER, second.id), PauseJob(T0 + 1, OWNER, first.id))
    assert store.job_counts(OWNER) == {"active": 1, "paused": 2, "completed": 0}
    slot = slot_after_ms(first.schedule, first.created_at_ms, T0 + 2, inclusive=False)
    log.apply(ResumeJob(T0 + 2, OWNER, first.id, slot, slot))
    assert store.job_counts(OWNER) == {"active": 2, "paused": 1, "completed": 0}
    log.apply(DeleteJob(T0 + 3, OWNER, second.id))
    assert store.job_counts(OWNER) == {"active": 2, "paused": 0, "completed": 0}
    # A patch that leaves the schedule nothing to run completes the job.
    ended = maker.new_job(OWNER, body(schedule={"every_s": 60}), T0, from_msgpack=False).job
    patch = PatchJob(T0 + 4, OWNER, third.id, third.version, ended, replan=True, slot_ms=None, due_ms=None)
    log.apply(patch)
    assert store.job_counts(OWNER) == {"active": 1, "paused": 0, "completed": 1}
    # An admin's count: every owner's.
    assert store.job_counts(None) == {"active": 2, "paused": 0, "completed": 1}
    assert job_counts_kept(store) == job_counts_scanned(store)


def test_a_store_without_the_counts_counts_its_jobs_when_it_opens(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    store = Store(path, map_bytes=64 << 20)
    try:
        scenario(Log(store))
        kept = job_counts_kept(store)
        assert kept and kept == job_counts_scanned(store)
        digest = store.digest()
        forget_job_counts(store)
        assert job_counts_kept(store) == {}
    finally:
        store.close()
    store = Store(path, map_bytes=64 << 20)
    try:
        assert job_counts_kept(store) == kept
        assert store.digest()[1] == digest[1]  # as apply had kept it, byte for byte
    finally:
        store.close()
