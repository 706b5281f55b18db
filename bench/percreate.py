#!/usr/bin/env python3
"""Server CPU per job on the batched create path, in one process, no sockets.

    python bench/percreate.py                     # JSON and MessagePack, 20 batches of 1,000
    python bench/percreate.py --batches 40 --rounds 5 --format json
    python bench/percreate.py --profile out.prof  # cProfiles of the last round

A Store, Committer, Jobs and Api wired as `tempo serve` wires them (on a
temporary directory, fsync on), driven with `POST /v1/jobs/batch` bodies of
`--batch` one-off jobs as bench/create.py and bench/spike.py send them (target
`queue:x`, schedule `{"at": ...}`, a small payload, every `--key-every`th item
with a request key), one request at a time. HTTP (hypercorn, h11) is not in it.

Thread CPU per job, by phase (waiting for fsync counts not):

- decode: the body into its structs (`_decode_batch_at_once`)
- build: checks and command items (`Jobs.create` less the submit)
- submit: the trio thread's part of the commit (the change feed)
- apply: the commit thread's CPU in `Store.apply_commands` (puts, the commit)
- views: the batch reply's views (`create_batch` less the rest)
- encode: the reply struct into JSON or MessagePack (`net.asgi.encode`)
- (gc): of the above, CPU in the cyclic garbage collector

Each phase's figure is its least over `--rounds` rounds (each on fresh
data): on a shared machine other processes only ever add to thread CPU.

With `--pages`, prints each table's pages per job after the last round
(bench/_pages.py). With `--digest`, prints `Store.digest()` after the last
round: the same figure before and after a change to apply means byte-identical tables
(the clock and the job IDs' random part are fixed here for that).
"""

import argparse
import cProfile
import gc
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable

import msgspec
import trio

from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.net import jobs_api
from tempo.net.api import Api
from tempo.net.asgi import Request
from tempo.net.auth import ANONYMOUS, Authenticator
from tempo.node import Standalone

sys.path.insert(0, os.path.dirname(__file__))
from _batch import iso, spread_at_ms
from _pages import pages_table
from _timing import timed, timed_async

T0_MS = 1_800_000_000_000
AT_MS = 1_924_992_000_000  # 2031-01-01T00:00:00Z
PHASES = ("decode", "build", "submit", "apply", "views", "encode")
TYPES = {"json": b"application/json", "msgpack": b"application/msgpack"}


def at_text(n: int, jobs: int, spread_days: float) -> str:
    """The `at` of the n-th of `jobs` jobs: one instant, or spread over
    `spread_days` from it as bench/scale.py spreads them."""
    return iso(spread_at_ms(n, jobs, AT_MS, int(spread_days * 86_400_000)))


def bodies(fmt: str, batches: int, size: int, key_every: int, spread_days: float = 0.0) -> list[bytes]:
    enc = msgspec.json.Encoder() if fmt == "json" else msgspec.msgpack.Encoder()
    out = []
    for b in range(batches):
        items = []
        for i in range(size):
            n = b * size + i
            item = {"target": "queue:x", "schedule": {"at": at_text(n, batches * size, spread_days)}, "payload": {"i": n}}
            if key_every and n % key_every == 0:
                item["request_key"] = f"key-{n}"
            items.append(item)
        out.append(enc.encode({"jobs": items}))
    return out


class Meter:
    def __init__(self) -> None:
        self.cpu_s: dict[str, float] = defaultdict(float)
        self.on = False

    def add(self, phase: str, seconds: float) -> None:
        if self.on:
            self.cpu_s[phase] += seconds


class _Current:
    """The round's meter, for wrappers installed once at module level."""

    meter: Meter | None = None

    def add(self, phase: str, seconds: float) -> None:
        if self.meter is not None:
            self.meter.add(phase, seconds)


CURRENT = _Current()


def _fixed_urandom(n: int) -> bytes:
    return b"\x5a" * n


def gc_timer(meter: Meter) -> Callable[[str, dict[str, int]], None]:
    """A `gc.callbacks` entry that adds each collection's thread time to `meter`'s "gc"."""
    started_s: dict[int, float] = {}

    def gc_callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started_s[info["generation"]] = time.thread_time()
        elif info["generation"] in started_s:
            meter.add("gc", time.thread_time() - started_s.pop(info["generation"]))

    return gc_callback


