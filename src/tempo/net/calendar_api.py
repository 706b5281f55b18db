"""The calendars' handlers and views (docs/api.md "Calendars"), mixed into
`net/api.py`'s `Api`; their routes are `net/routes.py`'s calendar group.
A calendar is its owner's: another owner's is `404`, as a job is."""

import datetime as dt
from collections.abc import Callable

import trio

from tempo import calendars, clock, errors, limits
from tempo.engine import (
    CALENDAR_NAME,
    Calendar,
    CalendarEntry,
    Jobs,
    Store,
    instant_ms,
    schedule_record,
)
from tempo.net import views
from tempo.net.asgi import Request, Response, decode, decoders, encode
from tempo.net.handlers import page_limit
from tempo.schema import (
    CalendarIn,
    CalendarNoteOut,
    CalendarOut,
    CalendarsPage,
    HolidayOut,
    HolidaysOut,
    OccurrenceOut,
    PreviewIn,
    PreviewOut,
)

_calendar_in = decoders(CalendarIn)


def calendar_view(cal: Calendar) -> CalendarOut:
    holidays = None
    if cal.holidays is not None:
        h = cal.holidays
        dates = [HolidayOut(_date(day), name) for day, name in zip(h.days, h.names, strict=True)]
        holidays = HolidaysOut(h.country, h.subdivision, h.library_version, h.from_year, h.until_year, dates)
    return CalendarOut(
        cal.name, cal.timezone, [_date(day) for day in cal.exclude_dates],
        [calendars.WEEKDAYS[d] for d in cal.exclude_weekdays], holidays, cal.base, cal.version,
        clock.iso_from_ms(cal.created_at_ms), clock.iso_from_ms(cal.updated_at_ms),
    )


def _date(day: int) -> str:
    return dt.date.fromordinal(day).isoformat()


class CalendarHandlers:
    """`PUT`, `GET`, `DELETE /v1/calendars/{name}`, `GET /v1/calendars`,
    and a preview under a calendar."""

    store: Store
    jobs: Jobs
    owner: Callable[[Request], str]
    if_match: Callable[[Request, str], set[int] | None]

    def _one_version(self, request: Request) -> int | None:
        """The version `If-Match` names (0: `PUT` only if there is none);
        None without the header, or with `*`."""
        wanted = self.if_match(request, "calendar")
        if wanted is None:
            return None
        if len(wanted) != 1:
            raise errors.Invalid.at("header.if-match", "one version, as the calendar's ETag gives it")
        return next(iter(wanted))

    async def put_calendar(self, request: Request, name: str) -> Response:
        body = decode(request, _calendar_in)
        owner = self.owner(request)
        existed = self.store.calendar_exists(owner, name)
        if_version = self._one_version(request)
        # Checked off the event loop: 10,000 dates parsed and a country's
        # holidays resolved take milliseconds (the first, the library's load).
        service = self.jobs.calendars
        made = await trio.to_thread.run_sync(service.record, owner, name, body, self.jobs.now_ms())
        # The waiting runs the new calendar places elsewhere, read off the loop too.
        replans = await trio.to_thread.run_sync(service.replans, made)
        cal = await service.submit(made, if_version, replans)
        response = encode(request, calendar_view(cal), 200 if existed else 201)
        response.headers.append((b"etag", f'"{cal.version}"'.encode()))
        return response

    async def get_calendar(self, request: Request, name: str) -> Response:
        cal = self.store.get_calendar(self.owner(request), name)
        response = encode(request, calendar_view(cal))
        response.headers.append((b"etag", f'"{cal.version}"'.encode()))
        return response

    async def list_calendars(self, request: Request) -> Response:
        limit = page_limit(request)
        cursor = request.query.get("cursor") or None
        if cursor is not None and not CALENDAR_NAME.fullmatch(cursor):
            raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
        found, next_cursor = self.store.list_calendars(self.owner(request), limit, cursor)
        return encode(request, CalendarsPage([calendar_view(c) for c in found], next_cursor))

    async def delete_calendar(self, request: Request, name: str) -> Response:
        await self.jobs.calendars.delete(self.owner(request), name, self._one_version(request))
        return Response(204, b"", b"application/json")

    async def calendar_preview(self, request: Request, body: PreviewIn, name: str, loc: str, now_ms: int) -> Response:
        """A preview under a calendar (named at `loc`): each entry says
        whether it was moved and why; with `include_excluded`, the slots
        left out too."""
        sched = schedule_record(body.schedule)
        if not sched.repeating:
            raise errors.Invalid.at(loc, "only with cron or every_s")
        after_ms = now_ms if body.after is None else instant_ms(body.after, "after")
        on_excluded = body.on_excluded or body.schedule.on_excluded
        entries = await self.jobs.calendars.preview(
            self.owner(request), sched, name, on_excluded, after_ms, body.count,
            include_excluded=body.include_excluded, loc=loc,
        )
        timezone = sched.timezone or "UTC"
        view = self.store.calendar_view(self.owner(request), name)
        assert view is not None
        occurrences: list[OccurrenceOut] = []
        for start in range(0, len(entries), limits.preview_slice_times):
            if start:
                await trio.lowlevel.checkpoint()
            occurrences += [_occurrence(e, timezone, view.timezone) for e in entries[start : start + limits.preview_slice_times]]
        return encode(request, PreviewOut([o.at for o in occurrences if not o.excluded], occurrences))


def preview_calendar(body: PreviewIn) -> tuple[str | None, str]:
    """The calendar a preview names and where (docs/api.md "POST
    /v1/schedules/preview"): in the schedule, as a job's, or at the top of
    the body, an alias; naming it (or `on_excluded`) in both is `400`, and
    so are `on_excluded` and `include_excluded` without a calendar, as a
    create refuses `on_excluded` without one."""
    sched = body.schedule
    for field, top, inner in (("calendar", body.calendar, sched.calendar), ("on_excluded", body.on_excluded, sched.on_excluded)):
        if top is not None and inner is not None:
            why = f"give it once: schedule.{field} (as a job's) or {field} at the top of the body, not both"
            raise errors.Invalid(f"{field}: {why}", [(field, why), (f"schedule.{field}", why)])
    if sched.calendar is not None:
        return sched.calendar, "schedule.calendar"
    if body.calendar is not None:
        return body.calendar, "calendar"
    if sched.on_excluded is not None:
        raise errors.Invalid.at("schedule.on_excluded", "only with a calendar")
    if body.on_excluded is not None:
        raise errors.Invalid.at("on_excluded", "only with a calendar")
    if body.include_excluded:
        raise errors.Invalid.at("include_excluded", "only with a calendar")
    return None, "calendar"


def _occurrence(entry: CalendarEntry, timezone: str, calendar_timezone: str) -> OccurrenceOut:
    [found] = views.occurrence_views([(entry.at_ms, entry.dst[1])], timezone)
    note = None
    if entry.why is not None:
        moved_from = None
        if entry.moved_from_ms is not None:
            moved_from = calendars.local_text(calendar_timezone, entry.moved_from_ms)
        note = CalendarNoteOut(entry.why, moved_from)
    found.calendar = note
    found.excluded = entry.excluded
    return found

