"""Dispatch on the leader: loader → timing wheel → ready queues → claims,
and the lease tracker (DESIGN.md "Dispatch on the leader").

Everything here is soft state, rebuilt from the runs table when a node starts
(or, in a cluster, becomes leader): the wheel holds only the runs due within
the read-ahead window, ready queues hold runs that are due, and leases are
extended in memory by heartbeats, never written per heartbeat. Every change of
state goes through a command, so the tables stay the truth.
"""

import bisect
import heapq
import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import trio

from tempo import clock, errors, ids, limits
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine import keys
from tempo.engine.commandlog import CommandLog
from tempo.engine.commands import Claim, ClaimRuns, ExpireLeases, Expiry, ReportResults, Result
from tempo.engine.jobs import next_slot_after_claim
from tempo.engine.records import Job, Run
from tempo.engine.store import Changes, Store
from tempo.rate import TokenBucket
from tempo.wheel import TimingWheel

# The queue of an owner's runs whose target is an http(s) URL: its ready queue
# is `owner\0\0http`, since no owner's queue can be named so (NUL). The
# built-in executor claims `[HTTP_QUEUE]`, which stands for every owner's
# http queue, served round-robin (docs/operations.md "Fairness between owners").
HTTP_QUEUE = "\x00http"
# Claim lateness buckets, in seconds (Prometheus histogram `le` bounds).
LATENESS_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 60.0)
log = logging.getLogger("tempo.dispatch")


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


class Lease(msgspec.Struct, gc=False):
    """A claimed run's lease, one per run in flight (100,000 in a big spike):
    untracked by the cycle collector, like the records (records.py), since
    it holds only numbers and a string. A duration: it runs out at a
    monotonic instant (`trio.current_time()`), so no wall-clock step
    lengthens or shortens it (clock.py)."""

    attempt: int
    deadline_s: float
    lease_s: int
    owner: str


@dataclass(slots=True)
class ClaimedRun:
    run: Run
    job: Job


