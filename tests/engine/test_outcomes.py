"""A job's outcome and a run's attempts, as apply keeps them, and the runs
index by owner and status that `GET /v1/runs` pages through: kept in the
same transaction as the run, dropped with the run's history bucket and
with its job, and equal on two stores fed the same entries."""



from tempo import limits
from tempo.engine import keys
from tempo.engine.commands import (
    Claim,
    ClaimRuns,
    CreateJobs,
    DeleteJob,
    DropHistory,
    ExpireLeases,
    Expiry,
    PauseJob,
    ReportResults,
    Result,
)
from tempo.engine.store import Store

from .store_hooks import forget_run_index
from .test_history import DAY, OWNER, T0, Log, new_job


def claim(log: Log, job_id: str, nominal_ms: int, at_ms: int, worker: str = "w1"):
    [run] = log.apply(ClaimRuns(at_ms, worker, [Claim(job_id, nominal_ms, at_ms + 60_000, one_off=True)]))[0]
    assert run is not None
    return run


def report(log: Log, job_id: str, nominal_ms: int, attempt: int, at_ms: int, ok: bool, text: str):
    output, error = (text, None) if ok else (None, text)
    [outcome] = log.apply(ReportResults(at_ms, OWNER, [Result(job_id, nominal_ms, attempt, ok, output, error)]))[0]
    return outcome


def failing_one_off(log: Log, at_ms: int = T0):
    """A one-off of three attempts: one error, one expired lease, one error."""
    made = new_job(at_ms, retry={"max_attempts": 3, "backoff_s": [0]})
    log.apply(CreateJobs(at_ms, [made]))
    job = made.job
    claim(log, job.id, job.slot_ms, at_ms + 1, "w1")
    report(log, job.id, job.slot_ms, 1, at_ms + 2, False, "boom 1")
    claim(log, job.id, job.slot_ms, at_ms + 3, "w2")
    log.apply(ExpireLeases(at_ms + 4, [Expiry(job.id, job.slot_ms, 2)]))
    claim(log, job.id, job.slot_ms, at_ms + 5, "w3")
    report(log, job.id, job.slot_ms, 3, at_ms + 6, False, "boom 3")
    return job


def test_a_run_keeps_every_attempt(store):
    log = Log(store)
    job = failing_one_off(log)
    run, _ = store.get_run(OWNER, keys_run_id(job.id, job.slot_ms))
    assert run.status == "failed"
    got = [(a.claimed_ms, a.worker, a.ended_ms, a.ok, a.output, a.error) for a in run.attempts]
    assert got == [
        (T0 + 1, "w1", T0 + 2, False, None, "boom 1"),
        (T0 + 3, "w2", T0 + 4, False, None, "lease expired"),
        (T0 + 5, "w3", T0 + 6, False, None, "boom 3"),
    ]


def test_the_attempts_kept_are_bounded_by_the_retry_policy_max(store):
    log = Log(store)
    made = new_job(T0, retry={"max_attempts": 1, "backoff_s": [0]})
    # An entry logged past the edge's bounds: more attempts than kept.
    made.job.max_attempts = limits.run_attempts_kept_max + 3
    log.apply(CreateJobs(T0, [made]))
    job = made.job
    for attempt in range(1, limits.run_attempts_kept_max + 4):
        claim(log, job.id, job.slot_ms, T0 + attempt)
        report(log, job.id, job.slot_ms, attempt, T0 + attempt, False, f"e{attempt}")
    run, _ = store.get_run(OWNER, keys_run_id(job.id, job.slot_ms))
    assert len(run.attempts) == limits.run_attempts_kept_max
    assert run.attempts[-1].error == f"e{limits.run_attempts_kept_max + 3}"  # the newest are kept


