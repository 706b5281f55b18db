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

from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from tempo import errors, limits
from tempo.engine.commands import Command
from tempo.engine.storage_guard import StorageGuard
from tempo.engine.store import Changes, Outcome
from tempo.metrics import Histogram

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
    def batch_commands(self) -> Histogram:
        """Commands per batch: per group-commit batch alone, per log entry
        this node proposed in a cluster."""
        ...

    async def submit(self, command: Command) -> Answer: ...

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

    def take(self, count: int) -> list[tuple[Command, Waiter]]:
        """The first `count` waiting commands, out of the queue."""
        batch = self.pending[:count]
        del self.pending[: len(batch)]
        return batch

    def fail(self, failure: BaseException) -> None:
        """Answers every waiting command `failure`."""
        for _, waiter in self.pending:
            waiter.finish(failure)
        self.pending.clear()
