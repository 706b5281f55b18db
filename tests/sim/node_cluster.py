"""Deterministic simulator of whole nodes: raft, the replica loop, apply on
a real store, the production dispatcher and `Jobs` on the leader, clients
and workers (docs/raft.md "The whole-node simulator").

From one seed (`random.Random(seed)`), with nothing from the wall clock:

- each node is the real `Replica` (node/replica.py) on a real `Store` and
  `RaftLog` in a temporary directory, its Readies handled by this module's
  driver running `Replica.steps` (the steps the trio driver runs);
- on each node, as server.py's `_serve_member` wires them: a real
  `clock.Clock` over a simulated wall clock (stepped forward and backward,
  a small skew per node) and a monotonic clock of its own (a new origin at
  each restart), fed each applied stamp by server.py's `_observe_stamps`;
  the production `Dispatcher` (engine/dispatch.py), whose claim sequence
  (`claim_steps`), overlap rounds (`overlap_steps`) and lease checks
  (`expire_steps`) are step generators this module runs step by step, reset and loaded when the node starts
  leading and reset when it stops, as server.py does; and the production
  `Jobs` for every client request (node_workload.py); and the production
  read path, `Replica.read_steps` (the steps of `confirm_read`), for
  every read;
- the network loses, duplicates, delays and reorders messages, and
  partitions nodes; a node crashes (between any two steps of a Ready, too)
  and restarts from its store: LMDB commits with sync=True, so what a
  committed transaction wrote survives and nothing else does; a node's
  process pauses (it neither ticks nor handles nor answers meanwhile), the
  leader's too while it is cut off (it comes back deposed without knowing
  it); the whole cluster goes down for a while (an outage: catch-up
  afterwards);
- clients create, patch, delete, pause, resume, trigger, cancel,
  backfill and read jobs (node_workload.py); workers claim (with a claim key or
  without, a claim whose answer did not come again with its key),
  heartbeat, report (some attempts failed), pause (a long GC) and vanish,
  and the answers they are sent may be lost.

A run has a fault phase, then a healed phase in which every invariant of
node_invariants.py must hold within its bound. The invariants are checked
after every step; a violation raises `NodeSimFailure` naming the seed and the
command that replays it. The whole run happens inside one `trio.run` with a
`MockClock` (the replica and the dispatcher read `trio.current_time()`),
without awaiting.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import os
import random
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field, replace
from typing import Any

import trio
import trio.testing

from tempo import clock, errors, ids, limits
from tempo.engine.commandlog import Answer, Waiter
from tempo.engine.commands import (
    ClaimKey,
    Command,
    Result,
)
from tempo.engine.dispatch import Beat, ClaimStep, Commit, Dispatcher, Wait
from tempo.engine.dispatch_core import ClaimedRun, DispatchCore
from tempo.engine.jobs import Jobs
from tempo.engine.raftlog import RaftLog
from tempo.engine.records import ClaimKeyEntry, Run
from tempo.engine.request_checks import queues_hash
from tempo.engine.store import Store
from tempo.node.replica import Phase, ReadWait, Replica, Write
from tempo.raft import MESSAGE_DECODER, MESSAGE_ENCODER, Message, Role
from tempo.server import _observe_stamps

from .node_invariants import WORKER_HOLDS_MAX, NodeInvariants, NodeSimFailure, ReadBegun
from .node_planted import PLANTED
from .node_workload import OWNER, HandingCommitter, Submitted, Workload, before_1970_refused

STEP_S = 0.1  # one raft tick (limits.raft_tick_ms): the simulator's step
# A worker asks whether its held runs may start this long before their due
# time (tempo/worker_ahead.py `starts_lead_s`), and again, of another node,
# when a call went unanswered this long.
STARTS_LEAD_MS = 1_000
STARTS_TIMEOUT_S = 2.0
WALL_START_MS = 1_800_000_000_000
QUEUE = f"{OWNER}\x00q"
QUEUES_HASH = queues_hash(["q"])
STORE_MAP_BYTES = 1 << 24


@dataclass
class Params:
    """One seed's mix, drawn at random (swarm testing)."""

    node_count: int
    fault_s: float
    heal_s: float
    drop_rate: float
    duplicate_rate: float
    delay_s_max: float
    partition_rate: float  # per step
    crash_rate: float  # per node and step
    crash_mid_ready_rate: float  # per step of a Ready
    node_pause_rate: float  # per node and step: the process stops (a long GC, SIGSTOP) for up to 3 s
    transfer_rate: float  # per step: the leader hands leadership over
    leader_crash_rate: float  # per step: the leader crashes (a failover)
    # Per step: the leader's process pauses and it is cut off meanwhile and
    # for a while after (a virtual machine moved): it comes back believing
    # it leads while a newer leader serves, until CheckQuorum deposes it.
    leader_cut_rate: float
    snapshot_entries: int  # entries between a node's compactions
    wall_step_rate: float  # per step
    answer_loss_rate: float  # a claim's answer that never reaches its worker
    create_rate: float  # per step
    repeating_share: float
    change_rate: float  # per step: a job paused, resumed, patched, deleted, triggered, cancelled or backfilled
    outage_rate: float  # per step: every node crashes at once, down for 2-6 s (catch-up of the slots missed)
    workers: int
    worker_pause_rate: float  # per worker and step
    worker_vanish_rate: float  # per worker and step
    lease_s: int
    keyed_share: float  # claims that carry a claim key (and are retried with it)
    fail_share: float  # attempts whose worker reports a failure (retried after the backoff)
    read_rate: float  # per step: a client reads jobs (a linearizable GET) at a node that believes it leads
    # Claims that look ahead (pre-dispatch, docs/semantics.md "Pre-dispatch"):
    # drawn from a random source of their own (`NodeSimulator.ahead_rng`),
    # so a seed without them runs as it did before they were simulated.
    ahead_share: float = 0.0

    @classmethod
    def draw(cls, rng: random.Random) -> Params:
        def maybe(p: float, hi: float) -> float:
            return rng.uniform(0, hi) if rng.random() < p else 0.0

        return cls(
            node_count=3,
            fault_s=rng.choice((4.0, 7.0, 10.0)),
            heal_s=15.0,
            drop_rate=maybe(0.6, 0.2),
            duplicate_rate=maybe(0.4, 0.1),
            delay_s_max=rng.choice((0.05, 0.1, 0.3)),
            partition_rate=maybe(0.5, 0.05),
            crash_rate=maybe(0.7, 0.02),
            crash_mid_ready_rate=maybe(0.4, 0.02),
            node_pause_rate=maybe(0.4, 0.02),
            transfer_rate=maybe(0.5, 0.08),
            leader_crash_rate=maybe(0.7, 0.05),
            snapshot_entries=rng.choice((8, 20, 1_000_000)),
            wall_step_rate=maybe(0.4, 0.03),
            answer_loss_rate=maybe(0.5, 0.2),
            create_rate=rng.uniform(0.02, 0.15),
            repeating_share=rng.uniform(0.0, 0.5),
            change_rate=maybe(0.6, 0.08),
            outage_rate=maybe(0.3, 0.03),
            workers=rng.choice((2, 3)),
            worker_pause_rate=maybe(0.4, 0.02),
            worker_vanish_rate=maybe(0.4, 0.01),
            lease_s=rng.choice((5, 6)),
            keyed_share=rng.choice((0.0, 0.5, 1.0)),
            fail_share=rng.choice((0.0, 0.0, 0.2)),
            read_rate=rng.uniform(0.1, 0.5),
            leader_cut_rate=maybe(0.6, 0.05),
        )


