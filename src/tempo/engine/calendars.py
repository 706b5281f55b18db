"""The calendars service (docs/semantics.md "Calendars", docs/api.md
"Calendars"): checks a calendar beyond its shape, resolves its holidays
to dates with the `holidays` library when the request is checked, before
it is proposed (so apply, on every replica and after any upgrade of the
library, writes the same dates), and turns it into commands; a job's
calendar checked where a job is made; a preview with a calendar.

Like the jobs service, it reads the clock (the year the holidays start
at) and never the apply path does.
"""

import datetime as dt
import hashlib
import re
from collections.abc import Callable
from importlib import metadata
from typing import Protocol

import trio

from tempo import calendars, errors, limits, schedule
from tempo.engine import calendar_plan, plan
from tempo.engine.commandlog import CommandLog
from tempo.engine.commands import CalendarReplan, DeleteCalendar, NewJob, PutCalendar
from tempo.engine.records import Calendar, CalendarUse, Holidays, Job, OnExcluded, Run, Schedule
from tempo.engine.rules.deps import is_after
from tempo.engine.store import Store
from tempo.engine.tables.calendar_queries import fold

NAME = re.compile(r"[a-z0-9._-]{1,63}")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_ON_EXCLUDED: dict[str, OnExcluded] = {
    "skip": "skip", "next_business_day": "next_business_day", "previous_business_day": "previous_business_day",
}


class HolidaysSpec(Protocol):
    @property
    def country(self) -> str: ...

    @property
    def subdivision(self) -> str | None: ...


class CalendarSpec(Protocol):
    """What the service reads of `PUT /v1/calendars/{name}`'s body."""

    @property
    def timezone(self) -> str: ...

    @property
    def exclude_dates(self) -> list[str]: ...

    @property
    def exclude_weekdays(self) -> list[str]: ...

    @property
    def holidays(self) -> HolidaysSpec | None: ...

    @property
    def base(self) -> str | None: ...


def check_name(name: str, loc: str = "name") -> None:
    if not NAME.fullmatch(name):
        raise errors.Invalid.at(loc, "1 to 63 of a-z, 0-9, '.', '_' and '-'")


def check_timezone(timezone: str, loc: str = "timezone") -> None:
    try:
        schedule.utc_offset_s(timezone, 0)
    except schedule.ScheduleError as exc:
        raise errors.Invalid.at(loc, exc.msg) from None


def dates_of(texts: list[str], loc: str = "exclude_dates") -> tuple[int, ...]:
    """ISO dates (`2027-12-24`) as ordinals, ascending, each once."""
    if len(texts) > limits.calendar_dates_max:
        raise errors.Invalid.at(loc, f"at most {limits.calendar_dates_max} dates")
    found: set[int] = set()
    for i, text in enumerate(texts):
        try:
            if not _DATE.fullmatch(text):
                raise ValueError(text)
            found.add(dt.date.fromisoformat(text).toordinal())
        except ValueError:
            raise errors.Invalid.at(f"{loc}[{i}]", f"{text!r} is not a date YYYY-MM-DD") from None
    return tuple(sorted(found))


def weekdays_of(names: list[str], loc: str = "exclude_weekdays") -> tuple[int, ...]:
    found: set[int] = set()
    for i, name in enumerate(names):
        if name.lower() not in calendars.WEEKDAYS:
            raise errors.Invalid.at(f"{loc}[{i}]", f"{name!r} is not a weekday: one of {', '.join(calendars.WEEKDAYS)}")
        found.add(calendars.WEEKDAYS.index(name.lower()))
    if len(found) == 7:
        raise errors.Invalid.at(loc, "every day of the week is excluded: no business day is left")
    return tuple(sorted(found))


