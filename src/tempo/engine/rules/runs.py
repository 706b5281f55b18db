"""Runs (docs/semantics.md "Attempts are fencing tokens", "Idempotent
claims", "Run timeouts", "Cancelling a run"): claims, results, expired
leases and timeouts, cancels, and claim keys. The claim and result paths
are the hot ones: a batch of thousands a commit, so each claim and result
stays in one function with the cursors of the tables layer."""

from tempo import errors, ids, limits
from tempo.engine import keys
from tempo.engine.commands import (
    CancelRun,
    Claim,
    ClaimKey,
    ClaimRuns,
    Expiry,
    ReportResults,
    Result,
)
from tempo.engine.records import Attempt, ClaimKeyEntry, Event, Job, Run, Taken
from tempo.engine.rules import calendars, catchup, deps, overlap, slots
from tempo.engine.tables import Tables


def claim_runs(t: Tables, cmd: ClaimRuns) -> list[Run | None]:
    """Each of the command's claims (`claim_run`). A run claimed here and
    then asked to stop by a later claim of the same command (its job's
    policy is `cancel_other`) is handed out asked to stop, as it is
    stored: the dispatcher makes its lease, and its heartbeats' answer,
    from these outcomes."""
    outcomes = [claim_run(t, cmd, one) for one in cmd.claims]
    if t.changes.stopping:
        stopping = set(t.changes.stopping)
        for run in outcomes:
            if run is not None and (run.job_id, run.nominal_ms) in stopping:
                run.cancel = "requested"
    return outcomes


def claim_run(t: Tables, cmd: ClaimRuns, claim: Claim) -> Run | None:
    """Claims a run that is still waiting and due; None when it is not any
    more (paused, deleted or claimed since the dispatcher picked it), or
    when the job's overlap policy holds it back (`overlap.holds`:
    skipped or buffered instead)."""
    job_key = keys.job_key(claim.job_id)
    found = t.slot_run(claim.job_id, claim.nominal_ms, keys.by_job_key_of(job_key, claim.nominal_ms))
    if found is None or found[1].status != "waiting" or found[1].due_ms > cmd.at_ms + cmd.ahead_ms or found[1].buffered:
        return None
    runs_key, run = found
    # A one-off's claim reads no job; nor does its policy hold anything back.
    job = None if claim.one_off else t.job_any(run.job_id, job_key)
    if claim.calendar is not None and job is not None and not _calendar_lets_run(t, job, run, runs_key, claim, cmd.at_ms):
        return None
    if job is not None and catchup.misses_itself(job, run, claim):
        _miss(t, job, run, runs_key, claim, cmd.at_ms)
        return None
    if job is not None and deps.gate(t, job, run, runs_key, claim, cmd.at_ms):
        return None
    if job is not None and job.overlap is not None:
        buffered = overlap.holds(t, job, run, runs_key, cmd.at_ms)
        if buffered is not None:
            overlap.held(t, job, run, claim, cmd.at_ms, buffered)
            return None
    run.status = "claimed"
    run.attempt += 1
    run.worker = cmd.worker
    run.lease_expires_ms = claim.lease_expires_ms
    run.started_ms = cmd.at_ms
    run.cancel = None  # a new attempt: what ended the last one is past
    run.timeout_at_ms = claim.timeout_at_ms
    if job is None:
        t.put_run_in_place(run, runs_key, "waiting", job_key=job_key)
        # The job's `next_run_at` still names this run's due time; reads
        # show it only while the run waits (`Tables.fresh`).
        return run
    t.put_run_in_place(run, runs_key, "waiting", job, job_key)
    counted = job.schedule.repeating and run.attempt == 1 and not run.triggered and not run.backfill
    if counted:
        # The first claim of a slot's run (`schedule.max_runs`): the
        # schedule's own run, or one its overlap policy buffered.
        job.runs_done += 1
    if slots.hand_on(t, job, run, claim, cmd.at_ms) or counted:
        t.put_job(job, job_key)
    return run


