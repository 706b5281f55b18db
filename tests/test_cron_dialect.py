"""The cron dialect of crontab(5), as Vixie and Debian cron read it
(docs/semantics.md "The cron dialect"), field by field."""

from __future__ import annotations

import datetime as dt

import pytest

from tempo.schedule import CronRule, ScheduleError, validate_cron


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()) * 1000


def days(expr: str, after: str = "2027-01-01T00:00:00Z", count: int = 12) -> list[str]:
    """The dates of the next `count` occurrences in UTC, as `MM-DD Ddd`."""
    out = []
    for t in CronRule(expr, "UTC").times_ms(ms(after), count):
        d = dt.datetime.fromtimestamp(t // 1000, dt.UTC)
        out.append(d.strftime("%m-%d %a"))
    return out


def weekdays(expr: str) -> set[str]:
    return {d.split()[1] for d in days(expr, count=28)}


# -- the day rule ----------------------------------------------------------------


def test_a_star_step_day_of_week_ands_with_the_day_of_month():
    # `*/1` starts with `*`: a day must match both fields, so the 1st only.
    assert days("0 0 1 * */1", count=3) == ["02-01 Mon", "03-01 Mon", "04-01 Thu"]


def test_a_star_step_day_of_month_ands_with_the_day_of_week():
    # Mondays that are day 1, 8, 15, 22 or 29 (2027: 1 Feb, 8 Feb, 1 Mar, 8 Mar, 15 Mar, ...).
    got = days("0 0 */7 * 1", count=6)
    assert got == ["02-01 Mon", "02-08 Mon", "02-15 Mon", "02-22 Mon", "03-01 Mon", "03-08 Mon"]
    assert all(int(d[3:5]) in (1, 8, 15, 22, 29) for d in days("0 0 */7 * 1", count=40))


def test_both_fields_restricted_or_together():
    # Neither starts with `*`: the 1st of each month, and every Monday.
    got = days("0 0 1 * 1", after="2027-02-01T00:00:00Z", count=6)
    assert got == ["02-08 Mon", "02-15 Mon", "02-22 Mon", "03-01 Mon", "03-08 Mon", "03-15 Mon"]
    assert "01-01 Fri" in days("0 0 1 * 1", after="2026-12-31T00:00:00Z", count=2)


def test_plain_stars_and_one_restricted_field():
    assert weekdays("0 0 * * 1") == {"Mon"}
    assert days("0 0 13 * *", count=2) == ["01-13 Wed", "02-13 Sat"]


# -- day of week ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("7/1", {"Sun"}),  # 7 to 7
        ("5/1", {"Fri", "Sat", "Sun"}),  # 5 to 7, as 5-7
        ("5-7", {"Fri", "Sat", "Sun"}),
        ("1/2", {"Mon", "Wed", "Fri", "Sun"}),  # 1, 3, 5, 7
        ("0/2", {"Sun", "Tue", "Thu", "Sat"}),
        ("*/2", {"Sun", "Tue", "Thu", "Sat"}),  # * is 0-7: 0, 2, 4, 6
        ("*/7", {"Sun"}),  # 0 and 7
        ("0", {"Sun"}),
        ("7", {"Sun"}),
        ("0-7", {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}),
        ("mon-fri", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
        ("SAT,sun", {"Sat", "Sun"}),
        ("Fri-Sun", None),  # 5 to 0: a range backwards
        ("wed/3", {"Wed", "Sat"}),  # 3 to 7 in steps of 3: 3, 6
    ],
)
def test_day_of_week_field(field, expected):
    expr = f"0 0 * * {field}"
    if expected is None:
        with pytest.raises(ScheduleError):
            validate_cron(expr, "UTC")
        return
    assert weekdays(expr) == expected


# -- steps, ranges, names in the other fields ---------------------------------------


