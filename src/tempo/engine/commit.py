"""Group commit: every command that arrives while a batch is being written
goes into the next batch, which is one log entry, one LMDB transaction and one
fsync. A request is answered only after its batch is durable.

On a single node there is no log: the entry index is the store's applied
index plus one, and apply takes the batch's commands as they are
(`Store.apply_commands`). In a cluster the replica loop takes this loop's
place and drives `Store.apply_entry` with committed entries.

While workers claim a backlog of due runs, claims go before the results
waiting (`claims_first`, docs/semantics.md "Claims before results"), for
at most `limits.results_wait_for_claims_ms` at a stretch.

A batch that does not fit (a full disk, a full map that cannot grow) is
answered `errors.StorageFault`, with nothing of it written, and writes
are refused until a later batch, or a probe when none comes, commits
(engine/storage_guard.py). A full map grows first when the disk has room,
and the batch is tried again at once.
"""

import math
from collections.abc import Callable

import trio

from tempo import errors, limits
from tempo.engine.commandlog import Answer, Intake, Listener, Waiter
from tempo.engine.commands import Command
from tempo.engine.storage_guard import StorageGuard
from tempo.engine.store import Changes, Outcome, Store
from tempo.metrics import COUNT_BUCKETS, Histogram


class Committer:
    """The `CommandLog` of a node alone (engine/commandlog.py)."""

    def __init__(self, store: Store):
        self.store = store
        self._wake = trio.Event()
        self.listeners: list[Listener] = []
        self.batches_committed = 0
        self.commands_committed = 0
        self.batch_commands = Histogram(COUNT_BUCKETS)
        self.storage = StorageGuard()
        self._intake = Intake(self.storage, self._wake_up)
        # When the batch being written was taken (trio time), for readiness.
        self._batch_taken_at_s: float | None = None
        # Claims before results: until when workers claim a backlog (trio
        # time; None: they do not), since when results have waited for
        # their claims, and until when the loop waits with only results.
        self._claim_backlog_until: Callable[[], float | None] | None = None
        self._results_held_since_s: float | None = None
        self._held_until_s: float | None = None

    @property
    def commands_undecodable(self) -> int:
        return self._intake.undecodable

    def _wake_up(self) -> None:
        self._wake.set()

    async def submit(self, command: Command) -> Answer:
        return await self._intake.submit(command)

    def claims_first(self, claim_backlog_until: Callable[[], float | None]) -> None:
        """Claims before results (docs/semantics.md "Claims before
        results"): while `claim_backlog_until()` (the dispatcher's
        `Dispatcher.claim_backlog_until`) says workers claim a backlog of
        due runs, a batch takes the claims waiting and leaves the results
        (and what came after them) for a later one, so a run due is
        handed out before the bookkeeping of runs that ended. Results wait
        `limits.results_wait_for_claims_ms` at most at a stretch; closing
        writes them all."""
        self._claim_backlog_until = claim_backlog_until

    def _results_wait_until(self) -> float | None:
        """Until when the batch leaves results for claims (trio time);
        None: they go now."""
        if self._claim_backlog_until is None or self._intake.closing:
            return None
        backlog_until = self._claim_backlog_until()
        now_s = trio.current_time()
        if backlog_until is None or backlog_until <= now_s:
            self._results_held_since_s = None
            return None
        held_max_s = limits.results_wait_for_claims_ms / 1000
        if self._results_held_since_s is None:
            self._results_held_since_s = now_s
        elif now_s - self._results_held_since_s >= held_max_s:
            self._results_held_since_s = None  # they go now; a new stretch starts after them
            return None
        return min(backlog_until, self._results_held_since_s + held_max_s)

    def close(self) -> None:
        """Refuses new commands; `run` returns once the pending ones commit."""
        self._intake.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        index = self.store.applied_index()
        task_status.started()
        while True:
            with trio.CancelScope(deadline=self._wait_deadline()) as waiting:
                await self._wake.wait()
            if waiting.cancelled_caught and self.storage.refused is not None:
                await self._probe()
                continue
            self._held_until_s = None
            intake = self._intake
            if not intake.pending:
                if intake.closing:
                    return
                self._wake = trio.Event()
                continue
            batch = self._take()
            if not batch:
                continue
            if not intake.pending and not intake.closing:
                self._wake = trio.Event()
            if self.storage.refused is not None and not self.storage.retry_due:
                # Queued while the batch before failed: no new try this soon.
                self.storage.refused_commands += len(batch)
                for _, waiter in batch:
                    waiter.finish(self.storage.refused.again())
                continue
            if await self._commit(index + 1, batch):
                index += 1

    def _wait_deadline(self) -> float:
        """Until when the loop waits for a command (trio time)."""
        if self.storage.refused is not None:
            # No batch came to try again by the time one may: a probe
            # does, so writes resume (and /readyz says so) by themselves.
            return self.storage.retry_at
        if self._held_until_s is not None:
            # Only results wait, for claims: until a command comes, the
            # backlog ends, or they waited long enough.
            return self._held_until_s
        return math.inf

    def _take(self) -> list[tuple[Command, Waiter]]:
        """The next batch; empty when only results (and what came after
        them) wait for claims, until `_held_until_s` at most or the next
        command."""
        held_until_s = self._results_wait_until()
        batch = self._intake.take(limits.commit_batch_commands_max, hold_results=held_until_s is not None)
        if not self._intake.results_left:
            self._results_held_since_s = None  # none left behind: no stretch
        if not batch:
            self._held_until_s = held_until_s
            if not self._intake.closing:
                self._wake = trio.Event()  # wait for a command, or the deadline
        return batch

    async def _commit(self, index: int, batch: list[tuple[Command, Waiter]]) -> bool:
        # Checked as a cluster's leader checks an entry before it proposes
        # it (`Intake.checked`), so a command no node could apply is
        # answered 400 here too, never handed to apply.
        batch, _ = self._intake.checked(batch)
        if not batch:
            return False
        self._batch_taken_at_s = trio.current_time()
        try:
            return await self._write(index, batch)
        finally:
            self._batch_taken_at_s = None

    def stalled(self) -> str | None:
        """Why this node is not ready: a batch has been written for
        `limits.progress_stall_s` or more without committing (docs/operations.md
        "Readiness and health"); None otherwise."""
        if self._batch_taken_at_s is None:
            return None
        stalled_s = trio.current_time() - self._batch_taken_at_s
        if stalled_s < limits.progress_stall_s:
            return None
        return f"no progress for {stalled_s:.1f} s: a batch is being written, {len(self._intake.pending)} writes waiting"

    async def _write(self, index: int, batch: list[tuple[Command, Waiter]]) -> bool:
        # No log to write: apply takes the commands themselves, not their encoding.
        commands = [command for command, _ in batch]
        try:
            try:
                outcomes, changes = await self._apply(index, commands)
            except errors.StorageFault as fault:
                # Nothing was written and no transaction is open: the map
                # may grow now, and then the batch goes again.
                if not (fault.map_full and self.store.grow_map()):
                    raise
                outcomes, changes = await self._apply(index, commands)
        except errors.Overloaded as failure:
            if isinstance(failure, errors.StorageFault):
                self.storage.failed(failure, len(batch))
            for _, waiter in batch:
                waiter.finish(failure.again() if isinstance(failure, errors.StorageFault) else failure)
            return False
        self.storage.succeeded()
        assert len(outcomes) == len(batch)
        # Before any request is answered, so a claim can never see a run the
        # dispatcher has not heard of.
        for listener in self.listeners:
            if (slices := listener(changes)) is not None:
                await slices
        for (_, waiter), outcome in zip(batch, outcomes, strict=True):
            waiter.finish(outcome)
        self.batches_committed += 1
        self.commands_committed += len(batch)
        self.batch_commands.observe(len(batch))
        return True

    async def _probe(self) -> None:
        """Whether writes fit again, with no batch to try: the map grows if
        it was full and the disk has room, then `Store.probe`."""
        refused = self.storage.refused
        assert refused is not None
        if refused.map_full:
            self.store.grow_map()
        fault = await trio.to_thread.run_sync(self.store.probe)
        if fault is None:
            self.storage.probed()
        else:
            self.storage.failed(fault)

    async def _apply(self, index: int, commands: list[Command]) -> tuple[list[Outcome], Changes]:
        """`Store.apply_commands` on a worker thread, while the trio thread
        serves everything else (docs/operations.md "Event-loop lag").

        The trio thread used to wait, blocked, until apply reached its
        commit, so that the two threads would not trade the GIL for each
        row py-lmdb puts. That held the event loop for as long as apply
        ran, 15-250 ms for a batch of 1,000 creates, and bench/create.py
        did not bear the saving out: taken in turns, batches of 1,000 went
        59,000-66,000 jobs/s with the wait and 72,000-76,000 without it,
        single creates 1,460-1,640/s with it and 1,390-1,520/s without.
        As with any `to_thread` call, the batch's answer is awaited even
        when the caller is cancelled: the transaction cannot be called off
        once it started. One batch commits at a time (`run` awaits each):
        LMDB's one writer."""
        return await trio.to_thread.run_sync(self.store.apply_commands, index, commands)
