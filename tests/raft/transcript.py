"""A tiny harness for scripted Raft tests that read like transcripts.

Nothing moves unless the test says so: messages wait in `pending` until
`deliver(...)` or `settle()`, nodes tick only when told. Storage is
MemoryStorage (every write durable), so crash + restart keeps everything that
was handed to the application in a Ready.
"""

from __future__ import annotations

import random

from sim.planted import PLANTED
from tempo.raft import (
    Config,
    Entry,
    EntryKind,
    MemoryStorage,
    Message,
    RawNode,
    ReadState,
    Role,
    Snapshot,
    VoteRequest,
    VoteResponse,
)

ELECTION_TICKS = 10


class Cluster:
    def __init__(
        self,
        n: int,
        *,
        pre_vote: bool = True,
        check_quorum: bool = True,
        test_bug: str = "",
        seed: int = 0,
    ) -> None:
        self.ids = tuple(range(1, n + 1))
        self.pre_vote = pre_vote
        self.check_quorum = check_quorum
        self.test_bug = test_bug
        self.rng = random.Random(seed)
        self.storages = {i: MemoryStorage(self.ids) for i in self.ids}
        self.nodes: dict[int, RawNode] = {}
        self.applied: dict[int, list[Entry]] = {i: [] for i in self.ids}
        self.snapshots_installed: dict[int, list[Snapshot]] = {i: [] for i in self.ids}
        self.read_states: dict[int, list[ReadState]] = {i: [] for i in self.ids}
        self.pending: list[Message] = []
        self.cut: set[tuple[int, int]] = set()
        self.sent: list[Message] = []
        for i in self.ids:
            self.restart(i)

    # ----- nodes -----

    def add_node(self, node_id: int) -> None:
        """A joiner: empty storage, no config; it learns it from the leader."""
        self.storages[node_id] = MemoryStorage(())
        self.applied[node_id] = []
        self.snapshots_installed[node_id] = []
        self.read_states[node_id] = []
        self.ids = (*self.ids, node_id)
        self.restart(node_id)

    def restart(self, i: int) -> None:
        config = Config(
            node_id=i,
            election_ticks=ELECTION_TICKS,
            pre_vote=self.pre_vote,
            check_quorum=self.check_quorum,
        )
        core = PLANTED[self.test_bug]
        self.nodes[i] = core(config, self.storages[i], random.Random(self.rng.random()))
        self.applied[i] = []

    def crash(self, i: int) -> None:
        del self.nodes[i]
        self.pending = [m for m in self.pending if m.dst != i]

    def isolate(self, i: int) -> None:
        for j in self.ids:
            if j != i:
                self.cut |= {(i, j), (j, i)}

    def heal(self) -> None:
        self.cut.clear()

    def role(self, i: int) -> Role:
        return self.nodes[i].role

    def term(self, i: int) -> int:
        return self.nodes[i].term

    def commit(self, i: int) -> int:
        return self.nodes[i].log.committed

    def log_terms(self, i: int) -> list[int | None]:
        log = self.nodes[i].log
        return [log.term(k) for k in range(log.first_index(), log.last_index() + 1)]

    def leader(self) -> int | None:
        leaders = [i for i, node in self.nodes.items() if node.role == Role.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda i: self.nodes[i].term)

    def applied_data(self, i: int) -> list[bytes]:
        return [e.data for e in self.applied[i] if e.kind == EntryKind.NORMAL and e.data]

    # ----- actions -----

    def campaign(self, i: int) -> None:
        self.nodes[i].campaign()
        self.process(i)

    def propose(self, i: int, data: bytes) -> int:
        index = self.nodes[i].propose(data)
        self.process(i)
        return index

    def tick(self, i: int, ticks: int = 1) -> None:
        for _ in range(ticks):
            self.nodes[i].tick()
            self.process(i)

    def tick_all(self, ticks: int = 1) -> None:
        """Tick every live node, delivering all messages after each tick."""
        for _ in range(ticks):
            for i in list(self.nodes):
                self.nodes[i].tick()
                self.process(i)
            self.settle()

    def process(self, i: int) -> None:
        """The replica loop: persist -> send -> apply -> advance."""
        node, storage = self.nodes[i], self.storages[i]
        while node.has_ready():
            ready = node.ready()
            if ready.snapshot is not None:
                storage.apply_snapshot(ready.snapshot)
                self.snapshots_installed[i].append(ready.snapshot)
            if ready.compaction is not None:
                storage.compact(ready.compaction)
            storage.append(ready.entries)
            if ready.hard_state is not None:
                storage.set_hard_state(ready.hard_state)
            self.pending.extend(ready.messages)
            self.sent.extend(ready.messages)
            self.applied[i].extend(ready.committed_entries)
            self.read_states[i].extend(ready.read_states)
            node.advance(ready)

    def deliver(self, *, src: int | None = None, dst: int | None = None, kind: type | None = None) -> int:
        """Deliver pending messages matching all given filters, repeatedly
        (answers that match too are delivered), until none match."""
        delivered = 0
        while True:
            batch = [m for m in self.pending if _matches(m, src, dst, kind)]
            if not batch:
                return delivered
            self.pending = [m for m in self.pending if not _matches(m, src, dst, kind)]
            for m in batch:
                delivered += 1
                if m.dst in self.nodes and (m.src, m.dst) not in self.cut:
                    self.nodes[m.dst].step(m)
                    self.process(m.dst)

    def deliver_one(self, src: int, dst: int) -> None:
        """Deliver only the oldest pending message from src to dst."""
        for k, m in enumerate(self.pending):
            if m.src == src and m.dst == dst:
                del self.pending[k]
                if m.dst in self.nodes and (m.src, m.dst) not in self.cut:
                    self.nodes[m.dst].step(m)
                    self.process(m.dst)
                return
        raise AssertionError(f"no pending message {src} -> {dst}")

    def exchange(self, a: int, b: int) -> None:
        """Let a and b talk to each other until they are done."""
        while any({m.src, m.dst} == {a, b} for m in self.pending):
            self.deliver(src=a, dst=b)
            self.deliver(src=b, dst=a)

    def run_election(self, i: int) -> None:
        """i campaigns; only vote traffic (PreVote rounds too) is delivered."""
        self.campaign(i)
        while any(isinstance(m, VoteRequest | VoteResponse) for m in self.pending):
            self.deliver(kind=VoteRequest)
            self.deliver(kind=VoteResponse)

    def drop(self, *, src: int | None = None, dst: int | None = None, kind: type | None = None) -> int:
        before = len(self.pending)
        self.pending = [m for m in self.pending if not _matches(m, src, dst, kind)]
        return before - len(self.pending)

    def settle(self) -> None:
        """Deliver everything until the network is quiet (cut links drop)."""
        self.deliver()

    def elect(self, i: int) -> None:
        self.campaign(i)
        self.settle()
        assert self.leader() == i


def _matches(m: Message, src: int | None, dst: int | None, kind: type | None) -> bool:
    return (
        (src is None or m.src == src)
        and (dst is None or m.dst == dst)
        and (kind is None or isinstance(m, kind))
    )
