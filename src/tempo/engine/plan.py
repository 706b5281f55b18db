"""The slot planner: which slot of a job's schedule comes next, when its run
is due, what a claim decides about the slots it missed (catch-up), which
slots a pause let pass, and the times a schedule preview shows.

Pure (docs/style.md "Pure core, I/O at the edges"): it takes records and
times (`now_ms`) as arguments and returns values; no trio, no LMDB, no
clock. `engine/dispatch_core.py` decides its claims with it, and the jobs
service (`engine/jobs.py`) plans new, patched and resumed jobs with it and
drives a preview's slices with a checkpoint between them. An import
contract in pyproject.toml keeps it, and the dispatcher's core, pure.
"""

import functools
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from tempo import ids, limits, schedule
from tempo.engine.records import Catchup, Job, Missed, Run, Schedule

# A cron job's rule is asked for on every claim that plans its next slot:
# made once per (expression, zone, DST policy) and kept, since making the
# frozen value costs about 1 µs against 0.3 µs for the lookup.
_rule = functools.lru_cache(maxsize=1024)(schedule.CronRule)  # as schedule.py's parsed expressions


def cron_rule(sched: Schedule) -> schedule.CronRule:
    """The cron schedule's rule (its expression, zone and DST policy),
    which answers for its slots."""
    assert sched.cron is not None and sched.timezone is not None
    return _rule(sched.cron, sched.timezone, sched.dst_gap, sched.dst_repeat)


def slot_after_ms(sched: Schedule, created_at_ms: int, after_ms: int, *, inclusive: bool) -> int | None:
    """The first nominal time after `after_ms` (at or after it with `inclusive`);
    None after the schedule's `end_at`."""
    found = _slot_after_ms(sched, created_at_ms, after_ms, inclusive=inclusive)
    return None if found is None or (sched.end_at_ms is not None and found > sched.end_at_ms) else found


def _slot_after_ms(sched: Schedule, created_at_ms: int, after_ms: int, *, inclusive: bool) -> int | None:
    if sched.at_ms is not None:
        ok = sched.at_ms >= after_ms if inclusive else sched.at_ms > after_ms
        return sched.at_ms if ok else None
    if sched.cron is not None:
        try:
            return cron_rule(sched).next_ms(after_ms - (1 if inclusive else 0))
        except schedule.ScheduleError:
            return None  # stored before the dialect lost `L`, `W`, `#`: no further slot
    assert sched.every_s is not None
    anchor_ms = created_at_ms if sched.start_at_ms is None else sched.start_at_ms
    found_ms = schedule.next_every_ms(
        sched.every_s,
        anchor_ms,
        after_ms,
        include_anchor=sched.start_at_ms is not None,
        strictly_after=not inclusive,
    )
    return found_ms if found_ms <= limits.instant_ms_max else None  # no time after year 9999


def first_slot_ms(sched: Schedule, created_at_ms: int) -> int | None:
    """The slot of a new job's first run (docs/api.md `schedule`)."""
    if sched.at_ms is not None:
        return sched.at_ms  # a time in the past runs at once
    if sched.every_s is not None and sched.start_at_ms is None:
        first_ms = created_at_ms + sched.every_s * 1000
        return None if sched.end_at_ms is not None and first_ms > sched.end_at_ms else first_ms
    return slot_after_ms(sched, created_at_ms, created_at_ms, inclusive=sched.every_s is not None)


def latest_slot_ms(sched: Schedule, created_at_ms: int, now_ms: int) -> int | None:
    """The last nominal time at or before `now_ms`, or None.

    Exact, and bounded however long the outage: for cron a bisection over
    the job's lifetime (`schedule.CronRule.latest_ms`), since a cron job's first
    slot comes after its creation. No slot after the schedule's `end_at`."""
    if sched.end_at_ms is not None:
        now_ms = min(now_ms, sched.end_at_ms)
    if sched.every_s is not None:
        period_ms = sched.every_s * 1000
        anchor_ms = created_at_ms if sched.start_at_ms is None else sched.start_at_ms
        k = (now_ms - anchor_ms) // period_ms
        k_min = 0 if sched.start_at_ms is not None else 1
        return None if k < k_min else anchor_ms + k * period_ms
    try:
        return cron_rule(sched).latest_ms(now_ms, created_at_ms)
    except schedule.ScheduleError:
        return None  # as in slot_after_ms


