"""Run the simulator over many seeds, and check that it can fail."""

from __future__ import annotations

import os
import random

import pytest

from tempo.raft import Entry, HardState

from .cluster import Simulator
from .invariants import SimFailure
from .linearizability import LogModel, Op, SetModel, check
from .storage import SimStorage

SEEDS = int(os.environ.get("TEMPO_SIM_SEEDS", "1000"))
CHUNK = 50


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK))
def test_seeds(start: int) -> None:
    for seed in range(start, min(start + CHUNK, SEEDS)):
        Simulator(seed).run()  # raises SimFailure naming the seed and replay command


def test_the_same_seed_gives_the_same_trace() -> None:
    assert Simulator(7).run() == Simulator(7).run()
    assert Simulator(7).run() != Simulator(8).run()


def first_failure(test_bug: str) -> SimFailure | None:
    for seed in range(SEEDS):
        try:
            Simulator(seed, test_bug).run()
        except SimFailure as failure:
            return failure
    return None


def test_a_vote_that_is_not_persisted_is_caught() -> None:
    failure = first_failure("vote_not_persisted")
    assert failure is not None, f"planted bug survived {SEEDS} seeds"
    assert "voted twice" in failure.what or "two leaders" in failure.what
    assert f"python -m tests.sim --seed {failure.seed} --bug vote_not_persisted" in str(failure)


def test_a_read_served_without_a_quorum_is_caught_as_not_linearizable() -> None:
    failure = first_failure("read_without_quorum")
    assert failure is not None, f"planted bug survived {SEEDS} seeds"
    assert "not linearizable" in failure.what


def test_a_failure_replays_identically() -> None:
    failure = first_failure("vote_not_persisted")
    assert failure is not None
    with pytest.raises(SimFailure) as again:
        Simulator(failure.seed, "vote_not_persisted").run()
    assert again.value.what == failure.what


# ----- the linearizability checker itself -----


def test_checker_accepts_a_linearizable_set_history() -> None:
    history = [
        Op("add", "a", 1, 4),
        Op("read", frozenset(), 2, 3),  # concurrent with the add: may miss it
        Op("read", frozenset({"a"}), 5, 6),
        Op("add", "b", 7, None),  # pending: may or may not take effect
        Op("read", frozenset({"a"}), 8, 9),
        Op("read", frozenset({"a", "b"}), 10, 11),
    ]
    assert check(history, SetModel()) == (True, "")


def test_checker_rejects_a_stale_read() -> None:
    history = [
        Op("add", "a", 1, 2),
        Op("read", frozenset(), 3, 4),  # the add had completed: a stale read
    ]
    ok, _ = check(history, SetModel())
    assert not ok


def test_checker_rejects_a_read_that_goes_back_in_time() -> None:
    history = [
        Op("add", 1, 1, 10),
        Op("read", 1, 2, 3),  # saw the add early: fine
        Op("read", 0, 4, 5),  # then a later read misses it: not linearizable
    ]
    ok, _ = check(history, LogModel())
    assert not ok


def test_checker_accepts_log_order_adds_with_reads() -> None:
    history = [
        Op("add", 1, 1, 5),
        Op("add", 2, 2, 6),
        Op("read", 1, 3, 4),
        Op("read", 2, 7, 8),
    ]
    assert check(history, LogModel()) == (True, "")


# ----- the simulated disk -----


def test_a_crash_loses_only_unsynced_writes() -> None:
    storage = SimStorage((1, 2, 3))
    storage.append([Entry(1, 2), Entry(1, 3)])
    storage.set_hard_state(HardState(1, 1, 2))
    storage.sync()
    storage.append([Entry(1, 4)])
    storage.set_hard_state(HardState(1, 1, 4))
    kept = storage.crash(random.Random(1))
    assert storage.view.last_index() >= 3
    assert storage.view.hard_state().commit >= 2
    assert storage.view.last_index() == (4 if kept >= 1 else 3)
