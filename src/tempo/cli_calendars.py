"""`tempo calendars put|get|list|delete` and the calendar flags of `jobs
create`, `jobs update` and `preview` (docs/api.md "Calendars"). An
iCalendar file's all-day events become dates with the `icalendar`
package, never read by hand."""

import argparse
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from tempo.net.client import Client

CALENDAR_FLAGS = {
    "name": "NAME", "timezone": "--timezone", "exclude_dates": "--exclude-dates-file/--ics",
    "exclude_weekdays": "--exclude-weekdays", "holidays": "--holidays", "holidays.country": "--holidays",
    "holidays.subdivision": "--holidays", "base": "--base", "header.if-match": "--if-version",
}
# The job's and the preview's calendar fields, by the flags that set them.
SCHEDULE_CALENDAR_FLAGS = {
    "schedule.calendar": "--calendar", "schedule.on_excluded": "--on-excluded",
    "calendar": "--calendar", "on_excluded": "--on-excluded", "include_excluded": "--include-excluded",
}
ON_EXCLUDED = ("skip", "next_business_day", "previous_business_day")
COLUMNS = ("name", "timezone", "version", "base", "dates", "weekdays", "holidays")


class CalendarUsage(Exception):
    """A command line that cannot be sent (the caller exits 2)."""


def add_schedule_flags(group: argparse._ArgumentGroup, *, removable: bool = False) -> None:
    """`--calendar` and `--on-excluded`, on a schedule's flags."""
    removes = "; none (or --no-calendar) removes it" if removable else ""
    group.add_argument("--calendar", metavar="NAME",
                       help=f"with --cron or --every-s: leave out (or move) the slots on the days this calendar "
                            f"of yours excludes{removes}")
    if removable:
        group.add_argument("--no-calendar", dest="no_calendar", action="store_true",
                           help="the job uses no calendar any more (its --on-excluded goes with it)")
    group.add_argument("--on-excluded", dest="on_excluded", choices=ON_EXCLUDED,
                       help="with --calendar: skip such a slot (the default), or run it at the same wall time on "
                            "the next or the previous business day")


def schedule_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The schedule's `calendar` and `on_excluded` from the flags (`none`: null)."""
    fields: dict[str, Any] = {}
    calendar = getattr(args, "calendar", None)
    if getattr(args, "no_calendar", False):
        if calendar is not None or getattr(args, "on_excluded", None) is not None:
            raise CalendarUsage("--no-calendar: not with --calendar or --on-excluded")
        return {"calendar": None}  # its on_excluded goes with it (docs/api.md "Change a job")
    if calendar is not None:
        fields["calendar"] = None if calendar == "none" else calendar
        if calendar == "none":
            fields["on_excluded"] = None
    if getattr(args, "on_excluded", None) is not None:
        fields["on_excluded"] = args.on_excluded
    return fields


