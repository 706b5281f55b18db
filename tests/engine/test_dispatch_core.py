"""The dispatcher's core (engine/dispatch_core.py) stepped from plain
synchronous code: no trio, no threads, every instant given. Scheduler time
(`now_ms`) and monotonic time (`mono_s`) are separate inputs, so a test
moves one without the other. Commands the core hands back are applied to a
real store in the same thread, and the entry's changes fed back before
its outcomes, as the driver does."""

import random

import msgspec
import pytest

from tempo import clock, errors, ids, limits
from tempo.config import UNLIMITED, OwnerLimits
from tempo.engine.commands import Command, CreateJobs, ReportResults, Result
from tempo.engine.dispatch_core import HTTP_QUEUE, ClaimedRun, DispatchCore, feed_size
from tempo.engine.jobs import Jobs
from tempo.engine.records import Run
from tempo.engine.store import Outcome, Store
from tempo.schema import JobCreate, RetryIn, ScheduleIn

T0_MS = 1_800_000_000_000
OWNER = "default"
OTHER = "other"
QUEUE = f"{OWNER}\x00work"
OTHER_QUEUE = f"{OTHER}\x00work"


class Rig:
    """A store and a core with a clock of their own: `now_ms` (scheduler
    time) and `mono_s` (monotonic) move only when a test moves them."""

    def __init__(self, path: str, **options):
        self.store = Store(path)
        self.now_ms = T0_MS
        self.mono_s = 100.0
        self.core = DispatchCore(self.store, self.now_ms, **options)
        self.core.load(self.now_ms, self.mono_s)
        self.index = self.store.applied_index()
        self.jobs = Jobs(self.store, None)  # type: ignore[arg-type]  # only `new_job`, which commits nothing
        self.next_id = 1
        self.commands: list[bytes] = []  # every command proposed, encoded: a transcript

    def close(self) -> None:
        self.store.close()

    def advance(self, seconds: float, *, wall_ms: int = 0) -> None:
        """Both clocks move by `seconds`; scheduler time steps by `wall_ms`
        more (forward only: `clock.Clock` absorbs a step back)."""
        assert seconds >= 0 and wall_ms >= 0
        self.now_ms += round(seconds * 1000) + wall_ms
        self.mono_s += seconds

    def commit(self, command: Command) -> Outcome | list[Outcome]:
        """Applies one command as its own entry and feeds its changes to the
        core (whole), before its outcome is handed back."""
        self.commands.append(msgspec.msgpack.encode(command))
        self.index += 1
        [outcome], changes = self.store.apply_commands(self.index, [command])
        self.core.feed(changes, 0, feed_size(changes))
        return outcome

    def create(self, owner: str = OWNER, count: int = 1, at_s: float = 0, **fields) -> list[str]:
        fields.setdefault("target", "queue:work")
        body = JobCreate(schedule=ScheduleIn(at=clock.datetime_from_ms(T0_MS + round(at_s * 1000))), **fields)
        news = []
        for _ in range(count):
            job_id = ids.job_ids_from_int(self.now_ms, self.next_id, 1)[0]
            self.next_id += 1
            news.append(self.jobs.new_job(owner, body, self.now_ms, from_msgpack=False, job_id=job_id))
        outcomes = self.commit(CreateJobs(self.now_ms, news))
        return [o.job.id for o in outcomes]  # type: ignore[union-attr]

    def tick(self) -> None:
        while self.core.tick(self.now_ms, self.mono_s):
            pass

    def claim(self, queues: list[str] | None = None, runs_max: int = 10, worker: str = "w1") -> list[ClaimedRun]:
        core = self.core
        taken = core.take(queues or [QUEUE], runs_max, self.mono_s)
        if not taken.runs:
            return []
        proposal = core.propose_claims(worker, taken.runs, self.now_ms, self.mono_s)
        try:
            assert proposal.command is not None
            return core.claimed(proposal, self.commit(proposal.command))  # type: ignore[arg-type]
        finally:
            core.settle(proposal)

    def report(self, claimed: ClaimedRun, ok: bool = True, owner: str = OWNER) -> Run:
        run = claimed.run
        result = Result(run.job_id, run.nominal_ms, run.attempt, ok, None, None if ok else "boom")
        outcomes = self.commit(ReportResults(self.now_ms, owner, [result]))
        self.core.reported(outcomes)  # type: ignore[arg-type]
        [outcome] = outcomes  # type: ignore[misc]
        return outcome

    def expire(self) -> list:
        command = self.core.expire(self.now_ms, self.mono_s)
        if command is None:
            return []
        outcomes = self.commit(command)
        self.core.expire_applied(outcomes)  # type: ignore[arg-type]
        return outcomes  # type: ignore[return-value]

    def check(self) -> None:
        self.core.check_memory()
        self.core.check_leases()


