"""History retention on the leader (docs/operations.md "Retention").

Finished runs and events live in history buckets, one per UTC day (engine/tables/writes.py `bucket_for`).
While the node leads, this service checks every `limits.retention_check_s`
whether a bucket has aged past the retention period and, if one has, proposes
one `DropHistory` command: the time comes from this node's clock, and every
replica applies the same drop. Nothing is proposed while nothing is due, so a
quiet cluster's log does not grow by one entry a minute.
"""

import contextlib
import logging
from collections.abc import Callable

import trio

from tempo import clock, errors, limits
from tempo.engine.commandlog import CommandLog
from tempo.engine.commands import DropHistory
from tempo.engine.store import Store

log = logging.getLogger("tempo.retention")


def before_day(now_ms: int, retention_days: int) -> int:
    """The first day whose bucket is kept: every day before it ended at least
    `retention_days` ago, so a run is kept for the period and dropped within
    a day after it."""
    assert limits.retention_days_min <= retention_days <= limits.retention_days_max
    return (now_ms - retention_days * limits.day_ms) // limits.day_ms


class Retention:
    def __init__(
        self,
        store: Store,
        committer: CommandLog,
        *,
        retention_days: int = limits.retention_days_default,
        now_ms: Callable[[], int] | None = None,
        skew_ms: int = 0,
    ):
        """`committer`: the node's command log, the single node's committer
        or the cluster replica. `skew_ms` (tests): how far ahead of
        scheduler time the period is counted; the command is still stamped
        with scheduler time, since every node's clock takes the stamps it
        applies as a floor (server.py `_observe_stamps`)."""
        assert limits.retention_days_min <= retention_days <= limits.retention_days_max
        self.store = store
        self.committer = committer
        self.retention_days = retention_days
        self.now_ms = now_ms or clock.Clock().now_ms  # scheduler time (clock.py)
        self.skew_ms = skew_ms
        self.buckets_dropped = 0

    async def drop_due(self) -> bool:
        """Proposes a drop if a bucket is due; answers whether one was dropped."""
        at_ms = self.now_ms()
        keep_from = before_day(at_ms + self.skew_ms, self.retention_days)
        due = [day for day in self.store.history_days() if day < keep_from]
        if not due:
            return False
        await self.committer.submit(DropHistory(at_ms, keep_from))
        self.buckets_dropped += len(due)
        log.info("dropped %d day(s) of run history, up to %s", len(due), clock.iso_from_ms(keep_from * limits.day_ms))
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Checks at once (a node that was down or just became leader) and then
        every `limits.retention_check_s`."""
        task_status.started()
        while True:
            with contextlib.suppress(errors.Overloaded):  # nothing written; the next round tries again
                await self.drop_due()
            await trio.sleep(limits.retention_check_s)
