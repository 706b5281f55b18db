"""The whole-node simulator over many seeds; each planted bug is caught.

`TEMPO_SIM_NODE_SEEDS` sets how many seeds run (500 by default, as CI runs
them); `python -m tests.sim.node --seeds N` runs more (docs/raft.md)."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from types import SimpleNamespace
from typing import cast

import pytest

from tempo.engine.records import Run

from .node_cluster import Hold, NodeSimulator
from .node_invariants import WORKER_HOLDS_MAX, NodeSimFailure
from .node_planted import PLANTED
from .node_workload import before_1970_refused

SEEDS = int(os.environ.get("TEMPO_SIM_NODE_SEEDS", "500"))
CHUNK = 50
# Each planted bug is caught within this many seeds (the first seed that
# catches each is far below it; see `CAUGHT_BY`).
PLANTED_SEEDS = 200
# Seeds with backfills before 1970 forced in, beyond those of `test_seeds`.
BEFORE_1970_SEEDS = 20


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK))
def test_seeds(start: int) -> None:
    for seed in range(start, min(start + CHUNK, SEEDS)):
        NodeSimulator(seed).run()  # raises NodeSimFailure naming the seed and the replay command


def test_the_same_seed_gives_the_same_trace() -> None:
    assert NodeSimulator(3).run() == NodeSimulator(3).run()
    assert NodeSimulator(3).run() != NodeSimulator(4).run()


def first_failure(
    bug: str, seeds: range = range(PLANTED_SEEDS), off: frozenset[int] = frozenset()
) -> NodeSimFailure | None:
    """The first seed that catches `bug`, by the end-to-end invariants
    alone (the dispatcher core's own checks off, and the invariants `off`)."""
    for seed in seeds:
        try:
            NodeSimulator(seed, bug, core_checks=False, off=off).run()
        except NodeSimFailure as failure:
            return failure
    return None


@pytest.mark.parametrize(
    "bug",
    [
        "forgets_expired_lease",  # invariant 1
        "heartbeat_not_kept",  # invariant 2
        "hands_out_twice",  # invariant 3
        "long_lease_after_takeover",  # invariant 4
        "skips_an_entry",  # invariant 5
        "reads_without_round",  # invariant 11
        "starts_on_first_answer",  # invariant 13
    ],
)
def test_a_planted_bug_is_caught_by_its_invariant(bug: str) -> None:
    failure = first_failure(bug)
    assert failure is not None, f"planted bug {bug} survived {PLANTED_SEEDS} seeds"
    assert PLANTED[bug].caught_by in failure.what, failure
    assert f"python -m tests.sim.node --seed {failure.seed} --bug {bug}" in str(failure)
    # And it replays the same.
    with pytest.raises(NodeSimFailure) as again:
        NodeSimulator(failure.seed, bug, core_checks=False).run()
    assert again.value.what == failure.what


def test_reads_reach_deposed_leaders_which_refuse_them() -> None:
    """The workload reads at leaders deposed without knowing it (cut off
    and paused, `NodeSimulator.cut_leader`), and the production read path
    (`Replica.read_steps`) refuses every such read: no quorum answers a
    ReadIndex round of an older term once a leader of a later term served."""
    reads: Counter[str] = Counter()
    for seed in range(PLANTED_SEEDS):
        sim = NodeSimulator(seed)
        sim.run()
        reads += sim.invariants.reads
        if reads["deposed refused"] >= 5:
            break
    assert reads["deposed refused"] >= 5, reads
    assert reads["deposed answered"] == 0, reads
    assert reads["answered"] > 10 * reads["refused"], reads  # most reads are answered


def test_a_follower_that_acknowledges_before_it_persists_is_caught() -> None:
    # Rarer (a crash must fall between the early acknowledgement and the
    # write, and the leader must count it): about one seed in 60.
    failure = first_failure("acks_before_persisting")
    assert failure is not None, f"planted bug acks_before_persisting survived {PLANTED_SEEDS} seeds"
    assert "commit beyond the log" in failure.what or "invariant" in failure.what, failure


def test_an_apply_that_ignores_the_overlap_policy_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 6: with apply letting every run of a job with a policy go
    on (the rule forgotten in the store, where no planted core or replica
    reaches), a seed soon has two runs of a `skip` or buffering job running."""
    from tempo.engine.rules import overlap

    monkeypatch.setattr(overlap, "holds", lambda t, job, run, runs_key, at_ms: None)
    failure = first_failure("")
    assert failure is not None, f"an apply that ignores the overlap policy survived {PLANTED_SEEDS} seeds"
    assert "invariant 6," in failure.what, failure


def test_an_apply_that_ignores_the_stop_rule_of_pre_dispatch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 13: with apply leaving a held run claimed whatever stops it
    (`slots.held_ahead` forgotten), a seed soon has a worker start a run
    after a pause, cancel, delete or patch stamped before its stop point
    was acknowledged."""
    from tempo.engine.rules import slots

    monkeypatch.setattr(slots, "held_ahead", lambda run, at_ms: False)
    failure = first_failure("")
    assert failure is not None, f"an apply that ignores the stop rule survived {PLANTED_SEEDS} seeds"
    assert "invariant 13," in failure.what, failure


@pytest.mark.parametrize(("invariant", "off"), [(7, frozenset({8})), (8, frozenset({7}))])
def test_the_failover_clock_bug_is_caught(invariant: int, off: frozenset[int]) -> None:
    """Issue 25's first finding planted back (`observe` leaves the
    monotonic reference behind): a follower that becomes leader runs ahead
    of its wall clock, so it hands runs out early (invariant 7) and stamps
    claims and creates in the future (invariant 8); each catches it alone."""
    failure = first_failure("observe_keeps_reference", off=off)
    assert failure is not None, f"the failover clock bug survived {PLANTED_SEEDS} seeds"
    assert f"invariant {invariant}," in failure.what, failure


def test_a_claim_that_does_not_hand_the_schedule_on_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 9: with apply's claim leaving a repeating job's schedule
    on the slot it claimed (`slots.hand_on` forgotten), a seed soon has an
    active repeating job without a planned run."""
    from tempo.engine.rules import slots

    monkeypatch.setattr(slots, "hand_on", lambda t, job, run, claim, at_ms, pending=0: False)
    failure = first_failure("")
    assert failure is not None, f"a claim that does not hand the schedule on survived {PLANTED_SEEDS} seeds"
    assert "invariant 9," in failure.what, failure


def test_an_apply_that_loses_a_dependents_run_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 12: with apply making a dependent's run for only some of
    its parents' ends, a seed soon has an end that made no run."""
    from tempo.engine.rules import deps

    made = deps._make

    def some(t, child, causes, at_ms):  # type: ignore[no-untyped-def]
        if causes[-1].nominal_ms % 2:
            made(t, child, causes, at_ms)

    monkeypatch.setattr(deps, "_make", some)
    failure = first_failure("")
    assert failure is not None, f"an apply that loses a dependent's run survived {PLANTED_SEEDS} seeds"
    assert "invariant 12" in failure.what, failure


def test_an_apply_that_ignores_a_gate_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 12, a gate: with apply's claim never holding a gated
    slot back, a seed soon runs a slot whose parent had not ended."""
    from tempo.engine.rules import deps

    monkeypatch.setattr(deps, "gate", lambda t, job, run, runs_key, claim, at_ms: False)
    failure = first_failure("")
    assert failure is not None, f"an apply that ignores a gate survived {PLANTED_SEEDS} seeds"
    assert "invariant 12, a gate" in failure.what, failure


def test_an_entry_the_followers_cannot_decode_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 10: a leader that appends, now and then, an entry whose
    command the followers' decoder does not know (a tag from a newer
    version, say, that slipped past the leader's own check) is caught at
    its append."""
    import msgspec

    from tempo.engine import commandlog

    checked = commandlog.Intake.checked
    proposed = [0]

    def unchecked(self, batch):  # type: ignore[no-untyped-def]
        batch, data = checked(self, batch)
        proposed[0] += 1
        if proposed[0] % 10 == 0:
            return batch, msgspec.msgpack.encode([["NoSuchCommand", 1]])
        return batch, data

    monkeypatch.setattr(commandlog.Intake, "checked", unchecked)
    failure = first_failure("")
    assert failure is not None, f"an undecodable entry survived {PLANTED_SEEDS} seeds"
    assert "invariant 10," in failure.what and "does not decode" in failure.what, failure


def test_backfills_before_1970_are_refused() -> None:
    """Backfills of ranges before 1970 and in year 1, forced into the
    workload: the cluster answers a 400 and goes on. Validation refuses
    them, so every seed of `test_seeds` has them too (node_workload.py);
    were that lost, the assertion says so and the forced seeds show what
    such a backfill does."""
    assert before_1970_refused()  # the workload's default (Workload.__init__)
    for seed in range(BEFORE_1970_SEEDS):
        NodeSimulator(seed, before_1970=True).run()



def test_a_backlog_beyond_the_workers_is_not_blamed_on_the_cluster() -> None:
    """Invariant 1 counts a due run's wait only while a worker has room to
    claim it. Soak seed 931824007011 of an earlier workload failed it: a
    backfill after a wall-clock step forward made 40 runs due at once,
    both workers held their most (6) for longer than the bound, and the
    invariant blamed the cluster for the workers' pace. Here: a run due
    while every worker is full is not late; once one has room, its wait
    counts, and 6 s later it is."""
    sim = NodeSimulator(0)
    shutil.rmtree(sim.dir)
    invariants = sim.invariants
    for _ in range(2):
        sim.add_worker()
    full = {("j", nominal_ms): cast(Hold, None) for nominal_ms in range(WORKER_HOLDS_MAX)}
    for worker in sim.workers:
        worker.holds = dict(full)
    run = cast(Run, SimpleNamespace(job_id="j", nominal_ms=7, attempt=0, due_ms=0))

    def look(now_s: float) -> None:
        sim.now_s = now_s
        invariants.note_workers()
        invariants._check_due(b"k", run, 0, counting=True, since_s=0.0)
        invariants.due_since = invariants.next_due_since

    for step in range(40):  # 20 s of checks, every worker full
        look(step * 0.5)
    sim.workers[0].holds = {}  # room
    for step in range(40, 52):  # 6 s more: within the bound
        look(step * 0.5)
    with pytest.raises(NodeSimFailure, match="invariant 1, due runs are claimed"):
        look(26.5)
