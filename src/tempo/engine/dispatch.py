"""Dispatch on the leader, the trio driver of `DispatchCore`
(engine/dispatch_core.py: the timing wheel, the ready queues, the leases and
each owner's limits, as a pure state machine; docs/design.md "Dispatch on the
leader").

The driver owns what the core may not: the loops (a tick when the core
next has work, `DispatchCore.next_tick_ms`, or when an applied entry may
have brought some; a lease check every `limits.lease_check_ms` and at the
earliest lease or timeout in between; an overlap round when a tick set
runs aside),
the clocks (scheduler time from `now_ms`, monotonic time from
`trio.current_time()`), the events claimers wait on, the commit of the
commands the core hands back (`committer.submit`), the slices of an
entry's changes with checkpoints between them, and the logs.

Everything in the core is soft state, rebuilt from the runs table when a
node starts (or, in a cluster, becomes leader): the wheel holds only the
runs due within the read-ahead window, ready queues hold runs that are due,
and leases are extended in memory by heartbeats, never written per
heartbeat. Every change of state goes through a command, so the tables stay
the truth.
"""

from collections.abc import Awaitable, Callable, Generator
from typing import TypeGuard

import trio

from tempo import clock, errors, limits
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine.claim_backlog import ClaimBacklog
from tempo.engine.commandlog import Answer, CommandLog
from tempo.engine.dispatch_core import (
    HTTP_QUEUE,
    LATENESS_BUCKETS_S,
    Beat,
    ClaimedRun,
    DispatchCore,
    Lease,
    feed_size,
    is_http,
    owner_of,
    queue_key,
)
from tempo.engine.dispatch_workers import (
    ClaimStep,
    Commit,
    Wait,
    WorkerCalls,
    log_failed_attempts,
    run_or_none_each,
)
from tempo.engine.signals import StopWaiters
from tempo.engine.store import Changes, Store

__all__ = [
    "HTTP_QUEUE", "LATENESS_BUCKETS_S", "Beat", "ClaimStep", "ClaimedRun", "Commit", "Dispatcher", "Lease", "Wait",
    "is_http", "log_failed_attempts", "owner_of", "queue_key",
]


