"""The API's shapes: the single source of truth for validation, the OpenAPI
document and the Python client.

Request structs forbid unknown fields and carry their bounds in `Meta`; rules
that span fields (exactly one kind of schedule, `timezone` only with `cron`)
are checked in `tempo.engine.jobs`, which knows the field paths to report.
Responses spell times as RFC 3339 strings in UTC with milliseconds.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from tempo import limits

Instant = Annotated[datetime, Meta(tz=True, description="RFC 3339 with an offset")]
# A job's overlap policy (docs/semantics.md "Overlap"), as `records.OverlapPolicy`.
Overlap = Literal["allow", "skip", "buffer_one", "buffer_all", "cancel_other"]
QueueName = Annotated[
    str, Meta(min_length=1, max_length=limits.queue_name_chars_max, pattern=r"^[A-Za-z0-9._-]+$")
]
Limit = Annotated[int, Meta(ge=1, le=limits.page_limit_max)]
# Client-chosen keys that make a repeated request safe, scoped to the owner.
# A request key is also at most `request_key_bytes_max` bytes of UTF-8 (it
# is part of a store key), checked in
# `tempo.engine.request_checks.check_request_key`.
RequestKey = Annotated[str, Meta(
    min_length=1, max_length=limits.request_key_chars_max,
    description=f"at most {limits.request_key_bytes_max} bytes as UTF-8; scoped to the owner",
)]
# A claim key is ASCII, so bytes and characters are one bound (limits.py
# "Idempotent claims"); a final newline, which the pattern's `$` lets
# through, is refused by the claim route.
ClaimKey = Annotated[str, Meta(
    min_length=1, max_length=limits.claim_key_chars_max, pattern=limits.CLAIM_KEY_PATTERN,
    description="client-chosen, scoped to the owner: the same claim sent again with it takes no new runs",
)]


class _Request(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """Request bodies are decoded from bytes, so no cycle runs through them:
    untracked by the cycle collector (`gc=False`, inherited), a batch's 1,000
    items and their schedules set off no collection."""


def _only(given: str, absent: tuple[str, ...]) -> dict[str, Any]:
    """JSON Schema of a schedule that gives `given` and none of `absent`."""
    return {"required": [given], "properties": {given: {"not": {"type": "null"}}}
            | {name: {"type": "null"} for name in absent}}


# The cross-field rules of `tempo.engine.jobs.schedule_record`, stated in the
# OpenAPI document only (msgspec ignores `extra_json_schema` when decoding):
# exactly one of at, cron, every_s, after; timezone only with cron, start_at
# only with every_s; requires only with cron or every_s.
_ONE_SCHEDULE = {"oneOf": [
    _only("at", ("cron", "timezone", "every_s", "start_at", "dst", "end_at", "max_runs", "after", "requires")),
    _only("cron", ("at", "every_s", "start_at", "after")),
    _only("every_s", ("at", "cron", "timezone", "dst", "after")),
    _only("after", ("at", "cron", "timezone", "every_s", "start_at", "dst", "requires")),
]}
# `tempo.engine.request_checks.check_target`'s rule, for the document only as well.
_TARGET_PATTERN = r"^(queue:[A-Za-z0-9._-]{1,200}|https?://[!-.0-~][!-~]*)$"


DstGap = Literal["shift", "skip"]
DstRepeat = Literal["first", "last", "both"]
# What a schedule does with a slot on a day its calendar excludes.
OnExcludedIn = Literal["skip", "next_business_day", "previous_business_day"]


class DstIn(_Request):
    """What a cron schedule does with a local time that a daylight-saving
    transition removes (`gap`) or repeats (`repeat`): docs/semantics.md."""

    gap: DstGap = "shift"
    repeat: DstRepeat = "first"


DepOn = Literal["succeeded", "failed", "finished"]


class AfterIn(_Request):
    """A dependent job's parents (docs/semantics.md "Dependencies"): a run
    is made by their ends, decided as each parent's result commits."""

    jobs: Annotated[
        list[Annotated[str, Meta(max_length=64)]],
        Meta(min_length=1, max_length=limits.deps_parents_max,
             description="parent job IDs, of the same owner, existing when the job is created or patched"),
    ]
    on: Annotated[DepOn, Meta(
        description="which end of a parent's run counts: succeeded, failed (for good, after its last "
        "attempt) or finished (either); a cancelled run never counts"
    )] = "succeeded"
    all: Annotated[bool, Meta(
        description="true: one run once every parent has had a counting end (each end used once); "
        "false: one run for each counting end of any parent"
    )] = True
    within_s: Annotated[int, Meta(
        ge=1, le=limits.every_s_max,
        description="with all: a parent end older than this when the last one needed arrives no longer counts",
    )] | None = None


