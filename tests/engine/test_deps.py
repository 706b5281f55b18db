"""Dependencies in apply (docs/semantics.md "Dependencies"): a dependent
job's runs made by its parents' ends in the commit that records them,
fan-in and fan-out, `on`, `within_s`, pause, `max_runs`, the graph's
rules (no cycle, even from two racing patches; no delete from under a
dependent; another owner's job is no parent), and what the views read."""

import json

import msgspec
import pytest
import trio

from tempo import clock, errors, ids, limits
from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    Command,
    CreateJobs,
    DeleteJob,
    PauseJob,
    ReportResults,
    Result,
    decode_entry,
    encode_entry,
)
from tempo.engine.jobs import Jobs
from tempo.engine.plan import catch_up
from tempo.engine.records import Job, Run
from tempo.engine.store import Store
from tempo.engine.tables import deps as table
from tempo.schema import JobCreate

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
MIN = 60_000


class _World:
    """A store, the Jobs service on a clock the test sets, and a log that
    applies each command at once (and keeps it, for a replay)."""

    def __init__(self, store: Store):
        self.store = store
        self.index = 0
        self.now_ms = T0
        self.jobs = Jobs(store, self, now_ms=lambda: self.now_ms)  # type: ignore[arg-type] - commits itself
        self.log: list[bytes] = []

    def apply(self, *commands: Command) -> list[object]:
        self.index += 1
        self.log.append(encode_entry(list(commands)))
        outcomes, _ = self.store.apply_commands(self.index, list(commands))
        return outcomes

    async def submit(self, command: Command) -> object:
        return self.apply(command)[0]

    def made(self, owner: str = OWNER, **fields: object) -> Job | errors.TempoError:
        item = self.jobs.new_job(owner, _body(**fields), self.now_ms, from_msgpack=False)
        [[created]] = self.apply(CreateJobs(self.now_ms, [item]))
        return created if isinstance(created, errors.TempoError) else created.job

    def create(self, owner: str = OWNER, **fields: object) -> Job:
        job = self.made(owner, **fields)
        assert isinstance(job, Job), job
        return job

    def one_off(self, owner: str = OWNER, **fields: object) -> Job:
        return self.create(owner, schedule={"at": clock.iso_from_ms(self.now_ms)}, **fields)

    def after(self, *parents: Job, **spec: object) -> Job:
        return self.create(schedule={"after": {"jobs": [p.id for p in parents], **spec}})

    def job(self, job: Job, owner: str = OWNER) -> Job:
        return self.store.get_job(owner, job.id)

    def open_runs(self, job: Job, status: str = "waiting") -> list[Run]:
        found = self.store.list_runs(OWNER, job.id, since_ms=None, until_ms=None, limit=1000, cursor_ms=None)[0]
        return sorted((r for r in found if r.status == status), key=lambda r: r.nominal_ms)

    def end(self, job: Job, ok: bool = True, owner: str = OWNER) -> Run:
        """Claims the job's oldest waiting run now and reports its result."""
        [run] = self.open_runs(job)[:1]
        claim = Claim(job.id, run.nominal_ms, self.now_ms + MIN)
        job = self.job(job, owner)
        if job.state == "active" and job.slot_ms == run.nominal_ms and job.schedule.repeating:
            nxt = catch_up(job, run.nominal_ms, self.now_ms)
            if nxt is not None:
                claim.next_slot_ms, claim.next_due_ms = nxt.slot_ms, nxt.due_ms
        [[claimed]] = self.apply(ClaimRuns(self.now_ms, "w1", [claim]))
        assert isinstance(claimed, Run), claimed
        result = Result(job.id, run.nominal_ms, claimed.attempt, ok)
        [[ended]] = self.apply(ReportResults(self.now_ms, owner, [result]))
        assert isinstance(ended, Run)
        return ended

    def run(self, call):  # type: ignore[no-untyped-def]
        async def go():  # type: ignore[no-untyped-def]
            return await call

        return trio.run(go)


def _body(**fields: object) -> JobCreate:
    fields.setdefault("target", "queue:q")
    fields.setdefault("schedule", {"every_s": 60})
    return msgspec.json.decode(json.dumps(fields), type=JobCreate)


@pytest.fixture
def world(store: Store) -> _World:
    return _World(store)


# -- runs made by ends ----------------------------------------------------------------