def _dates_file(path: str) -> list[str]:
    """One date (YYYY-MM-DD) a line; blank lines and `#` comments skipped.
    A line that is not a date is named by its number, before anything is sent."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.split("#", 1)[0].strip() for line in f]
    except OSError as exc:
        raise CalendarUsage(f"--exclude-dates-file: {exc}") from None
    for number, line in enumerate(lines, 1):
        try:
            if line:
                dt.date.fromisoformat(line if len(line) == 10 else "x")
        except ValueError:
            raise CalendarUsage(f"--exclude-dates-file: {path}, line {number}: {line!r} is not a date YYYY-MM-DD") from None
    return [line for line in lines if line]


def ics_dates(path: str) -> list[str]:
    """The dates of an iCalendar file's all-day events (a `DTSTART` that is
    a date, each day up to its `DTEND`, exclusive), read with `icalendar`."""
    import icalendar

    try:
        with open(path, "rb") as f:
            cal = icalendar.Calendar.from_ical(f.read())
    except (OSError, ValueError) as exc:
        raise CalendarUsage(f"--ics: {exc}") from None
    found: set[str] = set()
    for event in cal.walk("VEVENT"):
        start = event.get("DTSTART")
        if start is None or isinstance(start.dt, dt.datetime):
            continue  # not an all-day event
        end = event.get("DTEND")
        last = start.dt if end is None or isinstance(end.dt, dt.datetime) else end.dt - dt.timedelta(days=1)
        day = start.dt
        while day <= last and len(found) <= 100_000:
            found.add(day.isoformat())
            day += dt.timedelta(days=1)
    return sorted(found)


def put_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"timezone": args.timezone}
    dates: list[str] = []
    if args.exclude_dates_file is not None:
        dates += _dates_file(args.exclude_dates_file)
    if args.ics is not None:
        dates += ics_dates(args.ics)
    if dates:
        body["exclude_dates"] = sorted(set(dates))
    if args.exclude_weekdays is not None:
        body["exclude_weekdays"] = [d.strip() for d in args.exclude_weekdays.split(",") if d.strip()]
    if args.holidays is not None:
        country, _, subdivision = args.holidays.partition("-")
        body["holidays"] = {"country": country} | ({"subdivision": subdivision} if subdivision else {})
    if args.base is not None:
        body["base"] = args.base
    return body


def run(
    args: argparse.Namespace, client: Client, show: Callable[[str], None], table: Callable[..., str]
) -> int:
    """One `tempo calendars` action; prints its answer."""
    headers = {} if getattr(args, "if_version", None) is None else {"if-match": f'"{args.if_version}"'}
    if args.action == "delete":
        client.request("DELETE", f"/v1/calendars/{args.name}", headers=headers)
        return 0
    if args.action == "list":
        answer = client.request("GET", "/v1/calendars", params={"limit": args.limit, "cursor": args.cursor})
        rows = [_row(c) for c in answer["calendars"]]
        show(json.dumps(answer, indent=2) if args.json else table(rows, COLUMNS))
        if not args.json and answer.get("next_cursor"):
            show(f"next: --cursor {answer['next_cursor']}")
        return 0
    if args.action == "put":
        answer = client.request("PUT", f"/v1/calendars/{args.name}", put_body(args), headers=headers)
    else:
        answer = client.request("GET", f"/v1/calendars/{args.name}")
    show(json.dumps(answer, indent=2) if args.json else _text(answer))
    return 0


def _row(cal: dict[str, Any]) -> dict[str, Any]:
    holidays = cal.get("holidays")
    where = None
    if holidays:
        where = holidays["country"] + (f"-{holidays['subdivision']}" if holidays.get("subdivision") else "")
    return {"name": cal["name"], "timezone": cal["timezone"], "version": cal["version"], "base": cal["base"],
            "dates": len(cal["exclude_dates"]), "weekdays": ",".join(cal["exclude_weekdays"]) or None, "holidays": where}


def _text(cal: dict[str, Any]) -> str:
    lines = [f"{k}: {'-' if v in (None, '') else v}" for k, v in _row(cal).items()]
    holidays = cal.get("holidays")
    if holidays:
        lines.append(f"holidays resolved: {holidays['from_year']}-{holidays['until_year']} "
                     f"(holidays {holidays['library_version']}), {len(holidays['dates'])} dates")
        lines += [f"  {h['date']}  {h['name']}" for h in holidays["dates"][:20]]
        if len(holidays["dates"]) > 20:
            lines.append(f"  ... {len(holidays['dates']) - 20} more (--json shows all)")
    if cal["exclude_dates"]:
        shown = ", ".join(cal["exclude_dates"][:10]) + (" ..." if len(cal["exclude_dates"]) > 10 else "")
        lines.append(f"exclude_dates: {shown}")
    return "\n".join(lines)


def add_parser(
    sub: "argparse._SubParsersAction[argparse.ArgumentParser]",
    subparser: Callable[..., argparse.ArgumentParser], global_flags: Callable[[argparse.ArgumentParser], None],
) -> None:
    cals = subparser(sub, "calendars", "days your schedules leave out or move from: weekends, holidays, dates",
                     "tempo calendars put work --timezone Europe/Berlin --exclude-weekdays sat,sun --holidays DE-BY",
                     "tempo jobs create --target queue:pay --cron '0 18 L * *' --calendar work "
                     "--on-excluded previous_business_day")
    actions = cals.add_subparsers(dest="action", required=True, metavar="ACTION")
    put = subparser(actions, "put", "create or replace a calendar (holidays are resolved to dates now)",
                    "tempo calendars put work --timezone Europe/Berlin --exclude-weekdays sat,sun --holidays DE-BY",
                    "tempo calendars put closures --timezone Europe/Berlin --ics closures.ics --base work")
    put.add_argument("name", help="a-z 0-9 . _ -, at most 63")
    put.add_argument("--timezone", required=True, help="IANA time zone of the dates, e.g. Europe/Berlin")
    put.add_argument("--exclude-dates-file", dest="exclude_dates_file", metavar="FILE",
                     help="a file of dates to leave out, YYYY-MM-DD, one a line (# comments)")
    put.add_argument("--exclude-weekdays", dest="exclude_weekdays", metavar="DAYS", help="e.g. sat,sun")
    put.add_argument("--holidays", metavar="CC[-SUB]",
                     help="a country's public holidays, and a region's: DE, DE-BY, US-CA")
    put.add_argument("--base", metavar="NAME", help="another calendar of yours whose days are added")
    put.add_argument("--ics", metavar="FILE", help="an iCalendar file: its all-day events' dates are left out")
    put.add_argument("--if-version", dest="if_version", type=int, metavar="N",
                     help="only if the calendar is at version N (0: only if there is none yet)")
    for name, help in (("get", "show a calendar, with its resolved holidays"), ("delete", "delete a calendar no job uses")):
        one = subparser(actions, name, help, f"tempo calendars {name} work")
        one.add_argument("name", help="the calendar's name")
        if name == "delete":
            one.add_argument("--if-version", dest="if_version", type=int, metavar="N",
                             help="only if the calendar is at version N")
    listing = subparser(actions, "list", "your calendars, by name", "tempo calendars list")
    listing.add_argument("--limit", type=int, help="calendars per page (default 100)")
    listing.add_argument("--cursor", help="the next_cursor of the page before")
    for parser in (cals, put, listing, *(actions.choices[n] for n in ("get", "delete"))):
        parser.set_defaults(flags=CALENDAR_FLAGS)
        global_flags(parser)
