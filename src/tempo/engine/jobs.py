"""The jobs service: checks a request beyond its shape, stamps it with the
time and IDs, turns it into commands, and answers with records (net/views.py
turns those into the API's views).

It runs on the node that accepted the request; the clock and the random source
are read here, never in `apply`.

The engine does not import the API's shapes (`tempo.schema`, an import
contract in pyproject.toml): it names what it reads of a request in the
protocols below (`JobSpec`, `ScheduleSpec`, `DstSpec`, `RetrySpec`, `PreviewSpec`),
which the decoded request structs meet as they are, with no copy per item.
"""

import functools
import hashlib
import math
import os
import re
import urllib.parse
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeGuard, TypeVar

import msgspec
import trio

from tempo import clock, errors, ids, limits, schedule, targets
from tempo.config import notify_url_ok
from tempo.engine import calendars as calendar_service
from tempo.engine.commandlog import Answer, CommandLog
from tempo.engine.commands import (
    BackfillJob,
    CancelRun,
    CreateJobs,
    DeleteJob,
    NewJob,
    PatchJob,
    PauseJob,
    ResumeJob,
    TriggerJob,
)
from tempo.engine.plan import (
    Occurrence,
    catch_up,
    due_ms,
    first_slot_ms,
    paused_ranges,
    preview_slices,
    preview_timezone,
    slot_after_ms,
    step_over_taken,
)
from tempo.engine.records import (
    After,
    Catchup,
    CatchupPolicy,
    DepOn,
    DepState,
    Job,
    Notify,
    NotifyEvent,
    OverlapPolicy,
    Requires,
    Run,
    Schedule,
)
from tempo.engine.rules.deps import is_after
from tempo.engine.store import Created, Store

_QUEUE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_hash_encoder = msgspec.msgpack.Encoder(order="sorted")
_json_encoder = msgspec.json.Encoder()

T = TypeVar("T")


# -- what the engine reads of a request ------------------------------------------
#
# Read-only properties, so that frozen structs (`schema.RetryIn`) meet them
# too. The bounds of each field are the schema's (`Meta`), checked when the
# request was decoded; the rules across fields are checked here.


class DstSpec(Protocol):
    """A cron schedule's DST policy as asked for (`schema.DstIn`)."""

    @property
    def gap(self) -> schedule.DstGap: ...
    @property
    def repeat(self) -> schedule.DstRepeat: ...


class AfterSpec(Protocol):
    """A dependent job's parents (`schema.AfterIn`, docs/semantics.md "Dependencies")."""

    @property
    def jobs(self) -> list[str]: ...
    @property
    def on(self) -> DepOn: ...
    @property
    def all(self) -> bool: ...
    @property
    def within_s(self) -> int | None: ...


class RequiresSpec(Protocol):
    """A gate on a clock schedule's slots (`schema.RequiresIn`)."""

    @property
    def jobs(self) -> list[str]: ...
    @property
    def on(self) -> DepOn: ...
    @property
    def within_s(self) -> int | None: ...
    @property
    def wait_s(self) -> int: ...


class ScheduleSpec(Protocol):
    """A schedule as asked for (`schema.ScheduleIn`)."""

    @property
    def at(self) -> datetime | None: ...
    @property
    def cron(self) -> str | None: ...
    @property
    def timezone(self) -> str | None: ...
    @property
    def every_s(self) -> int | None: ...
    @property
    def start_at(self) -> datetime | None: ...
    @property
    def dst(self) -> DstSpec | None: ...
    @property
    def end_at(self) -> datetime | None: ...
    @property
    def max_runs(self) -> int | None: ...
    @property
    def after(self) -> AfterSpec | None: ...
    @property
    def requires(self) -> RequiresSpec | None: ...


    @property
    def calendar(self) -> str | None: ...

    @property
    def on_excluded(self) -> str | None: ...


class RetrySpec(Protocol):
    """A retry policy as asked for (`schema.RetryIn`)."""

    @property
    def max_attempts(self) -> int: ...
    @property
    def backoff_s(self) -> tuple[int, ...]: ...


class CatchupSpec(Protocol):
    """A catch-up policy as asked for (`schema.CatchupIn`)."""

    @property
    def window_s(self) -> int | None: ...
    @property
    def policy(self) -> CatchupPolicy: ...
    @property
    def max_runs(self) -> int: ...


class BackfillSpec(Protocol):
    """A backfill as asked for (`schema.BackfillIn`)."""

    @property
    def from_(self) -> datetime: ...
    @property
    def until(self) -> datetime: ...
    @property
    def overlap(self) -> str | None: ...


class NotifySpec(Protocol):
    """A job's notification setting as asked for (`schema.NotifyIn`)."""

    @property
    def url(self) -> str: ...
    @property
    def events(self) -> tuple[NotifyEvent, ...]: ...


