"""Replicated commands: one tag each, one apply function each (engine/apply.py `RULES`).

Every time a command needs is inside it, stamped by the node that accepted the
request; `apply` never reads a clock or a random source. Schedule arithmetic
(the next cron occurrence, jitter) is done when the command is made, so the
outcome of `apply` does not depend on the time-zone database of the replica.
New fields are appended with defaults.
"""

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from tempo import ids
from tempo.engine.records import (
    Calendar,
    CalendarUse,
    Corrupt,
    Count,
    DepState,
    Job,
    JobId,
    Missed,
    Ms,
    Nominal,
)


# `omit_defaults`: an item without edges encodes as before they existed.
class NewJob(msgspec.Struct, array_like=True, gc=False, omit_defaults=True):  # untracked as Job: 1,000 in a batch
    job: Job
    # Due time of the first run, at `job.slot_ms`; None for a schedule with no
    # occurrence left (the job is stored completed).
    first_due_ms: Ms | None
    # Hash of the create body after parsing and defaults, for request keys.
    body_hash: bytes
    # A dependent job's edges (`schedule.after`, docs/semantics.md
    # "Dependencies"), checked and stored by apply (engine/rules/deps.py).
    deps: DepState | None = None
    # The job's calendar (docs/semantics.md "Calendars"); None: none.
    calendar: CalendarUse | None = None


class CreateJobs(msgspec.Struct, tag="create_jobs", array_like=True):
    at_ms: Ms
    jobs: list[NewJob]


class PauseJob(msgspec.Struct, tag="pause_job", array_like=True):
    at_ms: Ms
    owner: str
    job_id: str
    # Who asked (the token's owner and role) and their note (`Job.paused`);
    # None in entries logged before: the job's owner, no role, no note.
    by_owner: str | None = None
    by_role: str | None = None
    note: str | None = None


class ResumeJob(msgspec.Struct, tag="resume_job", array_like=True):
    at_ms: Ms
    owner: str
    job_id: str
    # For a repeating job: the first slot after `at_ms` and its due time
    # (with jitter). For a one-off, whose one run is set waiting again, its
    # slot and the due time a run made anew gets (the cancelled run may have
    # been dropped with its history bucket); None in entries written before.
    slot_ms: Ms | None
    due_ms: Ms | None
    # The slots the pause let pass, recorded as missed (`paused`): one
    # range, or two around an `all` catch-up's own record.
    missed: list[Missed] = msgspec.field(default_factory=list)


class DeleteJob(msgspec.Struct, tag="delete_job", array_like=True):
    at_ms: Ms
    owner: str
    job_id: str


class TriggerJob(msgspec.Struct, tag="trigger_job", array_like=True):
    at_ms: Ms
    owner: str
    job_id: str


class PatchJob(msgspec.Struct, tag="patch_job", array_like=True):
    """A job changed in place (docs/semantics.md "Changing a job"). `job` is
    the whole job as the patch leaves it, checked as a create would be,
    made from `base_version`: apply refuses it when the job is at another
    version by then. `replan`: the schedule or jitter changed, and the
    job's waiting run moves to `slot_ms`, due at `due_ms` (computed by the
    node that took the request; `slot_ms` None: no slot after `at_ms`)."""

    at_ms: Ms
    owner: str
    job_id: str
    base_version: Count
    job: Job
    replan: bool
    slot_ms: Ms | None
    due_ms: Ms | None
    # `job.notify` is the job's setting after the patch. False in entries
    # logged before `notify` could be patched, whose `job.notify` is not:
    # apply keeps the stored job's.
    sets_notify: bool = False
    # The job's edges after the patch (docs/semantics.md "Dependencies"):
    # with `sets_deps`, apply checks them (a cycle is refused) and stores
    # them; None: the job has none. False in entries logged before.
    sets_deps: bool = False
    deps: DepState | None = None
    # `calendar` is the job's calendar after the patch (None: none); False
    # in entries logged before calendars: apply keeps the job's.
    sets_calendar: bool = False
    calendar: CalendarUse | None = None


class CalendarClaim(msgspec.Struct, array_like=True):
    """What the node that proposed a claim decided from the job's calendar
    at the owner's calendar `epoch`: the run goes on (`run`), is recorded
    `skipped` with reason `calendar` for its slots up to `until_ms`
    (`count` of them; the schedule goes on to the claim's next slot), or
    waits on to `move_ms` (`move`). Apply takes it at the same epoch only;
    at another, the run waits and is decided anew."""

    epoch: Count
    action: Literal["run", "skip", "move"] = "run"
    until_ms: Ms | None = None
    count: Count | None = None
    move_ms: Ms | None = None
    why: str | None = None


