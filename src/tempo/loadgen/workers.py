"""Worker processes (multiprocessing, `spawn` start method: nothing of the
parent's trio state is inherited). Each runs a `tempo.worker.Worker` (or,
with `--plain`, `_plain_process`) with a
no-op handler, `max_runs=1000`, `wait_s=1`, reporting every claim answer (run
ID, job ID, attempt, due time, arrival time) to the parent; and, with
`ahead_ms` (pre-dispatch), each run's start lateness at the worker: how long
after its `due_at` the handler started, on the leader's clock as the worker
corrects its own by the claim's `server_time`."""

import multiprocessing as mp
import os
import queue as queue_mod
import signal
import time
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from tempo.loadgen.figures import Message, Tally, take
from tempo.worker_ahead import ms_of

claim_max_runs = 1000
claim_wait_s = 1
# Pre-dispatch: a worker holds up to this many runs (each in a slot), and
# sends the start lateness of its runs to the parent this often.
ahead_runs_held_max = 50_000
starts_flush_s = 0.05
# `--plain`: each request's timeout beyond the claim's long poll.
plain_timeout_s = 30.0
worker_stop_timeout_s = 15.0
worker_grace_s = 5.0
stop_poll_gap_s = 0.05
receive_wait_s = 0.1
# Once a worker is killed, the kernel reaps it at once.
reap_timeout_s = 5.0

Workers = tuple[list[BaseProcess], "Queue[Message]", Event]


def _worker_process(
    urls: list[str], queue_name: str, index: int, out: "Queue[Message]", stop: Event, ca_file: str | None = None,
    claim_keys: bool = True, ahead_ms: int = 0,
) -> None:
    import trio

    from tempo.worker import Worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop

    started: list[tuple[str, str, float]] = []

    async def noop(run: dict[str, Any]) -> None:
        if ahead_ms:
            # The clock first, the rest when sent: a wave's handlers start
            # one after another, so each one's work here makes the later
            # ones late.
            started.append((run["id"], run["due_at"], worker.ahead.leader_now_ms()))
        return None

    def claimed(runs: list[dict[str, Any]], at_s: float) -> None:
        out.put(("claims", [(r["id"], r["job_id"], r["attempt"], r["due_at"], r["nominal_at"], at_s) for r in runs]))

    def reported(run_ids: list[str], at_s: float) -> None:
        out.put(("results", run_ids, at_s))

    worker = Worker(
        urls, f"loadgen-{os.getpid()}-{index}", {queue_name: noop},
        max_runs=claim_max_runs, concurrency=ahead_runs_held_max if ahead_ms else 4 * claim_max_runs,
        wait_s=claim_wait_s, on_claimed=claimed, on_reported=reported, ca_file=ca_file, claim_keys=claim_keys,
        ahead_ms=ahead_ms,
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            nursery.start_soon(_flush_starts, started, out)
            while not stop.is_set():
                await trio.sleep(stop_poll_gap_s)
            await worker.stop(grace_s=worker_grace_s)
            nursery.cancel_scope.cancel()
        _send_starts(started, out)
        out.put(("done", worker.counts))

    trio.run(main)


def _plain_process(
    urls: list[str], queue_name: str, index: int, out: "Queue[Message]", stop: Event, ca_file: str | None = None,
) -> None:
    """`--plain`: the simplest worker a client writes, over JSON: claim up
    to `claim_max_runs`, report them all done, and only then claim again.
    Its results hold its next claim (docs/semantics.md "Claims before
    results"). No claim keys: a claim whose answer is lost is not asked
    again, and its runs come back when their leases run out."""
    from tempo.net.client import ApiError, Client, Unavailable

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    worker = f"loadgen-plain-{os.getpid()}-{index}"
    counts = {"claimed": 0, "ok": 0, "rejected": 0}
    claim = {"worker": worker, "queues": [queue_name], "max_runs": claim_max_runs, "wait_s": claim_wait_s}
    with Client(urls, ca_file=ca_file, timeout_s=claim_wait_s + plain_timeout_s) as client:
        while not stop.is_set():
            try:
                runs = client.request("POST", "/v1/claim", claim)["runs"]
                at_s = time.time()
                if not runs:
                    continue
                counts["claimed"] += len(runs)
                out.put(("claims", [(r["id"], r["job_id"], r["attempt"], r["due_at"], r["nominal_at"], at_s) for r in runs]))
                body = {"results": [{"run_id": r["id"], "attempt": r["attempt"], "ok": True} for r in runs]}
                answer = client.request("POST", "/v1/results", body)
            except (ApiError, Unavailable):
                continue  # the runs of a claim not reported come back after their leases
            counts["ok"] += len(answer["accepted"])
            counts["rejected"] += len(answer["rejected"])
            out.put(("results", answer["accepted"], time.time()))
    out.put(("done", counts))


def _send_starts(started: list[tuple[str, str, float]], out: "Queue[Message]") -> None:
    """(run ID, start lateness in s) of each run `noop` started."""
    if started:
        due_ms = {due_at: ms_of(due_at) for due_at in {due_at for _, due_at, _ in started}}
        out.put(("starts", [(run_id, (at_ms - due_ms[due_at]) / 1000) for run_id, due_at, at_ms in started]))
        started.clear()


async def _flush_starts(started: list[tuple[str, str, float]], out: "Queue[Message]") -> None:
    """Sends the start lateness of the runs started since, every `starts_flush_s`."""
    import trio

    while True:
        await trio.sleep(starts_flush_s)
        _send_starts(started, out)


def start_workers(
    urls: list[str], queue_name: str, count: int, ca_file: str | None = None, claim_keys: bool = True,
    ahead_ms: int = 0, plain: bool = False,
) -> Workers:
    """`count` worker processes claiming from `queue_name` over all `urls`
    (`plain`: `_plain_process`, else the worker library): (processes, the
    queue their messages come on — see `figures.take` —, the stop event)."""
    ctx = mp.get_context("spawn")
    out: Queue[Message] = ctx.Queue()
    stop = ctx.Event()
    procs: list[BaseProcess] = [
        ctx.Process(target=_plain_process, args=(list(urls), queue_name, i, out, stop, ca_file), daemon=True)
        if plain else
        ctx.Process(target=_worker_process, args=(list(urls), queue_name, i, out, stop, ca_file, claim_keys, ahead_ms), daemon=True)
        for i in range(count)
    ]
    for proc in procs:
        proc.start()
    return procs, out, stop


def receive(out: "Queue[Message]", tally: Tally) -> None:
    """One worker message into the tally, if one comes within `receive_wait_s`."""
    try:
        message = out.get(timeout=receive_wait_s)
    except queue_mod.Empty:
        return
    take(tally, message)


def stop_workers(procs: list[BaseProcess], out: "Queue[Message]", stop: Event, tally: Tally) -> None:
    """Stops the workers of `start_workers`, taking their last messages into the tally."""
    stop.set()
    # Drain the queue while waiting: a child blocked on a full pipe never exits.
    deadline_s = time.monotonic() + worker_stop_timeout_s
    while tally.workers_done < len(procs) and time.monotonic() < deadline_s:
        try:
            take(tally, out.get(timeout=receive_wait_s))
        except queue_mod.Empty:
            if not any(p.is_alive() for p in procs):
                break
    for proc in procs:
        proc.join(timeout=max(0.1, deadline_s - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=reap_timeout_s)


def kill_workers(procs: list[BaseProcess]) -> None:
    for proc in procs:
        proc.kill()