def test_value_with_a_step_runs_to_the_field_maximum():
    hours = [dt.datetime.fromtimestamp(t // 1000, dt.UTC).hour
             for t in CronRule("0 20/2 * * *", "UTC").times_ms(ms("2027-01-01T00:00:00Z"), 4)]
    assert hours == [20, 22, 20, 22]
    minutes = [dt.datetime.fromtimestamp(t // 1000, dt.UTC).minute
               for t in CronRule("50/4 0 * * *", "UTC").times_ms(ms("2027-01-01T00:00:00Z"), 3)]
    assert minutes == [50, 54, 58]
    assert days("0 0 28/2 2 *", after="2028-01-01T00:00:00Z", count=1) == ["02-28 Mon"]
    assert [d[:2] for d in days("0 0 1 10/1 *", count=3)] == ["10", "11", "12"]


def test_range_with_a_step_and_lists():
    got = [dt.datetime.fromtimestamp(t // 1000, dt.UTC).minute
           for t in CronRule("1-10/3,30 0 * * *", "UTC").times_ms(ms("2027-01-01T00:00:00Z"), 5)]
    assert got == [1, 4, 7, 10, 30]


@pytest.mark.parametrize("month", ["jan", "JAN", "Jan", "1", "jan-jan", "01"])
def test_month_names_are_case_insensitive(month):
    assert days(f"0 0 1 {month} *", after="2026-12-31T00:00:00Z", count=2) == ["01-01 Fri", "01-01 Sat"]


def test_month_names_and_ranges():
    assert [d[:2] for d in days("0 0 1 nov-dec,FEB *", count=3)] == ["02", "11", "12"]


# -- macros -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("macro", "same_as"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_macros_are_their_expressions(macro, same_as):
    after_ms = ms("2027-03-01T10:17:00Z")
    assert CronRule(macro, "Europe/Berlin").times_ms(after_ms, 5) == CronRule(
        same_as, "Europe/Berlin"
    ).times_ms(after_ms, 5)


# -- what is rejected, naming the construct ---------------------------------------------


@pytest.mark.parametrize(
    ("expr", "word"),
    [
        ("@reboot", "@reboot"),
        ("0 0 LW * *", "L"),
        ("0 0 15W * *", "W"),
        ("0 0 * * 5L", "L"),
        ("0 0 * * L5", "L"),
        ("0 0 * * 1#2", "#"),
        ("0 0 ? * 1", "?"),
        ("0 0 1 * ?", "?"),
        ("R 0 * * *", "R"),
        ("H 0 * * *", "H"),
        ("0 H(0-3) * * *", "H"),
        ("0 0 * * 8", "day-of-week"),
        ("0 0 * * 1-8", "day-of-week"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day-of-month"),
        ("* * 32 * *", "day-of-month"),
        ("* * * 13 *", "month"),
        ("* * * 0 *", "month"),
        ("5-1 * * * *", "minute"),
        ("*/0 * * * *", "minute"),
        ("1/0 * * * *", "minute"),
        ("1-/2 * * * *", "minute"),
        ("1,,2 * * * *", "minute"),
        ("* * * jan-foo *", "month"),
        ("* * * * monday", "day-of-week"),
        ("* * jan * *", "day-of-month"),  # names only in their own field
        ("* * * mon *", "month"),
        ("1.5 * * * *", "minute"),
        ("+1 * * * *", "minute"),
        ("*/99999999999999999999 * * * *", "minute"),
    ],
)
def test_rejected_naming_the_construct(expr, word):
    with pytest.raises(ScheduleError) as info:
        validate_cron(expr, "UTC")
    assert info.value.loc == "cron"
    assert word in info.value.msg, info.value.msg


# -- `L`, the last day of the month (docs/semantics.md "The cron dialect") ---------


def test_l_is_the_last_day_of_each_month_leap_february_too():
    after_ms = int(dt.datetime(2027, 12, 30, tzinfo=dt.UTC).timestamp() * 1000)

    def days(expr: str) -> list[str]:
        return [dt.datetime.fromtimestamp(t / 1000, dt.UTC).date().isoformat() for t in CronRule(expr, "UTC").times_ms(after_ms, 3)]

    assert days("0 0 L * *") == ["2027-12-31", "2028-01-31", "2028-02-29"]
    assert days("0 0 1,L 2 *") == [
        "2028-02-01", "2028-02-29", "2029-02-01",
    ]


@pytest.mark.parametrize("expr", ["0 0 LW * *", "0 0 L-2 * *", "0 0 * * L", "0 0 * * 5L"])
def test_the_other_l_forms_are_refused_at_cron(expr):
    with pytest.raises(ScheduleError) as caught:
        validate_cron(expr, "UTC")
    assert caught.value.loc == "cron" and "`L` alone" in caught.value.msg
