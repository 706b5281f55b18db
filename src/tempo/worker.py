"""A worker library: claim runs from tempo queues, run handlers, report results.

    async def report(run):            # run: the claimed run as a dict (docs/api.md
        ...                           # "Workers"): id, attempt, payload, ...
        return "done: 3 pages"        # output text, or None

    worker = Worker(["http://127.0.0.1:8700"], "w-1", {"reports": report}, concurrency=8)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        ...
        await worker.stop(grace_s=10)

What it does, in the terms of docs/api.md:

- Claims: one long-poll `POST /v1/claim` at a time over all handled queues,
  asking for at most `min(max_runs, free slots)` runs, so a claimed run always
  has a slot to run in at once (its lease does not tick away in a queue).
  Handlers run concurrently, at most `concurrency` at a time (a
  `trio.CapacityLimiter`). Each claim carries a new `claim_key` (unless
  `claim_keys=False`, for a server from before them); a claim
  whose outcome is unknown (a connection error, a timeout, a `5xx`, a leader
  change) is sent again with the same key, to any URL, for at most
  `limits.claim_retry_s_max`, and answers the runs the first one took
  (docs/semantics.md "Idempotent claims"). An empty answer with
  `Retry-After` (a node that is stopping) is followed by a pause that long,
  at most `retry_after_s_max`, before the next claim.
- Heartbeats: every claimed run is heartbeated at a third of its `lease_s`,
  all due ones in one `POST /v1/heartbeats`. A run the server rejects
  (`stale_attempt`, `not_found`), or whose lease passes without a heartbeat
  getting through, is lost: its handler is cancelled and no result is sent.
- Stopping a run (docs/semantics.md "Run timeouts", "Cancelling a run"):
  one long poll `POST /v1/signals` at a time names the runs the handlers
  hold and is answered as soon as one of them is to stop, so a cancel, a
  `cancel_other` or a timeout reaches the handler within a second whatever
  the lease; runs claimed while it waits are added by sending it again,
  at most every `signals_settle_s`. Its answer, or a heartbeat answer,
  that names a run in its `cancel` map cancels its handler's task scope.
  `timeout`: the attempt ended on the server, and no result is sent (it
  would be stale). `requested`: its owner cancelled it; the result is
  sent, `ok=false` ("cancelled"), and the server records the run
  cancelled. A handler that finished before the stop reached it reports
  what it did (`done`, when it succeeded). A run with a `timeout_s` is
  heartbeated as its timeout passes too. A server without `/v1/signals`
  (`404`) is told by heartbeats alone.
- Pre-dispatch (`ahead_ms`, docs/semantics.md "Pre-dispatch"): claims also
  take runs due within `ahead_ms`; each waits in its slot, left out of the
  signals poll, until the leader says at `POST /v1/starts` that it may
  start and its due time has come (tempo/worker_ahead.py); one the leader
  says not to start, or that `stop()` ends first, sends no result.
- Results: `POST /v1/results`, batching whatever finished while the previous
  batch was in flight. A handler that raises reports `ok=false` with the
  exception's text as `error`; the server then retries per the job's backoff.
  A run keeps being heartbeated until its result is accepted. A batch the
  server refuses as a whole (400/413: one bad item) is resent one result at a
  time, so only the bad items are dropped (logged), never the rest.
- Stop: `await worker.stop(grace_s)` stops claiming at once (an in-flight
  long-poll is abandoned; any run it had claimed comes back when its lease
  expires), lets running handlers finish for up to `grace_s`, then cancels the
  rest and reports each as failed ("worker stopped"), so the server retries
  them after their backoff instead of waiting out a whole lease. Results are
  then flushed, bounded by `flush_timeout_s`, and `run()` returns.
- Network: every request is bounded with `trio.fail_after`; 307 redirects are
  followed (and the leader they point at is asked first next time); on a
  connection error, a timeout or a `503` the next URL is tried, and after a
  round of failures the worker backs off (jittered exponential) and retries,
  so a restarting server is picked up again without help. An https:// server's
  certificate is checked against `ca_file` when given (a private CA), else
  the system trust store.

Output and error text are cut to `limits.output_bytes_max` with a note saying
how much was cut, since the server rejects longer text.
"""

import contextlib
import logging
import math
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
import trio

from tempo import limits
from tempo.net.agent import USER_AGENT
from tempo.net.client import Unavailable, new_claim_key
from tempo.net.tls import client_context
from tempo.worker_ahead import Ahead, NotStarted

log = logging.getLogger("tempo.worker")

