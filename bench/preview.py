"""A flood of schedule previews, and what it does to everyone else.

    .venv/bin/python bench/preview.py [--clients C] [--seconds S] [--requests-max N]

Starts one `tempo serve` on a free loopback port (temporary data dir) and,
for S seconds (default 10, at most 60) or N requests (default 20,000),
whichever comes first, has C clients (default 8) post
`POST /v1/schedules/preview` with `count` 1000, the largest allowed, round
robin over a few cron expressions in several zones and one that is rejected
(`0 0 31 4,6,9,11 1-5`, `400`). Beside them a probe asks `GET /healthz`
every 10 ms. It prints previews per second, their latency, the probe's
latency, and the server's event-loop lag p99 and max and its GC pauses from
/metrics scraped before and after (docs/operations.md "Event-loop lag").
Targets: lag p99 ≤ 10 ms, max ≤ 50 ms apart from GC pauses. Clients and
server share this machine's cores, so the rates are lower bounds.
"""

import argparse
import os
import sys
import tempfile
import time

import httpx
import msgspec
import trio

sys.path.insert(0, os.path.dirname(__file__))
from _server import Node, start, stop_timeout_s, table
from tempo.loadgen import pause_figures, pct, scrape_pauses

SECONDS_MAX = 60.0
HEALTH_EVERY_S = 0.01
# (cron, timezone, expected status): every 1,000 times take the same path
# through the matcher as a job's runs do; the last is rejected up front.
SCHEDULES = [
    ("*/15 * * * *", "Europe/Berlin", 200),
    ("0 9 * * 1-5", "America/New_York", 200),
    ("30 2 * * *", "Australia/Lord_Howe", 200),
    ("0 0 29 2 *", "UTC", 200),
    ("0 0 */7 2 1", "Pacific/Chatham", 200),
    ("* * * * *", "UTC", 200),
    ("0 0 31 4,6,9,11 1-5", "UTC", 400),
]
_enc = msgspec.json.Encoder()


async def flood(url: str, clients: int, seconds: float, requests_max: int) -> dict:
    latencies_s: list[float] = []
    health_s: list[float] = []
    sent = 0
    deadline_s = trio.current_time() + seconds

    async def client(first: int) -> None:
        nonlocal sent
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0) as http:
            i = first
            while sent < requests_max and trio.current_time() < deadline_s:
                sent += 1
                cron, zone, status = SCHEDULES[i % len(SCHEDULES)]
                i += 1
                body = _enc.encode({"schedule": {"cron": cron, "timezone": zone}, "after": "2027-01-01T00:00:00Z",
                                    "count": 1000})
                started_s = time.perf_counter()
                r = await http.post("/v1/schedules/preview", content=body, headers={"content-type": "application/json"})
                latencies_s.append(time.perf_counter() - started_s)
                assert r.status_code == status, (cron, r.status_code, r.text[:300])

    async def health(done: trio.Event) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as http:
            while not done.is_set():
                started_s = time.perf_counter()
                r = await http.get("/healthz")
                health_s.append(time.perf_counter() - started_s)
                assert r.status_code == 200
                await trio.sleep(HEALTH_EVERY_S)

    started = time.monotonic()
    done = trio.Event()
    async with trio.open_nursery() as outer:
        outer.start_soon(health, done)
        async with trio.open_nursery() as nursery:
            for c in range(clients):
                nursery.start_soon(client, c)
        done.set()
    elapsed_s = time.monotonic() - started
    return {"requests": len(latencies_s), "seconds": elapsed_s, "latencies_s": latencies_s, "health_s": health_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--requests-max", type=int, default=20_000)
    args = parser.parse_args()
    if not 0 < args.seconds <= SECONDS_MAX or args.clients < 1 or args.requests_max < 1:
        parser.error(f"--seconds in (0, {SECONDS_MAX:g}], --clients and --requests-max ≥ 1")
    with tempfile.TemporaryDirectory(prefix="tempo-bench-") as tmp:
        server = Node(os.path.join(tmp, "n1"))
        try:
            start(server)
            before = scrape_pauses([server.url])
            got = trio.run(flood, server.url, args.clients, args.seconds, args.requests_max)
            after = scrape_pauses([server.url])
            status = server.stop(timeout_s=stop_timeout_s)
        finally:
            server.cleanup()
    lag = pause_figures(before, after)
    ms = lambda s: "-" if s is None else f"{s * 1000:.1f}"  # noqa: E731
    print(f"preview flood: {args.clients} clients, count 1000, {len(SCHEDULES)} schedules round robin, "
          f"{os.cpu_count()} CPUs (clients and server share them)")
    print(table([
        ("previews", got["requests"], f"{got['requests'] / got['seconds']:,.0f}/s", ms(pct(got["latencies_s"], 50)),
         ms(pct(got["latencies_s"], 99)), ms(max(got["latencies_s"], default=None))),
        ("GET /healthz beside them", len(got["health_s"]), "-", ms(pct(got["health_s"], 50)),
         ms(pct(got["health_s"], 99)), ms(max(got["health_s"], default=None))),
    ], ("requests", "count", "rate", "p50 ms", "p99 ms", "max ms")))
    if lag:
        print(f"event-loop lag: p99 ≤ {ms(lag['loop_lag_p99_s'])} ms (target 10), max {ms(lag['loop_lag_max_s'])} ms "
              f"(target 50 apart from GC); GC pauses: {lag['gc_pauses']}, longest {ms(lag['gc_pause_max_s'])} ms")
    if status != 0:
        print(f"bench/preview.py: tempo serve exited {status} on SIGTERM (docs/operations.md: 0)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
