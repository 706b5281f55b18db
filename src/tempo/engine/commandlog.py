"""The commit seam: where a command becomes durable, whatever writes it.

A node has one `CommandLog`. A node alone has the group committer
(engine/commit.py `Committer`); a cluster member has the replica loop
(node/replica.py `Replica`), which commits through Raft. The job service,
the dispatcher, retention and the API are written against this protocol
only; the composition root (server.py) is the one place that picks which.

Both take commands the same way (`Intake`): a command waits in a bounded
queue with a `Waiter`, the loop writes what waits as one batch, and the
waiter is answered once the batch is durable and applied here, or fails.
"""

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from tempo import errors, limits
from tempo.engine.commands import ClaimRuns, Command, ReportResults, decode_entry, encode_entry
from tempo.engine.records import Corrupt
from tempo.engine.storage_guard import StorageGuard
from tempo.engine.store import Changes, Outcome
from tempo.metrics import Histogram

log = logging.getLogger("tempo.commit")

# What a command's waiter is answered: the outcome of its command (a list
# for a batch command), or the failure that kept it from committing.
Answer = Outcome | list[Outcome]
# Called on the trio thread with each applied entry's `Changes`, in log
# order, before any request of that entry is answered; one that answers an
# awaitable (it works in slices) is awaited.
Listener = Callable[[Changes], Awaitable[None] | None]


class CommandLog(Protocol):
    """Commands in, each answered once it is durable and applied here.

    `submit` raises `errors.ShuttingDown` once `close` was called,
    `errors.StorageFault` while `storage` refuses writes, `errors.Overloaded`
    when `limits.commit_pending_max` commands wait already, and
    `errors.NotLeader` on a cluster member that does not lead. `run` is the
    loop that writes; after `close` it returns once what was taken is
    written (the replica loop runs until cancelled)."""

    @property
    def listeners(self) -> list[Listener]: ...

    @property
    def storage(self) -> StorageGuard: ...

    @property
    def batches_committed(self) -> int:
        """Batches written (one log entry each), of the commands submitted here."""
        ...

    @property
    def commands_committed(self) -> int:
        """Commands submitted here and written."""
        ...

    @property
    def commands_undecodable(self) -> int:
        """Commands refused before they were proposed (`Intake.checked`)."""
        ...

    @property
    def batch_commands(self) -> Histogram:
        """Commands per batch: per group-commit batch alone, per log entry
        this node proposed in a cluster."""
        ...

    async def submit(self, command: Command) -> Answer: ...

    def stalled(self) -> str | None:
        """Why writes here make no progress, or None: work has been pending
        for `limits.progress_stall_s` without being applied (/readyz)."""
        ...

    def close(self) -> None: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...


class Waiter:
    """One submitted command's answer, set once by the loop that writes it."""

    __slots__ = ("done", "outcome")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.outcome: Answer | BaseException | None = None

    def finish(self, outcome: Answer | BaseException | None) -> None:
        self.outcome = outcome
        self.done.set()

    async def answer(self) -> Answer:
        """Waits for the answer; a failure is raised.

        Nothing is called off if the caller is cancelled meanwhile: a shield
        would add nothing, since the write is not undone either way."""
        await self.done.wait()
        if isinstance(self.outcome, BaseException):
            # One failure object is shared by a batch's waiters: raise it
            # without the traceback another waiter's raise left on it.
            raise self.outcome.with_traceback(None)
        return self.outcome