class RequiresIn(_Request):
    """A gate on a clock schedule's slots (docs/semantics.md "Dependencies"):
    a slot runs only when every parent has had a counting end within
    `within_s` before it; it waits up to `wait_s` for the missing ends,
    then is skipped."""

    jobs: Annotated[
        list[Annotated[str, Meta(max_length=64)]],
        Meta(min_length=1, max_length=limits.deps_parents_max,
             description="parent job IDs, of the same owner, existing when the job is created or patched"),
    ]
    on: DepOn = "succeeded"
    within_s: Annotated[int, Meta(ge=1, le=limits.every_s_max)] | None = None
    wait_s: Annotated[int, Meta(ge=0, le=limits.deps_wait_s_max)] = 0


class ScheduleIn(_Request):
    at: Instant | None = None
    cron: Annotated[str, Meta(max_length=limits.cron_chars_max)] | None = None
    timezone: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    every_s: Annotated[int, Meta(ge=limits.every_s_min, le=limits.every_s_max)] | None = None
    start_at: Instant | None = None
    dst: DstIn | None = None  # cron only; default {"gap": "shift", "repeat": "first"}
    # End conditions, cron and every_s only (docs/semantics.md "End conditions").
    end_at: Annotated[Instant, Meta(description="no slot after this instant; after start_at")] | None = None
    max_runs: Annotated[
        int,
        Meta(ge=1, le=limits.schedule_runs_max,
             description="the job runs this many slots (triggered runs not counted), then is completed"),
    ] | None = None
    after: AfterIn | None = None  # a dependent job: no clock of its own (docs/semantics.md "Dependencies")
    requires: RequiresIn | None = None  # cron and every_s only: a gate on each slot
    # cron and every_s only (docs/semantics.md "Calendars").
    calendar: Annotated[str, Meta(description="the owner's calendar whose days the schedule leaves out")] | None = None
    on_excluded: OnExcludedIn | None = None  # default `skip`


# Frozen, with a tuple of gaps: one default instance serves every create that
# leaves `retry` out (a factory ran for each item of a batch).
class RetryIn(_Request, frozen=True):  # type: ignore[misc]  # msgspec freezes a subclass of a mutable Struct
    max_attempts: Annotated[int, Meta(ge=1, le=limits.attempts_max)] = limits.attempts_default
    backoff_s: Annotated[
        tuple[Annotated[int, Meta(ge=0, le=limits.backoff_gap_s_max)], ...],
        Meta(min_length=1, max_length=limits.backoff_gaps_max),
    ] = tuple(limits.backoff_s_default)


class CatchupIn(_Request, frozen=True):  # type: ignore[misc]  # msgspec freezes a subclass of a mutable Struct
    """What a repeating job does with slots it missed (docs/semantics.md
    "Catch-up after missed slots"). `window_s` null or left out: no window."""

    window_s: Annotated[int, Meta(ge=0, le=limits.catchup_window_s_max)] | None = None
    policy: Literal["latest", "all", "none"] = "latest"
    max_runs: Annotated[int, Meta(ge=1, le=limits.catchup_runs_max)] = limits.catchup_runs_default


