"""Apply gives byte-identical tables across versions: the recorded logs of
tests/engine/apply_log.py (command sequences from the engine tests'
workloads and the whole-node simulator, with the digest of every table
after each entry, as the apply before the rules moved out of
engine/store.py left them) replayed through today's apply, every digest
compared (docs/design.md "Apply: the rules and the tables")."""

from collections import Counter

import pytest

from .apply_log import Entry, load, replay

LOGS = load()


def test_the_fixture_holds_every_workload() -> None:
    kinds = Counter(log.name.split("::")[0] for log in LOGS)
    for wanted in ("test_apply_total", "test_lifecycle_model", "test_overlap", "test_node_sim", "test_claim_keys",
                   "test_end_conditions", "test_cancel_run", "test_history"):
        assert any(wanted in name for name in kinds), wanted
    assert sum(len(log.entries) for log in LOGS) > 5_000


@pytest.mark.parametrize("part", range(4))
def test_replay_gives_the_recorded_digests(part: int) -> None:
    for log in LOGS[part::4]:
        for n, (entry, digest) in enumerate(replay(log.entries)):
            assert digest == entry.digest, f"{log.name}: entry {n} (index {entry.index}) gives other tables"


def test_a_changed_log_gives_other_digests() -> None:
    """The comparison can fail: a log with one entry left out stops
    matching at that entry or after it."""
    log = max(LOGS, key=lambda one: len(one.entries))
    entries = log.entries[:]
    del entries[len(entries) // 2]
    shifted = [Entry(n + entries[0].index, e.data, e.digest) for n, e in enumerate(entries)]
    assert any(digest != entry.digest for entry, digest in replay(shifted))
