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
from tempo.engine.commands import DeleteCalendar, NewJob, PutCalendar
from tempo.engine.records import Calendar, CalendarUse, Holidays, Job, OnExcluded, Schedule
from tempo.engine.rules.deps import is_after
from tempo.engine.store import Store

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
            raise errors.Invalid.at(f"{loc}[{i}]", f"{name!r} is not one of {', '.join(calendars.WEEKDAYS)}")
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
        raise errors.Invalid.at("holidays.country", f"{spec.country!r} is not a country the holidays library knows")
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


class Calendars:
    def __init__(self, store: Store, committer: CommandLog, now_ms: Callable[[], int]):
        self.store = store
        self.committer = committer
        self.now_ms = now_ms

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
        return await self.submit(self.record(owner, name, body, at_ms), if_version)

    async def submit(self, cal: Calendar, if_version: int | None) -> Calendar:
        """The calendar `record` made, proposed; its outcome."""
        outcome = await self.committer.submit(PutCalendar(cal.updated_at_ms, cal, if_version))
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
        *, include_excluded: bool,
    ) -> list[calendar_plan.Entry]:
        """A preview's entries under the calendar, sorted: at most `count`
        runs, and with `include_excluded` the excluded slots among them."""
        check_name(name, "calendar")
        view = self.store.calendar_view(owner, name)
        if view is None:
            raise errors.Invalid.at("calendar", f"no calendar {name!r}")
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

