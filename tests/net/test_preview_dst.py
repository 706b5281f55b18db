"""`POST /v1/schedules/preview` and `POST /v1/jobs` against a real server: a
cron schedule's DST policy on the transition days of Berlin, New York and
Lord Howe; `occurrences` beside `times`; every instant in years 1 to 9999."""

from __future__ import annotations

import pytest

from conftest import job_body


def preview(http, schedule: dict, after: str, count: int) -> dict:
    r = http.post("/v1/schedules/preview", json={"schedule": schedule, "after": after, "count": count})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["times"] == [o["at"] for o in body["occurrences"]]
    return body


def problem_locs(r) -> list[str]:
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return [e["loc"] for e in r.json()["errors"]]


def occ(at: str, local: str, offset: str, dst: str | None) -> dict:
    return {"at": at, "local": local, "offset": offset, "dst": dst}


BERLIN_SPRING = {"cron": "30 2 * * *", "timezone": "Europe/Berlin"}
BERLIN_FALL = {"cron": "*/30 2 * * *", "timezone": "Europe/Berlin"}
NEW_YORK_SPRING = {"cron": "30 2 * * *", "timezone": "America/New_York"}
NEW_YORK_FALL = {"cron": "30 1 * * *", "timezone": "America/New_York"}
LORD_HOWE_SPRING = {"cron": "15 2 * * *", "timezone": "Australia/Lord_Howe"}
LORD_HOWE_FALL = {"cron": "45 1 * * *", "timezone": "Australia/Lord_Howe"}

CASES = [
    # Berlin, 28 March 2027: 02:00 CET -> 03:00 CEST; 02:30 does not exist.
    (BERLIN_SPRING, {}, "2027-03-27T12:00:00Z", [
        occ("2027-03-28T01:00:00.000Z", "2027-03-28T03:00:00.000", "+02:00", "gap_shifted"),
        occ("2027-03-29T00:30:00.000Z", "2027-03-29T02:30:00.000", "+02:00", None),
    ]),
    (BERLIN_SPRING, {"gap": "skip"}, "2027-03-27T12:00:00Z", [
        occ("2027-03-29T00:30:00.000Z", "2027-03-29T02:30:00.000", "+02:00", None),
        occ("2027-03-30T00:30:00.000Z", "2027-03-30T02:30:00.000", "+02:00", None),
    ]),
    # Berlin, 31 October 2027: 03:00 CEST -> 02:00 CET; 02:00 and 02:30 twice.
    (BERLIN_FALL, {}, "2027-10-30T23:00:00Z", [
        occ("2027-10-31T00:00:00.000Z", "2027-10-31T02:00:00.000", "+02:00", "repeat_first"),
        occ("2027-10-31T00:30:00.000Z", "2027-10-31T02:30:00.000", "+02:00", "repeat_first"),
        occ("2027-11-01T01:00:00.000Z", "2027-11-01T02:00:00.000", "+01:00", None),
    ]),
    (BERLIN_FALL, {"repeat": "last"}, "2027-10-30T23:00:00Z", [
        occ("2027-10-31T01:00:00.000Z", "2027-10-31T02:00:00.000", "+01:00", "repeat_second"),
        occ("2027-10-31T01:30:00.000Z", "2027-10-31T02:30:00.000", "+01:00", "repeat_second"),
        occ("2027-11-01T01:00:00.000Z", "2027-11-01T02:00:00.000", "+01:00", None),
    ]),
    (BERLIN_FALL, {"gap": "skip", "repeat": "both"}, "2027-10-30T23:00:00Z", [
        occ("2027-10-31T00:00:00.000Z", "2027-10-31T02:00:00.000", "+02:00", "repeat_first"),
        occ("2027-10-31T00:30:00.000Z", "2027-10-31T02:30:00.000", "+02:00", "repeat_first"),
        occ("2027-10-31T01:00:00.000Z", "2027-10-31T02:00:00.000", "+01:00", "repeat_second"),
        occ("2027-10-31T01:30:00.000Z", "2027-10-31T02:30:00.000", "+01:00", "repeat_second"),
        occ("2027-11-01T01:00:00.000Z", "2027-11-01T02:00:00.000", "+01:00", None),
    ]),
    # New York, 14 March 2027: 02:00 EST -> 03:00 EDT.
    (NEW_YORK_SPRING, {"gap": "shift"}, "2027-03-13T12:00:00Z", [
        occ("2027-03-14T07:00:00.000Z", "2027-03-14T03:00:00.000", "-04:00", "gap_shifted"),
        occ("2027-03-15T06:30:00.000Z", "2027-03-15T02:30:00.000", "-04:00", None),
    ]),
    (NEW_YORK_SPRING, {"gap": "skip"}, "2027-03-13T12:00:00Z", [
        occ("2027-03-15T06:30:00.000Z", "2027-03-15T02:30:00.000", "-04:00", None),
    ]),
    # New York, 7 November 2027: 02:00 EDT -> 01:00 EST; 01:30 twice.
    (NEW_YORK_FALL, {"repeat": "first"}, "2027-11-06T12:00:00Z", [
        occ("2027-11-07T05:30:00.000Z", "2027-11-07T01:30:00.000", "-04:00", "repeat_first"),
        occ("2027-11-08T06:30:00.000Z", "2027-11-08T01:30:00.000", "-05:00", None),
    ]),
    (NEW_YORK_FALL, {"repeat": "last"}, "2027-11-06T12:00:00Z", [
        occ("2027-11-07T06:30:00.000Z", "2027-11-07T01:30:00.000", "-05:00", "repeat_second"),
        occ("2027-11-08T06:30:00.000Z", "2027-11-08T01:30:00.000", "-05:00", None),
    ]),
    (NEW_YORK_FALL, {"repeat": "both"}, "2027-11-06T12:00:00Z", [
        occ("2027-11-07T05:30:00.000Z", "2027-11-07T01:30:00.000", "-04:00", "repeat_first"),
        occ("2027-11-07T06:30:00.000Z", "2027-11-07T01:30:00.000", "-05:00", "repeat_second"),
    ]),
    # Lord Howe, 3 October 2027: 02:00 +10:30 -> 02:30 +11:00, a half-hour gap.
    (LORD_HOWE_SPRING, {}, "2027-10-02T12:00:00Z", [
        occ("2027-10-02T15:30:00.000Z", "2027-10-03T02:30:00.000", "+11:00", "gap_shifted"),
        occ("2027-10-03T15:15:00.000Z", "2027-10-04T02:15:00.000", "+11:00", None),
    ]),
    (LORD_HOWE_SPRING, {"gap": "skip"}, "2027-10-02T12:00:00Z", [
        occ("2027-10-03T15:15:00.000Z", "2027-10-04T02:15:00.000", "+11:00", None),
    ]),
    # Lord Howe, 4 April 2027: 02:00 +11:00 -> 01:30 +10:30; 01:45 twice.
    (LORD_HOWE_FALL, {}, "2027-04-03T12:00:00Z", [
        occ("2027-04-03T14:45:00.000Z", "2027-04-04T01:45:00.000", "+11:00", "repeat_first"),
        occ("2027-04-04T15:15:00.000Z", "2027-04-05T01:45:00.000", "+10:30", None),
    ]),
    (LORD_HOWE_FALL, {"gap": "skip", "repeat": "last"}, "2027-04-03T12:00:00Z", [
        occ("2027-04-03T15:15:00.000Z", "2027-04-04T01:45:00.000", "+10:30", "repeat_second"),
        occ("2027-04-04T15:15:00.000Z", "2027-04-05T01:45:00.000", "+10:30", None),
    ]),
    (LORD_HOWE_FALL, {"repeat": "both"}, "2027-04-03T12:00:00Z", [
        occ("2027-04-03T14:45:00.000Z", "2027-04-04T01:45:00.000", "+11:00", "repeat_first"),
        occ("2027-04-03T15:15:00.000Z", "2027-04-04T01:45:00.000", "+10:30", "repeat_second"),
        occ("2027-04-04T15:15:00.000Z", "2027-04-05T01:45:00.000", "+10:30", None),
    ]),
]


