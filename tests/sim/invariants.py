"""Safety and liveness checks of the simulator, run after every event.

Raft §5 properties (Figure 3) plus the contract with the application:
election safety, one vote per term across restarts, log matching, leader
completeness, state machine safety, monotonic term/commit/applied, and at the
end durability of acknowledged writes and linearizability of the history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tempo.raft import Entry, Ready, Role

from . import linearizability

if TYPE_CHECKING:
    from .cluster import SimNode, Simulator


class SimFailure(Exception):
    def __init__(self, seed: int, what: str, test_bug: str = "") -> None:
        replay = f"python -m tests.sim --seed {seed}" + (f" --bug {test_bug}" if test_bug else "")
        super().__init__(f"seed {seed}: {what}\n  replay: {replay}")
        self.seed = seed
        self.what = what


class Invariants:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.leader_of_term: dict[int, int] = {}
        self.vote_of: dict[tuple[int, int], int] = {}  # (voter, term) -> candidate
        # (index, term) -> (previous entry's term, kind, data): Log Matching.
        self.entry_at: dict[tuple[int, int], tuple[int, int, bytes]] = {}
        self.committed_term: dict[int, int] = {}  # index -> term, any node's commit
        self.applied_entry: dict[int, Entry] = {}  # index -> entry, any node's apply
        self.commit_checked: dict[int, int] = {}
        self.seen: dict[int, tuple[int, int, int]] = {}  # this incarnation's term, commit, applied
        self.durable: dict[int, tuple[int, int, int]] = {}  # max durable term, commit, snapshot
        self.leader_checked: set[tuple[int, int]] = set()

    def fail(self, what: str) -> SimFailure:
        return self.sim.fail(what)

    def on_start(self, node: SimNode) -> None:
        core = node.core
        term_d, commit_d, snap_d = self.durable.get(node.id, (0, 0, 0))
        if core.term < term_d:
            raise self.fail(f"node {node.id} restarted with term {core.term} < durable {term_d}")
        if core.log.committed < commit_d:
            raise self.fail(f"node {node.id} restarted with commit {core.log.committed} < {commit_d}")
        if node.applied < snap_d:
            raise self.fail(f"node {node.id} restarted with applied {node.applied} < {snap_d}")
        self.seen[node.id] = (core.term, core.log.committed, node.applied)

    def on_vote_granted(self, voter: int, term: int, candidate: int) -> None:
        previous = self.vote_of.setdefault((voter, term), candidate)
        if previous != candidate:
            raise self.fail(
                f"node {voter} voted twice in term {term}: for {previous} and {candidate}"
            )

    def on_persisted(self, node: SimNode, ready: Ready) -> None:
        storage = node.storage
        hard_state = storage.durable.hard_state()
        snapshot_index = storage.durable.snapshot().meta.index
        current = (hard_state.term, hard_state.commit, snapshot_index)
        previous = self.durable.get(node.id, (0, 0, 0))
        for name, now, before in zip(("term", "commit", "snapshot"), current, previous, strict=True):
            if now < before:
                raise self.fail(f"node {node.id} durable {name} went back: {before} -> {now}")
        self.durable[node.id] = current
        if ready.entries:
            self._check_log_matching(node, ready.entries)

    def _check_log_matching(self, node: SimNode, entries: list[Entry]) -> None:
        prev_term = node.core.log.term(entries[0].index - 1)
        assert prev_term is not None
        for entry in entries:
            key = (entry.index, entry.term)
            value = (prev_term, entry.kind, entry.data)
            known = self.entry_at.setdefault(key, value)
            if known != value:
                raise self.fail(f"log matching: two different entries at {key}")
            prev_term = entry.term

    def on_apply(self, node: SimNode, entry: Entry) -> None:
        known = self.applied_entry.setdefault(entry.index, entry)
        if known != entry:
            raise self.fail(
                f"state machine safety: node {node.id} applied {entry} at {entry.index}, "
                f"another node applied {known}"
            )

    def after_event(self, node: SimNode) -> None:
        core = node.core
        log = core.log
        term, commit, applied = self.seen[node.id]
        if core.term < term or log.committed < commit or node.applied < applied:
            raise self.fail(f"node {node.id}: term, commit or applied went back")
        self.seen[node.id] = (core.term, log.committed, node.applied)
        if not node.applied <= log.committed:
            raise self.fail(f"node {node.id}: applied {node.applied} > commit {log.committed}")
        if not log.committed <= node.storage.durable.last_index():
            raise self.fail(f"node {node.id}: commit {log.committed} beyond its durable log")
        self._check_commits(node)
        if core.role == Role.LEADER:
            self._check_leader(node)

    def _check_commits(self, node: SimNode) -> None:
        log = node.core.log
        lo = max(self.commit_checked.get(node.id, 0), log.snapshot_index()) + 1
        for index in range(lo, log.committed + 1):
            term = log.term(index)
            assert term is not None
            known = self.committed_term.setdefault(index, term)
            if known != term:
                raise self.fail(f"two entries committed at {index}: terms {known} and {term}")
        self.commit_checked[node.id] = max(self.commit_checked.get(node.id, 0), log.committed)

    def _check_leader(self, node: SimNode) -> None:
        core = node.core
        leader = self.leader_of_term.setdefault(core.term, node.id)
        if leader != node.id:
            raise self.fail(f"two leaders in term {core.term}: {leader} and {node.id}")
        if (core.term, node.id) in self.leader_checked:
            return
        self.leader_checked.add((core.term, node.id))
        # Leader completeness (Raft §5.4): every entry committed so far is in
        # the new leader's log.
        log = core.log
        for index in range(log.first_index(), max(self.committed_term, default=0) + 1):
            term = self.committed_term.get(index)
            if term is not None and term < core.term and log.term(index) != term:
                raise self.fail(
                    f"leader completeness: leader {node.id} of term {core.term} lacks "
                    f"committed entry {index} of term {term}"
                )

    def _log_history(self, reference: list[bytes]) -> list[linearizability.Op]:
        position = {value: k + 1 for k, value in enumerate(reference)}
        history = []
        for op in self.sim.history:
            if op.kind == "read":
                history.append(op)
            elif op.value in position:
                history.append(
                    linearizability.Op("add", position[op.value], op.invoke_at, op.response_at)
                )
            # else: never applied and (checked above) never acknowledged: it
            # did not take effect, so it is left out.
        return history

    def check_final(self) -> None:
        sim = self.sim
        leader = sim._leader()
        assert leader is not None
        members = [sim.nodes[i] for i in leader.core.voters]
        reference = members[0].values
        for node in members:
            if node.values != reference:
                raise self.fail(f"node {node.id} state differs from node {members[0].id}")
        if len(set(reference)) != len(reference):
            raise self.fail("a value was applied more than once")
        missing = sim.acked - set(reference)
        if missing:
            raise self.fail(f"acknowledged values lost: {sorted(missing)[:5]}")
        history = self._log_history(reference)
        try:
            ok, why = linearizability.check(history, linearizability.LogModel())
        except linearizability.CheckerBudgetExceeded as e:
            raise self.fail(f"linearizability checker budget exceeded: {e}") from e
        if not ok:
            raise self.fail(f"history not linearizable: {why}")
