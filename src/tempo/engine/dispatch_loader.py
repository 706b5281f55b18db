"""The dispatcher's core, its memory from the tables: the loader that reads
open runs into the timing wheel, the change feed, and each owner's share
of memory (engine/dispatch_core.py says what each call does; `load` says
the invariant).
"""

from collections import Counter

from tempo import limits
from tempo.engine import keys
from tempo.engine.dispatch_leases import Leases
from tempo.engine.dispatch_state import Fed, _due_of, queue_key
from tempo.engine.records import Job, Run


class Loader(Leases):
    """The loading part of `DispatchCore` (engine/dispatch_core.py)."""

    def load(self, now_ms: int, mono_s: float) -> None:
        """Loads open runs, oldest due minute first, towards the end of the
        read-ahead window: a few minutes a call, and only while memory holds
        fewer than `limits.dispatch_memory_runs_max` runs (`_memory_full`), so a backlog of a
        million overdue runs (after an outage) neither delays readiness nor
        fills memory; it streams through as it is claimed.

        Each minute is scanned whole and `loaded_until_ms` moves past it in the
        same synchronous step, so every run is either in a scan or, once its
        minute is loaded, in the change feed. A run that is both (its commit
        landed between a scan and its feed) is remembered once; and the claim
        command only claims a waiting run, so nothing is handed out twice.

        One owner may not fill that memory: an owner holding
        `limits.dispatch_owner_runs_max` runs before a minute is scanned is
        *skipped* from there on (its skip point), and its waiting runs stay
        in the table until it holds fewer than the low water mark; then
        `_reread` reads them from the skip point on. Its claimed runs are
        loaded (leased) as before. The invariant, for every owner o:

        - every waiting run of o due before `loaded_until_ms` is in memory,
          unless o is skipped and the run is due at or after its skip point;
        - if o is skipped, its skip point is at most `loaded_until_ms`, and
          none of its runs in the wheel is due after it, so o's skipped runs
          come out before its later ones: due order holds per owner. (One in
          a ready queue may be: `_skip_from` leaves runs that fell due
          already where they are.)

        The change feed (`_admit`) keeps the same rule. `check_memory` asserts
        the invariant against the table (for tests)."""
        until_ms = (keys.minute_of(now_ms + self.readahead_ms) + 1) * limits.minute_ms
        self.load_now_ms = now_ms
        rows = 0
        while self.loaded_until_ms < until_ms and rows < limits.loader_rows_per_step:
            if self._memory_full():
                break
            lo_ms = self.loaded_until_ms
            self._skip_full(lo_ms)
            minutes = self.reader.open_minutes(keys.minute_of(lo_ms), keys.minute_of(until_ms), 1)
            if not minutes:
                self.loaded_until_ms = until_ms
                break
            found = self.reader.scan_minute(minutes[0], lo_ms, until_ms)
            skipped = self.skipped
            for runs_key, run, job in found:
                if skipped and run.status == "waiting" and job.owner in skipped:
                    continue  # waits in the table, after its skip point
                self._remember(runs_key, run, job, mono_s)
            rows += len(found) + 1
            self.loaded_until_ms = min(until_ms, (minutes[0] + 1) * limits.minute_ms)
        if self.loaded_until_ms < until_ms and rows < limits.loader_rows_per_step and self._memory_full():
            rows += self._lease_ahead(until_ms, limits.loader_rows_per_step - rows, mono_s)
        if self.rereads:
            self._reread(rows)

    def _lease_ahead(self, until_ms: int, rows_max: int, mono_s: float) -> int:
        """Grants leases to the claimed runs of the minutes the loader has
        not reached because memory is full (a restart or takeover with a
        backlog), so each gets its full lease from now, as a loaded one
        does, and a dead worker's run is handed out again after it rather
        than after the backlog. Only leases: their waiting runs stay in the
        table for the loader, and a run whose lease runs out waits in due
        order behind them. Answers the rows read."""
        lo_ms = max(self.loaded_until_ms, self.leased_until_ms)
        rows = 0
        while lo_ms < until_ms and rows < rows_max:
            minutes = self.reader.open_minutes(keys.minute_of(lo_ms), keys.minute_of(until_ms), 1)
            if not minutes:
                lo_ms = until_ms
                break
            found = self.reader.scan_minute(minutes[0], lo_ms, until_ms)
            for _, run, job in found:
                if run.status == "claimed" and (run.job_id, run.nominal_ms) not in self.leases:
                    self._grant_claimed(run, job, self.load_now_ms, mono_s)
            rows += len(found) + 1
            lo_ms = min(until_ms, (minutes[0] + 1) * limits.minute_ms)
        self.leased_until_ms = lo_ms
        return rows

    def _memory_full(self) -> bool:
        """Whether memory holds `limits.dispatch_memory_runs_max` runs, each
        owner's counted up to its share: runs an owner holds past its share
        (a minute read whole, or runs the change feed took in while there
        was room) do not stop the loading of the other owners' runs."""
        if len(self.queue_of) < limits.dispatch_memory_runs_max:
            return False
        share = limits.dispatch_owner_runs_max
        return sum(min(count, share) for count in self.loaded_of.values()) >= limits.dispatch_memory_runs_max

    def _skip_full(self, lo_ms: int) -> None:
        """Skips, from `lo_ms` (the start of the next scan) on, every owner
        that holds its share of memory."""
        share = limits.dispatch_owner_runs_max
        for owner, count in self.loaded_of.items():
            if count >= share and owner not in self.skipped:
                self.skipped[owner] = lo_ms
        assert all(skip_ms <= lo_ms for skip_ms in self.skipped.values()), "skip points are loaded up to"

    def _reread(self, rows: int) -> None:
        """Reads the runs of skipped owners below their low water mark again,
        each from its skip point, as far as the loader's budget of rows
        (`rows` of it spent) and the memory bound allow."""
        for owner in list(self.rereads):
            if rows >= limits.loader_rows_per_step or self._memory_full():
                return
            self.rereads.discard(owner)
            rows += self._reread_owner(owner, limits.loader_rows_per_step - rows)
            if owner in self.skipped and self.loaded_of[owner] < limits.dispatch_owner_runs_max:
                self.rereads.add(owner)  # not done: the next tick goes on

    def _reread_owner(self, owner: str, rows_max: int) -> int:
        """Loads one skipped owner's waiting runs from its skip point on, a
        whole minute at a time, until it holds its share again; moves the skip
        point past each minute read (dropping it at `loaded_until_ms`), in
        the same synchronous step as the scan. Answers the rows read."""
        assert rows_max > 0
        self.counters["rereads"] += 1
        skip_ms = self.skipped[owner]
        hi_ms = self.loaded_until_ms
        assert skip_ms <= hi_ms, "a skip point is loaded up to"
        rows = 0
        while skip_ms < hi_ms and rows < rows_max and self.loaded_of[owner] < limits.dispatch_owner_runs_max:
            if self._memory_full():
                break
            minutes = self.reader.open_minutes(keys.minute_of(skip_ms), keys.minute_of(hi_ms - 1) + 1, 1)
            if not minutes:
                skip_ms = hi_ms
                break
            end_ms = min(hi_ms, (minutes[0] + 1) * limits.minute_ms)
            found = self.reader.scan_minute(minutes[0], skip_ms, end_ms)
            for runs_key, run, job in found:
                # Claimed runs were leased when the loader first read them.
                if run.status == "waiting" and job.owner == owner and runs_key not in self.queue_of:
                    self.queue_of[runs_key] = (queue_key(job), job)
                    self.loaded_of[owner] += 1
                    self.wheel.add(runs_key, run.due_ms)
                    self.note_ahead(runs_key, run.due_ms, job)
            rows += len(found) + 1
            skip_ms = end_ms
        if skip_ms >= hi_ms:
            del self.skipped[owner]
        else:
            self.skipped[owner] = skip_ms
        return rows

    def _remember(self, runs_key: bytes, run: Run, job: Job, mono_s: float) -> None:
        if run.status == "waiting":
            if runs_key not in self.queue_of:
                self.queue_of[runs_key] = (queue_key(job), job)
                self.loaded_of[job.owner] += 1
                self.wheel.add(runs_key, run.due_ms)
                self.note_ahead(runs_key, run.due_ms, job)
        elif run.status == "claimed" and (run.job_id, run.nominal_ms) not in self.leases:
            # A node that (re)starts or takes over gives every claimed run a
            # full lease from this moment, on the monotonic clock, whatever
            # the stored expiry says: a restart, a failover or a clock step
            # never expires a healthy worker's run. Its timeout, though, is
            # the instant the claim fixed (`Run.timeout_at_ms`).
            self._grant_claimed(run, job, self.load_now_ms, mono_s)

    def feed(self, changes: Fed, start: int, stop: int) -> None:
        """Takes items `[start, stop)` of an entry's changes into memory
        (`feed_size`: `left`, then `woken`, then `gone`), and drops the
        leases of the runs that finished. The driver feeds an entry in
        slices of `limits.dispatch_slice_runs`, in order, with other calls
        in between; each slice is checked against memory as it is then: a
        run the loader read meanwhile is remembered once, and a run a claim
        took meanwhile that comes back in is dropped again by that claim's
        own `left`."""
        assert 0 <= start <= stop
        self.fed_count += 1
        left, woken, gone = changes.left, changes.woken, changes.gone
        woken_at, gone_at = len(left), len(left) + len(woken)  # where each list starts in the whole
        for runs_key in left[start:stop]:
            entry = self.queue_of.pop(runs_key, None)
            if entry is not None:
                self.wheel.cancel(runs_key)
                self._unloaded(entry[1].owner)
        for runs_key, run, job in woken[max(0, start - woken_at) : max(0, stop - woken_at)]:
            if run.due_ms < self.loaded_until_ms and runs_key not in self.queue_of:
                job = job or self.reader.get_job_any(run.job_id)
                assert job is not None
                self._admit(runs_key, run.due_ms, job)
        for runs_key in gone[max(0, start - gone_at) : max(0, stop - gone_at)]:
            slot = keys.slot_of(runs_key)
            if self.claiming and slot not in self.leases:
                self.ended_unleased[slot] = self.fed_count  # a claim in flight may have it (`claimed`)
            self._drop_lease(slot)
            if self.expiring:
                self.expiring.pop(slot, None)
                self.timing_out.discard(slot)

    def stop_requested(self, stopping: list[tuple[str, int]]) -> None:
        """Runs asked to stop by an applied entry (`Changes.stopping`): their
        leases no longer grow, and their heartbeats answer `cancel:
        requested`. A run with no lease here gets the mark when it is
        leased, from its stored `cancel`."""
        for slot in stopping:
            lease = self.leases.get(slot)
            if lease is not None:
                lease.cancel_requested = True
                if self.lease_watches:
                    self._lease_changed(slot)
            elif self.claiming:
                self.stopped_unleased[slot] = self.fed_count  # a claim in flight may have it (`claimed`)

    def _admit(self, runs_key: bytes, due_ms: int, job: Job) -> None:
        """A run that became waiting inside the loaded window: into memory,
        unless its owner is skipped and it is due at or after the skip point
        (the re-read reaches it, in due order), or its owner holds its share
        and memory is full (then the owner is skipped from this run on). An
        owner below its share always gets its run, as does any owner while
        memory has room: one owner's spike goes straight into memory."""
        owner = job.owner
        skip_ms = self.skipped.get(owner)
        if skip_ms is not None and due_ms >= skip_ms:
            return
        if (
            self.loaded_of[owner] >= limits.dispatch_owner_runs_max
            and len(self.queue_of) >= limits.dispatch_memory_runs_max
        ):
            self._skip_from(owner, due_ms)
            return
        self.queue_of[runs_key] = (queue_key(job), job)
        self.loaded_of[owner] += 1
        self.wheel.add(runs_key, due_ms)
        self.note_ahead(runs_key, due_ms, job)

    def _skip_from(self, owner: str, due_ms: int) -> None:
        """Moves an owner's skip point back to `due_ms`, and forgets its runs
        in the wheel due after it, so they come out after this one (they
        stay waiting in the table). Runs due at the same time stay, so a
        spike's runs are not sent back and forth. Runs in a ready queue stay:
        a run's due time is never before the time its command was stamped,
        so those fell due within a commit's time, and taking a run out of a
        ready queue would leave a copy there that a re-read could revive out
        of order. Rare: the owner must hold its share of a full memory; it costs one
        pass over memory, and the owner's next runs (due at or after the
        new skip point) cost nothing until it is read again."""
        skip_ms = self.skipped.get(owner)
        assert skip_ms is None or due_ms < skip_ms, "a skip point only moves back here"
        assert due_ms < self.loaded_until_ms
        self.skipped[owner] = due_ms
        self.counters["feed_skips"] += 1
        later = [k for k, (_, job) in self.queue_of.items() if job.owner == owner and k in self.wheel and _due_of(k) > due_ms]
        for runs_key in later:
            del self.queue_of[runs_key]
            self.wheel.cancel(runs_key)
            self._unloaded(owner)

    def _unloaded(self, owner: str) -> None:
        """One of the owner's runs left memory."""
        count = self.loaded_of[owner] - 1
        assert count >= 0, "loaded_of counts queue_of"
        if count:
            self.loaded_of[owner] = count
        else:
            del self.loaded_of[owner]
        if count < limits.dispatch_owner_low_water_runs and owner in self.skipped:
            self.rereads.add(owner)

    def check_memory(self) -> None:
        """Asserts the invariant of `load` against the runs table (for tests:
        it reads every open run). Call it between commits."""
        assert self.loaded_of == Counter(job.owner for _, job in self.queue_of.values()), "loaded_of"
        for owner, skip_ms in self.skipped.items():
            assert skip_ms <= self.loaded_until_ms, f"skip point of {owner} past the loaded window"
        for runs_key, (_, job) in self.queue_of.items():
            skip_at_ms = self.skipped.get(job.owner)
            if skip_at_ms is not None and runs_key in self.wheel:
                assert _due_of(runs_key) <= skip_at_ms, f"a run of {job.owner} after its skip point"
        minutes = self.reader.open_minutes(0, keys.minute_of(self.loaded_until_ms - 1) + 1, 1 << 30)
        for minute in minutes:
            for runs_key, run, job in self.reader.scan_minute(minute, 0, self.loaded_until_ms):
                skip_at_ms = self.skipped.get(job.owner)
                if run.status == "waiting" and (skip_at_ms is None or run.due_ms < skip_at_ms):
                    assert runs_key in self.queue_of, f"a waiting run of {job.owner} not in memory"