class JobSpec(Protocol):
    """A job as asked for (`schema.JobCreate`)."""

    @property
    def target(self) -> str: ...
    @property
    def schedule(self) -> ScheduleSpec: ...
    @property
    def name(self) -> str | None: ...
    @property
    def payload(self) -> object: ...
    @property
    def retry(self) -> RetrySpec: ...
    @property
    def lease_s(self) -> int: ...
    @property
    def jitter_s(self) -> int: ...
    @property
    def request_key(self) -> str | None: ...
    @property
    def notify(self) -> NotifySpec | None: ...
    @property
    def catchup(self) -> CatchupSpec | None: ...
    @property
    def labels(self) -> dict[str, Any] | None: ...
    @property
    def timeout_s(self) -> int | None: ...
    @property
    def overlap(self) -> OverlapPolicy | None: ...


class PreviewSpec(Protocol):
    """A schedule preview as asked for (`schema.PreviewIn`)."""

    @property
    def schedule(self) -> ScheduleSpec: ...
    @property
    def after(self) -> datetime | None: ...
    @property
    def count(self) -> int: ...


# -- checks beyond the shape -----------------------------------------------------


@functools.lru_cache(maxsize=1024)
def check_target(target: str) -> None:
    """Cached: a batch's items mostly share a few targets. A bad target
    raises, and a call that raises is not cached."""
    if target.startswith("queue:"):
        name = target[len("queue:") :]
        if not (0 < len(name) <= limits.queue_name_chars_max and set(name) <= _QUEUE_CHARS):
            raise errors.Invalid.at(
                "target", "a queue name is 1-200 characters of A-Z a-z 0-9 . _ -"
            )
        return
    if target.startswith(("http://", "https://")):
        # A URI is printable ASCII (RFC 3986): the executor's HTTP client
        # refuses control characters and hosts that are not valid IDNA.
        if not (target.isascii() and target.isprintable()) or " " in target:
            raise errors.Invalid.at(
                "target", "a URL is printable ASCII without spaces: percent-encode the rest, punycode the host"
            )
        try:
            parts = urllib.parse.urlsplit(target)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError as exc:
            raise errors.Invalid.at("target", f"not a valid URL: {exc}") from None
        if not parts.hostname:
            raise errors.Invalid.at("target", "a URL target needs a host")
        return
    raise errors.Invalid.at("target", "must be queue:<name> or an http:// or https:// URL")


@functools.lru_cache(maxsize=1024)
def _why_refused(policy: targets.TargetPolicy, url: str) -> str | None:
    """Cached as `check_target` is: a batch's items mostly share a few URLs."""
    return policy.why_url_refused(url)


def check_policy(policy: targets.TargetPolicy, url: str, loc: str) -> None:
    """`400` at `loc` when the target policy refuses the http(s) URL by what
    it says (tempo/targets.py; docs/operations.md "Target policy")."""
    why = _why_refused(policy, url)
    if why is not None:
        raise errors.Invalid.at(loc, targets.explain(why))


def check_request_key(key: str) -> None:
    """A request key is part of an LMDB key: bounded in UTF-8 bytes as well
    as in characters (limits.py "Storage bounds"; the characters are the
    schema's). A key of 63 characters or fewer fits whatever they are."""
    if len(key) * 4 > limits.request_key_bytes_max and len(key.encode()) > limits.request_key_bytes_max:
        raise errors.Invalid.at(
            "request_key",
            f"at most {limits.request_key_bytes_max} bytes in UTF-8 (and {limits.request_key_chars_max} characters)",
        )