class Intake:
    """The commands waiting for the next batch, in arrival order, at most
    `limits.commit_pending_max`; `wake` tells the writing loop that one came."""

    def __init__(self, storage: StorageGuard, wake: Callable[[], None]) -> None:
        self.storage = storage
        self.wake = wake
        self.pending: list[tuple[Command, Waiter]] = []
        self.closing = False
        # Whether the last `take` left results waiting (`hold_results`).
        self.results_left = False
        # Commands `checked` refused: the log's decoder would refuse
        # them, so no node could apply them (for /metrics).
        self.undecodable = 0

    async def submit(self, command: Command) -> Answer:
        return await self.enqueue(command).answer()

    def enqueue(self, command: Command) -> Waiter:
        """`submit` without the wait: the command queued, its waiter to
        read once the loop answered it (a synchronous driver's way in)."""
        if self.closing:
            raise errors.ShuttingDown("the node is shutting down")
        self.storage.check()
        if len(self.pending) >= limits.commit_pending_max:
            raise errors.Overloaded("too many writes waiting; retry shortly")
        waiter = Waiter()
        self.pending.append((command, waiter))
        self.wake()
        return waiter

    def close(self) -> None:
        """Refuses new commands; those waiting still go."""
        self.closing = True
        self.wake()

    def take(self, count: int, *, hold_results: bool = False) -> list[tuple[Command, Waiter]]:
        """The first `count` waiting commands, out of the queue. With
        `hold_results` (claims before results, engine/commit.py
        `Committer.claims_first`), the first result waiting and every
        command after it stay, in their order, except the claims among
        them, which go: an expiry of a lease (or any other command) never
        passes a result that came before it."""
        pending = self.pending
        first = None
        if hold_results:
            first = next((i for i, (command, _) in enumerate(pending) if type(command) is ReportResults), None)
        self.results_left = first is not None
        if first is None:
            batch = pending[:count]
            del pending[: len(batch)]
            return batch
        batch = pending[: min(first, count)]
        kept = pending[len(batch) :]
        del pending[:]
        for item in kept:
            if type(item[0]) is ClaimRuns and len(batch) < count:
                batch.append(item)
            else:
                pending.append(item)
        return batch

    def checked(self, batch: list[tuple[Command, Waiter]]) -> tuple[list[tuple[Command, Waiter]], bytes]:
        """`batch` (from `take`), less the commands that the log's decoder
        refuses, and the log entry of the rest (docs/operations.md "Readiness and health").

        Every node decodes an entry with `decode_entry` before it applies
        it, a follower as soon as it arrives (net/peer.py); its types bound
        what keys and records hold (records.py `Ms`: no instant before
        1970). A leader that appended an entry its followers refuse would
        stop every write of the cluster after it, so the batch is decoded
        here, by that one decoder, before it is proposed (or, on a node
        alone, applied). A command it refuses slipped past the checks of
        the edge: it is answered 400, logged and counted, and the rest go
        on. Cost: one decode of the entry, some 0.15-1.4 µs a command
        (docs/operations.md "Readiness and health"), and on a node alone its
        encoding too; command by command only when one fails."""
        data = encode_entry([command for command, _ in batch])
        try:
            decode_entry(data)
        except Corrupt:
            batch = [item for item in batch if self._decodes(*item)]
            data = encode_entry([command for command, _ in batch])
            try:
                decode_entry(data)
            except Corrupt as exc:  # each decodes alone, not together: refuse them all
                for command, waiter in batch:
                    self._refuse(command, waiter, str(exc))
                batch, data = [], encode_entry([])
        return batch, data

    def _decodes(self, command: Command, waiter: Waiter) -> bool:
        try:
            decode_entry(encode_entry([command]))
        except Corrupt as exc:
            self._refuse(command, waiter, str(exc))
            return False
        return True

    def _refuse(self, command: Command, waiter: Waiter, problem: str) -> None:
        self.undecodable += 1
        if self.undecodable == 1 or self.undecodable % 100 == 0:
            log.error(
                "refused a %s command before it was proposed (%d so far): %s; the request's checks let through "
                "a value no node can store", type(command).__name__, self.undecodable, problem,
            )
        waiter.finish(errors.Invalid.at("", f"a value in this request is outside what tempo stores ({problem})"))

    def fail(self, failure: BaseException) -> None:
        """Answers every waiting command `failure`."""
        for _, waiter in self.pending:
            waiter.finish(failure)
        self.pending.clear()