def _calendar_lets_run(t: Tables, job: Job, run: Run, runs_key: bytes, claim: Claim, at_ms: int) -> bool:
    """The claim's calendar decision (docs/semantics.md "Calendars"),
    taken only at the epoch it was made at: the run goes on to its
    claim, or it is skipped (the schedule handed on to the claim's next
    slot) or moved (it waits on), or, decided at another epoch, it goes
    back to the dispatcher as it is."""
    decision = claim.calendar
    assert decision is not None
    if not calendars.current(t, job, decision):
        t.send_back(runs_key, run, job)  # to decide it anew
        return False
    if decision.action == "run":
        return True
    if decision.action == "move":
        assert decision.move_ms is not None
        calendars.move(t, job, run, runs_key, decision.move_ms)
        return False
    calendars.skip(t, job, run, runs_key, decision, at_ms)
    if slots.hand_on(t, job, run, claim, at_ms):
        t.put_job(job)
    slots.settle(t, job, run, at_ms)
    return False


def _miss(t: Tables, job: Job, run: Run, runs_key: bytes, claim: Claim, at_ms: int) -> None:
    """The slot run the claim's catch-up decision does not run (its first
    range starts at the run's slot: `catchup.misses_itself`): the run
    becomes that range's `missed` row, with its reason, and the schedule
    moves on as a claim moves it, recording the ranges and making the
    next run. A slot after which none is planned completes the job."""
    missed = claim.missed[0]
    run.status = "missed"
    run.reason = missed.reason
    run.finished_ms = at_ms
    run.due_ms = run.nominal_ms  # as every missed row shows it
    run.missed_until_ms = missed.until_ms
    run.missed_count = missed.count
    t.finish_run(run, runs_key, "waiting", at_ms, job=job)
    # The range's row is this run's now; `record_missed` adds its event.
    if slots.hand_on(t, job, run, claim, at_ms):
        t.put_job(job)
    slots.settle(t, job, run, at_ms)


def claim_keyed(t: Tables, cmd: ClaimRuns, key: ClaimKey) -> list[Run | None] | ClaimKeyEntry | errors.TempoError:
    """A claim that carries a key (docs/semantics.md "Idempotent claims").
    A key recorded and not expired at the command's stamp takes nothing
    and answers its record (the retry of a claim, or a claim that raced
    its own retry to the log); one recorded for another worker or other
    queues is `ClaimKeyReused`. Otherwise the runs are claimed as
    without a key, and what they took is recorded, if anything. Expired
    records go first, a bounded number a command."""
    if not keys.owner_fits(key.owner) or not keys.claim_key_fits(key.owner, key.key):
        return errors.Invalid.at("claim_key", f"at most {limits.claim_key_bytes_max} bytes")
    t.drop_claim_keys(cmd.at_ms)
    record_key = keys.claim_key(key.owner, key.key)
    entry = t.claim_key_entry(record_key)
    if entry is not None:
        if entry.expires_ms > cmd.at_ms:
            if entry.worker != cmd.worker or entry.queues_hash != key.queues_hash:
                return errors.ClaimKeyReused(
                    f"claim key {key.key!r} was used by another worker or for other queues"
                )
            return entry
        # Expired, not yet dropped: a new claim may use the key again.
        t.drop_claim_key(record_key, entry.expires_ms)
    outcomes = claim_runs(t, cmd)
    taken = [Taken(run.job_id, run.nominal_ms, run.attempt) for run in outcomes if run is not None]
    # A record that would expire by its own stamp would never answer.
    if taken and key.expires_ms > cmd.at_ms:
        t.put_claim_key(record_key, key.owner, key.key, ClaimKeyEntry(cmd.worker, key.queues_hash, key.expires_ms, taken))
    return outcomes


