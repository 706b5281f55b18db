"""Records as stored in LMDB (MessagePack, array-like for size and speed).

These are the engine's own shapes, apart from the API's: the API can grow
without a storage migration, and a stored record never carries HTTP concerns.
New fields are appended with defaults so older records still decode.

`gc=False`: the dispatcher holds a job and a run for every run in its memory
(100,000 in a big spike), and apply decodes thousands a batch; tracked by
Python's cycle collector, each full collection walked them all. These
records hold only decoded data (a payload is decoded JSON), so no reference
cycle can run through them, which is what `gc=False` asks (msgspec docs,
"Disabling Garbage Collection").
"""

from typing import Any, Literal

import msgspec

JobState = Literal["active", "paused", "completed"]
RunStatus = Literal["waiting", "claimed", "done", "failed", "cancelled"]


class Schedule(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Exactly one of `at_ms`, `cron`, `every_s` is set (checked at the edge)."""

    at_ms: int | None = None
    cron: str | None = None
    timezone: str | None = None
    every_s: int | None = None
    start_at_ms: int | None = None

    @property
    def repeating(self) -> bool:
        return self.at_ms is None


class Job(msgspec.Struct, array_like=True, gc=False):
    id: str
    owner: str
    name: str | None
    target: str
    payload: Any
    schedule: Schedule
    max_attempts: int
    backoff_s: tuple[int, ...]
    lease_s: int
    jitter_s: int
    state: JobState
    created_at_ms: int
    request_key: str | None
    # The slot of the job's scheduled waiting (or cancelled-by-pause) run, and
    # the waiting run's due time; None when the schedule has nothing waiting.
    slot_ms: int | None
    next_run_at_ms: int | None


class Run(msgspec.Struct, array_like=True, gc=False):
    job_id: str
    nominal_ms: int
    due_ms: int
    status: RunStatus
    attempt: int = 0
    worker: str | None = None
    lease_expires_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    output: str | None = None
    error: str | None = None
    triggered: bool = False


class Event(msgspec.Struct, array_like=True):
    type: str
    at_ms: int
    job_id: str
    run_id: str | None
    detail: dict[str, Any]


class RequestKeyEntry(msgspec.Struct, array_like=True):
    job_id: str
    body_hash: bytes