def resolve_holidays(spec: HolidaysSpec, year: int) -> Holidays:
    """The holidays of a country (and region) from `year` to
    limits.calendar_holiday_years_ahead years after, as dates with names."""
    import holidays  # here only: the apply path and the planner never need it

    country = spec.country.upper()
    supported = holidays.list_supported_countries()
    if country not in supported:
        raise errors.Invalid.at("holidays.country", _country_fault(spec.country, sorted(supported)))
    subdivision = spec.subdivision
    if subdivision is not None:
        subdivisions = {s.upper(): s for s in supported[country]}
        if subdivision.upper() not in subdivisions:
            known = ", ".join(sorted(supported[country])[:40]) or "none"
            raise errors.Invalid.at("holidays.subdivision", f"{subdivision!r} is not a subdivision of {country} ({known})")
        subdivision = subdivisions[subdivision.upper()]
    until = year + limits.calendar_holiday_years_ahead
    found = holidays.country_holidays(country, subdiv=subdivision, years=range(year, until + 1))
    days = sorted(found.items())
    return Holidays(
        country, subdivision, metadata.version("holidays"), year, until,
        tuple(day.toordinal() for day, _ in days), tuple(str(name) for _, name in days),
    )


def _country_fault(given: str, known: list[str]) -> str:
    """Why `given` is not a country the holidays library knows, and what is."""
    head, dash, tail = given.partition("-")
    if dash and head.upper() in known:
        return (f"{given!r} is not a country code: give the subdivision apart: "
                f'{{"country": "{head.upper()}", "subdivision": "{tail.upper()}"}}')
    if len(given) > 3 or not given.isalpha():
        return f"{given!r} is not a country code: give its ISO 3166-1 alpha-2 code, e.g. DE, FR, US"
    two = ", ".join(code for code in known if len(code) == 2)
    return f"{given!r} is not a country the holidays library knows: one of {two} (or their alpha-3 codes)"