def report_result(t: Tables, cmd: ReportResults, result: Result) -> Run | errors.TempoError:
    """A worker's result for an attempt: the run is done, or waits for its
    retry, or failed for good; a repeat of the result that ended the
    attempt is answered with the run as it is, any other for an attempt
    that ended is stale."""
    job_key = keys.job_key(result.job_id)
    by_job_key = keys.by_job_key_of(job_key, result.nominal_ms)
    found: tuple[bytes | None, Run] | None = t.slot_run(result.job_id, result.nominal_ms, by_job_key)
    if found is None:
        # Not open: a repeat of the result that finished it, or stale.
        held = t.history_run(result.job_id, result.nominal_ms)
        found = None if held is None else (None, held[1])
    job = None if found is None else t.job_any(result.job_id, job_key)
    if found is None or job is None or (cmd.owner is not None and job.owner != cmd.owner):
        return errors.NotFound("no such run")
    runs_key, run = found
    if run.attempt != result.attempt:
        return errors.StaleAttempt(f"attempt {result.attempt} is not the current one ({run.attempt})")
    if run.status != "claimed":
        return _repeat_or_stale(run, result)
    assert runs_key is not None, "a claimed run is open"
    if run.timeout_at_ms is not None and cmd.at_ms >= run.timeout_at_ms:
        # The attempt ended at its timeout, whether or not the lease
        # check has committed that yet; its expiry records it
        # (docs/semantics.md "Run timeouts").
        return errors.StaleAttempt(f"attempt {result.attempt} ended by its timeout")
    _keep_attempt(run, cmd.at_ms, result.ok, result.output, result.error)
    run.lease_expires_ms = None
    run.output = result.output
    run.error = result.error
    if run.cancel == "requested" and not result.ok:
        # A run asked to stop that did not succeed ends cancelled, with
        # no retry; one that succeeded before the stop reached it is
        # done, as it happened (docs/semantics.md "Cancelling a run").
        _end_cancelled(t, job, run, runs_key, cmd.at_ms, by_job_key)
        return run
    if result.ok:
        run.status = "done"
        run.finished_ms = cmd.at_ms
        t.finish_run(run, runs_key, "claimed", cmd.at_ms, by_job_key, job)
        if job.failed_runs > 0:
            _recovered(t, job, run, cmd.at_ms, job_key)
        slots.settle(t, job, run, cmd.at_ms, job_key)
        overlap.ended(t, job, run, cmd.at_ms)
        deps.ended(t, job, run, cmd.at_ms, job_key)
        return run
    backoff_s = job.backoff_s if run.retry_kept is None else run.retry_kept.backoff_s
    gap_s = backoff_s[min(run.attempt - 1, len(backoff_s) - 1)]
    _end_attempt(t, job, run, runs_key, cmd.at_ms, cmd.at_ms + gap_s * 1000)
    return run


def expire_lease(t: Tables, at_ms: int, expiry: Expiry) -> Run | None:
    """An attempt the dispatcher found ended: its lease ran out, or its
    timeout passed (`expiry.reason`). A run asked to stop ends
    cancelled either way; a timeout is a failed attempt, retried after
    its backoff as a failed result is; an expired lease is re-delivered
    at once."""
    found = t.slot_run(expiry.job_id, expiry.nominal_ms)
    if found is None or found[1].status != "claimed" or found[1].attempt != expiry.attempt:
        return None  # finished or re-claimed since the lease was found expired
    runs_key, run = found
    job = t.job_any(run.job_id)
    error = "timeout" if expiry.reason == "timeout" else "lease expired"
    _keep_attempt(run, at_ms, False, None, error)
    run.lease_expires_ms = None
    run.error = error
    if run.cancel == "requested":
        _end_cancelled(t, job, run, runs_key, at_ms)
        return run
    if expiry.reason == "timeout":
        run.cancel = "timeout"
        backoff_s = job.backoff_s if run.retry_kept is None else run.retry_kept.backoff_s
        gap_s = backoff_s[min(run.attempt - 1, len(backoff_s) - 1)]
        _end_attempt(t, job, run, runs_key, at_ms, at_ms + gap_s * 1000)
        return run
    # A re-delivery after an expired lease is due at once, without jitter.
    _end_attempt(t, job, run, runs_key, at_ms, at_ms)
    return run