NotifyEvent = Literal["run.failed", "job.completed", "job.recovered"]


class NotifyIn(_Request):
    """Where to POST a signed notice, and for which events (docs/semantics.md
    "Notifications"). The server must have a `[notify]` config table."""

    url: Annotated[
        str,
        Meta(min_length=1, max_length=limits.notify_url_chars_max, extra_json_schema={"pattern": r"^https?://[!-~]+$"}),
    ]
    events: Annotated[
        tuple[NotifyEvent, ...], Meta(min_length=1, max_length=limits.notify_events_max)
    ] = ("run.failed", "job.completed", "job.recovered")


# A job's labels (docs/api.md "Labels"): decoded as any JSON values and
# checked in `tempo.engine.request_checks.labels_record`, so a bad one's `loc` names
# its key (`labels.team`); the document states the rule.
Labels = Annotated[
    dict[str, Any],
    Meta(extra_json_schema={
        "maxProperties": limits.job_labels_max,
        "propertyNames": {"pattern": limits.LABEL_KEY_PATTERN},
        "additionalProperties": {"type": "string", "maxLength": limits.label_value_chars_max},
        "description": f"at most {limits.job_labels_max} labels: key (1-{limits.label_key_chars_max} characters "
        f"of a-z 0-9 . _ / -) -> value (at most {limits.label_value_chars_max} characters)",
    }),
]


class JobCreate(_Request):
    target: Annotated[
        str,
        Meta(min_length=1, max_length=limits.target_chars_max, extra_json_schema={"pattern": _TARGET_PATTERN}),
    ]
    schedule: Annotated[ScheduleIn, Meta(extra_json_schema=_ONE_SCHEDULE)]
    name: Annotated[str, Meta(max_length=limits.name_chars_max)] | None = None
    payload: Any = None
    retry: RetryIn = RetryIn()
    lease_s: Annotated[int, Meta(ge=limits.lease_s_min, le=limits.lease_s_max)] = (
        limits.lease_s_default
    )
    jitter_s: Annotated[int, Meta(ge=0, le=limits.jitter_s_max)] = 0
    request_key: RequestKey | None = None
    # None: the owner's default from the server's config, if any.
    notify: NotifyIn | None = None
    catchup: CatchupIn | None = None  # repeating schedules only; default {"policy": "latest"}
    labels: Labels | None = None
    # Bounds one attempt, counted from its claim (docs/semantics.md "Run timeouts").
    timeout_s: Annotated[int, Meta(ge=limits.timeout_s_min, le=limits.timeout_s_max)] | None = None
    # What a slot that comes due while an earlier run runs does (docs/semantics.md
    # "Overlap"); repeating schedules only. None: `allow`.
    overlap: Overlap | None = None


