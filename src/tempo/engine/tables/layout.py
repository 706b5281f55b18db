"""The layout of tempo's tables: their names, the keys of the rows in
`meta` and in the history buckets, the codecs of the records, and what
decides which index rows a run has. No LMDB here: the rules
(engine/rules/) read these facts as well as the tables layer."""

import struct

import msgspec

from tempo import limits
from tempo.engine import keys, records
from tempo.engine.records import ClaimKeyEntry, Event, Job, JobOutcome, RequestKeyEntry, Run

TABLES = (
    "meta",
    "jobs",
    "jobs_by_owner",
    "runs",
    "runs_by_job",
    "request_keys",
    "events",
    "open_minutes",
    "members",
    "history_days",
    "claim_keys",
    "runs_by_status",
    "job_outcomes",
    "jobs_by_label",
    "runs_held",
    "job_counts",
    "deps",
    "calendars",
)
# Tables a later version added: created in an existing store that lacks them.
# `runs_by_status` and `job_outcomes` (`RUN_INDEX_TABLES`) are built at open
# from the other tables (tables/build.py): the runs index by owner and
# status of open runs, and each job's outcome. The index rows of finished
# runs live in the history bucket of the run, at b"s" + `keys.status_key(...)`,
# so they go with it.
RUN_INDEX_TABLES = ("runs_by_status", "job_outcomes")
ADDED_TABLES = ("claim_keys", *RUN_INDEX_TABLES, "jobs_by_label", "runs_held", "job_counts", "deps", "calendars")
# Tables the digest of the state (`Store.digest`) hashes only once they hold
# a row: a store that never used them digests as before they existed (the
# recorded logs of tests/engine/test_apply_replay.py were digested before).
HASHED_WHEN_USED = ("deps", "calendars")
HIST_STATUS = b"s"
# In `meta`: present once the tables above and the b"s" rows are complete.
RUN_INDEX = b"run_index"
# In `meta`: present once `jobs_by_label` holds a row for each label of each
# job (built at open for a store of a version without it).
LABEL_INDEX = b"label_index"
# In `meta`: present once `runs_held` holds a row (at the runs-by-job key)
# for each open run an overlap policy looks at: claimed, or waiting
# buffered, and not a backfill run (`is_held`). The policy's decisions read
# these rows, not every open run of the job (built at open for a store of
# a version without it).
HELD_INDEX = b"held_index"
# `job_counts`: how many jobs each owner has in each state, kept by apply
# in the transaction that changes them (`Tables.count_job`), so counting
# them is one read a state, not a scan of the owner's jobs. A row's key is
# `job_count_key(owner, state)`, its value a U64. The row at `COUNTS_BUILT`
# (no owner's key starts with 0xff, which UTF-8 never holds) says the table
# is complete: a store or snapshot of a version without it has it built at
# open (tables/build.py), one pass over the jobs table. It is a table of
# its own, not rows of `meta`, so every table before it is as it was.
JOB_STATES = ("active", "paused", "completed")
JOB_STATE_CODE = {state: code for code, state in enumerate(JOB_STATES)}
COUNTS_BUILT = b"\xff"
OPEN = ("waiting", "claimed")
FINISHED = ("done", "failed", "cancelled", "missed", "skipped")  # `missed`: a row record_missed writes
U64 = struct.Struct(">Q")
MINUTE = struct.Struct(">I")
# History buckets (limits.py "Retention"): finished runs and events, in a ring
# of databases `hist:000`... A bucket's slot is its day mod the ring's size;
# `history_days` maps each slot in use (u16) to the day it holds (u32). In a
# bucket, a run is at b"r" + runs-by-job key, an event at b"e" + events key.
SLOT = struct.Struct(">H")
DAY = struct.Struct(">I")
HIST_RUN = b"r"
HIST_EVENT = b"e"
assert len(HIST_EVENT) == limits.event_key_head_bytes, "the event key layout limits.py bounds"
APPLIED_INDEX = b"applied_index"
EVENT_SEQ = b"event_seq"
# The last event sequence the notifier handled (`NotifyCursor`).
NOTIFY_CURSOR = b"notify_cursor"
# The highest command stamp applied (UNIX ms): the floor of the clock of
# whichever node stamps commands next (clock.py).
STAMP = b"stamp_ms"

