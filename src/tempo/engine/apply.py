"""`apply`: each replicated command to its rule (engine/rules/), over one
transaction's tables (engine/tables/). One tag, one rule; an unknown tag
is a programmer error and stops the node rather than being skipped.

What holds for every rule: it reads no clock and no random source (time
is the command's stamp), and it answers a command's own faults as its
outcome rather than raising, so one bad command in a batch leaves the
others, and the transaction, alone."""

from collections.abc import Callable
from typing import Any

from tempo import errors
from tempo.engine.commands import (
    BackfillJob,
    CancelRun,
    ClaimRuns,
    Command,
    CreateJobs,
    DeleteCalendar,
    DeleteJob,
    DropHistory,
    ExpireLeases,
    NotifyCursor,
    OverlapRuns,
    PatchJob,
    PauseJob,
    PutCalendar,
    ReportResults,
    ResumeJob,
    SetMember,
    TriggerJob,
)
from tempo.engine.records import Calendar, ClaimKeyEntry, Job, Run
from tempo.engine.rules import calendars, catchup, deps, history, jobs, overlap, runs
from tempo.engine.rules.jobs import Created
from tempo.engine.tables import Tables

# What apply answers for one command: a value, or the operating error the
# request gets.
Outcome = (
    Created | Job | Run | None | errors.TempoError | ClaimKeyEntry | Calendar
    | list[Created | errors.TempoError] | list[Run | None] | list[Run | errors.TempoError] | list[Run] | list[bool]
)


def apply(t: Tables, command: Command) -> Outcome:
    """Applies one command with the rule of its tag (`RULES`)."""
    rule = RULES.get(type(command))
    if rule is None:
        raise AssertionError(f"unknown command {type(command).__name__}")
    return rule(t, command)


def _claim(t: Tables, cmd: ClaimRuns) -> Outcome:
    return runs.claim_runs(t, cmd) if cmd.key is None else runs.claim_keyed(t, cmd, cmd.key)


def _results(t: Tables, cmd: ReportResults) -> Outcome:
    return [runs.report_result(t, cmd, result) for result in cmd.results]


def _expiries(t: Tables, cmd: ExpireLeases) -> Outcome:
    return [runs.expire_lease(t, cmd.at_ms, expiry) for expiry in cmd.expiries]


def _overlap(t: Tables, cmd: OverlapRuns) -> Outcome:
    return [overlap.due(t, cmd.at_ms, claim) for claim in cmd.runs]


def _create(t: Tables, cmd: CreateJobs) -> Outcome:
    return jobs.create_jobs(t, cmd.jobs)


def _pause(t: Tables, cmd: PauseJob) -> Outcome:
    return _fresh(t, jobs.pause_job(t, cmd))


def _resume(t: Tables, cmd: ResumeJob) -> Outcome:
    return _fresh(t, jobs.resume_job(t, cmd))


def _patch(t: Tables, cmd: PatchJob) -> Outcome:
    return _fresh(t, jobs.patch_job(t, cmd))


def _drop_history(t: Tables, cmd: DropHistory) -> Outcome:
    history.drop(t, cmd)
    deps.drop_history(t, cmd.before_day)
    return None


def _set_member(t: Tables, cmd: SetMember) -> Outcome:
    t.put_member(cmd.node_id, cmd.url)
    t.changes.members = True
    return None


def _notify_cursor(t: Tables, cmd: NotifyCursor) -> Outcome:
    t.raise_notify_cursor(cmd.seq)
    return None


# The rule of each command's tag: one each, looked up by type (a
# dictionary lookup, not a walk down a `match`, on the claim and result
# paths). tests/engine/test_apply_rules.py checks that every command of
# the union has one.
RULES: dict[type, Callable[[Tables, Any], Outcome]] = {
    ClaimRuns: _claim,
    ReportResults: _results,
    ExpireLeases: _expiries,
    OverlapRuns: _overlap,
    CreateJobs: _create,
    PauseJob: _pause,
    ResumeJob: _resume,
    PatchJob: _patch,
    DeleteJob: jobs.delete_job,
    TriggerJob: jobs.trigger_job,
    CancelRun: runs.cancel_run,
    BackfillJob: catchup.backfill,
    DropHistory: _drop_history,
    SetMember: _set_member,
    NotifyCursor: _notify_cursor,
    PutCalendar: calendars.put_calendar,
    DeleteCalendar: calendars.delete_calendar,
}


def _fresh(t: Tables, outcome: Job | errors.TempoError) -> Job | errors.TempoError:
    """A job as the API shows it (`Tables.fresh`), or the error."""
    return t.fresh(outcome) if isinstance(outcome, Job) else outcome
