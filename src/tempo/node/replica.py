"""The replica loop: group commit through Raft (docs/design.md "Flow of one write").

`Replica` is a `CommandLog` (engine/commandlog.py), as the single node's
`Committer` is, so the job service, the dispatcher, retention and the API do
not know which one they talk to. Commands that arrive while a Ready is being
written become one proposal, hence one log entry. Each Ready is handled in
one LMDB write transaction on a worker thread: the snapshot it installs, the
compaction it records, its new log entries, its hard state, and the
committed entries it applies (with the applied index), then one fsync
(engine/raftlog.py `write_ready`). A follower sends its messages only then;
a leader sends its own before its write (Raft thesis §10.2.1: see `steps`).
The requests whose entries it applied are answered after the write: a `2xx`
means the entry was on a majority's disk and is applied here. Applying
committed entries before sending is safe: they are durable on a majority
already.

The handling of one Ready is written once, as steps (`steps`: persist, send,
apply, advance), apart from the trio driver that runs them (`run`, `_handle`:
writes on a worker thread, listeners awaited, compaction in the background),
so that a test or a simulator can run them on its own thread
(`handle_now`, `run_now`) or step by step.

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

import logging
import random
from collections.abc import Callable, Iterator
from functools import partial

import trio

from tempo import errors, limits
from tempo.engine import (
    Answer,
    Applied,
    Command,
    Intake,
    Listener,
    Outcome,
    RaftLog,
    StorageGuard,
    Store,
    Waiter,
    apply_entries,
    write_ready,
)
from tempo.metrics import COUNT_BUCKETS, Histogram
from tempo.node.compaction import Compaction
from tempo.node.leadership import Leadership
from tempo.node.reads import Reads
from tempo.node.steps import Notify, Phase, ReadWait, Step, Write, _ReadRound
from tempo.raft import (
    Config,
    Entry,
    EntryKind,
    Message,
    NotLeader,
    RawNode,
    Ready,
    Role,
    TransferInProgress,
    UncommittedBytesExceeded,
)

__all__ = ["Notify", "Phase", "ReadWait", "Replica", "Step", "Write"]
log = logging.getLogger("tempo.replica")


class Replica(Reads, Leadership, Compaction):
    """The `CommandLog` of a cluster member (engine/commandlog.py)."""

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
        self.listeners: list[Listener] = []
        # Called on the trio thread whenever `phase` or the leader changes.
        self.on_phase: list[Callable[[], None]] = []
        self.phase = Phase.FOLLOWER
        self.leader_id = 0
        self.applied_index = store.applied_index()
        self._proposed: dict[int, tuple[int, list[Waiter]]] = {}
        self._wake = trio.Event()
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
        # and seconds the loop spent writing, retries included (both for
        # /metrics). Not `Store.txn_commit_seconds`: one LMDB commit each.
        self._proposed_at: dict[int, float] = {}
        self.propose_to_apply_seconds_sum = 0.0
        self.write_seconds_sum = 0.0
        self.readies = 0
        # Commands per entry this node proposed (its batch, as the
        # committer's), log entries per Ready written, and how often the
        # known leader changed (for /metrics).
        self.batch_commands = Histogram(COUNT_BUCKETS)
        self.ready_entries = Histogram(COUNT_BUCKETS)
        self.leader_changes = 0
        # The commit index of the leader, as its messages of this term told
        # it: ((term, leader), index). A follower that lags knows how far.
        self._leader_commit: tuple[tuple[int, int], int] = ((0, 0), 0)
        self.storage = StorageGuard()
        self._intake = Intake(self.storage, self._wake_up)
        # A compaction that did not fit on the disk is not tried again before this (trio time).
        self._snapshot_after = 0.0
        # Progress, for readiness (`stalled`): the last time (trio time) this
        # node had no work pending or saw its applied index move, and the
        # applied index it saw then. Sampled each tick.
        self._progress_at_s = 0.0
        self._progress_index = self.applied_index
        # Linearizable reads (`confirm_read`): the round that reads arriving
        # now join, started once no round is in flight; the one in flight
        # (sent, not yet confirmed); the confirmed ones waiting to be applied.
        # One round in flight at a time batches the reads: a round serves
        # every read that arrived while the one before it was in flight.
        self._read_next: _ReadRound | None = None
        self._read_in_flight: _ReadRound | None = None
        self._reads_applying: list[_ReadRound] = []
        self._read_rounds = 0  # rounds started; the next one's context

    # -- the CommandLog face ----------------------------------------------------------

    async def submit(self, command: Command) -> Answer:
        if not self._intake.closing and self.phase is not Phase.LEADING:
            raise errors.NotLeader("this node is not the leader")
        return await self._intake.submit(command)

    def submit_now(self, command: Command) -> Waiter:
        """`submit` without the wait, for a driver on its own thread (a
        simulator): the waiter is answered by a later `steps` run."""
        if not self._intake.closing and self.phase is not Phase.LEADING:
            raise errors.NotLeader("this node is not the leader")
        return self._intake.enqueue(command)

    @property
    def commands_undecodable(self) -> int:
        return self._intake.undecodable

    def close(self) -> None:
        """Refuses new commands; what is pending still goes out."""
        self._intake.close()

    def _wake_up(self) -> None:
        self._wake.set()

    # -- the loop: a thin trio driver ------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._ticker)
            task_status.started()
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                for rd in self.readies_due():
                    await self._handle(rd)

    async def _ticker(self) -> None:
        self._progress_at_s = trio.current_time()
        while True:
            await trio.sleep(limits.raft_tick_ms / 1000)
            self.node.tick()
            self._wake.set()
            self._note_progress()
            if self.storage.refused is not None:
                # The loop waits to write a Ready again; the role it shows
                # follows the core meanwhile (a new leader elsewhere).
                self._update_phase()

    # -- readiness --------------------------------------------------------------------

    async def _handle(self, rd: Ready) -> None:
        """`steps(rd)`, with each write on a worker thread (one at a time)
        and the listeners awaited; then a compaction if one is due."""
        for step in self.steps(rd):
            if isinstance(step, Write):
                step.result = await self._persist(step.work)
            else:
                for listener in self.listeners:
                    if (slices := listener(step.changes)) is not None:
                        await slices
        self._maybe_snapshot()

    async def _persist(self, work: Callable[[], list[Applied]]) -> list[Applied]:
        """`work` on a worker thread, until it commits; between tries, the
        backoff of `storage` (`write_failed`)."""
        while True:
            try:
                result = await trio.to_thread.run_sync(work, limiter=self._limiter)
            except errors.StorageFault as fault:
                if not self.write_failed(fault):
                    await trio.sleep_until(self.storage.retry_at)
                continue
            self.write_succeeded()
            return result

    # -- the loop: what it does, for any driver --------------------------------------

    def readies_due(self) -> Iterator[Ready]:
        """What one wake-up of the loop handles: the commands waiting are
        proposed, and each Ready the core has is handed out in turn (to be
        handled before the next is asked for), the commands that came
        meanwhile proposed after each."""
        # A role change alone (CheckQuorum stepping down) makes no Ready.
        self._update_phase()
        self._propose_pending()
        self._start_read()
        while self.node.has_ready():
            yield self.node.ready()
            self._propose_pending()
            self._start_read()

    def steps(self, rd: Ready) -> Iterator[Step]:
        """The handling of one Ready, in the order of raft/types.py `Ready`:
        persist (a `Write`), send, apply (a `Notify` per entry, then its
        waiters answered), advance. A driver runs each step it is given
        (the trio one: `_handle`; tests and a simulator may run them on
        their own thread), setting each Write's result, before it asks for
        the next.

        The exception to the order: a leader sends its messages before its
        own write (Raft thesis §10.2.1). The core counts the leader's own
        log in a quorum only once `advance` reports it persisted, so an
        entry still commits only once a majority has it on disk. Not when
        the Ready installs a snapshot, or changes the term or the vote,
        which its messages may depend on: then the leader too persists
        first. A follower always persists before it sends, so it
        acknowledges nothing it could lose."""
        early = rd.role == Role.LEADER and rd.snapshot is None and not self._changes_vote(rd)
        if early and rd.messages:
            self.send(rd.messages)
        # A follower acknowledges new entries before it applies older ones:
        # two transactions (fsync is cheap next to apply), a shorter commit.
        split = not early and bool(rd.entries) and bool(rd.committed_entries)
        started = trio.current_time()
        yield (write := Write(partial(write_ready, self.store, self.raft_log, rd, apply=not split)))
        results = write.result
        assert results is not None, "the driver did not run the write"
        self.write_seconds_sum += trio.current_time() - started
        self.readies += 1
        if rd.entries:
            self.ready_entries.observe(len(rd.entries))
        self.raft_log.committed(rd.hard_state, rd.entries, rd.snapshot, rd.compaction)
        if not early and rd.messages:
            self.send(rd.messages)
        if split:
            yield (write := Write(partial(apply_entries, self.store, rd.committed_entries)))
            results = write.result
            assert results is not None, "the driver did not run the write"
        if rd.snapshot is not None:
            self.applied_index = rd.snapshot.meta.index
            # Whatever this node proposed before is settled by the leader now.
            self._fail_proposed(errors.NotLeader("this node is no longer the leader"))
        for entry, (outcomes, changes) in zip(rd.committed_entries, results, strict=True):
            self.applied_index = entry.index
            yield Notify(changes)
            self._answer(entry, outcomes)
        self._confirmed_reads(rd)
        self.node.advance(rd)
        self._update_phase()

    def handle_now(self, rd: Ready) -> None:
        """`steps(rd)` run on the calling thread, each write at once. A
        storage fault is reported (`write_failed`) and raised, the Ready
        left unhandled; a driver that goes on after one runs `steps` itself.
        Every listener must answer None here (nothing is awaited), and no
        compaction is taken."""
        for step in self.steps(rd):
            if isinstance(step, Write):
                self.write_now(step)
            else:
                for listener in self.listeners:
                    slices = listener(step.changes)
                    assert slices is None, "a listener that works in slices needs the trio driver"

    def write_now(self, write: Write) -> None:
        """Runs `write` on the calling thread; a storage fault is reported
        (`write_failed`) and raised, unless the map grew and the write then
        went through."""
        while True:
            try:
                write.result = write.work()
            except errors.StorageFault as fault:
                if not self.write_failed(fault):
                    raise
                continue  # the map grew: once more, at once
            self.write_succeeded()
            return

    def run_now(self) -> None:
        """What one wake-up of `run` does, on the calling thread (`handle_now`)."""
        for rd in self.readies_due():
            self.handle_now(rd)

    def write_failed(self, fault: errors.StorageFault) -> bool:
        """A `Write` failed, with nothing of it written and no transaction
        open. True if it may go again at once (the map was full and grew);
        otherwise writes here are refused (`_refuse`), and it goes again at
        `storage.retry_at`. Nothing of the Ready is sent (a follower's),
        applied or advanced meanwhile."""
        if fault.map_full and self.store.grow_map():
            return True
        self.storage.failed(fault)
        self._refuse(fault)
        return False

    def write_succeeded(self) -> None:
        """A `Write` committed: refused writes, if they were, are taken again."""
        if self.storage.refused is not None:
            self.storage.succeeded()
            self._update_phase()

    def _propose_pending(self) -> None:
        intake = self._intake
        while intake.pending:
            count = size_bytes = 0
            for command, _ in intake.pending[: limits.commit_batch_commands_max]:
                count += 1
                size_bytes += _size_hint(command)
                if size_bytes >= limits.raft_entry_bytes_target:
                    break
            # Decoded before it is proposed, by the decoder every follower
            # decodes it with: an entry a follower would refuse is never
            # appended (`Intake.checked`).
            batch, data = intake.checked(intake.take(count))
            if not batch:
                continue
            try:
                index = self.node.propose(data)
            except (NotLeader, TransferInProgress):
                self._fail([w for _, w in batch], errors.NotLeader("this node is not the leader"))
                continue
            except UncommittedBytesExceeded:
                self._fail([w for _, w in batch], errors.Overloaded("too many writes in flight; retry shortly"))
                continue
            self._proposed[index] = (self.node.term, [w for _, w in batch])
            self.batch_commands.observe(len(batch))
            self._proposed_at[index] = trio.current_time()

    def _answer(self, entry: Entry, outcomes: list[Outcome]) -> None:
        """The waiters of an entry this node proposed, once it is applied."""
        proposed = self._proposed.pop(entry.index, None)
        if proposed is None:
            return
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
                self.propose_to_apply_seconds_sum += trio.current_time() - proposed_at
            self.batches_committed += 1
            self.commands_committed += len(waiters)

    def _refuse(self, fault: errors.StorageFault) -> None:
        """This node cannot persist: the writes it holds get `fault`, and
        a leader stops leading (`_update_phase`). What it proposed may still
        commit through the others: as with any 5xx, a client retries with
        its request key."""
        self._intake.fail(fault)
        self._fail_proposed(fault)
        self._update_phase()

    def _changes_vote(self, rd: Ready) -> bool:
        before = self.raft_log.hard_state()
        after = rd.hard_state
        return after is not None and (after.term != before.term or after.vote != before.vote)

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
            self._intake.fail(errors.NotLeader("this node is no longer the leader"))
            self._fail_proposed(errors.NotLeader("this node is no longer the leader"))
        if self.phase is Phase.LEADING and phase is not Phase.LEADING:
            # The core dropped the rounds in flight: no ReadState comes for them.
            self._fail_reads(errors.NotLeader("this node stopped leading before it could confirm the read"))
        if role == Role.PRE_CANDIDATE:
            # A pre-vote asks whether an election could be won; the term
            # moves only once it could.
            log.info("%s: %s, asking whether it could win term %d", self.name_of(self.node.id), phase.value,
                     self.node.term + 1)
        else:
            log.info(
                "%s: %s in term %d (leader: %s)",
                self.name_of(self.node.id), phase.value, self.node.term,
                self.name_of(leader_id) if leader_id else "none",
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


def _size_hint(command: Command) -> int:
    """A rough size, to keep entries near `raft_entry_bytes_target`."""
    items = getattr(command, "jobs", None) or getattr(command, "claims", None) or getattr(command, "results", None)
    return 200 + 300 * len(items) if items else 200