def check_json_value(value: Any, loc: str) -> None:
    """A MessagePack body may carry what JSON cannot: binary and ext values,
    and floats that are not numbers (NaN, infinities), which JSON would turn
    into null without a word (docs/api.md "Encoding and content negotiation")."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise errors.Invalid.at(loc, "object keys must be strings")
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise errors.Invalid.at(loc, f"{item} has no JSON form (JSON numbers are finite)")
        elif not (item is None or isinstance(item, bool | int | float | str)):
            raise errors.Invalid.at(loc, f"a {type(item).__name__} value has no JSON form")


def payloads_pass(payloads: list[Any], *, from_msgpack: bool) -> bool:
    """Whether every one of `payloads` passes `Jobs.new_job`'s payload checks,
    found with one encoding of them all rather than two per item: the list's
    JSON is longer than any one item's, and an integer outside 64 bits or a
    value JSON has not makes the whole list fail. False says only that each
    item must be checked alone (for the item and field to name)."""
    try:
        if from_msgpack:
            check_json_value(payloads, "payload")
        if len(_json_encoder.encode(payloads)) > limits.payload_bytes_max:
            return False
        _hash_encoder.encode(payloads)
    except (errors.TempoError, OverflowError, TypeError, msgspec.EncodeError):
        return False
    return True


def instant_ms(value: datetime, loc: str) -> int:
    """A time from a request in UNIX ms, or 400 at `loc` when it lies outside
    years 1 to 9999 in UTC, which RFC 3339 cannot spell
    (`0001-01-01T00:00:00+01:00` is in year 0)."""
    at_ms = clock.ms_from_datetime(value)
    if not limits.instant_ms_min <= at_ms <= limits.instant_ms_max:
        raise errors.Invalid.at(loc, "outside years 0001 to 9999 in UTC")
    return at_ms


STORED_RANGE = (
    f"a time from {clock.iso_from_ms(limits.stored_ms_min)} to {clock.iso_from_ms(limits.stored_ms_max)}"
    " in UTC, the instants tempo stores"
)


def stored_instant_ms(value: datetime, loc: str) -> int:
    """A time from a request for a field that is stored or reaches a key
    (docs/api.md "Times"), in UNIX ms, or 400 at `loc` when it lies outside
    [limits.stored_ms_min, limits.stored_ms_max]: keys hold unsigned
    milliseconds, and a slot computed from such a time lies within it too."""
    at_ms = clock.ms_from_datetime(value)
    if not limits.stored_ms_min <= at_ms <= limits.stored_ms_max:
        raise errors.Invalid.at(loc, STORED_RANGE)
    return at_ms


def schedule_record(value: ScheduleSpec, loc: str = "schedule") -> Schedule:
    """Checks the cross-field rules of a schedule and returns its record."""
    _check_fields(value, loc)
    if value.at is not None:
        return Schedule(at_ms=stored_instant_ms(value.at, f"{loc}.at"))
    end_ms = None if value.end_at is None else stored_instant_ms(value.end_at, f"{loc}.end_at")
    if value.after is not None:
        # No clock of its own: the edges are the command's (`deps_record`).
        return Schedule(end_at_ms=end_ms, max_runs=value.max_runs)
    if value.cron is not None:
        timezone = value.timezone or "UTC"
        try:
            schedule.validate_cron(value.cron, timezone)
        except schedule.ScheduleError as exc:
            raise errors.Invalid.at(f"{loc}.{exc.loc}", exc.msg) from None
        if value.dst is None:
            return Schedule(cron=value.cron, timezone=timezone, end_at_ms=end_ms, max_runs=value.max_runs)
        return Schedule(
            cron=value.cron, timezone=timezone, dst_gap=value.dst.gap, dst_repeat=value.dst.repeat,
            end_at_ms=end_ms, max_runs=value.max_runs,
        )
    start = None if value.start_at is None else stored_instant_ms(value.start_at, f"{loc}.start_at")
    if start is not None and end_ms is not None and end_ms <= start:
        raise errors.Invalid.at(f"{loc}.end_at", "must be after start_at")
    return Schedule(every_s=value.every_s, start_at_ms=start, end_at_ms=end_ms, max_runs=value.max_runs)


def _check_fields(value: ScheduleSpec, loc: str) -> None:
    """Which fields of a schedule go together."""
    if (value.at is not None) + (value.cron is not None) + (value.every_s is not None) + (value.after is not None) != 1:
        raise errors.Invalid.at(loc, "give exactly one of at, cron, every_s, after")
    if value.timezone is not None and value.cron is None:
        raise errors.Invalid.at(f"{loc}.timezone", "timezone goes only with cron")
    if value.dst is not None and value.cron is None:
        raise errors.Invalid.at(f"{loc}.dst", "dst goes only with cron")
    if value.start_at is not None and value.every_s is None:
        raise errors.Invalid.at(f"{loc}.start_at", "start_at goes only with every_s")
    if value.at is not None:
        for name in ("end_at", "max_runs"):
            if getattr(value, name) is not None:
                raise errors.Invalid.at(f"{loc}.{name}", f"{name} goes only with a repeating schedule (cron or every_s)")


def deps_record(value: ScheduleSpec, loc: str = "schedule") -> DepState | None:
    """A dependent job's edges as apply stores them (checked against the
    tables there: engine/rules/deps.py); None for a job with none."""
    after, gate = value.after, value.requires
    if gate is not None:
        if value.cron is None and value.every_s is None:
            raise errors.Invalid.at(f"{loc}.requires", "requires goes only with a clock schedule (cron or every_s)")
        _check_parents(gate.jobs, f"{loc}.requires.jobs")
        return DepState(requires=Requires(tuple(gate.jobs), gate.on, gate.within_s, gate.wait_s))
    if after is None:
        return None
    _check_parents(after.jobs, f"{loc}.after.jobs")
    if after.within_s is not None and not after.all:
        raise errors.Invalid.at(f"{loc}.after.within_s", "within_s goes only with all: true")
    return DepState(after=After(tuple(after.jobs), after.on, after.all, after.within_s))


def _check_parents(job_ids: list[str], loc: str) -> None:
    if len(set(job_ids)) != len(job_ids):
        raise errors.Invalid.at(loc, "names a job twice")
    for job_id in job_ids:
        if not ids.is_job_id(job_id):
            raise errors.Invalid.at(loc, f"no job {job_id}")


def overlap_record(value: OverlapPolicy | None, sched: Schedule) -> OverlapPolicy | None:
    """A job's overlap policy as stored; None for `allow`, the default."""
    if value is None or value == "allow":
        return None
    if not sched.repeating:
        raise errors.Invalid.at("overlap", "overlap goes only with a repeating schedule (cron or every_s)")
    return value