MSGPACK = "application/msgpack"
request_timeout_s = 10.0
backoff_s_min = 0.05
backoff_s_max = 5.0
# Redirects followed within one round over the URLs (a leader that moves).
redirects_max = 5
heartbeat_tick_s = 0.25
# How long the signals poll lets claims settle before it is sent again with
# their runs: a burst of claims costs one poll, and a run that finishes
# within it none. Well inside the second in which a cancel must arrive.
signals_settle_s = 0.2
# The wait of one signals poll; it is sent again at once when it ends.
signals_wait_s = 20
# After a signals poll failed (no server, an error answer): the pause
# before the next, heartbeats carrying cancels meanwhile.
signals_retry_s = 1.0
flush_timeout_s = 10.0
claim_wait_s_default = 20
# The longest `Retry-After` of an empty claim answer the worker waits out.
retry_after_s_max = 5.0
# Of a failed run's error, the characters its log line shows (the server keeps it all).
log_error_chars_max = 500
# Runs lost at one heartbeat tick named one line each, the rest in one line:
# a failover can leave thousands of held runs without a lease at once.
lost_lines_max = 10

Handler = Callable[[dict[str, Any]], Awaitable[str | None]]
# Called with each non-empty claim answer and the UNIX time it arrived at.
ClaimHook = Callable[[list[dict[str, Any]], float], None]
# Called with the run IDs of each results answer's `accepted` and its UNIX time.
ReportHook = Callable[[list[str], float], None]

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


class WorkerError(Exception):
    """An answer no retry can fix (400, 401, 403): a configuration error."""


