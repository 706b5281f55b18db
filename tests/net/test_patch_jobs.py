"""`PATCH /v1/jobs/{id}`: a job changed in place (docs/api.md "Change a
job", docs/semantics.md "Changing a job"), against a real `tempo serve`."""

from datetime import UTC, datetime, timedelta

import httpx
import msgspec
import pytest

from conftest import job_body, unique

MERGE = {"content-type": "application/merge-patch+json"}


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def _create(http: httpx.Client, **overrides) -> dict:
    answer = http.post("/v1/jobs", json=job_body(**overrides))
    assert answer.status_code == 201, answer.text
    return answer.json()


def _patch(http: httpx.Client, job_id: str, body: object, **headers: str) -> httpx.Response:
    return http.patch(f"/v1/jobs/{job_id}", json=body, headers=MERGE | headers)


def _runs(http: httpx.Client, job_id: str) -> list[dict]:
    return http.get(f"/v1/jobs/{job_id}/runs").json()["runs"]


def test_a_new_job_has_version_1_and_its_etag(http: httpx.Client) -> None:
    answer = http.post("/v1/jobs", json=job_body())
    assert answer.json()["version"] == 1
    assert answer.headers["etag"] == '"1"'
    got = http.get(f"/v1/jobs/{answer.json()['id']}")
    assert got.headers["etag"] == '"1"'


@pytest.mark.parametrize(
    ("patch", "field", "shown"),
    [
        ({"name": "renamed"}, "name", "renamed"),
        ({"target": "queue:other"}, "target", "queue:other"),
        ({"payload": {"b": 2}}, "payload", {"b": 2}),
        ({"retry": {"max_attempts": 2}}, "retry", {"max_attempts": 2, "backoff_s": [10, 60, 600]}),
        ({"lease_s": 120}, "lease_s", 120),
        ({"jitter_s": 5}, "jitter_s", 5),
        ({"schedule": {"at": None, "every_s": 3600}}, "schedule", {"every_s": 3600}),
    ],
)
def test_each_mutable_field_changes(http: httpx.Client, patch: dict, field: str, shown: object) -> None:
    job = _create(http, payload={"a": 1}, name="before")
    answer = _patch(http, job["id"], patch)
    assert answer.status_code == 200, answer.text
    assert answer.json()[field] == shown
    assert answer.json()["version"] == 2
    assert answer.headers["etag"] == '"2"'
    assert http.get(f"/v1/jobs/{job['id']}").json()[field] == shown


def test_null_resets_a_field_to_its_default(http: httpx.Client) -> None:
    job = _create(http, name="x", lease_s=300)
    answer = _patch(http, job["id"], {"name": None, "lease_s": None})
    assert (answer.json()["name"], answer.json()["lease_s"]) == (None, 60)


def test_plain_json_is_accepted_too(http: httpx.Client) -> None:
    job = _create(http)
    answer = http.patch(f"/v1/jobs/{job['id']}", json={"name": "n"})
    assert answer.status_code == 200 and answer.json()["name"] == "n"


def test_if_match_mismatch_is_412_and_changes_nothing(http: httpx.Client) -> None:
    job = _create(http, name="keep")
    answer = _patch(http, job["id"], {"name": "lost"}, **{"if-match": '"7"'})
    assert answer.status_code == 412
    assert answer.json()["type"] == "version_mismatch"
    after = http.get(f"/v1/jobs/{job['id']}").json()
    assert (after["name"], after["version"]) == ("keep", 1)


def test_if_match_that_matches_applies(http: httpx.Client) -> None:
    job = _create(http)
    assert _patch(http, job["id"], {"name": "a"}, **{"if-match": '"1"'}).status_code == 200
    assert _patch(http, job["id"], {"name": "b"}, **{"if-match": '"1"'}).status_code == 412
    answer = _patch(http, job["id"], {"name": "b"}, **{"if-match": '"2"'})
    assert answer.status_code == 200 and answer.json()["version"] == 3


def test_the_waiting_run_is_replanned_at_once(http: httpx.Client) -> None:
    job = _create(http, schedule={"cron": "0 0 1 1 *"})
    before = job["next_run_at"]
    answer = _patch(http, job["id"], {"schedule": {"cron": None, "every_s": 60}})
    now = datetime.now(UTC)
    after = datetime.fromisoformat(answer.json()["next_run_at"])
    assert answer.json()["next_run_at"] != before
    assert now < after <= now + timedelta(seconds=61)
    waiting = [r for r in _runs(http, job["id"]) if r["status"] == "waiting"]
    assert [r["due_at"] for r in waiting] == [answer.json()["next_run_at"]]


