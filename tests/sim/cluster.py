"""Deterministic simulator: N raft nodes, a faulty network, crashing disks.

Everything random comes from one random.Random(seed). Each seed draws its own
fault rates (swarm testing). A run has a fault phase and then a healed phase
in which the cluster must converge. Invariants are checked after every event
(see invariants.py); a violation raises SimFailure naming the seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import heapq
import random

import msgspec

from tempo.raft import (
    MESSAGE_DECODER,
    MESSAGE_ENCODER,
    ConfChange,
    ConfChangeOp,
    Config,
    EntryKind,
    Message,
    ProposalDropped,
    RawNode,
    ReadIndexDropped,
    Ready,
    Role,
    VoteResponse,
)

from .invariants import Invariants, SimFailure
from .linearizability import Op
from .planted import PLANTED
from .storage import SimStorage

TICK_US = 10  # simulated time units per raft tick
SLOW_US_MAX = 30 * TICK_US
FAULT_TICKS = 200
HEAL_TICKS_MAX = 400
ELECTION_TICKS = 10
HEARTBEAT_TICKS = 2
VALUES_ENCODER = msgspec.msgpack.Encoder()
VALUES_DECODER = msgspec.msgpack.Decoder(list[bytes])


@dataclasses.dataclass
class Params:
    """One seed's fault mix, drawn at random (swarm testing)."""

    node_count: int
    drop_rate: float
    duplicate_rate: float
    latency_us_max: int
    slow_rate: float  # share of messages delayed by up to SLOW_US_MAX (long tail)
    partition_rate: float  # per tick: start a partition
    asymmetric_rate: float  # share of partitions that are one-way
    crash_rate: float  # per tick
    crash_mid_persist_rate: float  # per Ready: crash between write and fsync
    propose_rate: float  # per tick
    read_rate: float  # per tick
    transfer_rate: float  # per tick
    compact_every_entries: int  # entries between local snapshots; 0 = never
    membership: bool  # add / remove servers during the run
    codec: bool  # round-trip every message through msgpack
    interleave_rate: float  # per Ready: tick or propose between ready() and advance()
    durable_apply: bool  # the state machine survives a crash (like LMDB) instead of replaying
    pre_vote: bool
    check_quorum: bool

    @classmethod
    def draw(cls, rng: random.Random) -> Params:
        def maybe(p: float, hi: float) -> float:
            return rng.uniform(0, hi) if rng.random() < p else 0.0

        return cls(
            node_count=rng.choice((3, 3, 5)),
            drop_rate=maybe(0.7, 0.3),
            duplicate_rate=maybe(0.5, 0.2),
            latency_us_max=rng.choice((1, 5, 15, 40)),
            slow_rate=maybe(0.5, 0.05),
            partition_rate=maybe(0.6, 0.05),
            asymmetric_rate=rng.random(),
            crash_rate=maybe(0.7, 0.03),
            crash_mid_persist_rate=maybe(0.5, 0.02),
            propose_rate=rng.uniform(0.3, 3.0),
            read_rate=rng.uniform(0.0, 0.8),
            transfer_rate=maybe(0.4, 0.03),
            compact_every_entries=rng.choice((0, 3, 10, 40)),
            membership=rng.random() < 0.3,
            codec=rng.random() < 0.2,
            interleave_rate=maybe(0.3, 0.3),
            durable_apply=rng.random() < 0.5,
            pre_vote=rng.random() < 0.85,
            check_quorum=rng.random() < 0.85,
        )


class SimNode:
    def __init__(self, node_id: int, voters: tuple[int, ...]) -> None:
        self.id = node_id
        self.storage = SimStorage(voters)
        self.core: RawNode | None = None
        self.incarnation = 0
        self.values: list[bytes] = []  # the state machine: applied values in order
        self.applied = 0
        self.pending_writes: dict[bytes, Op] = {}
        self.pending_reads: list[tuple[int, Op]] = []  # (read index, op) awaiting apply
        self.reads_by_context: dict[bytes, Op] = {}
        self.down_until_us = 0
        # With Params.durable_apply: (values, applied) as of the crash.
        self.saved: tuple[list[bytes], int] | None = None

    @property
    def alive(self) -> bool:
        return self.core is not None


