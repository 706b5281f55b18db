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

import bisect
import heapq
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import msgspec

from tempo import errors, ids, limits
from tempo.calendars import View
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine import calendar_plan, keys
from tempo.engine.commands import Claim, ClaimRuns, ExpireLeases, Expiry, OverlapRuns
from tempo.engine.plan import CatchUp, catch_up, step_over_taken
from tempo.engine.records import CalendarUse, Job, Run, RunCancel
from tempo.rate import TokenBucket
from tempo.wheel import TimingWheel

# The queue of an owner's runs whose target is an http(s) URL: its ready queue
# is `owner\0\0http`, since no owner's queue can be named so (NUL). The
# built-in executor claims `[HTTP_QUEUE]`, which stands for every owner's
# http queue, served round-robin (docs/operations.md "Fairness between owners").
HTTP_QUEUE = "\x00http"
# Claim lateness buckets, in seconds (Prometheus histogram `le` bounds).
LATENESS_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 60.0)


# A heartbeat's answer: the lease's expiry (UNIX ms; None: the attempt
# ended), and why the worker is to stop (None: it goes on).
Beat = tuple[int | None, RunCancel | None]


def queue_key(job: Job) -> str:
    if job.target.startswith("queue:"):
        return f"{job.owner}\x00{job.target[6:]}"
    return f"{job.owner}\x00{HTTP_QUEUE}"


def owner_of(queue: str) -> str:
    """The owner of a ready queue's key (`owner\0name`)."""
    owner, sep, _ = queue.partition("\x00")
    assert sep, "a queue key names its owner"
    return owner


def is_http(queue: str) -> bool:
    return queue.endswith(f"\x00{HTTP_QUEUE}")


class RunReader(Protocol):
    """What the core reads of the tables; `Store` is one. Reads only: the
    contracts are `Store`'s (engine/store.py)."""

    def open_minutes(self, minute_lo: int, minute_hi: int, count_max: int) -> list[int]: ...

    def scan_minute(self, minute: int, lo_ms: int, hi_ms: int) -> list[tuple[bytes, Run, Job]]: ...

    def get_job_any(self, job_id: str) -> Job | None: ...

    def get_run_any(self, job_id: str, nominal_ms: int) -> Run | None: ...

    def calendar_of(self, job: Job) -> tuple[CalendarUse, View] | None: ...


class Fed(Protocol):
    """What `feed` takes of an entry's changes (`store.Changes` is one)."""

    # Runs key, run and (where apply had it at hand) job of each run that
    # became waiting or moved while waiting.
    woken: list[tuple[bytes, Run, Job | None]]
    left: list[bytes]  # runs keys that stopped being waiting
    gone: list[bytes]  # runs keys of claimed runs that finished, expired or were deleted


def feed_size(changes: Fed) -> int:
    """The items `feed` walks in an entry's changes: `left`, then `woken`,
    then `gone`."""
    return len(changes.left) + len(changes.woken) + len(changes.gone)


class Lease(msgspec.Struct, gc=False):
    """A claimed run's lease, one per run in flight (100,000 in a big spike):
    untracked by the cycle collector, like the records (records.py), since
    it holds only numbers and a string. A duration: it runs out at a
    monotonic instant (`mono_s`), so no wall-clock step lengthens or
    shortens it (clock.py)."""

    attempt: int
    deadline_s: float
    lease_s: int
    owner: str
    # The lease's one live entry in the lease heap: its number and instant,
    # at or before `deadline_s` (heartbeats move the deadline on, not the
    # entry; `DispatchCore.expire` moves the entry when it comes up).
    entry: int = 0
    entry_s: float = 0.0
    # When the attempt's timeout ends it (monotonic; None: no timeout):
    # `deadline_s` never passes it, whatever heartbeats say, and a lease
    # that runs out at it expires as a timeout (docs/semantics.md "Run
    # timeouts").
    timeout_deadline_s: float | None = None
    # The run was asked to stop (`Run.cancel`): heartbeats no longer move
    # the deadline on, and answer `cancel: requested`.
    cancel_requested: bool = False
    # The attempt's timeout as the claim fixed it (UNIX ms; None: no
    # timeout): no answer shows a lease past it, whatever the drift of
    # scheduler time from the monotonic clock since the claim.
    timeout_at_ms: int | None = None


@dataclass(slots=True)
class ClaimedRun:
    run: Run
    job: Job


@dataclass(slots=True)
class Taken:
    """Runs `take` took out of the ready queues, with the job each was
    remembered with; and, when a claim rate held runs back, the ms until it
    lets one more go (None: it did not)."""

    runs: list[tuple[bytes, Job]]
    refill_ms: int | None


@dataclass(slots=True)
class ClaimProposal:
    """A claim between `propose_claims` and `settle`."""

    generation: int
    runs: list[tuple[bytes, Job]]
    # The command to propose; None when no run is left to claim (their jobs
    # were deleted since they were taken).
    command: ClaimRuns | None
    jobs: dict[str, Job]
    at_s: float  # monotonic: the leases count from here
    settled: bool = False


@dataclass(slots=True)
class OverlapProposal:
    """Due runs set aside for apply to decide on (`propose_overlap`)."""

    generation: int
    runs_keys: list[bytes]
    command: OverlapRuns


@dataclass(slots=True)
class Wakeups:
    queues: set[str] = field(default_factory=set)
    owners: set[str] = field(default_factory=set)