def test_a_chain_runs_each_job_after_the_one_before(world: _World) -> None:
    a = world.one_off()
    b = world.after(a)
    c = world.after(b)
    assert world.job(b).state == "active" and world.job(b).next_run_at_ms is None
    assert world.open_runs(b) == [] and world.open_runs(c) == []
    world.now_ms += 1000
    a_run = world.end(a)
    [b_run] = world.open_runs(b)
    assert b_run.due_ms == world.now_ms and world.open_runs(c) == []
    causes = world.store.caused_by(b.id, b_run.nominal_ms)
    assert [(x.job_id, x.nominal_ms, x.attempt, x.status) for x in causes] == [(a.id, a_run.nominal_ms, 1, "done")]
    world.now_ms += 1000
    world.end(b)
    [c_run] = world.open_runs(c)
    assert world.store.caused_by(c.id, c_run.nominal_ms)[0].job_id == b.id
    events = [e for _, e in world.store.list_events(OWNER, 0, 100) if e.type == "run.caused"]
    assert [e.job_id for e in events] == [b.id, c.id]
    assert events[0].detail["caused_by"][0]["run_id"] == ids.run_id(a.id, a_run.nominal_ms)


def test_on_failed_counts_only_the_last_attempt(world: _World) -> None:
    a = world.one_off(retry={"max_attempts": 2, "backoff_s": [0]})
    on_fail = world.after(a, on="failed")
    on_ok = world.after(a)
    either = world.after(a, on="finished")
    ended = world.end(a, ok=False)
    assert ended.status == "waiting"  # its retry: no end yet
    assert world.open_runs(on_fail) == [] and world.open_runs(either) == []
    ended = world.end(a, ok=False)
    assert ended.status == "failed"
    assert len(world.open_runs(on_fail)) == 1 and len(world.open_runs(either)) == 1
    assert world.open_runs(on_ok) == []
    [cause] = world.store.caused_by(on_fail.id, world.open_runs(on_fail)[0].nominal_ms)
    assert (cause.status, cause.attempt) == ("failed", 2)


def test_fan_in_all_makes_one_run_per_complete_set_and_any_one_per_end(world: _World) -> None:
    a, b = world.one_off(), world.one_off()
    both = world.after(a, b)
    anyone = world.after(a, b, all=False)
    world.end(a)
    assert world.open_runs(both) == [] and len(world.open_runs(anyone)) == 1
    world.end(b)
    assert len(world.open_runs(both)) == 1 and len(world.open_runs(anyone)) == 2
    [run] = world.open_runs(both)
    assert [x.job_id for x in world.store.caused_by(both.id, run.nominal_ms)] == [a.id, b.id]
    # The set was used: a new one needs both ends again.
    assert world.store.deps_state(both.id).ends == []  # type: ignore[union-attr]
    # Two runs of one job made on one millisecond take two slots.
    assert len({r.nominal_ms for r in world.open_runs(anyone)}) == 2


def test_each_parent_end_is_used_once_and_the_latest_is_kept(world: _World) -> None:
    a = world.create(schedule={"every_s": 60})
    b = world.one_off()
    both = world.after(a, b)
    world.apply(*[])  # an empty entry changes nothing
    for _ in range(2):
        world.now_ms += MIN
        world.end(a)
    state = world.store.deps_state(both.id)
    assert state is not None and len(state.ends) == 1 and state.ends[0].ended_ms == world.now_ms
    world.end(b)
    assert len(world.open_runs(both)) == 1


def test_within_s_drops_an_end_too_old_when_the_last_arrives(world: _World) -> None:
    a = world.create(schedule={"every_s": 60})
    b = world.create(schedule={"every_s": 60})
    both = world.after(a, b, within_s=90)
    world.now_ms += MIN
    world.end(a)
    world.now_ms += 2 * MIN
    world.end(b)  # a's end is 120 s old: no longer counts
    assert world.open_runs(both) == []
    world.end(a)
    assert len(world.open_runs(both)) == 1


def test_a_cancelled_or_skipped_parent_end_never_counts(world: _World) -> None:
    a = world.one_off()
    child = world.after(a, on="finished")
    world.apply(PauseJob(world.now_ms, OWNER, a.id))  # cancels a's waiting run
    assert world.open_runs(child) == []


