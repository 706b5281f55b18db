"""The console without a browser (docs/ui.md): escaping, the
Content-Security-Policy, CSRF, login, roles and tenants, against real
`tempo serve` processes."""

import httpx
import pytest

from conftest import Server, as_token, configured_server, job_body, tokens_config, wait_for
from ui.helpers import Browserless

MARKUP = '<script>alert("x")</script><img src=x onerror=alert(1)>'
TOKENS = {
    "acme-client": ("acme", "client", None),
    "acme-worker": ("acme", "worker", ["reports"]),
    "globex-client": ("globex", "client", None),
    "root-admin": ("ops", "admin", None),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with configured_server(tmp_path_factory.mktemp("ui-auth"), tokens_config(TOKENS)) as srv:
        yield srv


def create(srv: Server, token: str | None = None, **overrides) -> dict:
    with as_token(srv, token) as c:
        answer = c.post("/v1/jobs", json=job_body(**overrides))
        assert answer.status_code == 201, answer.text
        return answer.json()


def test_root_leads_to_the_console_and_every_page_answers(open_server):
    job = create(open_server, name="listed", schedule={"cron": "*/5 * * * *", "timezone": "Europe/Berlin"})
    with Browserless(open_server.url) as b:
        assert b.get("/").status_code == 303 and b.get("/").headers["location"] == "/ui/"
        for path in ("/ui/", "/ui/jobs", "/ui/runs", "/ui/events", "/ui/cluster", f"/ui/jobs/{job['id']}"):
            page = b.get(path)
            assert page.status_code == 200, (path, page.text[:500])
            assert page.headers["content-type"].startswith("text/html")
        assert b.get("/ui/jobs/j_nope").status_code == 404
        assert b.get("/ui/nothing-here").status_code == 404
        # The API is untouched behind the console.
        assert b.get("/v1/jobs").status_code == 200


def test_the_job_page_links_the_jobs_it_runs_after_and_those_after_it(open_server):
    parent = create(open_server)
    child = create(open_server, schedule={"after": {"jobs": [parent["id"]]}})
    with Browserless(open_server.url) as b:
        up = b.get(f"/ui/jobs/{child['id']}").text
        down = b.get(f"/ui/jobs/{parent['id']}").text
    assert f'<dd class="upstream"><a href="/ui/jobs/{parent["id"]}">' in up
    assert f'<dd class="downstream"><a href="/ui/jobs/{child["id"]}">' in down
    assert f"after {parent['id']} succeeded" in up


def test_pages_carry_a_strict_content_security_policy_and_no_inline_script(open_server):
    with Browserless(open_server.url) as b:
        page = b.get("/ui/jobs")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    # Every script is a file of the console's own, none inline.
    assert page.text.count("<script") == page.text.count('<script src="/ui/static/')
    with Browserless(open_server.url) as b:
        htmx = b.get("/ui/static/htmx.min.js")
    assert htmx.status_code == 200 and "htmx" in htmx.text[:2000]


def test_names_labels_outputs_and_errors_are_escaped(open_server):
    job = create(open_server, name=MARKUP, target="queue:esc", labels={"team": "a<b>"},
                 schedule={"at": "2020-01-01T00:00:00Z"}, retry={"max_attempts": 1, "backoff_s": [1]})
    with httpx.Client(base_url=open_server.url, timeout=30) as c:
        claimed = c.post("/v1/claim", json={"worker": "w<i>1</i>", "queues": ["esc"], "wait_s": 5}).json()["runs"]
        assert claimed, "the one-off is due at once"
        run = claimed[0]
        answer = c.post(f"/v1/runs/{run['id']}/result",
                        json={"attempt": run["attempt"], "ok": False, "output": MARKUP, "error": MARKUP})
        assert answer.status_code == 200, answer.text
    with Browserless(open_server.url) as b:
        pages = [b.get(p).text for p in ("/ui/jobs", f"/ui/jobs/{job['id']}", f"/ui/runs/{run['id']}", "/ui/", "/ui/runs")]
    for text in pages:
        assert "<script>alert" not in text and "<img src=x" not in text and "<i>1</i>" not in text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in pages[0]
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[2]  # the output and the error
    assert "a&lt;b&gt;" in pages[0]


def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(open_server):
    job = create(open_server, name="csrf-target")
    with Browserless(open_server.url) as b:
        b.get("/ui/")  # the CSRF cookie
        for data in ({}, {"csrf": "forged"}):
            refused = b.http.post(f"/ui/jobs/{job['id']}/pause", data=data)
            assert refused.status_code == 403 and "CSRF" in refused.text
        # Another browser's token does not fit this browser's cookie.
        with Browserless(open_server.url) as other:
            theirs = other.csrf()
        assert b.http.post(f"/ui/jobs/{job['id']}/pause", data={"csrf": theirs}).status_code == 403
    with httpx.Client(base_url=open_server.url) as c:
        assert c.get(f"/v1/jobs/{job['id']}").json()["state"] == "active"


def test_pause_with_a_note_resume_and_trigger_act_through_the_api(open_server):
    job = create(open_server, name="acted-on", schedule={"every_s": 3600})
    with Browserless(open_server.url) as b:
        done = b.post(f"/ui/jobs/{job['id']}/pause", {"note": "month-end <freeze>"})
        assert done.status_code == 303 and done.headers["location"] == f"/ui/jobs/{job['id']}"
        page = b.get(f"/ui/jobs/{job['id']}").text
        assert "month-end &lt;freeze&gt;" in page
        assert b.post(f"/ui/jobs/{job['id']}/trigger", {}).status_code == 303
        assert b.post(f"/ui/jobs/{job['id']}/resume", {}).status_code == 303
    with httpx.Client(base_url=open_server.url) as c:
        after = c.get(f"/v1/jobs/{job['id']}").json()
        runs = c.get(f"/v1/jobs/{job['id']}/runs").json()["runs"]
    assert after["state"] == "active"
    # Run now added a run and moved nothing: the next slot is still on the hourly grid.
    assert after["next_run_at"] == job["next_run_at"]
    assert len(runs) >= 2


def test_edit_checks_the_version_and_answers_the_apis_words(open_server):
    job = create(open_server, name="edited", schedule={"cron": "0 * * * *", "timezone": "UTC"})
    form = {"version": str(job["version"]), "kind": "cron", "cron": "30 * * * *", "timezone": "Europe/Berlin",
            "overlap": "skip", "timeout_s": "600", "labels": "team=ops\nenv=prod"}
    with Browserless(open_server.url) as b:
        assert b.post(f"/ui/jobs/{job['id']}/edit", form).status_code == 303
        stale = b.post(f"/ui/jobs/{job['id']}/edit", {**form, "cron": "15 * * * *"})
        assert stale.status_code == 412 and f"job {job['id']} is at version" in stale.text
        bad = b.post(f"/ui/jobs/{job['id']}/edit", {**form, "version": str(job["version"] + 1), "cron": "61 * * * *"})
        assert bad.status_code == 400 and "schedule.cron" in bad.text
        bad_timeout = b.post(f"/ui/jobs/{job['id']}/edit", {**form, "version": str(job["version"] + 1), "timeout_s": "x"})
        assert bad_timeout.status_code == 400 and "timeout_s" in bad_timeout.text
    with httpx.Client(base_url=open_server.url) as c:
        after = c.get(f"/v1/jobs/{job['id']}").json()
    assert after["schedule"]["cron"] == "30 * * * *" and after["schedule"]["timezone"] == "Europe/Berlin"
    assert after["overlap"] == "skip" and after["timeout_s"] == 600 and after["labels"] == {"env": "prod", "team": "ops"}


def test_bulk_pause_asks_first_with_the_count_then_pauses_only_the_matching_jobs(open_server):
    mine = [create(open_server, name=f"bulk-{i}", labels={"bulk": "yes"})["id"] for i in range(3)]
    other = create(open_server, name="bulk-other", labels={"bulk": "no"})["id"]
    with Browserless(open_server.url) as b:
        ask = b.post("/ui/jobs/bulk", {"action": "pause", "label": "bulk:yes", "note": "n"}, from_page="/ui/jobs")
        assert ask.status_code == 200 and "Pause 3 jobs?" in ask.text
        with httpx.Client(base_url=open_server.url) as c:
            assert all(c.get(f"/v1/jobs/{j}").json()["state"] == "active" for j in mine)
        done = b.post("/ui/jobs/bulk", {"action": "pause", "label": "bulk:yes", "note": "n", "confirm": "3"})
        assert done.status_code == 200 and "Pause: 3 jobs" in done.text
    with httpx.Client(base_url=open_server.url) as c:
        assert all(c.get(f"/v1/jobs/{j}").json()["paused"]["note"] == "n" for j in mine)
        assert c.get(f"/v1/jobs/{other}").json()["state"] == "active"


def test_backfill_and_cancel_answer_refusals_in_the_apis_words(open_server):
    job = create(open_server, name="bf", schedule={"every_s": 3600})
    with Browserless(open_server.url) as b:
        refused = b.post(f"/ui/jobs/{job['id']}/backfill", {"from": "yesterday", "until": ""})
        assert refused.status_code == 400 and "from" in refused.text
        with httpx.Client(base_url=open_server.url) as c:
            run = c.post(f"/v1/jobs/{job['id']}/trigger").json()
        assert b.post(f"/ui/runs/{run['id']}/cancel", {}).status_code == 303
        with httpx.Client(base_url=open_server.url) as c:
            assert c.get(f"/v1/runs/{run['id']}").json()["status"] == "cancelled"


def test_bulk_pause_applies_every_label_of_the_filter(open_server):
    team = "bulk2"
    gold = [create(open_server, name=f"gold-{i}", labels={"team": team, "tier": "gold"})["id"] for i in range(2)]
    silver = create(open_server, name="silver", labels={"team": team, "tier": "silver"})["id"]
    both = [("label", f"team:{team}"), ("label", "tier:gold")]
    with Browserless(open_server.url) as b:
        listing = b.http.get("/ui/jobs", params=both).text
        assert all(j in listing for j in gold) and silver not in listing
        # The page's bulk form carries both labels.
        assert listing.count('type="hidden" name="label"') == 2
        labels = [v for _, v in both]
        ask = b.http.post("/ui/jobs/bulk", data={"csrf": b.csrf(), "action": "pause", "label": labels})
        assert ask.status_code == 200 and "Pause 2 jobs?" in ask.text, ask.text
        assert ask.text.count('type="hidden" name="label"') == 2
        done = b.http.post("/ui/jobs/bulk", data={"csrf": b.csrf(), "action": "pause", "confirm": "2", "label": labels})
        assert done.status_code == 200 and "Pause: 2 jobs" in done.text, done.text
    with httpx.Client(base_url=open_server.url) as c:
        assert [c.get(f"/v1/jobs/{j}").json()["state"] for j in gold] == ["paused", "paused"]
        assert c.get(f"/v1/jobs/{silver}").json()["state"] == "active"


def test_the_counts_are_every_job_by_state_not_a_page_of_them(open_server):
    with httpx.Client(base_url=open_server.url, timeout=30) as c:
        made = c.post("/v1/jobs/batch", json={"jobs": [job_body(name=f"many-{i}") for i in range(120)]})
        assert made.status_code == 200, made.text
        counts = c.get("/v1/jobs/counts").json()
    assert counts["active"] > 120
    with Browserless(open_server.url) as b:
        page = b.get("/ui/counts").text
    for state, n in counts.items():
        assert f'<span class="n">{n}</span> jobs {state}' in page, (state, n, page)
    assert "+</span>" not in page


def test_the_events_page_and_a_job_page_show_the_newest_events_of_a_large_feed(open_server):
    with httpx.Client(base_url=open_server.url, timeout=30) as c:
        for _ in range(2):  # over a page of the API's (1,000) of other jobs' events first
            made = c.post("/v1/jobs/batch", json={"jobs": [job_body(name="filler") for _ in range(600)]})
            assert made.status_code == 200, made.text
        job = c.post("/v1/jobs", json=job_body(name="newest")).json()
        assert c.post(f"/v1/jobs/{job['id']}/pause", json={"note": "late"}).status_code == 200
    with Browserless(open_server.url) as b:
        events = b.get("/ui/events").text
        assert events.index(f"{job['id']}") < events.index("job.created"), "newest first"
        assert 'rel="next"' in events and "before=" in events
        older = b.get("/ui/events?before=" + events.split("before=")[1].split('"')[0]).text
        assert job["id"] not in older
        page = b.get(f"/ui/jobs/{job['id']}").text
        part = page.split("<h2>Events</h2>")[1]
        assert "job.paused" in part and "job.created" in part


# -- with tokens ---------------------------------------------------------------


def test_without_a_session_pages_lead_to_the_login_form(secured):
    with Browserless(secured.url) as b:
        answer = b.get("/ui/jobs?state=paused")
        assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/login?next=")
        assert b.http.post("/ui/jobs/bulk", data={}).status_code in (401, 403)
        # A forged session is no session.
        b.http.cookies.set("tempo_session", "acme-client", path="/ui")
        assert b.get("/ui/jobs").status_code == 303


def test_login_sets_a_strict_http_only_cookie_and_refuses_workers_and_unknown_tokens(secured):
    with Browserless(secured.url) as b:
        unknown = b.login("nope")
        assert unknown.status_code == 401 and "tempo_session" not in unknown.headers.get("set-cookie", "")
        worker = b.login("acme-worker")
        assert worker.status_code == 403 and "tempo_session" not in worker.headers.get("set-cookie", "")
        assert "worker token" in worker.text
        ok = b.login("acme-client")
        assert ok.status_code == 303
        cookie = ok.headers["set-cookie"]
        assert "tempo_session=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert "Secure" not in cookie  # plain http here; with [tls] it is Secure
        assert "acme-client" not in cookie.split(";")[0].split("=", 1)[1].split(".")[-1]
        assert b.get("/ui/jobs").status_code == 200
        assert b.post("/ui/logout", {}).status_code == 303
        assert b.get("/ui/jobs").status_code == 303


def test_a_client_sees_and_touches_only_its_owners_jobs(secured):
    theirs = create(secured, "globex-client", name="globex-secret-job")
    mine = create(secured, "acme-client", name="acme-own-job")
    with Browserless(secured.url) as b:
        b.login("acme-client")
        listing = b.get("/ui/jobs").text
        assert "acme-own-job" in listing and "globex-secret-job" not in listing
        assert b.get(f"/ui/jobs/{theirs['id']}").status_code == 404
        assert b.post(f"/ui/jobs/{theirs['id']}/pause", {"note": "x"}).status_code == 404
        assert b.post(f"/ui/jobs/{theirs['id']}/trigger", {}).status_code == 404
        # A bulk pause of "every job" reaches only acme's.
        everything = b.post("/ui/jobs/bulk", {"action": "pause"}, from_page="/ui/jobs")
        count = int(everything.text.split('id="bulk-count">')[1].split("<")[0])
        assert count >= 1
        b.post("/ui/jobs/bulk", {"action": "pause", "confirm": str(count)})
        assert "globex-secret-job" not in b.get("/ui/events").text
    with as_token(secured, "globex-client") as c:
        assert c.get(f"/v1/jobs/{theirs['id']}").json()["state"] == "active"
    with as_token(secured, "acme-client") as c:
        assert c.get(f"/v1/jobs/{mine['id']}").json()["state"] == "paused"


def test_an_admin_sees_every_owners_jobs(secured):
    theirs = create(secured, "globex-client", name="globex-for-admin")
    mine = create(secured, "acme-client", name="acme-for-admin")
    with Browserless(secured.url) as b:
        assert b.login("root-admin").status_code == 303
        listing = b.get("/ui/jobs").text
        assert "globex-for-admin" in listing and "acme-for-admin" in listing
        assert b.get(f"/ui/jobs/{theirs['id']}").status_code == 200
        assert b.get(f"/ui/jobs/{mine['id']}").status_code == 200


def test_the_live_stream_needs_a_session(secured):
    with Browserless(secured.url) as b:
        assert b.get("/ui/live").status_code == 401


# -- turned off ----------------------------------------------------------------


def test_ui_enabled_false_leaves_only_the_api(tmp_path):
    with configured_server(tmp_path, "[ui]\nenabled = false\n") as srv, httpx.Client(base_url=srv.url) as c:
        for path in ("/ui/", "/ui/jobs", "/ui/static/htmx.min.js"):
            answer = c.get(path)
            assert answer.status_code == 404 and answer.headers["content-type"] == "application/problem+json"
        assert c.get("/").status_code == 404
        assert c.get("/v1/jobs").status_code == 200
        wait_for(lambda: c.get("/readyz").status_code == 200)


def test_the_live_stream_says_when_the_node_applied_more(open_server):
    with httpx.Client(base_url=open_server.url, timeout=30) as c, c.stream("GET", "/ui/live") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"] == "text/event-stream"
        lines = stream.iter_lines()
        first = next(lines)
        assert first.startswith("data: ")
        create(open_server, name="live-change")
        for line in lines:
            if line.startswith("data: "):
                assert int(line[6:]) > int(first[6:])
                break
