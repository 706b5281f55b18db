"""The replica loop: group commit through Raft (DESIGN.md "Flow of one write").

`Replica` has the face of the single node's `Committer` (`submit`,
`listeners`, `close`, `run`), so the job service and the dispatcher do not know
which one they talk to. Commands that arrive while a Ready is being written
become one proposal, hence one log entry. Each Ready is handled in one LMDB
write transaction on a worker thread: the snapshot it installs, the compaction
it records, its new log entries, its hard state, and the committed entries it
applies (with the applied index), then one fsync. Only then are its messages
sent and the requests whose entries it applied answered: a `2xx` means the
entry was on a majority's disk and is applied here. Applying committed entries
before sending is safe: they are durable on a majority already.

The loop never reads the clock for the state machine: commands carry the
leader's time. Ticks come from a timer task; raft counts them.

A Ready that cannot be written (a full disk, a full map that cannot grow:
`errors.StorageFault`) is tried again, after a bounded backoff, until
it is: neither sent before, nor applied, nor advanced. So a follower that
cannot persist does not acknowledge, and a leader that cannot stops leading:
it answers its waiting writes `507`, neither serves nor dispatches, and sends
no more heartbeats, so the others elect a leader among themselves and go on
(engine/storage_guard.py, docs/operations.md "Disk full").
"""

import enum
import logging
import random
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import trio

from tempo import errors, limits
from tempo.engine.commands import Command, encode_entry
from tempo.engine.commit import Waiter
from tempo.engine.raftlog import RaftLog
from tempo.engine.storage_guard import StorageGuard
from tempo.engine.store import STORAGE_ERRNOS, Changes, Outcome, Store
from tempo.metrics import COUNT_BUCKETS, Histogram
from tempo.raft import (
    AppendRequest,
    ConfChange,
    ConfChangeRejected,
    Config,
    Entry,
    EntryKind,
    Heartbeat,
    Message,
    NotLeader,
    ProgressState,
    ProposalDropped,
    RawNode,
    Ready,
    Role,
    SnapshotResponse,
    TransferInProgress,
    UncommittedBytesExceeded,
)

log = logging.getLogger("tempo.replica")
T = TypeVar("T")


class Phase(enum.Enum):
    """What this node may do, as the API sees it."""

    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    # Elected, but no entry of its term is applied yet: it cannot know the
    # state is complete, so it neither serves nor dispatches.
    ELECTED = "elected"
    LEADING = "leader"


