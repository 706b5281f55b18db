"""The jobs-by-label index (engine/tables/writes.py `relabel`): apply keeps it exact
through creates, patches and deletes, a store without it builds it when it
opens, and a listing by labels answers what a scan of every job answers."""

import json
from pathlib import Path

import hypothesis.strategies as st
import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings

from tempo import errors, limits
from tempo.engine.commands import Command, CreateJobs, DeleteJob
from tempo.engine.jobs import Jobs
from tempo.engine.records import Job
from tempo.engine.store import Store
from tempo.schema import JobCreate

from .store_hooks import forget_label_index
from .test_store import Log

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z


class _Committer:
    def __init__(self, log: Log):
        self.log = log

    async def submit(self, command: Command) -> object:
        return self.log.apply(command)[0]


def _body(**fields: object) -> JobCreate:
    fields.setdefault("target", "queue:reports")
    fields.setdefault("schedule", {"every_s": 60})
    return msgspec.json.decode(json.dumps(fields), type=JobCreate)


class World:
    """A store, the jobs service over it, and a clock that ticks per command."""

    def __init__(self, store: Store):
        self.store = store
        self.log = Log(store)
        self.now = T0
        self.jobs = Jobs(store, _Committer(self.log), now_ms=self.tick)  # type: ignore[arg-type] - the log commits

    def tick(self) -> int:
        self.now += 1
        return self.now

    def create(self, owner: str, labels: dict[str, str] | None) -> Job:
        async def go() -> list:
            return await self.jobs.create(owner, [_body(labels=labels)], from_msgpack=False)

        [outcome] = trio.run(go)
        assert not isinstance(outcome, errors.TempoError)
        return outcome.job

    def patch(self, job: Job, labels: dict[str, str] | None) -> Job:
        current = self.store.get_job(job.owner, job.id)

        async def go() -> Job:
            return await self.jobs.patch(current, _body(labels=labels), from_msgpack=False)

        return trio.run(go)

    def delete(self, job: Job) -> None:
        assert self.log.apply(DeleteJob(self.tick(), job.owner, job.id)) == [None]

    def listed(self, owner: str | None, labels: list[tuple[str, str]], limit: int = 3) -> list[str]:
        """Every page of the listing, followed by its cursor."""
        ids: list[str] = []
        cursor = None
        while True:
            if owner is None:
                page, cursor = self.store.list_all_jobs(limit, cursor, None, labels)
            else:
                page, cursor = self.store.list_jobs(owner, limit, cursor, None, labels)
            ids += [j.id for j in page]
            if cursor is None:
                return ids

    def scanned(self, owner: str | None, labels: list[tuple[str, str]]) -> list[str]:
        """The same listing from every job, without the index."""
        everyone, _ = self.store.list_all_jobs(100_000, None)
        return [
            j.id for j in everyone
            if (owner is None or j.owner == owner) and all((j.labels or {}).get(k) == v for k, v in labels)
        ]

    def index_rows(self) -> list[tuple[bytes, bytes]]:
        return self.store.dump()["jobs_by_label"]


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def test_a_job_keeps_its_labels_sorted_and_lists_by_them(world: World) -> None:
    a = world.create("acme", {"team": "payments", "env": "prod"})
    b = world.create("acme", {"team": "payments"})
    world.create("acme", {"team": "search"})
    world.create("acme", None)
    assert list(world.store.get_job("acme", a.id).labels or {}) == ["env", "team"]
    assert world.listed("acme", [("team", "payments")]) == [b.id, a.id]
    assert world.listed("acme", [("team", "payments"), ("env", "prod")]) == [a.id]
    assert world.listed("acme", [("env", "prod"), ("team", "search")]) == []
    assert world.listed("acme", [("team", "payments"), ("team", "search")]) == []
    assert world.listed("acme", [("team", "nobody")]) == []
    assert len(world.index_rows()) == 4


def test_owners_are_kept_apart_and_an_admin_sees_them_all(world: World) -> None:
    a = world.create("acme", {"team": "payments"})
    g = world.create("globex", {"team": "payments"})
    assert world.listed("acme", [("team", "payments")]) == [a.id]
    assert world.listed("globex", [("team", "payments")]) == [g.id]
    assert world.listed(None, [("team", "payments")]) == [g.id, a.id]


def test_a_patch_moves_the_index_rows_and_a_delete_drops_them(world: World) -> None:
    job = world.create("acme", {"team": "payments", "env": "prod"})
    job = world.patch(job, {"team": "search", "env": "prod"})
    assert world.listed("acme", [("team", "payments")]) == []
    assert world.listed("acme", [("team", "search")]) == [job.id]
    assert world.listed("acme", [("env", "prod")]) == [job.id]
    job = world.patch(job, None)
    assert job.labels is None and world.index_rows() == []
    job = world.patch(job, {"tier": "gold"})
    assert world.listed("acme", [("tier", "gold")]) == [job.id]
    world.delete(job)
    assert world.index_rows() == [] and world.listed("acme", [("tier", "gold")]) == []