def catchup_record(value: CatchupSpec | None, sched: Schedule) -> Catchup | None:
    """A job's catch-up policy; None for the default (`latest`, no window)."""
    if value is None:
        return None
    if not sched.repeating or is_after(sched):  # a dependent job has no slots to miss
        raise errors.Invalid.at("catchup", "catchup goes only with a repeating schedule (cron or every_s)")
    found = Catchup(value.window_s, value.policy, value.max_runs)
    return None if found == Catchup() else found


_LABEL_KEY = re.compile(limits.LABEL_KEY_PATTERN)


def check_label_key(name: str) -> bool:
    """Whether `name` is a label key (`limits.LABEL_KEY_PATTERN`); `$` of a
    pattern lets a final newline through, `fullmatch` does not."""
    return _LABEL_KEY.fullmatch(name) is not None


def labels_record(value: dict[str, Any] | None, loc: str = "labels") -> dict[str, str] | None:
    """A job's labels, sorted by key (docs/api.md "Labels"); None for none.
    A bad key or too many is `400` at `labels`, a bad value at `labels.<key>`."""
    if not value:
        return None
    if len(value) > limits.job_labels_max:
        raise errors.Invalid.at(loc, f"at most {limits.job_labels_max} labels, not {len(value)}")
    for name, text in value.items():
        if not check_label_key(name):
            shown = name if len(name) <= limits.label_key_chars_max else name[: limits.label_key_chars_max] + "..."
            raise errors.Invalid.at(
                loc, f"the key {shown!r} is not 1-{limits.label_key_chars_max} characters of a-z 0-9 . _ / -"
            )
        if not isinstance(text, str):
            raise errors.Invalid.at(f"{loc}.{name}", "a label's value is a string")
        if len(text) > limits.label_value_chars_max:
            raise errors.Invalid.at(f"{loc}.{name}", f"at most {limits.label_value_chars_max} characters")
    return {name: value[name] for name in sorted(value)}


async def preview_occurrences(body: PreviewSpec, now_ms: int) -> tuple[list[Occurrence], str]:
    """The times of `POST /v1/schedules/preview` and the time zone of their
    wall clock, checked and planned by `plan.preview_slices`, with a
    checkpoint after each slice, so a preview of 1,000 cron times never
    holds the trio thread for more than one slice."""
    sched = schedule_record(body.schedule)
    if is_after(sched):
        raise errors.Invalid.at("schedule.after", "a dependent job's runs have no times to preview: its parents' ends make them")
    after_ms = now_ms if body.after is None else instant_ms(body.after, "after")
    found: list[Occurrence] = []
    for part in preview_slices(sched, after_ms, body.count):
        found += part
        await trio.lowlevel.checkpoint()
    return found, preview_timezone(sched)


def queues_hash(queues: list[str]) -> bytes:
    """The set of queues a claim names, as a claim key's record keeps it:
    order and repeats do not matter."""
    return hashlib.blake2b("\n".join(sorted(set(queues))).encode(), digest_size=16).digest()


def _backfill_range_ms(job: Job, body: BackfillSpec, now_ms: int) -> tuple[int, int]:
    """A backfill's [from, until) in ms, checked against the job and now."""
    if body.overlap not in (None, "allow"):
        raise errors.Invalid.at(
            "overlap", 'backfill runs are not held to the job\'s overlap policy: only "allow" is accepted'
        )
    if not job.schedule.repeating:
        raise errors.Invalid.at("", "a one-off job has one slot: trigger it instead")
    from_ms, until_ms = stored_instant_ms(body.from_, "from"), stored_instant_ms(body.until, "until")
    if until_ms <= from_ms:
        raise errors.Invalid.at("until", "must be after from")
    if until_ms > now_ms:
        raise errors.Invalid.at("until", "a backfill is of past slots: until is in the future")
    if job.slot_ms is not None and until_ms > job.slot_ms:
        raise errors.Invalid.at(
            "until", f"the job's scheduled slot is {clock.iso_from_ms(job.slot_ms)}: backfill slots before it"
        )
    return from_ms, until_ms


async def backfill_slots(job: Job, body: BackfillSpec, now_ms: int) -> list[int]:
    """The slots of `job` in [from, until), ascending, checked: at most
    limits.backfill_runs_max of them, none in the future nor at or after
    the job's scheduled slot (that run and the ones after it are the
    schedule's). Cron slots come in slices with a checkpoint between."""
    if is_after(job.schedule):
        raise errors.Invalid.at("", "a dependent job (schedule.after) has no slots of its own to backfill")
    from_ms, until_ms = _backfill_range_ms(job, body, now_ms)
    sched = job.schedule
    if sched.end_at_ms is not None:
        until_ms = min(until_ms, sched.end_at_ms + 1)  # no slot after `end_at`
        if until_ms <= from_ms:
            return []
    cap = limits.backfill_runs_max
    slots: list[int] = []
    if sched.every_s is not None:
        first = slot_after_ms(sched, job.created_at_ms, from_ms, inclusive=True)
        period_ms = sched.every_s * 1000
        count = 0 if first is None or first >= until_ms else (until_ms - 1 - first) // period_ms + 1
        if count > cap:
            raise errors.Invalid.at("until", f"the range holds {count} slots, more than {cap}: split it")
        return [] if first is None else [first + k * period_ms for k in range(count)]
    assert sched.cron is not None and sched.timezone is not None
    after_ms = from_ms - 1
    while True:
        part = schedule.cron_times_ms(
            sched.cron, sched.timezone, after_ms, limits.preview_slice_times,
            gap=sched.dst_gap, repeat=sched.dst_repeat,
        )
        slots += [at_ms for at_ms in part if at_ms < until_ms]
        if len(slots) > cap:
            raise errors.Invalid.at("until", f"the range holds more than {cap} slots: split it")
        if len(part) < limits.preview_slice_times or part[-1] >= until_ms:
            return slots
        after_ms = part[-1]
        await trio.lowlevel.checkpoint()


