"""The console in a real browser (docs/ui.md): Debian's chromium, headless,
driven by Playwright against real `tempo serve` processes. One server and
one browser per module, shared by its tests.

It also writes the screenshots shown in the README (docs/ui/*.png)."""

import os
import re
from pathlib import Path

import httpx
import pytest

from conftest import as_token, configured_server, job_body, tokens_config

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("TEMPO_CHROMIUM", "/usr/bin/chromium")
if not Path(CHROMIUM).exists():  # pragma: no cover - CI installs it (README "Test it")
    pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"
TOKENS = {"acme-client": ("acme", "client", None), "globex-client": ("globex", "client", None)}
expect = playwright_api.expect
expect.set_options(timeout=15_000)


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def srv(open_server):
    return open_server


@pytest.fixture(scope="module")
def api(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        yield client


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield tab
    context.close()
    # A Content-Security-Policy refusal is a console error: there must be none.
    assert not [e for e in errors if "Content Security Policy" in e], errors


def create(api: httpx.Client, **overrides) -> dict:
    answer = api.post("/v1/jobs", json=job_body(**overrides))
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_jobs_are_listed_with_their_next_runs_and_filtered_by_label(srv, api, page):
    berlin = create(api, name="hourly-berlin", target="queue:reports", labels={"team": "reports"},
                    schedule={"cron": "0 * * * *", "timezone": "Europe/Berlin"})
    create(api, name="every-five-min", target="queue:ops", labels={"team": "ops"}, schedule={"every_s": 300})
    page.goto(f"{srv.url}/ui/jobs")
    row = page.locator("tr", has_text="hourly-berlin")
    expect(row).to_contain_text("Europe/Berlin")
    expect(row).to_contain_text(berlin["next_run_at"])
    expect(row.locator(".countdown")).to_have_text(re.compile(r"^in \d+"))
    page.fill("input[name=label]", "team:reports")
    page.click("form.filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"label=team%3Areports"))
    expect(page.locator("table.jobs")).to_contain_text("hourly-berlin")
    expect(page.locator("table.jobs")).not_to_contain_text("every-five-min")
    page.screenshot(path=str(SHOTS / "jobs.png"), full_page=True)


def test_a_job_shows_its_slots_and_runs_and_a_trigger_appears_live(srv, api, page):
    job = create(api, name="nightly", schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"})
    page.goto(f"{srv.url}/ui/jobs/{job['id']}")
    expect(page.locator("table.slots tbody tr")).to_have_count(10)
    expect(page.locator("table.runs")).to_contain_text("waiting")
    # Triggered elsewhere (the API), it shows up without a reload: SSE, or polling.
    run = api.post(f"/v1/jobs/{job['id']}/trigger").json()
    expect(page.locator("table.runs")).to_contain_text(run["id"])
    page.screenshot(path=str(SHOTS / "job.png"), full_page=True)
    # Run now from the page moves nothing of the schedule.
    page.click("text=Run now")
    expect(page.locator("table.runs tbody tr")).to_have_count(3)
    assert api.get(f"/v1/jobs/{job['id']}").json()["next_run_at"] == job["next_run_at"]


def test_pause_by_filter_with_a_note_asks_how_many_then_shows_them_paused(srv, api, page):
    ids = [create(api, name=f"batch-{i}", labels={"wave": "one"})["id"] for i in range(3)]
    create(api, name="not-in-wave", labels={"wave": "two"})
    page.goto(f"{srv.url}/ui/jobs?label=wave%3Aone")
    page.fill("form.bulk input[name=note]", "freeze for month-end")
    page.click("form.bulk button[value=pause]")
    expect(page.locator("h1")).to_have_text("Pause 3 jobs?")
    page.click("text=Yes, pause 3 jobs")
    expect(page.locator("h1")).to_have_text("Pause: 3 jobs")
    page.click("text=Back to the jobs")
    expect(page.locator("table.jobs .s-paused")).to_have_count(3)
    expect(page.locator("table.jobs")).to_contain_text("freeze for month-end")
    assert all(api.get(f"/v1/jobs/{i}").json()["state"] == "paused" for i in ids)
    assert api.get("/v1/jobs", params={"label": "wave:two"}).json()["jobs"][0]["state"] == "active"


def test_a_run_is_cancelled_from_its_page(srv, api, page):
    job = create(api, name="to-cancel", schedule={"every_s": 3600})
    run = api.post(f"/v1/jobs/{job['id']}/trigger").json()
    page.goto(f"{srv.url}/ui/runs/{run['id']}")
    page.click("button:has-text('Cancel')")
    expect(page.locator("h1")).to_contain_text("cancelled")
    assert api.get(f"/v1/runs/{run['id']}").json()["status"] == "cancelled"


def test_a_run_shows_its_attempts_output_and_error_escaped(srv, api, page):
    create(api, name="<b>bold</b>", target="queue:shots", schedule={"at": "2020-01-01T00:00:00Z"},
           retry={"max_attempts": 1, "backoff_s": [1]})
    run = api.post("/v1/claim", json={"worker": "worker-7", "queues": ["shots"], "wait_s": 5}).json()["runs"][0]
    api.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": False,
                                                   "output": "<i>partial</i> output", "error": "boom <script>"})
    page.goto(f"{srv.url}/ui/runs/{run['id']}")
    expect(page.locator("pre.output")).to_have_text("<i>partial</i> output")
    expect(page.locator("pre.error")).to_have_text("boom <script>")
    expect(page.locator("text=worker worker-7")).to_be_visible()
    page.screenshot(path=str(SHOTS / "run.png"), full_page=True)


def test_the_other_pages_render_and_are_captured(srv, api, page):
    for name, path, heading in (("home", "/ui/", "Home"), ("runs", "/ui/runs", "Runs"),
                                ("events", "/ui/events", "Events"), ("cluster", "/ui/cluster", "Cluster")):
        page.goto(f"{srv.url}{path}")
        expect(page.locator("h1")).to_have_text(heading)
        if name == "home":
            expect(page.locator(".chart svg")).to_be_visible()
            # Runs started between two samples of the chart (the page polls every 2 s).
            for _ in range(2):
                for i in range(20):
                    create(api, name=f"chart-{i}", target="queue:chart", schedule={"at": "2020-01-01T00:00:00Z"})
                assert api.post("/v1/claim", json={"worker": "w", "queues": ["chart"], "max_runs": 100,
                                                   "wait_s": 5}).json()["runs"]
                page.wait_for_timeout(2300)
            expect(page.locator(".chart polyline").first).to_have_attribute("points", re.compile(r"\d.*,.*\d"))
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    page.goto(f"{srv.url}/ui/runs?status=failed")
    expect(page.locator("table.runs")).to_contain_text("failed")


def test_with_javascript_off_a_form_still_pauses(srv, api, browser):
    job = create(api, name="no-js")
    context = browser.new_context(java_script_enabled=False)
    try:
        tab = context.new_page()
        tab.goto(f"{srv.url}/ui/jobs/{job['id']}")
        tab.fill("input[name=note]", "from a page without script")
        tab.click("button:has-text('Pause')")
        expect(tab.locator("h1")).to_contain_text("paused")
    finally:
        context.close()
    assert api.get(f"/v1/jobs/{job['id']}").json()["paused"]["note"] == "from a page without script"


def test_log_in_see_only_ones_own_jobs_and_log_out(tmp_path, browser):
    with configured_server(tmp_path, tokens_config(TOKENS)) as secured:
        with as_token(secured, "acme-client") as acme, as_token(secured, "globex-client") as globex:
            mine = acme.post("/v1/jobs", json=job_body(name="acme-job")).json()
            theirs = globex.post("/v1/jobs", json=job_body(name="globex-job")).json()
        context = browser.new_context()
        try:
            tab = context.new_page()
            tab.goto(f"{secured.url}/ui/jobs")
            expect(tab.locator("h1")).to_have_text("Log in")
            tab.fill("input[name=token]", "wrong")
            tab.click("button:has-text('Log in')")
            expect(tab.locator(".problem")).to_have_text("unknown token")
            tab.fill("input[name=token]", "acme-client")
            tab.click("button:has-text('Log in')")
            expect(tab).to_have_url(re.compile(r"/ui/jobs$"))
            expect(tab.locator("table.jobs")).to_contain_text("acme-job")
            expect(tab.locator("table.jobs")).not_to_contain_text("globex-job")
            cookie = next(c for c in context.cookies() if c["name"] == "tempo_session")
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            response = tab.goto(f"{secured.url}/ui/jobs/{theirs['id']}")
            assert response is not None and response.status == 404
            tab.goto(f"{secured.url}/ui/jobs/{mine['id']}")
            expect(tab.locator("h1")).to_contain_text("acme-job")
            tab.click("button:has-text('Log out')")
            expect(tab.locator("h1")).to_have_text("Log in")
            tab.goto(f"{secured.url}/ui/jobs")
            expect(tab.locator("h1")).to_have_text("Log in")
        finally:
            context.close()