def _check_int(name: str, value: object, lo: int, hi: int | None = None) -> None:
    """A public argument's bounds, checked with exceptions that `python -O`
    keeps (an `assert` would vanish)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name}: an int, not {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        raise ValueError(f"{name}: {lo}-{hi} (got {value})" if hi is not None else f"{name}: at least {lo} (got {value})")


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def clip_text(text: str, limit_bytes: int = limits.output_bytes_max) -> str:
    """`text` cut to at most `limit_bytes` UTF-8 bytes, with a note when cut."""
    raw = text.encode("utf-8", "replace")  # a lone surrogate becomes "?"
    if len(raw) <= limit_bytes:
        return raw.decode("utf-8")
    note = f"\n[tempo: truncated, {len(raw)} bytes in all]"
    keep = limit_bytes - len(note.encode())
    return raw[:keep].decode("utf-8", "ignore") + note


def queue_of(target: str) -> str | None:
    return target[len("queue:") :] if target.startswith("queue:") else None


class Transport:
    """MessagePack POSTs over several URLs, with failover and back-off."""

    def __init__(
        self, urls: Sequence[str], *, token: str | None = None, rng: random.Random | None = None,
        ca_file: str | None = None,
    ):
        if not urls:
            raise ValueError("urls: give at least one server URL")
        self.urls = [u.rstrip("/") for u in urls]
        self._index = 0
        self._rng = rng or random.Random()
        # trio clock: since when no URL answers (None while one does), for
        # the lines that say the server was lost and how long it was gone.
        self._down_since_s: float | None = None
        headers = {"Content-Type": MSGPACK, "Accept": MSGPACK, "User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Timeouts are set per request; a long-poll claim needs more than a
        # heartbeat. Redirects are followed here, not by httpx, which drops
        # the token on a redirect to another origin (every other node is one).
        self._http = httpx.AsyncClient(
            headers=headers,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
            verify=client_context(ca_file),
        )

    async def aclose(self) -> None:
        with trio.move_on_after(2) as scope:
            scope.shield = True
            await self._http.aclose()

    def _follow(self, response: httpx.Response) -> int | None:
        """The index of the leader a 307 points to (added to the URLs if new)."""
        location = response.headers.get("location")
        if response.status_code not in (307, 308) or not location:
            return None
        final = urlsplit(location)
        origin = f"{final.scheme}://{final.netloc}"
        if origin not in self.urls:
            self.urls.append(origin)
        return self.urls.index(origin)

    async def post(self, path: str, body: Any, *, timeout_s: float, deadline_s: float = math.inf) -> tuple[int, Any]:
        """(status, decoded body) of the first answer that is not 503 or 5xx.

        Retries until `deadline_s` (trio clock), then raises `Unavailable`.
        """
        status, answer, _ = await self.post_answer(path, body, timeout_s=timeout_s, deadline_s=deadline_s)
        return status, answer

    async def post_answer(
        self, path: str, body: Any, *, timeout_s: float, deadline_s: float = math.inf
    ) -> tuple[int, Any, httpx.Headers]:
        """`post`, with the answer's headers. Every attempt sends the same
        bytes: a claim retried carries its `claim_key` again."""
        content = _enc.encode(body)
        delay_s = backoff_s_min
        why = ""
        while True:
            for _ in range(len(self.urls) + redirects_max):
                url = self.urls[self._index]
                try:
                    with trio.fail_after(timeout_s):
                        response = await self._http.post(url + path, content=content, timeout=timeout_s)
                except (httpx.HTTPError, trio.TooSlowError) as exc:
                    log.debug("POST %s%s: %r", url, path, exc)
                    why = f"{url}: {exc or type(exc).__name__}"
                    self._index = (self._index + 1) % len(self.urls)
                    continue
                if response.status_code >= 500:
                    level = logging.DEBUG if response.status_code == 503 else logging.WARNING
                    log.log(level, "POST %s%s: %s", url, path, response.status_code)
                    why = f"{url}: {response.status_code}"
                    self._index = (self._index + 1) % len(self.urls)
                    continue
                leader = self._follow(response)
                if leader is not None:
                    self._index = leader
                    continue
                if self._down_since_s is not None:
                    outage_s = trio.current_time() - self._down_since_s
                    self._down_since_s = None
                    log.info("server %s answers again after %.1f s", url, outage_s, extra={"outage_s": outage_s})
                return response.status_code, _decode(response), response.headers
            if self._down_since_s is None:
                self._down_since_s = trio.current_time()
                log.warning("no server answers (%s); retrying with back-off", why or ", ".join(self.urls))
            if trio.current_time() + delay_s > deadline_s:
                raise Unavailable(f"no server answered POST {path}")
            # Full jitter keeps a fleet of workers from coming back in step.
            await trio.sleep(self._rng.uniform(delay_s / 2, delay_s))
            delay_s = min(backoff_s_max, delay_s * 2)


def _retry_after_s(headers: httpx.Headers) -> float:
    """The `Retry-After` of an answer in seconds (0 when absent or a date),
    at most `retry_after_s_max`."""
    raw = headers.get("retry-after", "")
    try:
        seconds = float(raw)
    except ValueError:
        return 0.0
    return min(max(seconds, 0.0), retry_after_s_max) if math.isfinite(seconds) else 0.0


def _decode(response: httpx.Response) -> Any:
    kind = response.headers.get("content-type", "")
    if not response.content:
        return None
    if kind.startswith(MSGPACK):
        return _dec.decode(response.content)
    try:
        return response.json()
    except ValueError:
        return {"detail": response.text[:500]}


@dataclass(eq=False)  # hashed by identity: one limiter borrower per attempt
class _Active:
    run: dict[str, Any]
    lease_s: float
    heartbeat_at_s: float  # trio clock: when the next heartbeat is due
    lease_deadline_s: float  # trio clock: the lease as far as this worker knows
    cancel: trio.CancelScope = field(default_factory=trio.CancelScope)
    finished: bool = False  # the handler is done; the result may still be pending
    lost: bool = False
    # trio clock: when the attempt's timeout passes, as far as this worker
    # knows (from the claim's answer; None: no timeout); a heartbeat goes
    # out then, to learn that it ended.
    timeout_deadline_s: float | None = None
    stop_requested: bool = False  # its owner cancelled it: the result says so
    # Claimed ahead of its due time and not started yet (worker_ahead.py):
    # left out of signals polls; stopped so, it sends no result.
    held: bool = False


class Worker:
    """Claims runs from `handlers`' queues and runs them; see the module doc."""

    def __init__(
        self,
        urls: Sequence[str] | str,
        worker_id: str,
        handlers: dict[str, Handler],
        *,
        max_runs: int = 100,
        concurrency: int = 16,
        wait_s: int = claim_wait_s_default,
        token: str | None = None,
        on_claimed: ClaimHook | None = None,
        on_reported: ReportHook | None = None,
        rng: random.Random | None = None,
        ca_file: str | None = None,
        claim_keys: bool = True,
        ahead_ms: int = 0,
    ):
        """`claim_keys=False` sends claims without a `claim_key`, for a
        server from before them (one that refuses the field): a claim
        whose answer is lost is then not answered again (its runs come
        back when their leases run out). `ahead_ms`: hold runs due within
        it, each in a slot, and start them at their due time (worker_ahead.py)."""
        if isinstance(urls, str):
            urls = [u.strip() for u in urls.split(",") if u.strip()]
        if not isinstance(worker_id, str):
            raise TypeError(f"worker_id: a str, not {type(worker_id).__name__}")
        if not 1 <= len(worker_id) <= limits.worker_chars_max:
            raise ValueError(f"worker_id: 1-{limits.worker_chars_max} characters (got {len(worker_id)})")
        if not isinstance(handlers, dict):
            raise TypeError(f"handlers: a dict of queue name to handler, not {type(handlers).__name__}")
        if not 1 <= len(handlers) <= limits.queues_per_claim_max:
            raise ValueError(f"handlers: 1-{limits.queues_per_claim_max} queues (got {len(handlers)})")
        _check_int("max_runs", max_runs, 1, limits.claim_runs_max)
        _check_int("concurrency", concurrency, 1)
        _check_int("wait_s", wait_s, 0, limits.claim_wait_s_max)
        _check_int("ahead_ms", ahead_ms, 0, limits.claim_ahead_ms_max)
        self.worker_id = worker_id
        self.handlers = dict(handlers)
        self.max_runs = max_runs
        self.concurrency = concurrency
        self.wait_s = wait_s
        self.claim_keys = claim_keys
        self._rng = rng or random.Random()
        self.transport = Transport(urls, token=token, rng=self._rng, ca_file=ca_file)
        self.ahead = Ahead(self.transport, worker_id, ahead_ms)
        self._on_claimed = on_claimed
        self._on_reported = on_reported
        # One token per handler not yet finished, borrowed when its run is
        # claimed: a claim asks for no more runs than there are tokens.
        self._limiter = trio.CapacityLimiter(concurrency)
        self._active: dict[str, _Active] = {}
        # trio clock: no run's heartbeat (nor lease's end) comes before this.
        self._check_at_s = math.inf
        self._slot_freed = trio.Event()
        self._results: list[dict[str, Any]] = []
        self._results_ready = trio.Event()
        self._claiming = trio.CancelScope()
        # Set (and replaced) when a run is started: the signals poll is sent
        # again with it (`_signals_loop`).
        self._runs_added = trio.Event()
        self._signals_served = True  # False once a server answered 404: heartbeats alone
        self._stopping = False
        self.stopped = trio.Event()  # set when run() has returned
        self._handlers_nursery: trio.Nursery | None = None
        self.counts = {"claimed": 0, "ok": 0, "failed": 0, "lost": 0, "rejected": 0, "not_started": 0}

    # -- public ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Works until `stop()`; raises `WorkerError` on a 4xx claim answer."""
        log.info("worker %s started: %s, queues %s, concurrency %d", self.worker_id, ",".join(self.transport.urls),
                 ",".join(sorted(self.handlers)), self.concurrency, extra={"worker": self.worker_id})
        try:
            async with trio.open_nursery() as service:
                service.start_soon(self._heartbeat_loop)
                service.start_soon(self._signals_loop)
                service.start_soon(self._results_loop)
                service.start_soon(self.ahead.run)
                async with trio.open_nursery() as handlers:
                    self._handlers_nursery = handlers
                    task_status.started()
                    with self._claiming:
                        await self._claim_loop()
                # Every handler has finished (or was cancelled by stop()).
                with trio.move_on_after(flush_timeout_s):
                    while self._results or any(not a.lost for a in self._active.values()):
                        await trio.sleep(0.01)
                service.cancel_scope.cancel()
        except* WorkerError as group:
            raise _first_leaf(group) from None
        finally:
            self.stopped.set()
            log.info("stopped: %d claimed, %d ok, %d failed, %d lost", self.counts["claimed"], self.counts["ok"],
                     self.counts["failed"], self.counts["lost"], extra={"worker": self.worker_id})
            await self.transport.aclose()

    async def stop(self, grace_s: float = 30.0) -> None:
        """Stops claiming; waits `grace_s` for handlers, then fails the rest."""
        self._stopping = True
        self._claiming.cancel()
        log.info("stopping: no more claims; %d runs may finish within %g s", self._limiter.borrowed_tokens, grace_s,
                 extra={"worker": self.worker_id})
        with trio.move_on_after(grace_s):
            while self._limiter.borrowed_tokens:
                await self._wait_slot()
        for active in self._active.values():
            if not active.finished:
                active.cancel.cancel()
        await self.stopped.wait()

    # -- claims ----------------------------------------------------------------

    async def _wait_slot(self) -> None:
        # The setter swaps in a fresh Event, so every waiter of the old one wakes.
        await self._slot_freed.wait()

    async def _claim_loop(self) -> None:
        queues = sorted(self.handlers)
        while not self._stopping:
            free = int(self._limiter.available_tokens)
            if free <= 0:
                await self._wait_slot()
                continue
            body = {
                "worker": self.worker_id, "queues": queues, "max_runs": min(self.max_runs, free), "wait_s": self.wait_s,
            } | self.ahead.claim_fields()
            if self.claim_keys:
                body["claim_key"] = new_claim_key(self._rng)
            try:
                status, answer, headers = await self.transport.post_answer(
                    "/v1/claim", body, timeout_s=self.wait_s + request_timeout_s,
                    deadline_s=trio.current_time() + limits.claim_retry_s_max,
                )
            except Unavailable:
                # Whatever that claim took comes back when its leases run out.
                log.warning("no server answered claim %s within %g s; claiming anew", body.get("claim_key"),
                            limits.claim_retry_s_max)
                continue
            if status != 200:
                raise WorkerError(f"POST /v1/claim answered {status}: {answer}")
            runs = answer["runs"]
            self.ahead.answered(answer, time.time())
            if not runs:
                pause_s = _retry_after_s(headers)
                if pause_s > 0:
                    await trio.sleep(pause_s)
                continue
            if self._on_claimed is not None:
                self._on_claimed(runs, time.time())
            for run in runs:
                self._start(run)

    def _start(self, run: dict[str, Any]) -> None:
        assert self._handlers_nursery is not None
        # A run held for its due time is leased from then (docs/semantics.md "Pre-dispatch").
        now_s = self.ahead.start_at_s(run) or trio.current_time()
        lease_s = float(run.get("lease_s") or limits.lease_s_default)
        active = _Active(run, lease_s, now_s + lease_s / 3, now_s + lease_s, held=self.ahead.start_at_s(run) is not None)
        timeout_s = run.get("timeout_s")
        if isinstance(timeout_s, int | float) and timeout_s > 0:
            active.timeout_deadline_s = now_s + timeout_s
            active.heartbeat_at_s = min(active.heartbeat_at_s, active.timeout_deadline_s)
        previous = self._active.get(run["id"])
        if previous is not None:
            # A re-delivery of a run this worker still holds: the old attempt is dead.
            previous.lost = True
            previous.cancel.cancel()
        self._active[run["id"]] = active
        self._check_at_s = min(self._check_at_s, active.heartbeat_at_s)
        # Never blocks: the claim asked for at most available_tokens runs.
        self._limiter.acquire_on_behalf_of_nowait(active)
        self.counts["claimed"] += 1
        self._handlers_nursery.start_soon(self._run_handler, active)
        self._watch_more()

    def _watch_more(self) -> None:
        """A run to watch for signals: the poll is sent again with it."""
        self._runs_added.set()
        self._runs_added = trio.Event()

    async def _run_handler(self, active: _Active) -> None:
        run = active.run
        started_s = trio.current_time()
        outcome: dict[str, Any] = {"run_id": run["id"], "attempt": run["attempt"]}
        try:
            with active.cancel:
                try:
                    handler = self.handlers[queue_of(run.get("target", "")) or ""]
                    held = active.held
                    if held:
                        await self.ahead.wait_start(run)
                        active.held = False
                        self._watch_more()
                    output = await handler(run)
                    if held:
                        # A wave of held runs starts on one event: every
                        # handler of it starts before any files its result
                        # (a handler that returns at once would otherwise
                        # make the next one wait for that too). Shielded:
                        # the handler finished, whatever comes now.
                        await trio.lowlevel.cancel_shielded_checkpoint()
                except NotStarted as stopped:  # held, and stopped before its due time: no result
                    self.counts["not_started"] += 1
                    self._lose(run["id"], run["attempt"], str(stopped))
                    return
                except Exception as exc:  # noqa: BLE001 - any handler error is the run's failure
                    outcome |= {"ok": False, "error": clip_text(f"{type(exc).__name__}: {exc}")}
                else:
                    outcome["ok"] = True
                    if output is not None:
                        outcome["output"] = clip_text(str(output))
            if active.cancel.cancelled_caught:
                if active.lost or active.held:  # a held run stopped before it started: its lease brings it back
                    self.counts["lost" if active.lost else "not_started"] += 1
                    _log_run_end(self.worker_id, run, "lost", trio.current_time() - started_s)
                    return
                why = "cancelled: its owner asked it to stop" if active.stop_requested else (
                    "worker stopped before the handler finished")
                outcome = {"run_id": run["id"], "attempt": run["attempt"], "ok": False, "error": why}
        finally:
            active.finished = True
            self._limiter.release_on_behalf_of(active)
            self._slot_freed.set()
            self._slot_freed = trio.Event()
        self.counts["ok" if outcome["ok"] else "failed"] += 1
        # The line says what happened: a handler stopped by a cancel is
        # `cancelled` (and so recorded), one that finished first is `ok`.
        said = "ok" if outcome["ok"] else "cancelled" if active.cancel.cancelled_caught and active.stop_requested else "failed"
        _log_run_end(self.worker_id, run, said, trio.current_time() - started_s, outcome.get("error"))
        self._results.append(outcome)
        self._results_ready.set()

    # -- heartbeats ------------------------------------------------------------

    def _lose(self, run_id: str, attempt: int, why: str, *, say: bool = True) -> bool:
        """Stops the attempt's handler, which no longer holds the run;
        answers whether it was this worker's. `say`: one line for it."""
        active = self._active.get(run_id)
        if active is None or active.run["attempt"] != attempt:
            return False
        if say:
            log.warning("run %s attempt %s lost (%s); cancelling its handler", run_id, attempt, why)
        active.lost = True
        active.cancel.cancel()
        del self._active[run_id]
        return True

    def _due_heartbeats(self, now_s: float) -> list[_Active]:
        """At `now_s` (trio clock): stops the handlers whose lease ran out,
        and answers the runs whose heartbeat is due (a batch at most). Looks
        at the runs only from the earliest heartbeat on (`_check_at_s`),
        which is due before its lease ends."""
        if now_s < self._check_at_s:
            return []
        why = "no heartbeat got through within the lease"
        _say_lost(self.worker_id, why, [
            run_id for run_id, active in list(self._active.items())
            if now_s > active.lease_deadline_s and self._lose(run_id, active.run["attempt"], why, say=False)
        ])
        self._check_at_s = min((a.heartbeat_at_s for a in self._active.values()), default=math.inf)
        return [a for a in self._active.values() if a.heartbeat_at_s <= now_s][: limits.batch_items_max]

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(heartbeat_tick_s)
            due = self._due_heartbeats(trio.current_time())
            if not due:
                continue
            sent_s = trio.current_time()
            body = {"heartbeats": [{"run_id": a.run["id"], "attempt": a.run["attempt"]} for a in due]}
            try:
                status, answer = await self.transport.post(
                    "/v1/heartbeats", body, timeout_s=request_timeout_s,
                    deadline_s=sent_s + min(a.lease_s for a in due) / 3,
                )
            except Unavailable:
                continue
            if status != 200:
                log.error("POST /v1/heartbeats answered %s: %s", status, answer)
                continue
            self._heartbeats_answered(due, sent_s, answer)

    def _heartbeats_answered(self, due: list[_Active], sent_s: float, answer: dict[str, Any]) -> None:
        """A heartbeats answer: leases of the accepted runs renewed from
        `sent_s` (trio clock), runs told to stop stopped, rejected ones lost."""
        accepted = set(answer.get("accepted", ()))
        for a in due:
            if a.run["id"] in accepted:
                a.heartbeat_at_s = sent_s + a.lease_s / 3
                if a.timeout_deadline_s is not None and sent_s < a.timeout_deadline_s:
                    a.heartbeat_at_s = min(a.heartbeat_at_s, a.timeout_deadline_s)
                a.lease_deadline_s = sent_s + a.lease_s
        stop = answer.get("cancel") or {}
        for a in due:
            why = stop.get(a.run["id"])
            if why is not None:
                self._stop_run(a, why)
        for item in answer.get("rejected", ()):
            attempt = next((a.run["attempt"] for a in due if a.run["id"] == item["run_id"]), -1)
            self._lose(item["run_id"], attempt, item.get("type", "rejected"))

    # -- signals ---------------------------------------------------------------

    async def _signals_loop(self) -> None:
        """Keeps one `POST /v1/signals` waiting for the runs whose handlers
        run; it is sent again when it ends, and when runs were added (after
        `signals_settle_s`, so a burst of claims costs one poll)."""
        while self._signals_served:
            added = self._runs_added
            watched = [a for a in self._active.values() if not (a.finished or a.lost or a.held or a.cancel.cancel_called)]
            if not watched:
                await added.wait()
                await trio.sleep(signals_settle_s)
                continue
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_when_set, added, nursery.cancel_scope)
                await self._poll_signals(watched[: limits.signals_runs_max])
                nursery.cancel_scope.cancel()

    async def _poll_signals(self, watched: list[_Active]) -> None:
        body = {"worker": self.worker_id, "runs": [{"run_id": a.run["id"], "attempt": a.run["attempt"]} for a in watched],
                "wait_s": signals_wait_s}
        try:
            status, answer, headers = await self.transport.post_answer(
                "/v1/signals", body, timeout_s=signals_wait_s + request_timeout_s,
                deadline_s=trio.current_time() + signals_wait_s,
            )
        except Unavailable:
            await trio.sleep(signals_retry_s)
            return
        if status == 404:
            log.info("the server has no /v1/signals: cancels reach handlers with heartbeats only")
            self._signals_served = False
            return
        if status != 200 or not isinstance(answer, dict):
            log.error("POST /v1/signals answered %s: %s", status, answer)
            await trio.sleep(signals_retry_s)
            return
        stop = answer.get("cancel") or {}
        if not stop:
            # A node that stops answers at once, empty, with `Retry-After`:
            # the pause keeps the next poll from spinning against it.
            await trio.sleep(_retry_after_s(headers))
            return
        for a in watched:
            why = stop.get(a.run["id"])
            if why is not None and self._active.get(a.run["id"]) is a:
                self._stop_run(a, why)

    def _stop_run(self, active: _Active, why: str) -> None:
        """A heartbeat answer says the run is to stop: its handler is
        cancelled. After a timeout the attempt has ended, and nothing is
        reported; after a cancel, the result is (the server records it
        cancelled)."""
        if active.finished or active.cancel.cancel_called:
            return
        run = active.run
        if why == "timeout":  # `_lose` says so: "lost (timeout)"
            self._lose(run["id"], run["attempt"], "timeout")
            return
        log.warning("run %s attempt %s: its owner cancelled it; cancelling its handler", run["id"], run["attempt"],
                    extra={"run_id": run["id"], "attempt": run["attempt"], "cancel": why})
        active.stop_requested = True
        active.cancel.cancel()

    # -- results ---------------------------------------------------------------

    async def _results_loop(self) -> None:
        while True:
            await self._results_ready.wait()
            batch = self._results[: limits.batch_items_max]
            if not batch:
                self._results_ready = trio.Event()
                continue
            try:
                status, answer = await self.transport.post(
                    "/v1/results", {"results": batch}, timeout_s=request_timeout_s,
                    deadline_s=trio.current_time() + limits.lease_s_max,
                )
            except Unavailable:
                continue
            if status != 200:
                # One bad item fails the whole batch; sent one by one, only
                # the bad ones are dropped (they would block every later result).
                log.error("POST /v1/results answered %s: %s; sending %d results one by one", status, answer, len(batch))
                answer = await _report_singly(self.transport, batch)
            del self._results[: len(batch)]
            sent = {r["run_id"]: r["attempt"] for r in batch}
            if self._on_reported is not None and answer.get("accepted"):
                self._on_reported(answer["accepted"], time.time())
            for run_id in answer.get("accepted", ()):
                _forget(self._active, run_id, sent.get(run_id))
            for item in answer.get("rejected", ()):
                log.warning("result of run %s rejected: %s", item["run_id"], item.get("type"))
                self.counts["rejected"] += 1
                _forget(self._active, item["run_id"], sent.get(item["run_id"]))