@pytest.mark.parametrize(("schedule", "dst", "after", "expected"), CASES)
def test_preview_on_transition_days(http, schedule, dst, after, expected):
    body = preview(http, {**schedule, "dst": dst}, after, len(expected))
    assert body["occurrences"] == expected


def test_a_job_carries_its_dst_policy(http):
    dst = {"gap": "skip", "repeat": "both"}
    r = http.post("/v1/jobs", json=job_body(schedule={**NEW_YORK_FALL, "dst": dst}))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["schedule"] == {**NEW_YORK_FALL, "dst": dst}
    assert http.get(f"/v1/jobs/{job['id']}").json()["schedule"]["dst"] == dst
    # The default policy is not shown: such a schedule reads as it always did.
    for given in ({}, {"dst": {}}, {"dst": {"gap": "shift", "repeat": "first"}}):
        r = http.post("/v1/jobs", json=job_body(schedule={"cron": "0 * * * *", **given}))
        assert r.json()["schedule"] == {"cron": "0 * * * *", "timezone": "UTC"}
    r = http.post("/v1/jobs", json=job_body(schedule={"cron": "0 * * * *", "dst": {"repeat": "last"}}))
    assert r.json()["schedule"]["dst"] == {"gap": "shift", "repeat": "last"}
    r = http.post("/v1/jobs", json=job_body(schedule={"every_s": 60}))
    assert "dst" not in r.json()["schedule"]


def test_every_and_at_previews_are_in_utc(http):
    body = preview(http, {"every_s": 90}, "2030-01-01T00:00:00Z", 2)
    assert body["occurrences"] == [
        occ("2030-01-01T00:01:30.000Z", "2030-01-01T00:01:30.000", "+00:00", None),
        occ("2030-01-01T00:03:00.000Z", "2030-01-01T00:03:00.000", "+00:00", None),
    ]


