"""Operating errors, each with the problem type docs/api.md names for it.

net/ maps these types to HTTP statuses in one table; nothing matches on
message strings.
"""

from typing import Self


class TempoError(Exception):
    """Base of every error tempo answers a request with. A subclass names
    its problem type in its header, `class NotFound(TempoError,
    type="not_found")`, or keeps its base's."""

    type = "error"

    def __init_subclass__(cls, type: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if type is not None:
            cls.type = type

    def __init__(self, detail: str = "", errors: list[tuple[str, str]] | None = None):
        super().__init__(detail)
        self.detail = detail
        # (loc, msg) pairs, loc as docs/api.md spells it: `schedule.cron`, `""`.
        self.errors = errors or []

    @classmethod
    def at(cls, loc: str, msg: str) -> Self:
        """The error for one field, `loc` as docs/api.md spells it."""
        return cls(f"{loc or 'body'}: {msg}", [(loc, msg)])


class Invalid(TempoError, type="validation"): ...


class TooLarge(TempoError, type="too_large"): ...


class HeadersTooLarge(TooLarge):
    """The request line and headers are over the bound (HTTP 431)."""


class RequestTimeout(TempoError, type="request_timeout"):
    """The request body did not arrive in time (a stalled or very slow client)."""


class NotFound(TempoError, type="not_found"): ...


class RequestKeyReused(TempoError, type="request_key_reused"): ...


class ClaimKeyReused(TempoError, type="claim_key_reused"):
    """A claim key recorded for another worker or another set of queues."""


class StaleAttempt(TempoError, type="stale_attempt"): ...


class VersionMismatch(TempoError, type="version_mismatch"):
    """An `If-Match` that names another version of the job than its current one."""


class RunFinished(TempoError, type="run_finished"):
    """A cancel of a run that finished already (docs/semantics.md
    "Cancelling a run")."""


class Conflict(TempoError, type="conflict"): ...


class HasDependents(TempoError, type="has_dependents"):
    """A delete of a job that other jobs depend on (docs/semantics.md
    "Dependencies"); its detail names them (at most
    `limits.deps_shown_max`)."""


class InUse(TempoError, type="in_use"):
    """A delete of a calendar that jobs, or other calendars, still use."""


class Unauthorized(TempoError, type="unauthorized"): ...


class Forbidden(TempoError, type="forbidden"): ...


class MethodNotAllowed(TempoError, type="method_not_allowed"): ...


class RateLimited(TempoError, type="rate_limited"):
    """The owner is over a rate limit; `retry_after_s` (whole seconds, at
    least 1) is when the request would fit."""

    def __init__(self, detail: str, retry_after_s: int):
        assert retry_after_s >= 1, "retry_after_s"
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class Overloaded(TempoError, type="overloaded"):
    """The node cannot take more work now; the client retries after a pause."""


class StorageFault(Overloaded, type="insufficient_storage"):
    """This node could not write: an I/O error, the disk or the map full, out
    of memory. It belongs to the machine, not to a command: nothing of the
    batch was applied (its transaction was aborted), and the entry is applied
    again later, never skipped. `engine.store.Store.write` raises it for every
    such failure; a command's own faults are outcomes, never this.

    An `Overloaded`, so whatever retries an overloaded write later retries
    this one too; the node refuses writes meanwhile and tries again by
    itself (engine/storage_guard.py)."""

    def __init__(self, detail: str, *, map_full: bool = False):
        super().__init__(detail)
        # The LMDB map is full (the disk may have room for it to grow).
        self.map_full = map_full

    def again(self) -> "StorageFault":
        """The same fault, as a new exception for one more request: one
        object raised by many tasks would carry their tracebacks and
        contexts between them."""
        return StorageFault(self.detail, map_full=self.map_full)


class NotLeader(TempoError, type="not_leader"):
    """This node stopped leading while the request waited; ask the cluster again."""


class NoQuorum(TempoError, type="no_quorum"):
    """No leader is known (an election is under way, or a majority is down)."""


class ShuttingDown(TempoError, type="shutting_down"): ...
