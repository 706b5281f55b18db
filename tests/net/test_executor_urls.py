"""The HTTP executor: a target its client cannot parse fails the attempt,
never the node (a job stored before the create check refused such URLs)."""

import httpx

from tempo.engine.dispatch import ClaimedRun
from tempo.engine.records import Job, Run, Schedule
from tempo.net.executor import HttpExecutor

JOB_ID = "j_01H0000000000000000000000A"


class _Reports:
    def __init__(self) -> None:
        self.results = []

    async def report(self, owner, results):
        self.results += results
        return [None] * len(results)


async def test_an_unparsable_url_fails_the_attempt():
    job = Job(JOB_ID, "default", None, "http://a\x1fb/", None, Schedule(at_ms=0), 4, (10,), 60, 0, "active",
              0, None, 0, 0)
    reports = _Reports()
    executor = HttpExecutor(reports)  # type: ignore[arg-type] - only report() is used
    executor.in_flight = 1
    async with httpx.AsyncClient() as client:
        await executor._deliver(client, ClaimedRun(Run(JOB_ID, 0, 0, "claimed", attempt=1), job))
    [result] = reports.results
    assert not result.ok and result.attempt == 1
    assert result.error.startswith("InvalidURL")
    assert executor.in_flight == 0
