"""A claim's retry that reaches the leader while the first claim with the
same key is still being committed (docs/semantics.md "Idempotent claims"):
apply decides, from the replicated state, that whichever of the two commits
second takes nothing; both answer the runs of the first, and the runs the
second had picked go back to the ready queue."""

from datetime import UTC, datetime

import trio

from tempo import errors
from tempo.engine.commands import ClaimKey, ClaimRuns
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.request_checks import queues_hash
from tempo.engine.store import Store
from tempo.schema import JobCreate, ScheduleIn

OWNER = "default"
QUEUE = f"{OWNER}\x00work"
PAST = datetime(2026, 1, 1, tzinfo=UTC)


def slots(claimed) -> list[tuple[str, int, int]]:
    return sorted((c.run.job_id, c.run.nominal_ms, c.run.attempt) for c in claimed)


async def test_the_second_commit_of_a_key_takes_nothing_and_gives_its_runs_back(tmp_path):
    store = Store(str(tmp_path / "data"))
    committer = Committer(store)
    jobs = Jobs(store, committer)
    dispatcher = Dispatcher(store, committer)
    held = trio.Event()
    first_in = trio.Event()
    submit = committer.submit

    async def holding_the_first_claim(command):
        if isinstance(command, ClaimRuns) and not first_in.is_set():
            first_in.set()
            await held.wait()
        return await submit(command)

    committer.submit = holding_the_first_claim  # type: ignore[method-assign]
    key = ClaimKey(OWNER, "k-1", queues_hash(["work"]))
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        await nursery.start(dispatcher.run)
        made = await jobs.create(
            OWNER, [JobCreate(target="queue:work", schedule=ScheduleIn(at=PAST)) for _ in range(4)], from_msgpack=False
        )
        assert not any(isinstance(m, errors.TempoError) for m in made)
        with trio.fail_after(5):
            while dispatcher.core.ready_count() < 4:
                await trio.sleep(0.01)
        answers: dict[str, list] = {}

        async def claim(name: str) -> None:
            answers[name] = await dispatcher.claim([QUEUE], "w1", 2, 0, key)

        nursery.start_soon(claim, "first")
        await first_in.wait()
        # The retry: nothing recorded yet, so it takes two other runs and
        # commits first; then the first claim's command is committed.
        await claim("retry")
        held.set()
        with trio.fail_after(5):
            while "first" not in answers:
                await trio.sleep(0.01)
        assert len(answers["retry"]) == 2
        assert slots(answers["first"]) == slots(answers["retry"])
        # The first claim's own picks are waiting, back in the ready queue.
        rest = await dispatcher.claim([QUEUE], "w2", 10, 1)
        assert len(rest) == 2 and not set(slots(rest)) & set(slots(answers["retry"]))
        assert {c.run.attempt for c in rest} == {1}
        nursery.cancel_scope.cancel()
    store.close()
