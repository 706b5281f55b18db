"""A store, a log that applies at once, the jobs service and the
dispatcher's core: enough to put calendars, make jobs and claim their
runs at chosen instants, with no process (tests/engine/test_calendars.py)."""

import json
from pathlib import Path
from typing import Any

import msgspec

from tempo import errors
from tempo.engine import keys
from tempo.engine.commands import ClaimRuns, Command, CreateJobs
from tempo.engine.dispatch_core import DispatchCore
from tempo.engine.jobs import Jobs
from tempo.engine.records import Calendar, Job, Run
from tempo.engine.store import Changes, Store
from tempo.schema import CalendarIn, JobCreate

OWNER = "default"


class Rig:
    def __init__(self, path: Path, now_ms: int):
        self.store = Store(str(path), map_bytes=64 << 20)
        self.index = 0
        self.now_ms = now_ms
        self.jobs = Jobs(self.store, self, now_ms=lambda: self.now_ms)  # type: ignore[arg-type] - it commits
        self.core = DispatchCore(self.store, now_ms)
        self.changes: list[Changes] = []

    def apply(self, *commands: Command) -> list[Any]:
        self.index += 1
        outcomes, changes = self.store.apply_commands(self.index, list(commands))
        self.changes.append(changes)
        return outcomes

    async def submit(self, command: Command) -> object:
        return self.apply(command)[0]

    async def put_calendar(self, name: str, owner: str = OWNER, if_version: int | None = None, **body: Any) -> Calendar:
        body.setdefault("timezone", "Europe/Berlin")
        spec = msgspec.json.decode(json.dumps(body), type=CalendarIn)
        return await self.jobs.calendars.put(owner, name, spec, if_version)

    def create(self, owner: str = OWNER, **fields: Any) -> Job:
        fields.setdefault("target", "queue:q")
        body = msgspec.json.decode(json.dumps(fields), type=JobCreate)
        item = self.jobs.new_job(owner, body, self.now_ms, from_msgpack=False)
        [created] = self.apply(CreateJobs(self.now_ms, [item]))[0]
        if isinstance(created, errors.TempoError):
            raise created
        return created.job

    def job(self, job_id: str) -> Job:
        found = self.store.get_job_any(job_id)
        assert found is not None
        return found

    def waiting(self, job_id: str) -> Run:
        """The job's waiting run of its slot."""
        job = self.job(job_id)
        assert job.slot_ms is not None
        run = self.store.get_run_any(job_id, job.slot_ms)
        assert run is not None and run.status == "waiting", run
        return run

    def claim(self, job_id: str, at_ms: int | None = None) -> Run | None:
        """The claim the leader makes of the job's slot run at `at_ms`
        (default: its due time), applied."""
        run = self.waiting(job_id)
        self.now_ms = run.due_ms if at_ms is None else at_ms
        runs_key = keys.run_key_of(keys.job_key(job_id), job_id, run.nominal_ms, run.due_ms)
        job = self.job(job_id)
        claim = self.core._claim_of(runs_key, job, {}, self.now_ms, claiming=True)
        assert claim is not None
        [outcome] = self.apply(ClaimRuns(self.now_ms, "w", [claim]))[0]
        assert outcome is None or isinstance(outcome, Run)
        return outcome

    def history(self, job_id: str) -> list[Run]:
        return self.store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=1000, cursor_ms=None)[0]

    def close(self) -> None:
        self.store.close()