async def one_round(fmt: str, requests: list[bytes], profile, apply_profile, digest: bool, pages: bool) -> dict[str, float]:
    meter = Meter()
    CURRENT.meter = meter
    with tempfile.TemporaryDirectory(prefix="tempo-percreate-") as tmp:
        store = Store(tmp)
        committer = Committer(store)
        now = [T0_MS]
        # Fixed job-ID randomness so that two runs build the same tables.
        jobs = Jobs(store, committer, now_ms=lambda: now[0], random_bytes=_fixed_urandom)
        dispatcher = Dispatcher(store, committer, now_ms=lambda: now[0])
        api = Api(store, jobs, dispatcher, node=Standalone(store.applied_index), auth=Authenticator(()))
        apply_commands = store.apply_commands

        def timed_apply(index: int, commands: list, **kwargs):
            assert threading.current_thread() is not threading.main_thread()
            if apply_profile is not None and meter.on:
                apply_profile.enable()
            start = time.thread_time()
            try:
                return apply_commands(index, commands, **kwargs)
            finally:
                meter.add("apply", time.thread_time() - start)
                if apply_profile is not None and meter.on:
                    apply_profile.disable()

        store.apply_commands = timed_apply  # type: ignore[method-assign]
        committer.submit = timed_async(meter, "submit", committer.submit)  # type: ignore[method-assign]
        jobs.create = timed_async(meter, "build", jobs.create)  # type: ignore[method-assign]
        gc_callback = gc_timer(meter)
        gc.callbacks.append(gc_callback)
        headers = {b"content-type": TYPES[fmt], b"accept": TYPES[fmt]}
        jobs_done = 0
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(committer.run)
                meter.on = True
                if profile is not None:
                    profile.enable()
                for body in requests:
                    now[0] += 1
                    request = Request("POST", "/v1/jobs/batch", {}, headers, body)
                    request.principal = ANONYMOUS  # auth off, as `tempo serve` without tokens
                    start = time.thread_time()
                    response = await api.create_batch(request)
                    meter.add("total", time.thread_time() - start)
                    assert response.status == 200, response.body[:300]
                    jobs_done += body.count(b"queue:x")
                if profile is not None:
                    profile.disable()
                meter.on = False
                committer.close()
        finally:
            gc.callbacks.remove(gc_callback)
        if digest:
            print(f"{fmt} digest: {store.digest()}")
        if pages:
            print(f"{fmt}: the last round's tables\n{pages_table(store.env, jobs_done)}")
        store.close()
    c = meter.cpu_s
    c["build"] -= c["submit"]
    c["views"] = c["total"] - c["decode"] - c["build"] - c["submit"] - c["encode"]
    c["total"] += c["apply"]
    return {k: v / jobs_done for k, v in c.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=1000, help="jobs per request")
    ap.add_argument("--key-every", type=int, default=10, help="every Nth item has a request key (0: none)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spread-days", type=float, default=0.0,
                    help="spread the jobs' `at` over this many days, as bench/scale.py does (default: one instant)")
    ap.add_argument("--format", choices=("json", "msgpack", "both"), default="both")
    ap.add_argument("--profile", default=None, help="cProfile of the last round (`.apply` beside it: commit thread)")
    ap.add_argument("--digest", action="store_true", help="print Store.digest() of the last round's tables")
    ap.add_argument("--pages", action="store_true", help="print the last round's tables' pages per job (bench/_pages.py)")
    args = ap.parse_args()
    # Once per request, so the wrappers cost nothing per job; where
    # `create_batch` looks them up (net/jobs_api.py).
    jobs_api._decode_batch_at_once = timed(CURRENT, "decode", jobs_api._decode_batch_at_once)
    jobs_api.encode = timed(CURRENT, "encode", jobs_api.encode)  # type: ignore[attr-defined]
    gc.freeze()
    formats = ("json", "msgpack") if args.format == "both" else (args.format,)
    print(f"server CPU per job, µs (least of {args.rounds} rounds, per phase; {args.batches} batches of {args.batch};"
          f" request key on every {args.key_every}th item)")
    print(f"{'body':<8}" + "".join(f"{p:>9}" for p in (*PHASES, "total", "(gc)")))
    for fmt in formats:
        requests = bodies(fmt, args.batches, args.batch, args.key_every, args.spread_days)
        per_round = []
        for i in range(args.rounds):
            last = i == args.rounds - 1
            profile = cProfile.Profile() if args.profile and last else None
            apply_profile = cProfile.Profile() if profile is not None else None
            per_round.append(trio.run(one_round, fmt, requests, profile, apply_profile, args.digest and last, args.pages and last))
            if profile is not None:
                profile.dump_stats(f"{args.profile}.{fmt}")
                apply_profile.dump_stats(f"{args.profile}.{fmt}.apply")
        cells = [min(r.get(p, 0.0) for r in per_round) * 1e6 for p in (*PHASES, "total", "gc")]
        print(f"{fmt:<8}" + "".join(f"{c:>9.2f}" for c in cells))


if __name__ == "__main__":
    main()