# -- `tempo worker -- COMMAND...` ------------------------------------------------

command_stream_bytes_max = limits.output_bytes_max
# The default time a command has to exit after SIGTERM before SIGKILL
# (`tempo worker --grace-s`), and how long the worker then waits for the
# killed command to be reaped.
kill_grace_s = 10.0
kill_wait_s = 5.0


def _forget(active_runs: dict[str, _Active], run_id: str, attempt: int | None) -> None:
    """A run whose result the server took: no longer this worker's."""
    active = active_runs.get(run_id)
    if active is not None and active.finished and active.run["attempt"] == attempt:
        del active_runs[run_id]


def _log_run_end(worker_id: str, run: dict[str, Any], outcome: str, duration_s: float, error: str | None = None) -> None:
    """One line per attempt that ended in a worker: ok (info), failed
    (warning), lost (info: why it was lost is a warning of its own,
    `Worker._lose`, and a failover may lose thousands at once)."""
    level = logging.INFO if outcome in ("ok", "lost") else logging.WARNING
    if not log.isEnabledFor(level):
        return  # before the fields: a wave ends thousands of runs at once
    why = f": {error[:log_error_chars_max]}" if error else ""
    log.log(level, "run %s attempt %s %s in %.3f s%s", run["id"], run["attempt"], outcome, duration_s, why,
            extra={"run_id": run["id"], "attempt": run["attempt"], "job_id": run.get("job_id"),
                   "worker": worker_id, "outcome": outcome, "duration_s": round(duration_s, 3)})


