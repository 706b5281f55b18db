"""The history buckets' writes of `Tables` (tables/writes.py): the bucket
of a day, taken into use and dropped whole, and the rows a finished run
leaves there."""

import lmdb

from tempo import limits
from tempo.engine import keys
from tempo.engine.records import Run
from tempo.engine.tables.keyed import Keyed
from tempo.engine.tables.layout import (
    DAY,
    HIST_RUN,
    HIST_STATUS,
    SLOT,
    enc,
    must,
    status_key_of,
)
from tempo.engine.tables.reads import Bucket


class Buckets(Keyed):
    __slots__ = ()

    def history_cursor(self, at_ms: int, part: bytes) -> "lmdb.Cursor[bytes]":
        """A cursor on the history bucket of the day of `at_ms` (`bucket_for`),
        for the rows whose keys start with `part`."""
        found = (at_ms // limits.day_ms, part)
        cur = self._hist_curs.get(found)
        if cur is None:
            cur = self._hist_curs[found] = self.txn.cursor(db=self.bucket_for(at_ms))
        return cur

    def bucket_for(self, at_ms: int) -> Bucket:
        """The history bucket of the day of `at_ms`, taken into use if new."""
        day = at_ms // limits.day_ms
        db = self._bucket_of_day.get(day)
        if db is not None:
            return db
        slot = day % limits.history_buckets
        key = SLOT.pack(slot)
        raw = self.txn.get(key, db=self.hist_days)
        held = None if raw is None else DAY.unpack(raw)[0]
        if held is None or held < day:
            if held is not None:
                # The slot holds a day at least `history_buckets` days older,
                # past any retention period (the leader's drop is late): it
                # goes now rather than mix with this day.
                self.txn.drop(self.buckets[slot], delete=False)
                self._hist_curs.clear()
            self.txn.put(key, DAY.pack(day), db=self.hist_days)
            self._history = None
        # `held > day`: `at_ms` is that far behind a day stored already (a
        # clock set far back); the rows join that newer day's bucket.
        db = self._bucket_of_day[day] = self.buckets[slot]
        return db

    def drop_history_before(self, before_day: int) -> None:
        """Drops whole buckets of days before `before_day`: LMDB frees a
        database's pages walking its branch pages only (leaf pages too
        where values overflowed a page), so the cost does not grow with
        the rows in it."""
        for key, value in list(self.txn.cursor(db=self.hist_days)):
            if DAY.unpack(value)[0] < before_day:
                self.txn.drop(self.buckets[SLOT.unpack(key)[0]], delete=False)
                must(self.txn.delete(key, db=self.hist_days), "a day read from the index has its row")
        self._history = None
        self._bucket_of_day.clear()
        self._hist_curs.clear()

    def unfinish(self, bucket: Bucket, owner: str, run: Run) -> None:
        """Takes a finished run (as it is stored) out of its history bucket,
        with its runs-by-status row: a run that waits again, or a `missed`
        row whose slot a run takes."""
        must(self.txn.delete(HIST_RUN + keys.by_job_key(run.job_id, run.nominal_ms), db=bucket),
             "a run read from history has its row")
        must(self.txn.delete(HIST_STATUS + status_key_of(owner, run), db=bucket),
             "a run read from history has its status row")

    def put_missed_row(self, owner: str, row: Run, at_ms: int) -> None:
        """A `missed` row of a job's history, in the bucket of `at_ms`'s day."""
        bucket = self.bucket_for(at_ms)
        self.txn.put(HIST_RUN + keys.by_job_key(row.job_id, row.nominal_ms), enc.encode(row), db=bucket)
        self.txn.put(HIST_STATUS + status_key_of(owner, row), b"", db=bucket)
