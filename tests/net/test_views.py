"""The claim answer's run views agree with `run_view`, field for field."""

import msgspec

from tempo import ids
from tempo.engine.records import Job, Run, Schedule
from tempo.net.views import claimed_view, run_view

T0_MS = 1_800_000_000_000


def job(target: str = "queue:work") -> Job:
    job_id = ids.job_id_from_int(T0_MS - 60_000, 12345)
    return Job(job_id, "default", "n", target, {"k": [1, 2]}, Schedule(at_ms=T0_MS), 3, (1, 5), 45, 0,
               "active", T0_MS - 60_000, None, T0_MS, T0_MS)


def test_claimed_views_are_run_views_with_the_jobs_target_payload_and_lease():
    j = job()
    runs = [
        Run(j.id, T0_MS, T0_MS + 7, "claimed", 2, "w1", T0_MS + 45_123, T0_MS + 123),
        Run(j.id, T0_MS + 1, T0_MS + 1, "done", 1, "w2", None, T0_MS + 5, T0_MS + 9, "out", "err", True),
        Run(j.id, T0_MS + 2, T0_MS + 2, "waiting"),
    ]
    views = [claimed_view(run, j) for run in runs]
    assert len(views) == len(runs)
    for run, view in zip(runs, views, strict=True):
        fields = msgspec.structs.asdict(view)
        assert (fields.pop("target"), fields.pop("payload"), fields.pop("lease_s")) == (j.target, j.payload, 45)
        assert fields.pop("timeout_s") == j.timeout_s
        assert fields == msgspec.structs.asdict(run_view(run))
    assert views[0].lease_expires_at == "2027-01-15T08:00:45.123Z"
    assert views[1].finished_at == "2027-01-15T08:00:00.009Z" and views[2].started_at is None
