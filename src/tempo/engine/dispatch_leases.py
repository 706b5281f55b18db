"""The dispatcher's core, its leases: granted to claimed runs, moved on by
heartbeats, ended by expiry or a run's timeout, and the lease heap that
finds the next to run out; with the counts of applied expiries and
results (engine/dispatch_core.py says what each call does).
"""

import heapq
from collections import Counter

from tempo import errors, ids, limits
from tempo.engine.commands import ExpireLeases, Expiry
from tempo.engine.dispatch_state import Beat, ClaimedRun, CoreState, Lease
from tempo.engine.records import Job, Run, RunCancel


class Leases(CoreState):
    """The leases part of `DispatchCore` (engine/dispatch_core.py)."""

    def expire(self, now_ms: int, mono_s: float) -> ExpireLeases | None:
        """The command that expires the leases run out by `mono_s`, at most
        `limits.expiries_per_command_max` of them; None when none has. Their
        leases are gone from memory at once."""
        expiries = self.expired(mono_s)
        return ExpireLeases(now_ms, expiries) if expiries else None

    def expired(self, now_s: float) -> list[Expiry]:
        """Leases run out by `now_s` (monotonic), at most a command's worth."""
        found: list[Expiry] = []
        heap = self._lease_heap
        while heap and heap[0][0] <= now_s and len(found) < limits.expiries_per_command_max:
            _, entry, job_id, nominal_ms = heapq.heappop(heap)
            lease = self.leases.get((job_id, nominal_ms))
            if lease is None or lease.entry != entry:
                continue  # stale: the lease ended or was replaced
            if lease.deadline_s > now_s:
                # Heartbeats moved the deadline on: the lease's one entry follows.
                lease.entry_s = lease.deadline_s
                heapq.heappush(heap, (lease.deadline_s, entry, job_id, nominal_ms))
                continue
            self._drop_lease((job_id, nominal_ms))
            self.expiring[(job_id, nominal_ms)] = lease.attempt
            timeout_s = lease.timeout_deadline_s
            if timeout_s is not None and timeout_s <= now_s:
                self.timing_out.add((job_id, nominal_ms))
                found.append(Expiry(job_id, nominal_ms, lease.attempt, "timeout"))
            else:
                found.append(Expiry(job_id, nominal_ms, lease.attempt))
        return found

    def expire_failed(self, command: ExpireLeases, mono_s: float) -> None:
        """The expiry was not written: its leases come back, run out at
        `mono_s`, so the next check proposes them again."""
        for expiry in command.expiries:
            self.expiring.pop((expiry.job_id, expiry.nominal_ms), None)
            self.timing_out.discard((expiry.job_id, expiry.nominal_ms))
            job = self.reader.get_job_any(expiry.job_id)
            if job is not None:
                timeout_s = mono_s if expiry.reason == "timeout" else None
                self._grant(job.owner, expiry.job_id, expiry.nominal_ms, expiry.attempt, mono_s, 0, timeout_s)

    def expire_applied(self, outcomes: list[Run | None]) -> None:
        """An `ExpireLeases` applied: counts the leases it expired, the
        attempts its timeouts ended and the runs it ended cancelled."""
        for outcome in outcomes:
            if outcome is None:
                continue
            self.counters["expired"] += 1
            if outcome.status == "cancelled":
                self.counters["cancelled"] += 1
            elif outcome.cancel == "timeout":
                self.counters["timed_out"] += 1

    def reported(self, outcomes: list[Run | errors.TempoError]) -> bool:
        """A `ReportResults` applied: counts its runs by their new status.
        Answers whether an attempt failed in it (a run waits again, or
        failed for good): only then has the driver lines to log."""
        counters = self.counters
        failed = False
        for outcome in outcomes:
            if isinstance(outcome, Run):
                status = outcome.status
                counters[status] += 1
                if status == "waiting" or status == "failed":
                    failed = True
        return failed

    # -- leases ------------------------------------------------------------------

    def _grant(
        self,
        owner: str,
        job_id: str,
        nominal_ms: int,
        attempt: int,
        deadline_s: float,
        lease_s: int,
        timeout_deadline_s: float | None = None,
        cancel_requested: bool = False,
        timeout_at_ms: int | None = None,
        due_ms: int = 0,
        expires_ms: int = 0,
    ) -> None:
        # `_enter_lease`, inline: this runs once per run claimed. A new
        # lease adds one to the leases and one entry to the heap, which
        # keeps it within its bound; only one that replaces a lease (whose
        # entry goes stale) may take it past.
        if timeout_deadline_s is not None and timeout_deadline_s < deadline_s:
            deadline_s = timeout_deadline_s
        self._lease_entries += 1
        entry = self._lease_entries
        lease = Lease(attempt, deadline_s, lease_s, owner, entry, deadline_s, timeout_deadline_s, cancel_requested,
                      timeout_at_ms, due_ms, expires_ms)
        replaced = self._put_lease((job_id, nominal_ms), lease)
        heapq.heappush(self._lease_heap, (deadline_s, entry, job_id, nominal_ms))
        if replaced:
            self._bound_lease_heap()

    def _grant_claimed(self, run: Run, job: Job, now_ms: int, mono_s: float) -> None:
        """A full lease from `mono_s` for a run claimed in the tables, with
        its timeout (the stored instant, read on the scheduler clock at
        `now_ms`) and its cancel request. A run claimed ahead of its due
        time (docs/semantics.md "Pre-dispatch") has its full lease from its
        due time, as its claim gave it."""
        timeout_s = None if run.timeout_at_ms is None else mono_s + (run.timeout_at_ms - now_ms) / 1000
        lease_s = claimed_lease_s(run, job)
        start_s = mono_s + max(0, run.due_ms - now_ms) / 1000
        self._grant(job.owner, run.job_id, run.nominal_ms, run.attempt, start_s + lease_s, lease_s, timeout_s,
                    run.cancel == "requested", run.timeout_at_ms, run.due_ms, max(now_ms, run.due_ms) + lease_s * 1000)

    def _enter_lease(self, key: tuple[str, int], lease: Lease) -> None:
        """Gives the lease a new entry in the heap, at its deadline; the
        entry it had, if any, is stale from now on."""
        self._lease_entries += 1
        lease.entry = self._lease_entries
        lease.entry_s = lease.deadline_s
        heapq.heappush(self._lease_heap, (lease.deadline_s, lease.entry, key[0], key[1]))
        self._bound_lease_heap()

    def _move_deadline(self, key: tuple[str, int], lease: Lease, deadline_s: float) -> None:
        """A heartbeat (later) or a release (now): a later deadline keeps the
        lease's entry, which `expired` moves on when it comes up; an earlier
        one needs an earlier entry."""
        lease.deadline_s = deadline_s
        if deadline_s < lease.entry_s:
            self._enter_lease(key, lease)

    def _bound_lease_heap(self) -> None:
        """Rebuilds the heap from the leases once its stale entries outnumber
        the live ones by `limits.lease_heap_slack_entries`: a rebuild costs
        O(leases) and comes after at least as many stale entries were made,
        so it is O(1) per lease that ended, and the heap holds at most
        `2 * len(leases) + slack` entries."""
        heap = self._lease_heap
        if len(heap) <= 2 * len(self.leases) + limits.lease_heap_slack_entries:
            return
        # In place: `expired` holds the list while it pops.
        heap[:] = [(lease.entry_s, lease.entry, job_id, nominal_ms) for (job_id, nominal_ms), lease in self.leases.items()]
        heapq.heapify(heap)
        self.counters["lease_heap_rebuilds"] += 1

    def _put_lease(self, key: tuple[str, int], lease: Lease) -> bool:
        """Every lease is a run of its owner in flight. Answers whether it
        replaced one."""
        old = self.leases.get(key)
        self.leases[key] = lease
        if self.lease_watches:
            self._lease_changed(key)
        if old is None:
            self.in_flight[lease.owner] += 1
            return False
        assert old.owner == lease.owner, "a run's owner never changes"
        return True

    def _drop_lease(self, key: tuple[str, int]) -> None:
        """The run finished, expired or was deleted: its owner's room frees."""
        lease = self.leases.pop(key, None)
        if lease is None:
            return
        if self.lease_watches:
            self._lease_changed(key)
        owner = lease.owner
        self.in_flight[owner] -= 1
        if self.in_flight[owner] <= 0:
            assert self.in_flight[owner] == 0, "in_flight counts leases"
            del self.in_flight[owner]
        if owner in self.held:
            self._wake_owner(owner)
        if len(self._lease_heap) > 2 * len(self.leases) + limits.lease_heap_slack_entries:
            self._bound_lease_heap()

    def heartbeat(self, owner: str | None, run_id: str, attempt: int, now_ms: int, mono_s: float) -> int:
        """Extends a lease in memory to `lease_s` from now (monotonic); answers
        the new expiry as an instant of scheduler time (UNIX ms). An
        attempt that ended (`beat` answers no expiry) is `StaleAttempt`."""
        expires_ms, _ = self.beat(owner, run_id, attempt, now_ms, mono_s)
        if expires_ms is None:
            raise errors.StaleAttempt(f"attempt {attempt} of run {run_id} no longer holds it")
        return expires_ms

    def beat(self, owner: str | None, run_id: str, attempt: int, now_ms: int, mono_s: float) -> Beat:
        """A worker's heartbeat: extends the lease in memory to `lease_s`
        from now (monotonic), never past the attempt's timeout; answers the
        expiry as an instant of scheduler time (UNIX ms) and whether the
        worker is to stop (docs/api.md "Heartbeats"). A run asked to stop
        keeps its expiry (`requested`). An attempt its timeout ended
        answers no expiry and `timeout` until a later attempt is claimed;
        one a cancel ended, no expiry and `requested`."""
        parsed = ids.parse_run_id(run_id)
        job = None if parsed is None else self.reader.get_job_any(parsed[0])
        if parsed is None or job is None or (owner is not None and job.owner != owner):
            raise errors.NotFound(f"no run {run_id}")
        lease = self.leases.get(parsed)
        if lease is None and self.expiring.get(parsed) == attempt:
            if parsed in self.timing_out:
                return None, "timeout"
            raise errors.StaleAttempt(f"attempt {attempt} of run {run_id} no longer holds it")
        if lease is None or lease.attempt != attempt:
            run = self.reader.get_run_any(*parsed)
            if run is None:
                raise errors.NotFound(f"no run {run_id}")
            ended = _ended_by(run) if lease is None and run.attempt == attempt else None
            if ended is not None:
                return None, ended
            if lease is not None or run.status != "claimed" or run.attempt != attempt:
                raise errors.StaleAttempt(f"attempt {attempt} of run {run_id} no longer holds it")
            # Claimed, but its minute is not loaded yet (a restart with a
            # backlog): it gets the full lease a loaded run would get.
            self._grant_claimed(run, job, now_ms, mono_s)
            lease = self.leases[parsed]
        return self._extend(parsed, lease, now_ms, mono_s)

    def _extend(self, slot: tuple[str, int], lease: Lease, now_ms: int, mono_s: float) -> Beat:
        """`beat` of a lease held at the attempt named: moved on to
        `lease_s` from `mono_s`, unless its run was asked to stop or its
        timeout has passed."""
        if lease.cancel_requested:
            return _expiry_ms(lease, lease.deadline_s, now_ms, mono_s), "requested"
        if lease.timeout_deadline_s is not None and lease.timeout_deadline_s <= mono_s:
            # Its timeout has passed: the attempt has ended, though the lease
            # check may not have committed that yet (docs/semantics.md "Run
            # timeouts").
            return None, "timeout"
        deadline_s = mono_s + lease.lease_s
        if lease.due_ms > now_ms:
            # Claimed ahead of its due time: the lease counts from then.
            deadline_s += (lease.due_ms - now_ms) / 1000
        lease.expires_ms = max(now_ms, lease.due_ms) + lease.lease_s * 1000
        if lease.timeout_deadline_s is not None and lease.timeout_deadline_s < deadline_s:
            deadline_s = lease.timeout_deadline_s
        self._move_deadline(slot, lease, deadline_s)
        return _expiry_ms(lease, deadline_s, now_ms, mono_s), None

    def stop_of(self, owner: str | None, run_id: str, attempt: int, mono_s: float) -> RunCancel | None:
        """Whether the worker holding `attempt` of `run_id` is to stop, and
        why, as its heartbeat would answer, without extending its lease (a
        worker's signals, docs/api.md "Signals"). None for a run that goes
        on, and for one that is not this owner's, unknown or stale (its
        heartbeats say so)."""
        parsed = ids.parse_run_id(run_id)
        if parsed is None:
            return None
        lease = self.leases.get(parsed)
        if lease is not None:
            if lease.attempt != attempt or (owner is not None and lease.owner != owner):
                return None
            if lease.cancel_requested:
                return "requested"
            timeout_s = lease.timeout_deadline_s
            return "timeout" if timeout_s is not None and timeout_s <= mono_s else None
        if self.expiring.get(parsed) == attempt and parsed in self.timing_out:
            return "timeout"
        job = self.reader.get_job_any(parsed[0])
        if job is None or (owner is not None and job.owner != owner):
            return None
        run = self.reader.get_run_any(*parsed)
        if run is None or run.attempt != attempt:
            return None
        return _ended_by(run)

    def start_of(self, owner: str | None, run_id: str, attempt: int) -> tuple[bool, int]:
        """Whether the worker holding `attempt` of `run_id`, claimed ahead
        of its due time, may start it (docs/semantics.md "Pre-dispatch"):
        the attempt still holds the run and no cancel was asked; and the
        run's due time (UNIX ms; 0 when unknown). A run that is not this
        owner's, unknown or stale may not."""
        return self.start_of_slot(owner, ids.parse_run_id(run_id), attempt)

    def start_of_slot(self, owner: str | None, parsed: tuple[str, int] | None, attempt: int) -> tuple[bool, int]:
        """`start_of` for a run ID already parsed (`ids.parse_run_id`; None:
        it was no run ID)."""
        if parsed is None:
            return False, 0
        lease = self.leases.get(parsed)
        if lease is not None:
            held = lease.attempt == attempt and (owner is None or lease.owner == owner)
            return held and not lease.cancel_requested, lease.due_ms
        if self.expiring.get(parsed) is not None:
            return False, 0
        # Claimed, but its minute is not loaded (a restart with a backlog).
        job = self.reader.get_job_any(parsed[0])
        run = self.reader.get_run_any(*parsed)
        if job is None or run is None or (owner is not None and job.owner != owner):
            return False, 0
        held = run.status == "claimed" and run.attempt == attempt and run.cancel is None
        return held, run.due_ms

    def watch_leases(self) -> set[tuple[str, int]]:
        """A set that gathers, until `unwatch_leases`, the slots whose lease
        is put, dropped or asked to stop: what a `POST /v1/starts` answered
        before its wait must look at again after it (`may_start_again`)."""
        watch: set[tuple[str, int]] = set()
        self.lease_watches[id(watch)] = watch
        return watch

    def unwatch_leases(self, watch: set[tuple[str, int]]) -> None:
        del self.lease_watches[id(watch)]

    def _lease_changed(self, key: tuple[str, int]) -> None:
        for watch in self.lease_watches.values():
            watch.add(key)

    def may_start_again(
        self,
        owner: str | None,
        runs: list[tuple[tuple[str, int] | None, int]],
        answers: list[bool],
        changed: set[tuple[str, int]],
    ) -> list[bool]:
        """`may_start` now, from its `answers` of before and the slots whose
        lease `changed` since (`watch_leases`): only those, and the runs
        with no lease (whose answer comes from elsewhere), are looked at
        again. A lease that stayed has the attempt, owner and stop mark it
        had, so its answer stands."""
        leases = self.leases
        again = list(answers)
        for i, (parsed, attempt) in enumerate(runs):
            if parsed is not None and (parsed in changed or parsed not in leases):
                again[i] = self.start_of_slot(owner, parsed, attempt)[0]
        return again

    def may_start(self, owner: str | None, runs: list[tuple[tuple[str, int] | None, int]]) -> tuple[list[bool], int]:
        """`start_of_slot` for each (parsed run ID, attempt) of a `POST
        /v1/starts`, in one pass: whether each may start, and the latest
        due time of those that may (UNIX ms; 0: none), which the call is
        answered `limits.predispatch_stop_ms` before: one that may not never
        will at that attempt. A leased run is looked up inline."""
        leases = self.leases
        answers: list[bool] = []
        latest_ms = 0
        for parsed, attempt in runs:
            lease = None if parsed is None else leases.get(parsed)
            if lease is None:
                ok, due_ms = self.start_of_slot(owner, parsed, attempt)
            else:
                ok = lease.attempt == attempt and (owner is None or lease.owner == owner) and not lease.cancel_requested
                due_ms = lease.due_ms
            answers.append(ok)
            if ok and due_ms > latest_ms:
                latest_ms = due_ms
        return answers, latest_ms

    def next_expiry_s(self) -> float | None:
        """The earliest instant (monotonic) at which a lease or a timeout
        may run out, for the lease check to wake at; None with no lease.
        An entry may be stale (its lease moved on or ended): waking for it
        costs one look."""
        heap = self._lease_heap
        return heap[0][0] if heap else None

    def release(self, claimed: list[ClaimedRun], mono_s: float) -> None:
        """Claimed runs whose answer never reached their worker: each lease
        ends at `mono_s`, so the lease check (`expire`) sends the runs back
        to waiting, due at once, by the command of any expired lease (the
        attempt counts, as an expired one does)."""
        for one in claimed:
            run = one.run
            lease = self.leases.get((run.job_id, run.nominal_ms))
            if lease is None or lease.attempt != run.attempt:
                continue  # finished, expired, or this node stopped leading
            self._move_deadline((run.job_id, run.nominal_ms), lease, mono_s)
            lease.expires_ms = 0
            self.counters["undelivered"] += 1

    def lease_of(self, job_id: str, nominal_ms: int, attempt: int, now_ms: int, mono_s: float) -> int | None:
        """When the lease runs out, as an instant of scheduler time (UNIX ms)."""
        lease = self.leases.get((job_id, nominal_ms))
        if lease is None or lease.attempt != attempt:
            return None
        return _expiry_ms(lease, lease.deadline_s, now_ms, mono_s)

    def check_leases(self) -> None:
        """Asserts the invariants of the leases and the lease heap (for
        tests and the simulator: it walks them all)."""
        assert self.in_flight == Counter(lease.owner for lease in self.leases.values()), "in_flight counts leases"
        heap = self._lease_heap
        assert len(heap) <= 2 * len(self.leases) + limits.lease_heap_slack_entries, "the lease heap is bounded"
        live = Counter(entry for _, entry, job_id, nominal_ms in heap
                       if (lease := self.leases.get((job_id, nominal_ms))) is not None and lease.entry == entry)
        assert len(live) == len(self.leases) and all(n == 1 for n in live.values()), "one live entry per lease"
        for at_s, entry, job_id, nominal_ms in heap:
            lease = self.leases.get((job_id, nominal_ms))
            if lease is not None and lease.entry == entry:
                assert at_s == lease.entry_s <= lease.deadline_s, "a live entry comes up at or before its deadline"
        for key, attempt in self.expiring.items():
            lease = self.leases.get(key)
            assert lease is None or lease.attempt != attempt, "an attempt being expired has no lease"
        assert self.timing_out <= self.expiring.keys(), "a timeout being committed is an expiry being committed"
        for lease in self.leases.values():
            timeout_s = lease.timeout_deadline_s
            assert timeout_s is None or lease.deadline_s <= timeout_s, "a lease never outlives its timeout"

    @property
    def lease_heap_entries(self) -> int:
        """Entries in the lease heap, stale ones included."""
        return len(self._lease_heap)