def test_history_is_kept_and_an_event_is_recorded(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"})
    claimed = http.post("/v1/claim", json={"worker": "w", "queues": [queue]}).json()["runs"]
    assert len(claimed) == 1
    http.post(f"/v1/runs/{claimed[0]['id']}/result", json={"attempt": 1, "ok": True})
    assert http.get(f"/v1/jobs/{job['id']}").json()["state"] == "completed"
    events_before = http.get("/v1/events", params={"limit": 1000}).json()
    future = _iso(datetime.now(UTC) + timedelta(hours=1))
    answer = _patch(http, job["id"], {"schedule": {"at": future}})
    assert answer.json()["state"] == "active"
    assert answer.json()["next_run_at"] == future
    runs = _runs(http, job["id"])
    assert {r["status"] for r in runs} == {"done", "waiting"}
    events = http.get("/v1/events", params={"after": events_before["next_cursor"]}).json()["events"]
    updated = [e for e in events if e["type"] == "job.updated" and e["job_id"] == job["id"]]
    assert [e["detail"] for e in updated] == [{"old_version": 1, "new_version": 2, "changed": ["schedule"]}]


def test_a_completed_one_off_with_a_past_at_stays_completed(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"})
    run = http.post("/v1/claim", json={"worker": "w", "queues": [queue]}).json()["runs"][0]
    http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True})
    answer = _patch(http, job["id"], {"schedule": {"at": "2021-01-01T00:00:00Z"}})
    assert answer.json()["state"] == "completed"


