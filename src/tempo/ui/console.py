"""The console's ASGI app (docs/ui.md): `/ui/...` is answered here, every
other path by the API it wraps. Pages read, and forms act, through the API
in process (`calls.py`) with the user's own token."""

import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import jinja2
import trio
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

from tempo import limits
from tempo.ui import present, security
from tempo.ui.calls import Answer, ApiCaller

log = logging.getLogger("tempo.ui")
# The largest form the console takes (a pause note, labels, a schedule).
FORM_BYTES_MAX = 64 * 1024
# Jobs one bulk action acts on at most; more is refused before any is touched.
BULK_JOBS_MAX = 10_000
# How far the home page counts runs of a status: past this it says "100+"
# (counting further would read further). Jobs by state are counted whole
# (`GET /v1/jobs/counts`).
HOME_COUNT_MAX = 100
# Rows of a table page.
PAGE_ROWS = 50
# The latest events a job's page shows.
JOB_EVENTS = 20
# How often the live stream looks for a change, and how long one stream
# lasts before the browser reconnects (EventSource does so by itself).
LIVE_POLL_S = 1.0
LIVE_STREAM_S = 60.0
STATUSES = ("waiting", "claimed", "done", "failed", "cancelled", "missed", "skipped")
STATES = ("active", "paused", "completed")
OVERLAPS = ("allow", "skip", "buffer_one", "buffer_all", "cancel_other")
_STATIC = {
    "htmx.min.js": b"text/javascript; charset=utf-8",
    "console.js": b"text/javascript; charset=utf-8",
    "console.css": b"text/css; charset=utf-8",
}
_HTML = b"text/html; charset=utf-8"


class Refused(Exception):
    """The API refused a read or action: its answer, shown in its own words."""

    def __init__(self, answer: Answer):
        super().__init__(answer.problem)
        self.answer = answer


