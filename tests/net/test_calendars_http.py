"""Calendars over HTTP against one real `tempo serve` shared by the module
(docs/api.md "Calendars", docs/semantics.md "Calendars"). Dates far from
today are checked through the preview, which plans with the same code as
the claims (tests/engine/test_calendars.py claims them); what needs the
real clock is a calendar edit that skips a run already waiting."""

import datetime as dt
import time
from collections.abc import Iterator

import holidays
import httpx
import pytest

from conftest import Server, as_token, configured_server, tokens_config, wait_for

pytestmark = pytest.mark.process

TOKENS = {
    "acme-client": ("acme", "client", None),
    "acme-worker": ("acme", "worker", ["cal-live"]),
    "globex-client": ("globex", "client", None),
}
WORK = {"timezone": "Europe/Berlin", "exclude_weekdays": ["sat", "sun"], "exclude_dates": ["2027-12-24"],
        "holidays": {"country": "DE", "subdivision": "BY"}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with configured_server(tmp_path_factory.mktemp("cal"), tokens_config(TOKENS)) as s:
        yield s


@pytest.fixture(scope="module")
def acme(srv: Server) -> Iterator[httpx.Client]:
    with as_token(srv, "acme-client") as client:
        assert client.put("/v1/calendars/work", json=WORK).status_code in (200, 201)
        yield client


def preview(http: httpx.Client, cron: str, on_excluded: str, after: str, count: int, **extra: object) -> list[dict]:
    body = {"schedule": {"cron": cron, "timezone": "Europe/Berlin"}, "after": after, "count": count,
            "calendar": "work", "on_excluded": on_excluded, **extra}
    r = http.post("/v1/schedules/preview", json=body)
    assert r.status_code == 200, r.text
    return r.json()["occurrences"]


def test_put_get_list_and_versions(acme):
    r = acme.get("/v1/calendars/work")
    assert r.status_code == 200 and r.headers["etag"] == '"1"'
    cal = r.json()
    assert cal["holidays"]["library_version"] == holidays.__version__
    assert {"date": "2027-12-25", "name": "Christmas Day"} in cal["holidays"]["dates"]
    assert cal["exclude_weekdays"] == ["sat", "sun"] and cal["exclude_dates"] == ["2027-12-24"]
    assert acme.put("/v1/calendars/work", json=WORK, headers={"if-match": '"7"'}).status_code == 412
    for name in ("a1", "a2", "a3"):
        assert acme.put(f"/v1/calendars/{name}", json={"timezone": "UTC"}).status_code == 201
    page = acme.get("/v1/calendars", params={"limit": 2}).json()
    assert [c["name"] for c in page["calendars"]] == ["a1", "a2"] and page["next_cursor"] == "a2"
    rest = acme.get("/v1/calendars", params={"cursor": page["next_cursor"]}).json()
    assert [c["name"] for c in rest["calendars"]] == ["a3", "work"] and rest["next_cursor"] is None


@pytest.mark.parametrize(("body", "loc"), [
    ({"timezone": "UTC", "holidays": {"country": "XX"}}, "holidays.country"),
    ({"timezone": "UTC", "holidays": {"country": "DE", "subdivision": "ZZ"}}, "holidays.subdivision"),
    ({"timezone": "UTC", "exclude_dates": ["2027-02-30"]}, "exclude_dates[0]"),
    ({"timezone": "UTC", "exclude_weekdays": ["xyz"]}, "exclude_weekdays[0]"),
    ({"timezone": "UTC", "base": "missing"}, "base"),
])
def test_bad_input_is_400_at_the_field(acme, body, loc):
    r = acme.put("/v1/calendars/bad", json=body)
    assert r.status_code == 400 and r.json()["errors"][0]["loc"] == loc, r.text


def test_around_christmas_skip_next_and_previous(acme):
    after = "2027-12-20T00:00:00Z"
    skip = preview(acme, "0 18 * * *", "skip", after, 4, include_excluded=True)
    assert [(o["local"][:10], o.get("excluded")) for o in skip[:7]] == [
        ("2027-12-20", False), ("2027-12-21", False), ("2027-12-22", False), ("2027-12-23", False),
        ("2027-12-24", True), ("2027-12-25", True), ("2027-12-26", True),
    ][: len(skip[:7])]
    assert skip[5]["calendar"]["reason"] == "2027-12-25 excluded (Christmas Day)"
    nxt = preview(acme, "0 18 * * 5", "next_business_day", after, 1)
    assert nxt[0]["local"].startswith("2027-12-27T18:00")
    assert nxt[0]["calendar"] == {"moved_from": "2027-12-24T18:00:00", "reason": "2027-12-24 excluded (exclude_dates)"}
    prev = preview(acme, "0 18 * * 5", "previous_business_day", after, 1)
    assert prev[0]["local"].startswith("2027-12-23T18:00") and prev[0]["calendar"]["moved_from"] == "2027-12-24T18:00:00"


def test_easter_and_a_weekend(acme):
    # Easter Monday 2027 is March 29th, Good Friday the 26th (from the library).
    nxt = preview(acme, "0 9 * * 1", "next_business_day", "2027-03-28T00:00:00Z", 1)
    assert nxt[0]["local"].startswith("2027-03-30T09:00") and "Easter Monday" in nxt[0]["calendar"]["reason"]
    prev = preview(acme, "0 9 * * 1", "previous_business_day", "2027-03-22T12:00:00Z", 1)
    assert prev[0]["local"].startswith("2027-03-25T09:00")  # Thursday: Good Friday is out too
    weekend = preview(acme, "0 9 * * 6", "next_business_day", "2027-05-01T12:00:00Z", 1)
    assert weekend[0]["local"].startswith("2027-05-10T09:00")  # Sat 8th -> Monday 10th
    assert weekend[0]["calendar"]["reason"] == "2027-05-08 excluded (weekday sat)"


def test_a_move_across_the_dst_change_in_berlin(acme):
    [moved] = preview(acme, "0 18 * * 5", "next_business_day", "2027-03-20T00:00:00Z", 1)
    assert moved["at"] == "2027-03-30T16:00:00.000Z" and moved["offset"] == "+02:00"  # was 17:00Z in CET
    assert moved["calendar"]["moved_from"] == "2027-03-26T18:00:00"


def test_last_business_day_of_the_month_over_24_months(acme):
    got = preview(acme, "0 18 L * *", "previous_business_day", "2027-01-01T00:00:00Z", 24)
    known = holidays.country_holidays("DE", subdiv="BY", years=range(2027, 2030))
    expected = []
    for n in range(24):
        year, month = 2027 + n // 12, n % 12 + 1
        day = (dt.date(year + month // 12, month % 12 + 1, 1) - dt.timedelta(days=1))
        while day.weekday() >= 5 or day in known or day == dt.date(2027, 12, 24):
            day -= dt.timedelta(days=1)
        expected.append(day.isoformat())
    assert [o["local"][:10] for o in got] == expected


def test_a_calendar_edit_skips_a_run_already_waiting(srv, acme):
    assert acme.put("/v1/calendars/live", json={"timezone": "UTC"}).status_code == 201
    r = acme.post("/v1/jobs", json={"target": "queue:cal-live", "schedule": {"every_s": 2, "calendar": "live"}})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["schedule"]["calendar"] == "live" and job["schedule"]["on_excluded"] == "skip"
    today = dt.datetime.now(dt.UTC).date()
    days = [(today + dt.timedelta(days=n)).isoformat() for n in range(2)]
    assert acme.put("/v1/calendars/live", json={"timezone": "UTC", "exclude_dates": days}).status_code == 200
    time.sleep(2.5)  # the waiting run falls due
    with as_token(srv, "acme-worker") as worker:
        claimed = worker.post("/v1/claim", json={"worker": "w", "queues": ["cal-live"], "max_runs": 10, "wait_s": 0})
        assert claimed.status_code == 200 and claimed.json()["runs"] == [], claimed.text

    def skipped() -> list[dict]:
        runs = acme.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
        return [run for run in runs if run["status"] == "skipped"]

    [row] = wait_for(skipped)
    assert row["reason"] == "calendar" and f"{days[0]} excluded (exclude_dates)" in row["error"]
    assert acme.get(f"/v1/jobs/{job['id']}").json()["next_run_at"] >= f"{(today + dt.timedelta(days=2)).isoformat()}"


def test_delete_in_use_is_409_naming_the_job(acme):
    assert acme.put("/v1/calendars/used", json={"timezone": "UTC"}).status_code == 201
    job = acme.post("/v1/jobs", json={"target": "queue:q", "schedule": {"cron": "0 9 * * *", "calendar": "used"}}).json()
    r = acme.delete("/v1/calendars/used")
    assert r.status_code == 409 and r.json()["type"] == "in_use" and job["id"] in r.text
    assert acme.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert acme.delete("/v1/calendars/used").status_code == 204
    assert acme.get("/v1/calendars/used").status_code == 404


def test_another_owners_calendar_is_404(srv, acme):
    with as_token(srv, "globex-client") as globex:
        assert globex.get("/v1/calendars/work").status_code == 404
        assert globex.delete("/v1/calendars/work").status_code == 404
        assert globex.get("/v1/calendars").json()["calendars"] == []
        r = globex.post("/v1/jobs", json={"target": "queue:q", "schedule": {"cron": "0 9 * * *", "calendar": "work"}})
        assert r.status_code == 400 and r.json()["errors"][0]["loc"] == "schedule.calendar"


def test_a_dependent_job_takes_no_calendar(acme):
    """A dependent job's runs come from its parents' ends, not from a clock,
    so a calendar has no slot to leave out: 400 at the field, at create and
    at a patch that makes a calendar job dependent."""
    parent = acme.post("/v1/jobs", json={"target": "queue:q", "schedule": {"at": "2030-01-01T00:00:00Z"}}).json()
    after = {"after": {"jobs": [parent["id"]]}}
    r = acme.post("/v1/jobs", json={"target": "queue:q", "schedule": {**after, "calendar": "work"}})
    assert r.status_code == 400 and r.json()["errors"][0]["loc"] == "schedule.calendar", r.text
    job = acme.post("/v1/jobs", json={"target": "queue:q", "schedule": {"cron": "0 9 * * *", "calendar": "work"}}).json()
    r = acme.patch(f"/v1/jobs/{job['id']}", json={"schedule": {"cron": None, **after}})
    assert r.status_code == 200, r.text
    assert "calendar" not in r.json()["schedule"] or r.json()["schedule"]["calendar"] is None


def test_next_run_at_is_the_first_run_the_calendar_lets_happen(acme):
    """Today and tomorrow excluded: a daily job's `next_run_at` is the day
    after, not today's or tomorrow's slot that its claim would skip."""
    today = dt.datetime.now(dt.UTC).date()
    days = [(today + dt.timedelta(days=n)).isoformat() for n in range(2)]
    assert acme.put("/v1/calendars/shut", json={"timezone": "UTC", "exclude_dates": days}).status_code == 201
    for on_excluded in ("skip", "next_business_day", "previous_business_day"):
        sched = {"cron": "0 12 * * *", "calendar": "shut", "on_excluded": on_excluded}
        r = acme.post("/v1/jobs", json={"target": "queue:q", "schedule": sched})
        assert r.status_code == 201, r.text
        after = (today + dt.timedelta(days=2)).isoformat()
        assert r.json()["next_run_at"] == f"{after}T12:00:00.000Z", on_excluded
        listed = acme.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]
        assert [j["next_run_at"] for j in listed if j["id"] == r.json()["id"]] == [f"{after}T12:00:00.000Z"]
        [waiting] = [run for run in acme.get(f"/v1/jobs/{r.json()['id']}/runs").json()["runs"] if run["status"] == "waiting"]
        assert waiting["calendar"]["action"] == "skip" and "excluded (exclude_dates)" in waiting["calendar"]["reason"]


def test_a_batch_create_shows_each_jobs_calendar_as_a_single_create_does(acme):
    """A batch item's job view is a single create's: its calendar, its
    `on_excluded`, and `next_run_at` as the calendar places it."""
    today = dt.datetime.now(dt.UTC).date()
    days = [(today + dt.timedelta(days=n)).isoformat() for n in range(2)]
    assert acme.put("/v1/calendars/shut2", json={"timezone": "UTC", "exclude_dates": days}).status_code == 201
    sched = {"cron": "0 12 * * *", "calendar": "shut2", "on_excluded": "skip"}
    r = acme.post("/v1/jobs/batch", json={"jobs": [{"target": "queue:q", "schedule": sched},
                                                    {"target": "queue:q", "schedule": {"cron": "0 12 * * *"}}]})
    assert r.status_code == 200, r.text
    [with_cal, without] = [item["job"] for item in r.json()["results"]]
    single = acme.get(f"/v1/jobs/{with_cal['id']}").json()
    assert with_cal["schedule"] == single["schedule"] and with_cal["schedule"]["calendar"] == "shut2"
    assert with_cal["next_run_at"] == single["next_run_at"] == f"{(today + dt.timedelta(days=2)).isoformat()}T12:00:00.000Z"
    assert "calendar" not in without["schedule"] and "on_excluded" not in without["schedule"]


def test_patch_calendar_null_alone_clears_it(acme):
    job = acme.post("/v1/jobs", json={"target": "queue:q", "schedule": {"cron": "0 9 * * *", "calendar": "work"}}).json()
    r = acme.patch(f"/v1/jobs/{job['id']}", json={"schedule": {"calendar": None}},
                   headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    assert "calendar" not in r.json()["schedule"] and "on_excluded" not in r.json()["schedule"]


@pytest.mark.parametrize(("body", "loc"), [
    ({"schedule": {"cron": "0 0 * * *", "calendar": "nope"}}, "schedule.calendar"),
    ({"schedule": {"cron": "0 0 * * *"}, "calendar": "nope"}, "calendar"),
    ({"schedule": {"every_s": 3600, "on_excluded": "skip"}}, "schedule.on_excluded"),
    ({"schedule": {"every_s": 3600}, "on_excluded": "next_business_day"}, "on_excluded"),
    ({"schedule": {"cron": "0 0 * * *", "calendar": "work"}, "calendar": "work"}, "calendar"),
    ({"schedule": {"cron": "0 0 * * *"}, "include_excluded": True}, "include_excluded"),
])
def test_preview_checks_its_calendar_as_a_create_does(acme, body, loc):
    r = acme.post("/v1/schedules/preview", json=body)
    assert r.status_code == 400 and r.json()["errors"][0]["loc"] == loc, r.text


def test_bad_weekdays_countries_and_if_match_say_what_is_wrong(acme):
    r = acme.put("/v1/calendars/x", json={"timezone": "UTC", "exclude_weekdays": ["mon", "funday"]})
    assert r.status_code == 400 and "'funday' is not a weekday: one of mon" in r.text, r.text
    r = acme.put("/v1/calendars/x", json={"timezone": "UTC", "holidays": {"country": "DE-XX"}})
    assert r.status_code == 400 and '"subdivision\\": \\"XX\\"' in r.text, r.text
    r = acme.put("/v1/calendars/work", json=WORK, headers={"if-match": "2"})
    assert r.status_code == 400 and "the calendar's version" in r.text, r.text


def test_a_calendar_edit_brings_a_moved_run_back(srv, acme):
    """A run moved two days on (today and tomorrow excluded) is due at once
    when the edit frees its day: the `PUT` re-plans it, with no claim."""
    today = dt.datetime.now(dt.UTC).date()
    days = [(today + dt.timedelta(days=n)).isoformat() for n in range(2)]
    assert acme.put("/v1/calendars/mv", json={"timezone": "UTC", "exclude_dates": days}).status_code == 201
    start = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    sched = {"every_s": 3599, "start_at": start, "calendar": "mv", "on_excluded": "next_business_day"}
    job = acme.post("/v1/jobs", json={"target": "queue:cal-live", "schedule": sched}).json()

    def waiting() -> dict:
        [run] = [r for r in acme.get(f"/v1/jobs/{job['id']}/runs").json()["runs"] if r["status"] == "waiting"]
        return run

    time.sleep(1.5)  # its slot falls due: the claim moves it, handing out nothing
    with as_token(srv, "acme-worker") as worker:
        claimed = worker.post("/v1/claim", json={"worker": "w", "queues": ["cal-live"], "max_runs": 10, "wait_s": 0})
        assert claimed.status_code == 200 and claimed.json()["runs"] == [], claimed.text
    moved = wait_for(lambda: (run := waiting())["due_at"] > run["nominal_at"] and run)
    assert moved["due_at"][:10] == days[1] or moved["due_at"][:10] > days[1]
    assert acme.put("/v1/calendars/mv", json={"timezone": "UTC"}).status_code == 200
    back = waiting()
    assert back["nominal_at"] == moved["nominal_at"] and back["due_at"] < moved["due_at"][:10]
    assert acme.get(f"/v1/jobs/{job['id']}").json()["next_run_at"] == back["due_at"]
    assert acme.delete(f"/v1/jobs/{job['id']}").status_code == 204


def test_a_job_whose_every_slot_its_calendar_excludes_shows_no_next_run(acme: httpx.Client) -> None:
    # Each skip hands on past a whole range of excluded slots: the view
    # looks a bounded number of steps ahead, and shows no slot it has not
    # checked (api.md: "a slot the calendar skips is not shown").
    assert acme.put("/v1/calendars/no-tuesdays", json={"timezone": "Europe/Berlin", "exclude_weekdays": ["tue"]}
                    ).status_code in (200, 201)
    body = {"target": "queue:cal-never", "schedule": {"cron": "0 14 * * 2", "timezone": "Europe/Berlin",
                                                         "calendar": "no-tuesdays"}}
    job = acme.post("/v1/jobs", json=body).json()
    assert job["next_run_at"] is None, job["next_run_at"]
    assert acme.get(f"/v1/jobs/{job['id']}").json()["next_run_at"] is None
