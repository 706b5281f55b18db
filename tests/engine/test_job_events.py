"""The audit trail of a job (issue 25 finding 7): apply writes one event
per change (`job.created`, `job.updated`, `job.paused`, `job.resumed`,
`job.deleted`), stamped with the command's time, never the clock's, with
the job's version; an update names the fields it changed, a pause its
note. A request that changes nothing writes nothing (docs/api.md "Events")."""

import trio

from tempo.engine.commands import DeleteJob, PauseJob
from tempo.engine.records import Event, Job
from tempo.engine.store import Store

from .test_patch_job import OWNER, T0, _body, _patch, _setup

JOB_TYPES = ("job.created", "job.updated", "job.paused", "job.resumed", "job.deleted")


def _job_events(store: Store, job_id: str) -> list[Event]:
    return [e for _, e in store.list_events(OWNER, 0, 1000) if e.job_id == job_id and e.type in JOB_TYPES]




def test_each_change_writes_one_event(store: Store) -> None:
    now = [T0]
    log, jobs, job = _setup(store, now)
    [created] = _job_events(store, job.id)
    assert (created.type, created.at_ms, created.run_id, created.detail) == ("job.created", T0, None, {"version": 1})

    now[0] = T0 + 1000
    patched = _patch(jobs, job, _body(name="nightly", lease_s=90))
    updated = _job_events(store, job.id)[-1]
    assert updated.type == "job.updated" and updated.at_ms == T0 + 1000
    assert updated.detail == {"old_version": 1, "new_version": 2, "changed": ["lease_s", "name"]}
    _patch(jobs, patched, _body(name="nightly", lease_s=90))  # changes nothing: no event
    assert len(_job_events(store, job.id)) == 2

    log.apply(PauseJob(T0 + 2000, OWNER, job.id, by_owner="ops", by_role="admin", note="db migration"))
    log.apply(PauseJob(T0 + 2500, OWNER, job.id, note="again"))  # paused already: no change, no event
    paused = _job_events(store, job.id)[-1]
    assert (paused.type, paused.at_ms) == ("job.paused", T0 + 2000)
    assert paused.detail == {"version": 2, "note": "db migration", "by": {"owner": "ops", "role": "admin"}}

    now[0] = T0 + 3000
    trio.run(jobs.resume, OWNER, job.id)
    trio.run(jobs.resume, OWNER, job.id)  # active already: no event
    resumed = _job_events(store, job.id)[-1]
    assert (resumed.type, resumed.at_ms, resumed.detail) == ("job.resumed", T0 + 3000, {"version": 2})

    log.apply(DeleteJob(T0 + 4000, OWNER, job.id))
    deleted = _job_events(store, job.id)[-1]
    assert (deleted.type, deleted.at_ms, deleted.detail) == ("job.deleted", T0 + 4000, {"version": 2})
    assert [e.type for e in _job_events(store, job.id)] == list(JOB_TYPES)


def test_a_patch_names_every_field_it_changed(store: Store) -> None:
    now = [T0]
    _, jobs, job = _setup(store, now)
    changed: Job = _patch(jobs, job, _body(
        schedule={"every_s": 60}, retry={"max_attempts": 3}, labels={"team": "a"}, payload={"n": 1},
    ))
    assert changed.version == 2
    assert _job_events(store, job.id)[-1].detail["changed"] == ["labels", "payload", "retry", "schedule"]

