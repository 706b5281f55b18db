"""The runs' handlers (docs/api.md "Runs"), mixed into `net/api.py`'s
`Api`: a job's runs, every run of the owner, one run, its cancel; with
the run's view (its lease as heartbeats extended it, and what its job's
calendar will do with it)."""

from collections import Counter

import msgspec

from tempo import clock, errors, limits
from tempo.engine import ORDER_TAIL_BYTES, STATUS_CODE, STATUSES, Run
from tempo.net import views
from tempo.net.asgi import Request, Response, encode
from tempo.net.handlers import Handlers, is_decimal, page_limit
from tempo.schema import Instant, RunCalendarOut, RunOut, RunsPage

_instant = msgspec.json.Decoder(Instant)
_json_enc = msgspec.json.Encoder()


class RunHandlers(Handlers):
    """`GET /v1/jobs/{id}/runs`, `GET /v1/runs`, `GET /v1/runs/{run_id}` and its cancel."""

    cancels: Counter[str]  # set up by `Api.__init__`, shown in /metrics

    async def list_runs(self, request: Request, job_id: str) -> Response:
        limit = page_limit(request)
        since_ms = _instant_param(request, "since")
        until_ms = _instant_param(request, "until")
        cursor = request.query.get("cursor") or None
        cursor_ms = None
        if cursor is not None:
            if not is_decimal(cursor) or len(cursor) > 16:
                raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
            cursor_ms = int(cursor)
        found, next_ms = self.store.list_runs(
            self._owner_of_job(request, job_id), job_id, since_ms=since_ms, until_ms=until_ms, limit=limit, cursor_ms=cursor_ms
        )
        next_cursor = None if next_ms is None else str(next_ms)
        return encode(request, RunsPage([self.run_view(r) for r in found], next_cursor))

    async def cancel_run(self, request: Request, run_id: str) -> Response:
        """`POST /v1/runs/{id}/cancel` (docs/api.md "Cancel a run"): the job
        owner's (an admin's for every owner); answers the run as it is now."""
        run = await self.jobs.cancel_run(self._owner_of_run(request, run_id), run_id)
        self.cancels["requested" if run.status == "claimed" else "cancelled"] += 1
        return encode(request, views.run_detail_view(run, self.run_view(run)))

    async def get_run(self, request: Request, run_id: str) -> Response:
        run, _ = self.store.get_run(self._owner_of_run(request, run_id), run_id)
        detail = views.run_detail_view(run, self.run_view(run))
        if run.triggered:  # a dependent job's runs are made as triggered ones are
            detail.caused_by = views.cause_views(self.store.caused_by(run.job_id, run.nominal_ms))
        return encode(request, detail)


    async def list_all_runs(self, request: Request) -> Response:
        """Runs across the owner's jobs (an admin's: every owner's), from
        the runs-by-status index (docs/api.md "GET /v1/runs")."""
        limit = page_limit(request)
        status = request.query.get("status")
        if status is not None and status not in STATUS_CODE:
            raise errors.Invalid.at("query.status", f"one of {', '.join(STATUSES)}")
        since_ms = _instant_param(request, "since")
        until_ms = _instant_param(request, "until")
        raw_cursor = request.query.get("cursor") or None
        cursor = None
        if raw_cursor is not None:
            try:
                cursor = bytes.fromhex(raw_cursor)
            except ValueError:
                cursor = None
            if cursor is None or len(cursor) != ORDER_TAIL_BYTES:
                raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
        owner = None if self._sees_all(request) else self.owner(request)
        found, next_tail = self.store.list_owner_runs(
            owner, status=status, limit=limit, cursor=cursor, since_ms=since_ms, until_ms=until_ms
        )
        next_cursor = None if next_tail is None else next_tail.hex()
        return encode(request, RunsPage([self.run_view(r) for r in found], next_cursor))

    def run_view(self, run: Run) -> RunOut:
        """The stored run, with the lease as heartbeats extended it in memory."""
        view = views.run_view(run)
        if run.status == "waiting" and self.store.has_calendar(run.job_id):
            view.calendar = self._calendar_note(run)
        if run.status == "claimed":
            lease_ms = self.dispatcher.lease_of(run.job_id, run.nominal_ms, run.attempt)
            if lease_ms is not None:
                view.lease_expires_at = clock.iso_from_ms(lease_ms)
        return view

    def _calendar_note(self, run: Run) -> RunCalendarOut | msgspec.UnsetType:
        """What the job's calendar will do with the waiting run at its
        claim (docs/semantics.md "Calendars"); unset: it runs where it waits."""
        job = self.store.get_job_any(run.job_id)
        note = None if job is None else self.jobs.calendars.claim_note(job, run, self.jobs.now_ms())
        if note is None:
            return msgspec.UNSET
        action, at_ms, why = note
        assert action in ("skip", "move")
        return RunCalendarOut("skip" if action == "skip" else "move", why, None if at_ms is None else clock.iso_from_ms(at_ms))


def _instant_param(request: Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        at_ms = clock.ms_from_datetime(_instant.decode(_json_enc.encode(raw)))
    except msgspec.MsgspecError:
        raise errors.Invalid.at(f"query.{name}", "an RFC 3339 time with an offset") from None
    if not limits.instant_ms_min <= at_ms <= limits.instant_ms_max:
        raise errors.Invalid.at(f"query.{name}", "outside years 0001 to 9999 in UTC")
    # No run is before 1970: an earlier bound means the same as 1970, and
    # keys hold unsigned milliseconds.
    return max(0, at_ms)