def step_over_taken(
    job: Job, found: "CatchUp", now_ms: int, run_at: Callable[[int], Run | None]
) -> "CatchUp | None":
    """`found`, the next slot a claim or a cancel of the job's slot run
    hands the schedule on to, stepped over the slots that hold a run
    already: an open one (a triggered run took that millisecond), or one
    that finished or that its owner cancelled. A run a pause or a patch
    cancelled does not hold its slot: it waits again (rules/slots.py
    `schedule_at`). Only a slot at or before `job.taken_until_ms` can
    hold one, so a job without re-plans, cancels or triggers reads
    nothing. None: the schedule has no slot left."""
    slot_ms: int | None = found.slot_ms
    for _ in range(limits.taken_slots_stepped_max):
        if slot_ms is None or job.taken_until_ms is None or slot_ms > job.taken_until_ms:
            break
        run = run_at(slot_ms)
        if run is None or (run.status == "cancelled" and not run.owner_cancelled):
            break
        slot_ms = slot_after_ms(job.schedule, job.created_at_ms, slot_ms, inclusive=False)
    if slot_ms is None:
        return None
    if slot_ms == found.slot_ms:
        return found
    return found._replace(slot_ms=slot_ms, due_ms=due_ms(job, slot_ms, now_ms))


class CatchUp(NamedTuple):
    """What the claim of a job's slot run at `now_ms` decides: the slot of
    the next run and its due time, the ranges of slots it leaves without a
    run, and the last slot an `all` catch-up runs and the latest it decided
    on (None: none under way); after the one, the schedule goes on after the
    other, as the slots between are recorded already. `slot_ms` None: the
    ranges reach the schedule's end and no slot is left after them
    (`_ended`); they are recorded all the same."""

    slot_ms: int | None
    due_ms: int | None
    missed: list[Missed]
    until_ms: int | None
    decided_ms: int | None = None  # the latest slot the `all` catch-up decided on


_DEFAULT_CATCHUP = Catchup()


def count_slots(sched: Schedule, created_at_ms: int, first_ms: int, end_ms: int) -> int | None:
    """How many slots lie in [first_ms, end_ms), `first_ms` a slot of the
    schedule: arithmetic for `every_s`, counted from the fields for cron
    (`schedule.CronRule.count_in`), never one slot at a time. None: too many
    days to count (limits.catchup_count_days_max)."""
    if end_ms <= first_ms:
        return 0
    if sched.every_s is not None:
        return (end_ms - 1 - first_ms) // (sched.every_s * 1000) + 1
    return cron_rule(sched).count_in(first_ms - 1, end_ms - 1)


def missed_range(sched: Schedule, created_at_ms: int, reason: Any, first_ms: int, end_ms: int) -> Missed:
    """The slots in [first_ms, end_ms): both ends are slots (the end the
    first one after the range), so neither needs a search backwards."""
    assert first_ms < end_ms
    return Missed(reason, first_ms, end_ms, count_slots(sched, created_at_ms, first_ms, end_ms))


def _nth_slot_ms(sched: Schedule, created_at_ms: int, first_ms: int, n: int) -> int:
    """The n-th slot from `first_ms` (a slot; the 1st is itself); n is at
    most limits.catchup_runs_max, so where a cron one is walked (across a
    UTC offset change) the walk is bounded."""
    assert 1 <= n <= limits.catchup_runs_max
    if sched.every_s is not None:
        return first_ms + (n - 1) * sched.every_s * 1000
    rule = cron_rule(sched)
    if n == 1:
        return first_ms
    found = rule.nth_ms(first_ms, n - 1)
    assert found is not None, "the caller counted more slots than n"
    return found


def catch_up(job: Job, nominal_ms: int, now_ms: int, *, claiming: bool = False) -> CatchUp | None:
    """The catch-up decision a claim (or a cancel) of the job's slot run
    `nominal_ms` takes at `now_ms` (docs/semantics.md "Catch-up after
    missed slots").

    When the next slot is still ahead, it is the next run. When it is past
    already (the node was down, the clock stepped, no worker claimed), the
    missed slots from it up to the latest at or before `now_ms` are split:
    those older than the job's window are `outside_window`; of the rest the
    policy runs the latest (`latest`), the first `max_runs` in order
    (`all`, one after another: each claim makes the next, up to `until_ms`),
    or none (`none`: the next run is the first slot ahead), and the slots it
    does not run are `policy`. Bounded: a few bisections and counts, never
    a walk over the missed slots. None: the schedule has no slot left and
    no range to record (a decision with ranges and no slot after them has
    `slot_ms` None).

    `claiming`: a claim, whose slot `nominal_ms` is then missed too (its
    run waited past the next slot: the node was down, or no worker came),
    so the window and the policy decide on it as on the slots after it
    (`_decide_claimed`). A cancel's slot is not: its run is cancelled. A
    slot an `all` catch-up under way runs was decided on already."""
    nxt = _slot_after_claim_ms(job, nominal_ms)
    if nxt is None:
        return None
    if job.catchup_until_ms is not None and nxt <= job.catchup_until_ms:  # an `all` catch-up goes on
        return CatchUp(nxt, due_ms(job, nxt, now_ms), [], job.catchup_until_ms, job.catchup_decided_ms)
    if nxt > now_ms:
        return CatchUp(nxt, due_ms(job, nxt, now_ms), [], None)
    if claiming and (job.catchup_until_ms is None or nominal_ms > job.catchup_until_ms):
        return _decide_claimed(job, nominal_ms, nxt, now_ms)
    return _decide(job, nxt, now_ms)