@pytest.fixture
def rig(tmp_path):
    made = Rig(str(tmp_path / "data"))
    yield made
    made.check()
    made.close()


def run_id(claimed: ClaimedRun) -> str:
    return ids.run_id(claimed.run.job_id, claimed.run.nominal_ms)


def test_a_run_is_ready_when_due_and_not_before(rig):
    [job_id] = rig.create(at_s=5)
    rig.advance(4.9)
    rig.tick()
    assert rig.core.take_wakeups() is None and rig.claim() == []
    rig.advance(0.1)
    rig.tick()
    wakeups = rig.core.take_wakeups()
    assert wakeups is not None and wakeups.queues == {QUEUE}
    assert rig.core.take_wakeups() is None  # taken once
    [claimed] = rig.claim()
    assert claimed.run.job_id == job_id and claimed.run.attempt == 1
    # The command's expiry is scheduler time; the lease is monotonic.
    assert claimed.run.lease_expires_ms == rig.now_ms + 60_000
    assert rig.core.leases[(job_id, T0_MS + 5000)].deadline_s == rig.mono_s + 60
    rig.check()


def test_a_lease_runs_out_on_the_monotonic_clock_whatever_the_wall_clock_does(rig):
    rig.create(lease_s=30)
    rig.tick()
    [_claimed] = rig.claim()
    rig.advance(0, wall_ms=3600_000)  # the wall clock steps an hour forward
    assert rig.expire() == []
    rig.advance(29.9)
    assert rig.expire() == []
    rig.advance(0.1)
    [expired] = rig.expire()
    assert expired.status == "waiting" and expired.attempt == 1 and expired.error == "lease expired"
    assert rig.core.leases == {} and rig.core.lease_heap_entries == 0


def test_heartbeats_move_the_lease_on_without_growing_the_heap(rig):
    rig.create(lease_s=30)
    rig.tick()
    [claimed] = rig.claim()
    for _ in range(2000):
        rig.advance(0.01)
        expires_ms = rig.core.heartbeat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s)
        assert expires_ms == rig.now_ms + 30_000
        assert rig.core.lease_heap_entries == 1
    rig.check()
    last_s = rig.mono_s
    rig.advance(29.9)
    assert rig.expire() == []
    rig.mono_s = last_s + 30
    [expired] = rig.expire()
    assert expired.status == "waiting"


def test_a_release_ends_a_heartbeated_lease_at_once(rig):
    rig.create(lease_s=30)
    rig.tick()
    [claimed] = rig.claim()
    rig.core.heartbeat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s)
    rig.core.release([claimed], rig.mono_s)
    assert rig.core.counters["undelivered"] == 1
    rig.check()
    [expired] = rig.expire()
    assert expired.status == "waiting" and expired.due_ms == rig.now_ms
    assert rig.core.lease_heap_entries == 1  # the lease's first entry, stale; gone when it comes up
    rig.advance(30)
    assert rig.expire() == [] and rig.core.lease_heap_entries == 0


def test_stale_heap_entries_are_bounded_by_the_live_leases(rig, monkeypatch):
    monkeypatch.setattr(limits, "lease_heap_slack_entries", 10)
    rig.create(count=300, lease_s=3600)
    rig.tick()
    claimed = rig.claim(runs_max=300)
    assert len(claimed) == 300
    for one in claimed[:290]:
        rig.report(one)
        assert rig.core.lease_heap_entries <= 2 * len(rig.core.leases) + 10
    rig.check()
    assert rig.core.counters["lease_heap_rebuilds"] >= 1
    assert len(rig.core.leases) == 10


def test_heartbeats_of_an_unknown_or_stale_attempt_are_refused(rig):
    rig.create(lease_s=30)
    rig.tick()
    [claimed] = rig.claim()
    with pytest.raises(errors.StaleAttempt):
        rig.core.heartbeat(OWNER, run_id(claimed), 2, rig.now_ms, rig.mono_s)
    with pytest.raises(errors.NotFound):
        rig.core.heartbeat(OTHER, run_id(claimed), 1, rig.now_ms, rig.mono_s)
    with pytest.raises(errors.NotFound):
        rig.core.heartbeat(OWNER, "r_nonsense", 1, rig.now_ms, rig.mono_s)


