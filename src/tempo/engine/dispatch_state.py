"""What the dispatcher's core keeps, and the types it hands out: the
ready queues' keys, the lease, the proposals, and `CoreState`, whose
`reset` sets up the soft state every part of the core works on
(engine/dispatch_core.py says what each call does, and the invariants).
Pure, as the core is: no clock, no I/O.
"""

import heapq
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from tempo import limits
from tempo.calendars import View
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine import keys
from tempo.engine.commands import ClaimRuns, OverlapRuns
from tempo.engine.records import CalendarUse, DepState, Job, Run, RunCancel
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

    def deps_state(self, job_id: str) -> DepState | None: ...


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
    # The run's due time (UNIX ms): a run claimed ahead of it (pre-dispatch,
    # docs/semantics.md "Pre-dispatch") is asked to start no earlier.
    due_ms: int = 0
    # The instant of scheduler time (UNIX ms; 0: none) the lease was granted
    # or last extended to: `lease_s` from the claim, heartbeat or takeover,
    # or from the due time when later. Shown for `deadline_s` when reading
    # that back on the clocks now gives it within a rounding (the node reads
    # scheduler time in whole ms, apart from the monotonic clock), so that
    # `lease_expires_at` is `due_at + lease_s` to the ms; a clock step since
    # shows as it is (`dispatch_leases._expiry_ms`).
    expires_ms: int = 0
    # The worker whose claim granted the lease, who waits for the run's
    # result (engine/claim_backlog.py); "" for a lease the loader gave (a
    # restart, a new leader) or one given back after an unwritten expiry.
    worker: str = ""


class ClaimedRun(msgspec.Struct, gc=False):
    """A run a claim handed out, with its job: 1,000 in a claim, untracked
    by the cycle collector as the records they hold are (records.py), so
    that a claim sets off no collection of its own."""

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
    fed_at: int = 0  # `DispatchCore.fed_count` when it was proposed


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



class CoreState:
    """The core's soft state (`reset`) and its wake-ups; the parts of the
    core (engine/dispatch_leases.py, dispatch_loader.py, dispatch_claims.py
    and dispatch_core.py) are methods over it."""

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
        # Per `POST /v1/starts` waiting for its stop point: the slots whose
        # lease was put, dropped or asked to stop since it answered first
        # (`Leases.watch_leases`). Kept through `reset`: the call ends with
        # `NotLeader` then, and takes its set away itself.
        self.lease_watches: dict[int, set[tuple[str, int]]] = {}
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
        # A claim's entry may hold later commands about its runs (a group
        # commit): the entry's changes are fed whole before the claim is
        # answered (`claimed`), so a run those commands ended, or asked to
        # stop, had no lease yet. Kept while a claim is being committed:
        # such runs, (job ID, nominal ms) -> `fed_count` then. `claimed`
        # reads those fed after its proposal again. Each is dropped once
        # no claim in flight was proposed before it was fed
        # (`proposed_at`: the claims in flight, by their `fed_at`).
        self.fed_count = 0  # `feed` calls
        self.ended_unleased: dict[tuple[str, int], int] = {}
        self.stopped_unleased: dict[tuple[str, int], int] = {}
        self.proposed_at: Counter[int] = Counter()
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
        # Pre-dispatch (docs/semantics.md "Pre-dispatch"): a heap of (due
        # ms, runs key) of the runs in the wheel that a claim may take
        # ahead of their due time (not http, no overlap policy); and per
        # queue, earliest due first, those of them due within
        # `limits.claim_ahead_ms_max` of the last tick (`tick_ahead`). An
        # entry whose run left the wheel (fell due, claimed, moved, gone)
        # is a tombstone, dropped when met.
        self.ahead_heap: list[tuple[int, bytes]] = []
        self.ahead: dict[str, AheadQueue] = {}
        self.ahead_swept_ms = now_ms

    def note_ahead(self, runs_key: bytes, due_ms: int, job: Job) -> None:
        """A run put in the wheel: one a claim may take ahead of its due
        time is noted for `tick_ahead`. The heap is rebuilt without its
        tombstones when they outnumber the wheel's runs."""
        if job.overlap is not None or is_http(queue_key(job)):
            return  # an overlap policy is decided at the due time; the executor claims on time
        heapq.heappush(self.ahead_heap, (due_ms, runs_key))
        if len(self.ahead_heap) > 2 * len(self.wheel) + limits.lease_heap_slack_entries:
            self.ahead_heap = [(due, key) for due, key in self.ahead_heap if key in self.wheel]
            heapq.heapify(self.ahead_heap)

    def tick_ahead(self, now_ms: int) -> None:
        """Runs due within `limits.claim_ahead_ms_max` of `now_ms` into the
        ahead queue of their queue; and, every `limits.lease_check_ms`,
        the heads that fell due meanwhile (ready runs now) out of them."""
        heap, wheel, queue_of = self.ahead_heap, self.wheel, self.queue_of
        horizon_ms = now_ms + limits.claim_ahead_ms_max
        while heap and heap[0][0] <= horizon_ms:
            due = heapq.heappop(heap)
            entry = queue_of.get(due[1])
            if entry is not None and due[1] in wheel:
                waiting = self.ahead.get(entry[0])
                if waiting is None:
                    waiting = self.ahead[entry[0]] = AheadQueue()
                waiting.add(due)
        if now_ms - self.ahead_swept_ms < limits.lease_check_ms:
            return
        self.ahead_swept_ms = now_ms
        for queue in list(self.ahead):
            waiting = self.ahead[queue]
            waiting.drop_due(now_ms)
            while (head := waiting.head()) is not None and head[1] not in wheel:
                waiting.pop()
            if waiting.head() is None:
                del self.ahead[queue]

    def ahead_head(self, queue: str, until_ms: int) -> bytes | None:
        """The earliest run of `queue` a claim may take ahead, if it is due
        by `until_ms`; tombstones before it are dropped."""
        waiting = self.ahead.get(queue)
        while waiting is not None and (head := waiting.head()) is not None:
            due_ms, runs_key = head
            entry = self.queue_of.get(runs_key)
            if entry is None or entry[0] != queue or runs_key not in self.wheel:
                waiting.pop()
                continue
            return runs_key if due_ms <= until_ms else None
        return None


    def _wake_owner(self, owner: str) -> None:
        """Room freed for an owner a limit held back: its waiting claimers
        (and the executor's) look again (`take_wakeups`)."""
        self.held.discard(owner)
        self._wakeups.owners.add(owner)