enc = msgspec.msgpack.Encoder()
# Decoders that raise records.Corrupt, and only it, for a damaged record.
job_dec = records.Decoder(Job)
job_head_dec = records.Decoder(records.JobHead, "Job")
job_state_dec = records.Decoder(records.JobStateHead, "Job")
run_dec = records.Decoder(Run)
reqkey_dec = records.Decoder(RequestKeyEntry)
claimkey_dec: records.Decoder[ClaimKeyEntry] = records.Decoder(ClaimKeyEntry)
event_dec = records.Decoder(Event)
event_head_dec = records.Decoder(records.EventHead, "Event")
outcome_dec = records.Decoder(JobOutcome)


def bucket_name(slot: int) -> str:
    return f"hist:{slot:03d}"


def must(done: bool, why: str) -> None:
    """An invariant of a call that does work, such as a row delete: checked
    with `if`, never inside `assert`, which `python -O` drops together with
    the call it holds (docs/operations.md "Running under python -O").
    Raises AssertionError, as an assert would, under either flag."""
    if not done:
        raise AssertionError(why)


def present(raw: bytes | None) -> bytes:
    """A row an index entry or a record points at: the transaction that
    wrote the pointer wrote the row, so a missing one is a bug."""
    assert raw is not None, "an index entry points at a missing row"
    return raw


def index_ms(run: Run) -> int:
    """The time a run is listed at (docs/api.md "GET /v1/runs"): its end
    for `done` and `failed`, when it was recorded for a `missed` row, else
    its due time. Read from the run alone, so
    an index built from the tables equals one kept by apply."""
    if run.status in ("done", "failed", "missed", "skipped") and run.finished_ms is not None:
        return run.finished_ms
    return run.due_ms


def status_key_of(owner: str, run: Run) -> bytes:
    return keys.status_key(owner, keys.status_code(run.status), index_ms(run), run.job_id, run.nominal_ms)


def add_to_outcome(outcome: JobOutcome, run: Run) -> None:
    """Counts a run that just finished into its job's decoded outcome, in
    place. The last run is the one with the latest (end, nominal time),
    whatever order the runs are counted in, so an index built at open
    comes to the same bytes."""
    if run.status == "done":
        outcome.done += 1
    elif run.status == "failed":
        outcome.failed += 1
    elif run.status == "cancelled":
        outcome.cancelled += 1
    elif run.status == "skipped":
        outcome.skipped += 1
    if run.status in ("done", "failed") and run.finished_ms is not None and (
        outcome.last_finished_ms is None
        or (run.finished_ms, run.nominal_ms) >= (outcome.last_finished_ms, outcome.last_nominal_ms or 0)
    ):
        outcome.last_nominal_ms = run.nominal_ms
        outcome.last_status = run.status
        outcome.last_attempt = run.attempt
        outcome.last_finished_ms = run.finished_ms
        outcome.last_error = run.error


def job_count_key(owner: str, state: str) -> bytes:
    """The `job_counts` row of `owner`'s jobs in `state`."""
    return keys.owner_prefix(owner) + bytes((JOB_STATE_CODE[state],))


def parse_job_count_key(key: bytes) -> tuple[str, str]:
    """(owner, state) of a `job_counts` row other than `COUNTS_BUILT`."""
    return key[:-2].decode(), JOB_STATES[key[-1]]


def label_keys(job: Job, job_key: bytes) -> list[bytes]:
    """The job's rows of the jobs-by-label index, one per label."""
    if not job.labels or not keys.owner_fits(job.owner):
        return []
    return [keys.label_key(job.owner, name, value, job_key) for name, value in job.labels.items()]


def is_held(run: Run) -> bool:
    """Whether `run` has a row in `runs_held`: an open run an overlap
    policy looks at (rules/overlap.py `state`), claimed or waiting
    buffered, not a backfill run."""
    return not run.backfill and (run.status == "claimed" or (run.status == "waiting" and run.buffered))


def may_be_held(status: str, due_ms: int) -> bool:
    """Whether an open run in `status`, due at `due_ms`, may have a row in
    `runs_held`: claimed, or waiting at the far due time a buffered run is
    parked at (a run due then by its schedule has none)."""
    return status == "claimed" or (status == "waiting" and due_ms == limits.overlap_buffered_due_ms)
