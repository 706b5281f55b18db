"""What tests do to a store that production never does: forget an index as
an older version's store lacked it (the next open rebuilds it), and read the
held-runs index's rows. They reach the tables through the store's own
handles and the tables layout's names, so a renamed table or mark fails here at once."""

from typing import Any

from tempo.engine import keys
from tempo.engine.store import Store
from tempo.engine.tables import layout


def _forget_index(store: Store, table: str, mark: bytes) -> None:
    """An index table empty and unmarked: rebuilt when the store opens next."""

    def work(txn: Any) -> None:
        txn.drop(store.db[table], delete=False)
        txn.delete(mark, db=store.db["meta"])

    store.write(work)


def forget_label_index(store: Store) -> None:
    """Leaves the store as a version without the jobs-by-label index left it."""
    _forget_index(store, "jobs_by_label", layout.LABEL_INDEX)


def forget_held_index(store: Store) -> None:
    """Leaves the store as a version without the held-runs index left it."""
    _forget_index(store, "runs_held", layout.HELD_INDEX)


def forget_run_index(store: Store) -> None:
    """Leaves the store as a version without the runs index left it: without
    its tables, rows and mark. Close the store next (the tables' handles are
    gone)."""
    status_head = layout.HIST_STATUS

    def work(txn: Any) -> None:
        for name in layout.RUN_INDEX_TABLES:
            txn.drop(store.db[name], delete=True)
        for bucket in store.buckets:
            cur = txn.cursor(db=bucket)
            while cur.set_range(status_head) and cur.key().startswith(status_head):
                cur.delete()
        txn.delete(layout.RUN_INDEX, db=store.db["meta"])

    store.write(work)


def held_rows(store: Store) -> set[tuple[str, int]]:
    """(job ID, nominal ms) of every row of the held-runs index."""
    with store.env.begin() as txn:
        return {
            (keys.job_id_of(bytes(key[: keys.JOB_KEY_BYTES])), layout.U64.unpack(key[keys.JOB_KEY_BYTES :])[0])
            for key in txn.cursor(db=store.db["runs_held"]).iternext(values=False)
        }


def forget_job_counts(store: Store) -> None:
    """Leaves the store as a version without `job_counts` left it: the
    table empty, without its mark (rebuilt when the store opens next)."""
    store.write(lambda txn: txn.drop(store.db["job_counts"], delete=False))


def job_counts_kept(store: Store) -> dict[tuple[str, str], int]:
    """The rows of `job_counts` as apply kept them: (owner, state) -> count."""
    with store.env.begin() as txn:
        return {layout.parse_job_count_key(bytes(key)): layout.U64.unpack(raw)[0]
                for key, raw in txn.cursor(db=store.db["job_counts"]) if key != layout.COUNTS_BUILT}


def job_counts_scanned(store: Store) -> dict[tuple[str, str], int]:
    """The same counts from every job of the jobs table."""
    counted: dict[tuple[str, str], int] = {}
    with store.env.begin() as txn:
        for _, raw in txn.cursor(db=store.db["jobs"]):
            job = layout.job_dec.decode(raw)
            counted[job.owner, job.state] = counted.get((job.owner, job.state), 0) + 1
    return counted
