"""Claims before results (docs/semantics.md "Claims before results";
engine/commit.py `Committer.claims_first`, engine/commandlog.py
`Intake.take`): on a node alone, while workers claim a backlog of due
runs, a batch takes the claims waiting ahead of the results that came
before them, for `limits.results_wait_for_claims_ms` at most at a
stretch. An expiry (or any other command) never passes a result that
came before it.

The finding: in a spike of 25,000 runs due at one instant, the claims of
the last runs waited behind the results of the first ones, batch after
batch, though a claim is what makes a run start on time."""

import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing

from tempo import clock, errors, limits
from tempo.engine.claim_backlog import ClaimBacklog
from tempo.engine.commandlog import Intake
from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    Command,
    CreateJobs,
    ExpireLeases,
    Expiry,
    ReportResults,
    Result,
)
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.records import Run
from tempo.engine.storage_guard import StorageGuard
from tempo.engine.store import Store
from tempo.schema import JobCreate, ScheduleIn

T0 = 1_800_000_000_000
OWNER = "default"
QUEUE = f"{OWNER}\x00work"
HELD_MAX_S = limits.results_wait_for_claims_ms / 1000


def new_job(at_ms: int):
    body = {"target": "queue:work", "schedule": {"at": "2027-01-15T08:00:00Z"}}
    return Jobs(None, None).new_job(OWNER, msgspec.convert(body, JobCreate), at_ms, from_msgpack=False)  # type: ignore[arg-type]


JOB = new_job(T0).job.id


def create(at_ms: int) -> CreateJobs:
    return CreateJobs(at_ms, [new_job(at_ms)])


def claims(at_ms: int) -> ClaimRuns:
    return ClaimRuns(at_ms, "w", [Claim(JOB, T0, at_ms + 60_000, one_off=True)])


def results(at_ms: int) -> ReportResults:
    return ReportResults(at_ms, OWNER, [Result(JOB, T0, 1, True)])


def expiry(at_ms: int) -> ExpireLeases:
    return ExpireLeases(at_ms, [Expiry(JOB, T0, 1)])


def queued(commands: list[Command]) -> Intake:
    intake = Intake(StorageGuard(), lambda: None)
    for command in commands:
        intake.enqueue(command)
    return intake


def test_holding_results_lets_the_claims_after_them_go_and_keeps_the_rest_in_order() -> None:
    first, result, expired, claim, later, result2, claim2 = (
        create(T0), results(T0 + 1), expiry(T0 + 2), claims(T0 + 3), create(T0 + 4), results(T0 + 5), claims(T0 + 6)
    )
    intake = queued([first, result, expired, claim, later, result2, claim2])
    batch = intake.take(100, hold_results=True)
    assert [command for command, _ in batch] == [first, claim, claim2]
    # The expiry stays behind the result before it: a result sent within
    # its lease is applied before an expiry the lease check made later.
    assert [command for command, _ in intake.pending] == [result, expired, later, result2]
    assert intake.results_left
    # Not held: the rest, in order.
    assert [command for command, _ in intake.take(100)] == [result, expired, later, result2]
    assert not intake.results_left and not intake.pending


def test_with_no_result_waiting_a_held_take_is_in_order() -> None:
    commands: list[Command] = [create(T0), claims(T0 + 1), expiry(T0 + 2), claims(T0 + 3)]
    intake = queued(commands)
    assert [command for command, _ in intake.take(100, hold_results=True)] == commands
    assert not intake.results_left


def test_a_held_take_keeps_to_the_batch_bound() -> None:
    first, result, claim, claim2 = create(T0), results(T0 + 1), claims(T0 + 2), claims(T0 + 3)
    intake = queued([first, result, claim, claim2])
    assert [command for command, _ in intake.take(2, hold_results=True)] == [first, claim]
    assert [command for command, _ in intake.pending] == [result, claim2]


@pytest.fixture
def store(tmp_path: Path):
    made = Store(str(tmp_path / "d"), map_bytes=64 << 20)
    yield made
    made.close()


