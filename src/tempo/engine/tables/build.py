"""The indexes apply keeps, built from the other tables: for a store (or a
snapshot) of a version without them. Each is built as apply would have
kept it, and marked built in `meta`."""

import lmdb

from tempo.engine import keys
from tempo.engine.records import JobOutcome, Run
from tempo.engine.tables.layout import (
    COUNTS_BUILT,
    FINISHED,
    HELD_INDEX,
    HIST_RUN,
    HIST_STATUS,
    LABEL_INDEX,
    OPEN,
    RUN_INDEX,
    SLOT,
    U64,
    add_to_outcome,
    enc,
    is_held,
    job_count_key,
    job_dec,
    job_state_dec,
    label_keys,
    outcome_dec,
    run_dec,
    status_key_of,
)


def complete_indexes(txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database], buckets: list[lmdb._Database]) -> None:
    """Builds each index not marked built."""
    if txn.get(RUN_INDEX, db=db["meta"]) is None:
        build_run_index(txn, db, buckets)
    if txn.get(LABEL_INDEX, db=db["meta"]) is None:
        build_label_index(txn, db)
    if txn.get(HELD_INDEX, db=db["meta"]) is None:
        build_held_index(txn, db)
    if txn.get(COUNTS_BUILT, db=db["job_counts"]) is None:
        build_job_counts(txn, db)


def _count_outcome(txn: "lmdb.Transaction[bytes]", db: lmdb._Database, job_key: bytes, run: Run) -> None:
    raw = txn.get(job_key, db=db)
    outcome = JobOutcome() if raw is None else outcome_dec.decode(raw)
    add_to_outcome(outcome, run)
    txn.put(job_key, enc.encode(outcome), db=db)


def build_run_index(txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database], buckets: list[lmdb._Database]) -> None:
    """Builds the runs-by-status index and the job outcomes from the runs
    and history tables. An outcome so built counts the runs still kept,
    not those retention dropped before."""
    txn.drop(db["runs_by_status"], delete=False)
    txn.drop(db["job_outcomes"], delete=False)
    owners = {keys.job_id_of(key[-keys.JOB_KEY_BYTES :]): key[: -keys.JOB_KEY_BYTES - 1].decode()
              for key in txn.cursor(db=db["jobs_by_owner"]).iternext(values=False)}
    for _, raw in txn.cursor(db=db["runs"]):
        run = run_dec.decode(raw)
        owner = owners.get(run.job_id)
        if owner is not None and run.status in OPEN:
            txn.put(status_key_of(owner, run), b"", db=db["runs_by_status"])
    used = {SLOT.unpack(k)[0] for k in txn.cursor(db=db["history_days"]).iternext(values=False)}
    for slot in sorted(used):
        bucket = buckets[slot]
        cur = txn.cursor(db=bucket)
        stale = []
        found = cur.set_range(HIST_STATUS)
        while found and cur.key().startswith(HIST_STATUS):
            stale.append(cur.key())
            found = cur.next()
        for key in stale:
            txn.delete(key, db=bucket)
        rows = []
        found = cur.set_range(HIST_RUN)
        while found and cur.key().startswith(HIST_RUN):
            rows.append((cur.key(), cur.value()))
            found = cur.next()
        for key, raw in rows:
            run = run_dec.decode(raw)
            owner = owners.get(run.job_id)
            if owner is None or run.status not in FINISHED:
                continue
            txn.put(HIST_STATUS + status_key_of(owner, run), b"", db=bucket)
            _count_outcome(txn, db["job_outcomes"], key[len(HIST_RUN) : len(HIST_RUN) + keys.JOB_KEY_BYTES], run)
    txn.put(RUN_INDEX, b"1", db=db["meta"])


def build_held_index(txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database]) -> None:
    """Builds the held-runs index from the runs table."""
    txn.drop(db["runs_held"], delete=False)
    # Which jobs have a policy: only their runs have rows.
    policy = {job.id: job.overlap is not None for job in (job_dec.decode(raw) for _, raw in txn.cursor(db=db["jobs"]))}
    for _, raw in txn.cursor(db=db["runs"]):
        run = run_dec.decode(raw)
        if is_held(run) and policy.get(run.job_id, False):
            txn.put(keys.by_job_key(run.job_id, run.nominal_ms), b"", db=db["runs_held"])
    txn.put(HELD_INDEX, b"1", db=db["meta"])


def build_label_index(txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database]) -> None:
    """Builds the jobs-by-label index from the jobs table."""
    txn.drop(db["jobs_by_label"], delete=False)
    for key, raw in txn.cursor(db=db["jobs"]):
        job = job_dec.decode(raw)
        for row in label_keys(job, bytes(key)):
            txn.put(row, b"", db=db["jobs_by_label"])
    txn.put(LABEL_INDEX, b"1", db=db["meta"])


def build_job_counts(txn: "lmdb.Transaction[bytes]", db: dict[str, lmdb._Database]) -> None:
    """Counts the jobs of each owner in each state from the jobs table: one
    pass over it, each record decoded up to its state (`JobStateHead`)."""
    txn.drop(db["job_counts"], delete=False)
    counts: dict[tuple[str, str], int] = {}
    for raw in txn.cursor(db=db["jobs"]).iternext(keys=False):
        head = job_state_dec.decode(raw)
        counts[head.owner, head.state] = counts.get((head.owner, head.state), 0) + 1
    for (owner, state), count in sorted(counts.items()):
        txn.put(job_count_key(owner, state), U64.pack(count), db=db["job_counts"])
    txn.put(COUNTS_BUILT, b"", db=db["job_counts"])
