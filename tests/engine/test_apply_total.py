"""`apply` is total: random sequences of commands, with every field at and
past its bound and in multibyte text, each get an outcome and never raise;
two stores fed the same entries (one from their encoding, one from the
commands themselves) stay byte-identical, and the tables stay consistent
with each other after every entry.

Commands here are made as the edge makes them and then pushed to and past
the bounds the edge enforces, as an entry logged by an older version might
be: apply must answer those too, as an outcome."""

import contextlib
import json
import os
import struct
import tempfile
from collections import Counter
from collections.abc import Iterator

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tempo import errors, ids, limits
from tempo.engine import keys
from tempo.engine.commands import (
    CancelRun,
    Claim,
    ClaimKey,
    ClaimRuns,
    Command,
    CreateJobs,
    DeleteJob,
    DropHistory,
    ExpireLeases,
    Expiry,
    OverlapRuns,
    PatchJob,
    PauseJob,
    ReportResults,
    Result,
    ResumeJob,
    SetMember,
    TriggerJob,
    encode_entry,
)
from tempo.engine.jobs import Jobs
from tempo.engine.plan import slot_after_ms
from tempo.engine.records import ClaimKeyEntry, Job, Missed, RequestKeyEntry, Run
from tempo.engine.store import Created, Store
from tempo.schema import JobCreate

from .test_outcomes import check_run_index

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
CLEF = "\U0001d11e"  # four bytes in UTF-8
MAKER = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
# Examples and entries per example: together well under a minute on two
# shared cores (the stores live on tmpfs, where an fsync costs nothing).
examples_max = 60
steps_max = 25


