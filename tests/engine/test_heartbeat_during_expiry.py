"""A heartbeat that comes while its lease's expiry is being committed (the
lease check found it run out and proposed `ExpireLeases`, which is not
applied yet) is stale: it does not bring the lease back. Otherwise the
worker is told it holds the run for another lease, the expiry applies, and
the next attempt goes to another worker while the first still holds it
(found by the whole-node simulator, tests/sim/node_cluster.py: a claim
answered to a client that had gone, its runs released, and the worker's
retry with its claim key renewing the lease as the expiry committed)."""

import pytest

from tempo import clock, errors, ids
from tempo.engine.commands import Command, CreateJobs, ExpireLeases
from tempo.engine.dispatch_core import ClaimedRun, DispatchCore, feed_size
from tempo.engine.jobs import Jobs
from tempo.engine.store import Outcome, Store
from tempo.schema import JobCreate, ScheduleIn

T0_MS = 1_800_000_000_000
MONO0_S = 100.0
OWNER = "default"
QUEUE = f"{OWNER}\x00work"
LEASE_S = 30
# When the lease has run out.
LATER_MS, LATER_S = T0_MS + (LEASE_S + 1) * 1000, MONO0_S + LEASE_S + 1


class Node:
    """A store and a core; each command applied as its own entry, its
    changes fed before its outcome is handed back (the driver's order)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.core = DispatchCore(store, T0_MS)
        self.core.load(T0_MS, MONO0_S)
        self.index = store.applied_index()

    def commit(self, command: Command) -> Outcome | list[Outcome]:
        self.index += 1
        [outcome], changes = self.store.apply_commands(self.index, [command])
        self.core.feed(changes, 0, feed_size(changes))
        return outcome

    def claimed_run(self) -> ClaimedRun:
        """A one-off job due now, its run claimed at T0 by w1."""
        body = JobCreate("queue:work", ScheduleIn(at=clock.datetime_from_ms(T0_MS)), lease_s=LEASE_S)
        jobs = Jobs(self.store, None)  # type: ignore[arg-type]  # only `new_job`, which commits nothing
        new = jobs.new_job(OWNER, body, T0_MS, from_msgpack=False, job_id=ids.job_ids_from_int(T0_MS, 1, 1)[0])
        self.commit(CreateJobs(T0_MS, [new]))
        core = self.core
        core.tick(T0_MS, MONO0_S)
        taken = core.take([QUEUE], 1, MONO0_S)
        proposal = core.propose_claims("w1", taken.runs, T0_MS, MONO0_S)
        assert proposal.command is not None
        outcomes = self.commit(proposal.command)
        assert isinstance(outcomes, list)
        [claimed] = core.claimed(proposal, outcomes)  # type: ignore[arg-type]  # a claim's: runs or None
        core.settle(proposal)
        return claimed

    def expiry(self, now_ms: int, mono_s: float) -> ExpireLeases:
        command = self.core.expire(now_ms, mono_s)
        assert command is not None
        return command


def test_a_heartbeat_while_the_expiry_commits_is_stale(store: Store) -> None:
    node = Node(store)
    claimed = node.claimed_run()
    run_id = ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)
    expiry = node.expiry(LATER_MS, LATER_S)  # the lease ran out: its expiry is proposed
    # The worker's heartbeat (or its keyed retry) comes before it applies.
    with pytest.raises(errors.StaleAttempt):
        node.core.heartbeat(OWNER, run_id, claimed.run.attempt, LATER_MS, LATER_S)
    [expired] = node.commit(expiry)  # type: ignore[misc]  # an expiry's: runs or None
    node.core.expire_applied([expired])
    assert expired is not None and expired.status == "waiting"
    node.core.check_leases()
    assert node.core.leases == {}
    assert node.core.expiring == {}  # the run left the claimed ones: nothing kept


def test_an_expiry_not_written_is_proposed_again_and_still_stale(store: Store) -> None:
    node = Node(store)
    claimed = node.claimed_run()
    expiry = node.expiry(LATER_MS, LATER_S)
    node.core.expire_failed(expiry, LATER_S)  # not written: the next check proposes it again
    again = node.expiry(LATER_MS + 100, LATER_S + 0.1)
    assert again.expiries == expiry.expiries
    run_id = ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)
    with pytest.raises(errors.StaleAttempt):
        node.core.heartbeat(OWNER, run_id, claimed.run.attempt, LATER_MS + 100, LATER_S + 0.1)
    node.core.check_leases()
