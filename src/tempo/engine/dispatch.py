"""Dispatch on the leader, the trio driver of `DispatchCore`
(engine/dispatch_core.py: the timing wheel, the ready queues, the leases and
each owner's limits, as a pure state machine; docs/design.md "Dispatch on the
leader").

The driver owns what the core may not: the loops (a tick every
`limits.dispatch_tick_ms`, a lease check every `limits.lease_check_ms`
and at the earliest lease or timeout in between),
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

import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import trio

from tempo import clock, errors, ids, limits
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine.commandlog import Answer, CommandLog
from tempo.engine.commands import ClaimKey, Command, ReportResults, Result
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
from tempo.engine.records import ClaimKeyEntry, Job, Run, RunCancel
from tempo.engine.signals import StopWaiters
from tempo.engine.store import Changes, Store
from tempo.wheel import TimingWheel

__all__ = [
    "HTTP_QUEUE", "LATENESS_BUCKETS_S", "Beat", "ClaimStep", "ClaimedRun", "Commit", "Dispatcher", "Lease", "Wait",
    "is_http", "log_failed_attempts", "owner_of", "queue_key",
]
log = logging.getLogger("tempo.dispatch")


@dataclass(frozen=True, slots=True)
class Commit:
    """A step of a claim (`Dispatcher.claim_steps`): commit `command`, and
    send its answer back (or throw the `TempoError` it raised)."""

    command: Command


@dataclass(frozen=True, slots=True)
class Wait:
    """A step of a claim: wait until runs of `queues` may be claimable
    (`Dispatcher._wait_ready`) or until `wake_s` (monotonic), then send None."""

    queues: list[str]
    wake_s: float


ClaimStep = Commit | Wait


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
        # Scheduler time (the node's `clock.Clock`, which never goes
        # backwards): the stamps of commands and the `now` of due times.
        # Leases, waits and claim rates run on `trio.current_time()`.
        # Injectable so tests can drive due times with a mock clock.
        self.now_ms = now_ms or clock.Clock().now_ms
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
        committer.listeners.append(self.on_changes)

    # The core's state, as the API's metrics and the tests read it.
    @property
    def limits_of(self) -> Callable[[str], OwnerLimits]:
        return self.core.limits_of

    @limits_of.setter
    def limits_of(self, limits_of: Callable[[str], OwnerLimits]) -> None:
        self.core.limits_of = limits_of

    @property
    def generation(self) -> int:
        return self.core.generation

    @property
    def counters(self) -> Counter[str]:
        return self.core.counters

    @property
    def lateness_buckets(self) -> list[int]:
        return self.core.lateness_buckets

    @property
    def lateness_sum_s(self) -> float:
        return self.core.lateness_sum_s

    @property
    def in_flight(self) -> Counter[str]:
        return self.core.in_flight

    @property
    def leases(self) -> dict[tuple[str, int], Lease]:
        return self.core.leases

    @property
    def wheel(self) -> TimingWheel[bytes]:
        return self.core.wheel

    @property
    def queue_of(self) -> dict[bytes, tuple[str, Job]]:
        return self.core.queue_of

    @property
    def ready(self) -> dict[str, deque[bytes]]:
        return self.core.ready

    @property
    def skipped(self) -> dict[str, int]:
        return self.core.skipped

    @property
    def loaded_of(self) -> Counter[str]:
        return self.core.loaded_of

    @property
    def loaded_until_ms(self) -> int:
        return self.core.loaded_until_ms

    def ready_count(self) -> int:
        return self.core.ready_count()

    def held_back(self) -> dict[str, int]:
        return self.core.held_back(trio.current_time())

    def check_memory(self) -> None:
        self.core.check_memory()

    def reset(self) -> None:
        """Forgets all soft state (a leader that stopped leading); the next
        `run` loads it again from the tables. Claims waiting on this node
        wake up and fail with `NotLeader`."""
        self.core.reset(self.now_ms())
        for event in self._ready_events.values():
            event.set()
        self._ready_events = {}
        self.stop_waiters.wake_all()

    def load(self, now_ms: int) -> None:
        self.core.load(now_ms, trio.current_time())

    def tick(self, now_ms: int) -> bool:
        more = self.core.tick(now_ms, trio.current_time())
        self._signal()
        return more

    def _signal(self) -> None:
        """Sets the events of what the core says woke: a queue's claimers
        when runs fell due in it, an owner's (and the executor's) when room
        freed under its limits."""
        wakeups = self.core.take_wakeups()
        if wakeups is None:
            return
        events = self._ready_events
        for queue in wakeups.queues:
            event = events.pop(queue, None)
            if event is not None:
                event.set()
        for owner in wakeups.owners:
            prefix = f"{owner}\x00"
            for queue in [q for q in events if q == HTTP_QUEUE or q.startswith(prefix)]:
                events.pop(queue).set()

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
                if self.tick(self.now_ms()):
                    await trio.lowlevel.checkpoint()
                else:
                    await trio.sleep(limits.dispatch_tick_ms / 1000)

    async def _overlap_loop(self) -> None:
        """Has apply decide on the due runs of jobs with an overlap policy
        that `tick` set aside (docs/semantics.md "Overlap"), a command at a
        time, each dispatch tick: the trio driver of `overlap_steps`."""
        while True:
            await trio.sleep(limits.dispatch_tick_ms / 1000)
            steps = self.overlap_steps()
            step = next(steps, None)
            if step is None:
                continue
            try:
                answer = await self.committer.submit(step.command)
            except errors.TempoError as exc:
                _finish(steps, fault=exc)
                continue
            _finish(steps, answer)

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
            steps = self.expire_steps()
            step = next(steps, None)
            if step is None:
                continue
            try:
                answer = await self.committer.submit(step.command)
            except errors.Overloaded as exc:
                _finish(steps, fault=exc)
                continue
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
        assert _run_or_none_each(outcomes)
        self.core.expire_applied(outcomes)
        log_failed_attempts(outcomes)

    async def claim(
        self, queues: list[str], worker: str, runs_max: int, wait_s: float, key: ClaimKey | None = None
    ) -> list[ClaimedRun]:
        """Claims up to `runs_max` due runs of `queues` (`[HTTP_QUEUE]`: every
        owner's http queue), waiting up to `wait_s` for one: for a run to fall
        due, or for room under its owner's limits.

        With a `key` already recorded (docs/semantics.md "Idempotent
        claims"), it takes nothing and answers the runs the key took that
        are still held at their attempt; the recorded state decides, here or
        in apply when the first claim with the key is still being committed.

        The trio driver of `claim_steps`, which decides everything: this
        commits what it hands out and waits where it says.

        Cancelling it is safe: cancelled while it waits, it has taken
        nothing; once it has taken runs, their commit finishes (shielded: a
        waiter of the committer is answered when its batch commits or the
        node stops leading) and it returns them, claimed. A caller whose
        client has gone meanwhile hands them to `release`."""
        steps = self.claim_steps(queues, worker, runs_max, trio.current_time() + wait_s, key)
        try:
            step = next(steps)
            while True:
                if isinstance(step, Commit):
                    with trio.CancelScope(shield=True):
                        try:
                            answer = await self.committer.submit(step.command)
                        except errors.TempoError as exc:
                            step = steps.throw(exc)
                            continue
                    step = steps.send(answer)
                else:
                    with trio.move_on_at(step.wake_s):
                        await self._wait_ready(step.queues)
                    step = steps.send(None)
        except StopIteration as stop:
            claimed: list[ClaimedRun] = stop.value
            return claimed
        finally:
            steps.close()

    def claim_steps(
        self, queues: list[str], worker: str, runs_max: int, deadline_s: float, key: ClaimKey | None = None
    ) -> Generator[ClaimStep, Answer, list[ClaimedRun]]:
        """The claim sequence of `claim`, without I/O (as `Replica.steps`):
        it hands out a `Commit` (the driver commits its command and sends
        back the answer, or throws the exception) or a `Wait` (the driver
        waits as it says, then sends None), and returns the claimed runs.
        The trio driver is `claim`; the whole-node simulator
        (tests/sim/node_cluster.py) runs the same steps on its own thread.
        Monotonic time is `trio.current_time()`, scheduler time `now_ms`."""
        generation = self.core.generation
        if key is not None:
            entry = self.store.claim_key_entry(key.owner, key.key, self.now_ms())
            if entry is not None:
                return self._answer_key(entry, worker, key)
        while True:
            if generation != self.core.generation:
                raise errors.NotLeader("this node stopped leading; claim from the new leader")
            # The runs that fell due since the last tick, into their ready
            # queues first: a claim sees every run due by its own time, not
            # only those the tick loop moved there (up to a tick ago).
            self.tick(self.now_ms())
            taken = self.core.take(queues, runs_max, trio.current_time())
            if taken.runs:
                claimed = yield from self._commit_claims(worker, taken.runs, key)
                if isinstance(claimed, ClaimKeyEntry):
                    assert key is not None
                    return self._answer_key(claimed, worker, key)
                if claimed:
                    return claimed
                continue
            now_s = trio.current_time()
            if now_s >= deadline_s:
                return []
            # Room that frees wakes the wait; tokens that refill do not, so a
            # claim held back by a claim rate looks again when one is due.
            refill_ms = taken.refill_ms
            wake_s = deadline_s if refill_ms is None else min(deadline_s, now_s + refill_ms / 1000)
            yield Wait(queues, wake_s)

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

    def _commit_claims(
        self, worker: str, taken: list[tuple[bytes, Job]], key: ClaimKey | None = None
    ) -> Generator[ClaimStep, Answer, list[ClaimedRun] | ClaimKeyEntry]:
        # Leases count from the claim's stamp, on the monotonic clock.
        proposal = self.core.propose_claims(worker, taken, self.now_ms(), trio.current_time())
        try:
            if proposal.command is None:
                return []
            if key is not None:
                # The record is kept from the claim's stamp (limits.py
                # "Idempotent claims"); apply drops it then.
                expires_ms = proposal.command.at_ms + limits.claim_key_kept_ms
                proposal.command.key = ClaimKey(key.owner, key.key, key.queues_hash, expires_ms)
            outcomes = yield Commit(proposal.command)
            if isinstance(outcomes, ClaimKeyEntry):
                # The key was recorded first (a retry raced its claim): this
                # command took nothing, and its runs are still waiting.
                self.core.give_back(proposal)
                return outcomes
            assert _run_or_none_each(outcomes)
            return self.core.claimed(proposal, outcomes)
        except (errors.Overloaded, errors.ClaimKeyReused, errors.NotLeader):
            # Not written (a full disk, too many writes), a key that took
            # nothing, or refused as leadership goes: the runs are still
            # waiting in the tables, and go back to the head of their
            # queues. A node that stops leading is reset, which forgets them
            # again; one whose leadership transfer gives up leads on with
            # them (a claim whose entry may yet commit elsewhere fails only
            # once the node stopped leading).
            self.core.give_back(proposal)
            raise
        finally:
            self.core.settle(proposal)
            self._signal()

    def _answer_key(self, entry: ClaimKeyEntry, worker: str, key: ClaimKey) -> list[ClaimedRun]:
        """The runs a recorded claim key took that are still claimed at the
        attempt it took them at: a run whose lease ran out, or that finished
        or was deleted since, is not this claim's any more (fencing by
        attempt). Each answered run's lease is renewed as by a heartbeat,
        and the answer shows it. Another worker or other queues with the key
        is `ClaimKeyReused`."""
        if entry.worker != worker or entry.queues_hash != key.queues_hash:
            raise errors.ClaimKeyReused(f"claim key {key.key!r} was used by another worker or for other queues")
        self.core.counters["claim_key_repeats"] += 1
        answered: list[ClaimedRun] = []
        for taken in entry.runs:
            run = self.store.get_run_any(taken.job_id, taken.nominal_ms)
            job = self.store.get_job_any(taken.job_id)
            if run is None or job is None or run.status != "claimed" or run.attempt != taken.attempt:
                continue
            try:
                run.lease_expires_ms = self.heartbeat(None, ids.run_id(run.job_id, run.nominal_ms), run.attempt)
            except (errors.StaleAttempt, errors.NotFound):
                continue
            answered.append(ClaimedRun(run, job))
        return answered

    async def signals(self, owner: str | None, runs: list[tuple[str, int]], wait_s: float) -> dict[str, RunCancel]:
        """A worker's signals (docs/api.md "Signals"): of `runs` (run ID,
        attempt), those whose worker is to stop, and why, as their
        heartbeats would answer; waits up to `wait_s` for one when none is.
        Leases are not extended. Raises `NotLeader` when this node stops
        leading while it waits."""
        deadline_s = trio.current_time() + wait_s
        generation = self.core.generation
        slots = [parsed for run_id, _ in runs if (parsed := ids.parse_run_id(run_id)) is not None]
        while True:
            if generation != self.core.generation:
                raise errors.NotLeader("this node stopped leading; ask the new leader")
            now_s = trio.current_time()
            found: dict[str, RunCancel] = {}
            for run_id, attempt in runs:
                why = self.core.stop_of(owner, run_id, attempt, now_s)
                if why is not None:
                    found[run_id] = why
            if found or now_s >= deadline_s:
                return found
            event = trio.Event()
            self.stop_waiters.add(slots, event)
            try:
                with trio.move_on_at(deadline_s):
                    await event.wait()
            finally:
                self.stop_waiters.discard(slots, event)

    def stop_waiters_count(self) -> int:
        """Runs some worker's signals poll waits on (tests, metrics)."""
        return len(self.stop_waiters)

    def heartbeat(self, owner: str | None, run_id: str, attempt: int) -> int:
        """Extends a lease in memory to `lease_s` from now (monotonic); answers
        the new expiry as an instant of scheduler time (UNIX ms)."""
        return self.core.heartbeat(owner, run_id, attempt, self.now_ms(), trio.current_time())

    def beat(self, owner: str | None, run_id: str, attempt: int) -> Beat:
        """A worker's heartbeat (`DispatchCore.beat`): the lease's expiry
        (UNIX ms; None: the attempt ended) and whether to stop."""
        return self.core.beat(owner, run_id, attempt, self.now_ms(), trio.current_time())

    def release(self, claimed: list[ClaimedRun]) -> None:
        """Claimed runs whose answer never reached their worker: each lease
        ends now, so the lease check (`_expire_loop`) sends the runs back to
        waiting, due at once, within `limits.lease_check_ms`, by the command
        of any expired lease (the attempt counts, as an expired one does)."""
        self.core.release(claimed, trio.current_time())

    def lease_of(self, job_id: str, nominal_ms: int, attempt: int) -> int | None:
        """When the lease runs out, as an instant of scheduler time (UNIX ms)."""
        return self.core.lease_of(job_id, nominal_ms, attempt, self.now_ms(), trio.current_time())

    async def report(self, owner: str | None, results: list[Result]) -> list[Run | errors.TempoError]:
        outcomes = await self.committer.submit(ReportResults(self.now_ms(), owner, results))
        assert _run_or_error_each(outcomes)
        if self.core.reported(outcomes):
            log_failed_attempts(outcomes)
        return outcomes