def test_a_claimed_run_goes_on(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"}, lease_s=100)
    claimed = http.post("/v1/claim", json={"worker": "w", "queues": [queue]}).json()["runs"]
    assert len(claimed) == 1
    run = claimed[0]
    future = _iso(datetime.now(UTC) + timedelta(hours=1))
    answer = _patch(http, job["id"], {"target": "queue:elsewhere", "schedule": {"at": future}, "lease_s": 5})
    assert answer.status_code == 200
    assert answer.json()["next_run_at"] == future
    now = http.get(f"/v1/runs/{run['id']}").json()
    assert (now["status"], now["attempt"]) == ("claimed", 1)
    # The lease it was claimed with (100 s), not the new 5 s; the view's
    # expiry is converted from the leader's monotonic clock, to a ms or so.
    moved = datetime.fromisoformat(now["lease_expires_at"]) - datetime.fromisoformat(run["lease_expires_at"])
    assert abs(moved) <= timedelta(milliseconds=50)
    done = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": True})
    assert done.status_code == 200 and done.json()["status"] == "done"
    after = http.get(f"/v1/jobs/{job['id']}").json()
    assert (after["state"], after["next_run_at"]) == ("active", future)


def test_a_changed_target_is_claimed_from_the_new_queue(http: httpx.Client) -> None:
    old, new = unique("q"), unique("q")
    job = _create(http, target=f"queue:{old}", schedule={"at": "2020-01-01T00:00:00Z"})
    _patch(http, job["id"], {"target": f"queue:{new}"})
    assert http.post("/v1/claim", json={"worker": "w", "queues": [old]}).json()["runs"] == []
    runs = http.post("/v1/claim", json={"worker": "w", "queues": [new]}).json()["runs"]
    assert [r["job_id"] for r in runs] == [job["id"]]
    assert runs[0]["target"] == f"queue:{new}"


def test_a_paused_job_stays_paused(http: httpx.Client) -> None:
    job = _create(http, schedule={"every_s": 60})
    http.post(f"/v1/jobs/{job['id']}/pause")
    answer = _patch(http, job["id"], {"schedule": {"every_s": 120}, "name": "p"})
    assert (answer.json()["state"], answer.json()["next_run_at"]) == ("paused", None)
    assert [r for r in _runs(http, job["id"]) if r["status"] == "waiting"] == []
    resumed = http.post(f"/v1/jobs/{job['id']}/resume")
    assert resumed.json()["state"] == "active" and resumed.headers["etag"] == '"2"'


@pytest.mark.parametrize(
    ("patch", "loc"),
    [
        ({"id": "j_x"}, "id"),
        ({"owner": "x"}, "owner"),
        ({"state": "paused"}, "state"),
        ({"request_key": "k"}, "request_key"),
        ({"version": 3}, "version"),
        ({"overlap": "skip"}, "overlap"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_immutable_and_unknown_fields_are_400(http: httpx.Client, patch: dict, loc: str) -> None:
    job = _create(http)
    answer = _patch(http, job["id"], patch)
    assert answer.status_code == 400
    assert [e["loc"] for e in answer.json()["errors"]] == [loc]
    assert http.get(f"/v1/jobs/{job['id']}").json()["version"] == 1


@pytest.mark.parametrize(
    ("patch", "loc"),
    [
        ({"schedule": {"at": None, "cron": "nope"}}, "schedule.cron"),
        ({"schedule": {"at": None, "every_s": 60, "timezone": "UTC"}}, "schedule.timezone"),
        ({"schedule": None}, "schedule"),
        ({"target": None}, "target"),
        ({"target": "ftp://x"}, "target"),
        ({"lease_s": 0}, "lease_s"),
        ({"retry": {"backoff_s": []}}, "retry.backoff_s"),
    ],
)
def test_an_invalid_result_is_400_at_the_field(http: httpx.Client, patch: dict, loc: str) -> None:
    job = _create(http)
    answer = _patch(http, job["id"], patch)
    assert answer.status_code == 400, answer.text
    assert [e["loc"] for e in answer.json()["errors"]] == [loc]


def test_a_body_that_is_not_an_object_is_400(http: httpx.Client) -> None:
    job = _create(http)
    assert _patch(http, job["id"], [1]).status_code == 400


def test_an_unknown_job_is_404(http: httpx.Client) -> None:
    assert _patch(http, "j_01JEXAMPLEEXAMPLEEXAMPLE00", {"name": "x"}).status_code == 404


def test_a_patch_that_changes_nothing_keeps_the_version(http: httpx.Client) -> None:
    job = _create(http, name="same")
    for body in ({}, {"name": "same"}):
        answer = _patch(http, job["id"], body)
        assert answer.status_code == 200 and answer.json()["version"] == 1 and answer.headers["etag"] == '"1"'


def test_a_messagepack_patch_is_read_alike_and_refuses_binary_payloads(http: httpx.Client) -> None:
    job = _create(http)
    packed = {"content-type": "application/msgpack", "accept": "application/json"}
    answer = http.patch(f"/v1/jobs/{job['id']}", content=msgspec.msgpack.encode({"name": "mp"}), headers=packed)
    assert answer.status_code == 200 and answer.json()["name"] == "mp"
    binary = http.patch(f"/v1/jobs/{job['id']}", content=msgspec.msgpack.encode({"payload": b"\x00"}), headers=packed)
    assert binary.status_code == 400
    assert [e["loc"] for e in binary.json()["errors"]] == ["payload"]


def test_a_weak_or_listed_if_match_and_a_star(http: httpx.Client) -> None:
    job = _create(http)
    assert _patch(http, job["id"], {"name": "a"}, **{"if-match": 'W/"1", "9"'}).status_code == 200
    assert _patch(http, job["id"], {"name": "b"}, **{"if-match": "*"}).json()["version"] == 3
    assert _patch(http, job["id"], {"name": "c"}, **{"if-match": "3"}).status_code == 400  # not a quoted tag


def test_a_catchup_policy_is_kept_and_checked_with_the_new_schedule(http: httpx.Client) -> None:
    job = _create(http, schedule={"every_s": 60}, catchup={"policy": "none"})
    kept = _patch(http, job["id"], {"schedule": {"every_s": None, "cron": "0 * * * *"}})
    assert kept.status_code == 200 and kept.json()["catchup"]["policy"] == "none"
    one_off = _patch(http, job["id"], {"schedule": {"cron": None, "at": "2030-01-01T00:00:00Z"}})
    assert one_off.status_code == 400
    assert [e["loc"] for e in one_off.json()["errors"]] == ["catchup"]


def test_a_claimed_attempt_ends_by_the_retry_policy_it_was_claimed_with(http: httpx.Client) -> None:
    queue = unique("q")
    job = _create(http, target=f"queue:{queue}", schedule={"at": "2020-01-01T00:00:00Z"},
                  retry={"max_attempts": 3, "backoff_s": [0]})
    [run] = http.post("/v1/claim", json={"worker": "w", "queues": [queue]}).json()["runs"]
    # One attempt, no retry, from now on; the claimed attempt had 3, backoff 0.
    assert _patch(http, job["id"], {"retry": {"max_attempts": 1, "backoff_s": [3600]}}).status_code == 200
    ended = http.post(f"/v1/runs/{run['id']}/result", json={"attempt": 1, "ok": False, "error": "x"}).json()
    assert ended["status"] == "waiting"
    assert datetime.fromisoformat(ended["due_at"]) < datetime.now(UTC) + timedelta(seconds=60)
    # The retry is claimed under the job's policy as it is now: its failure is final.
    [again] = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 5}).json()["runs"]
    final = http.post(f"/v1/runs/{again['id']}/result", json={"attempt": 2, "ok": False, "error": "x"}).json()
    assert final["status"] == "failed"


# -- `schedule` merges key by key (RFC 7396; docs/api.md "Change a job") ------

BERLIN = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "dst": {"gap": "skip", "repeat": "both"}}


def test_a_new_cron_keeps_the_time_zone_and_the_dst_policy(http: httpx.Client) -> None:
    job = _create(http, schedule=BERLIN)
    answer = _patch(http, job["id"], {"schedule": {"cron": "0 3 * * *"}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["schedule"] == BERLIN | {"cron": "0 3 * * *"}
    assert http.get(f"/v1/jobs/{job['id']}").json()["schedule"] == BERLIN | {"cron": "0 3 * * *"}


def test_a_zone_or_a_dst_key_alone_changes_only_itself(http: httpx.Client) -> None:
    job = _create(http, schedule=BERLIN)
    zoned = _patch(http, job["id"], {"schedule": {"timezone": "Asia/Tokyo"}})
    assert zoned.status_code == 200, zoned.text
    assert zoned.json()["schedule"] == BERLIN | {"timezone": "Asia/Tokyo"}
    repeat = _patch(http, job["id"], {"schedule": {"dst": {"repeat": "last"}}})
    assert repeat.json()["schedule"]["dst"] == {"gap": "skip", "repeat": "last"}


def test_end_conditions_are_kept_by_a_patch_of_the_period(http: httpx.Client) -> None:
    job = _create(http, schedule={"every_s": 60, "max_runs": 5, "end_at": "2031-01-01T00:00:00Z"})
    answer = _patch(http, job["id"], {"schedule": {"every_s": 120}})
    assert answer.json()["schedule"] == {"every_s": 120, "max_runs": 5, "end_at": "2031-01-01T00:00:00.000Z"}


@pytest.mark.parametrize(
    ("schedule", "patch", "kinds"),
    [
        (BERLIN, {"every_s": 60}, ["cron", "every_s"]),
        (BERLIN, {"at": "2030-01-01T00:00:00Z"}, ["at", "cron"]),
        ({"at": "2030-01-01T00:00:00Z"}, {"every_s": 60}, ["at", "every_s"]),
        ({"every_s": 60}, {"cron": "0 3 * * *"}, ["cron", "every_s"]),
    ],
)
def test_a_patch_that_leaves_two_kinds_is_400_naming_both(
    http: httpx.Client, schedule: dict, patch: dict, kinds: list[str]
) -> None:
    job = _create(http, schedule=schedule)
    answer = _patch(http, job["id"], {"schedule": patch})
    assert answer.status_code == 400, answer.text
    problem = answer.json()
    assert [e["loc"] for e in problem["errors"]] == [f"schedule.{kind}" for kind in kinds]
    assert all(kind in problem["detail"] for kind in kinds)
    assert "null" in problem["detail"]  # how to remove the old kind
    assert http.get(f"/v1/jobs/{job['id']}").json()["version"] == 1


def test_null_removes_the_old_kind_with_the_keys_only_it_has(http: httpx.Client) -> None:
    job = _create(http, schedule=BERLIN | {"max_runs": 3})
    answer = _patch(http, job["id"], {"schedule": {"cron": None, "every_s": 60}})
    assert answer.status_code == 200, answer.text
    # The zone and the DST policy went with cron; the end condition stays.
    assert answer.json()["schedule"] == {"every_s": 60, "max_runs": 3}
    back = _patch(http, job["id"], {"schedule": {"every_s": None, "cron": "0 3 * * *"}})
    assert back.json()["schedule"] == {"cron": "0 3 * * *", "timezone": "UTC", "max_runs": 3}
    one_off = _patch(http, job["id"], {"schedule": {"cron": None, "at": "2030-01-01T00:00:00Z"}})
    # A one-off has no end conditions: they go with the repeating kind.
    assert one_off.json()["schedule"] == {"at": "2030-01-01T00:00:00.000Z"}


def test_a_key_the_new_kind_does_not_take_is_400_when_the_patch_names_it(http: httpx.Client) -> None:
    job = _create(http, schedule=BERLIN)
    answer = _patch(http, job["id"], {"schedule": {"cron": None, "every_s": 60, "timezone": "UTC"}})
    assert answer.status_code == 400
    assert [e["loc"] for e in answer.json()["errors"]] == ["schedule.timezone"]
    kept_zone = _patch(http, job["id"], {"schedule": {"cron": None}})
    assert kept_zone.status_code == 400  # no kind left
    assert [e["loc"] for e in kept_zone.json()["errors"]] == ["schedule"]


def test_catchup_merges_key_by_key_and_null_removes_it(http: httpx.Client) -> None:
    job = _create(http, schedule={"every_s": 60}, catchup={"policy": "all", "max_runs": 5})
    answer = _patch(http, job["id"], {"catchup": {"window_s": 600}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["catchup"] == {"policy": "all", "max_runs": 5, "window_s": 600}
    bad = _patch(http, job["id"], {"catchup": {"policy": "sometimes"}})
    assert bad.status_code == 400
    assert [e["loc"] for e in bad.json()["errors"]] == ["catchup.policy"]
    cleared = _patch(http, job["id"], {"catchup": None})
    assert cleared.json()["catchup"] is None
