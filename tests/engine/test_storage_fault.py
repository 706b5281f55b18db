"""Faults of the machine, apart from faults of a command: a failing write
(an I/O error, the disk or the map full, out of memory) raises
`errors.StorageFault` with nothing of the entry applied, and the same entry
applies whole once the fault is gone; LMDB's answers to tempo's own misuse
are raised as they are."""

import json
from pathlib import Path

import lmdb
import msgspec
import pytest

from tempo import errors, limits
from tempo.engine import store as store_module
from tempo.engine.commands import CreateJobs, PauseJob, encode_entry
from tempo.engine.jobs import Jobs
from tempo.engine.store import Created, Store
from tempo.schema import JobCreate

T0 = 1_800_000_000_000
MAKER = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither


def new_job(**fields):
    fields.setdefault("target", "queue:q")
    fields.setdefault("schedule", {"every_s": 60})
    return MAKER.new_job("default", msgspec.json.decode(json.dumps(fields), type=JobCreate), T0, from_msgpack=False)


@pytest.fixture
def store(tmp_path: Path):
    s = Store(str(tmp_path / "s"), map_bytes=64 << 20)
    yield s
    s.close()


def failing_on_second(fault: BaseException):
    """An `apply` that applies the first command of an entry and then
    fails as the machine would, midway through the entry."""
    real = store_module.apply
    seen = []

    def apply(tx, command):
        seen.append(command)
        if len(seen) == 2:
            raise fault
        return real(tx, command)

    return apply


@pytest.mark.parametrize(
    "fault",
    [
        lmdb.Error("mdb_txn_commit: Input/output error", 5),
        lmdb.DiskError("mdb_put: No space left on device", 28),
        lmdb.MapFullError("mdb_put: MDB_MAP_FULL", -30792),
        lmdb.MemoryError("mdb_put: Cannot allocate memory", 12),
        MemoryError(),
    ],
    ids=["eio", "enospc", "map_full", "enomem", "python_memory"],
)
def test_a_machine_fault_applies_nothing_and_the_entry_applies_later(store, monkeypatch, fault):
    first = new_job(request_key="one")
    data = encode_entry([CreateJobs(T0, [first]), CreateJobs(T0, [new_job(request_key="two")])])
    before = store.digest()
    monkeypatch.setattr(store_module, "apply", failing_on_second(fault))
    with pytest.raises(errors.StorageFault) as caught:
        store.apply_entry(1, data)
    assert caught.value.type == "insufficient_storage"
    assert store.digest() == before, "nothing of the entry is stored"
    assert store.applied_index() == 0, "the entry is not skipped"
    monkeypatch.undo()
    outcomes, _ = store.apply_entry(1, data)
    assert all(isinstance(o[0], Created) and o[0].new for o in outcomes)
    assert store.get_job("default", first.job.id).request_key == "one"


def test_a_full_map_is_a_storage_fault(tmp_path: Path):
    small = Store(str(tmp_path / "small"), map_bytes=1 << 20)
    try:
        big = [new_job(payload="x" * (limits.payload_bytes_max - 100)) for _ in range(40)]
        with pytest.raises(errors.StorageFault):
            small.apply_entry(1, encode_entry([CreateJobs(T0, big)]))
        assert small.applied_index() == 0
        outcomes, _ = small.apply_entry(1, encode_entry([CreateJobs(T0, [new_job()])]))
        assert isinstance(outcomes[0][0], Created)
    finally:
        small.close()


def test_lmdbs_answer_to_a_misuse_is_not_taken_for_the_machines(store, monkeypatch):
    monkeypatch.setattr(
        store_module, "apply", failing_on_second(lmdb.BadValsizeError("mdb_put: MDB_BAD_VALSIZE", -30781))
    )
    data = encode_entry([PauseJob(T0, "default", "j_x"), PauseJob(T0, "default", "j_y")])
    with pytest.raises(lmdb.BadValsizeError):
        store.apply_entry(1, data)
    assert store.applied_index() == 0


def test_a_panicked_environment_stops_the_node_rather_than_refusing_writes_for_ever(store, monkeypatch):
    """After a PanicError every transaction fails the same way: a 507 and a
    retry would never clear, so it is raised as it is and stops the node."""
    monkeypatch.setattr(store_module, "apply", failing_on_second(lmdb.PanicError("mdb_txn_begin: MDB_PANIC", -30795)))
    data = encode_entry([PauseJob(T0, "default", "j_x"), PauseJob(T0, "default", "j_y")])
    with pytest.raises(lmdb.PanicError):
        store.apply_entry(1, data)
    assert store.applied_index() == 0