class DispatchCore:
    def __init__(
        self,
        reader: RunReader,
        now_ms: int,
        *,
        readahead_ms: int = limits.readahead_ms,
        limits_of: Callable[[str], OwnerLimits] = lambda owner: UNLIMITED,
    ):
        self.reader = reader
        self.readahead_ms = readahead_ms
        # Each owner's runs in flight and claim rate (config.py); soft state
        # of the leader like the leases they count, never replicated.
        self.limits_of = limits_of
        self.generation = 0
        self.counters: Counter[str] = Counter()
        self.lateness_buckets = [0] * (len(LATENESS_BUCKETS_S) + 1)
        self.lateness_sum_s = 0.0
        self._wakeups = Wakeups()
        self.reset(now_ms)

    def take_wakeups(self) -> Wakeups | None:
        """What woke since the last call: queues that got ready runs (the
        http ones as `HTTP_QUEUE`), and owners held back by a limit whose
        room freed; None when nothing did."""
        wakeups = self._wakeups
        if not wakeups.queues and not wakeups.owners:
            return None
        self._wakeups = Wakeups()
        return wakeups

    def reset(self, now_ms: int) -> None:
        """Forgets all soft state (a leader that stopped leading); `load`
        reads it again from the tables. A claim proposed before is stale."""
        self.generation += 1
        self.wheel: TimingWheel[bytes] = TimingWheel(now_ms, tick_ms=limits.dispatch_tick_ms)
        # Runs keys in the wheel or a ready queue, with their queue and job. A
        # key in a deque but not here (or here under another queue) is a
        # tombstone. The job is as it was when the run was loaded: enough for
        # a one-off, re-read for a repeating job, whose slot moves.
        self.queue_of: dict[bytes, tuple[str, Job]] = {}
        self.ready: dict[str, deque[bytes]] = {}
        self.leases: dict[tuple[str, int], Lease] = {}
        # Leases `expire` ended whose `ExpireLeases` is not applied yet:
        # (job ID, nominal ms) -> attempt. A heartbeat for one is stale: the
        # run is still claimed in the table meanwhile, but the lease must not
        # come back while its expiry commits. Dropped when the run leaves
        # the claimed runs (`feed`'s `gone`) or the expiry was not written.
        self.expiring: dict[tuple[str, int], int] = {}
        # Those of `expiring` that end by their timeout: a heartbeat for one
        # answers `cancel: timeout` rather than stale.
        self.timing_out: set[tuple[str, int]] = set()
        # The scheduler time of the latest `load` (UNIX ms): a stored
        # timeout instant becomes a monotonic deadline from it.
        self.load_now_ms = now_ms
        # (instant_s, entry number, job ID, nominal ms). Invariant: each lease
        # has exactly one entry whose number is its `entry`; the others are
        # stale (their lease ended or was replaced), skipped when popped, and
        # fewer than `len(leases) + limits.lease_heap_slack_entries`
        # (`_bound_lease_heap`).
        self._lease_heap: list[tuple[float, int, str, int]] = []
        self._lease_entries = 0  # entry numbers handed out
        # Every open run due before this is in memory, except the waiting
        # runs of a skipped owner from its skip point on (`load`).
        self.loaded_until_ms = 0
        # Every claimed run due before this has a lease: the loader's, or
        # `_lease_ahead`'s while memory is full (at least loaded_until_ms).
        self.leased_until_ms = 0
        # Per owner, its runs in `queue_of` (no zeros kept).
        self.loaded_of: Counter[str] = Counter()
        # Owners whose share of memory is full: each with its skip point
        # (UNIX ms), from which its waiting runs stay in the table.
        self.skipped: dict[str, int] = {}
        # Skipped owners below their low water mark, read again next tick.
        self.rereads: set[str] = set()
        # Invariant: in_flight[o] == number of leases of owner o (no zeros
        # kept). `claiming` counts runs taken by claims still being
        # committed, which hold room as leases do.
        self.in_flight: Counter[str] = Counter()
        self.claiming: Counter[str] = Counter()
        self.claim_buckets: dict[str, TokenBucket] = {}
        # Owners whose ready runs a limit held back, woken when room frees.
        self.held: set[str] = set()
        # Owners' http queues with ready runs, least recently served first.
        self.http_ready: dict[str, None] = {}
        # Runs keys of due runs whose job has an overlap policy other than
        # `allow`, set aside by `tick` (still in `queue_of`, in neither the
        # wheel nor a ready queue) until apply decides on them
        # (`propose_overlap`, docs/semantics.md "Overlap").
        self.overlap_due: list[bytes] = []

    # -- memory from the tables ----------------------------------------------

    def load(self, now_ms: int, mono_s: float) -> None:
        """Loads open runs, oldest due minute first, towards the end of the
        read-ahead window: a few minutes a call, and only while memory holds
        fewer than `limits.dispatch_memory_runs_max` runs (`_memory_full`), so a backlog of a
        million overdue runs (after an outage) neither delays readiness nor
        fills memory; it streams through as it is claimed.

        Each minute is scanned whole and `loaded_until_ms` moves past it in the
        same synchronous step, so every run is either in a scan or, once its
        minute is loaded, in the change feed. A run that is both (its commit
        landed between a scan and its feed) is remembered once; and the claim
        command only claims a waiting run, so nothing is handed out twice.

        One owner may not fill that memory: an owner holding
        `limits.dispatch_owner_runs_max` runs before a minute is scanned is
        *skipped* from there on (its skip point), and its waiting runs stay
        in the table until it holds fewer than the low water mark; then
        `_reread` reads them from the skip point on. Its claimed runs are
        loaded (leased) as before. The invariant, for every owner o:

        - every waiting run of o due before `loaded_until_ms` is in memory,
          unless o is skipped and the run is due at or after its skip point;
        - if o is skipped, its skip point is at most `loaded_until_ms`, and
          none of its runs in the wheel is due after it, so o's skipped runs
          come out before its later ones: due order holds per owner. (One in
          a ready queue may be: `_skip_from` leaves runs that fell due
          already where they are.)

        The change feed (`_admit`) keeps the same rule. `check_memory` asserts
        the invariant against the table (for tests)."""
        until_ms = (keys.minute_of(now_ms + self.readahead_ms) + 1) * limits.minute_ms
        self.load_now_ms = now_ms
        rows = 0
        while self.loaded_until_ms < until_ms and rows < limits.loader_rows_per_step:
            if self._memory_full():
                break
            lo_ms = self.loaded_until_ms
            self._skip_full(lo_ms)
            minutes = self.reader.open_minutes(keys.minute_of(lo_ms), keys.minute_of(until_ms), 1)
            if not minutes:
                self.loaded_until_ms = until_ms
                break
            found = self.reader.scan_minute(minutes[0], lo_ms, until_ms)
            skipped = self.skipped
            for runs_key, run, job in found:
                if skipped and run.status == "waiting" and job.owner in skipped:
                    continue  # waits in the table, after its skip point
                self._remember(runs_key, run, job, mono_s)
            rows += len(found) + 1
            self.loaded_until_ms = min(until_ms, (minutes[0] + 1) * limits.minute_ms)
        if self.loaded_until_ms < until_ms and rows < limits.loader_rows_per_step and self._memory_full():
            rows += self._lease_ahead(until_ms, limits.loader_rows_per_step - rows, mono_s)
        if self.rereads:
            self._reread(rows)

    def _lease_ahead(self, until_ms: int, rows_max: int, mono_s: float) -> int:
        """Grants leases to the claimed runs of the minutes the loader has
        not reached because memory is full (a restart or takeover with a
        backlog), so each gets its full lease from now, as a loaded one
        does, and a dead worker's run is handed out again after it rather
        than after the backlog. Only leases: their waiting runs stay in the
        table for the loader, and a run whose lease runs out waits in due
        order behind them. Answers the rows read."""
        lo_ms = max(self.loaded_until_ms, self.leased_until_ms)
        rows = 0
        while lo_ms < until_ms and rows < rows_max:
            minutes = self.reader.open_minutes(keys.minute_of(lo_ms), keys.minute_of(until_ms), 1)
            if not minutes:
                lo_ms = until_ms
                break
            found = self.reader.scan_minute(minutes[0], lo_ms, until_ms)
            for _, run, job in found:
                if run.status == "claimed" and (run.job_id, run.nominal_ms) not in self.leases:
                    self._grant_claimed(run, job, self.load_now_ms, mono_s)
            rows += len(found) + 1
            lo_ms = min(until_ms, (minutes[0] + 1) * limits.minute_ms)
        self.leased_until_ms = lo_ms
        return rows

    def _memory_full(self) -> bool:
        """Whether memory holds `limits.dispatch_memory_runs_max` runs, each
        owner's counted up to its share: runs an owner holds past its share
        (a minute read whole, or runs the change feed took in while there
        was room) do not stop the loading of the other owners' runs."""
        if len(self.queue_of) < limits.dispatch_memory_runs_max:
            return False
        share = limits.dispatch_owner_runs_max
        return sum(min(count, share) for count in self.loaded_of.values()) >= limits.dispatch_memory_runs_max

    def _skip_full(self, lo_ms: int) -> None:
        """Skips, from `lo_ms` (the start of the next scan) on, every owner
        that holds its share of memory."""
        share = limits.dispatch_owner_runs_max
        for owner, count in self.loaded_of.items():
            if count >= share and owner not in self.skipped:
                self.skipped[owner] = lo_ms
        assert all(skip_ms <= lo_ms for skip_ms in self.skipped.values()), "skip points are loaded up to"

    def _reread(self, rows: int) -> None:
        """Reads the runs of skipped owners below their low water mark again,
        each from its skip point, as far as the loader's budget of rows
        (`rows` of it spent) and the memory bound allow."""
        for owner in list(self.rereads):
            if rows >= limits.loader_rows_per_step or self._memory_full():
                return
            self.rereads.discard(owner)
            rows += self._reread_owner(owner, limits.loader_rows_per_step - rows)
            if owner in self.skipped and self.loaded_of[owner] < limits.dispatch_owner_runs_max:
                self.rereads.add(owner)  # not done: the next tick goes on

    def _reread_owner(self, owner: str, rows_max: int) -> int:
        """Loads one skipped owner's waiting runs from its skip point on, a
        whole minute at a time, until it holds its share again; moves the skip
        point past each minute read (dropping it at `loaded_until_ms`), in
        the same synchronous step as the scan. Answers the rows read."""
        assert rows_max > 0
        self.counters["rereads"] += 1
        skip_ms = self.skipped[owner]
        hi_ms = self.loaded_until_ms
        assert skip_ms <= hi_ms, "a skip point is loaded up to"
        rows = 0
        while skip_ms < hi_ms and rows < rows_max and self.loaded_of[owner] < limits.dispatch_owner_runs_max:
            if self._memory_full():
                break
            minutes = self.reader.open_minutes(keys.minute_of(skip_ms), keys.minute_of(hi_ms - 1) + 1, 1)
            if not minutes:
                skip_ms = hi_ms
                break
            end_ms = min(hi_ms, (minutes[0] + 1) * limits.minute_ms)
            found = self.reader.scan_minute(minutes[0], skip_ms, end_ms)
            for runs_key, run, job in found:
                # Claimed runs were leased when the loader first read them.
                if run.status == "waiting" and job.owner == owner and runs_key not in self.queue_of:
                    self.queue_of[runs_key] = (queue_key(job), job)
                    self.loaded_of[owner] += 1
                    self.wheel.add(runs_key, run.due_ms)
            rows += len(found) + 1
            skip_ms = end_ms
        if skip_ms >= hi_ms:
            del self.skipped[owner]
        else:
            self.skipped[owner] = skip_ms
        return rows

    def _remember(self, runs_key: bytes, run: Run, job: Job, mono_s: float) -> None:
        if run.status == "waiting":
            if runs_key not in self.queue_of:
                self.queue_of[runs_key] = (queue_key(job), job)
                self.loaded_of[job.owner] += 1
                self.wheel.add(runs_key, run.due_ms)
        elif run.status == "claimed" and (run.job_id, run.nominal_ms) not in self.leases:
            # A node that (re)starts or takes over gives every claimed run a
            # full lease from this moment, on the monotonic clock, whatever
            # the stored expiry says: a restart, a failover or a clock step
            # never expires a healthy worker's run. Its timeout, though, is
            # the instant the claim fixed (`Run.timeout_at_ms`).
            self._grant_claimed(run, job, self.load_now_ms, mono_s)

    def feed(self, changes: Fed, start: int, stop: int) -> None:
        """Takes items `[start, stop)` of an entry's changes into memory
        (`feed_size`: `left`, then `woken`, then `gone`), and drops the
        leases of the runs that finished. The driver feeds an entry in
        slices of `limits.dispatch_slice_runs`, in order, with other calls
        in between; each slice is checked against memory as it is then: a
        run the loader read meanwhile is remembered once, and a run a claim
        took meanwhile that comes back in is dropped again by that claim's
        own `left`."""
        assert 0 <= start <= stop
        left, woken, gone = changes.left, changes.woken, changes.gone
        woken_at, gone_at = len(left), len(left) + len(woken)  # where each list starts in the whole
        for runs_key in left[start:stop]:
            entry = self.queue_of.pop(runs_key, None)
            if entry is not None:
                self.wheel.cancel(runs_key)
                self._unloaded(entry[1].owner)
        for runs_key, run, job in woken[max(0, start - woken_at) : max(0, stop - woken_at)]:
            if run.due_ms < self.loaded_until_ms and runs_key not in self.queue_of:
                job = job or self.reader.get_job_any(run.job_id)
                assert job is not None
                self._admit(runs_key, run.due_ms, job)
        for runs_key in gone[max(0, start - gone_at) : max(0, stop - gone_at)]:
            slot = keys.slot_of(runs_key)
            self._drop_lease(slot)
            if self.expiring:
                self.expiring.pop(slot, None)
                self.timing_out.discard(slot)

    def stop_requested(self, stopping: list[tuple[str, int]]) -> None:
        """Runs asked to stop by an applied entry (`Changes.stopping`): their
        leases no longer grow, and their heartbeats answer `cancel:
        requested`. A run with no lease here gets the mark when it is
        leased, from its stored `cancel`."""
        for slot in stopping:
            lease = self.leases.get(slot)
            if lease is not None:
                lease.cancel_requested = True

    def _admit(self, runs_key: bytes, due_ms: int, job: Job) -> None:
        """A run that became waiting inside the loaded window: into memory,
        unless its owner is skipped and it is due at or after the skip point
        (the re-read reaches it, in due order), or its owner holds its share
        and memory is full (then the owner is skipped from this run on). An
        owner below its share always gets its run, as does any owner while
        memory has room: one owner's spike goes straight into memory."""
        owner = job.owner
        skip_ms = self.skipped.get(owner)
        if skip_ms is not None and due_ms >= skip_ms:
            return
        if (
            self.loaded_of[owner] >= limits.dispatch_owner_runs_max
            and len(self.queue_of) >= limits.dispatch_memory_runs_max
        ):
            self._skip_from(owner, due_ms)
            return
        self.queue_of[runs_key] = (queue_key(job), job)
        self.loaded_of[owner] += 1
        self.wheel.add(runs_key, due_ms)

    def _skip_from(self, owner: str, due_ms: int) -> None:
        """Moves an owner's skip point back to `due_ms`, and forgets its runs
        in the wheel due after it, so they come out after this one (they
        stay waiting in the table). Runs due at the same time stay, so a
        spike's runs are not sent back and forth. Runs in a ready queue stay:
        a run's due time is never before the time its command was stamped,
        so those fell due within a commit's time, and taking a run out of a
        ready queue would leave a copy there that a re-read could revive out
        of order. Rare: the owner must hold its share of a full memory; it costs one
        pass over memory, and the owner's next runs (due at or after the
        new skip point) cost nothing until it is read again."""
        skip_ms = self.skipped.get(owner)
        assert skip_ms is None or due_ms < skip_ms, "a skip point only moves back here"
        assert due_ms < self.loaded_until_ms
        self.skipped[owner] = due_ms
        self.counters["feed_skips"] += 1
        later = [k for k, (_, job) in self.queue_of.items() if job.owner == owner and k in self.wheel and _due_of(k) > due_ms]
        for runs_key in later:
            del self.queue_of[runs_key]
            self.wheel.cancel(runs_key)
            self._unloaded(owner)

    def _unloaded(self, owner: str) -> None:
        """One of the owner's runs left memory."""
        count = self.loaded_of[owner] - 1
        assert count >= 0, "loaded_of counts queue_of"
        if count:
            self.loaded_of[owner] = count
        else:
            del self.loaded_of[owner]
        if count < limits.dispatch_owner_low_water_runs and owner in self.skipped:
            self.rereads.add(owner)

    def check_memory(self) -> None:
        """Asserts the invariant of `load` against the runs table (for tests:
        it reads every open run). Call it between commits."""
        assert self.loaded_of == Counter(job.owner for _, job in self.queue_of.values()), "loaded_of"
        for owner, skip_ms in self.skipped.items():
            assert skip_ms <= self.loaded_until_ms, f"skip point of {owner} past the loaded window"
        for runs_key, (_, job) in self.queue_of.items():
            skip_at_ms = self.skipped.get(job.owner)
            if skip_at_ms is not None and runs_key in self.wheel:
                assert _due_of(runs_key) <= skip_at_ms, f"a run of {job.owner} after its skip point"
        minutes = self.reader.open_minutes(0, keys.minute_of(self.loaded_until_ms - 1) + 1, 1 << 30)
        for minute in minutes:
            for runs_key, run, job in self.reader.scan_minute(minute, 0, self.loaded_until_ms):
                skip_at_ms = self.skipped.get(job.owner)
                if run.status == "waiting" and (skip_at_ms is None or run.due_ms < skip_at_ms):
                    assert runs_key in self.queue_of, f"a waiting run of {job.owner} not in memory"

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
        woken = self._wakeups.queues
        for runs_key in self.wheel.advance(now_ms, limits.dispatch_slice_runs):
            entry = self.queue_of.get(runs_key)
            if entry is None:
                continue
            if entry[1].overlap is not None:
                # Apply decides first whether the policy lets it run now.
                self.overlap_due.append(runs_key)
                continue
            queue = entry[0]
            self.ready.setdefault(queue, deque()).append(runs_key)
            self.counters["due"] += 1
            if is_http(queue):
                self.http_ready[queue] = None
                woken.add(HTTP_QUEUE)
            else:
                woken.add(queue)
        return self.wheel.behind

    def expire(self, now_ms: int, mono_s: float) -> ExpireLeases | None:
        """The command that expires the leases run out by `mono_s`, at most
        `limits.expiries_per_command_max` of them; None when none has. Their
        leases are gone from memory at once."""
        expiries = self.expired(mono_s)
        return ExpireLeases(now_ms, expiries) if expiries else None

    def expired(self, now_s: float) -> list[Expiry]:
        """Leases run out by `now_s` (monotonic), at most a command's worth."""
        found: list[Expiry] = []
        heap = self._lease_heap
        while heap and heap[0][0] <= now_s and len(found) < limits.expiries_per_command_max:
            _, entry, job_id, nominal_ms = heapq.heappop(heap)
            lease = self.leases.get((job_id, nominal_ms))
            if lease is None or lease.entry != entry:
                continue  # stale: the lease ended or was replaced
            if lease.deadline_s > now_s:
                # Heartbeats moved the deadline on: the lease's one entry follows.
                lease.entry_s = lease.deadline_s
                heapq.heappush(heap, (lease.deadline_s, entry, job_id, nominal_ms))
                continue
            self._drop_lease((job_id, nominal_ms))
            self.expiring[(job_id, nominal_ms)] = lease.attempt
            timeout_s = lease.timeout_deadline_s
            if timeout_s is not None and timeout_s <= now_s:
                self.timing_out.add((job_id, nominal_ms))
                found.append(Expiry(job_id, nominal_ms, lease.attempt, "timeout"))
            else:
                found.append(Expiry(job_id, nominal_ms, lease.attempt))
        return found

    def expire_failed(self, command: ExpireLeases, mono_s: float) -> None:
        """The expiry was not written: its leases come back, run out at
        `mono_s`, so the next check proposes them again."""
        for expiry in command.expiries:
            self.expiring.pop((expiry.job_id, expiry.nominal_ms), None)
            self.timing_out.discard((expiry.job_id, expiry.nominal_ms))
            job = self.reader.get_job_any(expiry.job_id)
            if job is not None:
                timeout_s = mono_s if expiry.reason == "timeout" else None
                self._grant(job.owner, expiry.job_id, expiry.nominal_ms, expiry.attempt, mono_s, 0, timeout_s)

    def expire_applied(self, outcomes: list[Run | None]) -> None:
        """An `ExpireLeases` applied: counts the leases it expired, the
        attempts its timeouts ended and the runs it ended cancelled."""
        for outcome in outcomes:
            if outcome is None:
                continue
            self.counters["expired"] += 1
            if outcome.status == "cancelled":
                self.counters["cancelled"] += 1
            elif outcome.cancel == "timeout":
                self.counters["timed_out"] += 1

    def reported(self, outcomes: list[Run | errors.TempoError]) -> bool:
        """A `ReportResults` applied: counts its runs by their new status.
        Answers whether an attempt failed in it (a run waits again, or
        failed for good): only then has the driver lines to log."""
        counters = self.counters
        failed = False
        for outcome in outcomes:
            if isinstance(outcome, Run):
                status = outcome.status
                counters[status] += 1
                if status == "waiting" or status == "failed":
                    failed = True
        return failed

    # -- claims ------------------------------------------------------------------

    def _budget(self, owner: str, mono_ms: int, runs_max: int) -> tuple[int, int | None]:
        """How many runs the owner's limits let a claim take now (at most
        `runs_max`); and when its claim rate is what stops it, the ms until
        the bucket holds a token again. A rate is a duration: `mono_ms` is
        monotonic (`mono_s` in ms)."""
        owner_limits = self.limits_of(owner)
        budget = runs_max
        if owner_limits.runs_in_flight_max is not None:
            room = owner_limits.runs_in_flight_max - self.in_flight[owner] - self.claiming[owner]
            budget = min(budget, room)
        if budget <= 0:
            return 0, None
        if owner_limits.claims_per_s is not None:
            bucket = self.claim_buckets.get(owner)
            if bucket is None:
                assert owner_limits.claim_burst is not None
                bucket = TokenBucket(owner_limits.claims_per_s, owner_limits.claim_burst, mono_ms)
                self.claim_buckets[owner] = bucket
            budget = min(budget, bucket.available(mono_ms))
            if budget <= 0:
                return 0, max(bucket.wait_ms(mono_ms, 1), limits.claim_refill_wait_ms_min)
        return budget, None

    def _budgets(
        self, queues: list[str], mono_ms: int, runs_max: int
    ) -> tuple[list[str], dict[str, int], int | None]:
        """The queues with ready runs that their owners' limits let a claim
        take from, each owner's budget, and the earliest claim-rate refill."""
        budgets: dict[str, int] = {}
        refill_ms: int | None = None
        live: list[str] = []
        for queue in queues:
            if not self.ready.get(queue):
                continue
            owner = owner_of(queue)
            if owner not in budgets:
                budgets[owner], wait_ms = self._budget(owner, mono_ms, runs_max)
                if wait_ms is not None:
                    refill_ms = wait_ms if refill_ms is None else min(refill_ms, wait_ms)
            if budgets[owner] > 0:
                live.append(queue)
            else:
                self.held.add(owner)
        return live, budgets, refill_ms

    def _pop(self, queue: str) -> tuple[bytes, Job] | None:
        """The head of a ready queue, tombstones skipped; None when empty."""
        ready = self.ready[queue]
        while ready:
            runs_key = ready.popleft()
            entry = self.queue_of.get(runs_key)
            if entry is not None and entry[0] == queue:
                del self.queue_of[runs_key]
                # `_unloaded`, inline: this runs once per run claimed.
                owner = entry[1].owner
                count = self.loaded_of[owner] - 1
                if count:
                    self.loaded_of[owner] = count
                else:
                    del self.loaded_of[owner]
                if owner in self.skipped and count < limits.dispatch_owner_low_water_runs:
                    self.rereads.add(owner)
                return runs_key, entry[1]
        return None

    def take(self, queues: list[str], runs_max: int, mono_s: float) -> Taken:
        """Up to `runs_max` ready runs of `queues` (`[HTTP_QUEUE]`: every
        owner's http queue), as far as each owner's limits allow. They hold
        their owners' room until `settle`, and are out of memory: the driver
        proposes them (`propose_claims`) at once."""
        mono_ms = int(mono_s * 1000)
        if queues == [HTTP_QUEUE]:
            return self._take_http(runs_max, mono_ms)
        return self._take(queues, runs_max, mono_ms)

    def _take(self, queues: list[str], runs_max: int, mono_ms: int) -> Taken:
        """Up to `runs_max` ready runs of these queues, oldest due first, as
        far as each owner's limits allow (runs beyond stay in their queue, in
        order); and, when a claim rate held runs back, the ms until it lets
        one more go."""
        live, budgets, refill_ms = self._budgets(queues, mono_ms, runs_max)
        taken: list[tuple[bytes, Job]] = []
        while live and len(taken) < runs_max:
            best = live[0] if len(live) == 1 else min(live, key=lambda q: _due_of(self.ready[q][0]))
            owner = owner_of(best)
            while len(taken) < runs_max and budgets[owner] > 0:
                found = self._pop(best)
                if found is None:
                    break
                taken.append(found)
                budgets[owner] -= 1
                if len(live) > 1:
                    break  # another queue's head may be due earlier now
            if not self.ready[best]:
                live.remove(best)
            elif budgets[owner] <= 0:
                self.held.add(owner)
                live = [q for q in live if owner_of(q) != owner]
        self._account(taken, mono_ms)
        return Taken(taken, refill_ms)

    def _take_http(self, runs_max: int, mono_ms: int) -> Taken:
        """Up to `runs_max` ready runs with http(s) targets, one owner's run
        after another's (round-robin, the owner served least recently first),
        so one owner's backlog does not queue ahead of another's runs; each
        owner's runs in due order, as far as its limits allow."""
        for queue in [q for q in self.http_ready if not self.ready.get(q)]:
            del self.http_ready[queue]
        turn, budgets, refill_ms = self._budgets(list(self.http_ready), mono_ms, runs_max)
        taken: list[tuple[bytes, Job]] = []
        while turn and len(taken) < runs_max:
            for queue in list(turn):
                if len(taken) >= runs_max:
                    break
                owner = owner_of(queue)
                found = self._pop(queue)
                if found is not None:
                    taken.append(found)
                    budgets[owner] -= 1
                # Served: to the end of the line.
                del self.http_ready[queue]
                if self.ready[queue]:
                    self.http_ready[queue] = None
                    if budgets[owner] <= 0:
                        self.held.add(owner)
                        turn.remove(queue)
                else:
                    turn.remove(queue)
        self._account(taken, mono_ms)
        return Taken(taken, refill_ms)

    def _account(self, taken: list[tuple[bytes, Job]], mono_ms: int) -> None:
        """Taken runs hold their owner's room until their claim commits, and
        spend its claim tokens now."""
        by_owner = Counter(job.owner for _, job in taken)
        for owner, count in by_owner.items():
            self.claiming[owner] += count
            bucket = self.claim_buckets.get(owner)
            if bucket is not None:
                bucket.take(mono_ms, count)

    def ready_count(self) -> int:
        """Runs due but not claimed (tombstones aside, which are few)."""
        return sum(len(q) for q in self.ready.values())

    def held_back(self, mono_s: float) -> dict[str, int]:
        """Per owner, the runs due but not claimed because one of the owner's
        limits is reached now (tombstones aside)."""
        mono_ms = int(mono_s * 1000)
        blocked: dict[str, bool] = {}
        found: Counter[str] = Counter()
        for queue, ready in self.ready.items():
            if not ready:
                continue
            owner = owner_of(queue)
            if owner not in blocked:
                blocked[owner] = self._budget(owner, mono_ms, 1)[0] == 0
            if blocked[owner]:
                found[owner] += len(ready)
        return dict(found)

    def propose_claims(self, worker: str, runs: list[tuple[bytes, Job]], now_ms: int, mono_s: float) -> ClaimProposal:
        """The command that claims runs `take` took, stamped `now_ms`; the
        leases will count from `mono_s` (the claim's stamp, on the
        monotonic clock; the wall-clock expiry in the command is what the
        run shows). A repeating job is read again, since its slot moves."""
        jobs: dict[str, Job] = {}
        claims: list[Claim] = []
        for runs_key, loaded_job in runs:
            claim = self._claim_of(runs_key, loaded_job, jobs, now_ms, claiming=True)
            if claim is not None:
                claims.append(claim)
        command = ClaimRuns(now_ms, worker, claims) if claims else None
        return ClaimProposal(self.generation, runs, command, jobs, mono_s)

    def _claim_of(
        self, runs_key: bytes, loaded_job: Job, jobs: dict[str, Job], now_ms: int, *, claiming: bool = False
    ) -> Claim | None:
        """The claim of the run at `runs_key`, stamped `now_ms`; None when its
        job is gone. `jobs`: the jobs read for this command so far (a
        repeating job is read again, since its slot moves). `claiming`: a
        claim, which may find the slot itself missed (`catch_up`), rather
        than an overlap decision, which hands the slot on only when its
        policy holds the run back (the run is buffered or skipped, not missed)."""
        # The job a run was remembered with is its own (`queue_of`), so
        # its ID is the one in the runs key.
        job_id = loaded_job.id
        nominal_ms = keys.nominal_of(runs_key)
        job = jobs.get(job_id)
        if job is None:
            job = self.reader.get_job_any(job_id) if loaded_job.schedule.repeating else loaded_job
            if job is None:
                return None
            jobs[job_id] = job
        # The attempt's timeout counts from the claim's stamp (records.Run).
        timeout_at_ms = None if job.timeout_s is None else now_ms + job.timeout_s * 1000
        if not job.schedule.repeating:
            return Claim(job_id, nominal_ms, now_ms + job.lease_s * 1000, one_off=True, timeout_at_ms=timeout_at_ms)
        claim = Claim(job_id, nominal_ms, now_ms + job.lease_s * 1000, timeout_at_ms=timeout_at_ms)
        if job.state == "active" and job.slot_ms == nominal_ms:
            seen = self.reader.calendar_of(job) if claiming else None
            if seen is None:
                nxt = catch_up(job, nominal_ms, now_ms, claiming=claiming)
            else:
                nxt = self._calendar_claim(claim, job, calendar_plan.Seen(*seen), runs_key, now_ms)
                if claim.calendar is not None and claim.calendar.action == "move":
                    return claim  # the run waits on: the schedule stays at its slot
            if nxt is not None:
                # Its ranges stand even when no slot is left to plan (rules/slots.py `hand_on`).
                claim.missed = tuple(nxt.missed)
                nxt = step_over_taken(job, nxt, now_ms, partial(self.reader.get_run_any, job_id))
            if nxt is not None:
                claim.next_slot_ms, claim.next_due_ms = nxt.slot_ms, nxt.due_ms
                claim.missed, claim.catchup_until_ms, claim.catchup_decided_ms = tuple(nxt.missed), nxt.until_ms, nxt.decided_ms
                job.slot_ms = nxt.slot_ms  # a later run of this batch is not the slot run
        return claim

    @staticmethod
    def _calendar_claim(
        claim: Claim, job: Job, seen: calendar_plan.Seen, runs_key: bytes, now_ms: int
    ) -> CatchUp | None:
        """The calendar's decision on the claim of the job's slot run
        (docs/semantics.md "Calendars"), put in the claim; answers the
        slot the schedule goes on to, placed by the calendar."""
        nominal_ms = keys.nominal_of(runs_key)
        decided = calendar_plan.at_claim(job, seen, nominal_ms, _due_of(runs_key), now_ms)
        claim.calendar = decided.claim
        if decided.claim.action == "skip":
            return decided.next
        # A run moved here runs, whatever slots passed since its own: those
        # are decided by the job's catch-up policy, as after any late run.
        nxt = catch_up(job, nominal_ms, now_ms, claiming=decided.claim.why is None)
        return None if nxt is None else calendar_plan.planned(job, seen, nxt, now_ms)

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
        queue = entry[0]
        self.ready.setdefault(queue, deque()).append(runs_key)
        self.counters["due"] += 1
        if is_http(queue):
            self.http_ready[queue] = None
            self._wakeups.queues.add(HTTP_QUEUE)
        else:
            self._wakeups.queues.add(queue)

    def claimed(self, proposal: ClaimProposal, outcomes: list[Run | None]) -> list[ClaimedRun]:
        """The claim command applied (its entry fed first): a lease for each
        run it claimed, from the proposal's `at_s`. After a `reset` too: the
        runs are claimed in the tables, and their worker gets them; a lease
        the loader gave one meanwhile is replaced, counted once."""
        command = proposal.command
        assert command is not None, "a proposal without a command is not proposed"
        claimed: list[ClaimedRun] = []
        lateness_s: list[float] = []
        at_ms, at_s = command.at_ms, proposal.at_s
        jobs, leases, in_flight, heap = proposal.jobs, self.leases, self.in_flight, self._lease_heap
        replaced = False
        for claim, run in zip(command.claims, outcomes, strict=True):
            if run is None:
                continue
            job = jobs[claim.job_id]
            # `_grant`, inline: this runs once per run claimed.
            deadline_s = at_s + job.lease_s
            timeout_s = None
            if claim.timeout_at_ms is not None:
                timeout_s = at_s + (claim.timeout_at_ms - at_ms) / 1000
                deadline_s = min(deadline_s, timeout_s)
            self._lease_entries += 1
            entry = self._lease_entries
            # Asked to stop by a later claim of the same command (`cancel_other`):
            # the entry's `stopping`, fed before this lease existed, missed it.
            lease = Lease(run.attempt, deadline_s, job.lease_s, job.owner, entry, deadline_s, timeout_s,
                          run.cancel == "requested", claim.timeout_at_ms)
            key = (run.job_id, run.nominal_ms)
            old = leases.get(key)
            leases[key] = lease
            if old is None:
                in_flight[lease.owner] += 1
            else:
                assert old.owner == lease.owner, "a run's owner never changes"
                replaced = True
            heapq.heappush(heap, (deadline_s, entry, run.job_id, run.nominal_ms))
            lateness_s.append((at_ms - run.due_ms) / 1000)
            claimed.append(ClaimedRun(run, job))
        if replaced:
            self._bound_lease_heap()
        self.observe_lateness(lateness_s)
        self.counters["claimed"] += len(claimed)
        return claimed

    def give_back(self, proposal: ClaimProposal) -> None:
        """The claim was not written (a full disk, too many writes): its runs
        are still waiting in the tables, and go back where `_pop` took them
        from, in their order (unless the change feed has them again)."""
        if proposal.generation != self.generation:
            return
        for runs_key, job in reversed(proposal.runs):
            if runs_key in self.queue_of:
                continue
            queue = queue_key(job)
            self.queue_of[runs_key] = (queue, job)
            self.loaded_of[job.owner] += 1
            self.ready.setdefault(queue, deque()).appendleft(runs_key)
            if is_http(queue):
                self.http_ready[queue] = None

    def settle(self, proposal: ClaimProposal) -> None:
        """The claim is over (claimed, given back, or failed otherwise): the
        room its runs held while it committed frees (their leases hold it
        now). Once per proposal; a stale one counts nothing."""
        assert not proposal.settled, "a claim settles once"
        proposal.settled = True
        if proposal.generation != self.generation:
            return  # a reset started a new count
        claiming = self.claiming
        for owner, count in Counter(job.owner for _, job in proposal.runs).items():
            claiming[owner] -= count
            if claiming[owner] <= 0:
                assert claiming[owner] == 0, "claiming"
                del claiming[owner]
            if owner in self.held:
                self._wake_owner(owner)

    def _wake_owner(self, owner: str) -> None:
        """Room freed for an owner a limit held back: its waiting claimers
        (and the executor's) look again (`take_wakeups`)."""
        self.held.discard(owner)
        self._wakeups.owners.add(owner)

    def observe_lateness(self, lateness_s: list[float]) -> None:
        """Counts claim lateness into the histogram: bucket i holds
        lateness ≤ LATENESS_BUCKETS_S[i] (the last, anything above)."""
        buckets = self.lateness_buckets
        for late_s in lateness_s:
            late_s = max(late_s, 0.0)
            self.lateness_sum_s += late_s
            buckets[bisect.bisect_left(LATENESS_BUCKETS_S, late_s)] += 1

    # -- leases ------------------------------------------------------------------

    def _grant(
        self,
        owner: str,
        job_id: str,
        nominal_ms: int,
        attempt: int,
        deadline_s: float,
        lease_s: int,
        timeout_deadline_s: float | None = None,
        cancel_requested: bool = False,
        timeout_at_ms: int | None = None,
    ) -> None:
        # `_enter_lease`, inline: this runs once per run claimed. A new
        # lease adds one to the leases and one entry to the heap, which
        # keeps it within its bound; only one that replaces a lease (whose
        # entry goes stale) may take it past.
        if timeout_deadline_s is not None and timeout_deadline_s < deadline_s:
            deadline_s = timeout_deadline_s
        self._lease_entries += 1
        entry = self._lease_entries
        lease = Lease(attempt, deadline_s, lease_s, owner, entry, deadline_s, timeout_deadline_s, cancel_requested,
                      timeout_at_ms)
        replaced = self._put_lease((job_id, nominal_ms), lease)
        heapq.heappush(self._lease_heap, (deadline_s, entry, job_id, nominal_ms))
        if replaced:
            self._bound_lease_heap()

    def _grant_claimed(self, run: Run, job: Job, now_ms: int, mono_s: float) -> None:
        """A full lease from `mono_s` for a run claimed in the tables, with
        its timeout (the stored instant, read on the scheduler clock at
        `now_ms`) and its cancel request."""
        timeout_s = None if run.timeout_at_ms is None else mono_s + (run.timeout_at_ms - now_ms) / 1000
        lease_s = claimed_lease_s(run, job)
        self._grant(job.owner, run.job_id, run.nominal_ms, run.attempt, mono_s + lease_s, lease_s, timeout_s,
                    run.cancel == "requested", run.timeout_at_ms)

    def _enter_lease(self, key: tuple[str, int], lease: Lease) -> None:
        """Gives the lease a new entry in the heap, at its deadline; the
        entry it had, if any, is stale from now on."""
        self._lease_entries += 1
        lease.entry = self._lease_entries
        lease.entry_s = lease.deadline_s
        heapq.heappush(self._lease_heap, (lease.deadline_s, lease.entry, key[0], key[1]))
        self._bound_lease_heap()

    def _move_deadline(self, key: tuple[str, int], lease: Lease, deadline_s: float) -> None:
        """A heartbeat (later) or a release (now): a later deadline keeps the
        lease's entry, which `expired` moves on when it comes up; an earlier
        one needs an earlier entry."""
        lease.deadline_s = deadline_s
        if deadline_s < lease.entry_s:
            self._enter_lease(key, lease)

    def _bound_lease_heap(self) -> None:
        """Rebuilds the heap from the leases once its stale entries outnumber
        the live ones by `limits.lease_heap_slack_entries`: a rebuild costs
        O(leases) and comes after at least as many stale entries were made,
        so it is O(1) per lease that ended, and the heap holds at most
        `2 * len(leases) + slack` entries."""
        heap = self._lease_heap
        if len(heap) <= 2 * len(self.leases) + limits.lease_heap_slack_entries:
            return
        # In place: `expired` holds the list while it pops.
        heap[:] = [(lease.entry_s, lease.entry, job_id, nominal_ms) for (job_id, nominal_ms), lease in self.leases.items()]
        heapq.heapify(heap)
        self.counters["lease_heap_rebuilds"] += 1

    def _put_lease(self, key: tuple[str, int], lease: Lease) -> bool:
        """Every lease is a run of its owner in flight. Answers whether it
        replaced one."""
        old = self.leases.get(key)
        self.leases[key] = lease
        if old is None:
            self.in_flight[lease.owner] += 1
            return False
        assert old.owner == lease.owner, "a run's owner never changes"
        return True

    def _drop_lease(self, key: tuple[str, int]) -> None:
        """The run finished, expired or was deleted: its owner's room frees."""
        lease = self.leases.pop(key, None)
        if lease is None:
            return
        owner = lease.owner
        self.in_flight[owner] -= 1
        if self.in_flight[owner] <= 0:
            assert self.in_flight[owner] == 0, "in_flight counts leases"
            del self.in_flight[owner]
        if owner in self.held:
            self._wake_owner(owner)
        if len(self._lease_heap) > 2 * len(self.leases) + limits.lease_heap_slack_entries:
            self._bound_lease_heap()

    def heartbeat(self, owner: str | None, run_id: str, attempt: int, now_ms: int, mono_s: float) -> int:
        """Extends a lease in memory to `lease_s` from now (monotonic); answers
        the new expiry as an instant of scheduler time (UNIX ms). An
        attempt that ended (`beat` answers no expiry) is `StaleAttempt`."""
        expires_ms, _ = self.beat(owner, run_id, attempt, now_ms, mono_s)
        if expires_ms is None:
            raise errors.StaleAttempt(f"attempt {attempt} of run {run_id} no longer holds it")
        return expires_ms

    def beat(self, owner: str | None, run_id: str, attempt: int, now_ms: int, mono_s: float) -> Beat:
        """A worker's heartbeat: extends the lease in memory to `lease_s`
        from now (monotonic), never past the attempt's timeout; answers the
        expiry as an instant of scheduler time (UNIX ms) and whether the
        worker is to stop (docs/api.md "Heartbeats"). A run asked to stop
        keeps its expiry (`requested`). An attempt its timeout ended
        answers no expiry and `timeout` until a later attempt is claimed;
        one a cancel ended, no expiry and `requested`."""
        parsed = ids.parse_run_id(run_id)
        job = None if parsed is None else self.reader.get_job_any(parsed[0])
        if parsed is None or job is None or (owner is not None and job.owner != owner):
            raise errors.NotFound(f"no run {run_id}")
        lease = self.leases.get(parsed)
        if lease is None and self.expiring.get(parsed) == attempt:
            if parsed in self.timing_out:
                return None, "timeout"
            raise errors.StaleAttempt(f"attempt {attempt} of run {run_id} no longer holds it")
        if lease is None or lease.attempt != attempt:
            run = self.reader.get_run_any(*parsed)
            if run is None:
                raise errors.NotFound(f"no run {run_id}")
            ended = _ended_by(run) if lease is None and run.attempt == attempt else None
            if ended is not None:
                return None, ended
            if lease is not None or run.status != "claimed" or run.attempt != attempt:
                raise errors.StaleAttempt(f"attempt {attempt} of run {run_id} no longer holds it")
            # Claimed, but its minute is not loaded yet (a restart with a
            # backlog): it gets the full lease a loaded run would get.
            self._grant_claimed(run, job, now_ms, mono_s)
            lease = self.leases[parsed]
        return self._extend(parsed, lease, now_ms, mono_s)

    def _extend(self, slot: tuple[str, int], lease: Lease, now_ms: int, mono_s: float) -> Beat:
        """`beat` of a lease held at the attempt named: moved on to
        `lease_s` from `mono_s`, unless its run was asked to stop or its
        timeout has passed."""
        if lease.cancel_requested:
            return _expiry_ms(lease, lease.deadline_s, now_ms, mono_s), "requested"
        if lease.timeout_deadline_s is not None and lease.timeout_deadline_s <= mono_s:
            # Its timeout has passed: the attempt has ended, though the lease
            # check may not have committed that yet (docs/semantics.md "Run
            # timeouts").
            return None, "timeout"
        deadline_s = mono_s + lease.lease_s
        if lease.timeout_deadline_s is not None and lease.timeout_deadline_s < deadline_s:
            deadline_s = lease.timeout_deadline_s
        self._move_deadline(slot, lease, deadline_s)
        return _expiry_ms(lease, deadline_s, now_ms, mono_s), None

    def stop_of(self, owner: str | None, run_id: str, attempt: int, mono_s: float) -> RunCancel | None:
        """Whether the worker holding `attempt` of `run_id` is to stop, and
        why, as its heartbeat would answer, without extending its lease (a
        worker's signals, docs/api.md "Signals"). None for a run that goes
        on, and for one that is not this owner's, unknown or stale (its
        heartbeats say so)."""
        parsed = ids.parse_run_id(run_id)
        if parsed is None:
            return None
        lease = self.leases.get(parsed)
        if lease is not None:
            if lease.attempt != attempt or (owner is not None and lease.owner != owner):
                return None
            if lease.cancel_requested:
                return "requested"
            timeout_s = lease.timeout_deadline_s
            return "timeout" if timeout_s is not None and timeout_s <= mono_s else None
        if self.expiring.get(parsed) == attempt and parsed in self.timing_out:
            return "timeout"
        job = self.reader.get_job_any(parsed[0])
        if job is None or (owner is not None and job.owner != owner):
            return None
        run = self.reader.get_run_any(*parsed)
        if run is None or run.attempt != attempt:
            return None
        return _ended_by(run)

    def next_expiry_s(self) -> float | None:
        """The earliest instant (monotonic) at which a lease or a timeout
        may run out, for the lease check to wake at; None with no lease.
        An entry may be stale (its lease moved on or ended): waking for it
        costs one look."""
        heap = self._lease_heap
        return heap[0][0] if heap else None

    def release(self, claimed: list[ClaimedRun], mono_s: float) -> None:
        """Claimed runs whose answer never reached their worker: each lease
        ends at `mono_s`, so the lease check (`expire`) sends the runs back
        to waiting, due at once, by the command of any expired lease (the
        attempt counts, as an expired one does)."""
        for one in claimed:
            run = one.run
            lease = self.leases.get((run.job_id, run.nominal_ms))
            if lease is None or lease.attempt != run.attempt:
                continue  # finished, expired, or this node stopped leading
            self._move_deadline((run.job_id, run.nominal_ms), lease, mono_s)
            self.counters["undelivered"] += 1

    def lease_of(self, job_id: str, nominal_ms: int, attempt: int, now_ms: int, mono_s: float) -> int | None:
        """When the lease runs out, as an instant of scheduler time (UNIX ms)."""
        lease = self.leases.get((job_id, nominal_ms))
        if lease is None or lease.attempt != attempt:
            return None
        return _expiry_ms(lease, lease.deadline_s, now_ms, mono_s)

    def check_leases(self) -> None:
        """Asserts the invariants of the leases and the lease heap (for
        tests and the simulator: it walks them all)."""
        assert self.in_flight == Counter(lease.owner for lease in self.leases.values()), "in_flight counts leases"
        heap = self._lease_heap
        assert len(heap) <= 2 * len(self.leases) + limits.lease_heap_slack_entries, "the lease heap is bounded"
        live = Counter(entry for _, entry, job_id, nominal_ms in heap
                       if (lease := self.leases.get((job_id, nominal_ms))) is not None and lease.entry == entry)
        assert len(live) == len(self.leases) and all(n == 1 for n in live.values()), "one live entry per lease"
        for at_s, entry, job_id, nominal_ms in heap:
            lease = self.leases.get((job_id, nominal_ms))
            if lease is not None and lease.entry == entry:
                assert at_s == lease.entry_s <= lease.deadline_s, "a live entry comes up at or before its deadline"
        for key, attempt in self.expiring.items():
            lease = self.leases.get(key)
            assert lease is None or lease.attempt != attempt, "an attempt being expired has no lease"
        assert self.timing_out <= self.expiring.keys(), "a timeout being committed is an expiry being committed"
        for lease in self.leases.values():
            timeout_s = lease.timeout_deadline_s
            assert timeout_s is None or lease.deadline_s <= timeout_s, "a lease never outlives its timeout"

    @property
    def lease_heap_entries(self) -> int:
        """Entries in the lease heap, stale ones included."""
        return len(self._lease_heap)


