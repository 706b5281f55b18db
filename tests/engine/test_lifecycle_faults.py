"""Faults the lifecycle model (tests/engine/lifecycle_model.py) found, each
as a small deterministic test on the same engine rig."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tempo import clock, ids
from tempo.engine.records import Run

from .lifecycle_model import OWNER, T0_MS, Engine, drive


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = Engine(str(tmp_path / "data"))
    yield made
    made.core.check_memory()
    made.core.check_leases()
    made.close()


def _spec(schedule: dict[str, object], **fields: object) -> dict[str, object]:
    return {"target": "queue:a", "schedule": schedule, **fields}


def _counts(engine: Engine, job_id: str) -> tuple[int, int, int]:
    outcome = engine.store.job_outcome(job_id)
    return (0, 0, 0) if outcome is None else (outcome.done, outcome.failed, outcome.cancelled)


def _runs(engine: Engine, job_id: str) -> dict[int, Run]:
    return engine.runs_of(job_id)


def test_a_run_resume_revives_no_longer_counts_cancelled(engine: Engine) -> None:
    job = engine.create(_spec({"at": clock.iso_from_ms(T0_MS + 60_000)}))
    drive(engine.jobs.pause(OWNER, job.id))
    assert _counts(engine, job.id) == (0, 0, 1)
    drive(engine.jobs.resume(OWNER, job.id))
    assert [r.status for r in _runs(engine, job.id).values()] == ["waiting"]
    assert _counts(engine, job.id) == (0, 0, 0)
    # Cancelled again, it counts once.
    drive(engine.jobs.cancel_run(OWNER, ids.run_id(job.id, T0_MS + 60_000)))
    assert _counts(engine, job.id) == (0, 0, 1)