class AheadQueue:
    """One queue's runs within the pre-dispatch horizon (`CoreState.ahead`),
    earliest due first. They come within it in due order as time passes,
    so a deque holds them at O(1) a run. A run made later (a new job, a
    trigger, a retry) may come within it due before the last one there:
    such runs wait in a heap beside the deque, and the earlier of the two
    heads is the head."""

    __slots__ = ("in_order", "late")

    def __init__(self) -> None:
        self.in_order: deque[tuple[int, bytes]] = deque()
        self.late: list[tuple[int, bytes]] = []

    def add(self, due: tuple[int, bytes]) -> None:
        """A (due ms, runs key) come within the horizon. Runs due at one
        instant go in the deque in the order they come, whatever their
        keys: a spike's 25,000 went to the heap, at a heap push and pop each."""
        if self.in_order and self.in_order[-1][0] > due[0]:
            heapq.heappush(self.late, due)
        else:
            self.in_order.append(due)

    def head(self) -> tuple[int, bytes] | None:
        if not self.late:
            return self.in_order[0] if self.in_order else None
        if self.in_order and self.in_order[0] < self.late[0]:
            return self.in_order[0]
        return self.late[0]

    def drop_due(self, now_ms: int) -> None:
        """Drops the runs due by `now_ms`: ready runs now (or gone). A spike's
        25,000 went one heap pop and two method calls each: 37-53 ms of the
        trio thread's CPU in one tick (docs/performance.md "Two kinds of
        workers")."""
        in_order, late = self.in_order, self.late
        if in_order and in_order[-1][0] <= now_ms:
            in_order.clear()
        while in_order and in_order[0][0] <= now_ms:
            in_order.popleft()
        if late and late[0][0] <= now_ms:
            self.late = [due for due in late if due[0] > now_ms]
            heapq.heapify(self.late)

    def pop(self) -> None:
        """Drops the head."""
        if self.late and (not self.in_order or self.late[0] < self.in_order[0]):
            heapq.heappop(self.late)
        else:
            self.in_order.popleft()


def _due_of(runs_key: bytes) -> int:
    return keys.due_of(runs_key)


