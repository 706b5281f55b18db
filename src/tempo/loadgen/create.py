"""Creating the jobs with `POST /v1/jobs/batch` (B per request, a few
requests in flight, MessagePack, retried over every URL by
`tempo.worker.Transport`). Request keys are `<queue>-<index>`, so a batch
retried after a lost answer creates nothing twice.

The spike: N jobs due at one instant; creation still going at that instant
is an overrun. Steady mode: job i due at `first + i / R`, created by a thread
span by span (each span `steady_span_s` of due times, sent `steady_lead_s`
before its first due time); a request not yet sent at its first due time is
an overrun.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from tempo.loadgen.figures import iso
from tempo.loadgen.options import CannotRun, CreationOverran, Options, first_failure, steady_lead_s
from tempo.worker import Transport

create_requests_in_flight = 4
create_request_timeout_s = 60.0
progress_gap_s = 0.2
# A creation span covers this many seconds of due times, so the server sees a
# steady trickle of creates well ahead of the claims they feed.
steady_span_s = 0.5

# Progress: a line of text; `live=True` rewrites the line in place on a terminal.
Say = Callable[..., None]


def job_extras(opts: Options) -> dict[str, int]:
    extras: dict[str, int] = {}
    if opts.jitter_s:
        extras["jitter_s"] = opts.jitter_s
    lease_s = opts.job_lease_s()
    if lease_s is not None:
        extras["lease_s"] = lease_s
    return extras


async def post_batch(transport: Transport, items: list[dict[str, Any]], first: int, deadline_s: float) -> list[str]:
    """Creates `items` (job `first` onward); their job IDs in order. A batch
    or item refused is `CannotRun`; `deadline_s` (trio clock) bounds retries."""
    status, answer = await transport.post(
        "/v1/jobs/batch", {"jobs": items}, timeout_s=create_request_timeout_s, deadline_s=deadline_s,
    )
    if status != 200:
        raise CannotRun(f"POST /v1/jobs/batch answered {status}: {str(answer)[:300]}")
    job_ids: list[str] = []
    for offset, result in enumerate(answer["results"]):
        if result["status"] not in (200, 201):
            raise CannotRun(f"job {first + offset} was refused: {str(result)[:300]}")
        job_ids.append(result["job"]["id"])
    return job_ids


def create_spike(opts: Options, queue_name: str, due_s: float, say: Say) -> tuple[list[str], float]:
    """Job IDs created (index order) and the seconds creation took."""
    body = {"target": f"queue:{queue_name}", "schedule": {"at": iso(due_s)}} | job_extras(opts)
    job_ids: list[str | None] = [None] * opts.jobs
    done = [0]
    try:
        create_s = trio.run(_create_batches, opts, queue_name, body, due_s, job_ids, done, say)
    except Exception as raised:  # noqa: BLE001 - any transport failure means the spike cannot run
        raise _creation_failure(raised, opts, done[0]) from None
    if time.time() > due_s:
        raise CreationOverran(
            f"creation overran the due instant: {opts.jobs} jobs took {create_s:.2f} s, "
            f"more than --due-in-s {opts.due_in_s:g}; give a larger --due-in-s"
        )
    assert all(j is not None for j in job_ids)
    return [j for j in job_ids if j is not None], create_s


async def _create_batches(
    opts: Options,
    queue_name: str,
    body: dict[str, Any],
    due_s: float,
    job_ids: list[str | None],
    done: list[int],
    say: Say,
) -> float:
    """Creates the spike's jobs in batches, `create_requests_in_flight` at a
    time, into `job_ids` (counting them in `done[0]`); the seconds it took."""

    async def one_batch(transport: Transport, start: int) -> None:
        items = [body | {"request_key": f"{queue_name}-{i}"} for i in range(start, min(start + opts.batch, opts.jobs))]
        created = await post_batch(transport, items, start, trio.current_time() + max(0.0, due_s - time.time()))
        job_ids[start:start + len(created)] = created
        done[0] += len(items)

    async def feeder(transport: Transport, todo: list[int]) -> None:
        while todo:
            if time.time() > due_s:
                raise CreationOverran("creation overran")
            await one_batch(transport, todo.pop(0))

    transport = Transport(opts.urls, ca_file=opts.ca_file)
    started_s = time.time()
    todo = list(range(0, opts.jobs, opts.batch))
    try:
        with trio.fail_after(max(1.0, due_s - time.time())):
            async with trio.open_nursery() as nursery:
                for _ in range(create_requests_in_flight):
                    nursery.start_soon(feeder, transport, todo)
                while todo or done[0] < opts.jobs:
                    say(f"creating: {done[0]}/{opts.jobs} jobs", live=True)
                    await trio.sleep(progress_gap_s)
    except trio.TooSlowError:
        raise CreationOverran("creation overran") from None
    finally:
        await transport.aclose()
    return time.time() - started_s


def _creation_failure(raised: Exception, opts: Options, created: int) -> CannotRun:
    """What a failed creation raises: its first failure, said plainly. The
    feeders raise inside a nursery, which hands on a group of them."""
    failure = first_failure(raised)
    if isinstance(failure, CreationOverran):
        return CreationOverran(
            f"creation overran the due instant: {created}/{opts.jobs} jobs created in "
            f"{opts.due_in_s:g} s; give a larger --due-in-s"
        )
    if isinstance(failure, CannotRun):
        return failure
    return CannotRun(f"creation failed: {failure!r}")


# -- steady mode: a stream of one-off jobs -------------------------------------


@dataclass
class Stream:
    """What the creating thread shares with the collecting one. `job_ids` only
    grows; `finished` is set once every job is created or `error` is set."""

    job_ids: list[str] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    create_s: float = 0.0


def steady_due_s(first_due_s: float, rate: float, index: int) -> float:
    """Job `index`'s due time: R per second, evenly spread from `first_due_s`."""
    return first_due_s + index / rate