def _say_lost(worker_id: str, why: str, lost: list[str]) -> None:
    """The runs a worker lost at one moment: the first `lost_lines_max`
    named one line each, the rest counted in one line."""
    for run_id in lost[:lost_lines_max]:
        log.warning("run %s lost (%s); cancelling its handler", run_id, why, extra={"run_id": run_id})
    if len(lost) > lost_lines_max:
        log.warning("and %d more runs lost (%s); cancelling their handlers", len(lost) - lost_lines_max, why,
                    extra={"worker": worker_id, "lost": len(lost)})


async def _report_singly(transport: Transport, batch: list[dict[str, Any]]) -> dict[str, list[str] | list[dict[str, str]]]:
    """Results one by one, after their batch was refused as a whole: only
    the bad ones are dropped."""
    accepted: list[str] = []
    rejected: list[dict[str, str]] = []
    for result in batch:
        body = {k: v for k, v in result.items() if k != "run_id"}
        try:
            status, answer = await transport.post(
                f"/v1/runs/{result['run_id']}/result", body, timeout_s=request_timeout_s,
                deadline_s=trio.current_time() + request_timeout_s,
            )
        except Unavailable:
            status, answer = 0, {"type": "unavailable"}
        if status == 200:
            accepted.append(result["run_id"])
        else:
            kind = answer.get("type", str(status)) if isinstance(answer, dict) else str(status)
            if status not in (404, 409):
                log.error("POST /v1/runs/%s/result answered %s: %s; dropped", result["run_id"], status, answer)
            rejected.append({"run_id": result["run_id"], "type": kind})
    return {"accepted": accepted, "rejected": rejected}


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    """Cancels `scope` `signals_settle_s` after `event` is set."""
    await event.wait()
    await trio.sleep(signals_settle_s)
    scope.cancel()


