"""Apply remembers the owners of jobs (`Store.owners`, `Reads.owner_of`):
a one-off's claim moves its run's runs-by-status row without reading the
job, and what is remembered leaves the tables as reading would."""

from tempo import limits
from tempo.engine.commands import Claim, ClaimRuns, CreateJobs, ReportResults, Result
from tempo.engine.tables import reads

from .test_history import OWNER, T0, Log, new_job


class _Refuses:
    def decode(self, raw: bytes) -> object:
        raise AssertionError("a job's head was read for its owner")


def _spike(log, jobs):
    """Claims and reports the one-offs `jobs`, each in one command."""
    claims = [Claim(made.job.id, made.job.slot_ms, T0 + 60_000, one_off=True) for made in jobs]
    runs = log.apply(ClaimRuns(T0 + 1, "w1", claims))[0]
    assert all(run is not None for run in runs)
    log.apply(ReportResults(T0 + 2, OWNER, [Result(run.job_id, run.nominal_ms, 1, True) for run in runs]))


def test_a_one_off_claim_takes_its_owner_from_memory_and_stores_what_a_read_would(two_stores, monkeypatch):
    remembers, reads_it = two_stores
    logs = [Log(store) for store in two_stores]
    jobs = [new_job(T0) for _ in range(3)]
    for log in logs:
        log.apply(CreateJobs(T0, jobs))
    assert {made.job.id for made in jobs} <= set(remembers.owners)
    reads_it.owners.clear()  # as after a restart: the claim reads each job's head
    _spike(logs[1], jobs)
    assert set(reads_it.owners) == {made.job.id for made in jobs}
    monkeypatch.setattr(reads, "job_head_dec", _Refuses())
    _spike(logs[0], jobs)
    assert remembers.digest() == reads_it.digest()


def test_the_memory_of_owners_is_bounded(store, monkeypatch):
    monkeypatch.setattr(limits, "owners_remembered_max", 2)
    Log(store).apply(CreateJobs(T0, [new_job(T0) for _ in range(5)]))
    assert 1 <= len(store.owners) <= 2
