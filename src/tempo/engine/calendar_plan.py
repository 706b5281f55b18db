"""The slot planner's calendar rules (docs/semantics.md "Calendars"):
what the claim of a calendar job's slot run decides, where a planned
slot's run is due, and a preview's entries with their reasons.

Pure, as engine/plan.py is (an import contract keeps both so): records,
a calendar's `View` and times in; decisions out. The dispatcher's core
calls `at_claim` with the calendar as it reads it now, so a change of a
calendar reaches every slot not yet claimed; apply takes the decision
only at the calendar epoch it was made at (engine/rules/calendars.py).
"""

from collections.abc import Iterator
from typing import NamedTuple

from tempo import calendars, limits
from tempo.calendars import View
from tempo.engine import plan
from tempo.engine.commands import CalendarClaim
from tempo.engine.plan import CatchUp
from tempo.engine.records import CalendarUse, Job, Schedule


class Seen(NamedTuple):
    """A job's calendar as the dispatcher reads it: the job's use of it
    and the calendar with its bases folded in, at the owner's epoch."""

    use: CalendarUse
    view: View


class Decision(NamedTuple):
    """`at_claim`'s answer: the claim's calendar decision and, for a
    skip, where the schedule goes on (None: no slot left)."""

    claim: CalendarClaim
    next: CatchUp | None = None


def _placement(job: Job, seen: Seen, slot_ms: int) -> calendars.Placement:
    sched = job.schedule
    return calendars.place(seen.view, slot_ms, seen.use.on_excluded, gap=sched.dst_gap, repeat=sched.dst_repeat)


def is_slot(sched: Schedule, created_at_ms: int, at_ms: int) -> bool:
    """Whether `at_ms` is a slot of the schedule (a moved run that lands
    on one is that slot's run: one run, not two)."""
    return plan.slot_after_ms(sched, created_at_ms, at_ms, inclusive=True) == at_ms


def at_claim(job: Job, seen: Seen, nominal_ms: int, due_ms: int, now_ms: int) -> Decision:
    """What the claim at `now_ms` of the job's slot run (`nominal_ms`,
    due at `due_ms`) does under its calendar: it runs (its day is not
    excluded, or it was moved here), it moves to a later time, or it is
    skipped: excluded with `skip`, moved onto another slot of the
    schedule, or moved into the past."""
    epoch = seen.view.epoch
    placed = _placement(job, seen, nominal_ms)
    if placed.why is None:
        if due_ms < nominal_ms and plan.due_ms(job, nominal_ms, now_ms) > now_ms:
            # Placed early for a day an edit has freed since: it runs at its slot.
            slot_due_ms = plan.due_ms(job, nominal_ms, now_ms)
            return Decision(CalendarClaim(epoch, "move", move_ms=slot_due_ms, why="its day is no longer excluded"))
        return Decision(CalendarClaim(epoch))
    moved_ms = placed.at_ms
    if moved_ms is not None:
        if moved_ms != nominal_ms and is_slot(job.schedule, job.created_at_ms, moved_ms):
            return _skip(job, seen, nominal_ms, now_ms, f"{placed.why}; moved onto a slot of its own")
        if moved_ms == due_ms and moved_ms <= now_ms:
            return Decision(CalendarClaim(epoch, why=placed.why))
        if moved_ms > now_ms:
            return Decision(CalendarClaim(epoch, "move", move_ms=moved_ms, why=placed.why))
        return _skip(job, seen, nominal_ms, now_ms, f"{placed.why}; moved into the past")
    return _skip(job, seen, nominal_ms, now_ms, placed.why)


def _skip(job: Job, seen: Seen, nominal_ms: int, now_ms: int, why: str) -> Decision:
    """The slot is skipped, and so are the slots right after it that the
    calendar skips too, recorded as one range up to the first slot that
    runs (or moves): with `skip`, found a business day at a time; with a
    move, a slot at a time (each moved onto a slot of its own, or into
    the past), at most limits.calendar_skip_range_slots_max. As missed
    slots are: one row per range, not one per slot."""
    sched, created_ms = job.schedule, job.created_at_ms
    nxt = plan.slot_after_ms(sched, created_ms, nominal_ms, inclusive=False)
    if seen.use.on_excluded == "skip":
        # A business day at a time: from an excluded slot to the first
        # slot on or after the start of the next day not excluded.
        for _ in range(limits.calendar_days_searched_max):
            if nxt is None or _placement(job, seen, nxt).why is None:
                break
            open_ms = calendars.next_open_ms(seen.view, nxt)
            nxt = None if open_ms is None else plan.slot_after_ms(sched, created_ms, open_ms, inclusive=True)
    else:
        for _ in range(limits.calendar_skip_range_slots_max - 1):  # the row's first slot is the claimed one
            if nxt is None or not _skipped_too(job, seen, nxt, now_ms):
                break
            nxt = plan.slot_after_ms(sched, created_ms, nxt, inclusive=False)
    until_ms = nominal_ms + 1 if nxt is None else nxt
    count = plan.count_slots(sched, created_ms, nominal_ms, until_ms) if nxt is not None else 1
    claim = CalendarClaim(seen.view.epoch, "skip", until_ms=until_ms, count=count, why=why)
    if nxt is None:
        return Decision(claim)
    return Decision(claim, planned(job, seen, CatchUp(nxt, plan.due_ms(job, nxt, now_ms), [], None), now_ms))