class Backlog:
    """The dispatcher's `claim_backlog_until`, set by the test."""

    def __init__(self) -> None:
        self.until_s: float | None = None

    def __call__(self) -> float | None:
        return self.until_s


def recording(committer: Committer, monkeypatch: pytest.MonkeyPatch, gate: trio.Event) -> list[list[str]]:
    """The kinds of command of each batch the committer applies; the
    first batch waits for `gate`, so that what comes meanwhile waits."""
    batches: list[list[str]] = []
    apply = committer._apply

    async def recorded(index: int, commands: list[Command]):
        batches.append([type(command).__name__ for command in commands])
        if len(batches) == 1:
            await gate.wait()
        return await apply(index, commands)

    monkeypatch.setattr(committer, "_apply", recorded)
    return batches


async def submit_at(committer: Committer, command: Command, answered: dict[str, float]) -> None:
    await committer.submit(command)
    answered[type(command).__name__] = trio.current_time()


@pytest.mark.parametrize("backlogged", [True, False])
async def test_while_workers_claim_a_backlog_a_claim_commits_before_the_results_waiting(
    store, monkeypatch, autojump_clock, backlogged: bool
) -> None:
    committer = Committer(store)
    backlog = Backlog()
    committer.claims_first(backlog)
    gate = trio.Event()
    batches = recording(committer, monkeypatch, gate)
    answered: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        if backlogged:
            backlog.until_s = trio.current_time() + 60
        # No timer but the committer's: the mock clock moves only to its
        # deadline (a thread's apply does not move it).
        async with trio.open_nursery() as clients:
            clients.start_soon(submit_at, committer, create(T0), answered)
            await trio.testing.wait_all_tasks_blocked()
            clients.start_soon(submit_at, committer, results(T0 + 1), answered)
            await trio.testing.wait_all_tasks_blocked()
            clients.start_soon(submit_at, committer, claims(T0 + 2), answered)
            await trio.testing.wait_all_tasks_blocked()
            released_s = trio.current_time()
            gate.set()
        committer.close()
    if not backlogged:
        assert batches == [["CreateJobs"], ["ReportResults", "ClaimRuns"]]
        return
    assert batches == [["CreateJobs"], ["ClaimRuns"], ["ReportResults"]]
    # The results waited for claims that did not come, as long as they may.
    assert answered["ReportResults"] - released_s == pytest.approx(HELD_MAX_S, abs=0.05)


async def test_results_wait_for_claims_no_longer_than_the_backlog(store, autojump_clock) -> None:
    committer = Committer(store)
    backlog = Backlog()
    committer.claims_first(backlog)
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        started_s = trio.current_time()
        backlog.until_s = started_s + 0.2
        [outcome] = await committer.submit(results(T0))
        assert isinstance(outcome, errors.NotFound)
        assert trio.current_time() - started_s == pytest.approx(0.2, abs=0.02)
        committer.close()


async def test_a_backlog_that_never_ends_holds_results_for_the_bound_at_a_time(store, autojump_clock) -> None:
    committer = Committer(store)
    committer.claims_first(lambda: trio.current_time() + 60)
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        for _ in range(2):
            started_s = trio.current_time()
            await committer.submit(results(T0))
            assert trio.current_time() - started_s == pytest.approx(HELD_MAX_S, abs=0.02)
        committer.close()


async def test_closing_writes_the_results_that_wait_for_claims(store, autojump_clock) -> None:
    committer = Committer(store)
    committer.claims_first(lambda: trio.current_time() + 60)
    answered: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        nursery.start_soon(submit_at, committer, results(T0), answered)
        await trio.testing.wait_all_tasks_blocked()
        closed_s = trio.current_time()
        committer.close()
    assert answered["ReportResults"] - closed_s < HELD_MAX_S / 10


@pytest.fixture
def still_clock():
    """Trio time that stands still: the mark is read as it was set."""
    return trio.testing.MockClock(rate=0)