def cancel_run(t: Tables, cmd: CancelRun) -> Run | errors.TempoError:
    """A waiting run is cancelled at once; a claimed one is asked to stop
    (`slots.request_cancel`); one cancelled already is answered as it
    is; any other finished run is `RunFinished`."""
    job = t.job(cmd.owner, cmd.job_id)
    if job is None:
        return errors.NotFound("no such run")
    found = t.slot_run(job.id, cmd.nominal_ms)
    if found is None:
        held = t.history_run(job.id, cmd.nominal_ms)
        if held is None:
            return errors.NotFound(f"no run {ids.run_id(job.id, cmd.nominal_ms)}")
        run = held[1]
        if run.status == "cancelled":
            return run
        return errors.RunFinished(f"run {ids.run_id(job.id, cmd.nominal_ms)} finished already ({run.status})")
    runs_key, run = found
    if slots.held_ahead(run, cmd.at_ms):
        # Claimed ahead and not started: it ends here, never to start.
        run.cancel = "requested"
        run.lease_expires_ms = None
        _end_cancelled(t, job, run, runs_key, cmd.at_ms)
        return run
    if run.status == "claimed":
        slots.request_cancel(t, job, run, runs_key)
        return run
    assert run.status == "waiting", "an open run waits or is claimed"
    if slots.is_slot_run(job, run) and not cmd.planned:
        return errors.Conflict("the job's schedule moved while the cancel was made: send it again")
    _cancel_waiting(t, job, run, runs_key, cmd)
    return run


def _cancel_waiting(t: Tables, job: Job, run: Run, runs_key: bytes, cmd: CancelRun) -> None:
    """A waiting run cancelled into history. The waiting run of a
    repeating job's schedule slot hands the schedule on to the next
    slot (the command's), so the job keeps one waiting run; a
    one-off's ends the job (`slots.settle`: completed)."""
    slot_run = slots.is_slot_run(job, run)
    # A buffered run held nothing back; a released one (or a retry) was
    # what the buffered runs after it waited for. `finish_run` forgets it.
    held_back = run.buffered and run.attempt == 0
    run.status = "cancelled"
    run.owner_cancelled = True
    run.finished_ms = cmd.at_ms
    t.finish_run(run, runs_key, "waiting", cmd.at_ms, job=job)
    _cancelled_event(t, job, run, cmd.at_ms)
    if not slot_run:
        slots.settle(t, job, run, cmd.at_ms)
        if not held_back:
            overlap.ended(t, job, run, cmd.at_ms)
        return
    if cmd.next_slot_ms is None or slots.past_end(job, cmd.next_slot_ms):
        if cmd.next_slot_ms is None:
            # The ranges the catch-up decided stand when no slot is left
            # (a triggered run took the last one).
            for missed in cmd.missed:
                catchup.record_missed(t, job, missed, cmd.at_ms)
        slots.end_schedule(t, job, cmd.at_ms)  # the schedule has no occurrence left
        return
    assert cmd.next_due_ms is not None and cmd.next_slot_ms > run.nominal_ms
    slots.mark_taken(job, run.nominal_ms)
    job.slot_ms = cmd.next_slot_ms
    job.next_run_at_ms = slots.schedule_at(t, job, cmd.next_slot_ms, cmd.next_due_ms, cmd.at_ms)
    for missed in cmd.missed:
        catchup.record_missed(t, job, missed, cmd.at_ms)
    job.catchup_until_ms = cmd.catchup_until_ms
    job.catchup_decided_ms = cmd.catchup_decided_ms
    t.put_job(job)


def _end_cancelled(
    t: Tables, job: Job, run: Run, runs_key: bytes, at_ms: int, by_job_key: bytes | None = None
) -> None:
    """A claimed run asked to stop ends `cancelled` (its attempt kept by
    the caller): by its result, or by the end of its lease."""
    run.status = "cancelled"
    run.owner_cancelled = True
    run.finished_ms = at_ms
    run.retry_kept = None
    t.finish_run(run, runs_key, "claimed", at_ms, by_job_key, job)
    _cancelled_event(t, job, run, at_ms)
    slots.settle(t, job, run, at_ms)
    overlap.ended(t, job, run, at_ms)


