"""What the engine reads of a request, and its checks beyond the shape:
targets, request keys, payloads, instants, schedules, dependencies,
catch-up, overlap and labels, each turned into the record apply stores
(engine/records.py), or refused with the field it names
(docs/api.md "Problems (errors)"). The jobs service (engine/jobs.py) calls
them on the node that accepted the request.

The engine does not import the API's shapes (`tempo.schema`, an import
contract in pyproject.toml): it names what it reads of a request in the
protocols below (`JobSpec`, `ScheduleSpec`, `DstSpec`, `RetrySpec`, `PreviewSpec`),
which the decoded request structs meet as they are, with no copy per item.
"""

import functools
import hashlib
import math
import re
import urllib.parse
from datetime import datetime
from typing import Any, Protocol

import msgspec

from tempo import clock, errors, ids, limits, schedule, targets
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
    Schedule,
)
from tempo.engine.rules.deps import is_after

_QUEUE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_hash_encoder = msgspec.msgpack.Encoder(order="sorted")
json_encoder = msgspec.json.Encoder()


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
        if len(json_encoder.encode(payloads)) > limits.payload_bytes_max:
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


def queues_hash(queues: list[str]) -> bytes:
    """The set of queues a claim names, as a claim key's record keeps it:
    order and repeats do not matter."""
    return hashlib.blake2b("\n".join(sorted(set(queues))).encode(), digest_size=16).digest()


def backfill_range_ms(job: Job, body: BackfillSpec, now_ms: int) -> tuple[int, int]:
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


def _schedule_hashed(sched: Schedule) -> tuple[Any, ...] | Schedule:
    """The schedule as a request key's hash takes it: without end
    conditions, the fields it had before they existed (a tuple encodes as
    the array-like record does), so the hash of such a body is what it was."""
    if sched.end_at_ms is None and sched.max_runs is None:
        return msgspec.structs.astuple(sched)[:-2]
    return sched


def body_digest(
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
