"""`GET /v1/events` (docs/api.md "Events"), mixed into `net/api.py`'s
`Api`: the owner's feed oldest first, a long poll for what comes next,
or pages newest first."""

from collections.abc import Callable

import trio

from tempo import clock, errors, ids, limits
from tempo.engine import Event
from tempo.net.asgi import Request, Response, encode, watching
from tempo.net.handlers import Handlers, is_decimal, page_limit
from tempo.schema import EventOut, EventsPage


class EventHandlers(Handlers):
    """`GET /v1/events`, in either order."""

    async def events(self, request: Request) -> Response:
        limit = page_limit(request)
        order = request.query.get("order", "asc")
        if order not in ("asc", "desc"):
            raise errors.Invalid.at("query.order", "asc or desc")
        if order == "desc":
            return self._events_desc(request, limit)
        for name in ("before", "job_id"):
            if name in request.query:
                raise errors.Invalid.at(f"query.{name}", "only with order=desc")
        after_raw = request.query.get("after") or "0"
        if not is_decimal(after_raw) or len(after_raw) > 19:
            raise errors.Invalid.at("query.after", "not a cursor this server gave out")
        wait_s = _wait_param(request)
        after = int(after_raw)
        read = self._event_reader(request, after, limit)
        found: list[tuple[str | None, int, Event]] = []
        if wait_s > 0:
            # A long poll ends when its client leaves, and frees its slot.
            async with watching(request.receive) as client:
                with self._long_poll(wait_s), trio.move_on_after(wait_s), client.scope:
                    while not (found := read()):
                        await self.dispatcher.events_changed.wait()
        if not found:
            found = read()
        events = [
            EventOut(str(seq), e.type, clock.iso_from_ms(e.at_ms), e.job_id, e.run_id, e.detail, owner)
            for owner, seq, e in found
        ]
        response = encode(request, EventsPage(events, events[-1].cursor if events else after_raw))
        return response if events else self._retry_hint(response)

    def _events_desc(self, request: Request, limit: int) -> Response:
        """`GET /v1/events?order=desc`: a page newest first, from `before`
        (docs/api.md "Events"); `next_cursor` is null once the oldest event
        kept was read."""
        for name in ("after", "wait_s"):
            if name in request.query:
                raise errors.Invalid.at(f"query.{name}", "only with order=asc (newest first pages with before)")
        before_raw = request.query.get("before")
        if before_raw is not None and (not is_decimal(before_raw) or len(before_raw) > 19):
            raise errors.Invalid.at("query.before", "not a cursor this server gave out")
        job_id = request.query.get("job_id")
        if job_id is not None and not ids.is_job_id(job_id):
            raise errors.Invalid.at("query.job_id", "not a job ID")
        sees_all = self._sees_all(request)
        found, next_seq = self.store.list_events_desc(
            None if sees_all else self.owner(request), None if before_raw is None else int(before_raw), limit, job_id,
        )
        events = [
            EventOut(str(seq), e.type, clock.iso_from_ms(e.at_ms), e.job_id, e.run_id, e.detail,
                     owner if sees_all else None)
            for owner, seq, e in found
        ]
        return encode(request, EventsPage(events, None if next_seq is None else str(next_seq)))


    def _event_reader(self, request: Request, after: int, limit: int) -> Callable[[], list[tuple[str | None, int, Event]]]:
        """How `GET /v1/events` reads a page: the token's owner's feed, or
        for an admin every owner's, merged by sequence (the cursor is the
        sequence, one counter over all owners), each event naming its owner."""
        if self._sees_all(request):
            def every_owner() -> list[tuple[str | None, int, Event]]:
                return [(owner, seq, e) for owner, seq, e in self.store.events_of_all(after, limit)]

            return every_owner
        owner = self.owner(request)

        def own() -> list[tuple[str | None, int, Event]]:
            return [(None, seq, e) for seq, e in self.store.list_events(owner, after, limit)]

        return own


def _wait_param(request: Request) -> float:
    raw = request.query.get("wait_s")
    if raw is None:
        return 0.0
    try:
        wait_s = float(raw)
    except ValueError:
        wait_s = -1.0
    if not 0 <= wait_s <= limits.events_wait_s_max:
        raise errors.Invalid.at("query.wait_s", f"a number from 0 to {limits.events_wait_s_max}")
    return wait_s

