"""The workers' handlers (docs/api.md "Workers"), mixed into `net/api.py`'s
`Api`: claim, heartbeat (one run or many), signals, result (one or many).
A worker token touches only runs of its owner's listed queues."""

from collections.abc import Callable

import trio

from tempo import clock, errors, ids, limits
from tempo.engine import ClaimedRun, ClaimKey, Result, Run, RunCancel, queues_hash
from tempo.net import views
from tempo.net.asgi import (
    Request,
    Response,
    decode,
    decoders,
    encode,
    send_body,
    send_head,
    watching,
)
from tempo.net.handlers import Handlers
from tempo.schema import (
    BatchAck,
    ClaimIn,
    ClaimOut,
    HeartbeatIn,
    HeartbeatOut,
    HeartbeatsAck,
    HeartbeatsIn,
    Rejected,
    ResultIn,
    ResultsIn,
    RunOut,
    SignalsIn,
    SignalsOut,
)

_claim = decoders(ClaimIn)
_heartbeat = decoders(HeartbeatIn)
_heartbeats = decoders(HeartbeatsIn)
_signals = decoders(SignalsIn)
_result = decoders(ResultIn)
_results = decoders(ResultsIn)


class WorkerHandlers(Handlers):
    """The paths a worker token calls: `/v1/claim`, heartbeats, `/v1/signals` and results."""

    run_view: Callable[[Run], RunOut]  # `RunHandlers`'

    def _queues(self, request: Request, names: list[str]) -> list[str]:
        return [f"{self.owner(request)}\x00{name}" for name in names]

    def server_time(self, ahead_ms: int) -> str | None:
        """The leader's scheduler time for a claim's answer, with `ahead_ms`
        > 0 only: a worker corrects its clock offset by it before it starts
        a run at its `due_at` (docs/semantics.md "Pre-dispatch")."""
        return clock.iso_from_ms(self.dispatcher.now_ms()) if ahead_ms else None

    async def claim(self, request: Request) -> Response:
        body = decode(request, _claim)
        allowed = request.principal.queues
        if allowed is not None and not set(body.queues) <= allowed:
            raise errors.Forbidden(f"this token may claim only from {sorted(allowed)}")
        # A queue named twice counts once (the dispatcher takes distinct queues).
        queues = self._queues(request, list(dict.fromkeys(body.queues)))
        key = None
        if body.claim_key is not None:
            # A pattern's `$` also matches before a final newline.
            if body.claim_key.endswith("\n"):
                raise errors.Invalid.at("claim_key", "must not end with a newline")
            key = ClaimKey(self.owner(request), body.claim_key, queues_hash(body.queues))
        claimed: list[ClaimedRun] = []
        # A claim follows its client (docs/api.md "Claims and disconnects"):
        # one that leaves while the claim waits ends the wait and takes
        # nothing; one that leaves before the answer's head is sent gets
        # nothing sent, and the runs claimed for it go back to waiting.
        async with watching(request.receive) as client:
            with self._long_poll(body.wait_s), client.scope:
                # Lets a disconnect already queued be seen before runs are taken.
                await trio.lowlevel.checkpoint()
                claimed = await self.dispatcher.claim(queues, body.worker, body.max_runs, body.wait_s, key, body.ahead_ms)
            claimed_views = []
            for start in range(0, len(claimed), limits.batch_slice_items):
                if start:
                    # The views in slices (docs/operations.md "Event-loop
                    # lag"); not a point of cancellation: the runs are claimed.
                    await trio.lowlevel.cancel_shielded_checkpoint()
                claimed_views += [
                    views.claimed_view(c.run, c.job) for c in claimed[start : start + limits.batch_slice_items]
                ]
            response = encode(request, ClaimOut(claimed_views, self.server_time(body.ahead_ms)))
            if not claimed:
                self._retry_hint(response)
            if not client.gone:
                await send_head(request.send, response)
        if client.gone:
            self.dispatcher.release(claimed)
            response.sent = True  # to nobody: the client has gone
        else:
            await send_body(request.send, response)
        return response

    async def heartbeat(self, request: Request, run_id: str) -> Response:
        body = decode(request, _heartbeat)
        if not self._may_touch(request, run_id):
            raise errors.NotFound(f"no run {run_id}")
        expires_ms, cancel = self.dispatcher.beat(self.owner(request), run_id, body.attempt)
        return encode(request, HeartbeatOut(clock.iso_or_none(expires_ms), cancel))

    async def heartbeats(self, request: Request) -> Response:
        body = decode(request, _heartbeats)
        ack = HeartbeatsAck([], [])
        for item in body.heartbeats:
            if not self._may_touch(request, item.run_id):
                ack.rejected.append(Rejected(item.run_id, "not_found"))
                continue
            try:
                _, cancel = self.dispatcher.beat(self.owner(request), item.run_id, item.attempt)
            except errors.TempoError as exc:
                ack.rejected.append(Rejected(item.run_id, exc.type))
            else:
                ack.accepted.append(item.run_id)
                if cancel is not None:
                    ack.cancel[item.run_id] = cancel
        return encode(request, ack)

    async def signals(self, request: Request) -> Response:
        """A worker's long poll of its runs' signals (docs/api.md "Signals"):
        answered as soon as one of them is to stop, or empty after `wait_s`.
        It extends no lease. Runs this token may not touch are left out, as
        unknown ones are: their heartbeats say what became of them."""
        body = decode(request, _signals)
        runs = [(item.run_id, item.attempt) for item in body.runs if self._may_touch(request, item.run_id)]
        found: dict[str, RunCancel] = {}
        # A poll ends when its client leaves (a worker that polls again
        # with more runs), and frees its slot at once.
        async with watching(request.receive) as client:
            with self._long_poll(body.wait_s), client.scope:
                found = await self.dispatcher.signals(self.owner(request), runs, body.wait_s)
        response = encode(request, SignalsOut(found))
        return response if found else self._retry_hint(response)

    async def result(self, request: Request, run_id: str) -> Response:
        body = decode(request, _result)
        _check_texts(body.output, body.error, "")
        parsed = ids.parse_run_id(run_id)
        if parsed is None or not self._may_touch(request, run_id):
            raise errors.NotFound(f"no run {run_id}")
        result = Result(parsed[0], parsed[1], body.attempt, body.ok, body.output, body.error)
        [outcome] = await self.dispatcher.report(self.owner(request), [result])
        if isinstance(outcome, errors.TempoError):
            raise outcome
        return encode(request, self.run_view(outcome))

    async def results(self, request: Request) -> Response:
        body = decode(request, _results)
        ack = BatchAck([], [])
        batch: list[Result] = []
        names: list[str] = []
        may_touch_all = request.principal.queues is None
        for i, item in enumerate(body.results):
            if item.output is not None or item.error is not None:
                _check_texts(item.output, item.error, f"results[{i}].")
            parsed = ids.parse_run_id(item.run_id)
            if parsed is None or not (may_touch_all or self._may_touch(request, item.run_id)):
                ack.rejected.append(Rejected(item.run_id, "not_found"))
                continue
            batch.append(Result(parsed[0], parsed[1], item.attempt, item.ok, item.output, item.error))
            names.append(item.run_id)
        outcomes = await self.dispatcher.report(self.owner(request), batch) if batch else []
        for run_id, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, errors.TempoError):
                ack.rejected.append(Rejected(run_id, outcome.type))
            else:
                ack.accepted.append(run_id)
        return encode(request, ack)


def _check_texts(output: str | None, error: str | None, prefix: str) -> None:
    for name, text in (("output", output), ("error", error)):
        # Encoded only when it may be over: a character is at most 4 bytes.
        if (
            text is not None
            and len(text) * 4 > limits.output_bytes_max
            and len(text.encode()) > limits.output_bytes_max
        ):
            raise errors.TooLarge.at(f"{prefix}{name}", f"more than {limits.output_bytes_max} bytes")