def _skipped_too(job: Job, seen: Seen, slot_ms: int, now_ms: int) -> bool:
    """Whether a business-day move leaves the slot no run: its day is
    excluded and its run would land on a slot of its own, in the past,
    or nowhere."""
    placed = _placement(job, seen, slot_ms)
    if placed.why is None:
        return False
    moved_ms = placed.at_ms
    return moved_ms is None or moved_ms <= now_ms or is_slot(job.schedule, job.created_at_ms, moved_ms)


def placed_due(job: Job, seen: Seen, slot_ms: int, due_ms: int, now_ms: int) -> int:
    """Where the waiting run of `slot_ms`, due at `due_ms`, waits under
    the calendar as it is now (a re-plan: a resume, a patch, a calendar
    edit): at its slot's due time, or early with `previous_business_day`
    (as `planned`), or, for a run a claim already moved later, at the
    day the calendar moves it to now. A run still at its slot that a
    `next_business_day` would move stays there: its claim moves it."""
    slot_due_ms = plan.due_ms(job, slot_ms, now_ms)
    placed = _placement(job, seen, slot_ms)
    moved_ms = placed.at_ms
    if not placed.moved or moved_ms is None or moved_ms <= now_ms:
        return slot_due_ms
    if is_slot(job.schedule, job.created_at_ms, moved_ms):
        return slot_due_ms
    if moved_ms < slot_due_ms or due_ms > slot_due_ms:
        return moved_ms
    return slot_due_ms


def upcoming(job: Job, seen: Seen, now_ms: int) -> int | None:
    """When the job's next run happens under its calendar as it is now
    (the job's `next_run_at`): from its waiting slot run, the decisions
    its claims would make, each skip handing on to the slot after it,
    at most limits.calendar_view_steps_max of them. None: no run ahead,
    or none within those steps (a slot not checked is never shown: it
    may be one the calendar skips)."""
    slot_ms, due_ms = job.slot_ms, job.next_run_at_ms
    for _ in range(limits.calendar_view_steps_max):
        if slot_ms is None or due_ms is None:
            return None
        # As the claim at its due time decides it (or now, if overdue).
        decided = at_claim(job, seen, slot_ms, due_ms, max(now_ms, due_ms))
        claim = decided.claim
        if claim.action == "run":
            return due_ms
        if claim.action == "move":
            return claim.move_ms
        if decided.next is None:
            return None
        slot_ms, due_ms = decided.next.slot_ms, decided.next.due_ms
    return None


def planned(job: Job, seen: Seen, found: CatchUp, now_ms: int) -> CatchUp:
    """The run of the next slot, due where the calendar puts it: earlier,
    with `previous_business_day`, when its day is excluded and the moved
    time is ahead and no slot of its own; else at its slot (a later move
    is decided when it falls due, so a change meanwhile still counts)."""
    if seen.use.on_excluded != "previous_business_day" or found.slot_ms is None or found.due_ms is None:
        return found  # no slot left: nothing to place
    placed = _placement(job, seen, found.slot_ms)
    moved_ms = placed.at_ms
    if not placed.moved or moved_ms is None or not now_ms < moved_ms < found.due_ms:
        return found
    if is_slot(job.schedule, job.created_at_ms, moved_ms):
        return found
    return found._replace(due_ms=moved_ms)


class Entry(NamedTuple):
    """One entry of a calendar preview: when it runs (`at_ms`), how DST
    placed its slot, the slot it was moved from (None: not moved), and
    why; `excluded`: it does not run (listed with `include_excluded`)."""

    at_ms: int
    dst: plan.Occurrence
    moved_from_ms: int | None
    why: str | None
    excluded: bool


def preview(
    sched: Schedule, view: View, use: CalendarUse, after_ms: int, count: int, *, include_excluded: bool
) -> Iterator[list[Entry]]:
    """The preview's entries in slices (a checkpoint between them), each
    slice sorted; the whole, gathered, is sorted by the caller. At most
    `count` runs, and the excluded slots among the slots looked through
    (at most limits.calendar_preview_scan_factor times `count`)."""
    job = Job("0" * 26, "", None, "", None, sched, 1, (0,), 1, 0, "active", after_ms, None, None, None)
    seen = Seen(use, view)
    runs: set[int] = set()
    scan_max = count * limits.calendar_preview_scan_factor
    scanned = 0
    for part in plan.preview_slices(sched, after_ms, scan_max):
        entries: list[Entry] = []
        for slot_ms, mark in part:
            scanned += 1
            entry = _entry(job, seen, slot_ms, (slot_ms, mark), after_ms)
            if entry.excluded:
                if include_excluded:
                    entries.append(entry)
            elif entry.at_ms not in runs:
                runs.add(entry.at_ms)
                entries.append(entry)
        yield entries
        if len(runs) >= count and (not part or max(sorted(runs)[:count]) <= part[-1][0]):
            return
        if scanned >= scan_max:
            return


def _entry(job: Job, seen: Seen, slot_ms: int, dst: plan.Occurrence, after_ms: int) -> Entry:
    placed = _placement(job, seen, slot_ms)
    if placed.why is None:
        return Entry(slot_ms, dst, None, None, False)
    moved_ms = placed.at_ms
    if moved_ms is None:
        return Entry(slot_ms, dst, None, placed.why, True)
    if is_slot(job.schedule, job.created_at_ms, moved_ms):
        return Entry(slot_ms, dst, None, f"{placed.why}; moved onto a slot of its own", True)
    if moved_ms <= after_ms:
        return Entry(slot_ms, dst, None, f"{placed.why}; moved into the past", True)
    return Entry(moved_ms, (moved_ms, None), slot_ms, placed.why, False)
