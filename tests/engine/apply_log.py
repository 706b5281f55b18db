"""Recorded apply logs: command sequences and the digest of the tables
after each entry, replayed by tests/engine/test_apply_replay.py to show
that apply gives byte-identical tables from one version to the next.

The fixture (`testdata/apply_log.msgpack.gz`: 400 logs, 9,258 entries)
was recorded from the engine tests' own workloads (the apply-total
property test, the lifecycle model, and the rule-by-rule tests: overlap,
catch-up, end conditions, patches, cancels, claim keys, history) and the
whole-node simulator's seeded workloads (tests/sim/node_workload.py, a
cluster's stores from the bootstrap snapshot on), with the apply of the
version before the rules moved out of engine/store.py. To record it again:

    TEMPO_LIFECYCLE_EXAMPLES=60 python -m pytest -p tests.engine.apply_log \
        tests/engine/test_apply_total.py tests/engine/test_lifecycle_model.py \
        tests/engine/test_overlap.py tests/engine/test_catch_up*.py \
        tests/engine/test_end_conditions.py tests/engine/test_patch_job.py \
        tests/engine/test_cancel_run.py tests/engine/test_claim_keys.py \
        tests/engine/test_missed_history.py tests/engine/test_history.py \
        tests/engine/test_outcomes.py tests/engine/test_store.py \
        tests/engine/test_job_events.py tests/engine/test_label_index.py \
        tests/engine/test_held_index.py tests/engine/test_dst_policy_records.py \
        tests/engine/test_create_batch.py tests/engine/test_apply_batched.py
    python -m pytest -p tests.engine.apply_log tests/sim/test_node_sim.py -k test_seeds
    python -m tests.engine.apply_log build

The first writes every store's entries, and the digest after each write
that applied one, to `$TEMPO_APPLY_LOG_RAW` (default
/tmp/tempo-apply-log.raw); the second replays each log on a fresh store,
keeps the part whose digests agree with those the workload saw (a store
the test also wrote to outside apply, a restore for one, stops agreeing
there), and writes the fixture with the replay's digest after every entry.
"""

import gzip
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from tempo.engine.commands import Command, encode_entry
from tempo.engine.store import Store

from .store_hooks import job_counts_kept, job_counts_scanned

FIXTURE = os.path.join(os.path.dirname(__file__), "testdata", "apply_log.msgpack.gz")
RAW = os.environ.get("TEMPO_APPLY_LOG_RAW", "/tmp/tempo-apply-log.raw")
# Tables added after the fixture was recorded: left out of its digests
# (every table it knew must stay byte-identical); `replay` checks each of
# them another way after every entry.
NEWER_TABLES = ("job_counts",)
# Bounds on the fixture: its logs and entries (a few MB at most).
LOGS_MAX = 400
ENTRIES_MAX = 20_000


class Entry(msgspec.Struct, array_like=True):
    index: int
    data: bytes
    digest: str | None  # None: not known (the entry shared its write with a later one)


class Log(msgspec.Struct):
    name: str  # the workload it came from
    entries: list[Entry]


def load() -> list[Log]:
    with gzip.open(FIXTURE, "rb") as f:
        return msgspec.msgpack.decode(f.read(), type=list[Log])


def replay(entries: list[Entry]) -> Iterator[tuple[Entry, str]]:
    """Each entry applied in order on a fresh store, with the digest after it."""
    with tempfile.TemporaryDirectory() as path:
        store = Store(os.path.join(path, "s"), map_bytes=256 << 20)
        try:
            if entries and entries[0].index > 1:
                # A cluster's store starts at the bootstrap snapshot, empty
                # (engine/raftlog.py), at the index before its first entry.
                store.write(lambda txn: store.restore_in(txn, entries[0].index - 1, b""))
            for entry in entries:
                store.apply_entry(entry.index, entry.data)
                assert_job_counts_kept(store)
                yield entry, store.digest(NEWER_TABLES)[1]
        finally:
            store.close()