class JobPatch(_Request):
    """`PATCH /v1/jobs/{id}`: a JSON merge patch (RFC 7396) of the job's
    mutable fields. A field left out keeps its value; `null` sets it back
    to its default (a required one is then `400`). Objects merge key by key
    (`retry`, `catchup`, `labels`, `notify`, and `schedule`, where one that
    would leave two kinds is `400` naming both and `null` removes the old
    kind); `payload` is replaced whole. The result is checked as a create
    would be. Documents the body: the route reads it as a merge patch onto
    the job (net/jobs_api.py)."""

    name: Annotated[str, Meta(max_length=limits.name_chars_max)] | None = None
    target: Annotated[
        str,
        Meta(min_length=1, max_length=limits.target_chars_max, extra_json_schema={"pattern": _TARGET_PATTERN}),
    ] | None = None
    payload: Any = None
    # Not one kind each: a patch names only what it changes (`timezone`
    # alone), and removes the old kind with null when it names a new one.
    schedule: Annotated[
        ScheduleIn,
        Meta(description="merged into the job's schedule key by key; a key set to null is removed "
                         "(the old kind, when the patch names another)"),
    ] | None = None
    retry: RetryIn | None = None
    lease_s: Annotated[int, Meta(ge=limits.lease_s_min, le=limits.lease_s_max)] | None = None
    jitter_s: Annotated[int, Meta(ge=0, le=limits.jitter_s_max)] | None = None
    # Merged key by key (RFC 7396): a key set to null is removed, `null` for
    # the whole removes every label.
    labels: Annotated[
        dict[str, Annotated[str, Meta(max_length=limits.label_value_chars_max)] | None],
        Meta(description="each key: its new value, or null to remove it"),
    ] | None = None
    # Merged as an object; null: back to the owner's default.
    notify: NotifyIn | None = None
    timeout_s: Annotated[int, Meta(ge=limits.timeout_s_min, le=limits.timeout_s_max)] | None = None
    overlap: Overlap | None = None  # null: back to `allow`
    # Merged key by key; null: no policy of the job's own (`latest`).
    catchup: CatchupIn | None = None


class JobBatchCreate(_Request):
    # Items stay raw here and are decoded one by one, so each item's problem
    # names paths inside that item (docs/api.md "POST /v1/jobs/batch").
    jobs: Annotated[list[msgspec.Raw], Meta(min_length=1, max_length=limits.batch_jobs_max)]


class BackfillIn(_Request):
    """`POST /v1/jobs/{id}/backfill`: a run for each slot in [from, until)."""

    from_: Annotated[Instant, Meta(description="the first instant of the range")] = msgspec.field(name="from")
    until: Annotated[Instant, Meta(description="the end of the range, excluded; not in the future")]
    # Backfill runs are not held to the job's overlap policy (docs/semantics.md
    # "Backfill"): `allow` is the only value; another is 400 (engine/jobs.py).
    overlap: Annotated[
        str, Meta(max_length=50, description="only \"allow\": backfill runs are not held to the job's overlap policy")
    ] | None = None


class PauseIn(_Request):
    """`POST /v1/jobs/{id}/pause`: its body is optional (empty, or `{}`)."""

    note: Annotated[str, Meta(max_length=limits.pause_note_chars_max)] | None = None


class NoFieldsIn(_Request):
    """The body of a request that takes no fields (a run's cancel, a job's
    resume, trigger and delete): empty or `{}`, anything else is `400`
    (`net/handlers.py` `no_fields`)."""


class BackfillOut(msgspec.Struct):
    created: int  # runs made
    existing: int  # slots of the range that had a run already


class PreviewIn(_Request):
    schedule: Annotated[ScheduleIn, Meta(extra_json_schema=_ONE_SCHEDULE)]
    after: Instant | None = None
    count: Annotated[int, Meta(ge=1, le=limits.preview_count_max)] = limits.preview_count_default
    # The schedule under a calendar (or the schedule's own `calendar`):
    # each entry then says whether the calendar moved it, and why.
    calendar: str | None = None
    on_excluded: OnExcludedIn | None = None
    include_excluded: Annotated[bool, Meta(description="list the slots the calendar leaves out too")] = False


class HolidaysIn(_Request):
    """A country's public holidays (ISO 3166 code, e.g. `DE`) and, optionally,
    its region's (e.g. `BY`), as the `holidays` library knows them."""

    # Bounds loose enough that a wrong value reaches the check that says why
    # (`DE-BY` is not a country: the subdivision goes apart).
    country: Annotated[str, Meta(min_length=1, max_length=64)]
    subdivision: Annotated[str, Meta(min_length=1, max_length=16)] | None = None