class Calendars:
    def __init__(self, store: Store, committer: CommandLog, now_ms: Callable[[], int]):
        self.store = store
        self.committer = committer
        self.now_ms = now_ms
        # `next_run_ms`'s answers for runs due ahead (bounded).
        self._upcoming: dict[tuple[object, ...], int | None] = {}

    def record(self, owner: str, name: str, body: CalendarSpec, at_ms: int) -> Calendar:
        """The calendar a `PUT` asks for, checked, its holidays resolved."""
        check_name(name)
        check_timezone(body.timezone)
        dates = dates_of(body.exclude_dates)
        weekdays = weekdays_of(body.exclude_weekdays)
        if body.base is not None:
            check_name(body.base, "base")
            if body.base == name:
                raise errors.Invalid.at("base", "a calendar cannot be its own base")
            if not self.store.calendar_exists(owner, body.base):
                raise errors.Invalid.at("base", f"no calendar {body.base!r}")
        resolved = None
        if body.holidays is not None:
            resolved = resolve_holidays(body.holidays, dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC).year)
        return Calendar(owner, name, body.timezone, dates, weekdays, resolved, body.base, 1, at_ms, at_ms)

    async def put(self, owner: str, name: str, body: CalendarSpec, if_version: int | None) -> Calendar:
        at_ms = self.now_ms()
        cal = self.record(owner, name, body, at_ms)
        return await self.submit(cal, if_version, self.replans(cal))

    def replans(self, cal: Calendar) -> tuple[CalendarReplan, ...]:
        """The waiting runs the new `cal` places elsewhere (docs/semantics.md
        "Calendars"): of the jobs that move runs (next or previous business
        day) and use `cal` or a calendar built on it, at most
        limits.calendar_replan_jobs_max jobs read. A run a move placed
        comes back to its slot when its day is freed, or goes where the
        new calendar moves it; a `previous_business_day` run goes early.
        Apply moves each only if it is still as read here."""
        owner, at_ms = cal.owner, cal.updated_at_ms
        known = {c.name: c for c in self.store.list_calendars(owner, limits.calendars_per_owner_max, None)[0]}
        known[cal.name] = cal
        found: list[CalendarReplan] = []
        budget = limits.calendar_replan_jobs_max
        for name in _built_on(known, cal.name):
            view = fold(known[name], known.get, 0)
            for job_id in self.store.calendar_users(owner, name, budget):
                budget -= 1
                item = self._replan(job_id, view, at_ms)
                if item is not None:
                    found.append(item)
            if budget <= 0:
                break
        return tuple(found)

    def _replan(self, job_id: str, view: calendars.View, at_ms: int) -> CalendarReplan | None:
        use = self.store.calendar_use(job_id)
        if use is None or use.on_excluded == "skip":
            return None  # a skip is decided at the slot's claim, with the calendar as it is then
        job = self.store.get_job_any(job_id)
        if job is None or job.state != "active" or job.slot_ms is None:
            return None
        run = self.store.get_run_any(job_id, job.slot_ms)
        if run is None or run.status != "waiting" or run.attempt != 0 or run.buffered:
            return None
        to_ms = calendar_plan.placed_due(job, calendar_plan.Seen(use, view), job.slot_ms, run.due_ms, at_ms)
        if to_ms == run.due_ms or (to_ms <= at_ms and run.due_ms <= at_ms):
            return None  # where it is, or due already either way
        return CalendarReplan(job_id, job.slot_ms, run.due_ms, to_ms)

    def next_run_ms(self, job: Job, now_ms: int) -> int | None:
        """The job's `next_run_at`: when its next run happens under its
        calendar as it is now (docs/semantics.md "Calendars"), not the slot
        of a run the calendar will skip or move; without a calendar, the
        due time of its waiting slot run."""
        if job.state != "active" or job.next_run_at_ms is None:
            return job.next_run_at_ms
        seen = self.store.calendar_of(job)
        if seen is None:
            return job.next_run_at_ms
        # A run due ahead is decided as at its due time, whatever the time
        # now, so its answer holds until the job, its run or its owner's
        # calendars change: kept, since a walk over a weekend of minutes
        # moved onto slots of their own costs tens of milliseconds.
        key = (job.id, job.version, job.state, job.slot_ms, job.next_run_at_ms, seen[1].epoch, seen[0])
        if job.next_run_at_ms > now_ms and key in self._upcoming:
            return self._upcoming[key]
        found = calendar_plan.upcoming(job, calendar_plan.Seen(*seen), now_ms)
        if job.next_run_at_ms > now_ms:
            if len(self._upcoming) >= limits.calendar_view_cache_max:
                self._upcoming.clear()
            self._upcoming[key] = found
        return found

    def claim_note(self, job: Job, run: Run, now_ms: int) -> tuple[str, int | None, str] | None:
        """What the job's calendar, as it is now, will do with its waiting
        slot run at its claim: (`skip` or `move`, where it moves to, why);
        None when it runs where it waits (or is no slot run, or the job
        has no calendar)."""
        if run.status != "waiting" or job.state != "active" or job.slot_ms != run.nominal_ms or run.buffered:
            return None
        seen = self.store.calendar_of(job)
        if seen is None:
            return None
        at_ms = max(now_ms, run.due_ms)  # as the claim at its due time decides it
        claim = calendar_plan.at_claim(job, calendar_plan.Seen(*seen), run.nominal_ms, run.due_ms, at_ms).claim
        if claim.action == "run" or claim.why is None:
            return None
        return claim.action, claim.move_ms, claim.why

    def placed_due(
        self, job: Job, use: CalendarUse | None, slot_ms: int | None, due_ms: int | None, at_ms: int,
        current_ms: int | None = None,
    ) -> int | None:
        """The due time of the run a resume or a re-plan plants at `slot_ms`
        (`due_ms` without a calendar), placed by the job's calendar `use`:
        early with `previous_business_day`; `current_ms`: the due time of
        the run waiting at that slot already, if one does."""
        if use is None or use.on_excluded == "skip" or slot_ms is None or due_ms is None:
            return due_ms
        view = self.store.calendar_view(job.owner, use.name)
        if view is None:
            return due_ms
        seen = calendar_plan.Seen(use, view)
        return calendar_plan.placed_due(job, seen, slot_ms, due_ms if current_ms is None else current_ms, at_ms)

    async def submit(self, cal: Calendar, if_version: int | None, replans: tuple[CalendarReplan, ...] = ()) -> Calendar:
        """The calendar `record` made, proposed with the runs it re-plans; its outcome."""
        outcome = await self.committer.submit(PutCalendar(cal.updated_at_ms, cal, if_version, replans))
        if isinstance(outcome, errors.TempoError):
            raise outcome
        assert isinstance(outcome, Calendar)
        return outcome

    async def delete(self, owner: str, name: str, if_version: int | None) -> None:
        check_name(name)
        outcome = await self.committer.submit(DeleteCalendar(self.now_ms(), owner, name, if_version))
        if isinstance(outcome, errors.TempoError):
            raise outcome

    # -- a job's calendar ---------------------------------------------------------

    def use_of(self, owner: str, name: str | None, on_excluded: str | None, sched: Schedule) -> CalendarUse | None:
        """A job's calendar, checked: there, and with a repeating schedule."""
        if name is None:
            if on_excluded is not None:
                raise errors.Invalid.at("schedule.on_excluded", "only with a calendar")
            return None
        if not sched.repeating or is_after(sched):  # a dependent job's runs come from its parents, not a clock
            raise errors.Invalid.at("schedule.calendar", "only with cron or every_s")
        check_name(name, "schedule.calendar")
        if not self.store.calendar_exists(owner, name):
            raise errors.Invalid.at("schedule.calendar", f"no calendar {name!r}")
        mode: OnExcluded = "skip" if on_excluded is None else _mode(on_excluded, "schedule.on_excluded")
        return CalendarUse(name, mode)

    def new_job(self, job: Job, name: str | None, on_excluded: str | None, digest: bytes, at_ms: int) -> NewJob:
        """A new job's command item with its calendar, checked, and its
        first run due where the calendar puts it."""
        if name is None and on_excluded is None:
            return NewJob(job, job.next_run_at_ms, digest)
        use = self.use_of(job.owner, name, on_excluded, job.schedule)
        if use is not None:
            self.place_first(job, use, at_ms)
        return NewJob(job, job.next_run_at_ms, use_digest(digest, use), calendar=use)

    def place_first(self, job: Job, use: CalendarUse, at_ms: int) -> None:
        """A new job's first run, due where the calendar puts it."""
        view = self.store.calendar_view(job.owner, use.name)
        if view is None or job.slot_ms is None or job.next_run_at_ms is None:
            return
        found = plan.CatchUp(job.slot_ms, job.next_run_at_ms, [], None)
        job.next_run_at_ms = calendar_plan.planned(job, calendar_plan.Seen(use, view), found, at_ms).due_ms

    async def preview(
        self, owner: str, sched: Schedule, name: str, on_excluded: str | None, after_ms: int, count: int,
        *, include_excluded: bool, loc: str = "calendar",
    ) -> list[calendar_plan.Entry]:
        """A preview's entries under the calendar (named at `loc`), sorted:
        at most `count` runs, and with `include_excluded` the excluded slots
        among them."""
        check_name(name, loc)
        view = self.store.calendar_view(owner, name)
        if view is None:
            raise errors.Invalid.at(loc, f"no calendar {name!r}")
        use = CalendarUse(name, "skip" if on_excluded is None else _mode(on_excluded, "on_excluded"))
        found: list[calendar_plan.Entry] = []
        for part in calendar_plan.preview(sched, view, use, after_ms, count, include_excluded=include_excluded):
            found += part
            await trio.lowlevel.checkpoint()
        found.sort(key=lambda e: (e.at_ms, e.excluded))
        kept: list[calendar_plan.Entry] = []
        runs = 0
        for entry in found:
            if not entry.excluded:
                if runs == count:
                    break
                runs += 1
            kept.append(entry)
        return kept


def _built_on(known: dict[str, Calendar], name: str) -> list[str]:
    """`name` and the calendars of `known` whose base chain reaches it."""
    found = [name]
    for other, cal in known.items():
        at, depth = cal.base, 0
        while other != name and at is not None and depth <= limits.calendar_base_depth_max:
            if at == name:
                found.append(other)
                break
            below = known.get(at)
            at, depth = (None if below is None else below.base), depth + 1
    return found


def _mode(value: str, loc: str) -> OnExcluded:
    found = _ON_EXCLUDED.get(value)
    if found is None:
        raise errors.Invalid.at(loc, f"one of {', '.join(_ON_EXCLUDED)}")
    return found


def use_digest(digest: bytes, use: CalendarUse | None) -> bytes:
    """A create body's hash with its calendar (request keys)."""
    if use is None:
        return digest
    return hashlib.sha256(digest + f"\0{use.name}\0{use.on_excluded}".encode()).digest()