def steady_spans(jobs: int, rate: float) -> list[tuple[int, int]]:
    """Index ranges [lo, hi) of the creation spans, each `steady_span_s` of due times."""
    spans: list[tuple[int, int]] = []
    k = 0
    while (lo := min(jobs, round(k * steady_span_s * rate))) < jobs:
        spans.append((lo, min(jobs, round((k + 1) * steady_span_s * rate))))
        k += 1
    assert sum(hi - lo for lo, hi in spans) == jobs
    return spans


def create_stream(opts: Options, queue_name: str, first_due_s: float, stream: Stream) -> None:
    """Runs in its own thread (and trio loop): creates each span `steady_lead_s`
    before its first due time. A request that would start after its first due
    time is an overrun."""
    base = {"target": f"queue:{queue_name}"} | job_extras(opts)

    async def one_request(transport: Transport, lo: int, hi: int, limiter: trio.CapacityLimiter) -> None:
        async with limiter:
            first_s = steady_due_s(first_due_s, opts.rate, lo)
            if time.time() > first_s:
                raise CreationOverran(f"creation overran: job {lo} was not yet sent at its due time")
            items = [base | {"request_key": f"{queue_name}-{i}",
                             "schedule": {"at": iso(steady_due_s(first_due_s, opts.rate, i))}} for i in range(lo, hi)]
            created = await post_batch(transport, items, lo, trio.current_time() + max(0.0, first_s - time.time()))
        stream.job_ids.extend(created)

    async def main() -> None:
        transport = Transport(opts.urls, ca_file=opts.ca_file)
        limiter = trio.CapacityLimiter(create_requests_in_flight)
        started_s = time.time()
        try:
            async with trio.open_nursery() as nursery:
                for lo, hi in steady_spans(opts.steady_jobs(), opts.rate):
                    send_at_s = steady_due_s(first_due_s, opts.rate, lo) - steady_lead_s
                    await trio.sleep(max(0.0, send_at_s - time.time()))
                    if stream.stop.is_set():
                        nursery.cancel_scope.cancel()
                        return
                    for start in range(lo, hi, opts.batch):
                        nursery.start_soon(one_request, transport, start, min(start + opts.batch, hi), limiter)
        finally:
            stream.create_s = time.time() - started_s
            await transport.aclose()

    try:
        trio.run(main)
    except BaseException as raised:  # noqa: BLE001 - any failure ends the run with exit 2; the collector reports it
        failure = first_failure(raised)
        stream.error = str(failure) if isinstance(failure, CannotRun) else f"creation failed: {failure!r}"
    finally:
        stream.finished.set()
