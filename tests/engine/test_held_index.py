"""The held-runs index (engine/tables/ `runs_held`): the open runs an
overlap policy looks at, claimed or waiting buffered, and no backfill run.
The policy's decisions read it rather than every open run of the job, so
a job with many backfill runs waiting decides as fast as one without. The
lifecycle model (lifecycle_model.py) checks the index after every step;
these are the cases it reaches seldom."""

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tempo import clock
from tempo.engine.store import Store
from tempo.schema import BackfillIn

from .lifecycle_model import OWNER, T0_MS, Engine, drive
from .store_hooks import forget_held_index, held_rows


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = Engine(str(tmp_path / "data"))
    yield made
    made.close()


def _backfill(engine: Engine, job_id: str, from_ms: int, until_ms: int) -> tuple[int, int]:
    body = msgspec.json.decode(
        msgspec.json.encode({"from": clock.iso_from_ms(from_ms), "until": clock.iso_from_ms(until_ms)}), type=BackfillIn
    )
    return drive(engine.jobs.backfill(OWNER, job_id, body))


def _skip_job_with_backfill(engine: Engine) -> str:
    """A `buffer_one` job of one-second slots whose first run waited 400 s
    (so a claim found it missed, and made the latest slot's run, due at
    once), with 300 backfill runs waiting before that slot: the job's ID."""
    job = engine.create({"target": "queue:a", "schedule": {"every_s": 1}, "overlap": "buffer_one"})
    engine.advance(400)
    assert engine.claim(["a"], 1) == []
    assert _backfill(engine, job.id, T0_MS + 2_000, T0_MS + 302_000) == (300, 0)
    return job.id


def test_only_claimed_and_buffered_runs_are_held_never_backfill(engine: Engine) -> None:
    job_id = _skip_job_with_backfill(engine)
    assert held_rows(engine.store) == set()  # 300 backfill runs wait: none is held
    claimed = engine.claim(["a"], 3)
    slot_runs = [r for r in claimed if not r.backfill]
    assert len(slot_runs) == 1 and len(claimed) == 3
    held = held_rows(engine.store)
    assert held == {(job_id, r.nominal_ms) for r in slot_runs}  # claimed backfill runs are not held either
    engine.advance(1)
    engine.claim(["a"], 0)  # a tick: the next slot comes due behind the running run
    buffered = {(job_id, r.nominal_ms) for r in engine.runs_of(job_id).values() if r.buffered}
    assert buffered and held_rows(engine.store) == held | buffered
    for run in slot_runs:
        engine.report(job_id, run.nominal_ms, 1, True, None)
    # The running run ended: the buffered one is released, and nothing is held.
    assert held_rows(engine.store) == set()


def test_a_store_without_the_index_builds_it_when_it_opens(engine: Engine, tmp_path: Path) -> None:
    _skip_job_with_backfill(engine)
    engine.claim(["a"], 3)
    engine.advance(1)
    engine.claim(["a"], 0)
    kept = held_rows(engine.store)
    assert len(kept) >= 2
    forget_held_index(engine.store)
    assert held_rows(engine.store) == set()
    engine.store.close()
    reopened = Store(str(tmp_path / "data"), map_bytes=64 << 20)
    try:
        assert held_rows(reopened) == kept
    finally:
        reopened.close()
        engine.store = Store(str(tmp_path / "data"), map_bytes=64 << 20)  # for the fixture to close


def test_a_job_without_a_policy_has_no_rows_until_a_patch_gives_it_one(engine: Engine) -> None:
    """The index costs the jobs without a policy nothing (their claims and
    results write no row); a patch that gives a job a policy reads its
    open runs once for the runs it then holds, and one that takes the
    policy away drops them."""
    from .test_lifecycle_faults import _patch

    spec = {"target": "queue:a", "schedule": {"every_s": 1}}
    job = engine.create(spec)
    engine.advance(1)
    [running] = engine.claim(["a"], 1)
    assert held_rows(engine.store) == set()
    _patch(engine, job.id, {**spec, "overlap": "skip"})
    assert held_rows(engine.store) == {(job.id, running.nominal_ms)}
    engine.advance(1)
    assert engine.claim(["a"], 1) == []  # the run claimed before the policy still runs: the slot is skipped
    _patch(engine, job.id, {**spec, "overlap": None})
    assert held_rows(engine.store) == set()
    engine.report(job.id, running.nominal_ms, 1, True, None)
    assert held_rows(engine.store) == set()
