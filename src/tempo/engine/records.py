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

from typing import Annotated, Any, Generic, Literal, TypeVar

import msgspec
from msgspec import Meta

from tempo import ids, limits

JobState = Literal["active", "paused", "completed"]
# `missed`: a history row for a range of slots that got no run (`Missed`).
# `skipped`: a slot the job's overlap policy did not run (`Run.reason`).
RunStatus = Literal["waiting", "claimed", "done", "failed", "cancelled", "missed", "skipped"]
# Why a run's worker is to stop: its owner asked (`POST /v1/runs/{id}/cancel`),
# or the attempt's timeout passed.
RunCancel = Literal["requested", "timeout"]
# Bounds checked when a record or command is decoded, never when one is made
# in code: bytes that decode outside them are corrupt (see `Corrupt`).
Ms = Annotated[int, Meta(ge=0, le=limits.time_ms_max)]  # UNIX milliseconds, as keys hold them
# The nominal time a run ID carries (ids.py: 5 bits a digit). Commands take it from
# a client's run ID, so it is not bounded by `Ms`.
Nominal = Annotated[int, Meta(ge=0, lt=1 << (5 * ids.NOMINAL_CHARS))]
Count = Annotated[int, Meta(ge=0)]
JobId = Annotated[str, Meta(min_length=ids.JOB_ID_CHARS, max_length=ids.JOB_ID_CHARS)]  # a job ID, as keys.py takes it