def test_a_paused_dependent_records_the_end_as_a_missed_slot(world: _World) -> None:
    a = world.one_off()
    child = world.after(a)
    world.apply(PauseJob(world.now_ms, OWNER, child.id))
    world.end(a)
    assert world.open_runs(child) == []
    [missed] = world.open_runs(child, "missed")
    assert missed.reason == "paused" and missed.nominal_ms == world.now_ms
    world.run(world.jobs.resume(OWNER, child.id))
    assert world.job(child).state == "active" and world.open_runs(child) == []


def test_max_runs_bounds_the_runs_made_and_completes_the_job(world: _World) -> None:
    a = world.create(schedule={"every_s": 60})
    child = world.create(schedule={"after": {"jobs": [a.id], "all": False}, "max_runs": 1})
    world.now_ms += MIN
    world.end(a)
    assert len(world.open_runs(child)) == 1
    world.now_ms += MIN
    world.end(a)
    assert len(world.open_runs(child)) == 1
    world.end(child)
    assert world.job(child).state == "completed"


def test_jitter_is_fixed_by_the_run_id(world: _World) -> None:
    a = world.one_off()
    child = world.create(schedule={"after": {"jobs": [a.id]}}, jitter_s=30)
    world.end(a)
    [run] = world.open_runs(child)
    assert run.due_ms == run.nominal_ms + ids.jitter_ms(ids.run_id(child.id, run.nominal_ms), 30)


# -- the graph's rules ------------------------------------------------------------------


def test_a_parent_must_be_a_job_of_the_same_owner(world: _World) -> None:
    theirs = world.one_off(owner="other")
    missing = "j_" + "0" * (ids.JOB_ID_CHARS - 2)
    for parent in (theirs.id, missing):
        fault = world.made(schedule={"after": {"jobs": [parent]}})
        assert isinstance(fault, errors.Invalid)
        assert fault.errors == [("schedule.after.jobs", f"no job {parent}")]  # the same words: nothing told


def test_a_patch_that_closes_a_cycle_is_refused_naming_it(world: _World) -> None:
    a = world.create(schedule={"every_s": 60})
    b = world.after(a)
    c = world.after(b)
    with pytest.raises(errors.Invalid) as caught:
        world.run(world.jobs.patch(world.job(a), _body(schedule={"after": {"jobs": [c.id]}}), from_msgpack=False))
    assert caught.value.errors[0][0] == "schedule.after.jobs"
    assert f"{a.id} -> {b.id} -> {c.id} -> {a.id}" in caught.value.errors[0][1]
    assert world.job(a).schedule.every_s == 60


def test_two_racing_patches_cannot_close_a_cycle(world: _World) -> None:
    a = world.create(schedule={"every_s": 60})
    b = world.create(schedule={"every_s": 60})
    # Both made from the jobs as read before either applied, then logged in one entry.
    to_b = world.jobs.new_job(OWNER, _body(schedule={"after": {"jobs": [b.id]}}), world.now_ms, from_msgpack=False)
    to_a = world.jobs.new_job(OWNER, _body(schedule={"after": {"jobs": [a.id]}}), world.now_ms, from_msgpack=False)
    from tempo.engine.commands import PatchJob

    first = PatchJob(world.now_ms, OWNER, a.id, 1, to_b.job, True, None, None, True, True, to_b.deps)
    second = PatchJob(world.now_ms, OWNER, b.id, 1, to_a.job, True, None, None, True, True, to_a.deps)
    ok, refused = world.apply(first, second)
    assert isinstance(ok, Job)
    assert isinstance(refused, errors.Invalid) and "cycle" in refused.errors[0][1]
    assert world.job(b).schedule.every_s == 60 and world.store.deps_state(b.id) is None