def _decide_claimed(job: Job, nominal_ms: int, nxt: int, now_ms: int) -> CatchUp | None:
    """`catch_up` of a claim whose slot `nominal_ms` is the first missed
    slot (`nxt`, the slot after it, is past too). When the decision does
    not run that slot, its first range starts at it, which is how apply
    knows not to hand the run out (rules/runs.py `claim_run`). When it does
    (`all`, the slot first in the window), the run goes on and the next
    run is the slot after it, or, when it is the only one the catch-up
    runs, the first slot after the latest decided on."""
    found = _decide(job, nominal_ms, now_ms)
    if found is None or found.slot_ms != nominal_ms:
        return found
    assert found.until_ms is not None and found.decided_ms is not None, "only `all` runs the first missed slot"
    if found.until_ms > nominal_ms:
        return found._replace(slot_ms=nxt, due_ms=due_ms(job, nxt, now_ms))
    ahead = slot_after_ms(job.schedule, job.created_at_ms, found.decided_ms, inclusive=False)
    return _ended(found.missed) if ahead is None else CatchUp(ahead, due_ms(job, ahead, now_ms), found.missed, None)


def _ended(missed: list[Missed]) -> CatchUp | None:
    """A decision whose ranges reach the end of the schedule, with no slot
    left after them: the ranges alone (recorded, and the job completed,
    by apply: rules/slots.py `hand_on`), or None when there are none."""
    return CatchUp(None, None, missed, None) if missed else None


def _slot_after_claim_ms(job: Job, nominal_ms: int) -> int | None:
    """The slot after `nominal_ms`; after the last run of an `all` catch-up,
    the slot after the latest it decided on (the slots between are
    recorded missed already)."""
    sched, created_ms = job.schedule, job.created_at_ms
    nxt = slot_after_ms(sched, created_ms, nominal_ms, inclusive=False)
    decided = job.catchup_decided_ms
    if nxt is None or job.catchup_until_ms is None or decided is None:
        return nxt
    if job.catchup_until_ms < nxt <= decided:
        return slot_after_ms(sched, created_ms, decided, inclusive=False)
    return nxt


def _decide(job: Job, nxt: int, now_ms: int) -> CatchUp | None:
    """`catch_up` of a next slot `nxt` that is past already."""
    sched, created_ms = job.schedule, job.created_at_ms
    policy = job.catchup or _DEFAULT_CATCHUP
    latest = latest_slot_ms(sched, created_ms, now_ms)
    assert latest is not None and latest >= nxt
    ahead = slot_after_ms(sched, created_ms, now_ms, inclusive=False)  # the first slot not missed
    # The end of a range that reaches the latest slot: the slot after it
    # (None: the schedule ends, and the instant after the latest serves).
    end_ms = latest + 1 if ahead is None else ahead
    missed: list[Missed] = []
    first_in: int | None = nxt
    if policy.window_s is not None and nxt < now_ms - policy.window_s * 1000:
        first_in = slot_after_ms(sched, created_ms, now_ms - policy.window_s * 1000, inclusive=True)
        if first_in is not None and first_in > latest:
            first_in = None  # no missed slot in the window
        missed.append(missed_range(sched, created_ms, "outside_window", nxt, end_ms if first_in is None else first_in))
    if first_in is None or policy.policy == "none":
        if first_in is not None:
            missed.append(missed_range(sched, created_ms, "policy", first_in, end_ms))
        return _ended(missed) if ahead is None else CatchUp(ahead, due_ms(job, ahead, now_ms), missed, None)
    if policy.policy == "latest":
        if first_in < latest:
            missed.append(missed_range(sched, created_ms, "policy", first_in, latest))
        return CatchUp(latest, due_ms(job, latest, now_ms), missed, None)
    return _all_of(job, policy, first_in, latest, end_ms, missed, now_ms)


def _all_of(
    job: Job, policy: Catchup, first_in: int, latest: int, end_ms: int, missed: list[Missed], now_ms: int
) -> CatchUp:
    """The `all` policy's decision: the first `max_runs` slots of the
    window from `first_in`, the rest up to `latest` recorded."""
    assert policy.policy == "all"
    sched, created_ms = job.schedule, job.created_at_ms
    in_window = count_slots(sched, created_ms, first_in, end_ms)
    until = latest
    if in_window is None or in_window > policy.max_runs:
        until = _nth_slot_ms(sched, created_ms, first_in, policy.max_runs)
        skipped = slot_after_ms(sched, created_ms, until, inclusive=False)
        assert skipped is not None and skipped <= latest
        missed.append(missed_range(sched, created_ms, "policy", skipped, end_ms))
    return CatchUp(first_in, due_ms(job, first_in, now_ms), missed, until, latest)


