"""Pre-dispatch's side of the HTTP API (docs/api.md "POST /v1/starts",
docs/semantics.md "Pre-dispatch"): a worker's question whether the
runs it claimed ahead may start at their due times. The claim's
`server_time` is in net/workers_api.py."""

from tempo.net.asgi import Request, Response, decode, decoders, encode
from tempo.net.handlers import Handlers
from tempo.schema import StartsIn, StartsOut

_starts = decoders(StartsIn)


class StartsHandlers(Handlers):
    """`POST /v1/starts`."""

    async def starts(self, request: Request) -> Response:
        """Whether runs claimed ahead of their due times may start, answered
        no earlier than `limits.predispatch_stop_ms` before the latest due
        time among them (`Dispatcher.starts`). Runs this token may not
        touch, and unknown ones, are not to start."""
        body = decode(request, _starts)
        runs = [(item.run_id, item.attempt) for item in body.runs]
        # A token of no listed queues touches every run: no job read each.
        allowed = runs if request.principal.queues is None else [r for r in runs if self._may_touch(request, r[0])]
        go = await self.dispatcher.starts(self.owner(request), body.worker, allowed) if allowed else []
        if allowed is runs and all(go):
            # The usual answer, at a wave's stop point: every run starts.
            return encode(request, StartsOut([run_id for run_id, _ in runs], []))
        started = {run_id for (run_id, _), ok in zip(allowed, go, strict=True) if ok}
        start = [run_id for run_id, _ in runs if run_id in started]
        return encode(request, StartsOut(start, [run_id for run_id, _ in runs if run_id not in started]))
