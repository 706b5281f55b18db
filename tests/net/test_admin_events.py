"""An admin's `GET /v1/events` is every owner's feed (docs/api.md "Events";
docs/api.md: an admin does everything but claim): each event names its owner,
and the cursor, one sequence over all owners, pages across them. A client
token still reads its own owner's events only, without an `owner` field.
Also an admin's label filter, which spans owners too."""

import threading
import time

import httpx
import pytest

from conftest import as_token, configured_server, job_body, tokens_config, unique

TOKENS = {
    "acme-client": ("acme", "client", None),
    "globex-client": ("globex", "client", None),
    "ops-admin": ("ops", "admin", None),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with configured_server(tmp_path_factory.mktemp("admin-events"), tokens_config(TOKENS)) as srv:
        yield srv


def _updated(client: httpx.Client, labels: dict | None = None) -> str:
    """A job of the token's owner, patched once: a `job.updated` event."""
    job = client.post("/v1/jobs", json=job_body(labels=labels or {})).json()
    answer = client.patch(f"/v1/jobs/{job['id']}", json={"name": unique("n")},
                          headers={"content-type": "application/merge-patch+json"})
    assert answer.status_code == 200, answer.text
    return job["id"]


def _feed(client: httpx.Client, after: str = "0", limit: int = 1000) -> list[dict]:
    """Every event after `after`, page by page."""
    events: list[dict] = []
    while True:
        page = client.get("/v1/events", params={"after": after, "limit": limit})
        assert page.status_code == 200, page.text
        body = page.json()
        events += body["events"]
        if not body["events"]:
            assert body["next_cursor"] == after
            return events
        after = body["next_cursor"]


def test_an_admins_feed_holds_every_owners_events_with_their_owner(secured) -> None:
    with as_token(secured, "acme-client") as acme, as_token(secured, "globex-client") as globex, \
            as_token(secured, "ops-admin") as admin:
        acme_job, globex_job = _updated(acme), _updated(globex)
        acme_later = _updated(acme)
        everything = _feed(admin)
        by_job = {e["job_id"]: e for e in everything if e["type"] == "job.updated"}
        assert by_job[acme_job]["owner"] == "acme" and by_job[acme_later]["owner"] == "acme"
        assert by_job[globex_job]["owner"] == "globex"
        cursors = [int(e["cursor"]) for e in everything]
        assert cursors == sorted(set(cursors)), "oldest first, each once"
        # One to a page, the cursor goes across owners and misses nothing.
        assert _feed(admin, limit=1) == everything
        middle = everything[len(everything) // 2]["cursor"]
        assert _feed(admin, after=middle) == [e for e in everything if int(e["cursor"]) > int(middle)]
        # Client tokens: their own owner's events, without the field.
        own = _feed(acme)
        assert {e["job_id"] for e in own} >= {acme_job, acme_later} and globex_job not in {e["job_id"] for e in own}
        assert all("owner" not in e for e in own)
        assert [e["cursor"] for e in own] == [e["cursor"] for e in everything if e["owner"] == "acme"]


def test_an_admins_long_poll_wakes_for_another_owners_event(secured) -> None:
    with as_token(secured, "globex-client") as globex, as_token(secured, "ops-admin") as admin:
        _updated(globex)
        last = _feed(admin)[-1]["cursor"]
        made: list[str] = []

        def later() -> None:
            time.sleep(0.5)
            made.append(_updated(globex))

        thread = threading.Thread(target=later)
        thread.start()
        started = time.monotonic()
        page = admin.get("/v1/events", params={"after": last, "wait_s": 20}).json()
        thread.join()
        assert time.monotonic() - started < 15
        assert [(e["job_id"], e["owner"]) for e in page["events"]] == [(made[0], "globex")]


def test_an_admins_label_filter_spans_owners(secured) -> None:
    team = unique("team").lower()
    with as_token(secured, "acme-client") as acme, as_token(secured, "globex-client") as globex, \
            as_token(secured, "ops-admin") as admin:
        a = acme.post("/v1/jobs", json=job_body(labels={"team": team})).json()
        g = globex.post("/v1/jobs", json=job_body(labels={"team": team})).json()
        page = admin.get("/v1/jobs", params={"label": f"team:{team}"}).json()
        assert [(j["id"], j["owner"]) for j in page["jobs"]] == [(g["id"], "globex"), (a["id"], "acme")]
        assert [j["id"] for j in acme.get("/v1/jobs", params={"label": f"team:{team}"}).json()["jobs"]] == [a["id"]]


def test_tempo_events_shows_an_admin_the_owner_of_each_event(secured, capsys, monkeypatch) -> None:
    from tempo import cli

    with as_token(secured, "globex-client") as globex:
        job_id = _updated(globex)
    monkeypatch.setenv("TEMPO_TOKEN", "ops-admin")
    assert cli.main(["events", "--url", secured.url, "--limit", "1000"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[3] == "OWNER"
    assert any(job_id in line and line.split()[3] == "globex" for line in out.splitlines())
    monkeypatch.setenv("TEMPO_TOKEN", "globex-client")
    assert cli.main(["events", "--url", secured.url, "--limit", "1000"]) == 0
    assert "OWNER" not in capsys.readouterr().out


# -- newest first, and jobs counted by state --------------------------------------------


def _feed_desc(client: httpx.Client, limit: int, **params: str) -> list[dict]:
    """Every event newest first, page by page (`order=desc`, `before`)."""
    events: list[dict] = []
    before: str | None = None
    while True:
        query = {"order": "desc", "limit": limit, **params, **({"before": before} if before else {})}
        page = client.get("/v1/events", params=query)
        assert page.status_code == 200, page.text
        events += page.json()["events"]
        before = page.json()["next_cursor"]
        if before is None:
            return events


def test_newest_first_pages_back_through_the_feed_and_one_jobs_events(secured) -> None:
    with as_token(secured, "acme-client") as acme, as_token(secured, "globex-client") as globex, \
            as_token(secured, "ops-admin") as admin:
        job = _updated(acme)
        _updated(globex)
        assert _feed_desc(acme, 2) == _feed(acme)[::-1]
        assert _feed_desc(admin, 3) == _feed(admin)[::-1]
        newest = acme.get("/v1/events", params={"order": "desc", "limit": 1}).json()
        assert newest["events"][0]["job_id"] == job and newest["events"][0]["type"] == "job.updated"
        own = _feed_desc(acme, 100, job_id=job)
        assert [e["type"] for e in own] == ["job.updated", "job.created"]
        assert _feed_desc(globex, 100, job_id=job) == []  # another owner's job: none of its events
        assert [e["owner"] for e in _feed_desc(admin, 100, job_id=job)] == ["acme", "acme"]
        for params, loc in (
            ({"order": "newest"}, "query.order"), ({"order": "desc", "after": "1"}, "query.after"),
            ({"order": "desc", "wait_s": "1"}, "query.wait_s"), ({"before": "1"}, "query.before"),
            ({"order": "desc", "before": "x"}, "query.before"), ({"job_id": job}, "query.job_id"),
            ({"order": "desc", "job_id": "nope"}, "query.job_id"),
        ):
            refused = acme.get("/v1/events", params=params)
            assert refused.status_code == 400 and refused.json()["errors"][0]["loc"] == loc, (params, refused.text)


def test_jobs_are_counted_by_state_per_owner_and_for_an_admin_over_all(secured) -> None:
    with as_token(secured, "acme-client") as acme, as_token(secured, "globex-client") as globex, \
            as_token(secured, "ops-admin") as admin:
        before = {name: c.get("/v1/jobs/counts").json() for name, c in (("acme", acme), ("globex", globex),
                                                                           ("all", admin))}
        made = [acme.post("/v1/jobs", json=job_body()).json()["id"] for _ in range(3)]
        assert acme.post(f"/v1/jobs/{made[0]}/pause").status_code == 200
        globex.post("/v1/jobs", json=job_body())
        after = {name: c.get("/v1/jobs/counts").json() for name, c in (("acme", acme), ("globex", globex),
                                                                          ("all", admin))}
        assert after["acme"] == {**before["acme"], "active": before["acme"]["active"] + 2,
                                 "paused": before["acme"]["paused"] + 1}
        assert after["globex"]["active"] == before["globex"]["active"] + 1
        assert after["all"] == {state: after["acme"][state] + after["globex"][state] for state in after["all"]}
        # The counts agree with the listing.
        listed = acme.get("/v1/jobs", params={"state": "paused", "limit": 1000}).json()["jobs"]
        assert len(listed) == after["acme"]["paused"]
