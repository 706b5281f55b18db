"""The events notifications are derived from (docs/semantics.md
"Notifications"): `job.recovered` after runs that failed for good, never
after attempts that failed; the replicated notifier cursor; every owner's
events read in order; and the `notify` setting kept with the job."""

import json

import msgspec
import pytest

from tempo import errors, limits
from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    CreateJobs,
    NotifyCursor,
    ReportResults,
    Result,
    TriggerJob,
)
from tempo.engine.jobs import Jobs
from tempo.engine.records import Notify
from tempo.engine.store import Store
from tempo.schema import JobCreate

from .test_store import Log

T0 = 1_800_000_000_000


def _maker(enabled: bool = True) -> Jobs:
    maker = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
    maker.notify_enabled = enabled
    return maker


def new_job(owner: str, maker: Jobs | None = None, **fields):
    fields.setdefault("target", "queue:reports")
    fields.setdefault("schedule", {"at": "2030-01-01T00:00:00Z"})
    body = msgspec.json.decode(json.dumps(fields), type=JobCreate)
    return (maker or _maker()).new_job(owner, body, T0, from_msgpack=False)


def _run(log: Log, owner: str, job_id: str, at_ms: int, oks: list[bool]) -> None:
    """Triggers a run at `at_ms` and ends its attempts with `oks`."""
    [run] = [log.apply(TriggerJob(at_ms, owner, job_id))[0]]
    for attempt, ok in enumerate(oks, 1):
        now_ms = at_ms + attempt * 1000
        [claimed] = log.apply(ClaimRuns(now_ms, "w", [Claim(job_id, run.nominal_ms, now_ms + 60_000)]))[0]
        assert claimed is not None and claimed.attempt == attempt
        [ended] = log.apply(ReportResults(now_ms, owner, [Result(job_id, run.nominal_ms, attempt, ok, None,
                                                                  None if ok else "boom")]))[0]
        assert not isinstance(ended, errors.TempoError)


def _types(store: Store, owner: str = "acme") -> list[tuple[str, dict]]:
    """The events of runs and outcomes: a job's audit trail (`job.created`)
    is tested in test_job_events.py."""
    return [(e.type, e.detail) for _, e in store.list_events(owner, 0, 100) if e.type != "job.created"]


def test_recovered_follows_runs_that_failed_for_good(store: Store) -> None:
    log = Log(store)
    made = new_job("acme", retry={"max_attempts": 2, "backoff_s": [0]})
    log.apply(CreateJobs(T0, [made]))
    job_id = made.job.id
    _run(log, "acme", job_id, T0 + 10_000, [False, True])  # an attempt failed, the run did not
    assert _types(store) == []
    _run(log, "acme", job_id, T0 + 20_000, [False, False])
    _run(log, "acme", job_id, T0 + 30_000, [False, False])
    assert store.get_job_any(job_id).failed_runs == 2
    _run(log, "acme", job_id, T0 + 40_000, [False, True])
    _run(log, "acme", job_id, T0 + 50_000, [True])
    assert _types(store) == [
        ("run.failed", {"attempt": 2, "error": "boom"}),
        ("run.failed", {"attempt": 2, "error": "boom"}),
        ("job.recovered", {"failed_runs": 2}),
    ]
    assert store.get_job_any(job_id).failed_runs == 0


def test_the_notifier_cursor_only_moves_forward(store: Store) -> None:
    log = Log(store)
    assert store.notify_cursor() is None
    log.apply(NotifyCursor(T0, 5))
    log.apply(NotifyCursor(T0, 3))  # a late commit of an old leader's cursor
    assert store.notify_cursor() == 5
    log.apply(NotifyCursor(T0, 9))
    assert store.notify_cursor() == 9


def test_events_of_all_owners_come_in_sequence_order(store: Store) -> None:
    log = Log(store)
    jobs = {owner: new_job(owner, retry={"max_attempts": 1, "backoff_s": [0]}) for owner in ("b", "a", "c")}
    log.apply(CreateJobs(T0, list(jobs.values())))
    order = ["c", "a", "b", "a", "c", "b"]
    for i, owner in enumerate(order):
        _run(log, owner, jobs[owner].job.id, T0 + (i + 1) * 10_000, [False])
    # The first three events are the jobs' `job.created`, in the command's order.
    found = store.events_of_all(0, 100)
    assert [owner for owner, _, _ in found] == ["b", "a", "c", *order]
    assert [seq for _, seq, _ in found] == list(range(1, 10)) and store.event_seq() == 9
    assert [owner for owner, _, _ in store.events_of_all(5, 3)] == order[2:5]
    assert store.events_of_all(9, 100) == []


def test_notify_is_kept_with_the_job_and_hashed_with_its_body(store: Store) -> None:
    log = Log(store)
    made = new_job("acme", request_key="k", notify={"url": "https://h.example/x", "events": ["job.recovered"] * 2})
    log.apply(CreateJobs(T0, [made]))
    assert store.get_job_any(made.job.id).notify == Notify("https://h.example/x", ("job.recovered",))
    plain = new_job("acme", request_key="k")
    assert plain.body_hash != made.body_hash
    assert new_job("acme", request_key="k").body_hash == plain.body_hash


@pytest.mark.parametrize(("notify", "loc"), [
    ({"url": "gopher://x"}, "notify.url"),
    ({"url": "https://h/\u00e9"}, "notify.url"),
    ({"url": "https://h/a b"}, "notify.url"),
])
def test_a_bad_url_is_refused_at_notify_url(notify: dict, loc: str) -> None:
    with pytest.raises(errors.Invalid) as raised:
        new_job("acme", notify=notify)
    assert [loc for loc, _ in raised.value.errors] == [loc]


def test_notify_without_notifications_on_is_refused_at_notify() -> None:
    with pytest.raises(errors.Invalid) as raised:
        new_job("acme", _maker(enabled=False), notify={"url": "https://h.example/x"})
    assert [loc for loc, _ in raised.value.errors] == ["notify"]


def test_the_bounds_relate() -> None:
    assert limits.notify_notice_s_max <= 120.0
    assert limits.notify_host_concurrency < limits.notify_concurrency