def _cancelled_event(t: Tables, job: Job, run: Run, at_ms: int) -> None:
    detail = {"attempt": run.attempt, "claimed": run.attempt > 0 and run.cancel == "requested"}
    t.append_event(job.owner, Event("run.cancelled", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))


def _end_attempt(t: Tables, job: Job, run: Run, runs_key: bytes, at_ms: int, retry_due_ms: int) -> None:
    """A failed or expired attempt: wait for the next one, or fail for good
    (by the retry policy the attempt was claimed under: `Run.retry_kept`)."""
    max_attempts = job.max_attempts if run.retry_kept is None else run.retry_kept.max_attempts
    run.retry_kept = None  # the next attempt is claimed under the job's policy
    if run.attempt < max_attempts and job.state == "paused" and not run.triggered:
        # A paused job has no run waiting: the retry is cancelled as the
        # pause cancelled the job's waiting runs, due when it would have
        # been, and a resume of a one-off brings it back.
        run.status = "cancelled"
        run.due_ms = retry_due_ms
        run.finished_ms = at_ms
        t.finish_run(run, runs_key, "claimed", at_ms, job=job)
        if slots.mark_taken(job, run.nominal_ms):
            t.put_job(job)
        overlap.ended(t, job, run, at_ms)
        return
    if run.attempt < max_attempts:
        run.status = "waiting"
        run.due_ms = retry_due_ms
        t.put_run(run, runs_key, "claimed", job)
        if job.slot_ms == run.nominal_ms and not job.schedule.repeating and not run.triggered:
            job.next_run_at_ms = run.due_ms
            t.put_job(job)
        overlap.ended(t, job, run, at_ms)  # waiting for its next attempt, it runs no more
        return
    run.status = "failed"
    run.finished_ms = at_ms
    t.finish_run(run, runs_key, "claimed", at_ms, job=job)
    detail = {"attempt": run.attempt, "error": run.error}
    t.append_event(job.owner, Event("run.failed", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))
    job.failed_runs += 1
    t.put_job(job)
    slots.settle(t, job, run, at_ms)
    overlap.ended(t, job, run, at_ms)
    deps.ended(t, job, run, at_ms, keys.job_key(job.id))


def _recovered(t: Tables, job: Job, run: Run, at_ms: int, job_key: bytes) -> None:
    """A run ended done after `job.failed_runs` runs that failed for good."""
    assert run.status == "done" and job.failed_runs > 0
    detail = {"failed_runs": job.failed_runs}
    job.failed_runs = 0
    t.put_job(job, job_key)
    t.append_event(job.owner, Event("job.recovered", at_ms, job.id, ids.run_id(job.id, run.nominal_ms), detail))


def _repeat_or_stale(run: Run, result: Result) -> Run | errors.TempoError:
    """A result for an attempt that ended: the same report as the one that
    ended it again is harmless (the run as it is); any other one for an
    attempt that ended (by a result, an expired lease or its timeout) is
    stale."""
    if run.cancel == "timeout":
        return errors.StaleAttempt(f"attempt {result.attempt} ended by its timeout")
    if run.status == "cancelled":
        # Asked to stop, a failed result ended it (an ok one would have
        # made it done); else a failed one did (its job was paused).
        same = not result.ok and (run.cancel == "requested" or not run.owner_cancelled)
    else:
        same = run.status == "done" if result.ok else run.status in ("waiting", "failed")
    repeat = same and run.attempt >= 1 and (run.output, run.error) == (result.output, result.error)
    return run if repeat else errors.StaleAttempt(f"attempt {result.attempt} already ended")


def _keep_attempt(run: Run, at_ms: int, ok: bool, output: str | None, error: str | None) -> None:
    """Records the attempt of a claimed run that ends at `at_ms`, keeping
    the newest `limits.run_attempts_kept_max`."""
    assert run.status == "claimed"
    kept = (*run.attempts, Attempt(run.started_ms, run.worker, at_ms, ok, output, error))
    run.attempts = kept[-limits.run_attempts_kept_max:]