class Crash(Exception):
    """A node dies between two steps of a Ready."""


@dataclass
class ClaimInFlight:
    """A claim of `Dispatcher.claim_steps` whose `Commit` is being committed."""

    worker: SimWorker
    steps: Generator[ClaimStep, Answer, list[ClaimedRun]]
    waiter: Waiter
    sent_s: float
    # Whether the answer comes from what a recorded claim key took (the
    # commit's outcome was the key's entry): the worker's own attempts again.
    keyed: bool = False
    wall_ms: int = 0  # the node's wall clock when its last step was decided (invariants 7, 8)
    ahead_ms: int = 0  # how far ahead of its due time it may take a run


@dataclass
class StartsInFlight:
    """A `POST /v1/starts` of `Dispatcher.starts_steps`: waiting until its
    stop point (`wake_s`, the simulator's monotonic clock) or for its
    barrier's commit (`waiter`)."""

    worker: SimWorker
    holds: list[Hold]
    steps: Generator[ClaimStep, Answer, list[bool]]
    wake_s: float | None = None
    waiter: Waiter | None = None


@dataclass
class ReadInFlight:
    """A linearizable read (`Replica.read_steps`) waiting for its round."""

    steps: Generator[ReadWait, None, None]
    begun: ReadBegun
    wait: ReadWait | None = None


@dataclass
class Pending:
    """A command waiting for its answer, and what to do with it."""

    waiter: Waiter
    done: Callable[[object], None]