def test_a_failed_one_off_says_so_in_its_outcome(store):
    log = Log(store)
    job = failing_one_off(log)
    ok_job = new_job(T0)
    log.apply(CreateJobs(T0, [ok_job]))
    claim(log, ok_job.job.id, ok_job.job.slot_ms, T0 + 1)
    report(log, ok_job.job.id, ok_job.job.slot_ms, 1, T0 + 7, True, "fine")
    failed = store.job_outcome(job.id)
    assert failed.last_status == "failed" and failed.last_attempt == 3 and failed.last_error == "boom 3"
    assert failed.last_finished_ms == T0 + 6 and failed.last_nominal_ms == job.slot_ms
    assert (failed.done, failed.failed, failed.cancelled) == (0, 1, 0)
    done = store.job_outcome(ok_job.job.id)
    assert done.last_status == "done" and done.last_error is None and (done.done, done.failed) == (1, 0)
    assert store.get_job(OWNER, job.id).state == store.get_job(OWNER, ok_job.job.id).state == "completed"


def test_a_job_with_no_finished_run_has_an_empty_outcome(store):
    log = Log(store)
    made = new_job(T0)
    log.apply(CreateJobs(T0, [made]))
    assert store.job_outcome(made.job.id) is None


def keys_run_id(job_id: str, nominal_ms: int) -> str:
    from tempo import ids

    return ids.run_id(job_id, nominal_ms)


def page_all(store: Store, owner: str | None, status: str | None, **bounds) -> list[str]:
    seen, cursor = [], None
    while True:
        runs, cursor = store.list_owner_runs(owner, status=status, limit=2, cursor=cursor, **bounds)
        seen += [keys_run_id(r.job_id, r.nominal_ms) for r in runs]
        if cursor is None:
            return seen


def test_runs_by_status_across_jobs_newest_first_with_cursor(store):
    log = Log(store)
    failed = [failing_one_off(log, T0 + i * 10) for i in range(3)]
    made = [new_job(T0) for _ in range(3)]
    log.apply(CreateJobs(T0, made))
    claim(log, made[0].job.id, made[0].job.slot_ms, T0 + 100)
    by_time = [keys_run_id(j.id, j.slot_ms) for j in reversed(failed)]
    assert page_all(store, OWNER, "failed") == by_time
    assert page_all(store, OWNER, "claimed") == [keys_run_id(made[0].job.id, made[0].job.slot_ms)]
    assert sorted(page_all(store, OWNER, "waiting")) == sorted(keys_run_id(m.job.id, m.job.slot_ms) for m in made[1:])
    assert len(page_all(store, OWNER, None)) == 6
    assert page_all(store, OWNER, "failed", since_ms=T0 + 16, until_ms=T0 + 26) == by_time[1:2]
    assert page_all(store, "someone-else", "failed") == []
    assert page_all(store, None, "failed") == by_time  # every owner's (an admin)


