"""A claim committed for a client that has gone by the time its answer is
sent gives its runs back at once (docs/api.md "Claims and disconnects").

The window between the commit and the send is a few milliseconds on a real
server, so this drives the ASGI app in one process: the client's disconnect
is delivered the moment the claim's commit is done."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import trio

from tempo import errors
from tempo.engine.commands import ClaimRuns
from tempo.engine.commit import Committer
from tempo.engine.dispatch import Dispatcher
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store
from tempo.net.api import Api
from tempo.node import Standalone
from tempo.schema import JobCreate, ScheduleIn

QUEUE = "work"
DUE = datetime(2026, 1, 1, tzinfo=UTC)  # in the past: due at once
SETTLE_S = 3.0  # far below the lease of 60 s


class App:
    def __init__(self, path: Path):
        self.store = Store(str(path))
        self.committer = Committer(self.store)
        self.jobs = Jobs(self.store, self.committer)
        self.dispatcher = Dispatcher(self.store, self.committer)
        self.api = Api(self.store, self.jobs, self.dispatcher, node=Standalone(self.store.applied_index))
        self.claim_committed = trio.Event()
        submit = self.committer.submit

        async def noting_claims(command):
            outcome = await submit(command)
            if isinstance(command, ClaimRuns):
                self.claim_committed.set()
            return outcome

        self.committer.submit = noting_claims  # type: ignore[method-assign]

    async def claim(self, worker: str, *, leaves_after_commit: bool) -> list[dict]:
        """POST /v1/claim; answers the messages the app sent."""
        body = json.dumps({"worker": worker, "queues": [QUEUE], "wait_s": 1}).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[dict] = []

        async def receive() -> dict:
            if messages:
                return messages.pop(0)
            if leaves_after_commit:
                await self.claim_committed.wait()
                return {"type": "http.disconnect"}
            await trio.sleep_forever()

        async def send(message: dict) -> None:
            await trio.lowlevel.checkpoint()
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/v1/claim", "headers": [(b"content-type", b"application/json")]}
        await self.api(scope, receive, send)
        return sent


@pytest.fixture
async def app(tmp_path):
    made = App(tmp_path / "data")
    async with trio.open_nursery() as nursery:
        await nursery.start(made.committer.run)
        await nursery.start(made.dispatcher.run)
        yield made
        nursery.cancel_scope.cancel()
    made.store.close()


async def one_job(app: App) -> str:
    [created] = await app.jobs.create(
        "default", [JobCreate(target=f"queue:{QUEUE}", schedule=ScheduleIn(at=DUE))], from_msgpack=False
    )
    assert not isinstance(created, errors.TempoError), created
    return created.job.id


async def status_within(app: App, job_id: str, status: str, timeout_s: float):
    with trio.move_on_after(timeout_s):
        while True:
            run = app.store.get_run_any(job_id, int(DUE.timestamp() * 1000))
            if run.status == status:
                return run
            await trio.sleep(0.02)
    raise AssertionError(f"the run is {run.status}, not {status}, after {timeout_s} s")


async def test_a_claim_whose_client_left_after_the_commit_gives_its_run_back(app):
    job_id = await one_job(app)
    sent = await app.claim("gone", leaves_after_commit=True)
    assert app.claim_committed.is_set()
    assert not any(m["type"] == "http.response.body" for m in sent), "an answer went to nobody"
    run = await status_within(app, job_id, "waiting", SETTLE_S)
    assert run.attempt == 1
    assert app.dispatcher.core.counters["undelivered"] == 1
    metrics = (await app.api.metrics(None)).body.decode()  # type: ignore[arg-type]
    assert "\ntempo_runs_undelivered_total 1\n" in metrics
    # A live worker gets it at once, as the next attempt.
    app.claim_committed = trio.Event()
    sent = await app.claim("live", leaves_after_commit=False)
    [answer] = [m for m in sent if m["type"] == "http.response.body"]
    [claimed] = json.loads(answer["body"])["runs"]
    assert (claimed["job_id"], claimed["worker"], claimed["attempt"]) == (job_id, "live", 2)


async def test_a_delivered_claim_keeps_its_run(app):
    job_id = await one_job(app)
    sent = await app.claim("live", leaves_after_commit=False)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    await trio.sleep(0.5)
    run = await status_within(app, job_id, "claimed", 0.1)
    assert run.worker == "live" and run.attempt == 1
    assert app.dispatcher.core.counters["undelivered"] == 0