class Page:
    """One console request: who asks, through which API caller."""

    def __init__(
        self, scope: HTTPScope, api: ApiCaller, csrf: str, form_pairs: list[tuple[str, str]], logged_in: bool,
    ):
        self.scope = scope
        self.api = api
        self.csrf = csrf
        self.form = dict(form_pairs)
        self.logged_in = logged_in
        self.query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        self.query_pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        # The form's fields in order, repeated ones (labels) included.
        self.form_pairs = form_pairs

    async def get(self, path: str, query: Any = None) -> Any:
        answer = await self.api.call("GET", path, query)
        if not answer.ok:
            raise Refused(answer)
        return answer.json()

    async def act(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        answer = await self.api.call(method, path, body=body, headers=headers)
        if not answer.ok:
            raise Refused(answer)
        return answer.json()


Handler = Callable[[Page, list[str]], Awaitable[tuple[int, bytes, list[tuple[bytes, bytes]]]]]


class Console:
    """Wraps the API's ASGI app: `/` and `/ui...` are the console's when
    `enabled`, every other path the API's."""

    def __init__(
        self, api: ASGIFramework, *, auth_enabled: bool, key: bytes, tls: bool, enabled: bool = True,
    ):
        self.api = api
        self.auth_enabled = auth_enabled
        self.enabled = enabled
        self.tls = tls
        self.sessions = security.Sessions(key)
        self.chart = present.Chart()
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("tempo.ui", "templates"),
            autoescape=True,  # names, labels, outputs and errors are the users'
            # The API leaves out fields it has no value for (omit_defaults): a
            # missing one renders as nothing.
            undefined=jinja2.ChainableUndefined,
            trim_blocks=True, lstrip_blocks=True,
        )
        self.env.filters["words"] = present.schedule_words
        self.env.filters["local"] = present.local_time
        self.env.filters["zone"] = present.zone_of
        self.env.filters["clip"] = _clip
        self.static = {name: resources.files("tempo.ui").joinpath("static", name).read_bytes() for name in _STATIC}

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] != "http" or not self.enabled:
            await self.api(scope, receive, send)
            return
        path = scope["path"]
        if path == "/":
            await _send(send, 303, b"", [(b"location", b"/ui/")], _HTML)
            return
        if path != "/ui" and not path.startswith("/ui/"):
            await self.api(scope, receive, send)
            return
        try:
            status, body, headers = await self._answer(scope, receive, send)
        except Exception as exc:
            error_id = secrets.token_hex(8)
            log.error("unexpected error answering %s %r, error_id %s", scope["method"], scope["path"], error_id,
                      exc_info=exc, extra={"error_id": error_id})
            status, body, headers = self.render(
                None, "error.html", 500, status_code=500,
                message=f"an unexpected error; the server logged it with error_id {error_id}")
        if status:
            # HEAD: GET's status and headers (its content-length too), no body.
            await _send(send, status, body, headers, _HTML if not headers or headers[0][0] != b"content-type" else None,
                        head_only=scope["method"] == "HEAD")

    async def _answer(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        parts = [p for p in scope["path"].removeprefix("/ui").split("/") if p]
        method = scope["method"]
        if parts[:1] == ["static"] and len(parts) == 2 and parts[1] in _STATIC and method in ("GET", "HEAD"):
            return 200, self.static[parts[1]], [(b"content-type", _STATIC[parts[1]]), *security.HEADERS[:3],
                                                (b"cache-control", b"max-age=3600")]
        cookies = _cookies(scope)
        set_cookies: list[tuple[bytes, bytes]] = []
        seed = cookies.get(security.CSRF_COOKIE)
        if not seed or len(seed) > 64:
            seed = secrets.token_urlsafe(24)
            set_cookies.append((b"set-cookie", security.cookie(security.CSRF_COOKIE, seed, secure=self.tls)))
        refusal, form = await self._checked_form(scope, receive, seed)
        if refusal is not None:
            return self._error(scope, *refusal, set_cookies)
        token = self.sessions.open(cookies.get(security.SESSION_COOKIE)) if self.auth_enabled else None
        page = Page(scope, ApiCaller(self.api, scope, token), self.sessions.csrf_for(seed), form, token is not None)
        status, body, headers = await self._dispatch(page, parts, send)
        return status, body, [*set_cookies, *headers]

    async def _checked_form(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, seed: str
    ) -> tuple[tuple[int, str] | None, list[tuple[str, str]]]:
        """A POST's form (its fields in order) once its CSRF token is
        checked; or why it is refused."""
        method = scope["method"]
        if method in ("GET", "HEAD"):
            return None, []
        if method != "POST":
            return (405, f"{method} is not allowed on {scope['path']}"), []
        try:
            form = await _read_form(receive)
        except ValueError as exc:
            return (413, str(exc)), []
        if not self.sessions.csrf_ok(seed, dict(form).get("csrf")):
            return (403, "the form's CSRF token is missing or stale: reload the page and send it again"), []
        return None, form

    async def _dispatch(
        self, page: Page, parts: list[str], send: ASGISendCallable
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        scope, method = page.scope, page.scope["method"]
        if parts[:1] in (["login"], ["logout"]):
            return await self._login(page, parts[0], method)
        if self.auth_enabled and not page.logged_in:
            target = scope["path"] + (f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else "")
            if method == "GET" and parts[:1] != ["live"]:
                return 303, b"", [(b"location", f"/ui/login?next={quote(target)}".encode())]
            return self._error(scope, 401, "log in first", [])
        if parts[:1] == ["live"]:
            await self._live(page, send)
            return 0, b"", []
        handler = self._route(method, parts)
        if handler is None:
            return self._error(scope, 404, f"no such page {scope['path']}", [], page)
        try:
            return await handler(page, parts)
        except Refused as refused:
            return self._refused(page, refused.answer, [])

    def _route(self, method: str, parts: list[str]) -> Handler | None:
        gets: dict[tuple[str, ...], Handler] = {
            (): self.home, ("jobs",): self.jobs, ("runs",): self.runs, ("events",): self.events,
            ("cluster",): self.cluster, ("counts",): self.counts,
        }
        if method in ("GET", "HEAD"):
            if tuple(parts) in gets:
                return gets[tuple(parts)]
            if len(parts) == 2 and parts[0] == "jobs":
                return self.job
            if len(parts) == 2 and parts[0] == "runs":
                return self.run
            return None
        if parts == ["jobs", "bulk"]:
            return self.bulk
        if len(parts) == 3 and parts[0] == "jobs" and parts[2] in ("pause", "resume", "trigger", "backfill", "edit"):
            return self.job_action
        if len(parts) == 3 and parts[0] == "runs" and parts[2] == "cancel":
            return self.cancel_run
        return None

    # -- rendering -------------------------------------------------------------

    def render(self, page: Page | None, name: str, status: int = 200, **values: Any) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        template = self.env.get_template(name)
        body = template.render(
            csrf=page.csrf if page else "", auth=self.auth_enabled, logged_in=page.logged_in if page else False,
            path=page.scope["path"] if page else "", **values,
        ).encode()
        return status, body, list(security.HEADERS)

    def _error(
        self, scope: HTTPScope, status: int, message: str, set_cookies: list[tuple[bytes, bytes]], page: Page | None = None,
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        code, body, headers = self.render(page, "error.html", status, status_code=status, message=message)
        return code, body, [*set_cookies, *headers]

    def _refused(self, page: Page, answer: Answer, set_cookies: list[tuple[bytes, bytes]]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        if answer.status == 307:
            return self._on_follower(page, answer, set_cookies)
        if answer.status == 401 and self.auth_enabled:
            return 303, b"", [*set_cookies, (b"location", b"/ui/login")]
        status = answer.status if answer.status >= 400 else 502
        return self._error(page.scope, status, answer.problem, set_cookies, page)

    def _on_follower(
        self, page: Page, answer: Answer, set_cookies: list[tuple[bytes, bytes]]
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """This node follows, and the API sent the call to the leader
        (docs/api.md "General rules"). A page is sent to the same page,
        query and all, on the leader. A form is not sent on: a browser
        would not post it to another origin (`form-action 'self'`) nor
        carry this host's cookies there, so nothing is done and the page
        says where the leader is, with a link to the page the form came
        from there (docs/ui.md "On a follower")."""
        leader = urlsplit(answer.headers.get(b"location", b"").decode())
        origin = f"{leader.scheme}://{leader.netloc}"
        if page.scope["method"] in ("GET", "HEAD"):
            return 303, b"", [*set_cookies, (b"location", (origin + _self_url(page)).encode())]
        # The page the form came from: its `next`, else the action's own page.
        back = page.form.get("next") or page.scope["path"].rsplit("/", 1)[0]
        if not back.startswith("/ui") or back.startswith("//"):
            back = "/ui/"
        code, body, headers = self.render(
            page, "error.html", 503, status_code=503, link=origin + back, link_text=f"Open it on the leader, {origin}",
            message=f"this node is not the leader, so nothing was done: send the form again from the leader, {origin}",
        )
        return code, body, [*set_cookies, *headers]

    def _back(self, page: Page, default: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """Post/redirect/get: back to the page the form came from (only
        a console path: never an open redirect)."""
        target = page.form.get("next") or default
        if not target.startswith("/ui") or target.startswith("//"):
            target = default
        return 303, b"", [(b"location", target.encode())]

    # -- login -----------------------------------------------------------------

    async def _login(self, page: Page, what: str, method: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        next_path = page.query.get("next") or page.form.get("next") or "/ui/"
        if not next_path.startswith("/ui") or next_path.startswith("//"):
            next_path = "/ui/"
        if what == "logout":
            if method != "POST":
                return self.render(page, "error.html", 405, status_code=405, message="log out with the form")
            return 303, b"", [(b"location", b"/ui/login"), (b"set-cookie", security.cookie(
                security.SESSION_COOKIE, "", secure=self.tls, max_age_s=0))]
        if not self.auth_enabled:
            return 303, b"", [(b"location", b"/ui/")]
        if method != "POST":
            return self.render(page, "login.html", next=next_path, message="")
        token = page.form.get("token", "").strip()
        check = await ApiCaller(self.api, page.scope, token).call("GET", "/v1/jobs", {"limit": "1"})
        if check.status == 401:
            return self.render(page, "login.html", 401, next=next_path, message="unknown token")
        if check.status == 403:
            return self.render(page, "login.html", 403, next=next_path,
                               message="this token may not use the console: " + check.problem)
        if not check.ok and check.status != 307:
            return self.render(page, "login.html", check.status, next=next_path, message=check.problem)
        cookie = security.cookie(security.SESSION_COOKIE, self.sessions.seal(token), secure=self.tls,
                                 max_age_s=security.SESSION_AGE_S)
        return 303, b"", [(b"location", next_path.encode()), (b"set-cookie", cookie)]

    # -- pages -----------------------------------------------------------------

    async def home(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        now = present.now_utc()
        hour_ago = present.iso(now - timedelta(hours=1))
        recent = {}
        for status, query in (
            ("due", {"status": "waiting", "until": present.iso(now)}),
            ("running", {"status": "claimed"}),
            ("failed", {"status": "failed", "since": hour_ago}),
            ("missed", {"status": "missed", "since": hour_ago}),
        ):
            found = await page.get("/v1/runs", {**query, "limit": str(HOME_COUNT_MAX)})
            recent[status] = (len(found["runs"]), found["next_cursor"] is not None)
        failures = (await page.get("/v1/runs", {"status": "failed", "limit": "10"}))["runs"]
        metrics = await page.api.call("GET", "/metrics")
        if metrics.ok:
            self.chart.observe(metrics.body.decode(), trio.current_time())
        return self.render(page, "home.html", recent=recent, failures=failures, chart=self.chart.svg())

    async def counts(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """Jobs by state, a page of its own that the home page loads into
        itself: the counts the engine keeps (`GET /v1/jobs/counts`), one
        read a state whatever the number of jobs (docs/ui.md "Pages")."""
        counts = await page.get("/v1/jobs/counts")
        return self.render(page, "counts.html", counts={state: counts[state] for state in STATES})

    async def jobs(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        filters = _job_filters(page.query_pairs)
        query = [*filters, ("limit", str(PAGE_ROWS)), ("cursor", page.query.get("cursor", ""))]
        found = await page.get("/v1/jobs", query)
        now = present.now_utc()
        for job in found["jobs"]:
            job["countdown"] = present.countdown(job.get("next_run_at"), now)
        return self.render(
            page, "jobs.html", jobs=found["jobs"], next_cursor=found["next_cursor"], filters=dict(filters),
            labels=[v for k, v in filters if k == "label"], states=STATES,
            filter_query=urlencode(filters), self_url=_self_url(page),
        )

    async def job(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        job_id = parts[1]
        job = await page.get(f"/v1/jobs/{quote(job_id)}")
        schedule = {k: v for k, v in job["schedule"].items() if k in ("at", "cron", "timezone", "every_s", "start_at", "dst")}
        preview = await page.api.call("POST", "/v1/schedules/preview", body={"schedule": schedule, "count": 10})
        slots = preview.json()["occurrences"] if preview.ok else []
        # Upstream and downstream jobs, one step each way (docs/semantics.md "Dependencies").
        graph = await page.get(f"/v1/jobs/{quote(job_id)}/graph")
        runs = await page.get(f"/v1/jobs/{quote(job_id)}/runs", {"limit": str(PAGE_ROWS),
                                                                  "cursor": page.query.get("cursor", "")})
        attempts = []
        for run in runs["runs"][:5]:
            if run["attempt"]:
                detail = await page.get(f"/v1/runs/{quote(run['id'])}")
                attempts.append(detail)
        events = await _job_events(page, job_id)
        labels_text = "\n".join(f"{k}={v}" for k, v in job.get("labels", {}).items())
        return self.render(
            page, "job.html", job=job, slots=slots, slots_error=None if preview.ok else preview.problem,
            runs=runs["runs"], next_cursor=runs["next_cursor"], attempts=attempts, events=events,
            labels_text=labels_text, overlaps=OVERLAPS, self_url=_self_url(page), graph=graph,
            countdown=present.countdown(job.get("next_run_at"), present.now_utc()),
        )

    async def runs(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        query = {k: page.query.get(k, "") for k in ("status", "since", "until", "cursor")}
        found = await page.get("/v1/runs", {**query, "limit": str(PAGE_ROWS)})
        filters = {k: v for k, v in query.items() if k != "cursor" and v}
        return self.render(page, "runs.html", runs=found["runs"], next_cursor=found["next_cursor"], filters=filters,
                           statuses=STATUSES, filter_query=urlencode(filters), self_url=_self_url(page))

    async def run(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        run = await page.get(f"/v1/runs/{quote(parts[1])}")
        return self.render(page, "run.html", run=run, self_url=_self_url(page))

    async def events(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """The owner's feed newest first, paged back with `before`."""
        before = page.query.get("before", "")
        found = await page.get("/v1/events", {"order": "desc", "before": before, "limit": str(PAGE_ROWS)})
        return self.render(page, "events.html", events=found["events"], next_cursor=found["next_cursor"],
                           before=before, self_url=_self_url(page))

    async def cluster(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        view = await page.get("/v1/cluster")
        ready = await page.api.call("GET", "/readyz")
        lead_s = None
        metrics = await page.api.call("GET", "/metrics")
        if metrics.ok:
            for line in metrics.body.decode().splitlines():
                if line.startswith("tempo_clock_lead_seconds "):
                    lead_s = line.split()[1]
        return self.render(page, "cluster.html", view=view, ready=ready.json() or {}, lead_s=lead_s,
                           lag=view["commit_index"] - view["applied_index"])

    # -- actions ---------------------------------------------------------------

    async def job_action(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        job_id, what = parts[1], parts[2]
        base = f"/v1/jobs/{quote(job_id)}"
        back = f"/ui/jobs/{quote(job_id)}"
        if what == "pause":
            note = page.form.get("note", "").strip()
            await page.act("POST", f"{base}/pause", {"note": note} if note else None)
        elif what == "resume":
            await page.act("POST", f"{base}/resume")
        elif what == "trigger":
            # A run due now, beside the schedule, which it never moves (docs/api.md "trigger").
            await page.act("POST", f"{base}/trigger")
        elif what == "backfill":
            await page.act("POST", f"{base}/backfill", {"from": page.form.get("from", ""),
                                                        "until": page.form.get("until", "")})
        else:
            current = await page.get(base)
            patch = _edit_patch(page.form, current)
            await page.act("PATCH", base, patch, {"if-match": f'"{page.form.get("version", "")}"'})
        return self._back(page, back)

    async def cancel_run(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        await page.act("POST", f"/v1/runs/{quote(parts[1])}/cancel")
        return self._back(page, f"/ui/runs/{quote(parts[1])}")

    async def bulk(self, page: Page, parts: list[str]) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """Pause or resume every job the filter matches: first a page that
        says how many, then, confirmed, one API call per job."""
        action = page.form.get("action", "")
        if action not in ("pause", "resume"):
            return self.render(page, "error.html", 400, status_code=400, message="action: pause or resume")
        filters = _job_filters(page.form_pairs)
        ids: list[str] = []
        cursor = ""
        while True:
            found = await page.get("/v1/jobs", [*filters, ("limit", str(limits.page_limit_max)), ("cursor", cursor)])
            ids += [j["id"] for j in found["jobs"]]
            if len(ids) > BULK_JOBS_MAX:
                return self.render(page, "error.html", 400, status_code=400,
                                   message=f"the filter matches more than {BULK_JOBS_MAX} jobs: narrow it")
            if not found["next_cursor"]:
                break
            cursor = found["next_cursor"]
        note = page.form.get("note", "").strip()
        if page.form.get("confirm") != str(len(ids)):
            return self.render(page, "confirm.html", action=action, count=len(ids), filters=filters, note=note)
        done, refused = 0, []
        for job_id in ids:
            body = {"note": note} if action == "pause" and note else None
            answer = await page.api.call("POST", f"/v1/jobs/{quote(job_id)}/{action}", body=body)
            if answer.ok:
                done += 1
            else:
                refused.append((job_id, answer.problem))
        return self.render(page, "bulk_done.html", action=action, done=done, refused=refused,
                           back="/ui/jobs?" + urlencode(filters))

    # -- live ------------------------------------------------------------------

    async def _live(self, page: Page, send: ASGISendCallable) -> None:
        """Server-Sent Events: a `change` each time the node has applied
        more, which the pages' htmx parts take as their cue to refresh
        (they also poll, for browsers without EventSource)."""
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-store"), *security.HEADERS[:3]]})
        if page.scope["method"] == "HEAD":
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        last = None
        with trio.move_on_after(LIVE_STREAM_S):
            while True:
                answer = await page.api.call("GET", "/v1/cluster")
                if not answer.ok:
                    break
                applied = answer.json()["applied_index"]
                if applied != last:
                    await send({"type": "http.response.body", "body": f"data: {applied}\n\n".encode(),
                                "more_body": True})
                    last = applied
                await trio.sleep(LIVE_POLL_S)
        await send({"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": False})


def _job_filters(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The jobs filter the API takes (docs/api.md "GET /v1/jobs"), from a
    page's query or a bulk form; empty values are left out."""
    return [(k, v) for k, v in pairs if k in ("state", "label", "target", "name_prefix") and v]


async def _job_events(page: Page, job_id: str) -> list[dict[str, Any]]:
    """The job's latest events, newest first: one page of the feed read
    newest first for this job (`GET /v1/events?order=desc&job_id=`), which
    reads at most `limits.events_filter_rows_max` of the owner's events."""
    found = await page.api.call("GET", "/v1/events", {"order": "desc", "job_id": job_id, "limit": str(JOB_EVENTS)})
    if not found.ok:
        return []
    events: list[dict[str, Any]] = found.json()["events"]
    return events


def _edit_patch(form: dict[str, str], current: dict[str, Any]) -> dict[str, Any]:
    """A merge patch (docs/api.md "Change a job") from the edit form: the
    schedule, overlap, timeout and labels. Values go to the API unchecked:
    it says what is wrong with them, in its own words."""
    patch: dict[str, Any] = {}
    kind = form.get("kind", "")
    if kind == "cron":
        patch["schedule"] = {"cron": form.get("cron", ""), "timezone": form.get("timezone") or "UTC",
                             "every_s": None, "at": None, "start_at": None}
    elif kind == "every_s":
        raw = form.get("every_s", "")
        patch["schedule"] = {"every_s": int(raw) if raw.isdecimal() else raw, "cron": None, "timezone": None,
                             "at": None}
    if "overlap" in form:
        patch["overlap"] = form["overlap"]
    if "timeout_s" in form:
        raw = form["timeout_s"].strip()
        patch["timeout_s"] = None if not raw else int(raw) if raw.isdecimal() else raw
    if "labels" in form:
        labels: dict[str, str | None] = dict.fromkeys(current.get("labels", {}))
        for line in form["labels"].replace(",", "\n").splitlines():
            if line.strip():
                key, _, value = line.partition("=")
                labels[key.strip()] = value.strip()
        patch["labels"] = labels
    return patch


def _self_url(page: Page) -> str:
    query = page.scope.get("query_string", b"").decode("latin-1")
    return page.scope["path"] + (f"?{query}" if query else "")


def _clip(text: object, chars: int = 2000) -> str:
    """A bounded piece of a user's text (escaped by the template)."""
    text = "" if text is None else str(text)
    return text if len(text) <= chars else text[:chars] + f"… ({len(text) - chars} more characters)"


def _cookies(scope: HTTPScope) -> dict[str, str]:
    from http.cookies import CookieError, SimpleCookie

    jar: SimpleCookie = SimpleCookie()
    for name, value in scope["headers"]:
        if name == b"cookie":
            try:
                jar.load(value.decode("latin-1"))
            except CookieError:
                continue
    return {key: morsel.value for key, morsel in jar.items()}


async def _read_form(receive: ASGIReceiveCallable) -> list[tuple[str, str]]:
    chunks: list[bytes] = []
    size = 0
    with trio.fail_after(limits.body_read_timeout_s):
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > FORM_BYTES_MAX:
                raise ValueError(f"the form is over {FORM_BYTES_MAX} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
    return parse_qsl(b"".join(chunks).decode("utf-8", "replace"), keep_blank_values=True)


async def _send(
    send: ASGISendCallable, status: int, body: bytes, headers: list[tuple[bytes, bytes]], content_type: bytes | None,
    *, head_only: bool = False,
) -> None:
    head = list(headers)
    if content_type is not None and not any(name == b"content-type" for name, _ in head):
        head.insert(0, (b"content-type", content_type))
    head.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": b"" if head_only else body, "more_body": False})