class Claim(msgspec.Struct, array_like=True, gc=False):  # untracked as Run: 1,000 in a claim
    job_id: JobId  # from a stored run or a run ID: always a job ID
    nominal_ms: Nominal
    lease_expires_ms: Ms
    # For the run in the job's schedule slot of a repeating job: the next slot
    # and its due time, created in the same commit (docs/api.md "Runs").
    next_slot_ms: Ms | None = None
    next_due_ms: Ms | None = None
    # The job is a one-off (schedules never change): apply need not read or
    # write the job to claim its run.
    one_off: bool = False
    # The catch-up decision (engine/plan.py `catch_up`), taken by the leader
    # that proposed the claim from the job as replicated and `at_ms`, and
    # kept by the next as apply writes it: the ranges of slots that get no
    # run (at most two), and the last slot of an `all` catch-up under way
    # and the latest slot it decided on (records.Job).
    # A tuple, empty by default: no list made for each of a claim's runs.
    missed: tuple[Missed, ...] = ()
    catchup_until_ms: Ms | None = None
    catchup_decided_ms: Ms | None = None
    # When the attempt's timeout ends it (UNIX ms): the claim's stamp plus
    # the job's `timeout_s`, decided by the leader that proposed the claim
    # (apply of a one-off reads no job); None: the job has no timeout.
    timeout_at_ms: Ms | None = None
    # The job's calendar decision for the run (docs/semantics.md
    # "Calendars"); None: the job has no calendar, and apply reads none.
    calendar: CalendarClaim | None = None


class ClaimKey(msgspec.Struct, array_like=True):
    """A claim's client-chosen key (docs/semantics.md "Idempotent claims"):
    scoped to `owner`; `queues_hash` names the set of queues claimed from;
    the record is kept until `expires_ms`, stamped by the node that made
    the command."""

    owner: str
    key: str
    queues_hash: bytes
    expires_ms: Ms = 0


class ClaimRuns(msgspec.Struct, tag="claim_runs", array_like=True):
    at_ms: Ms
    worker: str
    claims: list[Claim]
    # The claim's key, if it carried one: apply records what it took, and a
    # claim whose key is recorded takes nothing and answers the record.
    key: ClaimKey | None = None
    # Pre-dispatch (docs/semantics.md "Pre-dispatch"): runs due up to
    # `at_ms + ahead_ms` may be claimed (0: only those due by `at_ms`).
    ahead_ms: int = 0


class Result(msgspec.Struct, array_like=True, gc=False):  # strings and numbers only
    job_id: JobId  # from a stored run or a run ID: always a job ID
    nominal_ms: Nominal
    attempt: Count
    ok: bool
    output: str | None = None
    error: str | None = None


class ReportResults(msgspec.Struct, tag="report_results", array_like=True):
    at_ms: Ms
    owner: str | None  # None: the leader's own executor, which serves every owner
    results: list[Result]


class Expiry(msgspec.Struct, array_like=True, gc=False):  # strings and numbers only
    job_id: JobId  # from a stored run or a run ID: always a job ID
    nominal_ms: Nominal
    attempt: Count
    # What ended the attempt: its lease ran out (no heartbeat), or its
    # timeout passed (docs/semantics.md "Run timeouts").
    reason: Literal["lease", "timeout"] = "lease"


class ExpireLeases(msgspec.Struct, tag="expire_leases", array_like=True):
    at_ms: Ms
    expiries: list[Expiry]


class CancelRun(msgspec.Struct, tag="cancel_run", array_like=True):
    """`POST /v1/runs/{id}/cancel` (docs/semantics.md "Cancelling a run"): a
    waiting run is cancelled; a claimed one is asked to stop. For the
    waiting run of a repeating job's schedule slot, the next slot and its
    due time (and the catch-up decision, as a claim carries it) were
    computed by the node that took the request, so the job keeps one
    waiting run."""

    at_ms: Ms
    owner: str
    job_id: str
    nominal_ms: Nominal
    # The node saw the run as the job's slot run and decided the next slot
    # (`next_slot_ms` None: the schedule has none left). A slot run cancelled
    # by a command without it (the job moved on meanwhile) is a `Conflict`.
    planned: bool = False
    next_slot_ms: Ms | None = None
    next_due_ms: Ms | None = None
    missed: list[Missed] = msgspec.field(default_factory=list)
    catchup_until_ms: Ms | None = None
    catchup_decided_ms: Ms | None = None


