#!/usr/bin/env python3
"""Server CPU per run on the claim and result paths, in one process, no sockets.

    python bench/perrun.py                    # 25,000 one-off runs due at once
    python bench/perrun.py --jobs 5000 --rounds 5
    python bench/perrun.py --profile out.prof # cProfile of the measured part

A Store, Committer, Jobs, Dispatcher and Api wired as `tempo serve` wires them
(on a temporary directory, fsync on), `--jobs` one-off runs all due at one
instant (created inside the read-ahead window as in bench/spike.py, or with
`--reload` read from the runs table by the loader), claimed `--batch` at a time through `Api.claim` and reported in
batches of `--batch` through `Api.results`, both with MessagePack bodies as the
workers send them. HTTP (hypercorn, h11) is not in it: this measures what
tempo's own code costs, which is the part tempo can cut.

CPU time per run, split by phase (thread CPU, so waiting for fsync counts not):

- decode: the request body into its struct (`net.asgi.decode`)
- dispatch: trio-thread CPU while the dispatcher works on the request: taking
  runs, building the command, group commit's change feed,
  leases (claim), or the outcomes (results)
- apply: the commit thread's CPU in `Store.apply_commands` (reads, puts,
  deletes; the fsync's wait is not CPU)
- views: the handler's own work per run: the claim answer's run views, the
  results' per-item checks and the answer lists
- encode: the answer struct into MessagePack (`net.asgi.encode`)
- (gc): of the above, CPU in Python's cyclic garbage collector, in whichever
  phase (on either thread) an allocation set it off

Figures are the median of `--rounds` repetitions (each on fresh data). CPU
time per run is much steadier than wall-clock lateness on a shared machine.
"""

import argparse
import cProfile
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable

import msgspec
import trio

from tempo import clock, errors
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.net import workers_api
from tempo.net.api import Api
from tempo.net.asgi import Request
from tempo.net.auth import ANONYMOUS_WORKER, Authenticator
from tempo.node import Standalone

sys.path.insert(0, os.path.dirname(__file__))
from _timing import timed, timed_async
from tempo.schema import JobCreate, ScheduleIn

T0_MS = 1_800_000_000_000  # the due instant: 2027-01-15T08:00:00Z
MSGPACK = b"application/msgpack"
PHASES = ("decode", "dispatch", "apply", "views", "encode")
_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


# The worker's side, kept light (untracked by the cycle collector) so that
# the harness's own objects do not set off collections charged to the server.
class _RunIn(msgspec.Struct, gc=False):
    id: str
    attempt: int


class _ClaimAnswer(msgspec.Struct, gc=False):
    runs: list[_RunIn]


class _ResultOut(msgspec.Struct, gc=False):
    run_id: str
    attempt: int
    ok: bool


class _ResultsOut(msgspec.Struct, gc=False):
    results: list[_ResultOut]


_claim_answer = msgspec.msgpack.Decoder(_ClaimAnswer)


class Clock:
    def __init__(self, now_ms: int):
        self.now = now_ms

    def __call__(self) -> int:
        return self.now


class Meter:
    """CPU seconds per phase and path (`claim` or `result`), from thread clocks."""

    def __init__(self) -> None:
        self.cpu_s: dict[tuple[str, str], float] = defaultdict(float)
        self.path = "setup"

    def add(self, phase: str, seconds: float) -> None:
        self.cpu_s[(self.path, phase)] += seconds


def _instrument(meter: Meter, store: Store, dispatcher: Dispatcher, apply_profile: cProfile.Profile | None) -> None:
    """Wraps the per-request steps (one call per request or entry, so the
    wrappers cost nothing per run) with thread-CPU clocks."""
    apply_commands = store.apply_commands

    def timed_apply(index: int, commands: list, **kwargs):
        assert threading.current_thread() is not threading.main_thread()
        profiling = apply_profile is not None and meter.path != "setup"
        if profiling:
            apply_profile.enable()  # type: ignore[union-attr]
        start = time.thread_time()
        try:
            return apply_commands(index, commands, **kwargs)
        finally:
            meter.add("apply", time.thread_time() - start)
            if profiling:
                apply_profile.disable()  # type: ignore[union-attr]

    store.apply_commands = timed_apply  # type: ignore[method-assign]

    # Where the claim and result handlers look them up (net/workers_api.py).
    workers_api.decode = timed(meter, "decode", workers_api.decode)  # type: ignore[attr-defined]
    workers_api.encode = timed(meter, "encode", workers_api.encode)  # type: ignore[attr-defined]
    dispatcher.claim = timed_async(meter, "dispatch", dispatcher.claim)  # type: ignore[method-assign]
    dispatcher.report = timed_async(meter, "dispatch", dispatcher.report)  # type: ignore[method-assign]


def _count_gc(meter: Meter) -> Callable[[str, dict], None]:
    """A gc callback adding each collection's thread CPU to the path it fell in."""
    started_s: dict[int, float] = {}

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started_s[info["generation"]] = time.thread_time()
        elif info["generation"] in started_s:
            meter.add("gc", time.thread_time() - started_s.pop(info["generation"]))

    return callback


