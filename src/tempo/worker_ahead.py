"""Pre-dispatch in the worker library (docs/semantics.md "Pre-dispatch"):
runs a claim with `ahead_ms` handed out before their due times are held,
confirmed with the leader just before their due time, and started at it.

- A claim with `ahead_ms` answers `server_time`, the leader's time when it
  answered. The leader's clock is at least `server_time` when the answer
  arrives, so `server_time - arrival` bounds the offset of its clock from
  the worker's from below, off by the answer's way back; the worker takes
  the largest bound of its latest `offset_answers_max` answers. A long poll,
  which waited, gives as tight a bound as a quick claim, and a run starts
  late by that way back rather than early.
- A run claimed before its due time (`started_at` < `due_at`) is held: its
  handler task waits. The runs due at one instant are one wave: at
  `starts_lead_s` before it the worker asks `POST /v1/starts` for them, up
  to `limits.starts_runs_max` a call, the calls at once. The leader
  answers no earlier than `limits.predispatch_stop_ms` before the due
  time. A run in `stop` is dropped without a result (`NotStarted`); one in
  `start` starts when the worker's clock, corrected, reaches its
  `due_at`. A wave whose calls get no answer (`limits.claim_retry_s_max`
  of retries) starts none of its runs: their leases bring them back.
- A run claimed at or after its due time starts at once, as without
  `ahead_ms`.
- While a wave's tasks wake, Python's cycle collector is held off
  (`gc.disable`, then back as it was): each wake allocates, and a full
  collection of a process holding 25,000 runs took up to 0.1 s, in the
  middle of the wave (docs/performance.md "Pre-dispatch").
"""

import gc
import logging
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import trio

from tempo import clock, limits
from tempo.net.client import Unavailable

log = logging.getLogger("tempo.worker")

# How long before a wave's due time its `POST /v1/starts` goes out. The
# leader holds the calls until `limits.predispatch_stop_ms` before, so this
# covers the way there and the leader's reading of the calls: for a wave
# of 100,000 runs that was most of a second of its CPU, and with a lead of
# 0.15 s the answers came up to 0.85 s after the due time
# (docs/performance.md "Pre-dispatch").
starts_lead_s = 1.0
offset_answers_max = 32
starts_timeout_s = 10.0
# The longest the cycle collector is held off for one wave, should some of
# its tasks not wake (they were cancelled as it was set).
collector_hold_s_max = 1.0


class NotStarted(Exception):
    """A held run the leader says not to start (stopped, or gone)."""


class _Poster(Protocol):
    async def post(self, path: str, body: Any, *, timeout_s: float, deadline_s: float = ...) -> tuple[int, Any]: ...


@dataclass
class _Wave:
    due_ms: int
    start_s: float  # trio clock
    runs: list[tuple[str, int]] = field(default_factory=list)
    start: set[str] = field(default_factory=set)
    go: trio.Event = field(default_factory=trio.Event)  # answered (or not), and `start_s` has come
    waiting: int = 0  # tasks waiting on `go`
    woken: trio.Event = field(default_factory=trio.Event)  # no task waits on `go` any more


def ms_of(iso: str) -> int:
    return clock.ms_from_datetime(datetime.fromisoformat(iso))


