"""End-to-end invariants of the whole-node simulator, checked after every
step (node_cluster.py). Each violation raises `NodeSimFailure` naming the
seed, the invariant and the command that replays it:

1. every acknowledged job is kept, and its due runs are claimed: in the
   healed phase, no run of an active job waits due longer than
   `CLAIM_BOUND_S` while a worker has room to claim it (a backlog larger
   than the workers take, a long backfill, drains at their pace);
2. no attempt is held by two workers at once: a worker given a run while
   another worker holds another attempt of it by its own reckoning (its
   last claim or heartbeat sent, plus the lease, less `HOLD_MARGIN_S`);
3. each slot is run at most once per attempt: no attempt of a slot is
   handed out twice, no older attempt after a newer one, nothing after
   the slot was done;
4. after a failover, no run waits longer than its lease plus a bound: a
   claimed run that no worker holds (its answer was lost, its worker
   vanished or gave it up) is claimed again within its lease plus
   `ORPHAN_BOUND_S` of when it was left, or of the last takeover; and
   one whose claim's answer was lost while its worker retries with the
   claim's key is that worker's again within `KEYED_BOUND_S`;
5. replicas' digests agree: every node that applied the same index has
   byte-identical tables (`Store.digest`); and none is left behind: by
   the end each has applied what the leader had `CATCH_UP_S` before;
6. the overlap policy holds across failovers: a job whose policy is
   `skip`, `buffer_one` or `buffer_all` never has two runs running
   (claimed) at once, and a `buffer_one` job never has two slots' runs
   buffered (docs/semantics.md "Overlap");
7. nothing is handed out early: no run is handed out before its due time
   by the wall clock of the node that handed it out, beyond the skew the
   test injects (`skew_ms`: the spread of the nodes' skews, plus every
   backward step of the wall clock so far, which scheduler time may run
   ahead by until the wall clock catches up; docs/semantics.md "Clocks");
8. no stamp lies in the future: every `created_at` is within the
   injected skew of the stamping node's wall clock, and no claim's stamp
   (a run's `started_at`) is ahead of it by more;
9. every active repeating job has a planned run: on the leader, its
   `slot_ms` is set and the run of that slot is waiting (the schedule
   moves on in the commit that claims, skips or buffers it);
10. every entry a leader appends decodes with the followers' decoder
   (`commands.decode_entry`), and applies on every node (apply raises
   nothing, its assertions hold);
11. reads are linearizable: a read answered (a `GET` once
   `Replica.read_steps` let it go on, on a leader or on a leader deposed
   without knowing it) reflects every write acknowledged before the read
   began: each job whose create was acknowledged is there, at least at
   the version a change of it answered, and each job whose delete was
   acknowledged is gone;
12. dependents run once per end (docs/semantics.md "Dependencies"), on
   the leader's tables: no parent end is the cause of two runs of a
   dependent; under `all: false` every counting end of a parent is the
   cause of one run, under `all: true` each run has one end of every
   parent, and no complete set of ends waits without its run (ends
   within `DEPENDENT_SLACK_MS` of the dependent's creation or of its
   last run are not judged: their order against it is the log's, not
   their stamps'). A gated job (`schedule.requires`) claims a slot's run
   only when each parent had a counting end by then, within `within_s`
   before the slot;
13. the stop rule of pre-dispatch (docs/semantics.md "Pre-dispatch"): a
   run claimed ahead of its due time never starts when a pause, delete or
   patch of its job, or a cancel of the run, was acknowledged with a stamp
   after its claim's and more than `limits.predispatch_stop_ms` before its
   due time, whenever the acknowledgement came; and a held run starts no
   earlier than its due time by the wall clock of the node that handed it
   out, beyond the injected skew (invariant 7's bound, at the start).

Besides, the dispatcher core's own invariants (`check_leases`, and
`check_memory` now and then) hold on the leader between steps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tempo import limits
from tempo.engine.commands import CancelRun, Command, DeleteJob, PatchJob, PauseJob, decode_entry
from tempo.engine.records import Corrupt, Job, Run
from tempo.raft import Entry, EntryKind

from .invariants import SimFailure

if TYPE_CHECKING:
    from tempo.engine.dispatch_core import ClaimedRun
    from tempo.engine.store import Store

    from .node_cluster import Hold, NodeSimulator, SimNode, SimWorker

# A leader that lost its quorum may answer heartbeats until it steps down
# (an election timeout, 1-2 s): a worker's own reckoning of its lease may
# run past the new leader's by that much.
HOLD_MARGIN_S = 2.5
# How long a due run may wait in the healed phase (claims poll every
# 0.1-0.5 s; a backlog after the faults drains at the workers' pace),
# counted while a worker has room to claim it.
CLAIM_BOUND_S = 6.0
# Invariant 12 judges only the parent ends stamped this much after the
# dependent's create, or after its last run was made.
DEPENDENT_SLACK_MS = 2_000
# A worker claims while it holds fewer runs than this.
WORKER_HOLDS_MAX = 6
# How long past its lease a claimed run that no worker holds may wait (the
# lease check, the expiry's commit, then a claim).
ORPHAN_BOUND_S = 3.0
# How long a run whose claim's answer was lost waits when its worker
# retries with the claim's key (workers claim every 0.1-0.5 s).
KEYED_BOUND_S = 3.0
# The healed phase settles (an election, the backlog) before bounds count.
SETTLE_S = 5.0
SETTLE_LEADER_S = 1.5  # ... and this long after it first has a leader
# A leader is elected within this of the healed phase's start (an election
# timeout is 1-2 s; split votes happen).
LEADER_BOUND_S = 8.0
# How far behind the leader a node may be at the end (a restart's catch-up,
# a snapshot's transfer).
CATCH_UP_S = 4.0
CHECK_EVERY_S = 0.5
# Invariants 7 and 8: the simulator's wall clock moves a step (0.1 s) at a
# time, and a stamp learnt from another node may be a step newer.
SKEW_SLACK_MS = 100
DIGEST_EVERY_S = 1.0

Slot = tuple[str, int]
# Overlap policies that allow one run running at a time (invariant 6).
_HOLDING = ("skip", "buffer_one", "buffer_all")


@dataclass(frozen=True)
class ReadBegun:
    """What a read must reflect (invariant 11): the writes acknowledged
    before it began."""

    at_s: float
    # The highest log index a node had applied when it acknowledged a
    # write, before the read began: committed, so the answer must hold it.
    index: int
    versions: dict[str, int]  # job ID -> the version an acknowledged create or change answered
    gone: frozenset[str]  # jobs whose delete was acknowledged
    # Whether a leader of a later term had served when it began: a read
    # of a leader deposed without knowing it.
    deposed: bool


class NodeSimFailure(SimFailure):
    def __init__(self, seed: int, what: str, bug: str = "", *, before_1970: bool = False) -> None:
        replay = (f"python -m tests.sim.node --seed {seed}" + (f" --bug {bug}" if bug else "")
                  + (" --before-1970" if before_1970 else ""))
        Exception.__init__(self, f"seed {seed}: {what}\n  replay: {replay}")
        self.seed = seed
        self.what = what


class NodeInvariants:
    def __init__(self, sim: NodeSimulator, off: frozenset[int] = frozenset()) -> None:
        self.sim = sim
        # Invariants not checked (a test shows each new one catches a
        # planted bug alone).
        self.off = off
        self.jobs: dict[str, Job] = {}  # acknowledged creates
        self.executed: dict[tuple[str, int, int], str] = {}  # (job, nominal, attempt) -> worker
        self.last_attempt: dict[Slot, int] = {}
        self.done: set[Slot] = set()
        self.lost: dict[tuple[str, int, int], str] = {}  # attempts whose answer was lost -> their worker
        # Those of them whose claim carried a key: its worker and when.
        self.lost_keyed: dict[tuple[str, int, int], tuple[SimWorker, float]] = {}
        self.digests: dict[int, tuple[int, str]] = {}  # applied index -> (node, digest)
        self.digested: dict[int, int] = {}  # node -> the applied index last digested
        self.takeover_s = 0.0
        self.healed_leader_s: float | None = None  # when the healed phase first had a leader
        self.term_max = 0  # the highest term any node was seen in
        self.due_since: dict[bytes, float] = {}
        self.orphan_since: dict[tuple[str, int, int], float] = {}
        self.next_due_since: dict[bytes, float] = {}
        self.next_orphan_since: dict[tuple[str, int, int], float] = {}
        self.checked_s = 0.0
        self.digested_s = 0.0
        self.leader_applied: list[tuple[float, int]] = []  # (when, the leader's applied index)
        # Invariant 1 counts a due run's wait from the last check at which
        # no worker had room to claim (each held its most, or was paused).
        self.workers_full_at_s = 0.0
        self.memory_checks = 0
        # Invariant 11: the writes acknowledged so far, and how reads ended
        # ("answered" or "refused", and "deposed answered" or "deposed
        # refused" for those begun on a deposed leader).
        self.acked_versions: dict[str, int] = {}
        self.acked_index = 0
        self.led_term_max = 0  # the latest term a leader served in
        self.acked_gone: set[str] = set()
        self.delete_asked: set[str] = set()  # a read may show these gone from when it was asked
        self.reads: Counter[str] = Counter()
        # Invariant 13: per job, the stops acknowledged (what, stamp, the
        # run's nominal ms for a cancel, None for the whole job), and the
        # held runs started: (nominal ms, attempt, claim's stamp, due ms, worker).
        self.stops: dict[str, list[tuple[str, int, int | None]]] = {}
        self.started_ahead: dict[str, list[tuple[int, int, int, int, str]]] = {}

    # -- events ------------------------------------------------------------------

    def acknowledged(self, job: Job) -> None:
        self.jobs[job.id] = job
        self.acked_versions[job.id] = job.version
        self.sim.log(f"created {job.id}")

    def changed(self, job: Job) -> None:
        """A change of `job` (a patch, pause, resume) was acknowledged."""
        if job.id in self.acked_versions:
            self.acked_versions[job.id] = max(self.acked_versions[job.id], job.version)

    def deleted(self, job_id: str) -> None:
        """A delete of `job_id` was acknowledged."""
        self.acked_gone.add(job_id)

    def delivered(self, worker: SimWorker, run: Run, sent_s: float, *, repeat: bool = False) -> None:
        """`worker` runs this attempt (the first time it sees it; `repeat`:
        a keyed retry's answer)."""
        sim = self.sim
        slot = (run.job_id, run.nominal_ms)
        sim.log(f"{worker.name} gets {run.job_id}@{run.nominal_ms} attempt {run.attempt}" + (" again" if repeat else ""))
        key = (run.job_id, run.nominal_ms, run.attempt)
        if self.lost.pop(key, None) == worker.name:
            pass  # its lost answer, now through its key: the first time it runs it
        elif key in self.executed:
            raise sim.fail(f"invariant 3, a slot was run twice: attempt {run.attempt} of run {slot} went to "
                           f"{self.executed[key]} and to {worker.name}")
        elif run.attempt <= self.last_attempt.get(slot, 0):
            raise sim.fail(f"invariant 3, a slot was run twice: attempt {run.attempt} of run {slot} after attempt "
                           f"{self.last_attempt[slot]}")
        if slot in self.done:
            raise sim.fail(f"invariant 3, a slot was run twice: run {slot} handed out again after it was done")
        self.executed[key] = worker.name
        self.last_attempt[slot] = run.attempt
        if run.started_ms is None or run.started_ms >= run.due_ms:
            self._check_held_once(worker, run, "got")

    def _check_held_once(self, worker: SimWorker, run: Run, how: str) -> None:
        """Invariant 2: `worker` got or started (`how`) `run`, while no other
        worker holds a started attempt of it. A run held ahead and not
        started holds nothing yet: a patch may hand it back and a claim
        take it again; it starts only if the leader says so (invariant 13)."""
        sim = self.sim
        slot = (run.job_id, run.nominal_ms)
        for other in sim.workers:
            if not other.alive:
                continue
            hold = other.holds.get(slot)
            if hold is not None and other is not worker and not hold.ahead and sim.now_s < hold.held_until_s - hold.margin_s:
                raise sim.fail(f"invariant 2, an attempt held by two workers: {worker.name} {how} attempt "
                               f"{run.attempt} of run {slot} while {other.name} held attempt {hold.attempt} until "
                               f"{hold.held_until_s:.1f} s (now {sim.now_s:.1f} s)")

    def margin_of(self, node: SimNode) -> float:
        """The margin of a lease that `node` answered now: none if no node
        is in a later term (no newer leader can have taken over)."""
        replica = node.replica
        assert replica is not None
        terms = [n.replica.term for n in self.sim.nodes.values() if n.replica is not None]
        self.term_max = max(self.term_max, *terms)
        return 0.0 if replica.term >= self.term_max else HOLD_MARGIN_S

    def reported(self, hold: Hold, run: Run) -> None:
        if run.status == "done":
            self.done.add((run.job_id, run.nominal_ms))

    def finished(self, worker: SimWorker, hold: Hold) -> None:
        self.sim.log(f"{worker.name} finished {hold.run.job_id}@{hold.run.nominal_ms}")

    def dropped(self, worker: SimWorker, hold: Hold) -> None:
        self.sim.log(f"{worker.name} gives up {hold.run.job_id}@{hold.run.nominal_ms} attempt {hold.attempt}")

    def worker_gone(self, worker: SimWorker) -> None:
        pass

    def answer_lost(self, worker: SimWorker, claimed: list[ClaimedRun]) -> None:
        for one in claimed:
            # Handed to nobody yet: its worker may get it through its key;
            # nobody else may.
            key = (one.run.job_id, one.run.nominal_ms, one.run.attempt)
            if key not in self.executed:
                self.executed[key] = worker.name
                self.lost[key] = worker.name
            if worker.key is not None:
                self.lost_keyed.setdefault(key, (worker, self.sim.now_s))
            slot = (one.run.job_id, one.run.nominal_ms)
            self.last_attempt[slot] = max(self.last_attempt.get(slot, 0), one.run.attempt)

    def node_crashed(self, node: SimNode) -> None:
        self.digested.pop(node.id, None)

    def took_over(self, node: SimNode) -> None:
        assert node.replica is not None
        self.led_term_max = max(self.led_term_max, node.replica.term)
        self.takeover_s = self.sim.now_s
        self.sim.log(f"n{node.id} leads")

    def deleting(self, job_id: str) -> None:
        """A delete was asked for: the job may go (its answer may be lost)."""
        self.jobs.pop(job_id, None)
        self.acked_versions.pop(job_id, None)
        self.delete_asked.add(job_id)

    # -- reads (invariant 11) ---------------------------------------------------

    def read_begun(self, node: SimNode) -> ReadBegun:
        """A read begins at `node`: what it must reflect."""
        assert node.replica is not None
        newer = self.led_term_max > node.replica.term
        return ReadBegun(self.sim.now_s, self.acked_index, dict(self.acked_versions), frozenset(self.acked_gone), newer)

    def write_acked(self, node: SimNode) -> None:
        """`node` answered a write (a create, change, delete, claim or
        result) with success: its entry is applied there, so committed."""
        assert node.replica is not None
        self.acked_index = max(self.acked_index, node.replica.applied_index)

    def read_refused(self, node: SimNode, begun: ReadBegun, failure: Exception) -> None:
        self.reads["deposed refused" if begun.deposed else "refused"] += 1
        self.sim.log(f"n{node.id}: read refused ({type(failure).__name__})")

    def read_answered(self, node: SimNode, begun: ReadBegun, store: Store) -> None:
        """Invariant 11: the answer `node` gives from `store` now reflects
        every write acknowledged before the read began."""
        self.reads["deposed answered" if begun.deposed else "answered"] += 1
        if 11 in self.off:
            return
        where = (f"a read that began at {begun.at_s:.1f} s on n{node.id}"
                 + (" (a deposed leader)" if begun.deposed else "") + f", answered at {self.sim.now_s:.1f} s,")
        if store.applied_index() < begun.index:
            raise self.sim.fail(f"invariant 11, a read older than an acknowledged write: {where} answers from "
                                f"applied index {store.applied_index()}, below {begun.index}, which a node had "
                                f"applied when it acknowledged a write before the read began")
        for job_id, version in sorted(begun.versions.items()):
            job = store.get_job_any(job_id)
            if job is None and job_id in self.delete_asked:
                continue  # its delete, asked for after the read began, may have committed since
            if job is None or job.version < version:
                seen = "no job" if job is None else f"version {job.version}"
                raise self.sim.fail(f"invariant 11, a read older than an acknowledged write: {where} shows {seen} "
                                    f"for {job_id}, acknowledged at version {version} before it began")
        for job_id in sorted(begun.gone):
            if store.get_job_any(job_id) is not None:
                raise self.sim.fail(f"invariant 11, a read older than an acknowledged write: {where} shows "
                                    f"{job_id}, whose delete was acknowledged before it began")

    def appended(self, node: SimNode, entries: list[Entry]) -> None:
        """Invariant 10, its first half: what the leader appends decodes as
        the followers decode it."""
        if 10 in self.off:
            return
        for entry in entries:
            if entry.kind == EntryKind.NORMAL and entry.data:
                try:
                    decode_entry(entry.data)
                except Corrupt as exc:
                    raise self.sim.fail(f"invariant 10, an entry the leader n{node.id} appended does not decode "
                                        f"on a follower: index {entry.index}: {exc}") from None

    # -- clocks (invariants 7 and 8) ---------------------------------------------

    def skew_ms(self) -> int:
        """The skew the test injects so far: how far a node's scheduler
        time may be from its own wall clock."""
        sim = self.sim
        skews = [node.skew_ms for node in sim.nodes.values()]
        return max(skews) - min(skews) + sim.backward_ms + SKEW_SLACK_MS

    def handed_out(self, node: SimNode, claimed: list[ClaimedRun], wall_ms: int, ahead_ms: int = 0) -> None:
        """Invariant 7 (and 8 for the claim's stamp): `node` handed out
        `claimed`, decided when its wall clock read `wall_ms`, to a claim
        that looked `ahead_ms` ahead."""
        skew_ms = self.skew_ms()
        for one in claimed:
            run = one.run
            if 7 not in self.off and run.due_ms > wall_ms + skew_ms + ahead_ms:
                raise self.sim.fail(f"invariant 7, a run handed out early: n{node.id} handed out "
                                    f"{run.job_id}@{run.nominal_ms}, due {run.due_ms - wall_ms} ms after its wall "
                                    f"clock (injected skew {skew_ms} ms, the claim looked {ahead_ms} ms ahead)")
            if run.started_ms is not None and run.started_ms > wall_ms:
                # Only the future side: an answer may carry runs claimed
                # before (a planted bug that hands them out again, caught
                # by invariant 3), whose stamps are older.
                self.stamped(node, f"the claim of {run.job_id}@{run.nominal_ms}", run.started_ms, wall_ms)

    def stamped(self, node: SimNode, what: str, at_ms: int, wall_ms: int) -> None:
        """Invariant 8: `at_ms`, stamped by `node` when its wall clock read
        `wall_ms`."""
        skew_ms = self.skew_ms()
        if 8 not in self.off and abs(at_ms - wall_ms) > skew_ms:
            raise self.sim.fail(f"invariant 8, a stamp off the wall clock: {what} was stamped by n{node.id} "
                                f"{at_ms - wall_ms:+d} ms from its wall clock (injected skew {skew_ms} ms)")

    # -- pre-dispatch (invariant 13) ------------------------------------------------

    def started(self, worker: SimWorker, hold: Hold) -> None:
        """`worker` starts `hold`, a run it held ahead of its due time."""
        run = hold.run
        self.sim.log(f"{worker.name} starts held {run.job_id}@{run.nominal_ms} attempt {hold.attempt}")
        if 13 in self.off:
            return
        node = self.sim.nodes[hold.node_id]
        skew_ms = self.skew_ms()
        if run.due_ms > node.wall_ms() + skew_ms:
            raise self.sim.fail(f"invariant 13, a held run started early: {worker.name} started "
                                f"{run.job_id}@{run.nominal_ms} {run.due_ms - node.wall_ms()} ms before its due time "
                                f"by the wall clock of n{node.id}, which handed it out (injected skew {skew_ms} ms)")
        self._check_held_once(worker, run, "started")
        assert run.started_ms is not None
        one = (run.nominal_ms, hold.attempt, run.started_ms, run.due_ms, worker.name)
        self.started_ahead.setdefault(run.job_id, []).append(one)
        for stop in self.stops.get(run.job_id, ()):
            self._check_stop_rule(run.job_id, one, stop)

    def commands_acked(self, commands: list[Command]) -> None:
        """A client's call answered without a fault: its commands were
        acknowledged (the stops among them, for invariant 13)."""
        for command in commands:
            if isinstance(command, PauseJob | DeleteJob | PatchJob):
                stop = (type(command).__name__, command.at_ms, None)
            elif isinstance(command, CancelRun):
                stop = ("CancelRun", command.at_ms, command.nominal_ms)
            else:
                continue
            self.stops.setdefault(command.job_id, []).append(stop)
            if 13 not in self.off:
                for one in self.started_ahead.get(command.job_id, ()):
                    self._check_stop_rule(command.job_id, one, stop)

    def _check_stop_rule(
        self, job_id: str, started: tuple[int, int, int, int, str], stop: tuple[str, int, int | None]
    ) -> None:
        nominal_ms, attempt, claimed_ms, due_ms, worker = started
        what, at_ms, of_ms = stop
        if of_ms not in (None, nominal_ms) or not claimed_ms < at_ms < due_ms - limits.predispatch_stop_ms:
            return
        raise self.sim.fail(f"invariant 13, a held run started after a stop: {worker} started attempt {attempt} of "
                            f"{job_id}@{nominal_ms} (claimed at {claimed_ms}, due {due_ms}), and a {what} stamped "
                            f"{at_ms}, {due_ms - at_ms} ms before its due time, was acknowledged")

    # -- checks ------------------------------------------------------------------

    def applied(self, node: SimNode) -> None:
        """Invariant 5, at the index a node applied by now (every
        `DIGEST_EVERY_S`: a digest reads every table)."""
        store = node.store
        assert store is not None
        if self.digested.get(node.id) == store.applied_index():
            return
        index, digest = store.digest()
        self.digested[node.id] = index
        seen = self.digests.setdefault(index, (node.id, digest))
        if seen[1] != digest:
            raise self.sim.fail(f"invariant 5, replicas' digests differ at applied index {index}: n{seen[0]} and "
                                f"n{node.id}")

    def check_core(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        if not self.sim.core_checks:
            return
        try:
            core.check_leases()
            self.memory_checks += 1
            if self.memory_checks % 20 == 0 and not node.claims:
                # Between commits only: a claim in flight took its runs out of memory.
                core.check_memory()
        except AssertionError as exc:
            raise self.sim.fail(f"the dispatcher core's invariant broke on n{node.id}: {exc}") from None

    def check(self) -> None:
        sim = self.sim
        if sim.now_s - self.checked_s < CHECK_EVERY_S:
            return
        self.note_workers()
        self.checked_s = sim.now_s
        if sim.now_s - self.digested_s >= DIGEST_EVERY_S:
            self.digested_s = sim.now_s
            for node in sim.nodes.values():
                if node.alive:
                    self.applied(node)
        leaders = [n for n in sim.nodes.values() if n.leading()]
        if sim.now_s < sim.params.fault_s:
            return
        if not leaders:
            if sim.now_s >= sim.params.fault_s + LEADER_BOUND_S:
                raise sim.fail(f"no leader {LEADER_BOUND_S} s into the healed phase")
            return
        if self.healed_leader_s is None:
            self.healed_leader_s = sim.now_s
        # The bounds count once the healed phase settled and it has a leader.
        since_s = max(sim.params.fault_s + SETTLE_S, self.healed_leader_s + SETTLE_LEADER_S)
        leader = max(leaders, key=lambda n: n.replica.term if n.replica is not None else 0)
        assert leader.replica is not None
        self.leader_applied.append((sim.now_s, leader.replica.applied_index))
        self._check_runs(leader, counting=sim.now_s >= since_s, since_s=since_s)
        self._check_dependents(leader)

    def _check_dependents(self, leader: SimNode) -> None:
        """Invariant 12, on the leader's tables."""
        store = leader.store
        assert store is not None
        if 12 in self.off:
            return
        for job_id, spec in sorted(self.sim.workload.specs.items()):
            gate = spec["schedule"].get("requires")
            if gate is not None:
                self._check_gate(store, job_id, gate)
        for job_id, (parents, on, all_) in sorted(self.sim.workload.dependents.items()):
            job = store.get_job_any(job_id)
            if job is None:
                continue
            runs = store.list_runs(job.owner, job_id, since_ms=None, until_ms=None, limit=1000, cursor_ms=None)[0]
            causes = [store.caused_by(job_id, run.nominal_ms) for run in runs]
            used = [(c.job_id, c.nominal_ms, c.attempt) for found in causes for c in found]
            if len(used) != len(set(used)):
                raise self.sim.fail(f"invariant 12, dependents run once per end: {job_id} has two runs of one end")
            if all_ and any([c.job_id for c in found] != list(parents) for found in causes):
                raise self.sim.fail(f"invariant 12: a run of {job_id} (all) lacks a parent's end: {causes}")
            wanted = ("done", "failed") if on == "finished" else ("done",) if on == "succeeded" else ("failed",)
            last_ms = max((c.ended_ms for found in causes for c in found), default=job.created_at_ms)
            floor_ms = (last_ms if all_ else job.created_at_ms) + DEPENDENT_SLACK_MS
            ends = {
                (parent, run.nominal_ms, run.attempt)
                for parent in parents if store.get_job_any(parent) is not None
                for run in store.list_runs(job.owner, parent, since_ms=None, until_ms=None, limit=1000,
                                           cursor_ms=None)[0]
                if run.status in wanted and run.finished_ms is not None and run.finished_ms > floor_ms
            }
            if not all_ and not ends <= set(used):
                raise self.sim.fail(f"invariant 12: ends of {job_id}'s parents made no run: {sorted(ends - set(used))}")
            if all_ and {parent for parent, _, _ in ends} == set(parents):
                raise self.sim.fail(f"invariant 12: a complete set of ends of {job_id}'s parents made no run")

    def _check_runs(self, leader: SimNode, *, counting: bool, since_s: float) -> None:
        """Invariants 1 and 4 against the leader's tables."""
        sim = self.sim
        store = leader.store
        assert store is not None
        now_ms = leader.now_ms()
        self.next_due_since = {}
        self.next_orphan_since = {}
        held = {
            (h.run.job_id, h.run.nominal_ms, h.attempt)
            for w in sim.workers if w.alive
            for h in [*(h for h in w.holds.values() if sim.now_s < h.held_until_s), *w.reporting.values()]
        }
        running: Counter[str] = Counter()
        buffered: Counter[str] = Counter()
        for minute in store.open_minutes(0, 1 << 40, 1 << 30):
            for runs_key, run, job in store.scan_minute(minute, 0, 1 << 62):
                if job.overlap in _HOLDING and not run.backfill:
                    running[job.id] += run.status == "claimed"
                    buffered[job.id] += run.buffered and run.attempt == 0
                    self._check_overlap(job, running[job.id], buffered[job.id])
                if run.status == "waiting" and job.state == "active" and run.due_ms <= now_ms:
                    self._check_due(runs_key, run, now_ms, counting=counting, since_s=since_s)
                elif run.status == "claimed" and (run.job_id, run.nominal_ms, run.attempt) not in held:
                    self._check_orphan(run, job, now_ms, counting=counting, since_s=since_s)
        self.due_since = self.next_due_since
        self.orphan_since = self.next_orphan_since
        if counting:
            for job_id in self.jobs:
                if store.get_job_any(job_id) is None:
                    raise sim.fail(f"invariant 1, an acknowledged job is lost: {job_id} is not on the leader")
        self._check_planned(leader)

    def note_workers(self) -> None:
        """Invariant 1's clock: whether a worker has room to claim now."""
        sim = self.sim
        if not any(w.alive and sim.now_s >= w.paused_until_s and len(w.holds) < WORKER_HOLDS_MAX
                   for w in sim.workers):
            self.workers_full_at_s = sim.now_s

    def _check_planned(self, leader: SimNode) -> None:
        """Invariant 9, on the leader's tables: each active repeating job
        the workload made (and did not ask to delete) has its next run."""
        store = leader.store
        assert store is not None
        if 9 in self.off:
            return
        for job_id in sorted(self.sim.workload.specs):
            job = store.get_job_any(job_id)
            if job is None or job.state != "active" or not job.schedule.repeating:
                continue
            run = None if job.slot_ms is None else store.get_run_any(job.id, job.slot_ms)
            if run is None or run.status != "waiting":
                status = None if run is None else run.status
                raise self.sim.fail(f"invariant 9, an active repeating job has no planned run: {job.id} "
                                    f"({job.schedule}) has slot {job.slot_ms}, whose run on n{leader.id} is "
                                    f"{status}, not waiting")

    def _check_gate(self, store: Store, job_id: str, gate: dict) -> None:
        """Invariant 12 for a gated job: each slot run it claimed had every
        parent's counting end by its first claim."""
        job = store.get_job_any(job_id)
        if job is None:
            return
        wanted = ("done", "failed") if gate["on"] == "finished" else ("done",)
        runs = store.list_runs(job.owner, job_id, since_ms=None, until_ms=None, limit=1000, cursor_ms=None)[0]
        for run in runs:
            if run.triggered or run.backfill or run.attempt == 0 or run.status in ("missed", "skipped", "cancelled"):
                continue
            claimed_ms = run.attempts[0].claimed_ms if run.attempts else run.started_ms
            floor_ms = None if gate["within_s"] is None else run.nominal_ms - gate["within_s"] * 1000
            for parent in gate["jobs"]:
                if store.get_job_any(parent) is None:
                    continue
                ends = [
                    r.finished_ms for r in store.list_runs(job.owner, parent, since_ms=None, until_ms=None,
                                                           limit=1000, cursor_ms=None)[0]
                    if r.status in wanted and r.finished_ms is not None
                ]
                if not any((claimed_ms is None or at <= claimed_ms) and (floor_ms is None or at >= floor_ms)
                           for at in ends):
                    raise self.sim.fail(f"invariant 12, a gate: {job_id} ran slot {run.nominal_ms} without an end "
                                        f"of {parent}")

    def _check_overlap(self, job: Job, running: int, buffered: int) -> None:
        """Invariant 6, for one job's open runs counted so far."""
        if running > 1:
            raise self.sim.fail(f"invariant 6, the overlap policy holds: {job.overlap} job {job.id} has {running} "
                                f"runs running at once")
        if job.overlap == "buffer_one" and buffered > 1:
            raise self.sim.fail(f"invariant 6, the overlap policy holds: buffer_one job {job.id} has {buffered} "
                                f"runs buffered")

    def _check_due(self, runs_key: bytes, run: Run, now_ms: int, *, counting: bool, since_s: float) -> None:
        sim = self.sim
        first_s = self.next_due_since[runs_key] = self.due_since.get(runs_key, sim.now_s)
        if counting and sim.now_s - max(first_s, since_s, self.workers_full_at_s) > CLAIM_BOUND_S:
            raise sim.fail(f"invariant 1, due runs are claimed: run {run.job_id}@{run.nominal_ms} "
                           f"(attempt {run.attempt}) waits, due {now_ms - run.due_ms} ms ago, for "
                           f"{sim.now_s - first_s:.1f} s")

    def _check_orphan(self, run: Run, job: Job, now_ms: int, *, counting: bool, since_s: float) -> None:
        sim = self.sim
        key = (run.job_id, run.nominal_ms, run.attempt)
        first_s = self.next_orphan_since[key] = self.orphan_since.get(key, sim.now_s)
        if run.started_ms is not None and run.started_ms < run.due_ms:
            # Claimed ahead: its lease counts from its due time (by the
            # leader's clock, `now_ms`), so its wait does too.
            first_s = max(first_s, sim.now_s + (run.due_ms - now_ms) / 1000)
        keyed = self.lost_keyed.get(key)
        if keyed is not None and keyed[0].alive and keyed[0].key is not None:
            # Its claim's answer was lost, and its worker retries with the
            # key: it gets the run back at once, not after the lease.
            worker = keyed[0]
            waited_s = sim.now_s - max(first_s, since_s, self.takeover_s, worker.paused_until_s)
            if counting and waited_s > KEYED_BOUND_S:
                raise sim.fail(f"invariant 4, a keyed claim's run waited for its lease: attempt {run.attempt} of "
                               f"{run.job_id}@{run.nominal_ms}, lost on its way to {worker.name}, which retries "
                               f"with key {worker.key}, held by no worker for {waited_s:.1f} s")
            return
        waited_s = sim.now_s - max(first_s, since_s, self.takeover_s)
        if counting and waited_s > job.lease_s + ORPHAN_BOUND_S:
            raise sim.fail(f"invariant 4, a run waited longer than its lease ({job.lease_s} s) plus "
                           f"{ORPHAN_BOUND_S} s: attempt {run.attempt} of {run.job_id}@{run.nominal_ms} "
                           f"held by no worker for {sim.now_s - first_s:.1f} s, "
                           f"{waited_s:.1f} s since the last takeover")

    def at_end(self) -> None:
        self.checked_s = self.digested_s = -1.0
        self.check()
        # No node is left behind: each applied, by the end, what the leader
        # had applied `CATCH_UP_S` before.
        sim = self.sim
        behind = [index for at_s, index in self.leader_applied if at_s <= sim.now_s - CATCH_UP_S]
        target = behind[-1] if behind else 0
        for node in sim.nodes.values():
            if node.replica is None or node.replica.applied_index < target:
                applied = None if node.replica is None else node.replica.applied_index
                raise sim.fail(f"invariant 5, replicas agree: n{node.id} is stuck at applied index {applied}, "
                               f"the leader applied {target} {CATCH_UP_S} s before the end")