class Replica:
    def __init__(
        self,
        store: Store,
        raft_log: RaftLog,
        node_id: int,
        send: Callable[[list[Message]], None],
        *,
        snapshot_entries: int = limits.snapshot_entries,
        rng: random.Random | None = None,
        name_of: Callable[[int], str] = str,
    ):
        self.store = store
        self.name_of = name_of  # raft ID → node ID, for the log
        self.raft_log = raft_log
        self.send = send
        self.snapshot_entries = snapshot_entries
        config = Config(
            node_id=node_id,
            election_ticks=limits.raft_election_ticks,
            heartbeat_ticks=limits.raft_heartbeat_ticks,
            applied=store.applied_index(),
        )
        self.node = RawNode(config, raft_log, rng or random.Random())
        self.listeners: list[Callable[[Changes], Awaitable[None] | None]] = []
        # Called on the trio thread whenever `phase` or the leader changes.
        self.on_phase: list[Callable[[], None]] = []
        self.phase = Phase.FOLLOWER
        self.leader_id = 0
        self.applied_index = store.applied_index()
        self._pending: list[tuple[Command, Waiter]] = []
        self._proposed: dict[int, tuple[int, list[Waiter]]] = {}
        self._wake = trio.Event()
        self._closing = False
        self._limiter = trio.CapacityLimiter(1)
        self._snapshotting = False
        # Snapshot transfers to followers, as this leader saw them: when a
        # chunk was last answered, and when each (peer, snapshot index) was
        # first seen. Compaction waits while one of them moves.
        self._snapshot_answered_at_s = -limits.snapshot_transfer_idle_s
        self._transfers: dict[tuple[int, int], float] = {}
        self._nursery: trio.Nursery | None = None
        self.batches_committed = 0
        self.commands_committed = 0
        # Seconds from proposal to applied, of the entries this node proposed;
        # and seconds the loop spent writing (both for /metrics).
        self._proposed_at: dict[int, float] = {}
        self.commit_seconds_sum = 0.0
        self.write_seconds_sum = 0.0
        self.readies = 0
        # Commands per entry this node proposed, log entries per Ready
        # written, and how often the known leader changed (for /metrics).
        self.entry_commands = Histogram(COUNT_BUCKETS)
        self.ready_entries = Histogram(COUNT_BUCKETS)
        self.leader_changes = 0
        # The commit index of the leader, as its messages of this term told
        # it: ((term, leader), index). A follower that lags knows how far.
        self._leader_commit: tuple[tuple[int, int], int] = ((0, 0), 0)
        self.storage = StorageGuard()
        # A compaction that did not fit on the disk is not tried again before this (trio time).
        self._snapshot_after = 0.0

    # -- the Committer face ----------------------------------------------------------

    async def submit(self, command: Command) -> Outcome | list[Outcome]:
        if self._closing:
            raise errors.ShuttingDown("the node is shutting down")
        if self.phase is not Phase.LEADING:
            raise errors.NotLeader("this node is not the leader")
        self.storage.check()
        if len(self._pending) >= limits.commit_pending_max:
            raise errors.Overloaded("too many writes waiting; retry shortly")
        waiter = Waiter()
        self._pending.append((command, waiter))
        self._wake.set()
        await waiter.done.wait()
        if isinstance(waiter.outcome, BaseException):
            # One failure object is shared by a batch's waiters: raise it
            # without the traceback another waiter's raise left on it.
            raise waiter.outcome.with_traceback(None)
        return waiter.outcome

    def close(self) -> None:
        """Refuses new commands; what is pending still goes out."""
        self._closing = True
        self._wake.set()

    # -- inputs from the transport and the operator ------------------------------------

    def step(self, message: Message) -> None:
        self.node.step(message)
        self._note_leader_commit(message)
        if isinstance(message, SnapshotResponse):
            self._snapshot_answered_at_s = trio.current_time()
        self._wake.set()

    def _note_leader_commit(self, m: Message) -> None:
        if isinstance(m, AppendRequest):
            index = m.commit
        elif isinstance(m, Heartbeat):
            index = m.leader_commit
        else:
            return
        key = (m.term, m.src)
        if key != (self.node.term, self.node.leader_id):
            return  # stale, or not from the leader this node follows
        (known_key, known) = self._leader_commit
        self._leader_commit = (key, max(known, index) if known_key == key else index)

    @property
    def leader_commit_index(self) -> int:
        """The commit index of the leader this node follows, as far as its
        messages told; 0 when it has heard none in this term."""
        key, index = self._leader_commit
        return index if key == (self.node.term, self.node.leader_id) else 0

    def stop_campaigning(self) -> None:
        """This node is stopping: it never campaigns nor takes leadership
        again (a transfer to it is ignored), and still votes and replicates."""
        self.node.stop_campaigning()
        self._wake.set()

    def transfer_leadership(self) -> bool:
        """Hands leadership to the most caught-up other voter; False if this
        node does not lead or there is nobody to hand it to."""
        if self.node.role != Role.LEADER:
            return False
        others = [(p.match, peer) for peer, p in self.node.progress.items() if peer != self.node.id]
        if not others:
            return False
        target = max(others)[1]
        try:
            self.node.transfer_leader(target)
        except ProposalDropped:
            return False
        log.warning("%s: handing leadership over to %s", self.name_of(self.node.id), self.name_of(target))
        self._wake.set()
        return True

    async def change_voter(self, change: ConfChange) -> None:
        """Adds or removes one voter; returns once the change is applied here."""
        if self.phase is not Phase.LEADING:
            raise errors.NotLeader("this node is not the leader")
        try:
            index = self.node.propose_conf_change(change)
        except ConfChangeRejected as exc:
            raise errors.Conflict(f"the cluster cannot change now: {exc}") from None
        except ProposalDropped:
            raise errors.NotLeader("this node is not the leader") from None
        waiter = Waiter()
        self._proposed[index] = (self.node.term, [waiter])
        self._wake.set()
        await waiter.done.wait()
        if isinstance(waiter.outcome, BaseException):
            raise waiter.outcome.with_traceback(None)

    @property
    def voters(self) -> tuple[int, ...]:
        return self.node.voters

    @property
    def term(self) -> int:
        return self.node.term

    @property
    def commit_index(self) -> int:
        return self.node.hard_state().commit

    # -- the loop --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._ticker)
            task_status.started()
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                # A role change alone (CheckQuorum stepping down) makes no Ready.
                self._update_phase()
                self._propose_pending()
                while self.node.has_ready():
                    await self._handle(self.node.ready())
                    self._propose_pending()

    async def _ticker(self) -> None:
        while True:
            await trio.sleep(limits.raft_tick_ms / 1000)
            self.node.tick()
            self._wake.set()
            if self.storage.refused is not None:
                # The loop waits to write a Ready again; the role it shows
                # follows the core meanwhile (a new leader elsewhere).
                self._update_phase()

    def _propose_pending(self) -> None:
        while self._pending:
            batch: list[tuple[Command, Waiter]] = []
            size_bytes = 0
            for command, waiter in self._pending[: limits.commit_batch_commands_max]:
                batch.append((command, waiter))
                size_bytes += _size_hint(command)
                if size_bytes >= limits.raft_entry_bytes_target:
                    break
            del self._pending[: len(batch)]
            try:
                index = self.node.propose(encode_entry([command for command, _ in batch]))
            except (NotLeader, TransferInProgress):
                self._fail([w for _, w in batch], errors.NotLeader("this node is not the leader"))
                continue
            except UncommittedBytesExceeded:
                self._fail([w for _, w in batch], errors.Overloaded("too many writes in flight; retry shortly"))
                continue
            self._proposed[index] = (self.node.term, [w for _, w in batch])
            self.entry_commands.observe(len(batch))
            self._proposed_at[index] = trio.current_time()

    async def _handle(self, rd: Ready) -> None:
        # A leader may send its appends while it writes them (Raft thesis
        # §10.2.1): the core counts its own log in a quorum only once
        # `advance` reports it persisted. Not when this Ready changes the term
        # or the vote, which its messages may depend on.
        early = rd.role == Role.LEADER and rd.snapshot is None and not self._changes_vote(rd)
        if early and rd.messages:
            self.send(rd.messages)
        # A follower acknowledges new entries before it applies older ones:
        # two transactions (fsync is cheap next to apply), a shorter commit.
        split = not early and bool(rd.entries) and bool(rd.committed_entries)
        started = trio.current_time()
        results = await self._persist(partial(self._write, rd, not split))
        self.write_seconds_sum += trio.current_time() - started
        self.readies += 1
        if rd.entries:
            self.ready_entries.observe(len(rd.entries))
        self.raft_log.committed(rd.hard_state, rd.entries, rd.snapshot, rd.compaction)
        if not early and rd.messages:
            self.send(rd.messages)
        if split:
            results = await self._persist(partial(self._apply, rd.committed_entries))
        if rd.snapshot is not None:
            self.applied_index = rd.snapshot.meta.index
            # Whatever this node proposed before is settled by the leader now.
            self._fail_proposed(errors.NotLeader("this node is no longer the leader"))
        for entry, (outcomes, changes) in zip(rd.committed_entries, results, strict=True):
            self.applied_index = entry.index
            for listener in self.listeners:
                if (slices := listener(changes)) is not None:
                    await slices
            proposed = self._proposed.pop(entry.index, None)
            if proposed is not None:
                term, waiters = proposed
                if term != entry.term:
                    self._fail(waiters, errors.NotLeader("the entry was replaced by a new leader's"))
                elif entry.kind != EntryKind.NORMAL:
                    self._fail(waiters, None)  # a configuration change: nothing to answer
                else:
                    for waiter, outcome in zip(waiters, outcomes, strict=True):
                        waiter.finish(outcome)
                    proposed_at = self._proposed_at.pop(entry.index, None)
                    if proposed_at is not None:
                        self.commit_seconds_sum += trio.current_time() - proposed_at
                    self.batches_committed += 1
                    self.commands_committed += len(waiters)
        self.node.advance(rd)
        self._update_phase()
        self._maybe_snapshot()

    async def _persist(self, write: Callable[[], T]) -> T:
        """`write` on a worker thread, until it commits. While it does not
        (storage is full or failing), nothing of the Ready is sent, applied
        or advanced, and writes here are refused (`_refuse`)."""
        while True:
            try:
                result = await trio.to_thread.run_sync(write, limiter=self._limiter)
            except errors.StorageFault as fault:
                # Nothing was written, and no transaction is open: the map
                # may grow now, and then the write goes again at once.
                if fault.map_full and self.store.grow_map():
                    continue
                self.storage.failed(fault)
                self._refuse(fault)
                await trio.sleep_until(self.storage.retry_at)
                continue
            if self.storage.refused is not None:
                self.storage.succeeded()
                self._update_phase()
            return result

    def _refuse(self, fault: errors.StorageFault) -> None:
        """This node cannot persist: the writes it holds get `fault`, and
        a leader stops leading (`_update_phase`). What it proposed may still
        commit through the others: as with any 5xx, a client retries with
        its request key."""
        self._fail([w for _, w in self._pending], fault)
        self._pending.clear()
        self._fail_proposed(fault)
        self._update_phase()

    def _changes_vote(self, rd: Ready) -> bool:
        before = self.raft_log.hard_state()
        after = rd.hard_state
        return after is not None and (after.term != before.term or after.vote != before.vote)

    def _write(self, rd: Ready, apply: bool) -> list[tuple[list[Outcome], Changes]]:
        """Worker thread: the Ready in one transaction, one fsync (without its
        committed entries unless `apply`)."""
        if rd.snapshot is not None:
            try:
                self.raft_log.write_snapshot_file(rd.snapshot.meta.index, rd.snapshot.data)
            except OSError as exc:
                fault = self.store.fault_of(exc)
                if fault is None:
                    raise
                raise fault from None

        def work(txn) -> list[tuple[list[Outcome], Changes]]:
            if rd.snapshot is not None:
                self.raft_log.install_in(txn, rd.snapshot)
                self.store.restore_in(txn, rd.snapshot.meta.index, rd.snapshot.data)
            if rd.compaction is not None:
                self.raft_log.compact_in(txn, rd.compaction)
            if rd.entries:
                self.raft_log.append_in(txn, rd.entries)
            if rd.hard_state is not None:
                self.raft_log.set_hard_state_in(txn, rd.hard_state)
            return self._apply_in(txn, rd.committed_entries) if apply else []

        return self.store.write(work)

    def _apply(self, entries: list[Entry]) -> list[tuple[list[Outcome], Changes]]:
        return self.store.write(lambda txn: self._apply_in(txn, entries))

    def _apply_in(self, txn, entries: list[Entry]) -> list[tuple[list[Outcome], Changes]]:
        out = []
        for entry in entries:
            data = entry.data if entry.kind == EntryKind.NORMAL else b""
            out.append(self.store.apply_in(txn, entry.index, data))
        return out

    def _update_phase(self) -> None:
        role = self.node.role
        if role == Role.LEADER:
            # A leader that cannot persist neither serves nor dispatches.
            serving = self._term_applied() and self.storage.refused is None
            phase = Phase.LEADING if serving else Phase.ELECTED
        elif role in (Role.CANDIDATE, Role.PRE_CANDIDATE):
            phase = Phase.CANDIDATE
        else:
            phase = Phase.FOLLOWER
        leader_id = self.node.leader_id
        if phase is self.phase and leader_id == self.leader_id:
            return
        if self.phase in (Phase.LEADING, Phase.ELECTED) and phase not in (Phase.LEADING, Phase.ELECTED):
            self._fail([w for _, w in self._pending], errors.NotLeader("this node is no longer the leader"))
            self._pending.clear()
            self._fail_proposed(errors.NotLeader("this node is no longer the leader"))
        log.info(
            "%s: %s in term %d (leader: %s)",
            self.name_of(self.node.id), phase.value, self.node.term, self.name_of(leader_id) if leader_id else "none",
        )
        if leader_id and leader_id != self.leader_id:
            self.leader_changes += 1
        self.phase = phase
        self.leader_id = leader_id
        for callback in self.on_phase:
            callback()

    def _term_applied(self) -> bool:
        """An entry of the leader's own term is applied (its no-op at least):
        everything committed before it is in the tables."""
        if self.applied_index < self.raft_log.first_index():
            return self.raft_log.snapshot().meta.term == self.node.term
        return self.raft_log.term(self.applied_index) == self.node.term

    def _fail(self, waiters: list[Waiter], failure: BaseException | None) -> None:
        for waiter in waiters:
            waiter.finish(failure)

    def _fail_proposed(self, failure: BaseException) -> None:
        for _, waiters in self._proposed.values():
            self._fail(waiters, failure)
        self._proposed.clear()
        self._proposed_at.clear()

    # -- log compaction ---------------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        behind = self.applied_index - self.raft_log.snapshot().meta.index
        if self._snapshotting or behind < self.snapshot_entries or trio.current_time() < self._snapshot_after:
            return
        if self._sending_snapshot() and behind < self.snapshot_entries + limits.snapshot_defer_entries_max:
            return
        self._snapshotting = True
        self._nursery.start_soon(self._snapshot)

    def _sending_snapshot(self) -> bool:
        """This node leads and a follower is being sent a snapshot, which
        answered a chunk (or started) less than `snapshot_transfer_idle_s` ago.

        Compacting meanwhile would drop the entries that follow the snapshot
        being sent: once the follower has installed it, it would need the
        next snapshot, and under steady writes it would chase snapshots for
        ever instead of coming back to replicating by log (etcd defers its
        compaction while it sends a snapshot, for the same reason)."""
        progress = self.node.progress if self.node.role == Role.LEADER else {}
        now_s = trio.current_time()
        transfers = {
            (peer, p.snapshot.meta.index)
            for peer, p in progress.items()
            if p.state == ProgressState.SNAPSHOT and p.snapshot is not None
        }
        self._transfers = {t: self._transfers.get(t, now_s) for t in transfers}
        if not self._transfers:
            return False
        moved_s = max(self._snapshot_answered_at_s, *self._transfers.values())
        return now_s - moved_s < limits.snapshot_transfer_idle_s

    async def _snapshot(self) -> None:
        try:
            index, data = await trio.to_thread.run_sync(self.store.snapshot_data)
            # The store may be a Ready ahead of the core (applied, not yet
            # advanced); such a copy waits for the next round.
            if self.raft_log.snapshot().meta.index < index <= self.node.log.applied:
                await trio.to_thread.run_sync(self.raft_log.write_snapshot_file, index, data)
                self.node.compact(index, data)
                self._wake.set()
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            # The log is kept until a snapshot fits; writes go on meanwhile.
            self._snapshot_after = trio.current_time() + limits.snapshot_retry_s
            log.warning("a snapshot does not fit on the disk (%s); trying again in %g s", exc, limits.snapshot_retry_s)
        finally:
            self._snapshotting = False


def _size_hint(command: Command) -> int:
    """A rough size, to keep entries near `raft_entry_bytes_target`."""
    items = getattr(command, "jobs", None) or getattr(command, "claims", None) or getattr(command, "results", None)
    return 200 + 300 * len(items) if items else 200
