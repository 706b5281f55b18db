"""The storage engine: tables, commands, apply, group commit, dispatch.

This is the engine's public face, as trio's `__init__` is over its private
modules: the other packages (net/, node/, `server.py`) import what they use
from `tempo.engine` and never from its modules, so the modules can be split
and moved behind it (a contract in `pyproject.toml` checks this; docs/style.md
"Layers"). Modules of the engine import each other by module
(`from tempo.engine.keys import ...`), never from this package, which would
be an import cycle; tests may reach into the modules.

The face is lazy (PEP 562): a name is imported from its module when it is
first read, so importing one module of the engine (the pure planner,
`tempo.engine.plan`) loads neither trio nor lmdb
(tests/engine/test_face.py). `_WHERE` says where each name lives; the
imports under `TYPE_CHECKING` say the same to mypy, and a test keeps the
two in step.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tempo.engine.calendar_plan import Entry as CalendarEntry
    from tempo.engine.calendars import NAME as CALENDAR_NAME
    from tempo.engine.commandlog import Answer, CommandLog, Intake, Listener, Waiter
    from tempo.engine.commands import (
        ClaimKey,
        Command,
        NotifyCursor,
        Result,
        SetMember,
        decode_entry,
    )
    from tempo.engine.commit import Committer
    from tempo.engine.datadir import DataDirError, Identity, member_identity, single_identity
    from tempo.engine.datadir import hold as hold_data_dir  # `hold` alone says too little here
    from tempo.engine.dispatch import HTTP_QUEUE, LATENESS_BUCKETS_S, ClaimedRun, Dispatcher
    from tempo.engine.jobs import Jobs, preview_occurrences
    from tempo.engine.keys import ORDER_TAIL_BYTES, STATUS_CODE, STATUSES
    from tempo.engine.plan import Occurrence
    from tempo.engine.raftlog import Applied, RaftLog, apply_entries, write_ready
    from tempo.engine.records import (
        Calendar,
        CalendarUse,
        Catchup,
        Cause,
        Corrupt,
        DepState,
        Event,
        Job,
        JobOutcome,
        MissedReason,
        Paused,
        Run,
        RunCancel,
        RunStatus,
        Schedule,
        SkippedReason,
    )
    from tempo.engine.request_checks import (
        check_json_value,
        check_label_key,
        instant_ms,
        queues_hash,
        schedule_record,
    )
    from tempo.engine.retention import Retention
    from tempo.engine.storage_guard import StorageGuard
    from tempo.engine.store import STORAGE_ERRNOS, Changes, Created, Outcome, Store

# Each public name: (module, its name there).
_WHERE: dict[str, tuple[str, str]] = {
    "CALENDAR_NAME": ("tempo.engine.calendars", "NAME"),
    "HTTP_QUEUE": ("tempo.engine.dispatch", "HTTP_QUEUE"),
    "LATENESS_BUCKETS_S": ("tempo.engine.dispatch", "LATENESS_BUCKETS_S"),
    "ORDER_TAIL_BYTES": ("tempo.engine.keys", "ORDER_TAIL_BYTES"),
    "STATUSES": ("tempo.engine.keys", "STATUSES"),
    "STATUS_CODE": ("tempo.engine.keys", "STATUS_CODE"),
    "STORAGE_ERRNOS": ("tempo.engine.store", "STORAGE_ERRNOS"),
    "Answer": ("tempo.engine.commandlog", "Answer"),
    "Applied": ("tempo.engine.raftlog", "Applied"),
    "Calendar": ("tempo.engine.records", "Calendar"),
    "CalendarEntry": ("tempo.engine.calendar_plan", "Entry"),
    "CalendarUse": ("tempo.engine.records", "CalendarUse"),
    "Catchup": ("tempo.engine.records", "Catchup"),
    "Cause": ("tempo.engine.records", "Cause"),
    "Changes": ("tempo.engine.store", "Changes"),
    "ClaimKey": ("tempo.engine.commands", "ClaimKey"),
    "ClaimedRun": ("tempo.engine.dispatch", "ClaimedRun"),
    "Command": ("tempo.engine.commands", "Command"),
    "CommandLog": ("tempo.engine.commandlog", "CommandLog"),
    "Committer": ("tempo.engine.commit", "Committer"),
    "Corrupt": ("tempo.engine.records", "Corrupt"),
    "Created": ("tempo.engine.store", "Created"),
    "DataDirError": ("tempo.engine.datadir", "DataDirError"),
    "DepState": ("tempo.engine.records", "DepState"),
    "Dispatcher": ("tempo.engine.dispatch", "Dispatcher"),
    "Event": ("tempo.engine.records", "Event"),
    "Identity": ("tempo.engine.datadir", "Identity"),
    "Intake": ("tempo.engine.commandlog", "Intake"),
    "Job": ("tempo.engine.records", "Job"),
    "JobOutcome": ("tempo.engine.records", "JobOutcome"),
    "Jobs": ("tempo.engine.jobs", "Jobs"),
    "Listener": ("tempo.engine.commandlog", "Listener"),
    "MissedReason": ("tempo.engine.records", "MissedReason"),
    "NotifyCursor": ("tempo.engine.commands", "NotifyCursor"),
    "Occurrence": ("tempo.engine.plan", "Occurrence"),
    "Outcome": ("tempo.engine.store", "Outcome"),
    "Paused": ("tempo.engine.records", "Paused"),
    "RaftLog": ("tempo.engine.raftlog", "RaftLog"),
    "Result": ("tempo.engine.commands", "Result"),
    "Retention": ("tempo.engine.retention", "Retention"),
    "Run": ("tempo.engine.records", "Run"),
    "RunCancel": ("tempo.engine.records", "RunCancel"),
    "RunStatus": ("tempo.engine.records", "RunStatus"),
    "Schedule": ("tempo.engine.records", "Schedule"),
    "SetMember": ("tempo.engine.commands", "SetMember"),
    "SkippedReason": ("tempo.engine.records", "SkippedReason"),
    "StorageGuard": ("tempo.engine.storage_guard", "StorageGuard"),
    "Store": ("tempo.engine.store", "Store"),
    "Waiter": ("tempo.engine.commandlog", "Waiter"),
    "apply_entries": ("tempo.engine.raftlog", "apply_entries"),
    "check_json_value": ("tempo.engine.request_checks", "check_json_value"),
    "check_label_key": ("tempo.engine.request_checks", "check_label_key"),
    "decode_entry": ("tempo.engine.commands", "decode_entry"),
    "hold_data_dir": ("tempo.engine.datadir", "hold"),
    "instant_ms": ("tempo.engine.request_checks", "instant_ms"),
    "member_identity": ("tempo.engine.datadir", "member_identity"),
    "preview_occurrences": ("tempo.engine.jobs", "preview_occurrences"),
    "queues_hash": ("tempo.engine.request_checks", "queues_hash"),
    "schedule_record": ("tempo.engine.request_checks", "schedule_record"),
    "single_identity": ("tempo.engine.datadir", "single_identity"),
    "write_ready": ("tempo.engine.raftlog", "write_ready"),
}

__all__ = [
    "CALENDAR_NAME",
    "HTTP_QUEUE",
    "LATENESS_BUCKETS_S",
    "ORDER_TAIL_BYTES",
    "STATUSES",
    "STATUS_CODE",
    "STORAGE_ERRNOS",
    "Answer",
    "Applied",
    "Calendar",
    "CalendarEntry",
    "CalendarUse",
    "Catchup",
    "Cause",
    "Changes",
    "ClaimKey",
    "ClaimedRun",
    "Command",
    "CommandLog",
    "Committer",
    "Corrupt",
    "Created",
    "DataDirError",
    "DepState",
    "Dispatcher",
    "Event",
    "Identity",
    "Intake",
    "Job",
    "JobOutcome",
    "Jobs",
    "Listener",
    "MissedReason",
    "NotifyCursor",
    "Occurrence",
    "Outcome",
    "Paused",
    "RaftLog",
    "Result",
    "Retention",
    "Run",
    "RunCancel",
    "RunStatus",
    "Schedule",
    "SetMember",
    "SkippedReason",
    "StorageGuard",
    "Store",
    "Waiter",
    "apply_entries",
    "check_json_value",
    "check_label_key",
    "decode_entry",
    "hold_data_dir",
    "instant_ms",
    "member_identity",
    "preview_occurrences",
    "queues_hash",
    "schedule_record",
    "single_identity",
    "write_ready",
]


def __getattr__(name: str) -> Any:
    """Imports a public name from its module on first use (PEP 562), and
    keeps it, so the next read is a plain attribute."""
    try:
        module, attr = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