class SimNode:
    """One member: its store, its replica and its dispatcher, rebuilt from
    the store at each start."""

    def __init__(self, sim: NodeSimulator, node_id: int, path: str) -> None:
        self.sim = sim
        self.id = node_id
        self.path = path
        self.alive = False
        self.incarnation = 0
        self.down_until_s = 0.0
        # A paused process: it neither ticks nor handles nor answers until
        # then; what is sent to it waits in `inbox`.
        self.paused_until_s = 0.0
        self.inbox: list[bytes] = []
        self.skew_ms = sim.rng.randint(-200, 200)
        self.mono_origin_s = 0.0
        self.store: Store | None = None
        self.replica: Replica | None = None
        self.dispatcher: Dispatcher | None = None
        self.jobs: Jobs | None = None
        self.clock: clock.Clock | None = None
        self.dispatching = False
        self.claims: list[ClaimInFlight] = []
        self.starts: list[StartsInFlight] = []
        self.pending: list[Pending] = []
        self.reads: list[ReadInFlight] = []
        self.expiring: Pending | None = None
        self.overlapping: Pending | None = None  # an `OverlapRuns` being committed

    # -- clocks ---------------------------------------------------------------

    def wall_ms(self) -> int:
        return self.sim.wall_ms() + self.skew_ms

    def wall_ns(self) -> int:
        return self.wall_ms() * 1_000_000

    def mono_ns(self) -> int:
        return round((self.sim.now_s + self.mono_origin_s) * 1e9)

    def now_ms(self) -> int:
        assert self.clock is not None
        return self.clock.now_ms()

    @property
    def core(self) -> DispatchCore | None:
        return None if self.dispatcher is None else self.dispatcher.core

    # -- life -------------------------------------------------------------------

    def start(self) -> None:
        sim = self.sim
        self.incarnation += 1
        self.mono_origin_s = sim.rng.uniform(0, 1000)
        self.store = Store(self.path, map_bytes=STORE_MAP_BYTES)
        raft_log = RaftLog(self.store, sim.voters)
        incarnation = self.incarnation
        self.replica = sim.planted.replica(
            self.store, raft_log, self.id, lambda messages: sim.send(self.id, incarnation, messages),
            rng=random.Random(sim.rng.getrandbits(64)), snapshot_entries=sim.params.snapshot_entries,
        )
        self.clock = sim.planted.clock(floor_ms=self.store.stamp_ms(), wall_ns=self.wall_ns, monotonic_ns=self.mono_ns)
        # server.py `_serve_member`'s wiring: the clock observes each applied
        # stamp, then the dispatcher (the production driver, on the core a
        # planted bug may replace) is fed each entry's changes. Its
        # monotonic time is `trio.current_time()`, the simulator's MockClock.
        self.replica.listeners.append(_observe_stamps(self.clock))
        self.dispatcher = Dispatcher(self.store, self.replica, now_ms=self.clock.now_ms)
        self.dispatcher.core = sim.planted.core(self.store, self.clock.now_ms())
        # Its coroutines (`report`) hand their commands out to `call`; its
        # claim and overlap rounds run as steps (`claim_steps`, `overlap_steps`).
        self.dispatcher.committer = HandingCommitter()  # type: ignore[assignment]
        # The API's creates and changes go through `Jobs` (node_workload.py).
        self.jobs = Jobs(
            self.store, HandingCommitter(), now_ms=self.clock.now_ms, random_bytes=sim.rng.randbytes,  # type: ignore[arg-type]
        )
        self.dispatching = False
        self.claims = []
        self.starts = []
        self.pending = []
        self.reads = []
        self.expiring = None
        self.overlapping = None
        self.alive = True

    def crash(self) -> None:
        """Everything in memory is lost; the store keeps what it committed."""
        assert self.store is not None
        self.sim.log(f"crash n{self.id}")
        for claim in self.claims:
            claim.worker.claiming = False
        self.store.close()
        self.store = self.replica = self.dispatcher = self.jobs = self.clock = None
        self.inbox = []
        self.paused_until_s = 0.0
        self.alive = False
        self.claims = []
        self.starts = []
        self.pending = []
        self.reads = []
        self.expiring = None
        self.overlapping = None
        self.dispatching = False
        self.sim.invariants.node_crashed(self)

    # -- the replica loop's driver ------------------------------------------------

    def pump(self) -> None:
        """What a wake-up of the replica loop does (`Replica.run`), on this
        thread; the simulator may crash the node between any two steps."""
        replica = self.replica
        assert replica is not None
        rate = self.sim.params.crash_mid_ready_rate if self.sim.faulty else 0.0
        for rd in replica.readies_due():
            if rd.role == Role.LEADER and rd.entries:
                self.sim.invariants.appended(self, rd.entries)
            for step in replica.steps(rd):
                if rate and self.sim.rng.random() < rate:
                    raise Crash
                if isinstance(step, Write):
                    try:
                        replica.write_now(step)
                    except (AssertionError, errors.TempoError, ValueError, OverflowError, KeyError) as exc:
                        # Apply's own assertions and what a bad entry
                        # raises (a record out of range, `Corrupt`).
                        raise self.sim.fail(f"invariant 10, an entry did not apply on n{self.id} (a "
                                            f"{'leader' if rd.role == Role.LEADER else 'follower'}): "
                                            f"{type(exc).__name__}: {exc} ({_where(exc)})") from exc
                else:
                    for listener in replica.listeners:
                        assert listener(step.changes) is None
        self.compact()

    def compact(self) -> None:
        """The replica's compaction (`Replica._maybe_snapshot`, `_snapshot`),
        at once: a copy of the tables at the applied index becomes the
        snapshot, and the log before it goes."""
        replica, store = self.replica, self.store
        assert replica is not None and store is not None
        raft_log = replica.raft_log
        if replica.applied_index - raft_log.snapshot().meta.index < replica.snapshot_entries:
            return
        index, data = store.snapshot_data()
        if raft_log.snapshot().meta.index < index <= replica.node.log.applied:
            raft_log.write_snapshot_file(index, data)
            replica.node.compact(index, data)
            self.sim.log(f"n{self.id} compacts at {index}")

    def answers(self) -> None:
        """Hands out the answers of the commands that were answered."""
        for pending in [p for p in self.pending if p.waiter.done.is_set()]:
            self.pending.remove(pending)
            self._acked(pending.waiter)
            pending.done(pending.waiter.outcome)
        for claim in [c for c in self.claims if c.waiter.done.is_set()]:
            self.claims.remove(claim)
            self._acked(claim.waiter)
            self._claim_answered(claim)
        if self.expiring is not None and self.expiring.waiter.done.is_set():
            expiring, self.expiring = self.expiring, None
            expiring.done(expiring.waiter.outcome)
        if self.overlapping is not None and self.overlapping.waiter.done.is_set():
            overlapping, self.overlapping = self.overlapping, None
            overlapping.done(overlapping.waiter.outcome)
        now_s = trio.current_time()
        for read in [r for r in self.reads if r.wait is None or r.wait.done.is_set() or now_s >= r.wait.deadline_s]:
            self.reads.remove(read)
            self._read_on(read)
        for call in [c for c in self.starts if (c.waiter is not None and c.waiter.done.is_set())
                     or (c.wake_s is not None and now_s >= c.wake_s)]:
            self.starts.remove(call)
            if call.waiter is None:
                self._starts_step(call, None)
            else:
                outcome = call.waiter.outcome
                assert not isinstance(outcome, BaseException) or isinstance(outcome, errors.TempoError), outcome
                self._starts_step(call, outcome)

    def _acked(self, waiter: Waiter) -> None:
        """A command of a client's (a create, change, delete, claim or
        result) answered: a write acknowledged, unless it failed (invariant 11)."""
        if not isinstance(waiter.outcome, BaseException):
            self.sim.invariants.write_acked(self)

    # -- reads (node/replica.py `read_steps`, as net/api.py's GET awaits `confirm_read`) --

    def read(self, begun: ReadBegun) -> None:
        """A linearizable GET: `read_steps` (the steps of `confirm_read`)
        run until they wait; the read goes on once its round ends
        (`answers`). The simulator's clock moves in whole steps, so a
        `ReadWait` is looked at again after the next step."""
        assert self.replica is not None
        self.sim.log(f"n{self.id}: read")
        deadline_s = trio.current_time() + limits.read_confirm_timeout_s
        self._read_on(ReadInFlight(self.replica.read_steps(deadline_s), begun))

    def _read_on(self, read: ReadInFlight) -> None:
        try:
            read.wait = next(read.steps)
        except StopIteration:
            # Confirmed: the API's handler answers from the tables now.
            assert self.store is not None
            self.sim.invariants.read_answered(self, read.begun, self.store)
            return
        except errors.TempoError as exc:
            self.sim.invariants.read_refused(self, read.begun, exc)
            return
        self.reads.append(read)

    def call(self, coro: Coroutine[Any, Any, Any], done: Callable[[object], None], what: str) -> None:
        """Runs a `Jobs` coroutine (node_workload.py) up to its next command,
        which is submitted here; its answer is sent in when it comes
        (`_called`). `done` gets its result, or the `TempoError` it raised."""
        self.sim.log(f"n{self.id}: {what}")
        self._called(coro, done, None, [])

    def _called(
        self, coro: Coroutine[Any, Any, Any], done: Callable[[object], None], answer: object, sent: list[Command]
    ) -> None:
        """`sent`: the call's commands so far; once it answers without a
        fault, they were acknowledged (invariant 13 judges the stops among them)."""
        assert self.replica is not None
        while True:
            try:
                if isinstance(answer, BaseException):
                    step = coro.throw(answer)
                else:
                    step = coro.send(answer)
            except StopIteration as stop:
                self.sim.invariants.commands_acked(sent)
                done(stop.value)
                return
            except errors.TempoError as exc:
                done(exc)
                return
            assert isinstance(step, Submitted), f"a Jobs call awaited {step!r}, not a command"
            try:
                waiter = self.replica.submit_now(step.command)
            except errors.TempoError as exc:
                answer = exc
                continue
            sent.append(step.command)
            self.pending.append(Pending(waiter, lambda outcome: self._called(coro, done, outcome, sent)))
            return

    # -- the dispatcher's driver (engine/dispatch.py, synchronously) ------------------

    @property
    def running(self) -> bool:
        return self.alive and self.sim.now_s >= self.paused_until_s

    def leading(self) -> bool:
        """Whether it leads, as a client that reaches it sees (a paused
        node answers nobody)."""
        return self.running and self.replica is not None and self.replica.phase is Phase.LEADING

    def dispatch(self) -> None:
        """server.py's rule: the dispatcher runs while the node leads
        (`Dispatcher.run`: reset, then loaded), and is reset when it stops.
        Then its tick, a round of its overlap loop (`overlap_steps`) and a
        lease check."""
        dispatcher = self.dispatcher
        assert dispatcher is not None
        if not self.leading():
            if self.dispatching:
                self._stop_dispatching()
            return
        if not self.dispatching:
            dispatcher.reset()
            dispatcher.load(dispatcher.now_ms())
            self.dispatching = True
            self.sim.invariants.took_over(self)
        while dispatcher.tick(dispatcher.now_ms()):
            pass
        if self.expiring is None:
            self._expire()
        if self.overlapping is None:
            self._overlap()
        self.sim.invariants.check_core(self)

    def _stop_dispatching(self) -> None:
        """server.py's `_lead` stops the dispatcher's tasks (its lease check
        and overlap rounds, whatever they wait for) and resets it; it runs
        again, loaded afresh, while the node still leads."""
        assert self.dispatcher is not None
        self.dispatcher.reset()
        self.dispatching = False
        self.expiring = self.overlapping = None

    def _overlap(self) -> None:
        """`Dispatcher._overlap_loop`, one round: `overlap_steps`."""
        assert self.dispatcher is not None
        self.overlapping = self._commit_one(self.dispatcher.overlap_steps())

    def _expire(self) -> None:
        """`Dispatcher._expire_loop`, one lease check: `expire_steps`."""
        assert self.dispatcher is not None
        self.expiring = self._commit_one(self.dispatcher.expire_steps())

    def _commit_one(self, steps: Generator[Commit, Answer, None]) -> Pending | None:
        """Runs a step generator of one `Commit` (`overlap_steps`,
        `expire_steps`): the command submitted here, its answer (or fault)
        sent back when it comes; None if there was nothing to commit."""
        assert self.replica is not None
        step = next(steps, None)
        if step is None:
            return None
        try:
            waiter = self.replica.submit_now(step.command)
        except errors.TempoError as exc:
            self._finish(steps, exc)
            return None
        return Pending(waiter, lambda outcome: self._finish(steps, outcome))

    def _finish(self, steps: Generator[Commit, Answer, None], outcome: object) -> None:
        """Sends a step generator's `Commit` its answer (or throws its
        fault), which ends it (engine/dispatch.py `_finish`). A `NotLeader`
        it lets out (the lease check lets one out, as leadership goes)
        restarts the dispatcher, as server.py's `_lead` does."""
        try:
            if isinstance(outcome, errors.TempoError):
                steps.throw(outcome)
            else:
                steps.send(outcome)  # type: ignore[arg-type]
        except StopIteration:
            return
        except errors.NotLeader:
            self._stop_dispatching()
            return
        raise AssertionError("a step generator handed out a second Commit")

    def claim(self, worker: SimWorker, runs_max: int, key: str | None, ahead_ms: int = 0) -> bool:
        """`Dispatcher.claim` without a wait (`claim_steps` with its deadline
        now), with its claim key if any, looking `ahead_ms` ahead: False if
        this node does not lead."""
        if not self.leading():
            return False
        assert self.dispatcher is not None
        claim_key = None if key is None else ClaimKey(OWNER, key, QUEUES_HASH, 0)
        steps = self.dispatcher.claim_steps([QUEUE], worker.name, runs_max, trio.current_time(), claim_key, ahead_ms)
        claim = ClaimInFlight(worker, steps, Waiter(), self.sim.now_s, wall_ms=self.wall_ms(), ahead_ms=ahead_ms)
        return self._claim_step(claim, None)

    def _claim_step(self, claim: ClaimInFlight, answer: Answer | BaseException) -> bool:
        """Runs a claim's steps on until its next `Commit` (submitted, the
        claim kept in `claims` until it is answered) or its end. False if
        the node turned out not to lead (the worker tries another)."""
        assert self.replica is not None
        worker, steps = claim.worker, claim.steps
        while True:
            try:
                if isinstance(answer, errors.TempoError):
                    step = steps.throw(answer)
                else:
                    step = steps.send(answer)  # None first: `send(None)` starts it
            except StopIteration as stop:
                worker.claiming = False
                repeat = claim.keyed or not claim.waiter.done.is_set()
                if not repeat:  # a key's runs again were handed out (and stamped) before
                    self.sim.invariants.handed_out(self, stop.value, claim.wall_ms, claim.ahead_ms)
                self._answer(worker, stop.value, claim.sent_s, repeat=repeat)
                if not stop.value:
                    worker.answered()
                return True
            except errors.ClaimKeyReused:
                worker.answered()  # a new key next time
                return True
            except errors.Overloaded:
                worker.claiming = False
                return True
            except errors.TempoError:
                worker.claiming = False
                return False
            assert isinstance(step, Commit), "a claim without a wait waits for nothing"
            claim.wall_ms = self.wall_ms()
            try:
                claim.waiter = self.replica.submit_now(step.command)
            except errors.TempoError as exc:
                answer = exc
                continue
            worker.claiming = True
            self.claims.append(claim)
            return True

    def _claim_answered(self, claim: ClaimInFlight) -> None:
        outcome = claim.waiter.outcome
        claim.keyed = isinstance(outcome, ClaimKeyEntry)
        assert not isinstance(outcome, BaseException) or isinstance(outcome, errors.TempoError), outcome
        self._claim_step(claim, outcome)

    def _answer(self, worker: SimWorker, claimed: list[ClaimedRun], sent_s: float, *, repeat: bool) -> None:
        """A claim's answer on its way to its worker: lost, or there."""
        if self.sim.rng.random() < self.sim.params.answer_loss_rate:
            self.sim.log(f"n{self.id}: the answer of a claim of {len(claimed)} runs to {worker.name} is lost")
            self.sim.invariants.answer_lost(worker, claimed)
            if self.sim.rng.random() < 0.5:
                # The client left before the answer's head went out, and the
                # node saw it (net/workers_api.py `claim`): the runs go back at once.
                assert self.dispatcher is not None
                self.dispatcher.release(claimed)
            return
        worker.got(self, claimed, sent_s, repeat=repeat, server_ms=self.now_ms())

    # -- pre-dispatch: `POST /v1/starts` (net/workers_api.py awaits `Dispatcher.starts`) --

    def ask_starts(self, worker: SimWorker, holds: list[Hold]) -> bool:
        """`Dispatcher.starts` for the held runs `holds`, its steps
        (`starts_steps`) run here: it waits for its stop point, commits its
        barrier, then answers the worker (`SimWorker.starts_answered`).
        False if this node does not lead."""
        if not self.leading():
            return False
        assert self.dispatcher is not None
        runs = [(ids.run_id(h.run.job_id, h.run.nominal_ms), h.attempt) for h in holds]
        self.sim.log(f"n{self.id}: {worker.name} asks to start {len(runs)} held runs")
        self._starts_step(StartsInFlight(worker, holds, self.dispatcher.starts_steps(OWNER, worker.name, runs)), None)
        return True

    def _starts_step(self, call: StartsInFlight, answer: Answer | BaseException) -> None:
        assert self.replica is not None
        call.wake_s = call.waiter = None
        while True:
            try:
                step = call.steps.throw(answer) if isinstance(answer, errors.TempoError) else call.steps.send(answer)
            except StopIteration as stop:
                if self.sim.rng.random() < self.sim.params.answer_loss_rate:
                    self.sim.log(f"n{self.id}: the answer of {call.worker.name}'s starts is lost")
                else:
                    call.worker.starts_answered(call.holds, stop.value)
                return
            except errors.TempoError as exc:
                self.sim.log(f"n{self.id}: {call.worker.name}'s starts refused ({type(exc).__name__})")
                return  # its worker asks again, of another node, when its call times out
            if isinstance(step, Wait):
                call.wake_s = step.wake_s
                self.starts.append(call)
                return
            try:
                call.waiter = self.replica.submit_now(step.command)
            except errors.TempoError as exc:
                answer = exc
                continue
            self.starts.append(call)
            return

    def heartbeat(self, run: Run, attempt: int) -> Beat | BaseException:
        """A worker's heartbeat, as net/workers_api.py answers one (`Dispatcher.beat`)."""
        if not self.leading():
            return errors.NotLeader("not the leader")
        assert self.dispatcher is not None
        try:
            return self.dispatcher.beat(OWNER, ids.run_id(run.job_id, run.nominal_ms), attempt)
        except errors.TempoError as exc:
            return exc


