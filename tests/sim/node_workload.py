"""The clients of the whole-node simulator: what users ask of the cluster,
through the production `Jobs` (engine/jobs.py), so each request is
validated and planned as the API's are (net/jobs_api.py calls the same methods).

`Jobs` is a trio caller of its `CommandLog`: its methods await
`committer.submit`. Here its committer hands each command out of the
coroutine (`Submitted`, an awaitable that yields itself), the node submits
it to its replica, and the coroutine gets the answer when the replica
answers it, a step or more later: the simulator runs the coroutine by hand,
without trio's scheduler (`JobsCall`).

The mix (one seed's rates, drawn in `Params`): creates of one-offs, `every_s`
and cron jobs (some with a catch-up policy, some with an overlap policy,
`cancel_other` among them), and patch, delete, pause, resume, trigger,
cancel and backfill of them; dependents of them (`schedule.after`, a few
a run, which nothing changes: invariant 12); and linearizable reads (node_cluster.py
`SimNode.read`) at nodes that believe they lead. A request the cluster refuses (a validation
`400`, a `404` for a job deleted meanwhile, `409`) is an answer like any
other: the workload goes on.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from tempo import clock, errors, ids
from tempo.engine.commands import Command
from tempo.engine.records import Job
from tempo.engine.request_checks import stored_instant_ms
from tempo.engine.store import Created
from tempo.schema import BackfillIn, JobCreate

if TYPE_CHECKING:
    from .node_cluster import NodeSimulator, SimNode

OWNER = "o1"
# Repeating jobs per run at most: more would outrun the workers.
REPEATING_MAX = 4
# Dependent jobs per run at most, and the share of creates that make one.
DEPENDENTS_MAX = 3
DEPENDENT_SHARE = 0.15
# The share of repeating jobs with a gate (`schedule.requires`).
GATED_SHARE = 0.3
# The overlap policies a repeating job gets (invariant 6, node_invariants.py).
OVERLAPS: tuple[str | None, ...] = (None, "skip", "buffer_one", "buffer_all", "cancel_other")
_HOLDING = ("skip", "buffer_one", "buffer_all")
CATCHUPS: tuple[dict[str, Any] | None, ...] = (
    None, {"policy": "none"}, {"policy": "all", "max_runs": 2}, {"window_s": 0}, {"policy": "latest", "window_s": 5},
)
CRONS = (("* * * * *", "UTC"), ("*/2 * * * *", "Europe/Berlin"), ("30 * * * *", "America/New_York"))
# Backfills of ranges before 1970 (and in year 1) once made an entry that
# the followers could not decode (invariant 10 finds it when validation
# lets one through: `test_backfills_before_1970_are_refused`). Validation
# refuses them with a 400 (docs/api.md "Times"), which the workload takes
# as their answer; `before_1970_refused` asks the validation, so a build
# that lets them through runs them only when forced (`--before-1970`).
_YEAR_1_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Submitted:
    """A command `Jobs` awaits the answer of: the simulator submits it."""

    command: Command

    def __await__(self) -> Generator[Submitted, object, object]:
        answer = yield self
        return answer


class HandingCommitter:
    """The `CommandLog` a simulated node's `Jobs` (and its `Dispatcher`, for
    `report`) sees: `submit` hands the command out (`Submitted`); faults
    come back thrown into the coroutine (`SimNode.call`)."""

    def submit(self, command: Command) -> Submitted:
        return Submitted(command)


def _backfill_body(from_ms: int, until_ms: int) -> BackfillIn:
    """A backfill's body as the API decodes it (its validation included)."""
    return msgspec.convert({"from": _instant(from_ms), "until": _instant(until_ms)}, BackfillIn)


def before_1970_refused() -> bool:
    """Whether validation refuses a backfill before 1970 (its `from` and
    `until` are checked as stored instants, `backfill_range_ms`)."""
    try:
        body = _backfill_body(-120_000, -60_000)
        stored_instant_ms(body.from_, "from")
    except (msgspec.ValidationError, errors.TempoError):
        return True
    return False


def _instant(at_ms: int) -> datetime:
    """An instant as the API decodes one, before 1970 too (down to year 1)."""
    return _EPOCH + timedelta(milliseconds=at_ms)