def _schedule_hashed(sched: Schedule) -> tuple[Any, ...] | Schedule:
    """The schedule as a request key's hash takes it: without end
    conditions, the fields it had before they existed (a tuple encodes as
    the array-like record does), so the hash of such a body is what it was."""
    if sched.end_at_ms is None and sched.max_runs is None:
        return msgspec.structs.astuple(sched)[:-2]
    return sched


def _body_digest(
    body: JobSpec, sched: Schedule, notify: Notify | None, catchup: Catchup | None, labels: dict[str, str] | None,
    *, payload_passed: bool, edges: DepState | None = None,
) -> bytes:
    """The hash of a create body after parsing and defaults, which a request
    key compares; empty without a request key."""
    try:
        if body.request_key is None:
            # Only a request key is compared with the body hash: without
            # one, encoding the payload is the whole check.
            if not payload_passed:
                _hash_encoder.encode(body.payload)
            return b""
        fields: tuple[Any, ...] = (
            body.name, body.target, body.payload, _schedule_hashed(sched), body.retry.max_attempts,
            body.retry.backoff_s, body.lease_s, body.jitter_s,
        )
        # Each appended only when given, so the hash of a job without it is
        # what it was before the field existed.
        fields += (() if notify is None else (notify,)) + (() if catchup is None else (catchup,))
        if labels is not None:
            fields += (("labels", labels),)
        if body.timeout_s is not None:
            fields += (("timeout_s", body.timeout_s),)
        if body.overlap not in (None, "allow"):
            fields += (("overlap", body.overlap),)
        if edges is not None:
            fields += (("after", edges.after),) if edges.after is not None else (("requires", edges.requires),)
        return hashlib.blake2b(_hash_encoder.encode(fields), digest_size=16).digest()
    except OverflowError:
        # JSON allows any integer; records are MessagePack, which holds
        # 64 bits. Only the payload is unbounded, the rest has Meta bounds.
        raise errors.Invalid.at("payload", "an integer outside [-2**63, 2**64)") from None


# -- the service -------------------------------------------------------------------