class CalendarIn(_Request):
    """`PUT /v1/calendars/{name}` (docs/api.md "Calendars")."""

    timezone: Annotated[str, Meta(min_length=1, max_length=64, description="IANA time zone of the dates")]
    exclude_dates: Annotated[
        list[Annotated[str, Meta(max_length=10)]],
        Meta(max_length=limits.calendar_dates_max, description="local dates, YYYY-MM-DD"),
    ] = []
    exclude_weekdays: Annotated[
        list[Annotated[str, Meta(max_length=16)]], Meta(max_length=7, description="mon, tue, ... sun")
    ] = []
    holidays: HolidaysIn | None = None
    base: Annotated[str, Meta(max_length=limits.calendar_name_chars_max)] | None = None


# -- responses -----------------------------------------------------------------


class HolidayOut(msgspec.Struct):
    date: str
    name: str


class HolidaysOut(msgspec.Struct):
    country: str
    subdivision: str | None
    library_version: str  # the `holidays` library's, when the dates were resolved
    from_year: int
    until_year: int
    dates: list[HolidayOut]


class CalendarOut(msgspec.Struct):
    name: str
    timezone: str
    exclude_dates: list[str]
    exclude_weekdays: list[str]
    holidays: HolidaysOut | None
    base: str | None
    version: int
    created_at: str
    updated_at: str


class CalendarsPage(msgspec.Struct):
    calendars: list[CalendarOut]
    next_cursor: str | None


class DstOut(msgspec.Struct):
    gap: DstGap
    repeat: DstRepeat


class AfterOut(msgspec.Struct):
    jobs: list[str]
    on: DepOn
    all: bool
    within_s: int | None


class RequiresOut(msgspec.Struct):
    jobs: list[str]
    on: DepOn
    within_s: int | None
    wait_s: int


class ScheduleOut(msgspec.Struct, omit_defaults=True):
    at: str | None = None
    cron: str | None = None
    timezone: str | None = None
    every_s: int | None = None
    start_at: str | None = None
    dst: DstOut | None = None  # a cron schedule's policy when not the default
    end_at: str | None = None
    max_runs: int | None = None
    after: AfterOut | None = None
    requires: RequiresOut | None = None
    calendar: str | None = None
    on_excluded: OnExcludedIn | None = None


class RetryOut(msgspec.Struct):
    max_attempts: int
    backoff_s: list[int]


class CatchupOut(msgspec.Struct):
    window_s: int | None
    policy: Literal["latest", "all", "none"]
    max_runs: int


class NotifyOut(msgspec.Struct):
    url: str
    events: list[NotifyEvent]


class PausedByOut(msgspec.Struct):
    owner: str
    role: str | None


class PausedOut(msgspec.Struct):
    """Who paused the job, when, and their note (null: none)."""

    at: str
    by: PausedByOut
    note: str | None


class LastRunOut(msgspec.Struct):
    """The job's last run that ended `done` or `failed` (docs/api.md "Outcomes")."""

    id: str
    status: Literal["done", "failed"]
    attempt: int
    finished_at: str | None
    error: str | None


class RunCountsOut(msgspec.Struct):
    """How many of the job's runs ended in each status since it was created."""

    done: int = 0
    failed: int = 0
    cancelled: int = 0
    skipped: int = 0  # by the job's overlap policy


class DependentsOut(msgspec.Struct):
    jobs: list[str] = []
    count: int = 0


class JobOut(msgspec.Struct, gc=False):  # untracked, as _Request: a batch reply holds 1,000
    id: str
    name: str | None
    owner: str
    target: str
    payload: Any
    schedule: ScheduleOut
    retry: RetryOut
    lease_s: int
    jitter_s: int
    state: Literal["active", "paused", "completed"]
    created_at: str
    next_run_at: str | None
    notify: NotifyOut | None = None  # the job's own setting; null: the owner's default
    last_run: LastRunOut | None = None
    runs: RunCountsOut = msgspec.field(default_factory=RunCountsOut)
    catchup: CatchupOut | None = None  # a repeating job's own policy; null: the default
    version: int = 1  # grows by one with each change; the ETag of the job's answers
    labels: dict[str, str] = {}  # key -> value, sorted by key
    timeout_s: int | None = None  # bounds one attempt from its claim; null: none
    paused: PausedOut | None = None  # set while the job is paused
    runs_left: int | None = None  # slots left to run under schedule.max_runs; null: no max_runs
    overlap: Overlap = "allow"  # what a slot due while an earlier run runs does
    # Jobs whose schedule names this one (`after`): the first 32, and how many.
    dependents: DependentsOut = msgspec.field(default_factory=lambda: DependentsOut())


