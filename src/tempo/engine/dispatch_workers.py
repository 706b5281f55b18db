"""What workers ask of the dispatcher on the leader (engine/dispatch.py):
claims (the trio driver of the claim steps, and the events claimers wait
on, set by `tick` and `_signal`), heartbeats, signals, releases and
results. `WorkerCalls` is a part of `Dispatcher`, which sets up the state
it names.
"""


import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import trio

from tempo import clock, errors, ids, limits
from tempo.engine.claim_backlog import ClaimBacklog, worker_of
from tempo.engine.commandlog import Answer, CommandLog
from tempo.engine.commands import ClaimKey, ClaimRuns, Command, ReportResults, Result
from tempo.engine.dispatch_core import (
    HTTP_QUEUE,
    Beat,
    ClaimedRun,
    DispatchCore,
)
from tempo.engine.records import ClaimKeyEntry, Job, Run, RunCancel
from tempo.engine.signals import StopWaiters
from tempo.engine.store import Store

log = logging.getLogger("tempo.dispatch")


@dataclass(frozen=True, slots=True)
class Commit:
    """A step of a claim (`Dispatcher.claim_steps`): commit `command`, and
    send its answer back (or throw the `TempoError` it raised)."""

    command: Command


@dataclass(frozen=True, slots=True)
class Wait:
    """A step of a claim: wait until runs of `queues` may be claimable
    (`Dispatcher._wait_ready`) or until `wake_s` (monotonic), then send None.
    A step of `starts_steps` names no queue: it waits for the time alone."""

    queues: list[str]
    wake_s: float


ClaimStep = Commit | Wait



