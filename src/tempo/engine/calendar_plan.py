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
    """The slot is skipped; with `skip`, so are the excluded slots right
    after it, recorded as one range up to the first slot whose day is not
    excluded (found a business day at a time, bounded)."""
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
    until_ms = nominal_ms + 1 if nxt is None else nxt
    count = plan.count_slots(sched, created_ms, nominal_ms, until_ms) if nxt is not None else 1
    claim = CalendarClaim(seen.view.epoch, "skip", until_ms=until_ms, count=count, why=why)
    if nxt is None:
        return Decision(claim)
    return Decision(claim, planned(job, seen, CatchUp(nxt, plan.due_ms(job, nxt, now_ms), [], None), now_ms))


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