def assert_job_counts_kept(store: Store) -> None:
    """`job_counts` as apply kept it equals the counts of the jobs table."""
    kept, counted = job_counts_kept(store), job_counts_scanned(store)
    assert kept == counted, f"job_counts {kept} != the jobs' {counted}"


# -- recording (a pytest plugin) ------------------------------------------------

_logs: dict[str, Log] = {}
_pending: dict[int, list[tuple[int, bytes]]] = {}
_test = ["?"]


def pytest_configure(config: Any) -> None:
    real_apply, real_write = Store.apply_decoded, Store.write

    def apply_decoded(self: Store, txn: Any, index: int, commands: list[Command]) -> Any:
        _pending.setdefault(id(self), []).append((index, encode_entry(commands)))
        return real_apply(self, txn, index, commands)

    def write(self: Store, work: Callable[[Any], Any]) -> Any:
        _pending.pop(id(self), None)
        result = real_write(self, work)
        applied = _pending.pop(id(self), [])
        if applied:
            log = _logs.setdefault(self.path, Log(_test[0], []))
            digest = self.digest(NEWER_TABLES)[1]
            for n, (index, data) in enumerate(applied):
                log.entries.append(Entry(index, data, digest if n == len(applied) - 1 else None))
        return result

    Store.apply_decoded = apply_decoded  # type: ignore[method-assign]
    Store.write = write  # type: ignore[method-assign]


def pytest_runtest_setup(item: Any) -> None:
    _test[0] = item.nodeid


def pytest_unconfigure(config: Any) -> None:
    with open(RAW, "ab") as f:
        for log in _logs.values():
            f.write(msgspec.msgpack.encode(log) + b"\n\n--\n\n")


# -- building the fixture ------------------------------------------------------------


def _verified(log: Log) -> Log:
    """The log up to its first entry whose replayed digest differs from the
    one recorded, every entry with the replay's digest."""
    kept: list[Entry] = []
    try:
        for entry, digest in replay(log.entries):
            if entry.digest is not None and entry.digest != digest:
                break
            kept.append(Entry(entry.index, entry.data, digest))
    except AssertionError:
        pass  # a gap in the indexes: the store had entries from elsewhere (a snapshot)
    # A write of several entries is verified at its last one only.
    while kept and log.entries[len(kept) - 1].digest is None and len(kept) < len(log.entries):
        kept.pop()
    return Log(log.name, kept)


def build() -> None:
    """Takes logs from each test file in turn (so every workload is in it),
    verified, distinct and of two entries at least, up to the bounds."""
    with open(RAW, "rb") as f:
        chunks = [c for c in f.read().split(b"\n\n--\n\n") if c]
    groups: dict[str, list[Log]] = {}
    for chunk in chunks:
        log = msgspec.msgpack.decode(chunk, type=Log)
        groups.setdefault(log.name.split("::")[0], []).append(log)
    logs: list[Log] = []
    seen: set[tuple[bytes, ...]] = set()
    total = 0
    while any(groups.values()) and len(logs) < LOGS_MAX and total < ENTRIES_MAX:
        for name in sorted(groups):
            if not groups[name]:
                continue
            log = _verified(groups[name].pop(0))
            key = tuple(e.data for e in log.entries)
            if len(log.entries) < 2 or key in seen or total + len(log.entries) > ENTRIES_MAX:
                continue
            seen.add(key)
            logs.append(log)
            total += len(log.entries)
    os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
    with gzip.GzipFile(FIXTURE, "wb", mtime=0) as f:
        f.write(msgspec.msgpack.encode(logs))
    names = sorted({log.name.split("::")[0] for log in logs})
    print(f"{len(logs)} logs, {total} entries, from {len(chunks)} recorded in {names}; {os.path.getsize(FIXTURE)} bytes")


if __name__ == "__main__":
    if sys.argv[1:] == ["build"]:
        build()
    else:
        sys.exit(__doc__)