class Ahead:
    """A worker's held runs. `run` is a service task of the worker; the
    others are called from its claim loop and handler tasks."""

    def __init__(self, transport: _Poster, worker_id: str, ahead_ms: int):
        self.transport = transport
        self.worker_id = worker_id
        self.ahead_ms = ahead_ms
        # The leader's clock minus this one's (ms): the largest bound of the
        # latest answers (`answered`).
        self.offset_ms = 0.0
        self._offsets_ms: deque[float] = deque(maxlen=offset_answers_max)
        self._start_s: dict[tuple[str, int], tuple[int, float]] = {}
        self._waves: dict[int, _Wave] = {}
        self._nursery: trio.Nursery | None = None
        # Waves waking now, and whether the collector was on before the first.
        self._collector_holds = 0
        self._collector_was_on = True

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await trio.sleep_forever()

    def claim_fields(self) -> dict[str, int]:
        return {"ahead_ms": self.ahead_ms} if self.ahead_ms else {}

    def answered(self, answer: dict[str, Any], received_s: float) -> None:
        """A claim's answer, received at this UNIX time: the clock offset,
        and when each held run starts (trio clock)."""
        server_time = answer.get("server_time")
        if not isinstance(server_time, str):
            return
        self._offsets_ms.append(ms_of(server_time) - received_s * 1000)
        self.offset_ms = max(self._offsets_ms)
        now_s, wall_ms = trio.current_time(), time.time() * 1000
        for run in answer.get("runs", ()):
            due_ms = ms_of(run["due_at"])
            if run.get("started_at") and ms_of(run["started_at"]) < due_ms:
                start_s = now_s + (due_ms - self.offset_ms - wall_ms) / 1000
                self._start_s[(run["id"], run["attempt"])] = (due_ms, start_s)

    def start_at_s(self, run: dict[str, Any]) -> float | None:
        """When a held run starts (trio clock); None: it is not held."""
        held = self._start_s.get((run["id"], run["attempt"]))
        return None if held is None else held[1]

    def leader_now_ms(self) -> float:
        """Now on the leader's clock, as this worker corrects its own."""
        return time.time() * 1000 + self.offset_ms

    async def wait_start(self, run: dict[str, Any]) -> None:
        """Returns at the due time of a run held (`start_at_s`) if the
        leader says it may start; else raises `NotStarted`."""
        held = self._start_s.pop((run["id"], run["attempt"]), None)
        assert held is not None, "a held run waits once"
        due_ms, start_s = held
        wave = self._waves.get(due_ms)
        if wave is None:
            wave = self._waves[due_ms] = _Wave(due_ms, start_s)
            assert self._nursery is not None, "Ahead.run is started with the worker"
            self._nursery.start_soon(self._confirm, wave)
        wave.runs.append((run["id"], run["attempt"]))
        # One wake-up per run, when the leader has answered and `start_s`
        # has come: a thousand tasks each asleep until the same instant
        # wake later, and more spread, than on one event set then.
        wave.waiting += 1
        try:
            await wave.go.wait()
        finally:
            wave.waiting -= 1
            if wave.waiting == 0:
                wave.woken.set()
        if run["id"] not in wave.start:
            raise NotStarted("the leader said not to start it")

    async def _confirm(self, wave: _Wave) -> None:
        await trio.sleep_until(wave.start_s - starts_lead_s)
        if self._waves.get(wave.due_ms) is wave:
            del self._waves[wave.due_ms]  # runs held from now on are a wave of their own
        async with trio.open_nursery() as nursery:
            for start in range(0, len(wave.runs), limits.starts_runs_max):
                nursery.start_soon(self._ask, wave, wave.runs[start : start + limits.starts_runs_max])
        await trio.sleep_until(wave.start_s)
        with self._collector_held():
            wave.go.set()
            with trio.move_on_after(collector_hold_s_max):
                if wave.waiting:
                    await wave.woken.wait()

    @contextmanager
    def _collector_held(self) -> Iterator[None]:
        """The cycle collector off while a wave wakes, then as it was."""
        if self._collector_holds == 0:
            self._collector_was_on = gc.isenabled()
            gc.disable()
        self._collector_holds += 1
        try:
            yield
        finally:
            self._collector_holds -= 1
            if self._collector_holds == 0 and self._collector_was_on:
                gc.enable()

    async def _ask(self, wave: _Wave, runs: list[tuple[str, int]]) -> None:
        body = {"worker": self.worker_id, "runs": [{"run_id": r, "attempt": a} for r, a in runs]}
        try:
            status, answer = await self.transport.post(
                "/v1/starts", body, timeout_s=starts_timeout_s, deadline_s=trio.current_time() + limits.claim_retry_s_max
            )
        except Unavailable:
            log.warning("no server answered POST /v1/starts for %d runs; they do not start here", len(runs))
            return
        if status != 200 or not isinstance(answer, dict):
            log.error("POST /v1/starts answered %s: %s; %d runs do not start here", status, answer, len(runs))
            return
        wave.start.update(answer.get("start", ()))