class BackfillJob(msgspec.Struct, tag="backfill_job", array_like=True):
    """Runs for past slots of a job, due at `at_ms` (`POST
    /v1/jobs/{id}/backfill`): the slots are computed by the node that
    took the request, at most limits.backfill_runs_max; apply makes a run
    for each slot that has none, open or in history."""

    at_ms: Ms
    owner: str
    job_id: str
    slots_ms: list[Ms]


class OverlapRuns(msgspec.Struct, tag="overlap_runs", array_like=True):
    """Due runs of jobs whose overlap policy is not `allow`, which the
    dispatcher set aside as they fell due (docs/semantics.md "Overlap"):
    apply decides each from the replicated tables, and answers whether it
    goes on to its claim, or was skipped or buffered (`Store.overlap_runs`).
    Each is named by the claim the dispatcher would make of it: a slot run
    held back hands the schedule on to the claim's next slot, as its claim
    would have; its lease and timeout are not used."""

    at_ms: Ms
    runs: list[Claim]


class SetMember(msgspec.Struct, tag="set_member", array_like=True):
    """A cluster member's URL (`url` empty: the member was removed). Raft's
    configuration knows members by number only; this is where to reach them."""

    node_id: Annotated[str, Meta(pattern=ids.NODE_ID_PATTERN)]  # a key of the members table
    url: str


class DropHistory(msgspec.Struct, tag="drop_history", array_like=True):
    """Drops every history bucket (finished runs and events, by the UTC day
    they finished or happened) of a day before `before_day` (days since the
    epoch). The leader computes `before_day` from its clock and the retention
    period; apply reads neither."""

    at_ms: Ms
    before_day: Count


class NotifyCursor(msgspec.Struct, tag="notify_cursor", array_like=True):
    """The leader's notifier has handled (delivered or given up) every event
    up to sequence `seq`: a new leader's notifier goes on after it
    (net/notify.py). The cursor only moves forward."""

    at_ms: Ms
    seq: Count


class CalendarReplan(msgspec.Struct, array_like=True):
    """A waiting slot run a calendar edit places anew: the node that took
    the `PUT` read it due at `from_due_ms` and placed it at `to_due_ms`
    under the new calendar; apply moves it only if it is still so."""

    job_id: str
    slot_ms: Ms
    from_due_ms: Ms
    to_due_ms: Ms


# `omit_defaults`: a put without re-plans encodes as before they existed.
class PutCalendar(msgspec.Struct, tag="put_calendar", array_like=True, omit_defaults=True):
    """`PUT /v1/calendars/{name}`: the calendar as checked and resolved by
    the node that took the request (holidays as dates); made from
    `if_version` when `If-Match` named one (0: only if there is none).
    `replans`: the waiting runs of jobs that move runs, placed under the
    new calendar (docs/semantics.md "Calendars")."""

    at_ms: Ms
    calendar: Calendar
    if_version: Count | None = None
    replans: tuple[CalendarReplan, ...] = ()


class DeleteCalendar(msgspec.Struct, tag="delete_calendar", array_like=True):
    at_ms: Ms
    owner: str
    name: str
    if_version: Count | None = None


Command = (
    CreateJobs | PauseJob | ResumeJob | DeleteJob | TriggerJob | ClaimRuns | ReportResults | ExpireLeases
    | SetMember | DropHistory | NotifyCursor | BackfillJob | PatchJob | CancelRun | OverlapRuns
    | PutCalendar | DeleteCalendar
)
# One log entry is a batch of commands: the unit of group commit.
_entry_encoder = msgspec.msgpack.Encoder()
_entry_decoder = msgspec.msgpack.Decoder(list[Command])


def encode_entry(commands: list[Command]) -> bytes:
    return _entry_encoder.encode(commands)


def decode_entry(data: bytes) -> list[Command]:
    """The commands of one log entry; `Corrupt` for bytes that are not."""
    try:
        return _entry_decoder.decode(data)
    except (msgspec.MsgspecError, RecursionError) as exc:
        raise Corrupt(f"a log entry does not decode as commands ({exc})") from None