class Dispatcher(WorkerCalls):
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
        # Scheduler time (the node's `clock.Clock`, which never goes
        # backwards): the stamps of commands and the `now` of due times.
        # Leases, waits and claim rates run on `trio.current_time()`.
        # Injectable so tests can drive due times with a mock clock.
        self.now_ms = now_ms or clock.Clock().now_ms
        # Its state (counters, leases, the wheel, owners' limits ...) is read
        # and set here, by the API's metrics and the tests: `dispatcher.core.X`.
        self.core = DispatchCore(store, self.now_ms(), readahead_ms=readahead_ms, limits_of=limits_of)
        self.events_changed = trio.Event()
        # One event per ready queue with claimers waiting (`HTTP_QUEUE` for
        # the http ones), set and dropped when the core says it woke.
        self._ready_events: dict[str, trio.Event] = {}
        # Called with the (job ID, nominal ms) of the claimed runs each
        # applied entry asked to stop: the HTTP executor aborts their
        # deliveries (it sends no heartbeats to learn it from).
        self.stop_listeners: list[Callable[[list[tuple[str, int]]], None]] = []
        # Workers' long polls of their signals (`signals`), woken by the
        # runs they name when those are asked to stop or time out.
        self.stop_waiters = StopWaiters()
        # Set by every applied entry (`on_changes`): a run it fed may be due
        # before the tick loop's planned wake-up.
        self._fed = trio.Event()
        # Set by a tick that set due runs aside for their overlap policy.
        self._set_aside = trio.Event()
        # Which workers claim a backlog of due runs (`claim_backlog_until`).
        self.backlog = ClaimBacklog()
        committer.listeners.append(self.on_changes)

    def held_back(self) -> dict[str, int]:
        return self.core.held_back(trio.current_time())

    def reset(self) -> None:
        """Forgets all soft state (a leader that stopped leading); the next
        `run` loads it again from the tables. Claims waiting on this node
        wake up and fail with `NotLeader`."""
        self.core.reset(self.now_ms())
        # Loops waiting (a reset while the dispatcher runs) wake and look
        # at the new state.
        self._fed.set()
        self._set_aside.set()
        self._fed, self._set_aside = trio.Event(), trio.Event()
        for event in self._ready_events.values():
            event.set()
        self._ready_events = {}
        self.stop_waiters.wake_all()

    def load(self, now_ms: int) -> None:
        self.core.load(now_ms, trio.current_time())

    def on_changes(self, changes: Changes) -> Awaitable[None] | None:
        """Feeds an entry's changes to the core (and so drops the leases of
        the runs that finished), `limits.dispatch_slice_runs` runs at a
        time with a checkpoint between slices (a batch of 1,000 creates or
        claims is one step of 10-15 ms otherwise). Other tasks run between
        slices, but no other entry is applied until this returns (the
        commit loop awaits it), and no request of this entry is answered
        before. An entry of one slice is fed at once, and None is answered:
        nothing to await (a driver on its own thread, the whole-node
        simulator, needs that)."""
        self._fed.set()
        if feed_size(changes) <= limits.dispatch_slice_runs:
            self.core.feed(changes, 0, limits.dispatch_slice_runs)
            self._signal()
            self._changes_fed(changes)
            return None
        return self._feed_slices(changes)

    async def _feed_slices(self, changes: Changes) -> None:
        slice_runs = limits.dispatch_slice_runs
        for start in range(0, feed_size(changes), slice_runs):
            if start:
                await trio.lowlevel.checkpoint()
            self.core.feed(changes, start, start + slice_runs)
            self._signal()
        self._changes_fed(changes)

    def _changes_fed(self, changes: Changes) -> None:
        if changes.skipped:
            # Every node counts the skips of the entries it applies.
            self.core.counters["skipped_overlap"] += changes.skipped
        if changes.stopping:
            self.core.stop_requested(changes.stopping)
            self.stop_waiters.wake(changes.stopping)
            for listener in self.stop_listeners:
                listener(changes.stopping)
        if changes.event_owners:
            self.events_changed.set()
            self.events_changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.reset()
        self.load(self.now_ms())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._expire_loop)
            nursery.start_soon(self._overlap_loop)
            task_status.started()
            while True:
                if self._fed.is_set():
                    self._fed = trio.Event()
                now_ms = self.now_ms()
                if self.tick(now_ms):
                    await trio.lowlevel.checkpoint()
                    continue
                # Asleep until the core next has work, or an entry applied
                # meanwhile (`on_changes`) fed it runs that may be due sooner:
                # an idle node wakes 1000 / `limits.dispatch_idle_wake_ms`
                # times a second, not once a dispatch tick.
                with trio.move_on_after((self.core.next_tick_ms(now_ms) - now_ms) / 1000):
                    await self._fed.wait()

    def tick(self, now_ms: int) -> bool:
        more = super().tick(now_ms)
        if self.core.overlap_due:
            self._set_aside.set()
        return more

    async def _overlap_loop(self) -> None:
        """Has apply decide on the due runs of jobs with an overlap policy
        that a tick set aside (docs/semantics.md "Overlap"), a command at a
        time: the trio driver of `overlap_steps`. It sleeps until a tick
        sets runs aside; a round that leaves some (more than a command's
        worth, or not written) is followed by the next a dispatch tick on."""
        while True:
            if not self.core.overlap_due:
                await self._set_aside.wait()
                self._set_aside = trio.Event()
                continue
            await self._commit_round(self.overlap_steps(), errors.TempoError)
            if self.core.overlap_due:
                await trio.sleep(limits.dispatch_tick_ms / 1000)

    def overlap_steps(self) -> Generator[Commit, Answer, None]:
        """One round of `_overlap_loop`, without I/O (as `claim_steps`): at
        most one `Commit`, its answer sent back or its fault thrown."""
        proposal = self.core.propose_overlap(self.now_ms())
        if proposal is None:
            return
        try:
            outcomes = yield Commit(proposal.command)
        except (errors.Overloaded, errors.NotLeader):
            # Not written: the runs stay set aside for the next round
            # (a node that stopped leading is reset, which forgets them).
            self.core.overlap_failed(proposal)
            return
        assert _bool_each(outcomes)
        self.core.overlap_applied(proposal, outcomes)
        self._signal()

    async def _expire_loop(self) -> None:
        check_s, gap_s = limits.lease_check_ms / 1000, limits.dispatch_tick_ms / 1000
        while True:
            # Every lease check round, and at the earliest lease or timeout
            # in between, so an attempt ends at its timeout rather than up
            # to a round after it (docs/semantics.md "Run timeouts"). One
            # granted meanwhile ends at least a second on: the next round
            # sees it first. Wake-ups are at least a dispatch tick apart, so
            # leases ending at many instants cost at most 100 a second, each
            # taking every lease run out by then. Leases run out already
            # (more than one command's worth, or an expiry not written) wait
            # for the next round, as before.
            now_s = trio.current_time()
            next_s = self.core.next_expiry_s()
            if next_s is None or next_s <= now_s:
                wake_s = now_s + check_s
            else:
                wake_s = min(now_s + check_s, max(next_s, now_s + gap_s))
            await trio.sleep_until(wake_s)
            await self._commit_round(self.expire_steps(), errors.Overloaded)

    async def _commit_round(
        self, steps: Generator[Commit, Answer, None], faults: type[errors.TempoError]
    ) -> None:
        """Drives one round of a loop's steps: commits its `Commit`, if it
        hands one out, and sends back the answer, or throws the fault when
        it is one of `faults` (any other is the loop's to raise)."""
        step = next(steps, None)
        if step is None:
            return
        try:
            answer = await self.committer.submit(step.command)
        except faults as exc:
            _finish(steps, fault=exc)
            return
        _finish(steps, answer)

    def expire_steps(self) -> Generator[Commit, Answer, None]:
        """One lease check of `_expire_loop`, without I/O (as `claim_steps`):
        the leases run out by now end, and at most one `Commit` (their
        `ExpireLeases`) is handed out, its answer sent back or its fault
        thrown. The whole-node simulator (tests/sim/node_cluster.py) runs
        the same steps on its own thread."""
        now_s = trio.current_time()
        command = self.core.expire(self.now_ms(), now_s)
        self._signal()
        if command is None:
            return
        timed_out = [(e.job_id, e.nominal_ms) for e in command.expiries if e.reason == "timeout"]
        if timed_out:
            self.stop_waiters.wake(timed_out)
        try:
            outcomes = yield Commit(command)
        except errors.Overloaded:
            # Not written: the leases stay expired in memory, and the next
            # round tries again.
            self.core.expire_failed(command, now_s)
            return
        assert run_or_none_each(outcomes)
        self.core.expire_applied(outcomes)
        log_failed_attempts(outcomes)


def _bool_each(answer: Answer) -> TypeGuard[list[bool]]:
    """Whether `answer` is what apply answers an `OverlapRuns`: one bool an item."""
    return isinstance(answer, list) and all(isinstance(o, bool) for o in answer)


def _finish(
    steps: Generator[Commit, Answer, None], answer: Answer = None, *, fault: errors.TempoError | None = None
) -> None:
    """Sends the answer of a generator's last `Commit` (or throws its
    `fault`), which ends it."""
    try:
        if fault is not None:
            steps.throw(fault)
        else:
            steps.send(answer)
    except StopIteration:
        return
    raise AssertionError("a step generator handed out a second Commit")