async def _connected() -> dict:
    """ASGI `receive` once the body is read: the client stays."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def _sent(message: dict) -> None:
    """ASGI `send` of a handler that sends its answer itself (a claim)."""


def _request(path: str, body: object) -> Request:
    headers = {b"content-type": MSGPACK, b"accept": MSGPACK}
    request = Request("POST", path, {}, headers, _enc.encode(body), receive=_connected, send=_sent)
    request.principal = ANONYMOUS_WORKER  # auth off, as `tempo serve` without tokens
    return request


async def _create(jobs: Jobs, count: int, batch: int) -> None:
    due = ScheduleIn(at=clock.datetime_from_ms(T0_MS))
    for lo in range(0, count, batch):
        items = [JobCreate(target="queue:work", schedule=due) for _ in range(lo, min(count, lo + batch))]
        outcomes = await jobs.create("default", items, from_msgpack=True)
        assert not any(isinstance(o, errors.TempoError) for o in outcomes)


async def one_round(
    count: int, batch: int, reload: bool, profile: cProfile.Profile | None, apply_profile: cProfile.Profile | None
) -> dict[tuple[str, str], float]:
    meter = Meter()
    now = Clock(T0_MS - 60_000)
    with tempfile.TemporaryDirectory(prefix="tempo-perrun-") as tmp:
        store = Store(tmp)
        committer = Committer(store)
        jobs = Jobs(store, committer, now_ms=now)
        dispatcher = Dispatcher(store, committer, now_ms=now)
        api = Api(store, jobs, dispatcher, node=Standalone(store.applied_index), auth=Authenticator(()))
        _instrument(meter, store, dispatcher, apply_profile)
        gc_callback = _count_gc(meter)
        gc.callbacks.append(gc_callback)
        async with trio.open_nursery() as nursery:
            await nursery.start(committer.run)
            if reload:
                # Created long before (a schedule's next run, a restart): the
                # loader reads them from the runs table.
                await _create(jobs, count, batch)
                now.now = T0_MS + 1
                dispatcher.reset()
                dispatcher.load(now.now)
            else:
                # Created inside the read-ahead window, as in the spike
                # benchmark: the change feed puts them in the wheel.
                now.now = T0_MS - 10_000
                dispatcher.reset()
                dispatcher.load(now.now)
                await _create(jobs, count, batch)
                now.now = T0_MS + 1
            while dispatcher.tick(now.now):  # a slice of due runs a tick
                pass
            claimed = reported = 0
            claim_req = {"worker": "w1", "queues": ["work"], "max_runs": batch, "wait_s": 0}
            if profile is not None:
                profile.enable()
            while claimed < count:
                meter.path = "claim"
                start = time.thread_time()
                response = await api.claim(_request("/v1/claim", claim_req))
                meter.add("total", time.thread_time() - start)
                assert response.status == 200, response.body
                runs = _claim_answer.decode(response.body).runs
                assert runs, "every run is due"
                claimed += len(runs)
                now.now += 5
                meter.path = "result"
                results = _ResultsOut([_ResultOut(r.id, r.attempt, True) for r in runs])
                start = time.thread_time()
                response = await api.results(_request("/v1/results", results))
                meter.add("total", time.thread_time() - start)
                assert response.status == 200, response.body
                answer = _dec.decode(response.body)
                assert not answer["rejected"], answer["rejected"][:3]
                reported += len(answer["accepted"])
                now.now += 5
            if profile is not None:
                profile.disable()
            assert reported == count
            meter.path = "setup"
            gc.callbacks.remove(gc_callback)
            committer.close()
        store.close()
    # The handler's own work: its trio-thread CPU less the measured parts.
    for path in ("claim", "result"):
        inner = sum(meter.cpu_s[(path, p)] for p in ("decode", "dispatch", "encode"))
        meter.cpu_s[(path, "views")] = meter.cpu_s[(path, "total")] - inner
        meter.cpu_s[(path, "total")] += meter.cpu_s[(path, "apply")]
    return {k: v / count for k, v in meter.cpu_s.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=25_000)
    ap.add_argument("--batch", type=int, default=1000, help="runs per claim and per results request")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reload", action="store_true",
                    help="create the runs a minute ahead and load them from the table (as a schedule's runs,"
                         " or after a restart), not inside the read-ahead window (as bench/spike.py)")
    ap.add_argument("--profile", default=None,
                    help="write cProfiles of the last round: the trio thread here, the commit thread's apply"
                         " beside it (`.apply` appended)")
    args = ap.parse_args()
    # As `tempo serve` does once it has imported what it runs (cli.py):
    # what is loaded by now lives as long as the process, and the cycle
    # collector's full collections no longer walk it.
    gc.freeze()
    per_round = []
    for i in range(args.rounds):
        profile = cProfile.Profile() if args.profile and i == args.rounds - 1 else None
        apply_profile = cProfile.Profile() if profile is not None else None
        per_round.append(trio.run(one_round, args.jobs, args.batch, args.reload, profile, apply_profile))
        if profile is not None and apply_profile is not None:
            profile.dump_stats(args.profile)
            apply_profile.dump_stats(args.profile + ".apply")
    how = "loaded from the table" if args.reload else "created inside the read-ahead window"
    print(f"server CPU per run, µs (median of {args.rounds} rounds; N = {args.jobs:,}, batches of {args.batch}; {how})")
    print(f"{'path':<8}" + "".join(f"{p:>10}" for p in (*PHASES, "total", "(gc)")))
    for path in ("claim", "result"):
        cells = [statistics.median(r.get((path, p), 0.0) for r in per_round) * 1e6 for p in (*PHASES, "total", "gc")]
        print(f"{path:<8}" + "".join(f"{c:>10.2f}" for c in cells))
    both = [r[("claim", "total")] + r[("result", "total")] for r in per_round]
    print(f"claim + result: {statistics.median(both) * 1e6:.2f} µs per run "
          f"(rounds: {', '.join(f'{b * 1e6:.2f}' for b in both)})")


if __name__ == "__main__":
    main()
