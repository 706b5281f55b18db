"""The notifier's bounds on a virtual clock (net/notify.py, limits.py
"Notifications"): tries and back-off, notices given up and counted, a share
of the slots per host, a bounded queue per host, and a cursor that never
passes a notice still in flight."""

import itertools
from dataclasses import dataclass, field

import httpx
import trio

from tempo import limits
from tempo.config import NotifyConfig, NotifyTarget
from tempo.engine.commands import NotifyCursor
from tempo.engine.records import Event, Job, Notify, Schedule
from tempo.net.notify import Notifier, signature

SECRET = "k" * 32
NOW_MS = 1_800_000_000_000
JOB = "j_" + "0" * 26


@dataclass
class FakeStore:
    """The store's reads the notifier makes, over a list of events."""

    events: list[tuple[str, int, Event]] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)
    cursor: int | None = None

    def add(self, job_id: str, kind: str = "run.failed", owner: str = "acme") -> int:
        seq = len(self.events) + 1
        self.events.append((owner, seq, Event(kind, NOW_MS, job_id, None, {})))
        return seq

    def notify_cursor(self) -> int | None:
        return self.cursor

    def event_seq(self) -> int:
        return len(self.events)

    def events_of_all(self, after_seq: int, limit: int) -> list[tuple[str, int, Event]]:
        return [e for e in self.events if e[1] > after_seq][:limit]

    def get_job_any(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)


@dataclass
class FakeLog:
    cursors: list[int] = field(default_factory=list)

    async def submit(self, command: NotifyCursor) -> None:
        self.cursors.append(command.seq)


def job(job_id: str, url: str) -> Job:
    return Job(job_id, "acme", None, "queue:q", None, Schedule(at_ms=NOW_MS), 1, (0,), 60, 0, "active", NOW_MS,
               None, None, None, Notify(url, ("run.failed",)))


def job_id(n: int) -> str:
    return "j_" + f"{n:026d}"


@dataclass
class Net:
    """Endpoints by host: `stuck` hosts never answer until `unstuck` is set;
    `fail_first` answers 500 to that many requests first."""

    stuck: set[str] = field(default_factory=set)
    slow_s: float = 0.0  # how long every answer takes
    fail_first: int = 0
    unstuck: trio.Event = field(default_factory=trio.Event)
    requests: list[tuple[float, str, httpx.Request]] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)
    in_flight_max: dict[str, int] = field(default_factory=dict)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.requests.append((trio.current_time(), host, request))
        self.in_flight[host] = self.in_flight.get(host, 0) + 1
        self.in_flight_max[host] = max(self.in_flight_max.get(host, 0), self.in_flight[host])
        try:
            await trio.sleep(self.slow_s)
            if host in self.stuck:
                await self.unstuck.wait()
            if self.fail_first > 0:
                self.fail_first -= 1
                return httpx.Response(500)
            return httpx.Response(204)
        finally:
            self.in_flight[host] -= 1

    def at(self, host: str) -> list[httpx.Request]:
        return [r for _, h, r in self.requests if h == host]


def notifier(store: FakeStore, log: FakeLog, net: Net, owners: dict[str, NotifyTarget] | None = None) -> Notifier:
    return Notifier(store, log, NotifyConfig(SECRET, None, owners or {}),  # type: ignore[arg-type] - fakes
                    now_ms=lambda: NOW_MS, transport=httpx.MockTransport(net.handle))