async def test_a_claim_that_leaves_runs_due_in_its_queue_marks_a_backlog(tmp_path, still_clock) -> None:
    store = Store(str(tmp_path / "data"))
    committer = Committer(store)
    jobs = Jobs(store, committer, now_ms=lambda: T0)
    dispatcher = Dispatcher(store, committer, now_ms=lambda: T0)
    body = JobCreate(target="queue:work", schedule=ScheduleIn(at=clock.datetime_from_ms(T0)))
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        await nursery.start(dispatcher.run)
        created = await jobs.create(OWNER, [body] * 3, from_msgpack=False)
        assert not any(isinstance(one, errors.TempoError) for one in created)
        assert dispatcher.claim_backlog_until() is None
        assert len(await dispatcher.claim([QUEUE], "w", 1, 0)) == 1
        marked_s = dispatcher.claim_backlog_until()
        assert marked_s is not None
        assert marked_s - trio.current_time() == limits.claim_backlog_gap_ms / 1000
        # A claim that takes the rest leaves none: no new mark.
        assert len(await dispatcher.claim([QUEUE], "w", 10, 0)) == 2
        assert dispatcher.claim_backlog_until() == marked_s
        nursery.cancel_scope.cancel()
    store.close()


# -- who claims a backlog (engine/claim_backlog.py) ---------------------------
#
# The finding (from outside, the simplest worker loop: claim 1,000, report
# them, claim again): each worker's results waited the whole gap after the
# last claim, though every worker was waiting for its own results' answer
# before it would claim again. A spike of 25,000 runs drained in 1.7-1.9 s
# where it drained in 1.3-1.5 s without the rule.

GAP_S = limits.claim_backlog_gap_ms / 1000


class Node:
    """A committer and a dispatcher wired as a node alone wires them
    (server.py `_serve_alone`), on `count` one-off runs due at T0."""

    def __init__(self, store: Store) -> None:
        self.committer = Committer(store)
        self.jobs = Jobs(store, self.committer, now_ms=lambda: T0)
        self.dispatcher = Dispatcher(store, self.committer, now_ms=lambda: T0)
        self.committer.claims_first(self.dispatcher.claim_backlog_until)

    async def start(self, nursery: trio.Nursery, count: int) -> None:
        await nursery.start(self.committer.run)
        await nursery.start(self.dispatcher.run)
        body = JobCreate(target="queue:work", schedule=ScheduleIn(at=clock.datetime_from_ms(T0)))
        created = await self.jobs.create(OWNER, [body] * count, from_msgpack=False)
        assert not any(isinstance(one, errors.TempoError) for one in created)

    async def claim_one(self, worker: str) -> Result:
        [claimed] = await self.dispatcher.claim([QUEUE], worker, 1, 0)
        run = claimed.run
        return Result(run.job_id, run.nominal_ms, run.attempt, True)

    async def report(self, result: Result, answered: list[float]) -> None:
        [outcome] = await self.dispatcher.report(OWNER, [result])
        assert isinstance(outcome, Run) and outcome.status == "done"
        answered.append(trio.current_time())


async def within(done: Callable[[], bool], real_s: float) -> bool:
    """Whether `done()` comes true within `real_s` of real time (the trio
    clock stands still: only apply's thread moves things on)."""
    deadline = time.monotonic() + real_s
    while not done() and time.monotonic() < deadline:
        await trio.to_thread.run_sync(time.sleep, 0.001)
    return done()


async def answered_within(answered: list[float], count: int, real_s: float) -> bool:
    return await within(lambda: len(answered) >= count, real_s)


async def test_a_worker_waiting_for_its_own_results_holds_them_back_no_longer(store, still_clock) -> None:
    node = Node(store)
    async with trio.open_nursery() as nursery:
        await node.start(nursery, 3)
        result = await node.claim_one("w")  # two runs left due: a backlog
        assert node.dispatcher.claim_backlog_until() is not None
        reported_s = trio.current_time()
        answered: list[float] = []
        nursery.start_soon(node.report, result, answered)
        # "w" claims again only once this is answered, and nobody else
        # claims: it goes at once, no trio time passing.
        assert await answered_within(answered, 1, 5.0)
        assert answered[0] == reported_s
        nursery.cancel_scope.cancel()