def test_a_filter_reads_only_the_labelled_jobs(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page of a rare label among many jobs of the owner reads the jobs
    that carry it only: with the row bound of a filter at 10 rows, a scan
    of the owner's jobs would end its first page after 10 jobs, empty."""
    rare = world.create("acme", {"rare": "yes"})
    items = [world.jobs.new_job("acme", _body(), world.tick(), from_msgpack=False) for _ in range(50)]
    world.log.apply(CreateJobs(world.tick(), items))
    monkeypatch.setattr(limits, "jobs_filter_rows_max", 10)
    page, cursor = world.store.list_jobs("acme", 1, None, None, [("rare", "yes")])
    assert [j.id for j in page] == [rare.id] and cursor is None
    scanned, _ = world.store.list_jobs("acme", 1, None, lambda j: j.labels is not None)
    assert scanned == []  # the bound this index is there to avoid


def test_a_store_without_the_index_builds_it_when_it_opens(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s"), map_bytes=64 << 20)
    world = World(store)
    for k in range(20):
        world.create(f"owner-{k % 3}", {"team": f"t{k % 4}", "k": str(k)} if k % 5 else None)
    kept = world.index_rows()
    assert len(kept) == 2 * 16
    forget_label_index(store)
    assert store.dump()["jobs_by_label"] == []
    store.close()
    reopened = Store(str(tmp_path / "s"), map_bytes=64 << 20)
    try:
        assert reopened.dump()["jobs_by_label"] == kept
    finally:
        reopened.close()


def test_a_replica_fed_the_same_entries_holds_the_same_index(world: World, two_stores: list[Store]) -> None:
    job = world.create("acme", {"team": "payments"})
    world.patch(job, {"team": "search"})
    world.create("globex", {"a": "b", "c": "d"})
    replica = two_stores[0]
    for index, data in enumerate(world.log.entries, start=1):
        replica.apply_entry(index, data)
    assert replica.dump()["jobs_by_label"] == world.index_rows()
    assert replica.digest()[1] == world.store.digest()[1]


# -- against a scan -----------------------------------------------------------------

_OWNERS = ("acme", "globex")
_KEYS = ("team", "env", "tier")
_VALUES = ("a", "b", "")
labels_st = st.none() | st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(_VALUES), max_size=3)
step_st = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(_OWNERS), labels_st),
    st.tuples(st.just("patch"), st.integers(0, 50), labels_st),
    st.tuples(st.just("delete"), st.integers(0, 50), st.none()),
)
filter_st = st.lists(st.tuples(st.sampled_from(_KEYS), st.sampled_from(_VALUES)), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step_st, min_size=1, max_size=25), filters=st.lists(filter_st, min_size=1, max_size=4))
def test_a_listing_by_labels_is_what_a_scan_finds(tmp_path_factory: pytest.TempPathFactory, steps, filters) -> None:
    store = Store(str(tmp_path_factory.mktemp("prop") / "s"), map_bytes=64 << 20)
    try:
        world = World(store)
        alive: list[Job] = []
        for kind, arg, labels in steps:
            if kind == "create":
                alive.append(world.create(arg, labels))
            elif alive and kind == "patch":
                at = arg % len(alive)
                alive[at] = world.patch(alive[at], labels)
            elif alive:
                world.delete(alive.pop(arg % len(alive)))
        wanted_rows = sum(len(j.labels or {}) for j in alive)
        assert len(world.index_rows()) == wanted_rows
        for labels in filters:
            for owner in (*_OWNERS, None):
                assert world.listed(owner, labels, limit=2) == world.scanned(owner, labels)
    finally:
        store.close()


def test_a_snapshot_of_a_version_without_the_index_gets_it_built(world: World, two_stores: list[Store]) -> None:
    world.create("acme", {"team": "payments"})
    world.create("globex", {"team": "payments", "env": "prod"})
    index, data = world.store.snapshot_data()
    tables = msgspec.msgpack.decode(data)
    older = [
        [name, [row for row in rows if name != "meta" or row[0] != b"label_index"]]
        for name, rows in tables
        if name != "jobs_by_label"  # that version had no such table
    ]
    replica = two_stores[0]
    replica.write(lambda txn: replica.restore_in(txn, index, msgspec.msgpack.encode(older)))
    assert replica.digest() == world.store.digest()
    assert replica.list_all_jobs(10, None, None, [("team", "payments")])[0] != []