async def test_a_500_is_tried_again_after_the_back_off_then_given_up(autojump_clock: trio.abc.Clock) -> None:
    store, log, net = FakeStore(cursor=0), FakeLog(), Net(fail_first=2)
    store.jobs[JOB] = job(JOB, "https://a.example/hook")
    store.add(JOB)
    sender = notifier(store, log, net)
    async with trio.open_nursery() as nursery:
        await nursery.start(sender.run)
        await trio.sleep(30)
        times = [t for t, _, _ in net.requests]
        assert len(times) == 3 and sender.counts.sent == 1 and sender.counts.retries == 2
        # Gaps of 1 s and 2 s, as limits.notify_backoff_s says.
        assert [round(b - a) for a, b in itertools.pairwise(times)] == [1, 2]
        # Each try signed anew, over the same body.
        for _, _, request in net.requests:
            assert request.headers["tempo-signature"] == signature(SECRET, NOW_MS // 1000, request.content)
        assert log.cursors[-1] == 1
        # A notice whose every try fails is given up, and the cursor passes it.
        net.fail_first = limits.notify_attempts_max
        store.add(JOB)
        await trio.sleep(limits.notify_notice_s_max + 5)
        assert sender.counts.dropped == 1 and len(net.requests) == 3 + limits.notify_attempts_max
        assert log.cursors[-1] == 2
        nursery.cancel_scope.cancel()


async def test_a_stuck_host_holds_its_own_share_only(autojump_clock: trio.abc.Clock) -> None:
    store, log, net = FakeStore(cursor=0), FakeLog(), Net(stuck={"stuck.example"})
    stuck_count = limits.notify_host_pending_max + 50
    for n in range(stuck_count):
        store.jobs[job_id(n)] = job(job_id(n), "https://stuck.example/hook")
        store.add(job_id(n))
    store.jobs[job_id(9999)] = job(job_id(9999), "https://ok.example/hook")
    ok_seq = store.add(job_id(9999))
    sender = notifier(store, log, net)
    async with trio.open_nursery() as nursery:
        await nursery.start(sender.run)
        # The reader waits for room in the stuck host's queue until its
        # first tries time out; from then on it drops what does not fit.
        await trio.sleep(limits.notify_timeout_s + 5)
        # The other host's notice went out while the stuck host holds its share.
        assert [r.url.host for r in net.at("ok.example")] == ["ok.example"]
        assert net.in_flight_max["stuck.example"] == limits.notify_host_concurrency
        # Its queue is bounded: the notices past it were dropped at once, counted.
        assert sender.counts.dropped == stuck_count - limits.notify_host_pending_max
        # The cursor never passes a notice in flight.
        assert all(c == 0 for c in log.cursors) and sender.cursor() == 0
        net.unstuck.set()
        await trio.sleep(60)
        assert sender.counts.sent == limits.notify_host_pending_max + 1
        assert log.cursors[-1] == ok_seq
        nursery.cancel_scope.cancel()


async def test_the_owner_default_and_a_cursor_to_start_from(autojump_clock: trio.abc.Clock) -> None:
    store, log, net = FakeStore(), FakeLog(), Net()
    store.add(JOB)  # before notifications were on: sends nothing
    sender = notifier(store, log, net, {"acme": NotifyTarget("https://d.example/x", ("job.recovered",))})
    async with trio.open_nursery() as nursery:
        await nursery.start(sender.run)
        assert log.cursors == [1]
        store.add(JOB, "run.failed")  # not an event the default asks for
        store.add(JOB, "job.recovered")
        store.add(JOB, "job.recovered", owner="other")  # no default for this owner
        await trio.sleep(5)
        assert [r.url.host for r in net.at("d.example")] == ["d.example"] and log.cursors[-1] == 4
        nursery.cancel_scope.cancel()


async def test_a_slow_host_that_answers_loses_nothing(autojump_clock: trio.abc.Clock) -> None:
    store, log, net = FakeStore(cursor=0), FakeLog(), Net(slow_s=0.5)
    count = 3 * limits.notify_host_pending_max
    for n in range(count):
        store.jobs[job_id(n)] = job(job_id(n), "https://slow.example/hook")
        store.add(job_id(n))
    sender = notifier(store, log, net)
    async with trio.open_nursery() as nursery:
        await nursery.start(sender.run)
        await trio.sleep(count * 0.5 / limits.notify_host_concurrency + 5)
        # Its queue filled and the reader waited for room: nothing dropped.
        assert sender.counts.sent == count and sender.counts.dropped == 0
        assert net.in_flight_max["slow.example"] == limits.notify_host_concurrency
        assert log.cursors[-1] == count
        nursery.cancel_scope.cancel()