# Untracked by the cycle collector: a claim answers with up to 1,000 of these,
# and they hold strings, numbers and a job's decoded payload, through which
# no cycle runs (engine/records.py, `gc=False`).
class RunCalendarOut(msgspec.Struct):
    """What its calendar, as it is now, will do with a waiting slot run
    at its claim (docs/semantics.md "Calendars"): `skip` it, or `move` it
    to `runs_at`; why (`2027-12-24 excluded (exclude_dates)`)."""

    action: Literal["skip", "move"]
    reason: str
    runs_at: str | None = None


class RunOut(msgspec.Struct, gc=False):
    id: str
    job_id: str
    nominal_at: str
    due_at: str
    # `missed`: a history row for a range of slots that got no run
    # (docs/semantics.md "Catch-up after missed slots").
    # `skipped`: a slot the job's overlap policy did not run (docs/semantics.md "Overlap").
    status: Literal["waiting", "claimed", "done", "failed", "cancelled", "missed", "skipped"]
    attempt: int
    worker: str | None
    lease_expires_at: str | None
    started_at: str | None
    finished_at: str | None
    output: str | None
    error: str | None
    backfill: bool = False  # made by a backfill
    # A `missed` row's range, null on other runs: why its slots got no run,
    # the first slot after them (the first is `nominal_at`), and how many
    # they are (null: too many to count).
    # A `skipped` row's reason is `overlap`.
    reason: Literal["outside_window", "policy", "paused", "overlap", "dependency", "calendar"] | None = None
    missed_from: str | None = None
    missed_until: str | None = None
    count: int | None = None
    # A claimed run whose owner asked it to stop (docs/semantics.md
    # "Cancelling a run"); and when the claimed attempt's timeout ends it.
    cancel_requested: bool = False
    timeout_at: str | None = None
    # A waiting run its job's overlap policy holds back until the running
    # run ends; its `due_at` is 9999-12-31T23:59:59.999Z until then.
    buffered: bool = False
    # Only on a waiting slot run that its job's calendar will skip or move.
    calendar: RunCalendarOut | msgspec.UnsetType = msgspec.UNSET


class AttemptOut(msgspec.Struct):
    """One attempt of a run: `ended_at` and `ok` are null while it runs."""

    attempt: int
    claimed_at: str | None
    worker: str | None
    ended_at: str | None
    ok: bool | None
    output: str | None
    error: str | None


class CauseOut(msgspec.Struct):
    """One parent end that made a dependent job's run."""

    job_id: str
    run_id: str
    attempt: int
    status: Literal["done", "failed"]


class RunDetailOut(RunOut):
    """`GET /v1/runs/{run_id}`: the run and each of its attempts, oldest
    first; a dependent job's run names the parent ends that made it."""

    attempts: list[AttemptOut] = []
    caused_by: list[CauseOut] = []


class GraphEdgeOut(msgspec.Struct):
    parent: str
    child: str


class GraphOut(msgspec.Struct):
    """`GET /v1/jobs/{id}/graph`: the edges within `depth` steps up and
    down from the job; `truncated` when the bound on edges cut them."""

    job_id: str
    depth: int
    upstream: list[GraphEdgeOut]
    downstream: list[GraphEdgeOut]
    truncated: bool


class ProblemItem(msgspec.Struct):
    loc: str
    msg: str


