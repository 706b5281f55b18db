"""Writes refused while storage is full or failing (docs/operations.md
"Disk full"): a state of the node, not the end of its process.

A write that fails for want of space (`errors.StorageFault`: the disk
is full, the LMDB map is full and cannot grow, the data file's writes fail)
starts the state. While it lasts, the node's writer (the single node's
committer, the replica loop) answers new writes `507` at once, reads are
served as before, and `/readyz` and `/metrics` say that writes are refused.
The writer tries again by itself after a backoff that doubles from
`limits.storage_retry_s_min` to `limits.storage_retry_s_max`; the first write
that commits ends the state. One log line when it starts, one when it ends,
never one per request.

A probe (a small transaction the node alone writes when no batch comes)
that commits lets writes be taken and `/readyz` answer ready again, but it
does not end the episode in the log: it needs less room than a batch, and
a disk with room for the probe only would log a resume, then each batch's
refusal as a new episode, and the real resume not at all. The episode ends,
logged, when a write commits; a batch refused after a probe fitted is the
same episode, not logged again.
"""

import logging

import trio

from tempo import errors, limits

log = logging.getLogger("tempo.storage")


class StorageGuard:
    def __init__(self) -> None:
        # Why writes are refused now; None while they are not.
        self.refused: errors.StorageFault | None = None
        self.retry_at = 0.0  # trio time from which the next try may go
        self.backoff_s = limits.storage_retry_s_min
        self._refused_since = 0.0
        # A probe fitted since writes were refused, and no write has
        # committed yet: the episode is not over in the log.
        self._probed = False
        # For /metrics: times writes became refused, and commands refused.
        self.refusals = 0
        self.refused_commands = 0

    @property
    def retry_due(self) -> bool:
        return self.refused is not None and trio.current_time() >= self.retry_at

    def check(self) -> None:
        """Raises the fault while writes are refused and no try is due:
        such a write is answered at once instead of waiting to fail."""
        if self.refused is not None and trio.current_time() < self.retry_at:
            self.refused_commands += 1
            raise self.refused.again()

    def failed(self, fault: errors.StorageFault, commands: int = 0) -> None:
        """A write of `commands` commands (or a probe, 0) failed with `fault`."""
        now = trio.current_time()
        self.refused_commands += commands
        if self.refused is None and not self._probed:
            self.refusals += 1
            self._refused_since = now
            self.backoff_s = limits.storage_retry_s_min
            log.error(
                "writes refused: %s; reads go on, and writes are tried again by themselves (every %g s at most)",
                fault.detail, limits.storage_retry_s_max,
            )
        else:
            self.backoff_s = min(2 * self.backoff_s, limits.storage_retry_s_max)
        self.refused = fault
        self.retry_at = now + self.backoff_s

    def probed(self) -> None:
        """A probe committed: writes are taken again, and the next one shows
        whether they fit; the episode stays open in the log until one does."""
        if self.refused is None:
            return
        self.refused = None
        self._probed = True

    def succeeded(self) -> None:
        """A write committed: writes are no longer refused."""
        if self.refused is None and not self._probed:
            return
        log.warning(
            "writes resume: storage has room again (refused for %.1f s)", trio.current_time() - self._refused_since
        )
        self.refused = None
        self._probed = False
        self.backoff_s = limits.storage_retry_s_min