def claimed_lease_s(run: Run, job: Job) -> int:
    """The lease length a claimed run was claimed with: its claim stamped
    the start and the expiry from the job's `lease_s` of the moment, which
    a patch may have changed since (docs/semantics.md "Changing a job")."""
    if run.started_ms is not None and run.lease_expires_ms is not None:
        lease_ms = run.lease_expires_ms - run.started_ms
        if lease_ms >= 1000:
            return lease_ms // 1000
    return job.lease_s


def _expiry_ms(lease: Lease, deadline_s: float, now_ms: int, mono_s: float) -> int:
    """A lease's expiry at the monotonic `deadline_s`, as an instant of
    scheduler time (UNIX ms), never past the attempt's `timeout_at`."""
    expires_ms = now_ms + round(max(0.0, deadline_s - mono_s) * 1000)
    timeout_at_ms = lease.timeout_at_ms
    return expires_ms if timeout_at_ms is None or expires_ms < timeout_at_ms else timeout_at_ms


def _due_of(runs_key: bytes) -> int:
    return keys.due_of(runs_key)


def _ended_by(run: Run) -> RunCancel | None:
    """What ended a run's current attempt when it was told to stop: its
    timeout, or a cancel asked of it; None for any other end (a heartbeat
    for it is stale)."""
    if run.status == "claimed":
        return None
    if run.cancel == "timeout":
        return "timeout"
    if run.status == "cancelled" and run.cancel == "requested":
        return "requested"
    return None