def test_runs_in_flight_stop_at_the_limit_and_room_that_frees_wakes_the_owner(rig):
    rig.core.limits_of = lambda owner: OwnerLimits(runs_in_flight_max=2) if owner == OWNER else UNLIMITED
    rig.create(count=5)
    rig.create(owner=OTHER, count=3)
    rig.tick()
    rig.core.take_wakeups()
    first = rig.claim(runs_max=10)
    assert len(first) == 2 and rig.claim(runs_max=10) == []
    assert rig.core.held_back(rig.mono_s) == {OWNER: 3}
    assert len(rig.claim([OTHER_QUEUE], runs_max=10)) == 3  # another owner is not held
    rig.core.take_wakeups()
    rig.report(first[0])
    wakeups = rig.core.take_wakeups()
    assert wakeups is not None and wakeups.owners == {OWNER}
    assert len(rig.claim(runs_max=10)) == 1


def test_a_claim_rate_says_when_the_next_token_comes(rig):
    rig.core.limits_of = lambda owner: OwnerLimits(claims_per_s=2, claim_burst=2)
    rig.create(count=10)
    rig.tick()
    assert len(rig.claim(runs_max=10)) == 2
    taken = rig.core.take([QUEUE], 10, rig.mono_s)
    assert taken.runs == [] and taken.refill_ms == 500
    rig.advance(0.5)  # monotonic time refills the bucket; the wall clock is not read
    assert len(rig.claim(runs_max=10)) == 1


def test_a_claim_not_written_gives_its_runs_back_in_order(rig):
    jobs = [rig.create(at_s=i / 10)[0] for i in range(4)]
    rig.advance(1)
    rig.tick()
    taken = rig.core.take([QUEUE], 2, rig.mono_s)
    proposal = rig.core.propose_claims("w1", taken.runs, rig.now_ms, rig.mono_s)
    assert rig.core.claiming == {OWNER: 2}
    rig.core.give_back(proposal)
    rig.core.settle(proposal)
    assert rig.core.claiming == {}
    with pytest.raises(AssertionError):
        rig.core.settle(proposal)  # once
    assert [c.run.job_id for c in rig.claim(runs_max=10)] == jobs


def test_a_reset_while_a_claim_commits_leaves_its_runs_claimed_and_counts_nothing(rig):
    rig.core.limits_of = lambda owner: OwnerLimits(runs_in_flight_max=5)
    rig.create(count=3)
    rig.tick()
    taken = rig.core.take([QUEUE], 10, rig.mono_s)
    proposal = rig.core.propose_claims("w1", taken.runs, rig.now_ms, rig.mono_s)
    rig.core.reset(rig.now_ms)
    assert proposal.command is not None
    claimed = rig.core.claimed(proposal, rig.commit(proposal.command))  # type: ignore[arg-type]
    rig.core.give_back(proposal)  # stale: nothing comes back
    rig.core.settle(proposal)
    assert len(claimed) == 3 and rig.core.claiming == {} and rig.core.queue_of == {}
    # The new leader's load leases them once.
    rig.core.load(rig.now_ms, rig.mono_s)
    assert rig.core.in_flight == {OWNER: 3}
    rig.check()


def test_an_expiry_not_written_comes_back_at_the_next_check(rig):
    rig.create(lease_s=5)
    rig.tick()
    [_claimed] = rig.claim()
    rig.advance(5)
    command = rig.core.expire(rig.now_ms, rig.mono_s)
    assert command is not None and rig.core.leases == {}
    rig.core.expire_failed(command, rig.mono_s)
    rig.check()
    again = rig.core.expire(rig.now_ms, rig.mono_s)
    assert again is not None and again.expiries == command.expiries


def test_the_http_queues_are_served_in_turn(rig):
    rig.create(count=6, target="http://127.0.0.1:9/a")
    rig.create(owner=OTHER, count=2, target="http://127.0.0.1:9/b")
    rig.tick()
    wakeups = rig.core.take_wakeups()
    assert wakeups is not None and wakeups.queues == {HTTP_QUEUE}
    owners = [c.job.owner for c in rig.claim([HTTP_QUEUE], runs_max=4)]
    assert sorted(owners) == [OWNER, OWNER, OTHER, OTHER] and owners[0] != owners[1]


def test_a_repeating_job_claims_its_next_slot_in_the_same_command(rig):
    body_s = 10
    news = [rig.jobs.new_job(OWNER, JobCreate(target="queue:work", schedule=ScheduleIn(every_s=body_s)), rig.now_ms,
                             from_msgpack=False, job_id=ids.job_ids_from_int(rig.now_ms, 999, 1)[0])]
    [created] = rig.commit(CreateJobs(rig.now_ms, news))  # type: ignore[misc]
    job_id = created.job.id
    rig.advance(body_s)
    rig.tick()
    [first] = rig.claim()
    assert first.run.nominal_ms == T0_MS + 10_000
    rig.advance(body_s)
    rig.tick()
    [second] = rig.claim()
    assert second.run.nominal_ms == T0_MS + 20_000 and second.run.job_id == job_id