class Dispatcher:
    def __init__(
        self,
        store: Store,
        committer: CommandLog,
        *,
        readahead_ms: int = limits.readahead_ms,
        now_ms: Callable[[], int] | None = None,
        limits_of: Callable[[str], OwnerLimits] = lambda owner: UNLIMITED,
    ):
        self.store = store
        self.committer = committer
        self.readahead_ms = readahead_ms
        # Scheduler time (the node's `clock.Clock`, which never goes
        # backwards): the stamps of commands and the `now` of due times.
        # Leases, waits and claim rates run on `trio.current_time()`.
        # Injectable so tests can drive due times with a mock clock.
        self.now_ms = now_ms or clock.Clock().now_ms
        # Each owner's runs in flight and claim rate (config.py); soft state
        # of the leader like the leases they count, never replicated.
        self.limits_of = limits_of
        self.generation = 0
        self.events_changed = trio.Event()
        self.counters: Counter[str] = Counter()
        self.lateness_buckets = [0] * (len(LATENESS_BUCKETS_S) + 1)
        self.lateness_sum_s = 0.0
        self._ready_events: dict[str, trio.Event] = {}
        self.reset()
        committer.listeners.append(self.on_changes)

    def reset(self) -> None:
        """Forgets all soft state (a leader that stopped leading); the next
        `run` loads it again from the tables. Claims waiting on this node
        wake up and fail with `NotLeader`."""
        self.generation += 1
        self.wheel = TimingWheel(self.now_ms(), tick_ms=limits.dispatch_tick_ms)
        # Runs keys in the wheel or a ready queue, with their queue and job. A
        # key in a deque but not here (or here under another queue) is a
        # tombstone. The job is as it was when the run was loaded: enough for
        # a one-off, re-read for a repeating job, whose slot moves.
        self.queue_of: dict[bytes, tuple[str, Job]] = {}
        self.ready: dict[str, deque[bytes]] = {}
        self.leases: dict[tuple[str, int], Lease] = {}
        # (deadline_s, job ID, nominal ms, attempt); stale entries are skipped.
        self._lease_heap: list[tuple[float, str, int, int]] = []
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
        for event in self._ready_events.values():
            event.set()
        self._ready_events = {}

    # -- memory from the tables ----------------------------------------------

    def load(self, now_ms: int) -> None:
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
        rows = 0
        while self.loaded_until_ms < until_ms and rows < limits.loader_rows_per_step:
            if self._memory_full():
                break
            lo_ms = self.loaded_until_ms
            self._skip_full(lo_ms)
            minutes = self.store.open_minutes(keys.minute_of(lo_ms), keys.minute_of(until_ms), 1)
            if not minutes:
                self.loaded_until_ms = until_ms
                break
            found = self.store.scan_minute(minutes[0], lo_ms, until_ms)
            skipped = self.skipped
            for runs_key, run, job in found:
                if skipped and run.status == "waiting" and job.owner in skipped:
                    continue  # waits in the table, after its skip point
                self._remember(runs_key, run, job, now_ms)
            rows += len(found) + 1
            self.loaded_until_ms = min(until_ms, (minutes[0] + 1) * limits.minute_ms)
        if self.loaded_until_ms < until_ms and rows < limits.loader_rows_per_step and self._memory_full():
            rows += self._lease_ahead(until_ms, limits.loader_rows_per_step - rows)
        if self.rereads:
            self._reread(rows)

    def _lease_ahead(self, until_ms: int, rows_max: int) -> int:
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
            minutes = self.store.open_minutes(keys.minute_of(lo_ms), keys.minute_of(until_ms), 1)
            if not minutes:
                lo_ms = until_ms
                break
            found = self.store.scan_minute(minutes[0], lo_ms, until_ms)
            now_s = trio.current_time()
            for _, run, job in found:
                if run.status == "claimed" and (run.job_id, run.nominal_ms) not in self.leases:
                    self._grant(job.owner, run.job_id, run.nominal_ms, run.attempt, now_s + job.lease_s, job.lease_s)
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
            minutes = self.store.open_minutes(keys.minute_of(skip_ms), keys.minute_of(hi_ms - 1) + 1, 1)
            if not minutes:
                skip_ms = hi_ms
                break
            end_ms = min(hi_ms, (minutes[0] + 1) * limits.minute_ms)
            found = self.store.scan_minute(minutes[0], skip_ms, end_ms)
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

    def _remember(self, runs_key: bytes, run: Run, job: Job, now_ms: int) -> None:
        if run.status == "waiting":
            if runs_key not in self.queue_of:
                self.queue_of[runs_key] = (queue_key(job), job)
                self.loaded_of[job.owner] += 1
                self.wheel.add(runs_key, run.due_ms)
        elif run.status == "claimed" and (run.job_id, run.nominal_ms) not in self.leases:
            # A node that (re)starts or takes over gives every claimed run a
            # full lease from this moment, on the monotonic clock, whatever
            # the stored expiry says: a restart, a failover or a clock step
            # never expires a healthy worker's run.
            deadline_s = trio.current_time() + job.lease_s
            self._grant(job.owner, run.job_id, run.nominal_ms, run.attempt, deadline_s, job.lease_s)

    async def on_changes(self, changes: Changes) -> None:
        """Takes an entry's changes into memory (and drops the leases of the
        runs that finished), `limits.dispatch_slice_runs` runs at a time
        with a checkpoint between slices (a batch of 1,000 creates or claims
        is one step of 10-15 ms otherwise). Other tasks
        run between slices, but no other entry is applied until this
        returns (the commit loop awaits it), and no request of this entry
        is answered before. Each slice is checked against memory as it is
        then: a run the loader read meanwhile is remembered once, and a run
        a claim took meanwhile that comes back in is dropped again by that
        claim's own `left`."""
        slice_runs = limits.dispatch_slice_runs
        left, woken, gone = changes.left, changes.woken, changes.gone
        woken_at, gone_at = len(left), len(left) + len(woken)  # where each list starts in the whole
        for start in range(0, gone_at + len(gone), slice_runs):
            if start:
                await trio.lowlevel.checkpoint()
            end = start + slice_runs
            for runs_key in left[start:end]:
                entry = self.queue_of.pop(runs_key, None)
                if entry is not None:
                    self.wheel.cancel(runs_key)
                    self._unloaded(entry[1].owner)
            for runs_key, run, job in woken[max(0, start - woken_at) : max(0, end - woken_at)]:
                if run.due_ms < self.loaded_until_ms and runs_key not in self.queue_of:
                    job = job or self.store.get_job_any(run.job_id)
                    assert job is not None
                    self._admit(runs_key, run.due_ms, job)
            for runs_key in gone[max(0, start - gone_at) : max(0, end - gone_at)]:
                self._drop_lease(keys.slot_of(runs_key))
        if changes.event_owners:
            self.events_changed.set()
            self.events_changed = trio.Event()

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
            skip_ms = self.skipped.get(job.owner)
            if skip_ms is not None and runs_key in self.wheel:
                assert _due_of(runs_key) <= skip_ms, f"a run of {job.owner} after its skip point"
        minutes = self.store.open_minutes(0, keys.minute_of(self.loaded_until_ms - 1) + 1, 1 << 30)
        for minute in minutes:
            for runs_key, run, job in self.store.scan_minute(minute, 0, self.loaded_until_ms):
                skip_ms = self.skipped.get(job.owner)
                if run.status == "waiting" and (skip_ms is None or run.due_ms < skip_ms):
                    assert runs_key in self.queue_of, f"a waiting run of {job.owner} not in memory"

    # -- the clock side --------------------------------------------------------

    def tick(self, now_ms: int) -> bool:
        """Moves the runs that fell due to the ready queue of their queue,
        in due order, at most `limits.dispatch_slice_runs` of them (and as
        much of the wheel's work): answers whether more are left, for a
        tick at once after a checkpoint (`run`), so a spike's slot does not
        hold the event loop in one step."""
        if now_ms + self.readahead_ms >= self.loaded_until_ms:
            self.load(now_ms)
        elif self.rereads:
            self._reread(0)
        woken: set[str] = set()
        for runs_key in self.wheel.advance(now_ms, limits.dispatch_slice_runs):
            entry = self.queue_of.get(runs_key)
            if entry is None:
                continue
            queue = entry[0]
            self.ready.setdefault(queue, deque()).append(runs_key)
            self.counters["due"] += 1
            if is_http(queue):
                self.http_ready[queue] = None
                woken.add(HTTP_QUEUE)
            else:
                woken.add(queue)
        for queue in woken:
            event = self._ready_events.pop(queue, None)
            if event is not None:
                event.set()
        return self.wheel.behind

    def expired(self, now_s: float) -> list[Expiry]:
        """Leases run out by `now_s` (monotonic), at most a command's worth."""
        found: list[Expiry] = []
        heap = self._lease_heap
        while heap and heap[0][0] <= now_s and len(found) < limits.expiries_per_command_max:
            deadline_s, job_id, nominal_ms, attempt = heapq.heappop(heap)
            lease = self.leases.get((job_id, nominal_ms))
            if lease is None or lease.attempt != attempt or lease.deadline_s != deadline_s:
                continue  # extended, re-claimed or finished since
            self._drop_lease((job_id, nominal_ms))
            found.append(Expiry(job_id, nominal_ms, attempt))
        return found

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.reset()
        self.load(self.now_ms())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._expire_loop)
            task_status.started()
            while True:
                if self.tick(self.now_ms()):
                    await trio.lowlevel.checkpoint()
                else:
                    await trio.sleep(limits.dispatch_tick_ms / 1000)

    async def _expire_loop(self) -> None:
        while True:
            await trio.sleep(limits.lease_check_ms / 1000)
            now_s = trio.current_time()
            expiries = self.expired(now_s)
            if not expiries:
                continue
            try:
                outcomes = await self.committer.submit(ExpireLeases(self.now_ms(), expiries))
            except errors.Overloaded:
                # Not written: the leases stay expired in memory, and the next
                # round tries again.
                for expiry in expiries:
                    job = self.store.get_job_any(expiry.job_id)
                    if job is not None:
                        self._grant(job.owner, expiry.job_id, expiry.nominal_ms, expiry.attempt, now_s, 0)
                continue
            self.counters["expired"] += sum(1 for o in outcomes if o is not None)  # type: ignore[union-attr]
            log_failed_attempts(outcomes)  # type: ignore[arg-type]

    # -- claims ------------------------------------------------------------------

    def _budget(self, owner: str, mono_ms: int, runs_max: int) -> tuple[int, int | None]:
        """How many runs the owner's limits let a claim take now (at most
        `runs_max`); and when its claim rate is what stops it, the ms until
        the bucket holds a token again. A rate is a duration: `mono_ms` is
        monotonic (`_monotonic_ms`)."""
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

    def _take(self, queues: list[str], runs_max: int) -> tuple[list[tuple[bytes, Job]], int | None]:
        """Up to `runs_max` ready runs of these queues, oldest due first, as
        far as each owner's limits allow (runs beyond stay in their queue, in
        order); and, when a claim rate held runs back, the ms until it lets
        one more go."""
        mono_ms = _monotonic_ms()
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
        return taken, refill_ms

    def _take_http(self, runs_max: int) -> tuple[list[tuple[bytes, Job]], int | None]:
        """Up to `runs_max` ready runs with http(s) targets, one owner's run
        after another's (round-robin, the owner served least recently first),
        so one owner's backlog does not queue ahead of another's runs; each
        owner's runs in due order, as far as its limits allow."""
        mono_ms = _monotonic_ms()
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
        return taken, refill_ms

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

    def held_back(self) -> dict[str, int]:
        """Per owner, the runs due but not claimed because one of the owner's
        limits is reached now (tombstones aside)."""
        mono_ms = _monotonic_ms()
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

    async def claim(
        self, queues: list[str], worker: str, runs_max: int, wait_s: float
    ) -> list[ClaimedRun]:
        """Claims up to `runs_max` due runs of `queues` (`[HTTP_QUEUE]`: every
        owner's http queue), waiting up to `wait_s` for one: for a run to fall
        due, or for room under its owner's limits.

        Cancelling it is safe: cancelled while it waits, it has taken
        nothing; once it has taken runs, their commit finishes (shielded: a
        waiter of the committer is answered when its batch commits or the
        node stops leading) and it returns them, claimed. A caller whose
        client has gone meanwhile hands them to `release`."""
        deadline_s = trio.current_time() + wait_s
        generation = self.generation
        while True:
            if generation != self.generation:
                raise errors.NotLeader("this node stopped leading; claim from the new leader")
            if queues == [HTTP_QUEUE]:
                taken, refill_ms = self._take_http(runs_max)
            else:
                taken, refill_ms = self._take(queues, runs_max)
            if taken:
                with trio.CancelScope(shield=True):
                    claimed = await self._commit_claims(worker, taken)
                if claimed:
                    return claimed
                continue
            now_s = trio.current_time()
            if now_s >= deadline_s:
                return []
            # Room that frees wakes the wait; tokens that refill do not, so a
            # claim held back by a claim rate looks again when one is due.
            wake_s = deadline_s if refill_ms is None else min(deadline_s, now_s + refill_ms / 1000)
            with trio.move_on_at(wake_s):
                await self._wait_ready(queues)

    async def _wait_ready(self, queues: list[str]) -> None:
        event = trio.Event()
        for queue in queues:
            # One event per queue, shared by its waiters; chain ours to it.
            self._ready_events.setdefault(queue, trio.Event())
        async with trio.open_nursery() as nursery:
            for queue in queues:
                nursery.start_soon(_wait_then_set, self._ready_events[queue], event)
            await event.wait()
            nursery.cancel_scope.cancel()

    def _wake_owner(self, owner: str) -> None:
        """Room freed for an owner a limit held back: its waiting claimers
        (and the executor's) look again."""
        self.held.discard(owner)
        prefix = f"{owner}\x00"
        for queue in [q for q in self._ready_events if q == HTTP_QUEUE or q.startswith(prefix)]:
            self._ready_events.pop(queue).set()

    async def _commit_claims(self, worker: str, taken: list[tuple[bytes, Job]]) -> list[ClaimedRun]:
        claiming = self.claiming  # a reset while this commits starts a new count
        generation = self.generation
        try:
            return await self._commit_taken(worker, taken)
        except errors.Overloaded:
            # Not written (a full disk, too many writes): the runs are still
            # waiting in the tables, and go back to the head of their queues.
            if generation == self.generation:
                self._give_back(taken)
            raise
        finally:
            for owner, count in Counter(job.owner for _, job in taken).items():
                claiming[owner] -= count
                if claiming[owner] <= 0:
                    assert claiming[owner] == 0, "claiming"
                    del claiming[owner]
                if claiming is self.claiming and owner in self.held:
                    self._wake_owner(owner)

    def _give_back(self, taken: list[tuple[bytes, Job]]) -> None:
        """Taken runs whose claim was not written, back where `_pop` took
        them from, in their order (unless the change feed has them again)."""
        for runs_key, job in reversed(taken):
            if runs_key in self.queue_of:
                continue
            queue = queue_key(job)
            self.queue_of[runs_key] = (queue, job)
            self.loaded_of[job.owner] += 1
            self.ready.setdefault(queue, deque()).appendleft(runs_key)
            if is_http(queue):
                self.http_ready[queue] = None

    async def _commit_taken(self, worker: str, taken: list[tuple[bytes, Job]]) -> list[ClaimedRun]:
        at_ms = self.now_ms()
        # Leases count from the claim's stamp, on the monotonic clock; the
        # wall-clock expiry in the command is what the run shows.
        at_s = trio.current_time()
        jobs: dict[str, Job] = {}
        claims: list[Claim] = []
        for runs_key, loaded_job in taken:
            # The job a run was remembered with is its own (`queue_of`), so
            # its ID is the one in the runs key.
            job_id = loaded_job.id
            nominal_ms = keys.nominal_of(runs_key)
            job = jobs.get(job_id)
            if job is None:
                job = self.store.get_job_any(job_id) if loaded_job.schedule.repeating else loaded_job
                if job is None:
                    continue
                jobs[job_id] = job
            if not job.schedule.repeating:
                claims.append(Claim(job_id, nominal_ms, at_ms + job.lease_s * 1000, one_off=True))
                continue
            claim = Claim(job_id, nominal_ms, at_ms + job.lease_s * 1000)
            if job.state == "active" and job.slot_ms == nominal_ms:
                nxt = next_slot_after_claim(job, nominal_ms, at_ms)
                if nxt is not None:
                    claim.next_slot_ms, claim.next_due_ms = nxt
                    job.slot_ms = nxt[0]  # a later run of this batch is not the slot run
            claims.append(claim)
        if not claims:
            return []
        outcomes = await self.committer.submit(ClaimRuns(at_ms, worker, claims))
        claimed: list[ClaimedRun] = []
        lateness_s: list[float] = []
        for claim, run in zip(claims, outcomes, strict=True):  # type: ignore[arg-type]
            if run is None:
                continue
            job = jobs[claim.job_id]
            self._grant(job.owner, run.job_id, run.nominal_ms, run.attempt, at_s + job.lease_s, job.lease_s)
            lateness_s.append((at_ms - run.due_ms) / 1000)
            claimed.append(ClaimedRun(run, job))
        self._observe_lateness(lateness_s)
        self.counters["claimed"] += len(claimed)
        return claimed

    def _observe_lateness(self, lateness_s: list[float]) -> None:
        """Counts claim lateness into the histogram: bucket i holds
        lateness ≤ LATENESS_BUCKETS_S[i] (the last, anything above)."""
        buckets = self.lateness_buckets
        for late_s in lateness_s:
            late_s = max(late_s, 0.0)
            self.lateness_sum_s += late_s
            buckets[bisect.bisect_left(LATENESS_BUCKETS_S, late_s)] += 1

    # -- leases ------------------------------------------------------------------

    def _grant(self, owner: str, job_id: str, nominal_ms: int, attempt: int, deadline_s: float, lease_s: int) -> None:
        self._put_lease((job_id, nominal_ms), Lease(attempt, deadline_s, lease_s, owner))
        heapq.heappush(self._lease_heap, (deadline_s, job_id, nominal_ms, attempt))

    def _put_lease(self, key: tuple[str, int], lease: Lease) -> None:
        """Every lease is a run of its owner in flight."""
        old = self.leases.get(key)
        self.leases[key] = lease
        if old is None:
            self.in_flight[lease.owner] += 1
        else:
            assert old.owner == lease.owner, "a run's owner never changes"

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

    def heartbeat(self, owner: str | None, run_id: str, attempt: int) -> int:
        """Extends a lease in memory to `lease_s` from now (monotonic); answers
        the new expiry as an instant of scheduler time (UNIX ms)."""
        parsed = ids.parse_run_id(run_id)
        job = None if parsed is None else self.store.get_job_any(parsed[0])
        if parsed is None or job is None or (owner is not None and job.owner != owner):
            raise errors.NotFound(f"no run {run_id}")
        lease = self.leases.get(parsed)
        if lease is None or lease.attempt != attempt:
            run = self.store.get_run_any(*parsed)
            if run is None:
                raise errors.NotFound(f"no run {run_id}")
            if lease is not None or run.status != "claimed" or run.attempt != attempt:
                raise errors.StaleAttempt(f"attempt {attempt} of run {run_id} no longer holds it")
            # Claimed, but its minute is not loaded yet (a restart with a
            # backlog): it gets the full lease a loaded run would get.
            lease = Lease(attempt, 0.0, job.lease_s, job.owner)
            self._put_lease(parsed, lease)
        lease.deadline_s = trio.current_time() + lease.lease_s
        heapq.heappush(self._lease_heap, (lease.deadline_s, parsed[0], parsed[1], attempt))
        return self.now_ms() + lease.lease_s * 1000

    def release(self, claimed: list[ClaimedRun]) -> None:
        """Claimed runs whose answer never reached their worker: each lease
        ends now, so the lease check (`_expire_loop`) sends the runs back to
        waiting, due at once, within `limits.lease_check_ms`, by the command
        of any expired lease (the attempt counts, as an expired one does)."""
        now_s = trio.current_time()
        for one in claimed:
            run = one.run
            lease = self.leases.get((run.job_id, run.nominal_ms))
            if lease is None or lease.attempt != run.attempt:
                continue  # finished, expired, or this node stopped leading
            lease.deadline_s = now_s
            heapq.heappush(self._lease_heap, (now_s, run.job_id, run.nominal_ms, run.attempt))
            self.counters["undelivered"] += 1

    def lease_of(self, job_id: str, nominal_ms: int, attempt: int) -> int | None:
        """When the lease runs out, as an instant of scheduler time (UNIX ms)."""
        lease = self.leases.get((job_id, nominal_ms))
        if lease is None or lease.attempt != attempt:
            return None
        left_s = max(0.0, lease.deadline_s - trio.current_time())
        return self.now_ms() + round(left_s * 1000)

    async def report(self, owner: str | None, results: list[Result]) -> list[Run | errors.TempoError]:
        outcomes = await self.committer.submit(ReportResults(self.now_ms(), owner, results))
        for outcome in outcomes:  # type: ignore[union-attr]
            if isinstance(outcome, Run):
                self.counters[outcome.status] += 1
        log_failed_attempts(outcomes)  # type: ignore[arg-type]
        return outcomes  # type: ignore[return-value]


