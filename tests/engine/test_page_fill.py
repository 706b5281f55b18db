"""New rows whose keys only grow (a new job's ID, its runs-by-job and owner
rows) go in with LMDB's append flag, so their leaf pages fill up rather
than stay half full (docs/performance.md "Pages filled in key order"); rows
in any other order still all go in."""

import random

import lmdb
import pytest

from tempo import limits
from tempo.engine.commands import CreateJobs, encode_entry
from tempo.engine.tables.writes import put_new

from .test_create_batch import T0, new_job

NODE_BYTES = 8 + 2  # LMDB's node header and its slot in the page
PAGE_HEAD = 16


def _fill(store, table: str) -> float:
    """Bytes of the table's rows over the bytes its leaf pages hold."""
    with store.env.begin() as txn:
        stat = txn.stat(store.db[table])
        rows = sum(len(k) + len(v) + NODE_BYTES for k, v in txn.cursor(db=store.db[table]))
    return rows / (stat["leaf_pages"] * (stat["psize"] - PAGE_HEAD))


def test_jobs_created_after_the_last_ones_fill_their_leaf_pages(store):
    # Each batch's IDs are past the stored ones, in any order within it
    # (put one by one in that order, the pages end about two-thirds full).
    rng = random.Random(7)
    for b in range(6):
        at_ms = T0 + b * 1000
        made = [new_job(at_ms, payload={"i": i}) for i in range(500)]
        rng.shuffle(made)
        store.apply_entry(b + 1, encode_entry([CreateJobs(at_ms, made)]))
    for table in ("jobs", "runs_by_job", "jobs_by_owner"):
        assert _fill(store, table) > 0.95, table


def test_a_batch_with_ids_below_the_last_ones_goes_in_as_one_item_at_a_time_does(two_stores):
    # A new leader whose clock is behind the old one's draws IDs below the
    # stored ones; a batch may also straddle the last key.
    batch, items = two_stores
    later = [new_job(T0 + limits.minute_ms, payload={"i": i}) for i in range(40)]
    earlier = [new_job(T0, payload={"i": i}) for i in range(40)]
    mixed = earlier[:20] + [new_job(T0 + 2 * limits.minute_ms, payload={"i": i}) for i in range(20)]
    for n, made in enumerate((later, earlier[20:], mixed)):
        batch.apply_entry(n + 1, encode_entry([CreateJobs(T0, made)]))
        items.apply_entry(n + 1, encode_entry([CreateJobs(T0, [m]) for m in made]))
    assert batch.dump() == items.dump()
    with batch.env.begin() as txn:
        assert txn.stat(batch.db["jobs"])["entries"] == 100


@pytest.fixture
def cursor(tmp_path):
    env = lmdb.open(str(tmp_path), max_dbs=1)
    db = env.open_db(b"t")
    with env.begin(write=True, db=db) as txn:
        txn.put(b"b", b"1")
        txn.put(b"d", b"2")
        with txn.cursor() as cur:
            yield cur
    env.close()


def test_put_new_puts_rows_below_between_and_above_the_keys_there(cursor):
    put_new(cursor, [(b"f", b"5"), (b"a", b"0"), (b"e", b"4"), (b"c", b"3")])
    cursor.first()
    assert [k for k, _ in cursor.iternext()] == [b"a", b"b", b"c", b"d", b"e", b"f"]


@pytest.mark.parametrize("rows", [[(b"b", b"x")], [(b"d", b"x")], [(b"e", b"x"), (b"d", b"x")]])
def test_put_new_stops_at_a_key_that_exists(cursor, rows):
    with pytest.raises(AssertionError, match="existed"):
        put_new(cursor, rows)
