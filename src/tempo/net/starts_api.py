"""Pre-dispatch's side of the HTTP API (docs/api.md "POST /v1/starts",
docs/semantics.md "Pre-dispatch"): the server's time a claim that looks
ahead answers with, and a worker's question whether the runs it holds
may start at their due times."""

from collections.abc import Callable

from tempo import clock
from tempo.engine import Dispatcher
from tempo.net.asgi import Request, Response, decode, decoders, encode
from tempo.schema import StartsIn, StartsOut

_starts = decoders(StartsIn)


class StartsHandlers:
    """`POST /v1/starts`, and the claim's `server_time`."""

    dispatcher: Dispatcher
    owner: Callable[[Request], str | None]
    _may_touch: Callable[[Request, str], bool]

    def server_time(self, ahead_ms: int) -> str | None:
        """The leader's scheduler time for a claim's answer, with `ahead_ms`
        > 0 only: a worker corrects its clock offset by it before it starts
        a run at its `due_at`."""
        return clock.iso_from_ms(self.dispatcher.now_ms()) if ahead_ms else None

    async def starts(self, request: Request) -> Response:
        """Whether runs claimed ahead of their due times may start, answered
        no earlier than `limits.predispatch_stop_ms` before the latest due
        time among them (`Dispatcher.starts`). Runs this token may not
        touch, and unknown ones, are not to start."""
        body = decode(request, _starts)
        runs = [(item.run_id, item.attempt) for item in body.runs]
        allowed = [run for run in runs if self._may_touch(request, run[0])]
        go = await self.dispatcher.starts(self.owner(request), body.worker, allowed) if allowed else []
        started = {run_id for (run_id, _), ok in zip(allowed, go, strict=True) if ok}
        start = [run_id for run_id, _ in runs if run_id in started]
        return encode(request, StartsOut(start, [run_id for run_id, _ in runs if run_id not in started]))