def log_failed_attempts(outcomes: list) -> None:
    """One line per attempt that just failed or lost its lease, with the run's
    and job's IDs as fields (`extra`), at most `limits.run_log_lines_max`."""
    ended = [o for o in outcomes if isinstance(o, Run) and o.status in ("waiting", "failed")]
    for run in ended[: limits.run_log_lines_max]:
        run_id = ids.run_id(run.job_id, run.nominal_ms)
        fields = {"job_id": run.job_id, "run_id": run_id, "attempt": run.attempt, "status": run.status}
        if run.status == "failed":
            log.warning("run %s of job %s failed for good at attempt %d: %s", run_id, run.job_id, run.attempt,
                        run.error, extra=fields)
        else:
            log.info("run %s of job %s: attempt %d failed (%s); retry due at %s", run_id, run.job_id, run.attempt,
                     run.error, clock.iso_from_ms(run.due_ms), extra=fields)
    if len(ended) > limits.run_log_lines_max:
        log.warning("and %d more failed attempts in the same commit", len(ended) - limits.run_log_lines_max)


def _monotonic_ms() -> int:
    """Milliseconds of trio's clock (monotonic, or a test's mock): for claim
    rates, which a wall-clock step must not refill or drain."""
    return int(trio.current_time() * 1000)


def _due_of(runs_key: bytes) -> int:
    return keys.due_of(runs_key)


async def _wait_then_set(source: trio.Event, target: trio.Event) -> None:
    await source.wait()
    target.set()