@pytest.mark.parametrize(
    ("schedule", "loc"),
    [
        ({"every_s": 60, "dst": {}}, "schedule.dst"),
        ({"at": "2030-01-01T00:00:00Z", "dst": {"gap": "skip"}}, "schedule.dst"),
        ({"cron": "0 * * * *", "dst": {"gap": "forward"}}, "schedule.dst.gap"),
        ({"cron": "0 * * * *", "dst": {"repeat": "none"}}, "schedule.dst.repeat"),
        ({"cron": "0 * * * *", "dst": {"repeat": "first", "extra": 1}}, "schedule.dst.extra"),
        ({"cron": "0 * * * *", "dst": "skip"}, "schedule.dst"),
    ],
)
def test_a_bad_dst_policy_is_400_naming_the_field(http, schedule, loc):
    r = http.post("/v1/schedules/preview", json={"schedule": schedule})
    assert loc in problem_locs(r)
    r = http.post("/v1/jobs", json=job_body(schedule=schedule))
    assert loc in problem_locs(r)


# -- every instant in years 1 to 9999 -------------------------------------------------


def test_an_every_preview_stops_at_the_end_of_9999(http):
    longest = 10 * 366 * 86400
    assert preview(http, {"every_s": longest}, "9999-06-01T00:00:00Z", 3)["times"] == []
    times = preview(http, {"every_s": 86400}, "9999-12-29T00:00:00Z", 10)["times"]
    assert times == ["9999-12-30T00:00:00.000Z", "9999-12-31T00:00:00.000Z"]
    start = {"every_s": 3600, "start_at": "9999-12-31T21:30:00Z"}
    assert preview(http, start, "9999-12-31T00:00:00Z", 10)["times"] == [
        "9999-12-31T21:30:00.000Z", "9999-12-31T22:30:00.000Z", "9999-12-31T23:30:00.000Z",
    ]


def test_a_cron_preview_stops_at_the_end_of_9999_in_utc(http):
    # 23:00 in New York on 31 December 9999 is 04:00 UTC in year 10000.
    body = preview(http, {"cron": "0 23 * * *", "timezone": "America/New_York"}, "9999-12-30T00:00:00Z", 5)
    assert body["times"] == ["9999-12-30T04:00:00.000Z", "9999-12-31T04:00:00.000Z"]
    assert body["occurrences"][-1]["local"] == "9999-12-30T23:00:00.000"


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"schedule": {"every_s": 60, "start_at": "0001-01-01T00:00:00+01:00"}}, "schedule.start_at"),
        ({"schedule": {"every_s": 60, "start_at": "9999-12-31T23:30:00-01:00"}}, "schedule.start_at"),
        ({"schedule": {"at": "9999-12-31T23:30:00-01:00"}}, "schedule.at"),
        ({"schedule": {"every_s": 60}, "after": "0001-01-01T00:00:00+01:00"}, "after"),
        ({"schedule": {"cron": "0 * * * *"}, "after": "9999-12-31T23:59:00-00:01"}, "after"),
    ],
)
def test_instants_outside_years_1_to_9999_are_400(http, body, loc):
    r = http.post("/v1/schedules/preview", json=body)
    assert loc in problem_locs(r)
    if "after" not in body:
        r = http.post("/v1/jobs", json=job_body(schedule=body["schedule"]))
        assert loc in problem_locs(r)


def test_the_first_instants_of_year_1_are_fine_as_after(http):
    # `after` is stored nowhere: it keeps years 1 to 9999 (docs/api.md "Times").
    times = preview(http, {"every_s": 60}, "0001-01-01T00:00:00Z", 2)["times"]
    assert times == ["0001-01-01T00:01:00.000Z", "0001-01-01T00:02:00.000Z"]
    times = preview(http, {"every_s": 60, "start_at": "1970-01-01T00:00:00Z"}, "0001-01-01T00:00:00Z", 2)["times"]
    assert times == ["1970-01-01T00:00:00.000Z", "1970-01-01T00:01:00.000Z"]


def test_a_previewed_start_at_before_1970_is_400_as_in_a_create(http):
    body = {"schedule": {"every_s": 60, "start_at": "0001-01-01T00:00:00Z"}, "after": "0001-01-01T00:00:00Z"}
    assert problem_locs(http.post("/v1/schedules/preview", json=body)) == ["schedule.start_at"]


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:30:00-01:00"])
def test_a_runs_filter_outside_years_1_to_9999_is_400(http, value):
    r = http.post("/v1/jobs", json=job_body())
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    for name in ("since", "until"):
        r = http.get(f"/v1/jobs/{job_id}/runs", params={name: value})
        assert f"query.{name}" in problem_locs(r)
    assert http.get(f"/v1/jobs/{job_id}/runs", params={"since": "0001-01-01T00:00:00Z"}).status_code == 200