class WorkerCalls:
    """The workers' side of `Dispatcher` (engine/dispatch.py)."""

    # Set up by `Dispatcher.__init__`.
    store: Store
    committer: CommandLog
    core: DispatchCore
    now_ms: Callable[[], int]
    stop_waiters: StopWaiters
    _ready_events: dict[str, trio.Event]
    backlog: ClaimBacklog

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

    async def claim(
        self, queues: list[str], worker: str, runs_max: int, wait_s: float, key: ClaimKey | None = None,
        ahead_ms: int = 0,
    ) -> list[ClaimedRun]:
        """Claims up to `runs_max` due runs of `queues` (`[HTTP_QUEUE]`: every
        owner's http queue), waiting up to `wait_s` for one: for a run to fall
        due, or for room under its owner's limits. With `ahead_ms`, also runs
        due within that many ms, earliest first (pre-dispatch,
        docs/semantics.md "Pre-dispatch").

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
        steps = self.claim_steps(queues, worker, runs_max, trio.current_time() + wait_s, key, ahead_ms)
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
        self, queues: list[str], worker: str, runs_max: int, deadline_s: float, key: ClaimKey | None = None,
        ahead_ms: int = 0,
    ) -> Generator[ClaimStep, Answer, list[ClaimedRun]]:
        """The claim sequence of `claim`, without I/O (as `Replica.steps`):
        it hands out a `Commit` (the driver commits its command and sends
        back the answer, or throws the exception) or a `Wait` (the driver
        waits as it says, then sends None), and returns the claimed runs.
        The trio driver is `claim`; the whole-node simulator
        (tests/sim/node_cluster.py) runs the same steps on its own thread.
        Monotonic time is `trio.current_time()`, scheduler time `now_ms`."""
        generation = self.core.generation
        self.backlog.claiming(worker)
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
            now_ms = self.now_ms()
            self.tick(now_ms)
            taken = self.core.take(queues, runs_max, trio.current_time(), now_ms + ahead_ms if ahead_ms else None)
            self._note_backlog(queues, worker, len(taken.runs))
            if taken.runs:
                claimed = yield from self._commit_claims(worker, taken.runs, key, ahead_ms)
                if isinstance(claimed, ClaimKeyEntry):
                    assert key is not None
                    return self._answer_key(claimed, worker, key)
                if claimed:
                    # Marked again as the runs go out: the worker's next
                    # claim comes a round trip after this.
                    self._note_backlog(queues, worker, len(claimed))
                    return claimed
                continue
            now_s = trio.current_time()
            if now_s >= deadline_s:
                return []
            # Room that frees wakes the wait; tokens that refill do not, so a
            # claim held back by a claim rate looks again when one is due.
            refill_ms = taken.refill_ms
            wake_s = deadline_s if refill_ms is None else min(deadline_s, now_s + refill_ms / 1000)
            if ahead_ms:
                # Runs coming due within `ahead_ms` wake no claimer: one
                # that looks ahead looks again this often.
                wake_s = min(wake_s, now_s + limits.claim_ahead_poll_ms / 1000)
            yield Wait(queues, wake_s)

    def _note_backlog(self, queues: list[str], worker: str, taken: int) -> None:
        """A claim of `worker` that took runs and left runs due in its
        queues (`[HTTP_QUEUE]`: the http ones): it claims a backlog."""
        if not taken:
            return
        ready = self.core.ready
        if bool(self.core.http_ready) if queues == [HTTP_QUEUE] else any(ready.get(queue) for queue in queues):
            self.backlog.mark(worker, trio.current_time())

    def claim_backlog_until(self) -> float | None:
        """Until when workers claim a backlog of due runs (trio time), for
        claims before results (engine/commit.py `Committer.claims_first`):
        `limits.claim_backlog_gap_ms` after a claim last left runs ready in
        its queues, as it took its runs or handed them out, of a worker
        that may claim again meanwhile (engine/claim_backlog.py); None if
        none may."""
        return self.backlog.until(trio.current_time())

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
        self, worker: str, taken: list[tuple[bytes, Job]], key: ClaimKey | None = None, ahead_ms: int = 0
    ) -> Generator[ClaimStep, Answer, list[ClaimedRun] | ClaimKeyEntry]:
        # Leases count from the claim's stamp (or a run's due time, when
        # claimed ahead of it), on the monotonic clock.
        proposal = self.core.propose_claims(worker, taken, self.now_ms(), trio.current_time(), ahead_ms)
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
            assert run_or_none_each(outcomes)
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

    async def starts(self, owner: str | None, worker: str, runs: list[tuple[str, int]]) -> list[bool]:
        """Of `runs` (run ID, attempt) claimed ahead of their due times,
        whether each may start (docs/semantics.md "Pre-dispatch"): the
        trio driver of `starts_steps`, which decides everything. Raises
        `NotLeader` when this node stops leading meanwhile."""
        steps = self.starts_steps(owner, worker, runs)
        try:
            step = next(steps)
            while True:
                if isinstance(step, Commit):
                    step = steps.send(await self.committer.submit(step.command))
                else:
                    await trio.sleep_until(step.wake_s)
                    step = steps.send(None)
        except StopIteration as stop:
            answers: list[bool] = stop.value
            return answers
        finally:
            steps.close()

    def starts_steps(
        self, owner: str | None, worker: str, runs: list[tuple[str, int]]
    ) -> Generator[ClaimStep, Answer, list[bool]]:
        """The sequence of `starts`, without I/O (as `claim_steps`; the
        whole-node simulator runs it step by step). It answers no earlier
        than `limits.predispatch_stop_ms` before the latest due time among
        `runs`, by scheduler time, and only after every command stamped
        before that is applied (an empty claim
        committed after them): a pause, cancel, delete or patch stamped
        earlier has stopped its runs by then, and one stamped later does
        not stop them in apply (`rules.slots.held_ahead`)."""
        generation = self.core.generation
        # Answered before the wait, and after it again only for the runs
        # whose lease changed meanwhile: a wave's calls all come to their
        # stop point at one instant, 100 ms before the runs start.
        slots = [(ids.parse_run_id(run_id), attempt) for run_id, attempt in runs]
        answers, due_ms = self.core.may_start(owner, slots)
        changed = self.core.watch_leases()
        try:
            # Until scheduler time reaches the stop point: after a backward
            # step of the wall clock it runs slower than the monotonic
            # clock a wait counts on (tempo/clock.py), so one wait may end
            # short of it, and a command stamped after the answer would
            # still stop the run in apply.
            while (wait_ms := due_ms - limits.predispatch_stop_ms - self.now_ms()) > 0:
                yield Wait([], trio.current_time() + min(wait_ms, limits.claim_ahead_ms_max) / 1000)
            # A barrier: commands are applied in the order they were stamped,
            # and each stamped from now on is at or past the stop point.
            yield Commit(ClaimRuns(self.now_ms(), worker, []))
        finally:
            self.core.unwatch_leases(changed)
        if generation != self.core.generation:
            raise errors.NotLeader("this node stopped leading; ask the new leader")
        return self.core.may_start_again(owner, slots, answers, changed)

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
        # Its worker waits for this answer (engine/claim_backlog.py).
        worker = worker_of(self.core.leases, results)
        if worker is not None:
            self.backlog.reporting(worker)
        try:
            outcomes = await self.committer.submit(ReportResults(self.now_ms(), owner, results))
        finally:
            if worker is not None:
                self.backlog.reported(worker)
        assert _run_or_error_each(outcomes)
        if self.core.reported(outcomes):
            log_failed_attempts(outcomes)
        return outcomes


# A tuple, made once: `Run | errors.TempoError` in the check made a union
# type for each of a batch's thousand outcomes.
_RUN_OR_ERROR = (Run, errors.TempoError)


def run_or_none_each(answer: Answer) -> TypeGuard[list[Run | None]]:
    """Whether `answer` is what apply answers an `ExpireLeases`, or a
    `ClaimRuns` that took its runs: a run or None, one per item."""
    return isinstance(answer, list) and all(o is None or type(o) is Run for o in answer)


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


async def _wait_then_set(source: trio.Event, target: trio.Event) -> None:
    await source.wait()
    target.set()