# A tuple, made once: `Run | errors.TempoError` in the check made a union
# type for each of a batch's thousand outcomes.
_RUN_OR_ERROR = (Run, errors.TempoError)


def _run_or_none_each(answer: Answer) -> TypeGuard[list[Run | None]]:
    """Whether `answer` is what apply answers an `ExpireLeases`, or a
    `ClaimRuns` that took its runs: a run or None, one per item."""
    return isinstance(answer, list) and all(o is None or type(o) is Run for o in answer)


def _bool_each(answer: Answer) -> TypeGuard[list[bool]]:
    """Whether `answer` is what apply answers an `OverlapRuns`: one bool an item."""
    return isinstance(answer, list) and all(isinstance(o, bool) for o in answer)


def _run_or_error_each(answer: Answer) -> TypeGuard[list[Run | errors.TempoError]]:
    """Whether `answer` is what apply answers a `ReportResults`: a run or its
    fault, one per result."""
    return isinstance(answer, list) and all(isinstance(o, _RUN_OR_ERROR) for o in answer)


def log_failed_attempts(outcomes: Sequence[object]) -> None:
    """One line per attempt that just failed or lost its lease, with the run's
    and job's IDs as fields (`extra`), at most `limits.run_log_lines_max`."""
    ended = [o for o in outcomes if isinstance(o, Run) and o.status in ("waiting", "failed")]
    for run in ended[: limits.run_log_lines_max]:
        run_id = ids.run_id(run.job_id, run.nominal_ms)
        fields = {"job_id": run.job_id, "run_id": run_id, "attempt": run.attempt, "status": run.status}
        # A result's `error` is optional (docs/api.md "Workers"): a failure
        # sent without one is logged so, never as "None".
        why = "no error text" if run.error is None else run.error
        if run.status == "failed":
            log.warning("run %s of job %s failed for good at attempt %d (%s)", run_id, run.job_id, run.attempt,
                        why, extra=fields)
        else:
            log.info("run %s of job %s: attempt %d failed (%s); retry due at %s", run_id, run.job_id, run.attempt,
                     why, clock.iso_from_ms(run.due_ms), extra=fields)
    if len(ended) > limits.run_log_lines_max:
        log.warning("and %d more failed attempts in the same commit", len(ended) - limits.run_log_lines_max)


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


async def _wait_then_set(source: trio.Event, target: trio.Event) -> None:
    await source.wait()
    target.set()