class Simulator:
    def __init__(self, seed: int, test_bug: str = "", verbose: bool = False) -> None:
        self.seed = seed
        self.verbose = verbose
        self.rng = random.Random(seed)
        self.params = Params.draw(self.rng)
        self.test_bug = test_bug
        self.now_us = 0
        self.clock = 0  # strictly increasing event counter: the history's real time
        self.trace = hashlib.blake2b(digest_size=16)
        self.network: list[tuple[int, int, Message]] = []
        self.msg_seq = 0
        self.blocked: set[tuple[int, int]] = set()
        self.partition_until_us = 0
        n = self.params.node_count
        voters = tuple(range(1, n + 1))
        self.nodes: dict[int, SimNode] = {i: SimNode(i, voters) for i in voters}
        self.next_node_id = n + 1
        self.removed: set[int] = set()
        self.history: list[Op] = []
        self.value_seq = 0
        self.acked: set[bytes] = set()
        self.inv = Invariants(self)
        self.healed = False
        for node in self.nodes.values():
            self._start(node)

    # ----- driver -----

    def fail(self, what: str) -> SimFailure:
        return SimFailure(self.seed, what, self.test_bug)

    def run(self) -> str:
        try:
            for _ in range(FAULT_TICKS):
                self._run_tick(faults=True)
            self._heal()
            for _ in range(HEAL_TICKS_MAX):
                self._run_tick(faults=False)
                if self._converged():
                    break
            else:
                raise self.fail("cluster did not converge in the healed phase")
            self.inv.check_final()
        except SimFailure:
            raise
        except Exception as e:
            # An assert in the core (or any crash) is a failure of this seed:
            # report it with the replay command like any other.
            raise self.fail(f"{type(e).__name__}: {e}") from e
        return self.trace.hexdigest()

    def _run_tick(self, faults: bool) -> None:
        end_us = self.now_us + TICK_US
        while self.network and self.network[0][0] < end_us:
            at_us, _, m = heapq.heappop(self.network)
            self.now_us = at_us
            self._deliver(m)
        self.now_us = end_us
        for node in list(self.nodes.values()):
            if node.alive:
                node.core.tick()
                self._drain(node)
            elif node.id not in self.removed and (not faults or node.down_until_us <= self.now_us):
                self._start(node)
        if not faults:
            self._retire_removed()
        if faults:
            self._faults()
        self._clients(faults)

    def _faults(self) -> None:
        rng, p = self.rng, self.params
        if self.blocked and self.now_us >= self.partition_until_us:
            self.blocked.clear()
        if not self.blocked and rng.random() < p.partition_rate:
            self._partition()
        if rng.random() < p.crash_rate:
            node = rng.choice(list(self.nodes.values()))
            if node.alive:
                self._crash(node)
        if p.membership and rng.random() < 0.02:
            self._change_membership()
        if rng.random() < p.transfer_rate:
            leader = self._leader()
            if leader is not None:
                target = rng.choice(leader.core.voters)
                self._record("transfer", leader.id, target)
                with contextlib.suppress(ProposalDropped):
                    leader.core.transfer_leader(target)
                self._drain(leader)

    def _partition(self) -> None:
        rng = self.rng
        ids = list(self.nodes)
        rng.shuffle(ids)
        cut = rng.randrange(1, len(ids))
        leader = self._leader()
        if leader is not None and rng.random() < 0.5:
            # Isolate the leader in a minority: the case deposed leaders,
            # CheckQuorum and ReadIndex exist for.
            ids.remove(leader.id)
            ids.insert(0, leader.id)
            cut = rng.randrange(1, (len(ids) + 1) // 2)
        side_a, side_b = ids[:cut], ids[cut:]
        one_way = rng.random() < self.params.asymmetric_rate
        for a in side_a:
            for b in side_b:
                self.blocked.add((a, b))
                if not one_way:
                    self.blocked.add((b, a))
        self.partition_until_us = self.now_us + TICK_US * rng.randrange(5, 60)
        self._record("partition", tuple(sorted(side_a)), one_way)

    def _heal(self) -> None:
        self.healed = True
        self.blocked.clear()
        self._record("heal")

    def _retire_removed(self) -> None:
        # Servers whose removal committed are shut down by the operator; left
        # running they may campaign with a stale config (dissertation §4.2.3).
        leader = self._leader()
        if leader is None or leader.core.conf_index > leader.core.log.committed:
            return
        for node in self.nodes.values():
            if node.id not in leader.core.voters and node.id not in self.removed:
                self.removed.add(node.id)
                if node.alive:
                    self._crash(node)

    # ----- nodes -----

    def _start(self, node: SimNode) -> None:
        node.incarnation += 1
        snapshot = node.storage.view.snapshot()
        if node.saved is not None and node.saved[1] >= snapshot.meta.index:
            node.values, node.applied = node.saved
        else:
            # Replay from the snapshot (also when a snapshot install reached
            # the disk but the state machine had not been restored from it).
            node.values = VALUES_DECODER.decode(snapshot.data) if snapshot.data else []
            node.applied = snapshot.meta.index
        p = self.params
        config = Config(
            node_id=node.id,
            election_ticks=ELECTION_TICKS,
            heartbeat_ticks=HEARTBEAT_TICKS,
            pre_vote=p.pre_vote,
            check_quorum=p.check_quorum,
            applied=node.applied,
        )
        core = PLANTED[self.test_bug]
        node.core = core(config, node.storage.view, random.Random(self.rng.getrandbits(64)))
        self._record("start", node.id)
        self.inv.on_start(node)

    def _crash(self, node: SimNode) -> None:
        kept = node.storage.crash(self.rng)
        if self.params.durable_apply:
            node.saved = (list(node.values), node.applied)
        node.core = None
        node.pending_writes.clear()
        node.pending_reads.clear()
        node.reads_by_context.clear()
        node.down_until_us = self.now_us + TICK_US * self.rng.randrange(1, 40)
        self._record("crash", node.id, kept)

    def _leader(self) -> SimNode | None:
        leaders = [n for n in self.nodes.values() if n.alive and n.core.role == Role.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda n: n.core.term)

    # ----- network -----

    def _send(self, m: Message) -> None:
        rng, p = self.rng, self.params
        if not self.healed and ((m.src, m.dst) in self.blocked or rng.random() < p.drop_rate):
            return
        copies = 2 if not self.healed and rng.random() < p.duplicate_rate else 1
        if p.codec:
            m = MESSAGE_DECODER.decode(MESSAGE_ENCODER.encode(m))
        for _ in range(copies):
            self.msg_seq += 1
            at_us = self.now_us + 1 + rng.randrange(p.latency_us_max)
            if not self.healed and rng.random() < p.slow_rate:
                at_us += rng.randrange(SLOW_US_MAX)
            heapq.heappush(self.network, (at_us, self.msg_seq, m))

    def _deliver(self, m: Message) -> None:
        node = self.nodes.get(m.dst)
        if node is None or not node.alive:
            return
        if not self.healed and (m.src, m.dst) in self.blocked:
            return
        self._record("msg", type(m).__name__, m.src, m.dst, m.term)
        node.core.step(m)
        self._drain(node)

    # ----- the replica loop: persist -> send -> apply -> advance -----

    def _drain(self, node: SimNode) -> None:
        core = node.core
        while core.has_ready():
            ready = core.ready()
            self._persist(node, ready)
            if not self.healed and self.rng.random() < self.params.crash_mid_persist_rate:
                self._crash(node)  # before the fsync: only a prefix may survive
                return
            if ready.must_sync:
                node.storage.sync()
            self.inv.on_persisted(node, ready)
            for m in ready.messages:
                if isinstance(m, VoteResponse) and m.granted and not m.pre_vote:
                    self.inv.on_vote_granted(m.src, m.term, m.dst)
                self._send(m)
            self._apply(node, ready)
            if not self.healed and self.rng.random() < self.params.interleave_rate:
                self._interleave(node)
            core.advance(ready)
            self._serve_reads(node)
            self._maybe_compact(node)
            self.inv.after_event(node)

    def _interleave(self, node: SimNode) -> None:
        """Work arriving while a Ready is out (the contract allows it): an
        extra tick (clock skew) or a client's proposal."""
        if self.rng.random() < 0.5:
            node.core.tick()
            self._record("tick_in_ready", node.id)
            return
        self.value_seq += 1
        value = b"v%d" % self.value_seq
        op = Op("add", value, self._tick_clock())
        try:
            node.core.propose(value)
        except ProposalDropped:
            return
        self.history.append(op)
        node.pending_writes[value] = op
        self._record("propose_in_ready", node.id, value)

    def _persist(self, node: SimNode, ready: Ready) -> None:
        storage = node.storage
        if ready.snapshot is not None:
            storage.apply_snapshot(ready.snapshot)
        if ready.compaction is not None:
            storage.compact(ready.compaction)
        if ready.entries:
            storage.append(ready.entries)
        if ready.hard_state is not None:
            storage.set_hard_state(ready.hard_state)

    def _apply(self, node: SimNode, ready: Ready) -> None:
        if ready.snapshot is not None:
            node.values = VALUES_DECODER.decode(ready.snapshot.data) if ready.snapshot.data else []
            node.applied = ready.snapshot.meta.index
            self._record("install", node.id, node.applied)
        for entry in ready.committed_entries:
            assert entry.index == node.applied + 1, "applied out of order"
            node.applied = entry.index
            self.inv.on_apply(node, entry)
            if entry.kind == EntryKind.NORMAL and entry.data:
                node.values.append(entry.data)
                op = node.pending_writes.pop(entry.data, None)
                if op is not None:
                    op.response_at = self._tick_clock()
                    self.acked.add(entry.data)
        for read in ready.read_states:
            op = node.reads_by_context.pop(read.context, None)
            if op is not None:
                node.pending_reads.append((read.index, op))

    def _serve_reads(self, node: SimNode) -> None:
        waiting = []
        for index, op in node.pending_reads:
            if node.applied >= index:
                # Every replica's values are a prefix of one sequence (state
                # machine safety), so the count identifies the state read.
                op.value = len(node.values)
                op.response_at = self._tick_clock()
                self.history.append(op)
            else:
                waiting.append((index, op))
        node.pending_reads = waiting

    def _maybe_compact(self, node: SimNode) -> None:
        every = self.params.compact_every_entries
        core = node.core
        if every and node.applied - core.log.snapshot_index() >= every:
            core.compact(node.applied, VALUES_ENCODER.encode(node.values))

    # ----- clients -----

    def _tick_clock(self) -> int:
        self.clock += 1
        return self.clock

    def _clients(self, faults: bool) -> None:
        if not faults:
            return
        rng, p = self.rng, self.params
        proposals = int(p.propose_rate) + (rng.random() < p.propose_rate % 1)
        for _ in range(proposals):
            self._propose()
        if rng.random() < p.read_rate:
            self._read()

    def _client_target(self) -> SimNode | None:
        # Clients mostly find the newest leader, but some still talk to a
        # node that believes it leads (a deposed one, cut off), or to anyone.
        alive = [n for n in self.nodes.values() if n.alive]
        if not alive:
            return None
        dice = self.rng.random()
        if dice < 0.6:
            leader = self._leader()
            if leader is not None:
                return leader
        elif dice < 0.85:
            leaders = [n for n in alive if n.core.role == Role.LEADER]
            if leaders:
                return self.rng.choice(leaders)
        return self.rng.choice(alive)

    def _propose(self) -> None:
        node = self._client_target()
        if node is None:
            return
        self.value_seq += 1
        value = b"v%d" % self.value_seq
        op = Op("add", value, self._tick_clock())
        try:
            node.core.propose(value)
        except ProposalDropped:
            return
        self.history.append(op)
        node.pending_writes[value] = op
        self._record("propose", node.id, value)
        self._drain(node)

    def _read(self) -> None:
        node = self._client_target()
        if node is None:
            return
        context = b"r%d" % self._tick_clock()
        op = Op("read", None, self.clock)
        try:
            node.core.read_index(context)
        except (ProposalDropped, ReadIndexDropped):
            return
        node.reads_by_context[context] = op
        self._record("read", node.id, context)
        self._drain(node)

    def _change_membership(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        voters = leader.core.voters
        if len(voters) > 3 or (len(voters) == 3 and self.rng.random() < 0.3):
            change = ConfChange(ConfChangeOp.REMOVE, self.rng.choice(voters))
        else:
            new_id = self.next_node_id
            change = ConfChange(ConfChangeOp.ADD, new_id)
        try:
            leader.core.propose_conf_change(change)
        except ProposalDropped:
            return
        if change.op == ConfChangeOp.ADD:
            # A joiner starts empty, with no config: it learns everything
            # from the leader (entries or a snapshot).
            self.next_node_id += 1
            joiner = SimNode(change.node_id, ())
            self.nodes[joiner.id] = joiner
            self._start(joiner)
        self._record("conf", change.op, change.node_id)
        self._drain(leader)

    # ----- convergence -----

    def _members(self, leader: SimNode) -> tuple[int, ...]:
        return leader.core.voters

    def _converged(self) -> bool:
        leader = self._leader()
        if leader is None:
            return False
        core = leader.core
        if core.log.committed != core.log.last_index():
            return False
        if core.log.term(core.log.committed) != core.term:
            return False
        for node_id in core.voters:
            node = self.nodes[node_id]
            if not node.alive or node.applied != core.log.committed:
                return False
        return True

    def _record(self, *event: object) -> None:
        line = repr((self.now_us, event))
        self.trace.update(line.encode())
        if self.verbose:
            print(line)
