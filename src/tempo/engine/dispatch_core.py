"""The dispatcher's core: loader → timing wheel → ready queues → claims, the
leases and each owner's limits, as a pure state machine (docs/design.md "Dispatch
on the leader"; docs/raft.md "The dispatcher's core").

It reads no clock, starts no task or thread, awaits nothing and writes
nothing: time comes in as arguments, `now_ms` (scheduler time, UNIX ms: the
stamps of commands and the `now` of due times) and `mono_s` (monotonic
seconds: leases, claim rates), and every change of the tables it wants is a
command it hands back for its driver (engine/dispatch.py) to propose. It
reads rows through `RunReader` (the store). So a test, or a seeded
simulator, steps it from synchronous code on a clock of its own, and the
same inputs give the same outputs. Neither clock may go backwards from one
call to the next (`clock.Clock` makes scheduler time so; the wheel asserts
it); they need not move together: a wall-clock step moves `now_ms` only.

What it takes, and what it gives back:

| call | the event | gives back |
|---|---|---|
| `reset(now_ms)` | the node stopped leading (or starts) | forgets all soft state; `generation` moves on |
| `load(now_ms, mono_s)` | memory from the tables (also inside `tick`) | claimed runs get a full lease from `mono_s` |
| `tick(now_ms, mono_s)` | time passed | whether more is due at once (a slice's work was done) |
| `next_tick_ms(now_ms)` | the driver plans its sleep | when `tick` next has work (scheduler time) |
| `feed(changes, start, stop)` | an applied entry's changes, items `[start, stop)` of `feed_size(changes)` | |
| `take(queues, runs_max, mono_s)` | a claim asks for runs | `Taken`: the runs taken, or when a claim rate lets one go |
| `propose_claims(worker, runs, now_ms, mono_s)` | the taken runs are to be claimed | `ClaimProposal`, its `command` to propose (None: nothing to claim) |
| `claimed(proposal, outcomes)` | the claim command applied | the `ClaimedRun`s; leases granted from the proposal's `mono_s` |
| `give_back(proposal)` | the claim command was not written | its runs back at the head of their queues |
| `settle(proposal)` | the claim is over, either way (always, once) | its owners' room held while it committed frees |
| `heartbeat(owner, run_id, attempt, now_ms, mono_s)` | a worker's heartbeat | the lease's new expiry (UNIX ms); `NotFound`, `StaleAttempt` |
| `release(runs, mono_s)` | a claim's answer never reached its worker | the leases end at `mono_s` |
| `stop_of(owner, run_id, attempt, mono_s)` | a worker's signals poll looks at a run | why its worker is to stop (None: it goes on); no lease moves |
| `next_expiry_s()` | the lease check plans its next wake-up | the earliest lease heap entry (monotonic), or None |
| `expire(now_ms, mono_s)` | the lease check | an `ExpireLeases` command, or None |
| `expire_failed(command, mono_s)` | that command was not written | its leases stay expired in memory, for the next check |
| `expire_applied(outcomes)` | that command applied | (counters) |
| `reported(outcomes)` | a `ReportResults` applied | (counters) |
| `propose_overlap(now_ms)` | due runs of jobs with an overlap policy were set aside by `tick` | `OverlapProposal`, its `command` to propose (None: none) |
| `overlap_applied(proposal, outcomes)` | that command applied | the runs apply let go on into their ready queues |
| `overlap_failed(proposal)` | that command was not written | its runs set aside again, for the next proposal |
| `take_wakeups()` | after any call | the queues (`HTTP_QUEUE`: the http ones) that got ready runs, and the owners a limit held back whose room freed |

The order the driver keeps, as apply and the group commit answer: an
entry's changes are fed (`feed`, whole) before any of its commands'
outcomes are handed back (`claimed`, `reported`), so a claim never sees a
run the core has not heard of. `take` → `propose_claims` → (commit) →
`claimed` or `give_back` → `settle` is one claim; other calls may come in
between (the driver awaits the commit); a `reset` in between turns the
proposal stale (its runs are not given back, its settle counts nothing).

Invariants (asserted where they are kept, and by `check_memory` and
`check_leases`, which tests and the simulator call between steps):

- `in_flight[o]` is the number of leases of owner o; `claiming[o]` the runs
  of o taken by claims not settled; `loaded_of[o]` the runs of o in
  `queue_of` (no zeros kept in any of them);
- the memory invariant of `load`;
- each lease has exactly one live entry in the lease heap, at or before its
  deadline, and the heap holds at most `2 * len(leases) +
  limits.lease_heap_slack_entries` entries;
- an attempt whose expiry is being committed (`expiring`) has no lease: a
  heartbeat for it is stale.
"""