def test_index_rows_go_with_a_deleted_job_and_a_dropped_bucket(store):
    log = Log(store)
    job = failing_one_off(log)
    paused = new_job(T0)
    log.apply(CreateJobs(T0, [paused]))
    log.apply(PauseJob(T0 + 1, OWNER, paused.job.id))
    assert page_all(store, OWNER, "cancelled") == [keys_run_id(paused.job.id, paused.job.slot_ms)]
    log.apply(DeleteJob(T0 + 2, OWNER, job.id))
    assert page_all(store, OWNER, "failed") == []
    assert store.job_outcome(job.id) is None
    log.apply(DropHistory(T0 + 3 * DAY, (T0 + 3 * DAY) // DAY))
    assert page_all(store, OWNER, None) == []


def test_an_existing_store_without_the_index_gets_it_built_at_open(tmp_path):
    path = str(tmp_path / "s")
    store = Store(path, map_bytes=64 << 20)
    log = Log(store)
    job = failing_one_off(log)
    waiting = new_job(T0)
    log.apply(CreateJobs(T0, [waiting]))
    expected = {s: page_all(store, OWNER, s) for s in ("failed", "waiting")}
    before = store.dump()
    forget_run_index(store)
    store.close()
    store = Store(path, map_bytes=64 << 20)
    try:
        assert {s: page_all(store, OWNER, s) for s in ("failed", "waiting")} == expected
        assert store.job_outcome(job.id).last_status == "failed"
        assert store.dump() == before
    finally:
        store.close()


def test_two_stores_agree_and_a_snapshot_carries_the_index(two_stores):
    one, two = two_stores
    log = Log(one)
    failing_one_off(log)
    for index, data in enumerate(log.entries, 1):
        two.apply_entry(index, data)
    assert one.digest() == two.digest()
    index, data = one.snapshot_data()
    two.write(lambda txn: two.restore_in(txn, index, data))
    assert one.digest() == two.digest()
    assert page_all(two, OWNER, "failed") == page_all(one, OWNER, "failed")


def test_the_status_key_fits_lmdb():
    longest = "o" * limits.owner_bytes_max
    assert len(keys.status_key(longest, 0, 1 << 60, "j_" + "0" * 26, 1 << 60)) <= limits.lmdb_key_bytes_max


def check_run_index(tables: dict[str, list[tuple[bytes, bytes]]]) -> None:
    """The runs-by-status index holds exactly one row per open run (in the
    open table) and per finished run (in the run's bucket), at its status
    and time: for test_apply_total's check after every entry."""
    import msgspec

    from tempo.engine.records import Job, Run
    from tempo.engine.tables.layout import status_key_of as _status_key_of

    owners = {keys.job_id_of(k): msgspec.msgpack.decode(v, type=Job).owner for k, v in tables["jobs"]}
    expected = set()
    for _, raw in tables["runs"]:
        run = msgspec.msgpack.decode(raw, type=Run)
        expected.add(_status_key_of(owners[run.job_id], run))
    assert {k for k, _ in tables["runs_by_status"]} == expected, "runs by status: the open runs"
    for name, rows in tables.items():
        if not name.startswith("hist:"):
            continue
        held = set()
        for key, raw in rows:
            if key.startswith(b"r"):
                run = msgspec.msgpack.decode(raw, type=Run)
                held.add(b"s" + _status_key_of(owners[run.job_id], run))
        assert {k for k, _ in rows if k.startswith(b"s")} == held, f"runs by status in {name}"
    assert {k for k, _ in tables["job_outcomes"]} <= {k for k, _ in tables["jobs"]}, "an outcome outlived its job"


def test_a_snapshot_of_a_version_without_the_index_gets_it_built(two_stores):
    one, two = two_stores
    log = Log(one)
    failing_one_off(log)
    made = new_job(T0)
    log.apply(CreateJobs(T0, [made]))
    index, data = one.snapshot_data()
    import msgspec

    tables = msgspec.msgpack.decode(data)
    older = []
    for name, rows in tables:
        if name in ("runs_by_status", "job_outcomes"):
            continue  # that version had neither table
        if name == "meta":
            rows = [row for row in rows if row[0] != b"run_index"]
        if name.startswith("hist:"):
            rows = [row for row in rows if not row[0].startswith(b"s")]
        older.append([name, rows])
    two.write(lambda txn: two.restore_in(txn, index, msgspec.msgpack.encode(older)))
    assert two.digest() == one.digest()
    assert page_all(two, OWNER, "waiting") == page_all(one, OWNER, "waiting") != []


def test_a_filtered_page_reads_a_bounded_number_of_jobs(store, monkeypatch):
    log = Log(store)
    made = [new_job(T0 + k, name="match" if k == 0 else f"other-{k}") for k in range(12)]
    for item in made:
        log.apply(CreateJobs(item.job.created_at_ms, [item]))
    monkeypatch.setattr(limits, "jobs_filter_rows_max", 5)

    def match(job) -> bool:
        return job.name == "match"

    pages, cursor = [], None
    while True:
        found, cursor = store.list_jobs(OWNER, 100, cursor, match)
        pages.append([j.id for j in found])
        if cursor is None:
            break
    assert pages == [[], [], [made[0].job.id]]  # 5 read, 5 read, the last 2
    assert store.list_all_jobs(100, None, match)[0] == []  # the admin's listing is bounded alike
    unfiltered, next_cursor = store.list_jobs(OWNER, 100, None)
    assert len(unfiltered) == 12 and next_cursor is None