@dataclass
class Hold:
    """A run a worker holds: the attempt it was given, until when it knows
    its lease holds (its own reckoning, from when it sent the request the
    lease answered), and when its work is done."""

    run: Run
    attempt: int
    lease_s: int
    held_until_s: float
    done_at_s: float
    heartbeat_at_s: float
    # How much sooner than `held_until_s` the lease may end elsewhere: a
    # node that a newer leader deposed may answer until it steps down
    # (node_invariants.py `HOLD_MARGIN_S`); none from the newest leader.
    margin_s: float = 0.0
    ok: bool = True  # what its worker reports, once done
    # Claimed ahead of its due time (pre-dispatch): it starts once the
    # leader answered `start` for it and the worker's clock, corrected by
    # the offset its answers show, reaches `run.due_ms`; `work_s` after.
    ahead: bool = False
    node_id: int = 0  # the node that handed it out
    work_s: float = 0.0
    confirmed: bool = False
    asked_s: float | None = None  # when its `starts` call went out, while it awaits the answer


@dataclass
class SimWorker:
    sim: NodeSimulator
    name: str
    alive: bool = True
    paused_until_s: float = 0.0
    claiming: bool = False
    node_guess: int = 1
    claim_at_s: float = 0.0
    holds: dict[tuple[str, int], Hold] = field(default_factory=dict)
    reporting: dict[tuple[str, int], Hold] = field(default_factory=dict)
    # The attempts it was given (it runs each once, however often a keyed
    # retry answers it), and the key of a claim whose answer it awaits.
    seen: set[tuple[str, int, int]] = field(default_factory=set)
    key: str | None = None
    keys_made: int = 0
    # The leader's clock minus the simulator's wall clock, as the worker
    # library bounds it (tempo/worker_ahead.py `Ahead.answered`): the largest
    # `server_time - arrival` of its latest answers.
    offsets_ms: deque[int] = field(default_factory=lambda: deque(maxlen=32))

    def node(self) -> SimNode | None:
        node = self.sim.nodes.get(self.node_guess)
        return node if node is not None and node.alive else None

    def next_node(self) -> None:
        self.node_guess = self.sim.rng.choice(sorted(self.sim.nodes))

    def answered(self) -> None:
        """Its claim was answered (or refused): the next one is a new claim."""
        self.claiming = False
        self.key = None

    def leader_now_ms(self) -> int:
        return self.sim.wall_ms() + (max(self.offsets_ms) if self.offsets_ms else 0)

    def got(
        self, node: SimNode, claimed: list[ClaimedRun], sent_s: float, *, repeat: bool = False, server_ms: int = 0
    ) -> None:
        """A claim's answer reached this worker (`repeat`: a keyed retry's,
        from what the key took), sent when `node`'s clock read `server_ms`."""
        rng = self.sim.rng
        self.answered()
        if self.sim.params.ahead_share:
            self.offsets_ms.append(server_ms - self.sim.wall_ms())
        for one in claimed:
            run = one.run
            slot = (run.job_id, run.nominal_ms)
            if repeat and (run.job_id, run.nominal_ms, run.attempt) in self.seen:
                # Its own attempt again, from its key: a renewed lease.
                hold = self.holds.get(slot)
                if hold is not None and hold.attempt == run.attempt:
                    hold.held_until_s = max(hold.held_until_s, sent_s + hold.lease_s)
                    hold.margin_s = self.sim.invariants.margin_of(node)
                continue
            self.seen.add((run.job_id, run.nominal_ms, run.attempt))
            self.sim.invariants.delivered(self, run, sent_s, repeat=repeat)
            hold = Hold(
                run, run.attempt, one.job.lease_s, sent_s + one.job.lease_s,
                self.sim.now_s + (rng.uniform(0.1, 1.0) if rng.random() < 0.5 else rng.uniform(1.0, 2.5 * one.job.lease_s)),
                self.sim.now_s + one.job.lease_s / 3, self.sim.invariants.margin_of(node),
            )
            if run.started_ms is not None and run.started_ms < run.due_ms:
                # Held ahead: its lease counts from its due time.
                hold.ahead, hold.node_id = True, node.id
                hold.work_s, hold.done_at_s = hold.done_at_s - self.sim.now_s, float("inf")
                hold.held_until_s += max(0, run.due_ms - server_ms) / 1000
            self.holds[(run.job_id, run.nominal_ms)] = hold

    def step(self) -> None:
        if not self.alive or self._faults() or self.sim.now_s < self.paused_until_s:
            return
        self._tend()
        if self.sim.params.ahead_share:
            self._ask_starts()
        if self.reporting:
            self._report()
        self._claim()

    def _faults(self) -> bool:
        """Vanishes or pauses, in the fault phase; True if it did."""
        sim, rng = self.sim, self.sim.rng
        if not sim.faulty:
            return False
        if rng.random() < sim.params.worker_vanish_rate:
            sim.log(f"{self.name} vanishes holding {len(self.holds)} runs")
            self.alive = False
            sim.invariants.worker_gone(self)
            sim.add_worker()
            return True
        if sim.now_s >= self.paused_until_s and rng.random() < sim.params.worker_pause_rate:
            self.paused_until_s = sim.now_s + rng.uniform(0.5, 2.0 * sim.params.lease_s)
            sim.log(f"{self.name} pauses until {self.paused_until_s:.1f}")
            return True
        return False

    def _tend(self) -> None:
        """Its runs: given up when its lease may be gone, done, or heartbeated."""
        sim, now_s = self.sim, self.sim.now_s
        for key, hold in list(self.holds.items()):
            if now_s >= hold.held_until_s:
                # Its own reckoning says the lease may be gone: it stops.
                del self.holds[key]
                sim.invariants.dropped(self, hold)
            elif hold.ahead and hold.confirmed and self.leader_now_ms() >= hold.run.due_ms:
                hold.ahead = False
                hold.done_at_s = now_s + hold.work_s
                sim.invariants.started(self, hold)
            elif now_s >= hold.done_at_s:
                del self.holds[key]
                hold.ok = sim.rng.random() >= sim.params.fail_share
                sim.invariants.finished(self, hold)
                self.reporting[key] = hold
            elif now_s >= hold.heartbeat_at_s:
                self._heartbeat(hold)

    def _ask_starts(self) -> None:
        """Its held runs that come due within a second, which it has not
        asked about (or whose call got no answer within `STARTS_TIMEOUT_S`):
        one `POST /v1/starts` for them (tempo/worker_ahead.py asks a
        second before each wave)."""
        now_s, soon_ms = self.sim.now_s, self.leader_now_ms() + STARTS_LEAD_MS
        holds = [
            h for h in self.holds.values()
            if h.ahead and not h.confirmed and h.run.due_ms <= soon_ms
            and (h.asked_s is None or now_s - h.asked_s >= STARTS_TIMEOUT_S)
        ]
        if not holds:
            return
        node = self.node()
        if node is None or not node.ask_starts(self, holds):
            self.next_node()
            return
        for hold in holds:
            hold.asked_s = now_s

    def starts_answered(self, holds: list[Hold], answers: list[bool]) -> None:
        """A `starts` call's answer: each run in `start` starts at its due
        time; each in `stop` is dropped without a result."""
        for hold, start in zip(holds, answers, strict=True):
            slot = (hold.run.job_id, hold.run.nominal_ms)
            if self.holds.get(slot) is not hold or not hold.ahead:
                continue  # given up meanwhile, or answered by an earlier call
            hold.asked_s = None
            if start:
                hold.confirmed = True
            else:
                del self.holds[slot]
                self.sim.log(f"{self.name} is told not to start {slot[0]}@{slot[1]} attempt {hold.attempt}")

    def _claim(self) -> None:
        """A new claim (a new key, for a share of them), or its claim whose
        answer did not come, again with its key."""
        sim, rng, now_s = self.sim, self.sim.rng, self.sim.now_s
        if not self.claiming and now_s >= self.claim_at_s and (len(self.holds) < WORKER_HOLDS_MAX or self.key is not None):
            self.claim_at_s = now_s + rng.uniform(0.1, 0.5)
            if self.key is None and rng.random() < sim.params.keyed_share:
                self.keys_made += 1
                self.key = f"{self.name}-{self.keys_made}"
            node = self.node()
            ahead_ms = 0
            if sim.params.ahead_share and sim.ahead_rng.random() < sim.params.ahead_share:
                ahead_ms = sim.ahead_rng.choice((1_000, 3_000, 6_000))
            if node is None or not node.claim(self, rng.randint(1, 4), self.key, ahead_ms):
                self.next_node()

    def _heartbeat(self, hold: Hold) -> None:
        node = self.node()
        sent_s = self.sim.now_s
        answer = errors.NotLeader("down") if node is None else node.heartbeat(hold.run, hold.attempt)
        if isinstance(answer, tuple) and answer[0] is not None:
            assert node is not None
            # At the least: a lease held ahead counts from its due time.
            hold.held_until_s = max(hold.held_until_s, sent_s + hold.lease_s)
            hold.margin_s = self.sim.invariants.margin_of(node)
            hold.heartbeat_at_s = sent_s + hold.lease_s / 3
            if answer[1] is not None and hold.ahead:
                # Held, not started: it never starts (tempo/worker_ahead.py).
                del self.holds[(hold.run.job_id, hold.run.nominal_ms)]
                self.sim.log(f"{self.name} is asked to stop held {hold.run.job_id}@{hold.run.nominal_ms} "
                             f"({answer[1]}): it never starts")
            elif answer[1] is not None:
                # Asked to stop (a cancel, `cancel_other`): it stops now and
                # reports, as `tempo worker` does.
                self.sim.log(f"{self.name} is asked to stop {hold.run.job_id}@{hold.run.nominal_ms} ({answer[1]})")
                hold.done_at_s = min(hold.done_at_s, sent_s)
        elif isinstance(answer, errors.NotLeader):
            self.next_node()
            hold.heartbeat_at_s = sent_s + STEP_S
        else:
            del self.holds[(hold.run.job_id, hold.run.nominal_ms)]  # the attempt no longer holds it
            self.sim.invariants.dropped(self, hold)

    def _report(self) -> None:
        node = self.node()
        if node is None or not node.leading():
            self.next_node()
            return
        batch = list(self.reporting.values())
        results = [
            Result(h.run.job_id, h.run.nominal_ms, h.attempt, ok=h.ok, output="ok" if h.ok else None,
                   error=None if h.ok else "boom")
            for h in batch
        ]

        def done(outcome: object) -> None:
            if not isinstance(outcome, list):
                return  # tried again (results of an attempt are idempotent)
            for hold, answer in zip(batch, outcome, strict=True):
                self.reporting.pop((hold.run.job_id, hold.run.nominal_ms), None)
                if isinstance(answer, Run):
                    self.sim.invariants.reported(hold, answer)

        assert node.dispatcher is not None
        node.call(node.dispatcher.report(OWNER, results), done, f"{self.name} reports {len(results)}")


