"""`PatchJob`: a job changed in place in one command, decided from the
replicated state and the command alone (docs/semantics.md "Changing a job")."""

import json
from pathlib import Path

import msgspec
import trio

from tempo import errors, ids
from tempo.engine.commands import Claim, ClaimRuns, Command, CreateJobs, PatchJob, PauseJob
from tempo.engine.jobs import Jobs
from tempo.engine.records import Job, Run, Schedule
from tempo.engine.store import Store
from tempo.schema import JobCreate

from .test_store import Log

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
HOUR = 3_600_000


class _Committer:
    """Commits by applying at once to the log's store."""

    def __init__(self, log: Log):
        self.log = log

    async def submit(self, command: Command) -> object:
        return self.log.apply(command)[0]


def _body(**fields: object) -> JobCreate:
    fields.setdefault("target", "queue:reports")
    fields.setdefault("schedule", {"cron": "0 0 * * *"})
    return msgspec.json.decode(json.dumps(fields), type=JobCreate)


def _setup(store: Store, now_ms: list[int]) -> tuple[Log, Jobs, Job]:
    log = Log(store)
    jobs = Jobs(store, _Committer(log), now_ms=lambda: now_ms[0])  # type: ignore[arg-type] - the log commits
    item = jobs.new_job(OWNER, _body(), now_ms[0], from_msgpack=False)
    [[created]] = log.apply(CreateJobs(now_ms[0], [item]))
    return log, jobs, created.job


def _patch(jobs: Jobs, job: Job, body: JobCreate) -> Job:
    async def go() -> Job:
        return await jobs.patch(job, body, from_msgpack=False)

    return trio.run(go)


def _waiting(store: Store, job_id: str) -> list[Run]:
    return [r for r in store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=100, cursor_ms=None)[0] if r.status == "waiting"]


def test_a_job_stored_before_versions_reads_as_version_1() -> None:
    job = Job(ids.job_id_from_int(T0, 1), OWNER, None, "queue:q", None, Schedule(every_s=60), 1, (1,), 1, 0,
              "active", T0, None, None, None)
    fields = msgspec.msgpack.decode(msgspec.msgpack.encode(job))
    at = Job.__struct_fields__.index("version")
    assert fields[at] == 1
    older = msgspec.msgpack.encode(fields[:at])  # the record as written before `version`
    assert msgspec.msgpack.decode(older, type=Job).version == 1


def test_the_waiting_run_moves_in_the_same_command(store: Store) -> None:
    now = [T0]
    _, jobs, job = _setup(store, now)
    [before] = _waiting(store, job.id)
    now[0] = T0 + 10
    changed = _patch(jobs, job, _body(schedule={"every_s": 60}, target="queue:other"))
    assert changed.version == 2 and changed.target == "queue:other"
    [after] = _waiting(store, job.id)
    assert after.nominal_ms == T0 + 60_000 and after.due_ms == T0 + 60_000
    assert changed.next_run_at_ms == after.due_ms
    cancelled = store.get_run(OWNER, ids.run_id(job.id, before.nominal_ms))[0]
    assert cancelled.status == "cancelled"
    [(_, event)] = [(seq, e) for seq, e in store.list_events(OWNER, 0, 100) if e.type != "job.created"]
    assert (event.type, event.detail) == (
        "job.updated", {"old_version": 1, "new_version": 2, "changed": ["schedule", "target"]}
    )


def test_the_dispatcher_learns_the_new_target_of_every_waiting_run(store: Store) -> None:
    now = [T0]
    _, jobs, job = _setup(store, now)
    command = PatchJob(T0 + 1, OWNER, job.id, 1, jobs.new_job(OWNER, _body(target="queue:b"), T0, from_msgpack=False).job,
                       False, None, None)
    outcomes, changes = store.apply_commands(2, [command])
    assert isinstance(outcomes[0], Job)
    [(runs_key, run, fed)] = changes.woken
    assert changes.left == [runs_key]
    assert fed is not None and fed.target == "queue:b" and run.job_id == job.id


def test_another_version_changes_nothing(store: Store) -> None:
    now = [T0]
    log, jobs, job = _setup(store, now)
    made = jobs.new_job(OWNER, _body(name="x"), T0, from_msgpack=False).job
    [outcome] = log.apply(PatchJob(T0 + 1, OWNER, job.id, 2, made, True, T0 + HOUR, T0 + HOUR))
    assert isinstance(outcome, errors.VersionMismatch)
    assert store.get_job(OWNER, job.id).version == 1 and store.get_job(OWNER, job.id).name is None


def test_a_paused_job_stays_paused_and_a_claimed_run_goes_on(store: Store) -> None:
    now = [T0]
    log, jobs, job = _setup(store, now)
    job = _patch(jobs, job, _body(schedule={"at": "2027-01-15T07:00:00Z"}))
    [run] = _waiting(store, job.id)
    [[claimed]] = log.apply(ClaimRuns(T0 + 5, "w", [Claim(job.id, run.nominal_ms, T0 + 60_000, one_off=True)]))
    assert claimed is not None
    log.apply(PauseJob(T0 + 6, OWNER, job.id))
    now[0] = T0 + 7
    paused = _patch(jobs, store.get_job(OWNER, job.id), _body(schedule={"at": "2027-01-16T07:00:00Z"}))
    assert (paused.state, paused.next_run_at_ms, paused.version) == ("paused", None, 3)
    assert _waiting(store, job.id) == []
    still = store.get_run(OWNER, ids.run_id(job.id, run.nominal_ms))[0]
    assert (still.status, still.attempt, still.lease_expires_ms) == ("claimed", 1, T0 + 60_000)


def test_a_second_store_fed_the_same_entries_ends_the_same(store: Store, tmp_path: Path) -> None:
    now = [T0]
    log, jobs, job = _setup(store, now)
    now[0] = T0 + 3
    _patch(jobs, job, _body(schedule={"every_s": 7}, jitter_s=3))
    other = Store(str(tmp_path / "o"), map_bytes=64 << 20)
    try:
        for index, data in enumerate(log.entries, 1):
            other.apply_entry(index, data)
        assert other.digest() == store.digest()
        assert other.get_job(OWNER, job.id).version == 2
    finally:
        other.close()