async def test_a_worker_seen_claiming_while_it_reports_is_waited_for(store, still_clock, monkeypatch) -> None:
    node = Node(store)
    async with trio.open_nursery() as nursery:
        await node.start(nursery, 4)
        first = await node.claim_one("w")
        # The next batch waits for the gate: "w" claims while its result waits.
        gate = trio.Event()
        apply = node.committer._apply

        async def gated(index: int, commands: list[Command]):
            await gate.wait()
            return await apply(index, commands)

        monkeypatch.setattr(node.committer, "_apply", gated)
        answered: list[float] = []
        nursery.start_soon(node.report, first, answered)
        await trio.testing.wait_all_tasks_blocked()
        claimed: list[Result] = []

        async def claim() -> None:
            claimed.append(await node.claim_one("w"))

        nursery.start_soon(claim)
        await trio.testing.wait_all_tasks_blocked()
        monkeypatch.setattr(node.committer, "_apply", apply)
        gate.set()
        assert await answered_within(answered, 1, 5.0)
        assert await within(lambda: bool(claimed), 5.0)
        # One run is left due after this claim: a backlog, and "w" may
        # claim it while this result waits, as it did before.
        second = await node.claim_one("w")
        nursery.start_soon(node.report, second, answered)
        assert not await answered_within(answered, 2, 0.3)
        still_clock.jump(GAP_S)
        assert await answered_within(answered, 2, 5.0)
        nursery.cancel_scope.cancel()


def test_the_backlog_is_the_last_mark_of_a_worker_that_may_claim_again() -> None:
    backlog = ClaimBacklog()
    assert backlog.until(0.0) is None
    backlog.mark("a", 1.0)
    backlog.mark("b", 1.05)
    assert backlog.until(1.06) == pytest.approx(1.05 + GAP_S)
    backlog.reporting("b")  # "b" waits for its results' answer
    assert backlog.until(1.06) == pytest.approx(1.0 + GAP_S)
    backlog.reporting("a")
    assert backlog.until(1.06) is None
    backlog.reported("a")
    assert backlog.until(1.06) == pytest.approx(1.0 + GAP_S)
    # Past the gap the mark is gone, whoever reports.
    backlog.reported("b")
    assert backlog.until(1.0 + GAP_S) == pytest.approx(1.05 + GAP_S)
    assert backlog.until(1.05 + GAP_S) is None
    assert not backlog._marked and not backlog._reporting


def test_a_worker_that_claimed_while_it_reported_counts_whenever_it_reports(monkeypatch) -> None:
    monkeypatch.setattr(limits, "claim_backlog_workers_kept_max", 2)
    backlog = ClaimBacklog()
    backlog.claiming("a")  # not reporting: nothing learnt
    for worker in ("a", "b", "c"):
        backlog.reporting(worker)
        backlog.claiming(worker)
        backlog.mark(worker, 1.0)
    # "a" was learnt first and forgotten first: the memory is bounded.
    assert list(backlog._claim_while_reporting) == ["b", "c"]
    assert backlog.until(1.0) == pytest.approx(1.0 + GAP_S)
    backlog.mark("a", 1.01)
    assert backlog.until(1.01) == pytest.approx(1.0 + GAP_S)  # "a" reports, and is no longer known to claim meanwhile


def test_marks_past_the_gap_go_even_if_nobody_asks(monkeypatch) -> None:
    monkeypatch.setattr(limits, "claim_backlog_workers_kept_max", 2)
    backlog = ClaimBacklog()
    for k in range(100):
        backlog.mark(f"w{k}", k * GAP_S)  # one each gap: the ones before are past
    assert len(backlog._marked) <= 3