def test_a_job_cannot_depend_on_itself_nor_name_a_parent_twice(world: _World) -> None:
    a = world.create(schedule={"every_s": 60})
    with pytest.raises(errors.Invalid) as caught:
        world.run(world.jobs.patch(world.job(a), _body(schedule={"after": {"jobs": [a.id]}}), from_msgpack=False))
    assert "itself" in caught.value.errors[0][1]
    with pytest.raises(errors.Invalid) as twice:
        world.jobs.new_job(OWNER, _body(schedule={"after": {"jobs": [a.id, a.id]}}), world.now_ms, from_msgpack=False)
    assert twice.value.errors == [("schedule.after.jobs", "names a job twice")]
    with pytest.raises(errors.Invalid) as loose:
        world.jobs.new_job(OWNER, _body(schedule={"after": {"jobs": [a.id], "all": False, "within_s": 5}}),
                           world.now_ms, from_msgpack=False)
    assert loose.value.errors[0][0] == "schedule.after.within_s"
    with pytest.raises(errors.Invalid) as catching_up:
        world.jobs.new_job(OWNER, _body(schedule={"after": {"jobs": [a.id]}}, catchup={"policy": "all"}),
                           world.now_ms, from_msgpack=False)
    assert catching_up.value.errors[0][0] == "catchup"


def test_delete_of_a_job_with_dependents_is_refused_naming_them(world: _World) -> None:
    a = world.one_off()
    b = world.after(a)
    [fault] = world.apply(DeleteJob(world.now_ms, OWNER, a.id))
    assert isinstance(fault, errors.HasDependents) and b.id in fault.detail
    assert world.job(a).id == a.id
    assert world.apply(DeleteJob(world.now_ms, OWNER, b.id)) == [None]
    assert world.store.deps_views([a.id, b.id]) == {}
    assert world.apply(DeleteJob(world.now_ms, OWNER, a.id)) == [None]


def test_a_patch_moves_the_edges_and_a_clock_schedule_drops_them(world: _World) -> None:
    a, b = world.one_off(), world.one_off()
    child = world.after(a)
    patched = world.run(world.jobs.patch(world.job(child), _body(schedule={"after": {"jobs": [b.id]}}), from_msgpack=False))
    assert isinstance(patched, Job)
    views = world.store.deps_views([a.id, b.id])
    assert a.id not in views and views[b.id][1:] == ([child.id], 1)
    world.run(world.jobs.patch(world.job(child), _body(schedule={"every_s": 60}), from_msgpack=False))
    assert world.store.deps_views([b.id, child.id]) == {}
    assert world.job(child).slot_ms is not None


def test_a_parent_has_at_most_the_named_number_of_dependents(world: _World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "deps_dependents_max", 2)
    a = world.one_off()
    world.after(a)
    world.after(a)
    fault = world.made(schedule={"after": {"jobs": [a.id]}})
    assert isinstance(fault, errors.Invalid) and "2 dependents" in fault.errors[0][1]


def test_the_graph_answers_edges_up_and_down_to_a_depth(world: _World) -> None:
    a = world.one_off()
    b = world.after(a)
    c = world.after(b)
    up, down, cut = world.store.deps_graph(OWNER, b.id, 1)
    assert (up, down, cut) == ([(a.id, b.id)], [(b.id, c.id)], False)
    up, down, _ = world.store.deps_graph(OWNER, c.id, 2)
    assert up == [(b.id, c.id), (a.id, b.id)] and down == []
    with pytest.raises(errors.NotFound):
        world.store.deps_graph("other", c.id, 1)


# -- cost and determinism ----------------------------------------------------------------


def test_a_job_without_dependents_costs_one_lookup_and_leaves_the_table_empty(world: _World) -> None:
    a = world.one_off()
    world.end(a)
    with world.store.env.begin() as txn:
        assert txn.stat(world.store.db["deps"])["entries"] == 0
        from tempo.engine.tables.reads import Reads

        assert not table.has_dependents(Reads(txn, world.store.db, world.store.buckets), a.id[2:].encode())