def of_bytes(count: int, char: str = CLEF) -> str:
    """A text of exactly `count` UTF-8 bytes, of `char` and ASCII padding."""
    size = len(char.encode())
    return char * (count // size) + "k" * (count % size)


def around(bound: int, char: str = CLEF) -> st.SearchStrategy[str]:
    """Texts at a byte bound, one byte past it, and far past it."""
    return st.sampled_from([of_bytes(bound, char), of_bytes(bound + 1, char), of_bytes(bound * 3, char)])


multibyte = st.characters(blacklist_categories=("Cs",), min_codepoint=0)
texts = st.text(multibyte, max_size=8) | st.text(multibyte, min_size=190, max_size=210)
owners = st.sampled_from(["default", "acme"]) | around(limits.owner_bytes_max) | around(limits.owner_key_bytes_max, "é")
request_keys = (
    st.none()
    | st.sampled_from(["a", "b", "k" * limits.request_key_chars_max, CLEF * 126, "é" * limits.request_key_chars_max])
    | around(limits.request_key_bytes_max)
    | around(limits.lmdb_key_bytes_max, "\u20ac")
    | st.text(multibyte, min_size=1, max_size=limits.request_key_chars_max)
)
big_texts = st.none() | texts | around(limits.output_bytes_max) | around(limits.output_bytes_max, "\u20ac")
payloads = st.none() | texts | st.just(of_bytes(limits.payload_bytes_max - 2)) | st.just({"é": [1.5, -1, CLEF]})
# The leader's clock stamps `at_ms`; the latest instant the edge takes (an
# `at` of 9999-12-31) is as far as a clock may be tried here: commands past
# the time bounds of records.py do not decode (they are corrupt, not commands).
LAST_MS = 253_402_300_799_999
times = st.sampled_from([0, T0, T0 + 61_000, LAST_MS - 86_400_000, LAST_MS])
missed_ranges = st.builds(
    lambda reason, from_ms, length_ms, count: Missed(reason, from_ms, from_ms + length_ms, count),
    st.sampled_from(["outside_window", "policy", "paused"]),
    st.sampled_from([0, T0, T0 + 61_000, LAST_MS - 120_000]),
    st.sampled_from([1, 60_000, 120_000]),
    st.sampled_from([None, 1, 2]),
)
# Labels at their bounds: as many as a job may carry, the longest keys, and
# values of the most characters at four bytes each (the index hashes them).
label_sets = st.none() | st.sampled_from([
    {"team": "payments"},
    {f"k{n:02d}/" + "x" * (limits.label_key_chars_max - 4): CLEF * limits.label_value_chars_max
     for n in range(limits.job_labels_max)},
]) | st.dictionaries(st.sampled_from(["a", "b.c", "d/e"]), st.text(multibyte, max_size=8), max_size=3)
schedules = st.sampled_from([
    {"at": "2027-01-15T08:00:00Z"},
    {"at": "1970-01-01T00:00:00Z"},
    {"at": "9999-12-31T23:59:59.999Z"},
    {"every_s": 1},
    {"every_s": limits.every_s_max, "start_at": "9999-12-31T23:59:59Z"},
    {"every_s": 60, "start_at": "1970-01-01T00:00:00Z"},
    {"cron": "* * * * *", "timezone": "Europe/Berlin"},
    {"cron": "0 0 29 2 *"},
    # End conditions: a single run, the largest count, an end soon after T0
    # (nothing left for later stamps) and at the last instant there is.
    {"every_s": 60, "max_runs": 1},
    {"every_s": 1, "end_at": "2027-01-15T08:05:00Z", "max_runs": limits.schedule_runs_max},
    {"cron": "* * * * *", "end_at": "9999-12-31T23:59:59.999Z", "max_runs": 2},
])


@st.composite
def create_bodies(draw: st.DrawFn) -> dict:
    schedule = draw(schedules)
    return {
        "target": draw(st.sampled_from(["queue:q", "queue:" + "Q" * limits.queue_name_chars_max,
                                        "https://example.com/" + "a" * (limits.target_chars_max - 20)])),
        "schedule": schedule,
        "name": draw(st.none() | st.text(multibyte, max_size=limits.name_chars_max) | st.just(CLEF * limits.name_chars_max)),
        "payload": draw(payloads),
        "retry": draw(st.sampled_from([
            {"max_attempts": 1, "backoff_s": [0]},
            {"max_attempts": limits.attempts_max, "backoff_s": [limits.backoff_gap_s_max] * limits.backoff_gaps_max},
        ])),
        "lease_s": draw(st.sampled_from([limits.lease_s_min, limits.lease_s_max])),
        "jitter_s": draw(st.sampled_from([0, limits.jitter_s_max])),
        "labels": draw(label_sets),
        # A repeating schedule's overlap policy (a one-off's is `allow`).
        "overlap": draw(st.sampled_from([None, "allow", "skip", "buffer_one", "buffer_all", "cancel_other"]))
        if "at" not in schedule else None,
    }


class World:
    """Two stores fed the same entries, and what the sequence made so far."""

    def __init__(self, one: Store, two: Store):
        self.one, self.two = one, two
        self.index = 0
        self.jobs: list[tuple[str, str]] = []  # (owner, job ID) of every job ever created
        self._ids_drawn = 0

    def next_job_id(self, at_ms: int) -> str:
        """Job IDs as the edge draws them, but the same in every example that
        makes the same choices (hypothesis replays its examples)."""
        self._ids_drawn += 1
        return ids.job_id_from_int(at_ms, self._ids_drawn * 7919)

    def apply(self, commands: list[Command]) -> list:
        data = encode_entry(commands)  # before apply, which may change what it is given
        self.index += 1
        outcomes, _ = self.one.apply_entry(self.index, data)
        others, _ = self.two.apply_commands(self.index, commands)
        assert len(outcomes) == len(others) == len(commands)
        for command, outcome in zip(commands, outcomes, strict=True):
            check_outcome(command, outcome)
            for answer in outcome if isinstance(outcome, list) else [outcome]:
                event(f"{type(command).__name__}: {type(answer).__name__}")
        assert self.one.digest() == self.two.digest()
        assert self.one.applied_index() == self.index
        check_consistent(self.one)
        return outcomes

    def open_runs(self) -> list[Run]:
        return [msgspec.msgpack.decode(raw, type=Run) for _, raw in self.one.dump()["runs"]]


def check_outcome(command: Command, outcome) -> None:
    """Every command answers with what its kind answers, one item an item."""
    allowed = (Created, Job, Run, errors.TempoError, type(None))
    if isinstance(command, ClaimRuns) and command.key is not None:
        key = command.key
        if not (keys.owner_fits(key.owner) and keys.claim_key_fits(key.owner, key.key)):
            assert isinstance(outcome, errors.Invalid), outcome
            return
        if isinstance(outcome, ClaimKeyEntry | errors.ClaimKeyReused):
            return  # a key recorded: nothing taken
    if isinstance(command, OverlapRuns):
        assert isinstance(outcome, list) and len(outcome) == len(command.runs)
        assert all(isinstance(o, bool) for o in outcome)
        return
    if isinstance(command, CreateJobs | ClaimRuns | ReportResults | ExpireLeases):
        items = {CreateJobs: "jobs", ClaimRuns: "claims", ReportResults: "results", ExpireLeases: "expiries"}
        assert isinstance(outcome, list) and len(outcome) == len(getattr(command, items[type(command)]))
        assert all(isinstance(o, allowed) for o in outcome)
    else:
        assert isinstance(outcome, allowed)
    if isinstance(command, CreateJobs):
        for item, answer in zip(command.jobs, outcome, strict=True):
            fits = keys.owner_fits(item.job.owner) and (
                item.job.request_key is None or keys.request_key_fits(item.job.owner, item.job.request_key)
            )
            if not fits:
                assert isinstance(answer, errors.Invalid), answer


_U64 = struct.Struct(">Q")


def check_consistent(store: Store) -> None:
    """The tables agree with each other: open-run counts, indexes, request keys."""
    tables = store.dump()
    jobs = {keys.job_id_of(k): msgspec.msgpack.decode(v, type=Job) for k, v in tables["jobs"]}
    open_by_minute: Counter[int] = Counter()
    for key, raw in tables["runs"]:
        run = msgspec.msgpack.decode(raw, type=Run)
        job_id, nominal_ms = keys.slot_of(key)
        due_ms = keys.due_of(key)
        assert (job_id, nominal_ms, due_ms) == (run.job_id, run.nominal_ms, run.due_ms)
        assert key == keys.run_key_of(keys.job_key(job_id), job_id, nominal_ms, due_ms), "minute and shard"
        minute = keys.minute_of(due_ms)
        assert run.status in ("waiting", "claimed"), "only open runs are in the runs table"
        assert job_id in jobs, "a run of a missing job"
        open_by_minute[minute] += 1
    counted = {struct.unpack(">I", k)[0]: _U64.unpack(v)[0] for k, v in tables["open_minutes"]}
    assert counted == dict(open_by_minute), "open-run counts per minute"
    by_job = dict(tables["runs_by_job"])
    assert sorted(by_job.values()) == sorted(k for k, _ in tables["runs"]), "runs by job index every open run"
    for key, runs_key in by_job.items():
        job_id, nominal_ms = keys.slot_of(runs_key)
        assert keys.parse_by_job_key(key) == (job_id, nominal_ms)
    by_owner = {k for k, _ in tables["jobs_by_owner"]}
    assert by_owner == {keys.owner_job_key(job.owner, job_id) for job_id, job in jobs.items()}
    for key, raw in tables["request_keys"]:
        entry = msgspec.msgpack.decode(raw, type=RequestKeyEntry)
        job = jobs.get(entry.job_id)
        assert job is not None and job.request_key is not None, "a request key outlived its job"
        assert keys.request_key(job.owner, job.request_key) == key
    keyed = {keys.request_key(job.owner, job.request_key) for job in jobs.values() if job.request_key is not None}
    assert keyed == {k for k, _ in tables["request_keys"]}, "every job's request key is indexed"
    records = {k: msgspec.msgpack.decode(v, type=ClaimKeyEntry) for k, v in tables["claim_keys"]
               if k.startswith(keys.CLAIM_KEY_HEAD)}
    expiring = {k for k, _ in tables["claim_keys"] if k.startswith(keys.CLAIM_KEY_EXPIRY_HEAD)}
    assert expiring == {keys.claim_key_expiry_of(e.expires_ms, k) for k, e in records.items()}, "claim key expiries"
    assert all(entry.runs for entry in records.values()), "a claim key that took nothing is not recorded"
    for table in tables.values():
        assert all(0 < len(k) <= limits.lmdb_key_bytes_max for k, _ in table)
    check_run_index(tables)
    for job in jobs.values():
        assert (job.state == "paused") == (job.paused is not None), "a job shows who paused it while paused only"
        ran_all = job.schedule.max_runs is not None and job.runs_done >= job.schedule.max_runs
        assert not (ran_all and job.next_run_at_ms is not None), "nothing is planned after max_runs"
    labelled = {
        keys.label_key(job.owner, name, value, keys.job_key(job_id))
        for job_id, job in jobs.items() for name, value in (job.labels or {}).items()
    }
    assert {k for k, _ in tables["jobs_by_label"]} == labelled, "jobs by label: one row per label of each job"


@contextlib.contextmanager
def two_stores() -> Iterator[tuple[Store, Store]]:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as root:
        made = [Store(os.path.join(root, name), map_bytes=256 << 20) for name in ("one", "two")]
        try:
            yield made[0], made[1]
        finally:
            for store in made:
                store.close()


def create_command(draw: st.DrawFn, world: World, at_ms: int) -> CreateJobs:
    items = []
    for _ in range(draw(st.integers(1, 4))):
        body = msgspec.json.decode(json.dumps(draw(create_bodies())), type=JobCreate)
        owner = draw(st.sampled_from(["default"] * 3) | owners)
        try:
            item = MAKER.new_job("default", body, at_ms, from_msgpack=False, job_id=world.next_job_id(at_ms))
        except errors.TempoError:
            continue  # a schedule with nothing left after `at_ms`: the edge refuses it
        # Past the edge's bounds, as an older version may have logged it.
        item.job.owner = owner
        item.job.request_key = draw(request_keys)
        if draw(st.booleans()):
            item.job.name = CLEF * (limits.name_chars_max * 5)
        items.append(item)
    if not items:
        body = msgspec.json.decode(b'{"target":"queue:q","schedule":{"every_s":60}}', type=JobCreate)
        items.append(MAKER.new_job("default", body, at_ms, from_msgpack=False, job_id=world.next_job_id(at_ms)))
    world.jobs += [(item.job.owner, item.job.id) for item in items]
    return CreateJobs(at_ms, items)


def job_command(draw: st.DrawFn, world: World, at_ms: int) -> Command:
    owner, job_id = draw(st.sampled_from(world.jobs)) if world.jobs else ("default", ids.job_id_from_int(T0, 7))
    # Mostly the job's own owner and ID; now and then another owner, or an
    # ID that is none (the API takes it from the path).
    owner = draw(st.sampled_from([owner] * 6) | owners)
    job_id = draw(st.sampled_from([job_id] * 12 + ["j_", "j_" + CLEF * 26, "r_x"]))
    kind = draw(st.sampled_from([PauseJob, ResumeJob, DeleteJob, TriggerJob, PatchJob]))
    if kind is PatchJob:
        return patch_command(draw, world, at_ms, owner, job_id)
    if kind is PauseJob:
        # Who paused it and why, at and past the note's bound; or as an
        # older version logged it, without them.
        if draw(st.booleans()):
            return PauseJob(at_ms, owner, job_id)
        note = draw(st.none() | texts | around(limits.pause_note_chars_max * 4))
        return PauseJob(at_ms, owner, job_id, draw(owners), draw(st.sampled_from(["admin", "client"])), note)
    if kind is not ResumeJob:
        return kind(at_ms, owner, job_id)
    job = world.one.get_job_any(job_id) if ids.is_job_id(job_id) else None
    slot_ms = None if job is None else (
        slot_after_ms(job.schedule, job.created_at_ms, at_ms, inclusive=False) if job.schedule.repeating
        else job.slot_ms
    )
    due_ms = None if slot_ms is None else min(max(slot_ms, at_ms), limits.time_ms_max)
    # The slots the pause let pass, as the node that took the resume found
    # them: each range is also a row of the job's history (record_missed).
    missed = draw(st.lists(missed_ranges, max_size=2))
    return ResumeJob(at_ms, owner, job_id, slot_ms, due_ms, missed)


def patch_command(draw: st.DrawFn, world: World, at_ms: int, owner: str, job_id: str) -> PatchJob:
    """A patch as the edge makes it (the whole job after the merge, and its
    new slot), at the job's version or another, now and then past bounds."""
    body = msgspec.json.decode(json.dumps(draw(create_bodies())), type=JobCreate)
    try:
        made = MAKER.new_job("default", body, at_ms, from_msgpack=False, job_id=world.next_job_id(at_ms))
    except errors.TempoError:
        body = msgspec.json.decode(b'{"target":"queue:q","schedule":{"every_s":60}}', type=JobCreate)
        made = MAKER.new_job("default", body, at_ms, from_msgpack=False, job_id=world.next_job_id(at_ms))
    if draw(st.booleans()):
        made.job.name = CLEF * (limits.name_chars_max * 5)
    job = world.one.get_job_any(job_id) if ids.is_job_id(job_id) else None
    version = draw(st.sampled_from([job.version] * 4 if job is not None else [1]) | st.integers(0, 3))
    slot_ms, due_ms = made.job.slot_ms, made.first_due_ms
    if draw(st.booleans()):
        slot_ms = due_ms = None
    return PatchJob(at_ms, owner, job_id, version, made.job, draw(st.booleans()), slot_ms, due_ms)


def run_command(draw: st.DrawFn, world: World, at_ms: int) -> Command:
    runs = world.open_runs()
    picked = draw(st.lists(st.sampled_from(runs), max_size=4)) if runs else []
    kind = draw(st.sampled_from(["claim", "claim", "result", "result", "expire", "cancel"]))
    due = [r for r in runs if r.status == "waiting" and r.due_ms <= at_ms]
    if kind == "claim" and due and draw(st.booleans()):
        picked = draw(st.lists(st.sampled_from(due), min_size=1, max_size=4))
    if kind == "claim":
        worker = draw(st.sampled_from(["w", CLEF * limits.worker_chars_max, CLEF * (limits.worker_chars_max * 5)]))
        claims = [claim_of(draw, r, at_ms) for r in picked]
        for claim in claims:
            if draw(st.booleans()):
                claim.timeout_at_ms = min(at_ms + draw(st.sampled_from([1000, 86_400_000])), limits.time_ms_max)
        key = None
        if draw(st.booleans()):
            # A few keys, reused by other workers and queue sets; owners
            # whose key would not fit; records that expire at once or later.
            key = ClaimKey(
                draw(st.sampled_from(["default", "default"]) | owners),
                draw(st.sampled_from(["k1", "k2", "K" * limits.claim_key_chars_max])),
                draw(st.sampled_from([b"q" * 16, b"r" * 16])),
                min(at_ms + draw(st.sampled_from([0, 1, limits.claim_key_kept_ms])), limits.time_ms_max),
            )
        return ClaimRuns(at_ms, worker, claims, key)
    claimed = [r for r in runs if r.status == "claimed"]
    if kind != "claim" and claimed and draw(st.booleans()):
        picked = draw(st.lists(st.sampled_from(claimed), min_size=1, max_size=4))
    if kind == "result":
        results = [
            Result(r.job_id, r.nominal_ms, r.attempt + draw(st.sampled_from([0, 0, 1])), draw(st.booleans()),
                   draw(big_texts), draw(big_texts))
            for r in picked
        ]
        if draw(st.booleans()):
            results.append(Result(ids.job_id_from_int(T0, 7), 5, 1, True))  # an unknown run
        # The executor's (None), the owner's (most jobs are `default`'s), another's.
        owner = draw(st.sampled_from([None, "default", "default"]) | owners)
        return ReportResults(at_ms, owner, results)
    if kind == "cancel":
        return cancel_command(draw, runs, at_ms)
    return ExpireLeases(at_ms, [
        Expiry(r.job_id, r.nominal_ms, r.attempt, draw(st.sampled_from(["lease", "timeout"]))) for r in picked
    ])


def claim_of(draw: st.DrawFn, run: Run, at_ms: int) -> Claim:
    """A claim of `run`, now and then with a next slot, as the dispatcher
    plans one for a job's slot run: apply holds it to the job's end
    conditions (`schedule.end_at`, `max_runs`)."""
    claim = Claim(run.job_id, run.nominal_ms, min(at_ms + 60_000, limits.time_ms_max))
    if draw(st.booleans()) and claim.nominal_ms + 60_000 <= limits.time_ms_max:
        claim.next_slot_ms = claim.nominal_ms + 60_000
        claim.next_due_ms = max(claim.next_slot_ms, min(at_ms, limits.time_ms_max))
    return claim


def overlap_command(draw: st.DrawFn, world: World, at_ms: int) -> OverlapRuns:
    """Due runs the dispatcher set aside (now and then others), with a next slot now and then."""
    runs = world.open_runs()
    due = [r for r in runs if r.status == "waiting" and r.due_ms <= at_ms]
    picked = draw(st.lists(st.sampled_from(due or runs), max_size=4)) if runs else []
    return OverlapRuns(at_ms, [claim_of(draw, r, at_ms) for r in picked])


def cancel_command(draw: st.DrawFn, runs: list[Run], at_ms: int) -> CancelRun:
    """A cancel of an open run (a finished one, an unknown one, another
    owner's now and then), planned or not, with a next slot or none."""
    run = draw(st.sampled_from(runs)) if runs else Run(ids.job_id_from_int(T0, 7), 5, 5, "waiting")
    owner = draw(st.sampled_from(["default"] * 4) | owners)
    job_id = draw(st.sampled_from([run.job_id] * 8 + ["j_", "r_x", ids.job_id_from_int(T0, 7)]))
    command = CancelRun(at_ms, owner, job_id, run.nominal_ms, planned=draw(st.booleans()))
    if command.planned and draw(st.booleans()) and run.nominal_ms + 60_000 <= limits.time_ms_max:
        command.next_slot_ms = run.nominal_ms + 60_000
        command.next_due_ms = max(command.next_slot_ms, min(at_ms, limits.time_ms_max))
        command.missed = draw(st.lists(missed_ranges, max_size=1))
    return command


@st.composite
def entries(draw: st.DrawFn, world: World) -> list[Command]:
    at_ms = draw(times)
    commands: list[Command] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["create", "create", "job", "job", "runs", "runs", "overlap", "other"]))
        if kind == "create":
            commands.append(create_command(draw, world, at_ms))
        elif kind == "job":
            command = job_command(draw, world, at_ms)
            if isinstance(command, ResumeJob) and draw(st.booleans()):
                # Paused first, so the resume's missed ranges are recorded.
                commands.append(PauseJob(at_ms, command.owner, command.job_id))
            commands.append(command)
        elif kind == "runs":
            commands.append(run_command(draw, world, at_ms))
        elif kind == "overlap":
            commands.append(overlap_command(draw, world, at_ms))
        elif draw(st.booleans()):
            commands.append(DropHistory(at_ms, draw(st.sampled_from([0, at_ms // limits.day_ms, 1 << 40]))))
        else:
            commands.append(SetMember(draw(st.sampled_from(["n1", "N" * limits.node_id_chars_max])), draw(texts)))
    return commands


@settings(max_examples=examples_max, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_every_command_gets_an_outcome_and_the_stores_stay_consistent(data):
    with two_stores() as (one, two):
        world = World(one, two)
        for _ in range(data.draw(st.integers(1, steps_max))):
            world.apply(data.draw(entries(world)))