from collections import deque

from tempo import limits
from tempo.engine.commands import Claim, OverlapRuns
from tempo.engine.dispatch_claims import Claims
from tempo.engine.dispatch_leases import claimed_lease_s
from tempo.engine.dispatch_loader import Loader
from tempo.engine.dispatch_state import (
    HTTP_QUEUE,
    LATENESS_BUCKETS_S,
    Beat,
    ClaimedRun,
    ClaimProposal,
    Fed,
    Lease,
    OverlapProposal,
    RunReader,
    Taken,
    Wakeups,
    feed_size,
    is_http,
    owner_of,
    queue_key,
)
from tempo.engine.records import Job, Run

__all__ = [
    "HTTP_QUEUE", "LATENESS_BUCKETS_S", "Beat", "ClaimProposal", "ClaimedRun", "DispatchCore", "Fed", "Lease",
    "OverlapProposal", "RunReader", "Taken", "Wakeups", "claimed_lease_s", "feed_size", "is_http", "owner_of",
    "queue_key",
]


class DispatchCore(Claims, Loader):
    """The dispatcher's core (this module's docstring): its state and
    leases (engine/dispatch_state.py, engine/dispatch_leases.py), its
    loader (engine/dispatch_loader.py) and its claims
    (engine/dispatch_claims.py); here, the clock's side and overlap."""

    # -- a claim and the rest of its entry ---------------------------------------

    def claimed(self, proposal: ClaimProposal, outcomes: list[Run | None]) -> list[ClaimedRun]:
        """`Claims.claimed`, then what other commands of the claim's own
        entry did to its runs: they were fed with the entry, before the
        leases existed (`reset`: `ended_unleased`). Such a run is read again
        from the tables, as the entry left it: one no longer claimed at its
        attempt (a pause, delete or patch of a run held ahead) loses its
        lease and is handed out to nobody; one asked to stop (a cancel) has
        its lease marked, so its worker's heartbeats say so. (An earlier
        command of the entry may have ended the attempt before, an expiry
        whose run the claim took again: the run is the claim's.)"""
        claimed = super().claimed(proposal, outcomes)
        ended, stopped, fed_at = self.ended_unleased, self.stopped_unleased, proposal.fed_at
        if not ended and not stopped:
            return claimed
        kept = []
        for one in claimed:
            slot = (one.run.job_id, one.run.nominal_ms)
            if ended.get(slot, 0) > fed_at or stopped.get(slot, 0) > fed_at:
                run = self.reader.get_run_any(*slot)
                if run is None or run.status != "claimed" or run.attempt != one.run.attempt:
                    self._drop_lease(slot)
                    continue
                if run.cancel == "requested":
                    self.leases[slot].cancel_requested = True
            kept.append(one)
        return kept

    def propose_claims(
        self, worker: str, runs: list[tuple[bytes, Job]], now_ms: int, mono_s: float, ahead_ms: int = 0
    ) -> ClaimProposal:
        """`Claims.propose_claims`, counted in flight (`proposed_at`) until it settles."""
        proposal = super().propose_claims(worker, runs, now_ms, mono_s, ahead_ms)
        self.proposed_at[proposal.fed_at] += 1
        return proposal

    def settle(self, proposal: ClaimProposal) -> None:
        """`Claims.settle`; then the runs the feed ended or stopped without
        a lease before every claim still in flight was proposed are no
        claim's (`claimed` reads only those fed after its proposal)."""
        super().settle(proposal)
        if proposal.generation != self.generation:
            return  # a reset started afresh
        proposed_at = self.proposed_at
        proposed_at[proposal.fed_at] -= 1
        if proposed_at[proposal.fed_at] <= 0:
            del proposed_at[proposal.fed_at]
        if self.ended_unleased or self.stopped_unleased:
            oldest = min(proposed_at, default=self.fed_count)
            for fed in (self.ended_unleased, self.stopped_unleased):
                for slot in [slot for slot, at in fed.items() if at <= oldest]:
                    del fed[slot]

    # -- the clock side --------------------------------------------------------

    def tick(self, now_ms: int, mono_s: float) -> bool:
        """Moves the runs that fell due to the ready queue of their queue,
        in due order, at most `limits.dispatch_slice_runs` of them (and as
        much of the wheel's work): answers whether more are left, for a
        tick at once after a checkpoint (the driver's `run`), so a spike's
        slot does not hold the event loop in one step. The queues that got
        runs are among `take_wakeups`."""
        if now_ms + self.readahead_ms >= self.loaded_until_ms:
            self.load(now_ms, mono_s)
        elif self.rereads:
            self._reread(0)
        make_ready = self._make_ready
        for runs_key in self.wheel.advance(now_ms, limits.dispatch_slice_runs):
            entry = self.queue_of.get(runs_key)
            if entry is None:
                continue
            if entry[1].overlap is not None:
                # Apply decides first whether the policy lets it run now.
                self.overlap_due.append(runs_key)
                continue
            make_ready(entry[0], runs_key)
        self.tick_ahead(now_ms)
        return self.wheel.behind

    def next_tick_ms(self, now_ms: int) -> int:
        """When `tick` next has work, at the earliest (scheduler time): a
        slot of the wheel comes due, the loader's window reaches past what
        it read, a run comes within the pre-dispatch horizon, the ahead
        queues' sweep, or an owner's reread. Never sooner than a dispatch
        tick after `now_ms`, nor later than `limits.dispatch_idle_wake_ms`
        after it: the driver sleeps until then, and an applied entry (a
        new run due sooner) wakes it before (docs/design.md "Dispatch on
        the leader")."""
        wake_ms = now_ms + limits.dispatch_idle_wake_ms
        slot_ms = self.wheel.next_slot_ms()
        if slot_ms is not None:
            wake_ms = min(wake_ms, slot_ms)
        wake_ms = min(wake_ms, self.loaded_until_ms - self.readahead_ms)
        if self.ahead_heap:
            wake_ms = min(wake_ms, self.ahead_heap[0][0] - limits.claim_ahead_ms_max)
        if self.ahead:
            wake_ms = min(wake_ms, self.ahead_swept_ms + limits.lease_check_ms)
        if self.rereads:
            wake_ms = now_ms
        return max(wake_ms, now_ms + limits.dispatch_tick_ms)

    # -- overlap (docs/semantics.md "Overlap") -----------------------------------

    def propose_overlap(self, now_ms: int) -> OverlapProposal | None:
        """The command that has apply decide on the due runs `tick` set
        aside (at most `limits.overlap_runs_per_command_max`), stamped
        `now_ms`; None when there are none (or they left memory since)."""
        if not self.overlap_due:
            return None
        taken = self.overlap_due[: limits.overlap_runs_per_command_max]
        del self.overlap_due[: limits.overlap_runs_per_command_max]
        jobs: dict[str, Job] = {}
        runs_keys: list[bytes] = []
        claims: list[Claim] = []
        for runs_key in taken:
            entry = self.queue_of.get(runs_key)
            if entry is None or runs_key in self.wheel:
                continue  # left memory (claimed, deleted, moved) or came back to the wheel
            claim = self._claim_of(runs_key, entry[1], jobs, now_ms)
            if claim is not None:
                runs_keys.append(runs_key)
                claims.append(claim)
        if not claims:
            return None
        return OverlapProposal(self.generation, runs_keys, OverlapRuns(now_ms, claims))

    def overlap_applied(self, proposal: OverlapProposal, outcomes: list[bool]) -> None:
        """The runs apply let go on move to their ready queues; the others
        (skipped, buffered) left memory with the entry's changes."""
        if proposal.generation != self.generation:
            return
        for runs_key, goes_on in zip(proposal.runs_keys, outcomes, strict=True):
            if goes_on:
                self._to_ready(runs_key)
            else:
                self.counters["overlap_held"] += 1

    def overlap_failed(self, proposal: OverlapProposal) -> None:
        """The command was not written: its runs wait set aside for the next."""
        if proposal.generation == self.generation:
            self.overlap_due[:0] = proposal.runs_keys

    def _to_ready(self, runs_key: bytes) -> None:
        """A due run still in memory into the ready queue of its queue (as `tick` moves one)."""
        entry = self.queue_of.get(runs_key)
        if entry is None or runs_key in self.wheel:
            return
        self._make_ready(entry[0], runs_key)

    def _make_ready(self, queue: str, runs_key: bytes) -> None:
        """A run that fell due at the tail of `queue`'s ready queue, its
        claimers among `take_wakeups` (`HTTP_QUEUE` for an http queue's)."""
        self.ready.setdefault(queue, deque()).append(runs_key)
        self.counters["due"] += 1
        if is_http(queue):
            self.http_ready[queue] = None
            self._wakeups.queues.add(HTTP_QUEUE)
        else:
            self._wakeups.queues.add(queue)
