"""The built-in HTTP executor: a worker like any other, inside `tempo serve`,
that claims the runs whose target is an http(s) URL and delivers them.

A delivery is a POST of the payload (JSON) with the run's headers; any 2xx is
success, anything else, a network error, or no answer within the job's
`lease_s` is a failure, retried per the job's policy. At most
`limits.http_executor_concurrency` deliveries are in flight.

A job's `timeout_s` bounds the request too: it is aborted when the
attempt's timeout passes, and reported failed with error `timeout` (the
lease check ends it so as well, whichever comes first). A run cancelled
while its request is in flight (docs/semantics.md "Cancelling a run") has
its request aborted at once, and its result, reported `ok=false`, is
recorded cancelled.

It serves every owner: claiming `[HTTP_QUEUE]` takes from each owner's http
queue in turn (round-robin), within each owner's limits, so one owner's
backlog of due runs does not queue ahead of another owner's run.
"""

import contextlib
import logging

import httpx
import msgspec
import trio

from tempo import errors, ids, limits, targets
from tempo.engine import HTTP_QUEUE, ClaimedRun, Dispatcher, Result
from tempo.net.agent import USER_AGENT
from tempo.net.egress import TargetRefused, policy_transport

WORKER_NAME = "tempo-http-executor"
_claim_wait_s = 1.0
_error_chars_max = 2000
_json = msgspec.json.Encoder()
log = logging.getLogger("tempo.executor")


class HttpExecutor:
    def __init__(
        self, dispatcher: Dispatcher, *, concurrency: int = limits.http_executor_concurrency,
        policy: targets.TargetPolicy | None = None,
    ):
        """`policy`: where deliveries may connect (docs/operations.md
        "Target policy"); the default allows loopback, as a node without
        tokens does."""
        self.dispatcher = dispatcher
        self.policy = targets.TargetPolicy() if policy is None else policy
        self.concurrency = concurrency
        self.in_flight = 0
        self._slot_freed = trio.Event()
        # The cancel scope of each delivery in flight, by (job ID, nominal
        # ms), with its attempt: a cancel of the run aborts it.
        self._scopes: dict[tuple[str, int], tuple[int, trio.CancelScope]] = {}

    def _stop(self, stopping: list[tuple[str, int]]) -> None:
        """Runs asked to stop: their deliveries in flight are aborted."""
        for slot in stopping:
            found = self._scopes.get(slot)
            if found is not None:
                found[1].cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        limits_ = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        # Made on a worker thread: loading the system's CA certificates (and
        # httpx's first imports) takes 40-120 ms, which would hold the event
        # loop at start-up (docs/operations.md "Event-loop lag").
        # The transport (with its TLS context) is made on that thread too.
        made = await trio.to_thread.run_sync(lambda: httpx.AsyncClient(
            limits=limits_, follow_redirects=False, headers={"user-agent": USER_AGENT},
            transport=policy_transport(self.policy, limits_), trust_env=False,
        ))
        self.dispatcher.stop_listeners.append(self._stop)
        try:
            await self._serve(made, task_status)
        finally:
            self.dispatcher.stop_listeners.remove(self._stop)

    async def _serve(self, made: httpx.AsyncClient, task_status: trio.TaskStatus[None]) -> None:
        async with made as client:
            async with trio.open_nursery() as nursery:
                task_status.started()
                while True:
                    free = self.concurrency - self.in_flight
                    if free <= 0:
                        await self._slot_freed.wait()
                        self._slot_freed = trio.Event()
                        continue
                    runs_max = min(free, limits.http_executor_batch_runs)
                    for claimed in await self.dispatcher.claim([HTTP_QUEUE], WORKER_NAME, runs_max, _claim_wait_s):
                        self.in_flight += 1
                        run = claimed.run
                        # Before the delivery starts: a cancel may come before it runs.
                        self._scopes[(run.job_id, run.nominal_ms)] = (run.attempt, trio.CancelScope())
                        nursery.start_soon(self._deliver, client, claimed)

    async def _deliver(self, client: httpx.AsyncClient, claimed: ClaimedRun) -> None:
        run, job = claimed.run, claimed.job
        run_id = ids.run_id(run.job_id, run.nominal_ms)
        headers = {
            "content-type": "application/json",
            "tempo-run-id": run_id,
            "tempo-attempt": str(run.attempt),
            "tempo-job-id": job.id,
            "idempotency-key": run_id,
        }
        ok, output, error = False, None, None
        slot = (run.job_id, run.nominal_ms)
        _, scope = self._scopes.get(slot, (run.attempt, trio.CancelScope()))
        # The request is bounded by the lease, and by the attempt's timeout
        # when that comes first.
        bound_s, timed = float(job.lease_s), False
        if run.timeout_at_ms is not None:
            left_s = max(0.0, (run.timeout_at_ms - self.dispatcher.now_ms()) / 1000)
            if left_s < bound_s:
                bound_s, timed = left_s, True
        try:
            with scope, trio.fail_after(bound_s):
                response = await client.post(job.target, content=_json.encode(job.payload), headers=headers, timeout=job.lease_s)
            if scope.cancelled_caught:
                error = "cancelled: its owner asked it to stop"
            else:
                ok = 200 <= response.status_code < 300
                output = f"HTTP {response.status_code}"
                if not ok:
                    error = f"HTTP {response.status_code}: {response.text[:_error_chars_max]}"
        except trio.TooSlowError:
            error = "timeout" if timed else f"no answer within lease_s={job.lease_s}"
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            # InvalidURL is no HTTPError: a target stored before the create
            # check refused such URLs fails its attempt, never the node.
            error = f"{type(exc).__name__}: {str(exc)[:_error_chars_max]}"
        except TargetRefused as exc:
            # Its host resolves to an address the policy refuses now (or a
            # job created before the policy was): nothing was sent.
            error = str(exc)[:_error_chars_max]
        finally:
            if self._scopes.get(slot, (None,))[0] == run.attempt:
                del self._scopes[slot]
            self.in_flight -= 1
            self._slot_freed.set()
        fields = {"job_id": job.id, "run_id": run_id, "attempt": run.attempt}
        if ok:
            log.debug("run %s of job %s attempt %d delivered", run_id, job.id, run.attempt, extra=fields)
        else:
            # The target URL stays out of the line: it may carry a secret.
            log.warning("run %s of job %s attempt %d: delivery failed: %s", run_id, job.id, run.attempt, error,
                        extra=fields)
        # Group commit batches these reports with everything else in flight.
        # A report that cannot be written (overload) is given up: the lease
        # runs out and the run is delivered again (at least once).
        with contextlib.suppress(errors.Overloaded):
            await self.dispatcher.report(None, [Result(run.job_id, run.nominal_ms, run.attempt, ok, output, error)])