def _scripted(path: str, seed: int) -> tuple[list[bytes], dict[str, int]]:
    """A seeded mix of creates, claims, heartbeats, results, releases and
    clock steps (wall and monotonic apart), invariants checked after each."""
    rng = random.Random(seed)
    rig = Rig(path)
    rig.core.limits_of = lambda owner: OwnerLimits(runs_in_flight_max=4, claims_per_s=20, claim_burst=5)
    held: list[ClaimedRun] = []
    try:
        for _ in range(300):
            action = rng.random()
            owner = rng.choice((OWNER, OTHER))
            if action < 0.2:
                offsets = [rng.choice((0, 0.5, 3, 40)) for _ in range(rng.randint(1, 5))]
                for offset in offsets:
                    rig.create(owner=owner, at_s=(rig.now_ms - T0_MS) / 1000 + offset, lease_s=rng.choice((5, 30)),
                               retry=RetryIn(max_attempts=3, backoff_s=[1]))
            elif action < 0.45:
                held += rig.claim([f"{owner}\x00work"], runs_max=rng.randint(1, 4), worker=f"w{rng.randint(1, 3)}")
            elif action < 0.6 and held:
                one = held[rng.randrange(len(held))]
                try:
                    rig.core.heartbeat(one.job.owner, run_id(one), one.run.attempt, rig.now_ms, rig.mono_s)
                except errors.StaleAttempt:
                    held.remove(one)
            elif action < 0.75 and held:
                one = held.pop(rng.randrange(len(held)))
                rig.report(one, ok=rng.random() < 0.7, owner=one.job.owner)
            elif action < 0.78 and held:
                rig.core.release([held.pop()], rig.mono_s)
            elif action < 0.9:
                rig.advance(rng.choice((0.01, 0.1, 1, 7)), wall_ms=rng.choice((0, 0, 0, 2000)))
                rig.tick()
            else:
                rig.expire()
            rig.core.take_wakeups()
            rig.check()
        return rig.commands, dict(rig.core.counters)
    finally:
        rig.close()


def test_the_same_inputs_give_the_same_commands(tmp_path):
    first = _scripted(str(tmp_path / "a"), 7)
    second = _scripted(str(tmp_path / "b"), 7)
    assert first == second
    counters = first[1]
    assert counters["claimed"] > 20 and counters["expired"] > 0 and counters["undelivered"] > 0


def test_the_ahead_queue_drops_the_runs_due_by_an_instant_and_keeps_the_later() -> None:
    from tempo.engine.dispatch_state import AheadQueue

    waiting = AheadQueue()
    for due_ms, key in [(10, b"a"), (20, b"b"), (30, b"c"), (40, b"d")]:
        waiting.add((due_ms, key))
    waiting.add((15, b"late"))  # made later, due before the last one: the heap
    waiting.add((35, b"late2"))
    waiting.drop_due(20)
    assert waiting.head() == (30, b"c")
    assert list(waiting.in_order) == [(30, b"c"), (40, b"d")] and waiting.late == [(35, b"late2")]
    waiting.drop_due(40)
    assert waiting.head() is None
    waiting.add((50, b"e"))
    waiting.drop_due(49)
    assert waiting.head() == (50, b"e")
    # Due at one instant, in whatever key order they come: all in the
    # deque, none in the heap (a spike's runs).
    for key in (b"z", b"m", b"a"):
        waiting.add((60, key))
    assert len(waiting.in_order) == 4 and not waiting.late
    waiting.add((55, b"y"))
    waiting.drop_due(60)
    assert waiting.head() is None


def test_the_ahead_sweep_leaves_no_run_that_fell_due(rig):
    """A spike's runs, created within the pre-dispatch horizon, sit in their
    queue's ahead queue; once they fall due the sweep drops them all, and a
    claim that looks ahead finds none of them there."""
    rig.create(count=50, at_s=5)
    rig.tick()
    assert len(rig.core.ahead[QUEUE].in_order) == 50
    rig.now_ms = T0_MS + 5_000 + limits.lease_check_ms
    rig.tick()
    assert QUEUE not in rig.core.ahead
    assert rig.core.ahead_head(QUEUE, rig.now_ms + limits.claim_ahead_ms_max) is None