async def _read_head(stream: trio.abc.ReceiveStream, keep: bytearray, total: list[int]) -> None:
    """Reads `stream` to its end, keeping its first `command_stream_bytes_max` bytes."""
    while chunk := await stream.receive_some(65536):
        total[0] += len(chunk)
        room = command_stream_bytes_max - len(keep)
        if room > 0:
            keep += chunk[:room]


async def _read_tail(stream: trio.abc.ReceiveStream, keep: bytearray) -> None:
    """Reads `stream` to its end, keeping its last `command_stream_bytes_max` bytes."""
    while chunk := await stream.receive_some(65536):
        keep += chunk
        if len(keep) > 2 * command_stream_bytes_max:
            del keep[: len(keep) - command_stream_bytes_max]


def _head_text(raw: bytearray, total_bytes: int) -> str:
    if total_bytes <= len(raw):
        return clip_text(raw.decode("utf-8", "replace"))
    note = f"\n[tempo: truncated, {total_bytes} bytes in all]"
    keep = limits.output_bytes_max - len(note.encode())
    return clip_text(raw[:keep].decode("utf-8", "ignore") + note)


def command_handler(
    argv: Sequence[str], base_env: dict[str, str] | None = None, *, grace_s: float = kill_grace_s
) -> Handler:
    """A handler running `argv` per run: the payload as JSON on stdin, and
    `TEMPO_RUN_ID`, `TEMPO_ATTEMPT`, `TEMPO_JOB_ID` in its environment.

    Exit 0 is success with stdout (cut to 64 KiB, with a note) as output; any
    other exit is a failure with the tail of stderr as error. Cancellation (a
    lost lease, the run's timeout or a cancel of it, a stop past its grace)
    sends the command SIGTERM, and SIGKILL if it has not exited `grace_s`
    later (`tempo worker --grace-s`). The command runs in a session of its own and the
    signals go to its whole process group, so that what a shell script
    started stops with it, and the terminal's Ctrl-C reaches the worker
    only, which lets commands finish for its grace.
    """
    import os
    import subprocess

    if not argv:
        raise ValueError("argv: give a command")
    if not (isinstance(grace_s, int | float) and 0 <= grace_s < math.inf):
        raise ValueError(f"grace_s: a number of seconds, at least 0 (got {grace_s!r})")
    argv = list(argv)
    if len(argv) == 1 and any(c.isspace() for c in argv[0]):
        argv = ["sh", "-c", argv[0]]
    env_base = dict(os.environ if base_env is None else base_env)
    json_enc = msgspec.json.Encoder()

    async def handle(run: dict[str, Any]) -> str | None:
        env = env_base | {
            "TEMPO_RUN_ID": run["id"],
            "TEMPO_ATTEMPT": str(run["attempt"]),
            "TEMPO_JOB_ID": run.get("job_id", ""),
        }
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            start_new_session=True,
        )
        # Pipes, each of them, as asked for above.
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        out, err, out_total = bytearray(), bytearray(), [0]
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_head, proc.stdout, out, out_total)
                nursery.start_soon(_read_tail, proc.stderr, err)
                with contextlib.suppress(trio.BrokenResourceError):  # the command does not read its stdin
                    await proc.stdin.send_all(json_enc.encode(run.get("payload")) + b"\n")
                await proc.stdin.aclose()
                code = await proc.wait()
        finally:
            if proc.returncode is None:
                await _terminate(proc, grace_s)
        if code != 0:
            tail = err[-command_stream_bytes_max:].decode("utf-8", "replace").strip()
            raise CommandFailed(f"exit status {code}" + (f": {tail}" if tail else ""))
        return _head_text(out, out_total[0])

    return handle


