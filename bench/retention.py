#!/usr/bin/env python3
"""Dropping a day of run history: the cost of `DropHistory` on a bucket of N
finished runs against deleting the same rows one by one.

    python bench/retention.py                       # 100,000 runs, plus 1,000 / 10,000 / 1,000,000 drops
    python bench/retention.py --rows 100000 --sizes 10000,1000000

The bucket is filled directly with finished-run rows as `finish_run` writes
them (a run record with a short output, under its history key), in a
temporary store with fsync on, as `tempo serve` opens it. (a) applies a
`DropHistory` entry (one write transaction, one fsync); (b) fills the bucket
again and deletes every row in one write transaction (one fsync). The drop
times for the other sizes show whether the cost grows with the rows. Each
figure is the median of `--repeat` tries.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import msgspec

from tempo import ids, limits
from tempo.engine import keys
from tempo.engine.commands import DropHistory, encode_entry
from tempo.engine.records import Run
from tempo.engine.store import Store
from tempo.engine.tables import Tables

DAY = 20_833  # 2027-01-15
AT_MS = DAY * limits.day_ms + 12 * 3_600_000
_enc = msgspec.msgpack.Encoder()


def rows(count: int) -> list[tuple[bytes, bytes]]:
    """`count` finished runs of distinct jobs, as (history key, record), in key order."""
    out = []
    for i in range(count):
        job_id = ids.job_id_from_int(AT_MS - 3_600_000, i)
        nominal_ms = AT_MS - 60_000
        run = Run(job_id, nominal_ms, nominal_ms, "done", 1, "worker-1", None, nominal_ms + 5, AT_MS, "ok", None)
        out.append((b"r" + keys.by_job_key(job_id, nominal_ms), _enc.encode(run)))
    out.sort()
    return out


def fill(store: Store, data: list[tuple[bytes, bytes]]) -> object:
    """Writes the rows into the bucket of AT_MS's day; answers the bucket."""

    def work(txn):
        db = Tables(txn, store.db, store.buckets).bucket_for(AT_MS)
        txn.cursor(db=db).putmulti(data, append=True)
        return db

    return store.write(work)


def time_drop(store: Store) -> float:
    index = store.applied_index() + 1
    entry = encode_entry([DropHistory(AT_MS + limits.day_ms, DAY + 1)])
    started = time.perf_counter()
    store.apply_entry(index, entry)
    elapsed = time.perf_counter() - started
    assert store.history_days() == []
    return elapsed


def time_one_by_one(store: Store, db: object, data: list[tuple[bytes, bytes]]) -> float:
    started = time.perf_counter()
    with store.env.begin(write=True) as txn:
        for key, _ in data:
            assert txn.delete(key, db=db)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="runs in the bucket compared (default 100000)")
    parser.add_argument("--sizes", default="1000,10000,1000000", help="other bucket sizes to drop (comma-separated)")
    parser.add_argument("--repeat", type=int, default=3, help="tries per figure; the median is printed (default 3)")
    parser.add_argument("--dir", default=None, help="where the temporary store goes (default: the system's temp dir)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    root = tempfile.mkdtemp(prefix="tempo-retention-", dir=args.dir)
    try:
        store = Store(os.path.join(root, "data"))
        try:
            data = rows(args.rows)

            def drop_after_fill(data: list[tuple[bytes, bytes]]) -> float:
                tries = []
                for _ in range(args.repeat):
                    fill(store, data)
                    tries.append(time_drop(store))
                return statistics.median(tries)

            empty_s = drop_after_fill([])
            drop_s = drop_after_fill(data)
            delete_s = statistics.median(
                time_one_by_one(store, fill(store, data), data) for _ in range(args.repeat)
            )
            record_bytes = sum(len(k) + len(v) for k, v in data) // len(data)
            print(f"bucket of {args.rows:,} finished runs (~{record_bytes} bytes of key and record each), fsync on")
            print(f"  empty bucket drop (the fsync alone):  {empty_s * 1000:9.1f} ms")
            print(f"  (a) DropHistory of the bucket:        {drop_s * 1000:9.1f} ms")
            print(f"  (b) {args.rows:,} deletes, one transaction: {delete_s * 1000:9.1f} ms")
            print(f"  (b) / (a): {delete_s / drop_s:.1f}x")
            for size in sizes:
                print(f"  DropHistory of a bucket of {size:>9,} runs: {drop_after_fill(rows(size)) * 1000:9.1f} ms")
        finally:
            store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
