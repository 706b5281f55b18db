"""A heartbeat that comes while its lease's expiry is being committed (the
lease check found it run out and proposed `ExpireLeases`, which is not
applied yet) is stale: it does not bring the lease back. Otherwise the
worker is told it holds the run for another lease, the expiry applies, and
the next attempt goes to another worker while the first still holds it
(found by the whole-node simulator, tests/sim/node_cluster.py: a claim
answered to a client that had gone, its runs released, and the worker's
retry with its claim key renewing the lease as the expiry committed)."""

from pathlib import Path

import pytest

from tempo import clock, errors, ids
from tempo.engine.commands import Command, CreateJobs
from tempo.engine.dispatch_core import DispatchCore, feed_size
from tempo.engine.jobs import Jobs
from tempo.engine.store import Outcome, Store
from tempo.schema import JobCreate, ScheduleIn

T0_MS = 1_800_000_000_000
OWNER = "default"
QUEUE = f"{OWNER}\x00work"
LEASE_S = 30


class Node:
    def __init__(self, path: Path) -> None:
        self.store = Store(str(path), map_bytes=1 << 26)
        self.core = DispatchCore(self.store, T0_MS)
        self.core.load(T0_MS, 100.0)
        self.index = self.store.applied_index()

    def commit(self, command: Command) -> Outcome | list[Outcome]:
        self.index += 1
        [outcome], changes = self.store.apply_commands(self.index, [command])
        self.core.feed(changes, 0, feed_size(changes))
        return outcome


@pytest.fixture
def node(tmp_path: Path) -> Node:
    made = Node(tmp_path / "d")
    yield made  # type: ignore[misc]  # a generator fixture
    made.store.close()


def test_a_heartbeat_while_the_expiry_commits_is_stale(node: Node) -> None:
    core = node.core
    body = JobCreate("queue:work", ScheduleIn(at=clock.datetime_from_ms(T0_MS)), lease_s=LEASE_S)
    job_id = ids.job_ids_from_int(T0_MS, 1, 1)[0]
    new = Jobs(node.store, None).new_job(OWNER, body, T0_MS, from_msgpack=False, job_id=job_id)  # type: ignore[arg-type]
    node.commit(CreateJobs(T0_MS, [new]))
    core.tick(T0_MS, 100.0)
    taken = core.take([QUEUE], 1, 100.0)
    proposal = core.propose_claims("w1", taken.runs, T0_MS, 100.0)
    assert proposal.command is not None
    [claimed] = core.claimed(proposal, node.commit(proposal.command))  # type: ignore[arg-type]
    core.settle(proposal)
    run_id = ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)

    # The lease runs out; the lease check proposes its expiry.
    later_ms, later_s = T0_MS + (LEASE_S + 1) * 1000, 100.0 + LEASE_S + 1
    expiry = core.expire(later_ms, later_s)
    assert expiry is not None
    # The worker's heartbeat (or its keyed retry) comes before it applies.
    with pytest.raises(errors.StaleAttempt):
        core.heartbeat(OWNER, run_id, claimed.run.attempt, later_ms, later_s)
    [expired] = node.commit(expiry)  # type: ignore[misc]
    core.expire_applied([expired])
    assert expired is not None and expired.status == "waiting"
    core.check_leases()
    assert core.leases == {}
    assert core.expiring == {}  # the run left the claimed ones: nothing kept


def test_an_expiry_not_written_leaves_the_lease_to_expire_again(node: Node) -> None:
    core = node.core
    body = JobCreate("queue:work", ScheduleIn(at=clock.datetime_from_ms(T0_MS)), lease_s=LEASE_S)
    job_id = ids.job_ids_from_int(T0_MS, 2, 1)[0]
    new = Jobs(node.store, None).new_job(OWNER, body, T0_MS, from_msgpack=False, job_id=job_id)  # type: ignore[arg-type]
    node.commit(CreateJobs(T0_MS, [new]))
    core.tick(T0_MS, 100.0)
    taken = core.take([QUEUE], 1, 100.0)
    proposal = core.propose_claims("w1", taken.runs, T0_MS, 100.0)
    assert proposal.command is not None
    [claimed] = core.claimed(proposal, node.commit(proposal.command))  # type: ignore[arg-type]
    core.settle(proposal)
    later_ms, later_s = T0_MS + (LEASE_S + 1) * 1000, 100.0 + LEASE_S + 1
    expiry = core.expire(later_ms, later_s)
    assert expiry is not None
    core.expire_failed(expiry, later_s)  # not written: the next check proposes it again
    again = core.expire(later_ms + 100, later_s + 0.1)
    assert again is not None and again.expiries == expiry.expiries
    run_id = ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)
    with pytest.raises(errors.StaleAttempt):
        core.heartbeat(OWNER, run_id, claimed.run.attempt, later_ms + 100, later_s + 0.1)
