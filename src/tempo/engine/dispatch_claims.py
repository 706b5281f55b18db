"""The dispatcher's core, its claims: runs taken from the ready queues as
each owner's limits allow, the claim decision on each (catch-up, the
calendar, `engine/plan.py`), and the claim command's outcome
(engine/dispatch_core.py says what each call does).
"""

import bisect
import heapq
from collections import Counter, deque
from functools import partial

from tempo import limits
from tempo.engine import calendar_plan, keys
from tempo.engine.commands import Claim, ClaimRuns
from tempo.engine.dispatch_leases import Leases
from tempo.engine.dispatch_state import (
    HTTP_QUEUE,
    LATENESS_BUCKETS_S,
    ClaimedRun,
    ClaimProposal,
    Lease,
    Taken,
    _due_of,
    is_http,
    owner_of,
    queue_key,
)
from tempo.engine.plan import CatchUp, catch_up, step_over_taken
from tempo.engine.records import Job, Run
from tempo.rate import TokenBucket


class Claims(Leases):
    """The claims part of `DispatchCore` (engine/dispatch_core.py)."""

    def _budget(self, owner: str, mono_ms: int, runs_max: int) -> tuple[int, int | None]:
        """How many runs the owner's limits let a claim take now (at most
        `runs_max`); and when its claim rate is what stops it, the ms until
        the bucket holds a token again. A rate is a duration: `mono_ms` is
        monotonic (`mono_s` in ms)."""
        owner_limits = self.limits_of(owner)
        budget = runs_max
        if owner_limits.runs_in_flight_max is not None:
            room = owner_limits.runs_in_flight_max - self.in_flight[owner] - self.claiming[owner]
            budget = min(budget, room)
        if budget <= 0:
            return 0, None
        if owner_limits.claims_per_s is not None:
            bucket = self.claim_buckets.get(owner)
            if bucket is None:
                assert owner_limits.claim_burst is not None
                bucket = TokenBucket(owner_limits.claims_per_s, owner_limits.claim_burst, mono_ms)
                self.claim_buckets[owner] = bucket
            budget = min(budget, bucket.available(mono_ms))
            if budget <= 0:
                return 0, max(bucket.wait_ms(mono_ms, 1), limits.claim_refill_wait_ms_min)
        return budget, None

    def _budgets(
        self, queues: list[str], mono_ms: int, runs_max: int
    ) -> tuple[list[str], dict[str, int], int | None]:
        """The queues with ready runs that their owners' limits let a claim
        take from, each owner's budget, and the earliest claim-rate refill."""
        budgets: dict[str, int] = {}
        refill_ms: int | None = None
        live: list[str] = []
        for queue in queues:
            if not self.ready.get(queue):
                continue
            owner = owner_of(queue)
            if owner not in budgets:
                budgets[owner], wait_ms = self._budget(owner, mono_ms, runs_max)
                if wait_ms is not None:
                    refill_ms = wait_ms if refill_ms is None else min(refill_ms, wait_ms)
            if budgets[owner] > 0:
                live.append(queue)
            else:
                self.held.add(owner)
        return live, budgets, refill_ms

    def _pop(self, queue: str) -> tuple[bytes, Job] | None:
        """The head of a ready queue, tombstones skipped; None when empty."""
        ready = self.ready[queue]
        while ready:
            runs_key = ready.popleft()
            entry = self.queue_of.get(runs_key)
            if entry is not None and entry[0] == queue:
                return self._pop_entry(runs_key)
        return None

    def _pop_entry(self, runs_key: bytes) -> tuple[bytes, Job] | None:
        """A run out of memory, taken by a claim: its key and job."""
        entry = self.queue_of.pop(runs_key, None)
        if entry is None:
            return None
        # `_unloaded`, inline: this runs once per run claimed.
        owner = entry[1].owner
        count = self.loaded_of[owner] - 1
        if count:
            self.loaded_of[owner] = count
        else:
            del self.loaded_of[owner]
        if owner in self.skipped and count < limits.dispatch_owner_low_water_runs:
            self.rereads.add(owner)
        return runs_key, entry[1]

    def take(self, queues: list[str], runs_max: int, mono_s: float, ahead_until_ms: int | None = None) -> Taken:
        """Up to `runs_max` ready runs of `queues` (`[HTTP_QUEUE]`: every
        owner's http queue), as far as each owner's limits allow; with
        `ahead_until_ms`, then runs due by then, earliest first
        (pre-dispatch, docs/semantics.md "Pre-dispatch"). They hold their
        owners' room until `settle`, and are out of memory: the driver
        proposes them (`propose_claims`) at once."""
        mono_ms = int(mono_s * 1000)
        if queues == [HTTP_QUEUE]:
            return self._take_http(runs_max, mono_ms)
        taken = self._take(queues, runs_max, mono_ms)
        if ahead_until_ms is not None and len(taken.runs) < runs_max:
            taken.runs += self._take_ahead(queues, runs_max - len(taken.runs), mono_ms, ahead_until_ms)
        return taken

    def _take_ahead(self, queues: list[str], runs_max: int, mono_ms: int, until_ms: int) -> list[tuple[bytes, Job]]:
        """Up to `runs_max` runs of these queues still in the wheel and due
        by `until_ms`, earliest first, as far as each owner's limits allow."""
        taken: list[tuple[bytes, Job]] = []
        budgets: dict[str, int] = {}
        live = [q for q in queues if q in self.ahead]
        while live and len(taken) < runs_max:
            best: tuple[int, str, bytes] | None = None
            for queue in list(live):
                head = self.ahead_head(queue, until_ms)
                if head is None:
                    live.remove(queue)
                elif best is None or _due_of(head) < best[0]:
                    best = (_due_of(head), queue, head)
            if best is None:
                break
            _, queue, runs_key = best
            owner = owner_of(queue)
            if owner not in budgets:
                budgets[owner] = self._budget(owner, mono_ms, runs_max)[0]
            if budgets[owner] <= 0:
                live = [q for q in live if owner_of(q) != owner]
                continue
            self.ahead[queue].pop()
            self.wheel.cancel(runs_key)
            found = self._pop_entry(runs_key)
            assert found is not None, "an ahead head is in memory"
            taken.append(found)
            budgets[owner] -= 1
        self._account(taken, mono_ms)
        return taken

    def _take(self, queues: list[str], runs_max: int, mono_ms: int) -> Taken:
        """Up to `runs_max` ready runs of these queues, oldest due first, as
        far as each owner's limits allow (runs beyond stay in their queue, in
        order); and, when a claim rate held runs back, the ms until it lets
        one more go."""
        live, budgets, refill_ms = self._budgets(queues, mono_ms, runs_max)
        taken: list[tuple[bytes, Job]] = []
        while live and len(taken) < runs_max:
            best = live[0] if len(live) == 1 else min(live, key=lambda q: _due_of(self.ready[q][0]))
            owner = owner_of(best)
            while len(taken) < runs_max and budgets[owner] > 0:
                found = self._pop(best)
                if found is None:
                    break
                taken.append(found)
                budgets[owner] -= 1
                if len(live) > 1:
                    break  # another queue's head may be due earlier now
            if not self.ready[best]:
                live.remove(best)
            elif budgets[owner] <= 0:
                self.held.add(owner)
                live = [q for q in live if owner_of(q) != owner]
        self._account(taken, mono_ms)
        return Taken(taken, refill_ms)

    def _take_http(self, runs_max: int, mono_ms: int) -> Taken:
        """Up to `runs_max` ready runs with http(s) targets, one owner's run
        after another's (round-robin, the owner served least recently first),
        so one owner's backlog does not queue ahead of another's runs; each
        owner's runs in due order, as far as its limits allow."""
        for queue in [q for q in self.http_ready if not self.ready.get(q)]:
            del self.http_ready[queue]
        turn, budgets, refill_ms = self._budgets(list(self.http_ready), mono_ms, runs_max)
        taken: list[tuple[bytes, Job]] = []
        while turn and len(taken) < runs_max:
            for queue in list(turn):
                if len(taken) >= runs_max:
                    break
                owner = owner_of(queue)
                found = self._pop(queue)
                if found is not None:
                    taken.append(found)
                    budgets[owner] -= 1
                # Served: to the end of the line.
                del self.http_ready[queue]
                if self.ready[queue]:
                    self.http_ready[queue] = None
                    if budgets[owner] <= 0:
                        self.held.add(owner)
                        turn.remove(queue)
                else:
                    turn.remove(queue)
        self._account(taken, mono_ms)
        return Taken(taken, refill_ms)

    def _account(self, taken: list[tuple[bytes, Job]], mono_ms: int) -> None:
        """Taken runs hold their owner's room until their claim commits, and
        spend its claim tokens now."""
        by_owner = Counter(job.owner for _, job in taken)
        for owner, count in by_owner.items():
            self.claiming[owner] += count
            bucket = self.claim_buckets.get(owner)
            if bucket is not None:
                bucket.take(mono_ms, count)

    def ready_count(self) -> int:
        """Runs due but not claimed (tombstones aside, which are few)."""
        return sum(len(q) for q in self.ready.values())

    def held_back(self, mono_s: float) -> dict[str, int]:
        """Per owner, the runs due but not claimed because one of the owner's
        limits is reached now (tombstones aside)."""
        mono_ms = int(mono_s * 1000)
        blocked: dict[str, bool] = {}
        found: Counter[str] = Counter()
        for queue, ready in self.ready.items():
            if not ready:
                continue
            owner = owner_of(queue)
            if owner not in blocked:
                blocked[owner] = self._budget(owner, mono_ms, 1)[0] == 0
            if blocked[owner]:
                found[owner] += len(ready)
        return dict(found)

    def propose_claims(
        self, worker: str, runs: list[tuple[bytes, Job]], now_ms: int, mono_s: float, ahead_ms: int = 0
    ) -> ClaimProposal:
        """The command that claims runs `take` took, stamped `now_ms`; the
        leases will count from `mono_s` (the claim's stamp, on the
        monotonic clock; the wall-clock expiry in the command is what the
        run shows), or from the due time of a run claimed ahead of it
        (`ahead_ms`: how far ahead `take` looked). A repeating job is read
        again, since its slot moves."""
        jobs: dict[str, Job] = {}
        claims: list[Claim] = []
        for runs_key, loaded_job in runs:
            claim = self._claim_of(runs_key, loaded_job, jobs, now_ms, claiming=True)
            if claim is not None:
                claims.append(claim)
        command = None
        if claims:
            command = ClaimRuns(now_ms, worker, claims, ahead_ms=ahead_ms) if ahead_ms else ClaimRuns(now_ms, worker, claims)
        return ClaimProposal(self.generation, runs, command, jobs, mono_s, fed_at=self.fed_count)

    def _claim_of(
        self, runs_key: bytes, loaded_job: Job, jobs: dict[str, Job], now_ms: int, *, claiming: bool = False
    ) -> Claim | None:
        """The claim of the run at `runs_key`, stamped `now_ms`; None when its
        job is gone. `jobs`: the jobs read for this command so far (a
        repeating job is read again, since its slot moves). `claiming`: a
        claim, which may find the slot itself missed (`catch_up`), rather
        than an overlap decision, which hands the slot on only when its
        policy holds the run back (the run is buffered or skipped, not missed)."""
        # The job a run was remembered with is its own (`queue_of`), so
        # its ID is the one in the runs key.
        job_id = loaded_job.id
        nominal_ms = keys.nominal_of(runs_key)
        job = jobs.get(job_id)
        if job is None:
            job = self.reader.get_job_any(job_id) if loaded_job.schedule.repeating else loaded_job
            if job is None:
                return None
            jobs[job_id] = job
        # The attempt's timeout and lease count from the claim's stamp
        # (records.Run), or from the due time of a run claimed ahead of it.
        start_ms = max(now_ms, _due_of(runs_key))
        timeout_at_ms = None if job.timeout_s is None else start_ms + job.timeout_s * 1000
        if not job.schedule.repeating:
            return Claim(job_id, nominal_ms, start_ms + job.lease_s * 1000, one_off=True, timeout_at_ms=timeout_at_ms)
        claim = Claim(job_id, nominal_ms, start_ms + job.lease_s * 1000, timeout_at_ms=timeout_at_ms)
        if job.state == "active" and job.slot_ms == nominal_ms:
            seen = self.reader.calendar_of(job) if claiming else None
            if seen is None:
                nxt = self._catch_up(job, nominal_ms, now_ms, claiming=claiming)
            else:
                nxt = self._calendar_claim(claim, job, calendar_plan.Seen(*seen), runs_key, now_ms)
                if claim.calendar is not None and claim.calendar.action == "move":
                    return claim  # the run waits on: the schedule stays at its slot
            if nxt is not None:
                # Its ranges stand even when no slot is left to plan (rules/slots.py `hand_on`).
                claim.missed = tuple(nxt.missed)
                nxt = step_over_taken(job, nxt, now_ms, partial(self.reader.get_run_any, job_id))
            if nxt is not None:
                claim.next_slot_ms, claim.next_due_ms = nxt.slot_ms, nxt.due_ms
                claim.missed, claim.catchup_until_ms, claim.catchup_decided_ms = tuple(nxt.missed), nxt.until_ms, nxt.decided_ms
                job.slot_ms = nxt.slot_ms  # a later run of this batch is not the slot run
        return claim

    def _catch_up(self, job: Job, nominal_ms: int, now_ms: int, *, claiming: bool) -> CatchUp | None:
        """`catch_up` of the claim of the job's slot run. A run that waited
        on its gate (docs/semantics.md "A gate on a clock schedule") is
        not a missed slot, however many slots passed while it waited: the
        gate decides on it (it runs, or is skipped for its dependency),
        and catch-up on the slots after it. The gate is read only when
        catch-up would miss the slot, so a claim on time reads nothing."""
        nxt = catch_up(job, nominal_ms, now_ms, claiming=claiming)
        if not claiming or nxt is None or not nxt.missed or nxt.missed[0].from_ms != nominal_ms:
            return nxt
        gate = self.reader.deps_state(job.id)
        if gate is None or gate.waiting_slot_ms != nominal_ms:
            return nxt
        return catch_up(job, nominal_ms, now_ms)

    def _calendar_claim(
        self, claim: Claim, job: Job, seen: calendar_plan.Seen, runs_key: bytes, now_ms: int
    ) -> CatchUp | None:
        """The calendar's decision on the claim of the job's slot run
        (docs/semantics.md "Calendars"), put in the claim; answers the
        slot the schedule goes on to, placed by the calendar."""
        nominal_ms = keys.nominal_of(runs_key)
        decided = calendar_plan.at_claim(job, seen, nominal_ms, _due_of(runs_key), now_ms)
        claim.calendar = decided.claim
        if decided.claim.action == "skip":
            return decided.next
        # A run moved here runs, whatever slots passed since its own: those
        # are decided by the job's catch-up policy, as after any late run.
        nxt = self._catch_up(job, nominal_ms, now_ms, claiming=decided.claim.why is None)
        return None if nxt is None else calendar_plan.planned(job, seen, nxt, now_ms)

    def claimed(self, proposal: ClaimProposal, outcomes: list[Run | None]) -> list[ClaimedRun]:
        """The claim command applied (its entry fed first): a lease for each
        run it claimed, from the proposal's `at_s`. After a `reset` too: the
        runs are claimed in the tables, and their worker gets them; a lease
        the loader gave one meanwhile is replaced, counted once."""
        command = proposal.command
        assert command is not None, "a proposal without a command is not proposed"
        claimed: list[ClaimedRun] = []
        lateness_s: list[float] = []
        at_ms, at_s, worker = command.at_ms, proposal.at_s, command.worker
        jobs, leases, in_flight, heap = proposal.jobs, self.leases, self.in_flight, self._lease_heap
        replaced = False
        for claim, run in zip(command.claims, outcomes, strict=True):
            if run is None:
                continue
            job = jobs[claim.job_id]
            # `_grant`, inline: this runs once per run claimed. A run claimed
            # ahead of its due time has its lease from then.
            due_ms = run.due_ms
            deadline_s = at_s + job.lease_s if due_ms <= at_ms else at_s + (due_ms - at_ms) / 1000 + job.lease_s
            timeout_s = None
            if claim.timeout_at_ms is not None:
                timeout_s = at_s + (claim.timeout_at_ms - at_ms) / 1000
                deadline_s = min(deadline_s, timeout_s)
            self._lease_entries += 1
            entry = self._lease_entries
            # Asked to stop by a later claim of the same command (`cancel_other`):
            # the entry's `stopping`, fed before this lease existed, missed it.
            lease = Lease(run.attempt, deadline_s, job.lease_s, job.owner, entry, deadline_s, timeout_s,
                          run.cancel == "requested", claim.timeout_at_ms, due_ms,
                          max(at_ms, due_ms) + job.lease_s * 1000, worker)
            key = (run.job_id, run.nominal_ms)
            old = leases.get(key)
            leases[key] = lease
            if old is None:
                in_flight[lease.owner] += 1
            else:
                assert old.owner == lease.owner, "a run's owner never changes"
                replaced = True
            heapq.heappush(heap, (deadline_s, entry, run.job_id, run.nominal_ms))
            lateness_s.append((at_ms - run.due_ms) / 1000)
            claimed.append(ClaimedRun(run, job))
        if replaced:
            self._bound_lease_heap()
        self.observe_lateness(lateness_s)
        self.counters["claimed"] += len(claimed)
        return claimed

    def give_back(self, proposal: ClaimProposal) -> None:
        """The claim was not written (a full disk, too many writes): its runs
        are still waiting in the tables, and go back where `_pop` took them
        from, in their order (unless the change feed has them again)."""
        if proposal.generation != self.generation:
            return
        at_ms = 0 if proposal.command is None else proposal.command.at_ms
        for runs_key, job in reversed(proposal.runs):
            if runs_key in self.queue_of:
                continue
            queue = queue_key(job)
            self.queue_of[runs_key] = (queue, job)
            self.loaded_of[job.owner] += 1
            due_ms = _due_of(runs_key)
            if due_ms > at_ms:
                # Taken ahead of its due time: back into the wheel.
                self.wheel.add(runs_key, due_ms)
                self.note_ahead(runs_key, due_ms, job)
                continue
            self.ready.setdefault(queue, deque()).appendleft(runs_key)
            if is_http(queue):
                self.http_ready[queue] = None

    def settle(self, proposal: ClaimProposal) -> None:
        """The claim is over (claimed, given back, or failed otherwise): the
        room its runs held while it committed frees (their leases hold it
        now). Once per proposal; a stale one counts nothing."""
        assert not proposal.settled, "a claim settles once"
        proposal.settled = True
        if proposal.generation != self.generation:
            return  # a reset started a new count
        claiming = self.claiming
        for owner, count in Counter(job.owner for _, job in proposal.runs).items():
            claiming[owner] -= count
            if claiming[owner] <= 0:
                assert claiming[owner] == 0, "claiming"
                del claiming[owner]
            if owner in self.held:
                self._wake_owner(owner)

    def observe_lateness(self, lateness_s: list[float]) -> None:
        """Counts claim lateness into the histogram: bucket i holds
        lateness ≤ LATENESS_BUCKETS_S[i] (the last, anything above)."""
        buckets = self.lateness_buckets
        for late_s in lateness_s:
            late_s = max(late_s, 0.0)
            self.lateness_sum_s += late_s
            buckets[bisect.bisect_left(LATENESS_BUCKETS_S, late_s)] += 1

