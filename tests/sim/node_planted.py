"""Planted bugs of the whole-node simulator: a dispatcher core or a replica
loop that each break one rule, to show that the simulator's end-to-end
invariants (node_invariants.py) catch them.

Each is a test-only subclass of the real `DispatchCore` or `Replica` that
overrides the one method where its rule is kept, so production code carries
no test branch. Named by the `--bug` option of `python -m tests.sim.node`;
`PLANTED` gives each its classes and the invariant that must catch it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Generator, Iterator

import msgspec

from tempo import clock, errors, ids
from tempo.engine.dispatch_core import Beat, ClaimedRun, ClaimProposal, DispatchCore, Fed, feed_size
from tempo.engine.records import Job, Run
from tempo.node.replica import Phase, ReadWait, Replica, Step
from tempo.raft import Entry, Ready, Role


class ForgetsExpiredLease(DispatchCore):
    """A run whose lease expired (or whose attempt failed) comes back waiting,
    but the change feed does not take it into memory again: it waits in the
    table until the next leader loads it. (Invariant 1: due runs are claimed.)"""

    def feed(self, changes: Fed, start: int, stop: int) -> None:
        # The simulator feeds an entry whole (start 0, stop its size).
        kept = copy.copy(changes)
        kept.woken = [item for item in changes.woken if item[1].attempt == 0]
        if start == 0:
            super().feed(kept, 0, feed_size(kept))


class HeartbeatNotKept(DispatchCore):
    """A heartbeat is answered with a new expiry, but the lease's deadline
    stays where it was: a worker that heartbeats on past its first lease
    loses its run to another worker while it still holds it. (Invariant 2:
    no attempt is held by two workers at once.)"""

    def heartbeat(self, owner: str | None, run_id: str, attempt: int, now_ms: int, mono_s: float) -> int:
        parsed = ids.parse_run_id(run_id)
        lease = None if parsed is None else self.leases.get(parsed)
        deadline_s = None if lease is None else lease.deadline_s
        answer = super().heartbeat(owner, run_id, attempt, now_ms, mono_s)
        if lease is not None and deadline_s is not None and parsed is not None and self.leases.get(parsed) is lease:
            lease.deadline_s = deadline_s
        return answer

    def beat(self, owner: str | None, run_id: str, attempt: int, now_ms: int, mono_s: float) -> Beat:
        # A worker's heartbeat (net/workers_api.py), the same rule broken.
        parsed = ids.parse_run_id(run_id)
        lease = None if parsed is None else self.leases.get(parsed)
        deadline_s = None if lease is None else lease.deadline_s
        answer = super().beat(owner, run_id, attempt, now_ms, mono_s)
        if lease is not None and deadline_s is not None and parsed is not None and self.leases.get(parsed) is lease:
            lease.deadline_s = deadline_s
        return answer


class LeaseFromStoredExpiry(DispatchCore):
    """A new leader gives each run claimed under the old one the lease the
    table shows (`lease_expires_ms`, stamped by the claim) instead of a full
    one: the heartbeats that the old leader took in memory are forgotten,
    and a healthy worker's run goes to another worker while the first still
    holds it. (Invariant 2: no attempt is held by two workers at once.)"""

    loading_ms = 0

    def load(self, now_ms: int, mono_s: float) -> None:
        self.loading_ms = now_ms
        super().load(now_ms, mono_s)

    def _remember(self, runs_key: bytes, run: Run, job: Job, mono_s: float) -> None:
        if run.status == "claimed" and (run.job_id, run.nominal_ms) not in self.leases:
            assert run.lease_expires_ms is not None
            left_s = max(0.0, (run.lease_expires_ms - self.loading_ms) / 1000)
            self._grant(job.owner, run.job_id, run.nominal_ms, run.attempt, mono_s + left_s, job.lease_s)
            return
        super()._remember(runs_key, run, job, mono_s)


class HandsOutTwice(DispatchCore):
    """The runs of a claim are handed out again with the next claim's, to
    whichever worker asks (a cache of answers that forgets whose they
    were): the same attempt twice. (Invariant 3: each slot runs at most
    once per attempt.)"""

    def claimed(self, proposal: ClaimProposal, outcomes: list[Run | None]) -> list[ClaimedRun]:
        found = super().claimed(proposal, outcomes)
        again: list[ClaimedRun] = getattr(self, "_again", [])
        self._again = found
        return found + again


class LongLeaseAfterTakeover(DispatchCore):
    """A new leader gives the runs claimed under the old one four leases
    instead of one: a run whose worker is gone waits four times too long.
    (Invariant 4: after a failover, no run waits longer than its lease plus
    a bound.)"""

    def _remember(self, runs_key: bytes, run: Run, job: Job, mono_s: float) -> None:
        if run.status == "claimed" and (run.job_id, run.nominal_ms) not in self.leases:
            self._grant(job.owner, run.job_id, run.nominal_ms, run.attempt, mono_s + 4 * job.lease_s, job.lease_s)
            return
        super()._remember(runs_key, run, job, mono_s)


class StartsOnFirstAnswer(DispatchCore):
    """A `POST /v1/starts` answers what the leases said when the call came,
    not what they say after its barrier at the stop point: a pause, cancel,
    delete or patch stamped in between stops a run its worker is told to
    start. (Invariant 13: the stop rule of pre-dispatch.)"""

    def may_start_again(
        self,
        owner: str | None,
        runs: list[tuple[tuple[str, int] | None, int]],
        answers: list[bool],
        changed: set[tuple[str, int]],
    ) -> list[bool]:
        return answers


class SkipsAnEntry(Replica):
    """A follower applies every fifth committed entry as an empty one (its
    index recorded, its commands not): its tables drift from the leader's.
    (Invariant 5: replicas' digests agree.)"""

    def steps(self, rd: Ready) -> Iterator[Step]:
        if rd.role != Role.LEADER and rd.committed_entries:
            entries = [Entry(e.term, e.index, e.kind, b"") if e.index % 5 == 0 else e for e in rd.committed_entries]
            rd = msgspec.structs.replace(rd, committed_entries=entries)
        return super().steps(rd)


class AcksBeforePersisting(Replica):
    """A follower sends its acknowledgements before its write is durable:
    a crash between the two loses entries the leader counted as stored, so
    a committed entry can be lost. (Invariant 5, and 1 for the jobs it
    acknowledged.)"""

    def steps(self, rd: Ready) -> Iterator[Step]:
        if rd.role != Role.LEADER and rd.messages:
            self.send(rd.messages)
            rd = msgspec.structs.replace(rd, messages=[])
        return super().steps(rd)


class ReadsWithoutRound(Replica):
    """A read is answered as soon as the node believes it leads, without a
    ReadIndex round (a leader lease without the lease): a leader deposed
    without knowing it (cut off by a partition, or paused) answers from
    its old state, missing writes the new leader acknowledged.
    (Invariant 11: a read reflects every write acknowledged before it.)"""

    def read_steps(self, deadline_s: float) -> Generator[ReadWait, None, None]:
        if self.phase is not Phase.LEADING:
            raise errors.NotLeader("this node is not the leader")
        yield from ()


class ObserveKeepsReference(clock.Clock):
    """The failover clock bug of issue 25, back: `observe` raises the last
    answer but leaves the monotonic reference at this node's last read of
    its own clock, so the next answer adds half of all the time since then.
    A follower that becomes leader runs ahead of its wall clock by half the
    time it followed. (Invariant 7: nothing is handed out before its due
    time by the handing node's wall clock; invariant 8: `created_at`.)"""

    def observe(self, at_ms: int) -> None:
        at_ns = min(at_ms * 1_000_000, clock._LAST_NS)
        if at_ns > self._last_ns:
            self._last_ns = at_ns


@dataclasses.dataclass(frozen=True)
class Planted:
    core: type[DispatchCore] = DispatchCore
    replica: type[Replica] = Replica
    clock: type[clock.Clock] = clock.Clock
    caught_by: str = ""  # the invariant that must catch it (node_invariants.py)


PLANTED: dict[str, Planted] = {
    "": Planted(),
    "forgets_expired_lease": Planted(core=ForgetsExpiredLease, caught_by="invariant 1,"),
    "heartbeat_not_kept": Planted(core=HeartbeatNotKept, caught_by="invariant 2,"),
    # Needs a failover while a worker holds a run past its first lease, and
    # the expiry to beat its next heartbeat: about one seed in 100.
    "lease_from_stored_expiry": Planted(core=LeaseFromStoredExpiry, caught_by="invariant 2,"),
    "hands_out_twice": Planted(core=HandsOutTwice, caught_by="invariant 3,"),
    "long_lease_after_takeover": Planted(core=LongLeaseAfterTakeover, caught_by="invariant 4,"),
    "skips_an_entry": Planted(replica=SkipsAnEntry, caught_by="invariant 5,"),
    # A lost committed entry shows in several places (raft's own assertions,
    # the digests, an acknowledged job): any of them.
    "acks_before_persisting": Planted(replica=AcksBeforePersisting),
    "observe_keeps_reference": Planted(clock=ObserveKeepsReference, caught_by="invariant 7,"),
    "reads_without_round": Planted(replica=ReadsWithoutRound, caught_by="invariant 11,"),
    # Needs a stop acknowledged in the second before a held run's stop
    # point, after its worker asked: seed 27 is the first.
    "starts_on_first_answer": Planted(core=StartsOnFirstAnswer, caught_by="invariant 13,"),
}