class NodeSimulator:
    def __init__(
        self, seed: int, bug: str = "", verbose: bool = False, *, core_checks: bool = True,
        off: frozenset[int] = frozenset(), before_1970: bool | None = None,
    ) -> None:
        self.seed = seed
        # The dispatcher core's own invariants too (`check_leases`,
        # `check_memory`); off, only the end-to-end ones judge.
        self.core_checks = core_checks
        self.bug = bug
        self.verbose = verbose
        self.rng = random.Random(seed)
        self.params = Params.draw(self.rng)
        self.ahead_rng = random.Random(f"{seed}/ahead")
        self.params = replace(self.params, ahead_share=self.ahead_rng.choice((0.0, 0.5, 1.0)))
        self.planted = PLANTED[bug]
        self.now_s = 0.0
        self.wall_offset_ms = 0
        self.backward_ms = 0  # every backward step of the wall clock, added up (invariants 7, 8)
        self.trace = hashlib.blake2b(digest_size=16)
        self.network: list[tuple[float, int, int, int, bytes]] = []
        self.msg_seq = 0
        self.blocked: set[tuple[int, int]] = set()
        self.partition_until_s = 0.0
        self.voters = tuple(range(1, self.params.node_count + 1))
        self.dir = tempfile.mkdtemp(prefix="tempo-nodesim-", dir=_tmp_root())
        self.nodes = {i: SimNode(self, i, f"{self.dir}/n{i}") for i in self.voters}
        self.workers: list[SimWorker] = []
        self.invariants = NodeInvariants(self, off)
        self.workload = Workload(self, before_1970=before_1970)

    # -- the world --------------------------------------------------------------------

    @property
    def faulty(self) -> bool:
        return self.now_s < self.params.fault_s

    def wall_ms(self) -> int:
        return WALL_START_MS + round(self.now_s * 1000) + self.wall_offset_ms

    def log(self, what: str) -> None:
        self.trace.update(f"{self.now_s:.1f} {what}\n".encode())
        if self.verbose:
            print(f"{self.now_s:7.1f} {what}")

    def fail(self, what: str) -> NodeSimFailure:
        forced = self.workload.before_1970 and not before_1970_refused()
        return NodeSimFailure(self.seed, what, self.bug, before_1970=forced)

    def add_worker(self) -> None:
        self.workers.append(SimWorker(self, f"w{len(self.workers) + 1}", node_guess=self.rng.choice(self.voters)))

    # -- the network -----------------------------------------------------------------

    def send(self, src: int, incarnation: int, messages: list[Message]) -> None:
        node = self.nodes[src]
        if not node.alive or node.incarnation != incarnation:
            return
        p = self.params
        for message in messages:
            data = MESSAGE_ENCODER.encode(message)
            faulty = self.faulty
            copies = 0 if faulty and self.rng.random() < p.drop_rate else 1
            if copies and faulty and self.rng.random() < p.duplicate_rate:
                copies = 2
            for _ in range(copies):
                self.msg_seq += 1
                at_s = self.now_s + self.rng.uniform(0.001, p.delay_s_max)
                heapq.heappush(self.network, (at_s, self.msg_seq, src, message.dst, data))

    def deliver(self) -> None:
        for node in self.nodes.values():
            if node.running and node.inbox:
                assert node.replica is not None
                inbox, node.inbox = node.inbox, []
                for data in inbox:
                    node.replica.step(MESSAGE_DECODER.decode(data))
        while self.network and self.network[0][0] <= self.now_s:
            _, _, src, dst, data = heapq.heappop(self.network)
            node = self.nodes.get(dst)
            if node is None or not node.alive or (src, dst) in self.blocked:
                continue
            if not node.running:
                node.inbox.append(data)
                continue
            assert node.replica is not None
            node.replica.step(MESSAGE_DECODER.decode(data))

    # -- faults ------------------------------------------------------------------------

    def faults(self) -> None:
        self.partitions()
        if self.faulty:
            self.node_faults()

    def partitions(self) -> None:
        p, rng = self.params, self.rng
        if self.blocked and (self.now_s >= self.partition_until_s or not self.faulty):
            self.blocked = set()
            self.log("partition heals")
        if self.faulty and not self.blocked and rng.random() < p.partition_rate:
            side = set(rng.sample(self.voters, rng.randint(1, len(self.voters) // 2)))
            self.blocked = {(a, b) for a in self.voters for b in self.voters if (a in side) != (b in side)}
            self.partition_until_s = self.now_s + rng.uniform(0.5, 4.0)
            self.log(f"partition {sorted(side)}")

    def cut_leader(self) -> None:
        """The leader pauses for 2.5-3.5 s (a new leader is elected
        meanwhile) and is cut off from the others until 0.5-2 s after it
        comes back: a leader deposed without knowing it, which clients
        still reach (invariant 11)."""
        leaders = [n for n in self.nodes.values() if n.leading()]
        if self.blocked or not leaders:
            return
        node = leaders[0]
        node.paused_until_s = self.now_s + self.rng.uniform(2.5, 3.5)
        self.blocked = {(a, b) for a in self.voters for b in self.voters if (a == node.id) != (b == node.id)}
        self.partition_until_s = node.paused_until_s + self.rng.uniform(0.5, 2.0)
        self.log(f"n{node.id} pauses until {node.paused_until_s:.1f}, cut off until {self.partition_until_s:.1f}")

    def outage(self) -> None:
        """Every node down at once for a while: slots pass that no leader
        runs, which catch-up decides on afterwards (docs/semantics.md
        "Catch-up after missed slots")."""
        if not all(n.alive for n in self.nodes.values()):
            return
        down_s = self.rng.uniform(2.0, 6.0)
        self.log(f"outage for {down_s:.1f} s")
        for node in self.nodes.values():
            node.crash()
            node.down_until_s = self.now_s + down_s

    def node_faults(self) -> None:
        """Crashes (of the leader, too), leadership transfers, wall-clock steps."""
        p, rng = self.params, self.rng
        if p.outage_rate and rng.random() < p.outage_rate:
            self.outage()
        if p.leader_cut_rate and rng.random() < p.leader_cut_rate:
            self.cut_leader()
        for node in self.nodes.values():
            if node.alive and rng.random() < (p.leader_crash_rate if node.leading() else 0.0) + p.crash_rate:
                node.crash()
                node.down_until_s = self.now_s + rng.uniform(0.1, 3.0)
            elif node.running and p.node_pause_rate and rng.random() < p.node_pause_rate:
                node.paused_until_s = self.now_s + rng.uniform(0.3, 3.0)
                self.log(f"n{node.id} pauses until {node.paused_until_s:.1f}")
        if p.transfer_rate and rng.random() < p.transfer_rate:
            self.transfer()
        if rng.random() < p.wall_step_rate:
            self.step_wall()

    def transfer(self) -> None:
        """The leader hands leadership over."""
        for node in self.nodes.values():
            if node.leading():
                assert node.replica is not None
                if node.replica.transfer_leadership():
                    self.log(f"n{node.id} hands leadership over")

    def step_wall(self) -> None:
        """The wall clock steps forward or back by 1 s to 2 min."""
        step_ms = self.rng.choice((-1, 1)) * self.rng.randint(1_000, 120_000)
        self.wall_offset_ms += step_ms
        self.backward_ms += max(0, -step_ms)
        self.log(f"wall clock steps {step_ms:+d} ms")

    # -- clients ---------------------------------------------------------------------

    def leader_guess(self) -> SimNode | None:
        leaders = [n for n in self.nodes.values() if n.leading()]
        if not leaders:
            return None
        return self.rng.choice(leaders)

    # -- the run -----------------------------------------------------------------------

    def run(self) -> str:
        """Runs the seed; answers its trace's hash. Raises NodeSimFailure."""
        try:
            return trio.run(self._main, clock=trio.testing.MockClock())
        except AssertionError as exc:
            # An assertion of tempo's own (raft, the store, the dispatcher core).
            raise self.fail(f"an assertion broke at {self.now_s:.1f} s: {exc or type(exc).__name__} "
                            f"({_where(exc)})") from exc
        finally:
            for node in self.nodes.values():
                if node.store is not None:
                    node.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    async def _main(self) -> str:
        mock = trio.lowlevel.current_clock()
        assert isinstance(mock, trio.testing.MockClock)
        # The faults make tempo log a great deal; quiet it for this run only
        # (the level is process-wide, and later tests read tempo's warnings).
        tempo_log = logging.getLogger("tempo")
        level = tempo_log.level
        tempo_log.setLevel(logging.CRITICAL)
        try:
            for node in self.nodes.values():
                node.start()
            for _ in range(self.params.workers):
                self.add_worker()
            end_s = self.params.fault_s + self.params.heal_s
            while self.now_s < end_s:
                self.now_s = round(self.now_s + STEP_S, 6)
                mock.jump(STEP_S)
                self.step()
            self.invariants.at_end()
        finally:
            tempo_log.setLevel(level)
        return self.trace.hexdigest()

    def step(self) -> None:
        self.faults()
        for node in self.nodes.values():
            if not node.alive and (self.now_s >= node.down_until_s or not self.faulty):
                node.start()
                self.log(f"restart n{node.id}")
        self.deliver()
        for node in self.nodes.values():
            if node.running:
                assert node.replica is not None
                node.replica.node.tick()
        self.pump_all()
        for node in self.nodes.values():
            if node.running:
                node.dispatch()
        self.workload.step()
        for worker in list(self.workers):
            worker.step()
        self.pump_all()
        self.invariants.check()

    def pump_all(self) -> None:
        for node in self.nodes.values():
            if not node.running:
                continue
            try:
                node.pump()
            except Crash:
                node.crash()
                node.down_until_s = self.now_s + self.rng.uniform(0.1, 2.0)
                continue
            node.answers()


def _where(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "?" if tb is None else f"{tb.tb_frame.f_code.co_filename.rsplit('/src/', 1)[-1]}:{tb.tb_lineno}"


def _tmp_root() -> str | None:
    """A memory file system if there is one: an fsync there costs nothing."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
