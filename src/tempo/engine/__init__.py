"""The storage engine: tables, commands, apply, group commit, dispatch.

This is the engine's public face, as trio's `__init__` is over its private
modules: the other packages (net/, node/, `server.py`) import what they use
from `tempo.engine` and never from its modules, so the modules can be split
and moved behind it (a contract in `pyproject.toml` checks this; docs/style.md
"Layers"). Modules of the engine import each other by module
(`from tempo.engine.keys import ...`), never from this package, which would
be an import cycle; tests may reach into the modules.
"""

from tempo.engine.calendar_plan import Entry as CalendarEntry
from tempo.engine.calendars import NAME as CALENDAR_NAME
from tempo.engine.commandlog import Answer, CommandLog, Intake, Listener, Waiter
from tempo.engine.commands import ClaimKey, Command, NotifyCursor, Result, SetMember, decode_entry
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