class Schedule(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Exactly one of `at_ms`, `cron`, `every_s` is set (checked at the edge)."""

    # No time bounds here: they are not keys, and `start_at_ms` may be
    # before 1970 (a past start, docs/api.md).
    at_ms: int | None = None
    cron: str | None = None
    timezone: str | None = None
    every_s: Annotated[int, Meta(ge=1)] | None = None
    start_at_ms: int | None = None
    # A cron schedule's DST policy (schedule.py); older records have none,
    # which is this default, the only behaviour there was.
    dst_gap: Literal["shift", "skip"] = "shift"
    dst_repeat: Literal["first", "last", "both"] = "first"
    # End conditions of a repeating schedule (docs/semantics.md "End
    # conditions"): no slot after `end_at_ms`; at most `max_runs` slots
    # run (`Job.runs_done` counts them). None: no such bound.
    end_at_ms: int | None = None
    max_runs: Annotated[int, Meta(ge=1)] | None = None

    @property
    def repeating(self) -> bool:
        return self.at_ms is None


NotifyEvent = Literal["run.failed", "job.completed", "job.recovered"]


class Notify(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Where a job's notifications go and which events send one."""

    url: str
    events: tuple[NotifyEvent, ...]


CatchupPolicy = Literal["latest", "all", "none"]
MissedReason = Literal["outside_window", "policy", "paused"]
# `dependency`: a gated slot whose parents had not ended (docs/semantics.md "Dependencies");
# `calendar`: a slot its calendar left out (docs/semantics.md "Calendars").
SkippedReason = Literal["overlap", "dependency", "calendar"]
# What a repeating job does with a slot that comes due while an earlier run
# of it is running (docs/semantics.md "Overlap"); a job's `overlap` None is
# `allow`, the behaviour of records from before the field.
OverlapPolicy = Literal["allow", "skip", "buffer_one", "buffer_all", "cancel_other"]


class Catchup(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """What a job does with slots it missed (docs/semantics.md "Catch-up
    after missed slots"); a job without one has the default: `latest`,
    with no window."""

    window_s: Count | None = None  # None: no window, every missed slot is in it
    policy: CatchupPolicy = "latest"
    max_runs: Annotated[int, Meta(ge=1)] = limits.catchup_runs_default


class Paused(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Who paused a job, when, and the note they left (`POST
    /v1/jobs/{id}/pause`); `by_role` None in pauses logged before it was
    kept."""

    at_ms: Ms
    by_owner: str
    by_role: str | None = None
    note: str | None = None


class JobHead(msgspec.Struct, array_like=True, gc=False):
    """The first fields of a stored `Job`, decoded alone: a `Job`'s record
    read as a `JobHead` skips the rest (array-like structs ignore trailing
    items), for the paths that need only its owner, once per run."""

    id: JobId
    owner: str


class JobStateHead(msgspec.Struct, array_like=True, gc=False):
    """A stored `Job`'s fields up to its state, the ones between kept
    undecoded (`msgspec.Raw`): what counting jobs by state reads."""

    id: str
    owner: str
    name: msgspec.Raw
    target: msgspec.Raw
    payload: msgspec.Raw
    schedule: msgspec.Raw
    max_attempts: msgspec.Raw
    backoff_s: msgspec.Raw
    lease_s: msgspec.Raw
    jitter_s: msgspec.Raw
    state: str


class Job(msgspec.Struct, array_like=True, gc=False):
    id: JobId
    owner: str
    name: str | None
    target: str
    payload: Any
    schedule: Schedule
    max_attempts: Annotated[int, Meta(ge=1)]
    backoff_s: Annotated[tuple[Count, ...], Meta(min_length=1)]
    lease_s: Annotated[int, Meta(ge=1)]
    jitter_s: Count
    state: JobState
    created_at_ms: Ms
    request_key: str | None
    # The slot of the job's scheduled waiting (or cancelled-by-pause) run, and
    # the waiting run's due time; None when the schedule has nothing waiting.
    slot_ms: Ms | None
    next_run_at_ms: Ms | None
    # Its own notification setting; None: the owner's default (config).
    notify: Notify | None = None
    # Runs of the job that failed for good since the last one that ended
    # done: a `job.recovered` event is written when one ends done after them.
    failed_runs: Count = 0
    # None: the default policy (`Catchup()`), as in records from before it.
    catchup: Catchup | None = None
    # The last slot an `all` catch-up decided to run: up to it, a claim of
    # the slot run makes the next slot's run even when it is past; after
    # it, the schedule goes on after `catchup_decided_ms`, the latest slot
    # that catch-up decided on (the ones between are recorded missed).
    catchup_until_ms: Ms | None = None
    catchup_decided_ms: Ms | None = None
    # Starts at 1 and grows by one with each change (`PATCH`): the job's
    # ETag. Records written before it existed are version 1.
    version: Annotated[int, Meta(ge=1)] = 1
    # Key -> value, sorted by key (docs/api.md "Labels"); None: no label.
    # Indexed in the `jobs_by_label` table (engine/tables/writes.py `relabel`).
    labels: dict[str, str] | None = None
    # Bounds one attempt of each run, counted from its claim, whatever
    # heartbeats say (docs/semantics.md "Run timeouts"); None: no bound
    # but the lease.
    timeout_s: Annotated[int, Meta(ge=1)] | None = None
    # Set by a pause, cleared when the job leaves `paused`.
    paused: Paused | None = None
    # Slots of a repeating job whose run was claimed (the first claim of
    # each; retries, triggered and backfill runs are not counted): what
    # `schedule.max_runs` is held to (docs/semantics.md "End conditions").
    runs_done: Count = 0
    # The overlap policy (docs/semantics.md "Overlap"); None: `allow`, so a
    # claim of an `allow` job reads nothing more than it did before.
    overlap: OverlapPolicy | None = None
    # The latest slot of the job that may hold a run already, apart from
    # the run of its current slot and those before it: a run a pause, a
    # patch or a cancel ended without running, or a triggered run (which
    # takes the millisecond it was made at). The schedule's next slot at or
    # before it is checked against the job's runs, open and finished, so
    # one slot never gets two runs; after it, no run can be there, and the
    # claim of a slot run reads no history. None: no such slot.
    taken_until_ms: Ms | None = None


class Attempt(msgspec.Struct, array_like=True, gc=False):
    """One ended attempt of a run: when it was claimed and by whom, when it
    ended, and how (a result's `ok` and texts; an expired lease is not ok,
    with the error "lease expired")."""

    claimed_ms: Ms | None
    worker: str | None
    ended_ms: Ms
    ok: bool
    output: str | None = None
    error: str | None = None


class RetryKept(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A retry policy as a claimed attempt holds it (`Run.retry_kept`)."""

    max_attempts: Annotated[int, Meta(ge=1)]
    backoff_s: Annotated[tuple[Count, ...], Meta(min_length=1)]


class Run(msgspec.Struct, array_like=True, gc=False):
    job_id: JobId
    nominal_ms: Ms
    due_ms: Ms
    status: RunStatus
    attempt: Count = 0
    worker: str | None = None
    lease_expires_ms: Ms | None = None
    started_ms: Ms | None = None
    finished_ms: Ms | None = None
    output: str | None = None
    error: str | None = None
    triggered: bool = False
    # Every ended attempt, oldest first, at most `limits.run_attempts_kept_max`.
    # A tuple: most runs have none, and the empty tuple is one shared object,
    # so decoding a run allocates no container for them (fewer collections
    # of the cycle collector on the hot path than a list each).
    attempts: tuple[Attempt, ...] = ()
    backfill: bool = False  # made by `POST /v1/jobs/{id}/backfill`
    # The job's retry policy when the claimed attempt was claimed, kept by a
    # patch that changed it since (docs/semantics.md "Changing a job"): the
    # attempt's end decides its retry by it. None: the job's own.
    retry_kept: RetryKept | None = None
    # A `missed` row only (`Store.record_missed`): why its slots got no run,
    # the first slot after them (the first is `nominal_ms`) and how many
    # they are (None: too many to count, as `Missed.count`).
    # A `skipped` row's reason is `overlap` (engine/rules/overlap.py `skip`).
    reason: MissedReason | SkippedReason | None = None
    missed_until_ms: int | None = None
    missed_count: Count | None = None
    # A claimed run asked to stop (`requested`, docs/semantics.md
    # "Cancelling a run"), or a run whose last attempt ended by its
    # timeout (`timeout`): what a heartbeat naming that attempt answers.
    # A new claim clears it.
    cancel: RunCancel | None = None
    # When the claimed attempt's timeout ends it (UNIX ms), from the claim's
    # stamp and the job's `timeout_s`; None: no timeout. Replicated, so a
    # new leader holds the attempt to the same instant.
    timeout_at_ms: Ms | None = None
    # A waiting run the job's overlap policy holds back until the running
    # run ends (`buffer_one`, `buffer_all`): its due time is
    # `limits.overlap_buffered_due_ms`, past any the dispatcher loads, until
    # apply releases it (docs/semantics.md "Overlap").
    buffered: bool = False
    # A cancelled run its owner cancelled (`POST /v1/runs/{id}/cancel`),
    # not a pause or a patch: no resume or re-plan of a repeating job's
    # schedule brings it back (docs/semantics.md "Pause, resume, delete").
    owner_cancelled: bool = False


class JobOutcome(msgspec.Struct, array_like=True, gc=False):
    """What a job's runs came to (the `job_outcomes` table, keyed by job
    key): how many ended in each finished status since the job was created
    (retention does not lower them), and the last run that ended `done` or
    `failed`, in the order apply finished them."""

    done: Count = 0
    failed: Count = 0
    cancelled: Count = 0
    last_nominal_ms: Ms | None = None
    last_status: Literal["done", "failed"] | None = None
    last_attempt: Count = 0
    last_finished_ms: Ms | None = None
    last_error: str | None = None
    skipped: Count = 0  # runs the job's overlap policy skipped


class Event(msgspec.Struct, array_like=True, gc=False):
    type: str
    at_ms: Ms
    job_id: JobId
    run_id: str | None
    detail: dict[str, Any]


class EventHead(msgspec.Struct, array_like=True, gc=False):
    """A stored `Event`'s first fields, decoded alone (the detail skipped):
    what a read of one job's events looks at in each event."""

    type: str
    at_ms: int
    job_id: str


class Missed(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A contiguous range of a job's slots that got no run: the `count`
    slots in [from_ms, until_ms), from the first of them to the first slot
    after them (None: a range too long to count, docs/semantics.md)."""

    reason: MissedReason
    from_ms: int
    until_ms: int
    count: Count | None


class RequestKeyEntry(msgspec.Struct, array_like=True):
    job_id: JobId
    body_hash: bytes


class Taken(msgspec.Struct, array_like=True, gc=False):
    """One run a keyed claim took, with the attempt it took it at."""

    job_id: JobId
    nominal_ms: Nominal
    attempt: Count


class ClaimKeyEntry(msgspec.Struct, array_like=True, gc=False):
    """What a claim key took (docs/semantics.md "Idempotent claims"): kept
    until `expires_ms` (UNIX ms), when apply drops it."""

    worker: str
    queues_hash: bytes
    expires_ms: Ms
    runs: list[Taken]


class Holidays(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A calendar's public holidays, resolved to dates when it was put
    (engine/calendars.py): the country and region asked, the holidays
    library's version and the span of years resolved, and each date
    (an ordinal, ascending) with its name."""

    country: str
    subdivision: str | None
    library_version: str
    from_year: int
    until_year: int
    days: tuple[int, ...]
    names: tuple[str, ...]


OnExcluded = Literal["skip", "next_business_day", "previous_business_day"]


class Calendar(msgspec.Struct, array_like=True, gc=False):
    """An owner's calendar (docs/semantics.md "Calendars"), in the
    `calendars` table: the local days it excludes, as ordinals of its
    `timezone`'s dates, ascending; weekdays 0 (Monday) to 6; the
    calendar whose exclusions it adds (`base`, of the same owner)."""

    owner: str
    name: str
    timezone: str
    exclude_dates: tuple[int, ...]
    exclude_weekdays: tuple[int, ...]
    holidays: Holidays | None
    base: str | None
    version: Annotated[int, Meta(ge=1)]
    created_at_ms: Ms
    updated_at_ms: Ms


class CalendarUse(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A job's calendar (in the `calendars` table, apart from the job's
    record, whose bytes stay as they were): its name and what the job
    does with a slot on a day it excludes."""

    name: str
    on_excluded: OnExcluded = "skip"


class Corrupt(Exception):
    """Stored or replicated bytes that do not decode to a valid value: the
    data dir (or a log entry) is damaged. Not an operating error to answer
    and go on from: apply stops the node rather than apply it."""


T = TypeVar("T")


class Decoder(Generic[T]):
    """A MessagePack decoder of one record type that raises `Corrupt`, and
    nothing else, for bytes that are not a valid record."""

    def __init__(self, kind: type[T], name: str | None = None):
        self.name = name or kind.__name__
        self._decoder = msgspec.msgpack.Decoder(kind)

    def decode(self, raw: bytes | memoryview) -> T:
        try:
            return self._decoder.decode(raw)
        except (msgspec.MsgspecError, RecursionError) as exc:
            raise Corrupt(f"a stored {self.name} does not decode ({exc}): the data dir is damaged") from None


# -- dependencies (docs/semantics.md "Dependencies") ---------------------------
# Kept in the `deps` table (engine/tables/deps.py), never in a job's or a
# run's record, so records written before dependencies encode as they did.

DepOn = Literal["succeeded", "failed", "finished"]
EndStatus = Literal["done", "failed"]


class After(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A dependent job's schedule (`schedule.after`): a run is made by its
    parents' ends, in apply (engine/rules/deps.py)."""

    jobs: tuple[JobId, ...]
    on: DepOn = "succeeded"
    all: bool = True
    within_s: Count | None = None


class Requires(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A gate on a clock schedule's slots (`schedule.requires`)."""

    jobs: tuple[JobId, ...]
    on: DepOn = "succeeded"
    within_s: Count | None = None
    wait_s: Count = 0


class Cause(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One parent end that made (or, under `all`, helps make) a run."""

    job_id: JobId
    nominal_ms: Ms  # the parent's run
    attempt: Count
    status: EndStatus
    ended_ms: Ms


class DepState(msgspec.Struct, array_like=True, gc=False):
    """A dependent job's edges and what it waits for: under `after.all`,
    the latest counting end of each parent since its last run was made
    (one a parent, used once); under `requires`, each parent's latest
    counting end, and the slot waiting for the missing ones."""

    after: After | None = None
    requires: Requires | None = None
    ends: list[Cause] = msgspec.field(default_factory=list)
    # A gated slot that waits for its parents (`requires.wait_s`), and its
    # due time had it not waited; None: none waits.
    waiting_slot_ms: Ms | None = None