class Problem(msgspec.Struct):
    # `errors` is always present, empty when no field is to blame, so that a
    # client can read `errors[].loc` from every problem (docs/api.md "General rules").
    type: str
    title: str
    status: int
    detail: str = ""
    errors: list[ProblemItem] = []


class InternalProblem(Problem, kw_only=True):
    """A `500`: an error the server did not expect. `error_id` names the
    log line that holds its traceback (docs/api.md "Errors")."""

    error_id: str


class BatchItemResult(msgspec.Struct, omit_defaults=True, gc=False):
    status: int
    job: JobOut | None = None
    problem: Problem | None = None


class JobBatchResult(msgspec.Struct):
    results: list[BatchItemResult]


class JobsPage(msgspec.Struct):
    jobs: list[JobOut]
    next_cursor: str | None


class RunsPage(msgspec.Struct):
    runs: list[RunOut]
    next_cursor: str | None


class CalendarNoteOut(msgspec.Struct, omit_defaults=True):
    reason: str
    moved_from: str | None = None  # the slot's wall clock, when the run was moved


class OccurrenceOut(msgspec.Struct, gc=False):  # untracked: a preview holds 1,000, all strings
    """One time of a preview: the instant, the wall clock of the schedule's
    zone there and its UTC offset, and how a DST transition placed it."""

    at: str
    local: str
    offset: str
    dst: Literal["gap_shifted", "repeat_first", "repeat_second"] | None
    # Only in a preview with a calendar: null, or how the calendar placed it.
    calendar: CalendarNoteOut | msgspec.UnsetType | None = msgspec.UNSET
    excluded: bool | msgspec.UnsetType = msgspec.UNSET  # true: the calendar leaves this slot out


class PreviewOut(msgspec.Struct):
    times: list[str]  # the `at` of each occurrence, for clients older than `occurrences`
    occurrences: list[OccurrenceOut]


class Health(msgspec.Struct, omit_defaults=True):
    status: str
    reason: str = ""  # why not ready, when it is not


class ClusterNode(msgspec.Struct):
    id: str
    url: str
    role: Literal["leader", "follower", "candidate", "unknown"]


class NodeIn(msgspec.Struct, forbid_unknown_fields=True):
    """A node to add to the cluster: its ID and the URL the others reach it at."""

    id: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    url: Annotated[str, Meta(pattern=r"^https?://[^/\s]+:[0-9]{1,5}/?$", max_length=2048)]


class DigestOut(msgspec.Struct):
    node: str
    applied_index: int
    digest: str


class ClusterOut(msgspec.Struct):
    node: str
    leader: str | None
    term: int
    commit_index: int
    applied_index: int
    nodes: list[ClusterNode]


# -- workers ---------------------------------------------------------------------

Attempt = Annotated[int, Meta(ge=0, le=1_000_000)]
RunId = Annotated[str, Meta(min_length=1, max_length=64)]


class ClaimIn(_Request):
    worker: Annotated[str, Meta(min_length=1, max_length=limits.worker_chars_max)]
    queues: Annotated[list[QueueName], Meta(min_length=1, max_length=limits.queues_per_claim_max)]
    max_runs: Annotated[int, Meta(ge=1, le=limits.claim_runs_max)] = 1
    wait_s: Annotated[float, Meta(ge=0, le=limits.claim_wait_s_max)] = 0
    claim_key: ClaimKey | None = None
    ahead_ms: Annotated[
        int,
        Meta(
            ge=0,
            le=limits.claim_ahead_ms_max,
            description="also take runs due within this many ms (pre-dispatch): hold each, ask `POST /v1/starts`, "
            "start it at its `due_at`",
        ),
    ] = 0


class ClaimedRunOut(RunOut, kw_only=True):
    target: str
    payload: Any
    lease_s: int
    timeout_s: int | None = None  # the job's; the attempt ends at `timeout_at`


