"""Who claims a backlog of due runs, for claims before results
(docs/semantics.md "Claims before results"; engine/commit.py
`Committer.claims_first`).

Results wait for claims only while a claim may still come. A worker whose
claim left runs due in its queues is expected to claim again within
`limits.claim_backlog_gap_ms`, unless it is now waiting for the answer to
its own results: a client that reports, then claims (the simplest loop)
claims again only once its results are answered, so holding them would
hold its next claim too. A worker seen claiming while a results call of its
runs waits (the worker library reports and claims at once) is expected to
claim whatever it reports.

No I/O and no clock: the dispatcher passes trio time in, and names the
worker of a results call by the lease of its runs.
"""

from collections import Counter

from tempo import limits
from tempo.engine.commands import Result
from tempo.engine.dispatch_state import Lease


def worker_of(leases: dict[tuple[str, int], Lease], results: list[Result]) -> str | None:
    """The worker that claimed the first of `results`' runs still leased
    at its attempt (`Lease.worker`); None if none is, or it is not known."""
    for result in results:
        lease = leases.get((result.job_id, result.nominal_ms))
        if lease is not None and lease.attempt == result.attempt:
            return lease.worker or None
    return None


class ClaimBacklog:
    """The workers that claim a backlog, and until when results wait."""

    def __init__(self) -> None:
        # When a claim of each worker last left runs due in its queues
        # (trio time); dropped once `limits.claim_backlog_gap_ms` old.
        self._marked: dict[str, float] = {}
        # Results calls waiting for their answer, by the worker of their runs.
        self._reporting: Counter[str] = Counter()
        # Workers seen claiming while a results call of theirs waited,
        # oldest first, at most `limits.claim_backlog_workers_kept_max`.
        self._claim_while_reporting: dict[str, None] = {}

    def claiming(self, worker: str) -> None:
        """A claim of `worker` begins."""
        if not self._reporting[worker]:
            return
        kept = self._claim_while_reporting
        kept.pop(worker, None)
        kept[worker] = None
        if len(kept) > limits.claim_backlog_workers_kept_max:
            del kept[next(iter(kept))]

    def mark(self, worker: str, now_s: float) -> None:
        """A claim of `worker` took runs and left runs due in its queues.
        Marks past the gap go when the committer asks `until`, and here
        too once there are many (a cluster's leader never asks)."""
        self._marked[worker] = now_s
        if len(self._marked) > limits.claim_backlog_workers_kept_max:
            self.until(now_s)

    def reporting(self, worker: str) -> None:
        """A results call of `worker`'s runs waits for its answer."""
        self._reporting[worker] += 1

    def reported(self, worker: str) -> None:
        """That results call was answered (or failed)."""
        left = self._reporting[worker] - 1
        if left > 0:
            self._reporting[worker] = left
        else:
            del self._reporting[worker]

    def until(self, now_s: float) -> float | None:
        """Until when results wait for claims (trio time): the gap after the
        last mark of a worker that may still claim; None if none may."""
        gap_s = limits.claim_backlog_gap_ms / 1000
        latest_s: float | None = None
        for worker, marked_s in list(self._marked.items()):
            if marked_s + gap_s <= now_s:
                del self._marked[worker]
            elif self._reporting[worker] and worker not in self._claim_while_reporting:
                continue  # it claims again once its results are answered
            elif latest_s is None or marked_s > latest_s:
                latest_s = marked_s
        return None if latest_s is None else latest_s + gap_s