async def _terminate(proc: trio.Process, grace_s: float) -> None:
    """SIGTERM to the command's process group, then SIGKILL after
    `grace_s`; shielded (it runs as the handler is cancelled) and
    bounded."""
    with trio.CancelScope(shield=True):
        _signal_group(proc, signal.SIGTERM)
        with trio.move_on_after(grace_s):
            await proc.wait()
            return
        with trio.move_on_after(kill_wait_s):
            _signal_group(proc, signal.SIGKILL)
            await proc.wait()


def _signal_group(proc: trio.Process, signum: signal.Signals) -> None:
    """`signum` to the process group the command leads (its session's, see
    `command_handler`). Its ID stays the command's PID while any member
    lives, even after the command itself was reaped, so it names no other."""
    import os

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)


class CommandFailed(Exception):
    pass


async def serve_command(
    urls: Sequence[str], queues: Sequence[str], argv: Sequence[str], *,
    worker_id: str, concurrency: int, grace_s: float, token: str | None = None, ca_file: str | None = None,
    ahead_ms: int = 0,
) -> None:
    """`tempo worker`: runs `argv` per run until SIGTERM or SIGINT."""
    import signal

    handler = command_handler(argv, grace_s=grace_s)
    worker = Worker(urls, worker_id, dict.fromkeys(queues, handler),
                    max_runs=min(concurrency, limits.claim_runs_max), concurrency=concurrency, token=token,
                    ca_file=ca_file, ahead_ms=ahead_ms)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        try:
            await _serve_until_signal(worker, signals, grace_s)
        except* WorkerError as group:
            raise _first_leaf(group) from None


async def _serve_until_signal(worker: Worker, signals: AsyncIterator[int], grace_s: float) -> None:
    async def on_signal() -> None:
        async for signum in signals:
            log.warning("signal %s: stopping (grace %.0f s)", signum, grace_s)
            await worker.stop(grace_s)
            return

    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        nursery.start_soon(on_signal)
        await worker.stopped.wait()
        nursery.cancel_scope.cancel()
