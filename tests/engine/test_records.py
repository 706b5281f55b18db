"""Records the dispatcher holds per run stay out of the cycle collector's walk."""

import gc

import msgspec

from tempo.engine.dispatch import ClaimedRun, Lease
from tempo.engine.records import Job, Run, Schedule


def test_decoded_jobs_runs_leases_and_claimed_runs_are_not_tracked_by_the_cycle_collector():
    job_id = "j_" + "0" * 26  # records check a job ID's length on decode
    job = Job(job_id, "default", None, "queue:work", {"a": [1, {"b": 2}]}, Schedule(at_ms=5), 3, (1,), 60, 0,
              "active", 1, None, 5, 5)
    run = Run(job_id, 5, 5, "waiting")
    decoded_job = msgspec.msgpack.decode(msgspec.msgpack.encode(job), type=Job)
    decoded_run = msgspec.msgpack.decode(msgspec.msgpack.encode(run), type=Run)
    assert decoded_job == job and decoded_run == run
    # A claim of 1,000 runs makes 1,000 `ClaimedRun`s: tracked, they set
    # off a collection of the youngest generation per claim.
    claimed = ClaimedRun(decoded_run, decoded_job)
    for value in (job, run, decoded_job, decoded_run, decoded_job.schedule, Lease(1, 2, 3, "default"), claimed):
        assert not gc.is_tracked(value), type(value).__name__
    assert gc.is_tracked(decoded_job.payload)  # its containers still are: a cycle in them is found