def claimed_lease_s(run: Run, job: Job) -> int:
    """The lease length a claimed run was claimed with: its claim stamped
    the start and the expiry from the job's `lease_s` of the moment, which
    a patch may have changed since (docs/semantics.md "Changing a job").
    A run claimed ahead of its due time was leased from its due time."""
    if run.started_ms is not None and run.lease_expires_ms is not None:
        lease_ms = run.lease_expires_ms - max(run.started_ms, run.due_ms)
        if lease_ms >= 1000:
            return lease_ms // 1000
    return job.lease_s


# How far apart scheduler time read in whole ms and the monotonic clock
# read apart from it may put one instant (`_expiry_ms`).
_ROUNDING_MS = 2


def _expiry_ms(lease: Lease, deadline_s: float, now_ms: int, mono_s: float) -> int:
    """A lease's expiry at the monotonic `deadline_s`, as an instant of
    scheduler time (UNIX ms), never past the attempt's `timeout_at`: the
    instant it was granted or extended to (`Lease.expires_ms`), unless the
    clocks now put it more than a rounding away from it."""
    expires_ms = now_ms + round(max(0.0, deadline_s - mono_s) * 1000)
    granted_ms = lease.expires_ms
    if granted_ms and abs(expires_ms - granted_ms) <= _ROUNDING_MS:
        expires_ms = granted_ms
    timeout_at_ms = lease.timeout_at_ms
    return expires_ms if timeout_at_ms is None or expires_ms < timeout_at_ms else timeout_at_ms


def _ended_by(run: Run) -> RunCancel | None:
    """What ended a run's current attempt when it was told to stop: its
    timeout, or a cancel asked of it; None for any other end (a heartbeat
    for it is stale)."""
    if run.status == "claimed":
        return None
    if run.cancel == "timeout":
        return "timeout"
    if run.status == "cancelled" and run.cancel == "requested":
        return "requested"
    return None