class _JobIds:
    """ULIDs that increase within one millisecond too, so a batch lists in order."""

    def __init__(self, random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self._random_bytes = random_bytes
        self._last_ms = -1
        self._last_random = 0

    def take(self, at_ms: int, count: int) -> list[str]:
        if at_ms > self._last_ms:
            self._last_ms = at_ms
            # 79 random bits: room to count up within the millisecond.
            first = int.from_bytes(self._random_bytes(10), "big") >> 1
        else:
            first = self._last_random + 1
        self._last_random = first + count - 1
        return ids.job_ids_from_int(self._last_ms, first, count)


class Jobs:
    def __init__(
        self,
        store: Store,
        committer: CommandLog,
        *,
        now_ms: Callable[[], int] | None = None,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ):
        self.store = store
        self.committer = committer
        # Scheduler time (clock.py): the node's clock, a test's mock, or
        # else a clock of its own. Job IDs take their time from it too, so
        # newest first stays true after the wall clock steps back.
        self.now_ms = now_ms or clock.Clock().now_ms
        # Job IDs' random bits: injectable, so a seeded simulator replays
        # the same IDs (tests/sim/node_workload.py).
        self._ids = _JobIds(random_bytes)
        # Whether the server sends notifications (a `[notify]` config table):
        # without, a job that asks for them is refused at `notify`.
        self.notify_enabled = False
        # Where a job's http(s) target and notify URL may point (the server
        # sets it from its config; the default allows loopback, as a node
        # without tokens does).
        self.target_policy = targets.TargetPolicy()
        self.calendars = calendar_service.Calendars(store, committer, self.now_ms)

    def new_job(
        self,
        owner: str,
        body: JobSpec,
        at_ms: int,
        *,
        from_msgpack: bool,
        payload_passed: bool = False,
        job_id: str | None = None,
        patching: bool = False,
    ) -> NewJob:
        """Checks a decoded create body and builds its command item.
        `payload_passed`: `payloads_pass` found the payload good already.
        `job_id`: one drawn for it with the rest of its batch. `patching`:
        the body is a job after a patch, whose schedule may end before now
        (an `end_at` in the past completes the job, docs/semantics.md)."""
        check_target(body.target)
        if body.target[0] == "h":  # http:// or https://, which check_target passed
            check_policy(self.target_policy, body.target, "target")
        if body.request_key is not None:
            check_request_key(body.request_key)
        if not payload_passed:
            if from_msgpack:
                check_json_value(body.payload, "payload")
            if len(_json_encoder.encode(body.payload)) > limits.payload_bytes_max:
                raise errors.TooLarge.at("payload", f"more than {limits.payload_bytes_max} bytes as JSON")
        sched = schedule_record(body.schedule)
        edges = deps_record(body.schedule)
        catchup = catchup_record(body.catchup, sched)
        backoff_s = body.retry.backoff_s
        notify = None if body.notify is None else self.notify_record(body.notify)
        labels = labels_record(body.labels)
        overlap = overlap_record(body.overlap, sched)
        digest = _body_digest(body, sched, notify, catchup, labels, payload_passed=payload_passed, edges=edges)
        # Positional, in Job's field order (a batch makes 1,000): id, owner,
        # name, target, payload, schedule, max_attempts, backoff_s, lease_s,
        # jitter_s, state, created_at_ms, request_key, slot_ms, next_run_at_ms.
        job = Job(
            self._ids.take(at_ms, 1)[0] if job_id is None else job_id,
            owner, body.name, body.target, body.payload, sched, body.retry.max_attempts, backoff_s,
            body.lease_s, body.jitter_s, "active", at_ms, body.request_key, None, None, notify,
        )
        if catchup is not None:
            job.catchup = catchup
        if labels is not None:
            job.labels = labels
        if body.timeout_s is not None:
            job.timeout_s = body.timeout_s
        job.overlap = overlap
        if sched.at_ms is not None and body.jitter_s == 0:
            # `first_slot_ms` and `due_ms` of a one-off without jitter, inline.
            job.slot_ms = sched.at_ms
            job.next_run_at_ms = sched.at_ms if sched.at_ms > at_ms else at_ms
        else:
            _plan_first(job, at_ms, patching=patching)
        # A calendar (docs/semantics.md "Calendars"): engine/calendars.py.
        item = self.calendars.new_job(job, body.schedule.calendar, body.schedule.on_excluded, digest, at_ms)
        item.deps = edges
        return item

    def notify_record(self, body: NotifySpec) -> Notify:
        if not self.notify_enabled:
            raise errors.Invalid.at("notify", "this server sends no notifications: its config has no [notify] table")
        if not notify_url_ok(body.url):
            raise errors.Invalid.at(
                "notify.url", "an http:// or https:// URL of printable ASCII without spaces, with a host"
            )
        check_policy(self.target_policy, body.url, "notify.url")
        return Notify(body.url, tuple(dict.fromkeys(body.events)))

    async def create(
        self,
        owner: str,
        items: Sequence[JobSpec | errors.TempoError],
        *,
        from_msgpack: bool,
        rejected_keys_of: dict[int, str] | None = None,
    ) -> list[Created | errors.TempoError]:
        """Creates the valid items in one command; answers one outcome per item.

        An item that repeats the request key of an earlier item that was
        rejected gets that item's answer (docs/api.md "POST /v1/jobs/batch"):
        "earlier" is the first item with that key. `rejected_keys_of` names
        the request keys of items rejected before they got here (by the
        decoder), by their place in `items`."""
        at_ms = self.now_ms()
        outcomes, new_jobs, places = await self._new_jobs(
            owner, items, at_ms, from_msgpack=from_msgpack, rejected_keys_of=rejected_keys_of or {}
        )
        if new_jobs:
            applied = await self.committer.submit(CreateJobs(at_ms, new_jobs))
            assert _created_each(applied) and len(applied) == len(places)
            for i, outcome in zip(places, applied, strict=True):
                outcomes[i] = outcome
        created = [outcome for outcome in outcomes if outcome is not None]
        assert len(created) == len(outcomes), "every item has its outcome"
        return created

    async def _new_jobs(
        self,
        owner: str,
        items: Sequence[JobSpec | errors.TempoError],
        at_ms: int,
        *,
        from_msgpack: bool,
        rejected_keys_of: dict[int, str],
    ) -> tuple[list[Created | errors.TempoError | None], list[NewJob], list[int]]:
        """`create`'s checks: the outcome of each item rejected (None for the
        others), the new jobs of the valid items, and their places in `items`."""
        outcomes: list[Created | errors.TempoError | None] = [None] * len(items)
        # The problem of each key whose first item was rejected; every key seen.
        rejected_keys: dict[str, errors.TempoError] = {}
        seen_keys: set[str] = set()
        new_jobs: list[NewJob] = []
        places: list[int] = []
        passed = payloads_pass(
            [item.payload for item in items if not isinstance(item, errors.TempoError)], from_msgpack=from_msgpack
        )
        # One ID for every item, drawn at once; a rejected item's is not used.
        job_ids = self._ids.take(at_ms, len(items))
        for i, item in enumerate(items):
            if i and i % limits.batch_slice_items == 0:
                # A batch of 1,000 is checked in slices, so the event loop
                # serves others between them (docs/operations.md
                # "Event-loop lag"); nothing is committed yet.
                await trio.lowlevel.checkpoint()
            key = rejected_keys_of.get(i) if isinstance(item, errors.TempoError) else item.request_key
            if key is not None and key in rejected_keys:
                outcomes[i] = rejected_keys[key]
                continue
            first_of_key = key is not None and key not in seen_keys
            if key is not None:
                seen_keys.add(key)
            if isinstance(item, errors.TempoError):
                outcomes[i] = item
                if key is not None and first_of_key:
                    rejected_keys[key] = item
                continue
            try:
                new_jobs.append(
                    self.new_job(
                        owner, item, at_ms, from_msgpack=from_msgpack, payload_passed=passed, job_id=job_ids[i]
                    )
                )
            except errors.TempoError as exc:
                outcomes[i] = exc
                if key is not None and first_of_key:
                    rejected_keys[key] = exc
                continue
            places.append(i)
        return outcomes, new_jobs, places

    async def pause(
        self, owner: str, job_id: str, *, by: tuple[str, str] | None = None, note: str | None = None
    ) -> Job:
        """Pauses the job; `by`: who asks (owner and role), `note`: theirs."""
        by_owner, by_role = (None, None) if by is None else by
        return _ok(await self.committer.submit(PauseJob(self.now_ms(), owner, job_id, by_owner, by_role, note)), Job)

    async def resume(self, owner: str, job_id: str) -> Job:
        job = self.store.get_job(owner, job_id)
        at_ms = self.now_ms()
        slot_ms = next_due_ms = None
        ran_all = job.schedule.max_runs is not None and job.runs_done >= job.schedule.max_runs
        if is_after(job.schedule):
            # No slot of its own: its parents' ends make its runs.
            return _ok(await self.committer.submit(ResumeJob(at_ms, owner, job_id, None, None)), Job)
        if job.schedule.repeating:
            # Nothing to plan after max_runs (apply decides it again, from the job as replicated).
            slot_ms = None if ran_all else self._slot_not_cancelled(job, job.schedule, slot_after_ms(
                job.schedule, job.created_at_ms, at_ms, inclusive=False))
        else:
            slot_ms = job.slot_ms  # its one run, made anew if retention dropped the cancelled one
        next_due_ms = None if slot_ms is None else due_ms(job, slot_ms, at_ms)
        # Slots after the job's last run are not the job's: none of them is missed.
        missed = paused_ranges(job, at_ms, slot_ms) if job.state == "paused" and not ran_all else []
        return _ok(await self.committer.submit(ResumeJob(at_ms, owner, job_id, slot_ms, next_due_ms, missed)), Job)

    async def backfill(self, owner: str, job_id: str, body: BackfillSpec) -> tuple[int, int]:
        """`POST /v1/jobs/{id}/backfill`: (runs made, slots that had one)."""
        job = self.store.get_job(owner, job_id)
        at_ms = self.now_ms()
        slots = await backfill_slots(job, body, at_ms)
        made = _ok(await self.committer.submit(BackfillJob(at_ms, owner, job_id, slots)), list)
        return len(made), len(slots) - len(made)

    async def patch(self, job: Job, body: JobSpec, *, from_msgpack: bool, keep_notify: bool = False) -> Job:
        """Changes `job` (as read at its current version) to what `body`, the
        job after the merge patch, asks for: checked as a create would be,
        and its waiting run re-planned from now when the schedule or the
        jitter changed (docs/semantics.md "Changing a job"). A body that
        changes nothing is no change: `job` is answered as it is.
        `keep_notify`: the patch does not name `notify`, which stays the job's.
        `VersionMismatch` when the job changed since it was read."""
        at_ms = self.now_ms()
        item = self.new_job(job.owner, body, at_ms, from_msgpack=from_msgpack, job_id=job.id, patching=True)
        made = item.job
        if keep_notify:
            made.notify = job.notify  # the patch left it out: kept, never checked again
        stored = self.store.deps_state(job.id)
        edges_before = None if stored is None else (stored.after, stored.requires)
        edges_after = None if item.deps is None else (item.deps.after, item.deps.requires)
        old_use = self.store.calendar_use(job.id)
        if _mutable(made) == _mutable(job) and edges_before == edges_after and item.calendar == old_use:
            # The edges and the calendar are read now, not at `job.version`:
            # answered unchanged only when that is still the job's version,
            # else apply refuses it (VersionMismatch), as a change from it.
            current = self.store.get_job_any(job.id)
            if current is not None and current.version == job.version:
                return job
        made.created_at_ms = job.created_at_ms  # an `every_s` grid stays where it was
        replan = made.schedule != job.schedule or made.jitter_s != job.jitter_s
        slot_ms = due = None
        if replan and not is_after(made.schedule):
            sched = made.schedule
            if sched.repeating:
                slot_ms = self._slot_not_cancelled(job, sched, slot_after_ms(
                    sched, job.created_at_ms, at_ms, inclusive=False))
            else:
                slot_ms = sched.at_ms
            due = None if slot_ms is None else due_ms(made, slot_ms, at_ms)
        command = PatchJob(
            at_ms, job.owner, job.id, job.version, made, replan, slot_ms, due, sets_notify=True,
            sets_deps=edges_before != edges_after, deps=item.deps,
        )
        if item.calendar != old_use:
            command.sets_calendar, command.calendar = True, item.calendar
        return _ok(await self.committer.submit(command), Job)

    def _slot_not_cancelled(self, job: Job, sched: Schedule, slot_ms: int | None) -> int | None:
        """The first slot of `sched` from `slot_ms` on whose run its owner
        did not cancel: a resume or a re-plan of a repeating job never
        brings such a run back, it goes on to the next slot (as the cancel
        did). Read here, by the node that makes the command; apply leaves
        a run its owner cancelled as it is."""
        for _ in range(limits.taken_slots_stepped_max):
            if slot_ms is None:
                return None
            run = self.store.get_run_any(job.id, slot_ms)
            if run is None or not run.owner_cancelled:
                return slot_ms
            slot_ms = slot_after_ms(sched, job.created_at_ms, slot_ms, inclusive=False)
        return slot_ms

    async def delete(self, owner: str, job_id: str) -> None:
        _ok(await self.committer.submit(DeleteJob(self.now_ms(), owner, job_id)), type(None))

    async def trigger(self, owner: str, job_id: str) -> Run:
        return _ok(await self.committer.submit(TriggerJob(self.now_ms(), owner, job_id)), Run)

    async def cancel_run(self, owner: str, run_id: str) -> Run:
        """`POST /v1/runs/{id}/cancel` (docs/semantics.md "Cancelling a
        run"): the command, with the next slot of the job's schedule
        decided here when the run is the waiting run of a repeating job's
        slot (apply reads no clock and no time-zone database)."""
        parsed = ids.parse_run_id(run_id)
        if parsed is None:
            raise errors.NotFound(f"no run {run_id}")
        job_id, nominal_ms = parsed
        for _ in range(limits.patch_tries_max):
            job = self.store.get_job(owner, job_id)  # NotFound for another owner's
            at_ms = self.now_ms()
            command = CancelRun(at_ms, owner, job_id, nominal_ms)
            if job.schedule.repeating and job.state == "active" and job.slot_ms == nominal_ms:
                command.planned = True
                nxt = catch_up(job, nominal_ms, at_ms)
                if nxt is not None:
                    command.missed = nxt.missed  # recorded even when no slot is left (rules/runs.py)
                    nxt = step_over_taken(job, nxt, at_ms, functools.partial(self.store.get_run_any, job.id))
                if nxt is not None:
                    command.next_slot_ms, command.next_due_ms = nxt.slot_ms, nxt.due_ms
                    command.missed, command.catchup_until_ms = nxt.missed, nxt.until_ms
                    command.catchup_decided_ms = nxt.decided_ms
            outcome = await self.committer.submit(command)
            if not isinstance(outcome, errors.Conflict):
                return _ok(outcome, Run)
            # The job's schedule moved between the read and the commit: read
            # it again (rare: a change that made this run its slot run).
        raise errors.Conflict(f"job {job_id} kept changing while the cancel was made: send it again")


def _plan_first(job: Job, at_ms: int, *, patching: bool) -> None:
    """A new job's first slot and its due time; a schedule without one is
    400, unless a patch's `end_at` ended it (the patch completes the job)."""
    sched = job.schedule
    if is_after(sched):
        return  # no slot of its own: its parents' ends make its runs
    job.slot_ms = first_slot_ms(sched, at_ms)
    if job.slot_ms is None:
        if sched.end_at_ms is None:
            raise errors.Invalid.at("schedule", "the schedule has no occurrence left")
        if not patching:
            raise errors.Invalid.at("schedule.end_at", "the schedule has no occurrence up to end_at")
    job.next_run_at_ms = None if job.slot_ms is None else due_ms(job, job.slot_ms, at_ms)


def _mutable(job: Job) -> tuple[object, ...]:
    """What a patch may change of a job."""
    return (
        job.name, job.target, job.payload, job.schedule, job.max_attempts, job.backoff_s, job.lease_s, job.jitter_s,
        job.labels, job.notify, job.timeout_s, job.overlap, job.catchup,
    )


def _created_each(answer: Answer) -> TypeGuard[list[Created | errors.TempoError]]:
    """Whether `answer` is what apply answers a `CreateJobs`: a job created or
    its fault, one per new job."""
    return isinstance(answer, list) and all(isinstance(o, Created | errors.TempoError) for o in answer)


def _ok(outcome: Answer, kind: type[T]) -> T:
    """A single command's outcome, a `kind`; its fault raised."""
    if isinstance(outcome, errors.TempoError):
        raise outcome
    assert isinstance(outcome, kind), f"{type(outcome).__name__} answered where {kind.__name__} was due"
    return outcome