def test_a_replay_of_the_log_gives_the_same_tables(world: _World, tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = world.one_off(), world.one_off()
    both = world.after(a, b)
    world.after(a, b, all=False)
    world.end(a)
    world.end(b)
    world.end(both)
    again = Store(str(tmp_path / "again"), map_bytes=64 << 20)
    try:
        for n, data in enumerate(world.log, 1):
            again.apply_commands(n, decode_entry(data))
        assert again.digest()[1] == world.store.digest()[1]
    finally:
        again.close()


# -- the gate on a clock schedule ----------------------------------------------------------


def _claim_slot(world: _World, job: Job) -> Run | None:
    """The claim of the job's slot run now, with the next slot planned as
    the dispatcher plans it; None when apply held it back."""
    job = world.job(job)
    assert job.slot_ms is not None
    claim = Claim(job.id, job.slot_ms, world.now_ms + MIN)
    nxt = catch_up(job, job.slot_ms, world.now_ms)
    if nxt is not None:
        claim.next_slot_ms, claim.next_due_ms = nxt.slot_ms, nxt.due_ms
    [[claimed]] = world.apply(ClaimRuns(world.now_ms, "w1", [claim]))
    return claimed  # type: ignore[return-value]


def _gated(world: _World, parent: Job, **gate: object) -> Job:
    return world.create(schedule={"every_s": 60, "requires": {"jobs": [parent.id], **gate}})


def test_a_gate_without_its_parents_end_skips_the_slot_naming_them(world: _World) -> None:
    parent = world.create(schedule={"every_s": 3600})
    gated = _gated(world, parent)
    slot = world.job(gated).slot_ms
    assert slot is not None
    world.now_ms = slot
    assert _claim_slot(world, gated) is None
    [skipped] = world.open_runs(gated, "skipped")
    assert (skipped.nominal_ms, skipped.reason) == (slot, "dependency") and parent.id in (skipped.error or "")
    [event] = [e for _, e in world.store.list_events(OWNER, 0, 100) if e.type == "run.skipped"]
    assert event.detail == {"reason": "dependency", "missing": [parent.id]}
    assert world.job(gated).slot_ms == slot + MIN  # the schedule went on
    assert len(world.open_runs(gated)) == 1


def test_a_gate_passes_with_an_end_within_within_s_and_not_with_an_older_one(world: _World) -> None:
    parent = world.one_off()
    gated = _gated(world, parent, within_s=90)
    world.end(parent)
    world.now_ms = world.job(gated).slot_ms  # type: ignore[assignment]
    assert isinstance(_claim_slot(world, gated), Run)  # the end was 60 s before the slot
    world.now_ms = world.job(gated).slot_ms  # type: ignore[assignment]
    assert _claim_slot(world, gated) is None  # 120 s: too old
    assert [r.reason for r in world.open_runs(gated, "skipped")] == ["dependency"]


def test_a_gated_slot_waits_for_its_parent_and_runs_when_it_ends(world: _World) -> None:
    parent = world.create(schedule={"every_s": 3600})
    gated = _gated(world, parent, wait_s=600)
    slot = world.job(gated).slot_ms
    assert slot is not None
    world.now_ms = slot
    assert _claim_slot(world, gated) is None
    [held] = world.open_runs(gated)
    assert (held.nominal_ms, held.due_ms) == (slot, slot + 600_000)
    world.now_ms = slot + 5 * MIN
    world.apply(ClaimRuns(world.now_ms, "w1", []))
    world.run(world.jobs.trigger(OWNER, parent.id))
    world.end(parent)
    [due] = world.open_runs(gated)
    assert due.due_ms == world.now_ms
    claimed = _claim_slot(world, gated)
    assert isinstance(claimed, Run) and claimed.nominal_ms == slot
    assert world.store.deps_state(gated.id).waiting_slot_ms is None  # type: ignore[union-attr]


def test_a_gated_slot_that_waited_in_vain_is_skipped_at_its_deadline(world: _World) -> None:
    parent = world.create(schedule={"every_s": 3600})
    gated = _gated(world, parent, wait_s=600)
    slot = world.job(gated).slot_ms
    assert slot is not None
    world.now_ms = slot
    assert _claim_slot(world, gated) is None
    world.now_ms = slot + 600_000
    held = world.open_runs(gated)[0]
    claim = Claim(gated.id, held.nominal_ms, world.now_ms + MIN)
    [[answer]] = world.apply(ClaimRuns(world.now_ms, "w1", [claim]))
    assert answer is None
    assert [r.nominal_ms for r in world.open_runs(gated, "skipped")] == [slot]


def test_requires_goes_only_with_a_clock_schedule(world: _World) -> None:
    parent = world.one_off()
    with pytest.raises(errors.Invalid) as caught:
        world.jobs.new_job(OWNER, _body(schedule={"at": "2030-01-01T00:00:00Z", "requires": {"jobs": [parent.id]}}),
                           world.now_ms, from_msgpack=False)
    assert caught.value.errors[0][0] == "schedule.requires"
    gated = _gated(world, parent)
    with pytest.raises(errors.Invalid) as cycle:
        world.run(world.jobs.patch(world.job(parent), _body(schedule={"every_s": 60, "requires": {"jobs": [gated.id]}}),
                                   from_msgpack=False))
    assert cycle.value.errors[0][0] == "schedule.requires.jobs" and "cycle" in cycle.value.errors[0][1]


def test_edges_made_in_the_entry_that_reports_the_parents_end_count(world: _World) -> None:
    """The check that the `deps` table holds a row is read once per
    transaction: an edge made by an earlier command of the same entry
    (after a result that read it empty) is seen by a later result."""
    other, parent = world.one_off(), world.one_off()
    runs = []
    for job in (other, parent):
        [run] = world.open_runs(job)
        [[claimed]] = world.apply(ClaimRuns(world.now_ms, "w1", [Claim(job.id, run.nominal_ms, world.now_ms + MIN)]))
        runs.append(claimed)
    child = world.jobs.new_job(OWNER, _body(schedule={"after": {"jobs": [parent.id]}}), world.now_ms, from_msgpack=False)
    world.apply(
        ReportResults(world.now_ms, OWNER, [Result(other.id, runs[0].nominal_ms, 1, True)]),
        CreateJobs(world.now_ms, [child]),
        ReportResults(world.now_ms, OWNER, [Result(parent.id, runs[1].nominal_ms, 1, True)]),
    )
    assert len(world.open_runs(child.job)) == 1


def test_caused_by_stays_as_long_as_its_run_can_be_read_and_goes_with_its_job(world: _World) -> None:
    """A run's `caused_by` is kept while the run is open, and then while
    its history row is (the day it finished): a run made on day D that
    ends on D+2 still shows it after day D's history is dropped."""
    from tempo.engine.commands import DropHistory

    a = world.one_off()
    child = world.after(a, on="finished")
    world.end(a)
    [run] = world.open_runs(child)
    assert world.store.caused_by(child.id, run.nominal_ms)
    day = run.nominal_ms // limits.day_ms
    world.apply(DropHistory(world.now_ms, day))  # the days before it: the row stays
    assert world.store.caused_by(child.id, run.nominal_ms)
    world.now_ms += 2 * limits.day_ms
    world.apply(DropHistory(world.now_ms, day + 1))  # its day goes; the run still waits
    assert world.store.caused_by(child.id, run.nominal_ms)
    world.end(child)  # finished on day D+2: in that day's history
    world.apply(DropHistory(world.now_ms, day + 2))
    assert world.store.get_run_any(child.id, run.nominal_ms) is not None
    assert world.store.caused_by(child.id, run.nominal_ms)
    world.apply(DropHistory(world.now_ms, day + 3))  # the run's own history goes: so does its cause
    assert world.store.caused_by(child.id, run.nominal_ms) == []
    # A job's rows go with it, on every day.
    b = world.one_off()
    other = world.after(b, all=False)
    world.end(b)
    world.run(world.jobs.trigger(OWNER, b.id))
    world.now_ms += limits.day_ms
    world.end(b)
    assert len(world.open_runs(other)) == 2
    assert all(world.store.caused_by(other.id, r.nominal_ms) for r in world.open_runs(other))
    assert world.apply(DeleteJob(world.now_ms, OWNER, other.id)) == [None]
    with world.store.env.begin() as txn:
        rows = [key for key, _ in txn.cursor(db=world.store.db["deps"]) if key.startswith(table.CAUSE)]
    assert rows == []


def test_a_dependents_runs_obey_its_overlap_policy(world: _World) -> None:
    a = world.create(schedule={"every_s": 60})
    child = world.create(schedule={"after": {"jobs": [a.id], "all": False}}, overlap="skip")
    world.now_ms += MIN
    world.end(a)
    [first] = world.open_runs(child)
    [[claimed]] = world.apply(ClaimRuns(world.now_ms, "w1", [Claim(child.id, first.nominal_ms, world.now_ms + MIN)]))
    assert isinstance(claimed, Run)
    world.now_ms += MIN
    world.end(a)
    [second] = world.open_runs(child)
    [[held]] = world.apply(ClaimRuns(world.now_ms, "w1", [Claim(child.id, second.nominal_ms, world.now_ms + MIN)]))
    assert held is None
    assert [r.reason for r in world.open_runs(child, "skipped")] == ["overlap"]


def test_a_slot_run_its_overlap_policy_buffered_is_gated_when_released(world: _World) -> None:
    """The dispatcher's `OverlapRuns` buffers a gated job's slot run
    before any claim looked at the gate; released later, its claim is
    gated as the slot's first claim would have been."""
    from tempo.engine.commands import OverlapRuns

    parent = world.create(schedule={"every_s": 3600})
    gated = world.create(schedule={"every_s": 60, "requires": {"jobs": [parent.id], "within_s": 60}},
                         overlap="buffer_one")
    slot1 = world.job(gated).slot_ms
    assert slot1 is not None
    world.now_ms = slot1 - 10_000
    world.run(world.jobs.trigger(OWNER, parent.id))
    world.end(parent)  # 10 s before slot 1, 70 s before slot 2: too old for it
    world.now_ms = slot1
    first = _claim_slot(world, gated)
    assert isinstance(first, Run)
    slot2 = world.job(gated).slot_ms
    assert slot2 == slot1 + MIN
    world.now_ms = slot2
    job = world.job(gated)
    nxt = catch_up(job, slot2, world.now_ms)
    assert nxt is not None
    [[goes]] = world.apply(OverlapRuns(world.now_ms, [Claim(gated.id, slot2, world.now_ms + MIN, nxt.slot_ms, nxt.due_ms)]))
    assert goes is False  # buffered behind slot 1's run
    world.now_ms += 5_000
    [[ended]] = world.apply(ReportResults(world.now_ms, OWNER, [Result(gated.id, slot1, 1, True)]))
    assert isinstance(ended, Run)
    released = [r for r in world.open_runs(gated) if r.nominal_ms == slot2]
    assert released and released[0].due_ms == world.now_ms
    [[held]] = world.apply(ClaimRuns(world.now_ms, "w1", [Claim(gated.id, slot2, world.now_ms + MIN)]))
    assert held is None
    assert [r.nominal_ms for r in world.open_runs(gated, "skipped") if r.reason == "dependency"] == [slot2]


def test_an_end_at_already_past_at_create_is_refused_as_for_a_clock_schedule(world: _World) -> None:
    """A job whose `end_at` is past when it is created would never run:
    `400` at `schedule.end_at`, for a dependent job as for a cron one. A
    future `end_at` is taken; a patch to a past one completes the job."""
    parent = world.one_off()
    past = clock.iso_from_ms(world.now_ms - MIN)
    for sched in ({"cron": "0 6 * * *", "end_at": past}, {"after": {"jobs": [parent.id]}, "end_at": past}):
        with pytest.raises(errors.Invalid) as caught:
            world.jobs.new_job(OWNER, _body(schedule=sched), world.now_ms, from_msgpack=False)
        assert caught.value.errors[0][0] == "schedule.end_at", sched
    child = world.create(schedule={"after": {"jobs": [parent.id]}, "end_at": clock.iso_from_ms(world.now_ms + MIN)})
    assert world.job(child).state == "active"
    for sched in ({"cron": "0 6 * * *", "end_at": past}, {"after": {"jobs": [parent.id]}, "end_at": past}):
        job = world.create(schedule={k: v for k, v in sched.items() if k != "end_at"})
        patched = world.run(world.jobs.patch(world.job(job), _body(schedule=sched), from_msgpack=False))
        assert patched.state == "completed", sched
    assert world.store.job_counts(OWNER)["completed"] == 2
    world.end(parent)  # the completed dependent makes no run
    assert world.open_runs(job) == []


def test_a_completed_dependent_patched_active_again_is_counted_active(world: _World) -> None:
    """A patch that makes a completed dependent job active again moves it
    between the counts by state (`GET /v1/jobs/counts`)."""
    parent = world.one_off()
    child = world.create(schedule={"after": {"jobs": [parent.id]}, "max_runs": 1})
    world.end(parent)
    world.end(child)
    assert world.job(child).state == "completed"
    before = world.store.job_counts(OWNER)
    patched = world.run(world.jobs.patch(
        world.job(child), _body(schedule={"after": {"jobs": [parent.id]}, "max_runs": 2}), from_msgpack=False))
    assert patched.state == "active"
    after = world.store.job_counts(OWNER)
    assert (after["active"], after["completed"]) == (before["active"] + 1, before["completed"] - 1)
