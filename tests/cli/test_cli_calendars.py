"""`tempo calendars put|get|list|delete`, and `--calendar`/`--on-excluded`
on `jobs create`, `jobs update` and `preview` (docs/api.md "Calendars")."""

import json
from pathlib import Path

from .test_cli_update import tempo

ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//tempo tests//EN
BEGIN:VEVENT
UID:closed-1
DTSTART;VALUE=DATE:20271227
DTEND;VALUE=DATE:20271229
SUMMARY:Closed
END:VEVENT
BEGIN:VEVENT
UID:meeting
DTSTART:20271230T100000Z
DTEND:20271230T110000Z
SUMMARY:Not all day
END:VEVENT
END:VCALENDAR
"""


def test_calendars_from_flags_files_and_ics_then_jobs_and_preview(server, tmp_path: Path) -> None:
    dates = tmp_path / "dates.txt"
    dates.write_text("# closures\n2027-12-24\n\n2027-12-31\n")
    ics = tmp_path / "closed.ics"
    ics.write_text(ICS)
    cal = json.loads(tempo(
        "calendars", "put", "cli-work", "--timezone", "Europe/Berlin", "--exclude-weekdays", "sat,sun",
        "--holidays", "DE-BY", "--exclude-dates-file", str(dates), "--json", url=server.url,
    ).stdout)
    assert cal["holidays"]["subdivision"] == "BY" and cal["exclude_dates"] == ["2027-12-24", "2027-12-31"]
    closed = json.loads(tempo("calendars", "put", "cli-closed", "--timezone", "Europe/Berlin", "--ics", str(ics),
                              "--base", "cli-work", "--json", url=server.url).stdout)
    assert closed["exclude_dates"] == ["2027-12-27", "2027-12-28"] and closed["base"] == "cli-work"
    listed = tempo("calendars", "list", url=server.url).stdout
    assert "cli-closed" in listed and "cli-work" in listed and "DE-BY" in listed
    assert "Christmas Day" in tempo("calendars", "get", "cli-work", url=server.url).stdout

    shown = tempo("preview", "--cron", "0 18 * * 5", "--timezone", "Europe/Berlin", "--calendar", "cli-closed",
                  "--on-excluded", "next_business_day", "--after", "2027-12-20T00:00:00Z", "--count", "1",
                  "--include-excluded", url=server.url).stdout
    # Fri 24th -> Mon 27th and Tue 28th closed (the ics) -> Wed 29th.
    assert "2027-12-29T18:00" in shown and "2027-12-24T18:00:00" in shown and "exclude_dates" in shown

    job = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--cron", "0 18 L * *", "--timezone",
                           "Europe/Berlin", "--calendar", "cli-work", "--on-excluded", "previous_business_day",
                           "--json", url=server.url).stdout)
    assert job["schedule"]["calendar"] == "cli-work" and job["schedule"]["on_excluded"] == "previous_business_day"
    in_use = tempo("calendars", "delete", "cli-work", url=server.url, check=False)
    assert in_use.returncode == 1 and "in_use" in in_use.stderr
    changed = json.loads(tempo("jobs", "update", job["id"], "--calendar", "none", "--json", url=server.url).stdout)
    assert "calendar" not in changed["schedule"]
    tempo("calendars", "delete", "cli-closed", url=server.url)
    tempo("calendars", "delete", "cli-work", url=server.url)


def test_bad_input_names_the_flag(server) -> None:
    bad = tempo("calendars", "put", "cli-bad", "--timezone", "UTC", "--holidays", "XX", url=server.url, check=False)
    assert bad.returncode == 1 and "--holidays" in bad.stderr
    missing = tempo("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--calendar", "nope",
                    url=server.url, check=False)
    assert missing.returncode == 1 and "--calendar" in missing.stderr


def test_runs_get_shows_the_range_of_a_calendar_skip() -> None:
    from tempo.cli import run_record

    row = {"id": "r_1", "status": "skipped", "reason": "calendar", "missed_from": "a", "missed_until": "b",
           "count": 3, "error": "2027-12-24 excluded (exclude_dates)", "attempts": []}
    assert run_record(row)["count"] == 3 and run_record(row)["reason"] == "calendar"
    overlap = row | {"reason": "overlap", "missed_until": None, "count": None}
    assert "count" not in run_record(overlap)


def test_no_calendar_clears_it_and_get_prints_no_none(server, tmp_path: Path) -> None:
    tempo("calendars", "put", "cli-plain", "--timezone", "UTC", url=server.url)
    shown = tempo("calendars", "get", "cli-plain", url=server.url).stdout
    assert "None" not in shown and "base: -" in shown and "weekdays: -" in shown
    job = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--cron", "0 18 * * *", "--calendar",
                           "cli-plain", "--json", url=server.url).stdout)
    changed = json.loads(tempo("jobs", "update", job["id"], "--no-calendar", "--json", url=server.url).stdout)
    assert "calendar" not in changed["schedule"] and "on_excluded" not in changed["schedule"]
    dates = tmp_path / "dates.txt"
    dates.write_text("2027-12-24\nbogus\n")
    bad = tempo("calendars", "put", "cli-plain", "--timezone", "UTC", "--exclude-dates-file", str(dates),
                url=server.url, check=False)
    assert bad.returncode == 2 and "line 2: 'bogus' is not a date" in bad.stderr, bad.stderr