class Workload:
    def __init__(self, sim: NodeSimulator, *, before_1970: bool | None = None) -> None:
        self.sim = sim
        # Backfills before 1970 and in year 1 among the ranges (None: once
        # validation refuses them, above).
        self.before_1970 = before_1970_refused() if before_1970 is None else before_1970
        self.rng: random.Random = sim.rng
        self.specs: dict[str, dict[str, Any]] = {}  # job ID -> its body as last asked for
        self.repeating = 0
        self.creates = 0
        # Dependent job ID -> its parents, `on` and `all` (invariant 12).
        self.dependents: dict[str, tuple[tuple[str, ...], str, bool]] = {}

    def step(self) -> None:
        rng, p = self.rng, self.sim.params
        if rng.random() < p.create_rate:
            self.create()
        if p.change_rate and rng.random() < p.change_rate and self.specs:
            rng.choice((self.pause, self.resume, self.patch, self.delete, self.trigger, self.cancel,
                        self.backfill))()
        if rng.random() < p.read_rate:
            self.read()

    # -- requests -------------------------------------------------------------------

    def create(self) -> None:
        sim, rng = self.sim, self.rng
        node = sim.leader_guess()
        if node is None:
            return
        if self.specs and len(self.dependents) < DEPENDENTS_MAX and rng.random() < DEPENDENT_SHARE:
            self.create_dependent(node)
            return
        repeating = rng.random() < sim.params.repeating_share and self.repeating < REPEATING_MAX
        body: dict[str, Any] = {"target": "queue:q", "lease_s": sim.params.lease_s}
        if repeating:
            self.repeating += 1
            if rng.random() < 0.3:
                cron, zone = rng.choice(CRONS)
                body["schedule"] = {"cron": cron, "timezone": zone}
            else:
                body["schedule"] = {"every_s": rng.choice((3, 5))}
            body["overlap"] = rng.choice(OVERLAPS)
            body["catchup"] = rng.choice(CATCHUPS)
            if self.specs and rng.random() < GATED_SHARE:
                # A gate on one of the workload's jobs (docs/semantics.md
                # "A gate on a clock schedule"): invariant 12 judges its slots.
                body["schedule"]["requires"] = {
                    "jobs": [rng.choice(sorted(self.specs))], "on": rng.choice(("succeeded", "finished")),
                    "wait_s": rng.choice((0, 2)), "within_s": rng.choice((None, 10)),
                }
            kind = "repeating"
        else:
            at_ms = node.now_ms() + rng.randint(-2_000, 6_000)
            body["schedule"] = {"at": clock.datetime_from_ms(at_ms)}
            kind = "one-off"
        # Labelled, so the replicas' digests cover the jobs-by-label index too.
        body["labels"] = {"kind": kind}
        self.creates += 1
        spec = msgspec.convert(body, JobCreate)
        wall_ms = node.wall_ms()

        def done(outcome: object) -> None:
            if isinstance(outcome, list) and isinstance(outcome[0], Created):
                job = outcome[0].job
                self.specs[job.id] = body
                sim.invariants.acknowledged(job)
                sim.invariants.stamped(node, f"created_at of {job.id}", job.created_at_ms, wall_ms)

        node.call(node.jobs.create(OWNER, [spec], from_msgpack=False), done, "create")

    def create_dependent(self, node: SimNode) -> None:
        """A job that runs after one or two of the workload's jobs
        (docs/semantics.md "Dependencies"); nothing changes it after."""
        rng = self.rng
        parents = tuple(rng.sample(sorted(self.specs), k=min(len(self.specs), rng.choice((1, 2)))))
        on, all_ = rng.choice(("succeeded", "failed", "finished")), rng.random() < 0.5
        body = {"target": "queue:q", "lease_s": self.sim.params.lease_s,
                "schedule": {"after": {"jobs": list(parents), "on": on, "all": all_}}}
        spec = msgspec.convert(body, JobCreate)

        def done(outcome: object) -> None:
            if isinstance(outcome, list) and isinstance(outcome[0], Created):
                job = outcome[0].job
                self.dependents[job.id] = (parents, on, all_)
                self.sim.invariants.acknowledged(job)

        node.call(node.jobs.create(OWNER, [spec], from_msgpack=False), done, "create dependent")

    def _job(self) -> tuple[SimNode, Job] | None:
        """A job the workload made, as the leader it asks has it."""
        node = self.sim.leader_guess()
        if node is None:
            return None
        assert node.store is not None
        job = node.store.get_job_any(self.rng.choice(sorted(self.specs)))
        return None if job is None else (node, job)

    def pause(self) -> None:
        if (found := self._job()) is not None:
            node, job = found
            node.call(node.jobs.pause(OWNER, job.id), self._changed, "pause")

    def resume(self) -> None:
        if (found := self._job()) is not None:
            node, job = found
            node.call(node.jobs.resume(OWNER, job.id), self._changed, "resume")

    def _changed(self, outcome: object) -> None:
        """The answer of a change: the job as changed, or a refusal."""
        _ignore(outcome)
        if isinstance(outcome, Job):
            self.sim.invariants.changed(outcome)

    def read(self) -> None:
        """A linearizable read (a `GET`) at a node that believes it leads:
        when two do, half the time the one in the older term, a leader
        deposed without knowing it (cut off by a partition, or paused)."""
        leaders = [n for n in self.sim.nodes.values() if n.leading()]
        if not leaders:
            return
        if len(leaders) > 1 and self.rng.random() < 0.5:
            node = min(leaders, key=lambda n: n.replica.term if n.replica is not None else 0)
        else:
            node = self.rng.choice(leaders)
        node.read(self.sim.invariants.read_begun(node))

    def trigger(self) -> None:
        if (found := self._job()) is not None:
            node, job = found
            node.call(node.jobs.trigger(OWNER, job.id), _ignore, "trigger")

    def delete(self) -> None:
        if (found := self._job()) is not None:
            node, job = found
            # Forgotten now: the delete may commit though its answer is lost.
            self.sim.invariants.deleting(job.id)
            self.specs.pop(job.id, None)

            def done(outcome: object) -> None:
                _ignore(outcome)
                if outcome is None:
                    self.sim.invariants.deleted(job.id)

            node.call(node.jobs.delete(OWNER, job.id), done, "delete")

    def cancel(self) -> None:
        """A cancel of the job's slot run (waiting or running)."""
        if (found := self._job()) is not None and found[1].slot_ms is not None:
            node, job = found
            assert job.slot_ms is not None
            node.call(node.jobs.cancel_run(OWNER, ids.run_id(job.id, job.slot_ms)), _ignore, "cancel")

    def patch(self) -> None:
        """A change of the schedule (every_s, cron, or a one-off's time), the
        overlap policy or the name: the job after the merge, as the API
        hands `Jobs.patch` its body."""
        if (found := self._job()) is None:
            return
        node, job = found
        rng = self.rng
        body = dict(self.specs[job.id])
        sched = body["schedule"]
        what = rng.choice(("schedule", "overlap", "name"))
        if what == "schedule" and "at" in sched:
            body["schedule"] = {"at": clock.datetime_from_ms(node.now_ms() + rng.randint(-1_000, 5_000))}
        elif what == "schedule":
            if rng.random() < 0.5:
                body["schedule"] = {"every_s": rng.choice((3, 4, 5))}
            else:
                cron, zone = rng.choice(CRONS)
                body["schedule"] = {"cron": cron, "timezone": zone}
        elif what == "overlap" and "at" not in sched:
            # Within its kind: the policy applies from the patch on
            # (docs/semantics.md "Changing a job"), so one that holds runs
            # back, given to a job with runs running, lets those run on, and
            # `buffer_one` given to a `buffer_all` job keeps the runs it
            # buffered: states invariant 6 does not model.
            old = body.get("overlap")
            holding = old in _HOLDING
            body["overlap"] = rng.choice([
                o for o in OVERLAPS if (o in _HOLDING) == holding and not (old == "buffer_all" and o == "buffer_one")
            ])
        else:
            body["name"] = f"n{rng.randint(0, 9)}"
        self.specs[job.id] = body
        spec = msgspec.convert(body, JobCreate)
        node.call(node.jobs.patch(job, spec, from_msgpack=False), self._changed, "patch")

    def backfill(self) -> None:
        """A backfill of a repeating job: of its recent past, or before
        1970 and in year 1 (refused by validation)."""
        if (found := self._job()) is None or not found[1].schedule.repeating:
            return
        node, job = found
        rng = self.rng
        now_ms = node.now_ms()
        ranges = [(job.created_at_ms - 20_000, min(now_ms, job.slot_ms or now_ms))]
        if self.before_1970:
            ranges += [(-120_000, 60_000), (-3_600_000, -60_000), (_YEAR_1_MS, _YEAR_1_MS + 300_000)]
        from_ms, until_ms = rng.choice(ranges)
        try:
            spec = _backfill_body(from_ms, until_ms)
        except msgspec.ValidationError:
            return  # a 400 at decoding: the answer
        node.call(node.jobs.backfill(OWNER, job.id, spec), _ignore, f"backfill [{from_ms}, {until_ms})")


def _ignore(outcome: object) -> None:
    """An answer, a refusal among them (a `TempoError`): the workload goes on."""
    assert not isinstance(outcome, BaseException) or isinstance(outcome, errors.TempoError), outcome
