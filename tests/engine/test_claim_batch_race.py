"""A claim and a later command about the same run, committed in one entry
(a group commit takes both). The entry's changes are fed whole before
the claim is answered and its leases are made (engine/dispatch.py
`on_changes`), so the later command's end of the run, or its request to
stop it, came before the lease existed, and was lost:

- a pause, delete or patch that stopped a run claimed ahead of its due
  time (docs/semantics.md "Pre-dispatch") left a lease behind, and
  `POST /v1/starts` answered `start` for a run that was cancelled, gone
  or waiting again in the tables (the whole-node simulator's invariant 13
  found it, tests/sim/node_invariants.py);
- a cancel of a run just claimed left its lease without the stop mark,
  so its worker's heartbeats never said `cancel: requested`.

Stepped as tests/engine/test_dispatch_core.py does, with the two commands
applied as one entry."""

import msgspec
import pytest

from tempo.engine.commands import CancelRun, ClaimRuns, Command, DeleteJob, PatchJob, PauseJob
from tempo.engine.dispatch_core import ClaimedRun, feed_size

from .test_dispatch_core import OWNER, QUEUE, Rig, run_id


@pytest.fixture
def rig(tmp_path):
    made = Rig(str(tmp_path / "data"))
    yield made
    made.check()
    made.close()


def claim_with(rig: Rig, later: Command, ahead_ms: int) -> list[ClaimedRun]:
    """A claim and `later` in one entry, fed and answered as the driver does."""
    core = rig.core
    rig.tick()
    taken = core.take([QUEUE], 10, rig.mono_s, rig.now_ms + ahead_ms if ahead_ms else None)
    proposal = core.propose_claims("w1", taken.runs, rig.now_ms, rig.mono_s, ahead_ms)
    try:
        assert isinstance(proposal.command, ClaimRuns)
        rig.index += 1
        outcomes, changes = rig.store.apply_commands(rig.index, [proposal.command, later])
        core.feed(changes, 0, feed_size(changes))
        core.stop_requested(changes.stopping)
        return core.claimed(proposal, outcomes[0])  # type: ignore[arg-type]
    finally:
        core.settle(proposal)


def _patch(rig: Rig, job_id: str) -> PatchJob:
    job = rig.store.get_job_any(job_id)
    assert job is not None
    return PatchJob(rig.now_ms, OWNER, job.id, job.version, msgspec.structs.replace(job, payload={"v": 2}), False,
                    None, None)


@pytest.mark.parametrize("later", ["pause", "delete", "patch"])
def test_a_stop_in_the_claims_own_entry_hands_out_no_held_run(rig: Rig, later: str) -> None:
    [job_id] = rig.create(at_s=4)
    command = {
        "pause": lambda: PauseJob(rig.now_ms, OWNER, job_id),
        "delete": lambda: DeleteJob(rig.now_ms, OWNER, job_id),
        "patch": lambda: _patch(rig, job_id),
    }[later]()
    assert claim_with(rig, command, ahead_ms=5000) == []
    assert rig.core.leases == {}
    nominal_ms = rig.store.get_job_any(job_id).slot_ms if later == "patch" else None  # type: ignore[union-attr]
    if nominal_ms is not None:
        # Handed back, it waits again for a claim of the patched job.
        run = rig.store.get_run_any(job_id, nominal_ms)
        assert run is not None and run.status == "waiting" and run.attempt == 1


def test_a_cancel_in_the_claims_own_entry_reaches_the_worker(rig: Rig) -> None:
    [job_id] = rig.create(at_s=0)
    rig.tick()
    [run] = rig.store.list_runs(OWNER, job_id, since_ms=None, until_ms=None, limit=10, cursor_ms=None)[0]
    [claimed] = claim_with(rig, CancelRun(rig.now_ms, OWNER, job_id, run.nominal_ms), ahead_ms=0)
    stored = rig.store.get_run_any(job_id, run.nominal_ms)
    assert stored is not None and stored.status == "claimed" and stored.cancel == "requested"
    _, stop = rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s)
    assert stop == "requested"


def _entry(rig: Rig, commands: list[Command]) -> list:
    rig.index += 1
    outcomes, changes = rig.store.apply_commands(rig.index, commands)
    rig.core.feed(changes, 0, feed_size(changes))
    rig.core.stop_requested(changes.stopping)
    return outcomes


def test_an_expiry_before_the_claim_in_its_entry_leaves_the_claim_its_run(rig: Rig) -> None:
    # The other order: the entry ends an attempt first (its lease expired)
    # and then claims the run again; that end was fed after the claim was
    # proposed, yet the run is the claim's, and its worker gets it. (The
    # whole-node simulator's seed 2136, invariant 4, when an end fed after
    # the proposal was taken for a later command's.) The claim could take
    # the run before its expiry was applied because an entry that patched
    # the job (naming its run waiting) and then claimed the run left it in
    # memory as well.
    [job_id] = rig.create(at_s=0)
    rig.tick()
    core = rig.core
    first = core.propose_claims("w1", core.take([QUEUE], 10, rig.mono_s).runs, rig.now_ms, rig.mono_s)
    try:
        outcomes = _entry(rig, [_patch(rig, job_id), first.command])  # type: ignore[list-item]
        [held] = core.claimed(first, outcomes[1])  # type: ignore[arg-type]
    finally:
        core.settle(first)
    core.release([held], rig.mono_s)
    expiry = core.expire(rig.now_ms, rig.mono_s)
    assert expiry is not None
    rig.tick()
    again = core.propose_claims("w2", core.take([QUEUE], 10, rig.mono_s).runs, rig.now_ms, rig.mono_s)
    try:
        assert again.command is not None and len(again.command.claims) == 1
        outcomes = _entry(rig, [expiry, again.command])
        core.expire_applied(outcomes[0])  # type: ignore[arg-type]
        [taken] = core.claimed(again, outcomes[1])  # type: ignore[arg-type]
    finally:
        core.settle(again)
    assert taken.run.attempt == 2 and taken.run.worker == "w2"
    assert core.lease_of(job_id, taken.run.nominal_ms, 2, rig.now_ms, rig.mono_s) is not None


def test_what_the_feed_keeps_for_claims_in_flight_goes_when_they_settle(rig: Rig) -> None:
    # An end the feed saw without a lease is kept for the claims in flight
    # then (`DispatchCore.ended_unleased`), and only for them: under a
    # steady load claims overlap without a pause, and expiries kept until
    # no claim at all is in flight would pile up.
    core = rig.core
    rig.create(count=3, at_s=0)
    rig.tick()
    [held] = rig.claim(runs_max=1)
    first = core.propose_claims("w1", core.take([QUEUE], 1, rig.mono_s).runs, rig.now_ms, rig.mono_s)
    core.release([held], rig.mono_s)
    expiry = core.expire(rig.now_ms, rig.mono_s)
    assert expiry is not None
    core.expire_applied(rig.commit(expiry))  # type: ignore[arg-type]
    assert set(core.ended_unleased) == {(held.run.job_id, held.run.nominal_ms)}  # `first` may hold it
    second = core.propose_claims("w2", core.take([QUEUE], 1, rig.mono_s).runs, rig.now_ms, rig.mono_s)
    for proposal in (first, second):
        assert proposal.command is not None
        core.claimed(proposal, rig.commit(proposal.command))  # type: ignore[arg-type]
        core.settle(proposal)
        # Once `first` settled, no claim that was in flight at the expiry is.
        assert core.ended_unleased == {}