class ClaimOut(msgspec.Struct, omit_defaults=True):
    runs: list[ClaimedRunOut]
    # The leader's scheduler time when it answered, with `ahead_ms` > 0
    # only (docs/api.md "POST /v1/claim"): a worker corrects its clock
    # offset by it before it starts a run at its `due_at`.
    server_time: str | None = None


class HeartbeatIn(_Request):
    attempt: Attempt


RunCancel = Literal["requested", "timeout"]


class HeartbeatOut(msgspec.Struct):
    """`lease_expires_at` null: the attempt ended (by its timeout, or
    cancelled) and `cancel` says why; the worker stops (docs/api.md
    "Heartbeats")."""

    lease_expires_at: str | None
    cancel: RunCancel | None = None


class ResultIn(_Request):
    attempt: Attempt
    ok: bool
    output: str | None = None
    error: str | None = None


class HeartbeatItem(_Request):
    run_id: RunId
    attempt: Attempt


class HeartbeatsIn(_Request):
    heartbeats: Annotated[list[HeartbeatItem], Meta(min_length=1, max_length=limits.batch_items_max)]


class ResultItem(_Request):
    run_id: RunId
    attempt: Attempt
    ok: bool
    output: str | None = None
    error: str | None = None


class ResultsIn(_Request):
    results: Annotated[list[ResultItem], Meta(min_length=1, max_length=limits.batch_items_max)]


class Rejected(msgspec.Struct):
    run_id: str
    type: str


class BatchAck(msgspec.Struct):
    accepted: list[str]
    rejected: list[Rejected]


class SignalsIn(_Request):
    """`POST /v1/signals`: a worker's long poll of the runs it holds, answered
    as soon as one of them is to stop (docs/api.md "Signals")."""

    worker: Annotated[str, Meta(min_length=1, max_length=limits.worker_chars_max)]
    runs: Annotated[list[HeartbeatItem], Meta(min_length=1, max_length=limits.signals_runs_max)]
    wait_s: Annotated[float, Meta(ge=0, le=limits.signals_wait_s_max)] = 0


class SignalsOut(msgspec.Struct):
    """For each run of the poll whose worker is to stop, why (as its
    heartbeat would answer `cancel`); empty when the wait ended with none."""

    cancel: dict[str, RunCancel]


class StartsIn(_Request):
    """`POST /v1/starts`: a worker asks whether it may start runs it claimed
    ahead of their due times (docs/semantics.md "Pre-dispatch")."""

    worker: Annotated[str, Meta(min_length=1, max_length=limits.worker_chars_max)]
    runs: Annotated[list[HeartbeatItem], Meta(min_length=1, max_length=limits.starts_runs_max)]


class StartsOut(msgspec.Struct):
    """The runs of the request to start at their due times, and those not
    to start (a pause, cancel, delete or patch stopped them, or the attempt
    no longer holds the run)."""

    start: list[str]
    stop: list[str]


class HeartbeatsAck(BatchAck, omit_defaults=True):
    """`POST /v1/heartbeats`: also, for each accepted run whose worker is to
    stop, why (as a single heartbeat's `cancel`); runs that go on are not in
    it, and the field is left out when no run is to stop."""

    cancel: dict[str, RunCancel] = {}


# -- events ------------------------------------------------------------------------


class EventOut(msgspec.Struct, omit_defaults=True):
    cursor: str
    type: str
    at: str
    job_id: str
    run_id: str | None
    detail: dict[str, Any]
    owner: str | None = None  # in an admin's feed, which holds every owner's events


class EventsPage(msgspec.Struct):
    events: list[EventOut]
    # Oldest first: always a string. Newest first (`order=desc`): None once
    # the oldest event kept was read.
    next_cursor: str | None


class JobCounts(msgspec.Struct):
    """How many jobs are in each state (`GET /v1/jobs/counts`)."""

    active: int
    paused: int
    completed: int
