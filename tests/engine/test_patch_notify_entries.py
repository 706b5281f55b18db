"""A `PatchJob` logged before `notify` could be patched carries no notify
setting of its own: applied by this version (a follower catching up after an
upgrade, a log replayed), it keeps the job's."""

import msgspec

from tempo.engine.commands import CreateJobs, PatchJob, decode_entry
from tempo.engine.jobs import Jobs
from tempo.engine.records import Notify
from tempo.engine.store import Store

from .test_patch_job import OWNER, T0, _body
from .test_store import Log


def test_an_entry_from_before_notify_patches_keeps_the_jobs_notify(store: Store) -> None:
    log = Log(store)
    jobs = Jobs(store, None, now_ms=lambda: T0)  # type: ignore[arg-type] - commands are applied by hand
    item = jobs.new_job(OWNER, _body(), T0, from_msgpack=False)
    item.job.notify = Notify("https://hooks.example/x", ("run.failed",))
    [[created]] = log.apply(CreateJobs(T0, [item]))
    made = msgspec.structs.replace(created.job, name="renamed", notify=None)
    patch = PatchJob(T0 + 1, OWNER, created.job.id, 1, made, False, None, None)
    # As the previous version wrote it: the fields up to `due_ms`, no more.
    old_entry = msgspec.msgpack.encode([msgspec.to_builtins(patch)[:9]])
    [decoded] = decode_entry(old_entry)
    assert isinstance(decoded, PatchJob) and decoded.sets_notify is False
    log.apply(decoded)
    job = store.get_job(OWNER, created.job.id)
    assert job.name == "renamed" and job.version == 2
    assert job.notify == Notify("https://hooks.example/x", ("run.failed",))


def test_a_patch_that_sets_notify_sets_it(store: Store) -> None:
    log = Log(store)
    jobs = Jobs(store, None, now_ms=lambda: T0)  # type: ignore[arg-type] - commands are applied by hand
    item = jobs.new_job(OWNER, _body(), T0, from_msgpack=False)
    item.job.notify = Notify("https://hooks.example/x", ("run.failed",))
    [[created]] = log.apply(CreateJobs(T0, [item]))
    made = msgspec.structs.replace(created.job, notify=None)
    [job] = log.apply(PatchJob(T0 + 1, OWNER, created.job.id, 1, made, False, None, None, sets_notify=True))
    assert job.notify is None
