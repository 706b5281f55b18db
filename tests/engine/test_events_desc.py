"""The events feed newest first (`Store.list_events_desc`): the same
events as the feed oldest first, in reverse, paged by a cursor below which
the next page starts; one owner's or every owner's; one job's, reading a
bounded number of events a page."""

import pytest

from tempo import limits
from tempo.engine.commands import CreateJobs, PauseJob
from tempo.engine.jobs import Jobs
from tempo.engine.store import Store

from .test_store import T0, Log, body


def _fill(store: Store) -> dict[str, list[str]]:
    """Jobs of two owners, made and paused in turn over several entries
    and three days (so three history buckets): their IDs by owner."""
    log = Log(store)
    maker = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
    made: dict[str, list[str]] = {"acme": [], "globex": []}
    for n in range(12):
        owner = "acme" if n % 3 else "globex"
        at_ms = T0 + n + n // 4 * limits.day_ms
        new = maker.new_job(owner, body(schedule={"every_s": 60}), at_ms, from_msgpack=False)
        log.apply(CreateJobs(at_ms, [new]))
        log.apply(PauseJob(at_ms, owner, new.job.id))
        made[owner].append(new.job.id)
    return made


def _pages(store: Store, owner: str | None, limit: int, job_id: str | None = None) -> tuple[list[int], int]:
    """Every page newest first, followed by its cursor: the sequences, and how many pages."""
    seqs: list[int] = []
    before, pages = None, 0
    while True:
        found, before = store.list_events_desc(owner, before, limit, job_id)
        pages += 1
        seqs += [seq for _, seq, _ in found]
        if before is None:
            return seqs, pages


def test_newest_first_is_the_feed_in_reverse_for_an_owner_and_for_all(store: Store) -> None:
    _fill(store)
    assert len(store.history_days()) == 3
    for owner in ("acme", "globex"):
        oldest_first = [seq for seq, _ in store.list_events(owner, 0, 1000)]
        assert len(oldest_first) >= 8
        assert _pages(store, owner, 5)[0] == oldest_first[::-1]
    everyone = [seq for _, seq, _ in store.events_of_all(0, 1000)]
    assert _pages(store, None, 7)[0] == everyone[::-1]
    found, _ = store.list_events_desc(None, None, 3)
    assert [who for who, _, _ in found] and all(who in ("acme", "globex") for who, _, _ in found)
    newest, before = store.list_events_desc("acme", None, 1)
    assert before == newest[0][1] and newest[0][2].type == "job.paused"


def test_one_jobs_events_are_found_past_others_with_a_bounded_read(store: Store, monkeypatch) -> None:
    made = _fill(store)
    first = made["acme"][0]  # its events are the oldest of acme's
    wanted = [seq for seq, e in store.list_events("acme", 0, 1000) if e.job_id == first][::-1]
    assert len(wanted) == 2  # created, paused
    assert _pages(store, "acme", 100, first)[0] == wanted
    monkeypatch.setattr(limits, "events_filter_rows_max", 3)
    seqs, pages = _pages(store, "acme", 100, first)
    assert seqs == wanted and pages > 3  # short pages, each with the cursor where its read stopped
    assert _pages(store, "globex", 100, first)[0] == []  # another owner's job: nothing


@pytest.mark.parametrize("owner", ["acme", None])
def test_an_empty_store_has_no_events_either_way(store: Store, owner: str | None) -> None:
    assert store.list_events_desc(owner, None, 10) == ([], None)