def paused_ranges(job: Job, now_ms: int, next_slot_ms: int | None) -> list[Missed]:
    """The slots a paused job let pass, resumed at `now_ms` with its next
    run at `next_slot_ms`: from the one after the slot whose run the pause
    cancelled (that run is in the job's history already) up to the next.
    One range, or two around the slots an `all` catch-up under way at the
    pause had recorded already (its `policy` range)."""
    if not job.schedule.repeating or job.slot_ms is None or job.slot_ms >= now_ms:
        return []
    sched, created_ms = job.schedule, job.created_at_ms
    first = slot_after_ms(sched, created_ms, job.slot_ms, inclusive=False)
    if first is None or first > now_ms:
        return []
    last_ms = now_ms if sched.end_at_ms is None else min(now_ms, sched.end_at_ms)
    end_ms = last_ms + 1 if next_slot_ms is None else next_slot_ms
    if end_ms <= first:
        return []
    until, decided = job.catchup_until_ms, job.catchup_decided_ms
    if until is None or decided is None or first > decided or until == decided:
        return [missed_range(sched, created_ms, "paused", first, end_ms)]
    found = []
    after_until = slot_after_ms(sched, created_ms, until, inclusive=False)
    if first <= until and after_until is not None:
        found.append(missed_range(sched, created_ms, "paused", first, after_until))
    after_decided = slot_after_ms(sched, created_ms, decided, inclusive=False)
    if after_decided is not None and after_decided < end_ms:
        found.append(missed_range(sched, created_ms, "paused", after_decided, end_ms))
    return found


def due_ms(job: Job, slot_ms: int, now_ms: int) -> int:
    """A scheduled run's due time: its slot plus its jitter, never in the past.
    Jitter never moves it past the last instant RFC 3339 spells
    (limits.stored_ms_max, docs/api.md "Times"): a slot in the last hour of
    9999 is due by then at the latest."""
    if job.jitter_s == 0:
        return max(slot_ms, now_ms)  # no jitter: the run ID need not be made
    jittered_ms = slot_ms + ids.jitter_ms(ids.run_id(job.id, slot_ms), job.jitter_s)
    return max(min(jittered_ms, limits.stored_ms_max), slot_ms, now_ms)


Occurrence = tuple[int, schedule.DstMark | None]


def preview_slices(sched: Schedule, after_ms: int, count: int) -> Iterator[list[Occurrence]]:
    """The times of `POST /v1/schedules/preview` strictly after `after_ms`,
    each with how DST placed it, in slices of at most
    `limits.preview_slice_times` cron times, so that the caller can let
    other tasks run between slices; chained slices give the same times as
    one call, as each starts strictly after the last time of the one
    before. No time lies after year 9999, none after the schedule's
    `end_at`, and there are at most `count` and at most its `max_runs`
    (the most a job of it runs)."""
    if sched.at_ms is not None:
        yield [(sched.at_ms, None)] if sched.at_ms > after_ms else []
        return
    count = count if sched.max_runs is None else min(count, sched.max_runs)
    end_ms = limits.instant_ms_max if sched.end_at_ms is None else min(sched.end_at_ms, limits.instant_ms_max)
    if sched.cron is not None:
        rule = cron_rule(sched)
        found = 0
        while found < count:
            asked = min(limits.preview_slice_times, count - found)
            part = rule.occurrences_ms(after_ms, asked)
            kept = [occurrence for occurrence in part if occurrence[0] <= end_ms]
            yield kept
            found += len(kept)
            if len(part) < asked or part[-1][0] > end_ms:
                return
            after_ms = part[-1][0]
        return
    assert sched.every_s is not None
    period_ms = sched.every_s * 1000
    if sched.start_at_ms is None:
        first = after_ms + period_ms
    else:
        first = schedule.next_every_ms(sched.every_s, sched.start_at_ms, after_ms, include_anchor=True)
    # The grid up to the end of year 9999 (or `end_at`), at most `count` of it.
    count = max(0, min(count, (end_ms - first) // period_ms + 1))
    yield [(first + k * period_ms, None) for k in range(count)]


def preview_timezone(sched: Schedule) -> str:
    """The time zone of a preview's wall clock: a cron schedule's own, UTC
    for the others."""
    if sched.cron is None:
        return "UTC"
    assert sched.timezone is not None
    return sched.timezone
