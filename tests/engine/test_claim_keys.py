"""Idempotent claims in apply (docs/semantics.md "Idempotent claims"): a
claim key's record, its repeat, its misuse and its expiry, all decided from
the replicated state and the command's stamp."""

import json

import msgspec

from tempo import errors, limits
from tempo.engine import keys
from tempo.engine.commands import Claim, ClaimKey, ClaimRuns, CreateJobs, encode_entry
from tempo.engine.jobs import Jobs
from tempo.engine.records import ClaimKeyEntry, Run, Taken
from tempo.engine.store import Store
from tempo.schema import JobCreate

from .test_store import Log

OWNER = "default"
T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z
HASH = b"q" * 16
LEASE_MS = 60_000


def new_job(maker: Jobs, at_ms: int, **fields):
    fields.setdefault("target", "queue:reports")
    body = msgspec.json.decode(json.dumps(fields), type=JobCreate)
    return maker.new_job(OWNER, body, at_ms, from_msgpack=False)


def make_runs(log: Log, count: int) -> list[tuple[str, int]]:
    """`count` one-off jobs due at T0: their (job ID, nominal ms)."""
    maker = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
    made = [new_job(maker, T0, schedule={"at": "2027-01-15T07:59:00Z"}) for _ in range(count)]
    log.apply(CreateJobs(T0, made))
    return [(m.job.id, m.job.slot_ms) for m in made]


def claim(at_ms: int, worker: str, slots: list[tuple[str, int]], key: str | None, queues_hash: bytes = HASH):
    claims = [Claim(job_id, nominal_ms, at_ms + LEASE_MS, one_off=True) for job_id, nominal_ms in slots]
    keyed = None if key is None else ClaimKey(OWNER, key, queues_hash, at_ms + limits.claim_key_kept_ms)
    return ClaimRuns(at_ms, worker, claims, keyed)


def claim_key_rows(store: Store) -> list[bytes]:
    return [k for k, _ in store.dump()["claim_keys"]]


def test_the_same_key_again_takes_nothing_and_answers_the_runs_it_took(store):
    log = Log(store)
    a, b, c = make_runs(log, 3)
    [first] = log.apply(claim(T0 + 10, "w1", [a, b], "k-1"))
    assert [(r.job_id, r.nominal_ms, r.attempt, r.status) for r in first] == [
        (*a, 1, "claimed"), (*b, 1, "claimed")
    ]
    # The retry's dispatcher picked another run (c): the key takes nothing.
    [again] = log.apply(claim(T0 + 20, "w1", [c], "k-1"))
    assert isinstance(again, ClaimKeyEntry)
    assert again.worker == "w1" and again.runs == [Taken(*a, 1), Taken(*b, 1)]
    run_c = store.get_run_any(*c)
    assert run_c is not None and run_c.status == "waiting" and run_c.attempt == 0
    for slot in (a, b):
        run = store.get_run_any(*slot)
        assert run is not None and run.attempt == 1 and run.worker == "w1"


def test_a_key_of_another_worker_or_other_queues_is_refused_and_takes_nothing(store):
    log = Log(store)
    a, b = make_runs(log, 2)
    log.apply(claim(T0 + 10, "w1", [a], "k-1"))
    [other_worker] = log.apply(claim(T0 + 20, "w2", [b], "k-1"))
    [other_queues] = log.apply(claim(T0 + 30, "w1", [b], "k-1", queues_hash=b"r" * 16))
    assert isinstance(other_worker, errors.ClaimKeyReused)
    assert isinstance(other_queues, errors.ClaimKeyReused)
    run_b = store.get_run_any(*b)
    assert run_b is not None and run_b.status == "waiting"


def test_a_claim_that_took_nothing_records_nothing(store):
    log = Log(store)
    [a] = make_runs(log, 1)
    log.apply(claim(T0 + 10, "w1", [a], None))
    [outcome] = log.apply(claim(T0 + 20, "w1", [a], "k-1"))
    assert outcome == [None]
    assert claim_key_rows(store) == []
    assert store.claim_key_entry(OWNER, "k-1", T0 + 20) is None


def test_records_expire_at_their_stamp_and_are_dropped_by_later_claims(store):
    log = Log(store)
    a, b, c = make_runs(log, 3)
    log.apply(claim(T0 + 10, "w1", [a], "k-1"))
    expires_ms = T0 + 10 + limits.claim_key_kept_ms
    assert store.claim_key_entry(OWNER, "k-1", expires_ms - 1) is not None
    assert store.claim_key_entry(OWNER, "k-1", expires_ms) is None
    assert len(claim_key_rows(store)) == 2  # the record and its expiry entry
    # Just before: still a repeat. At the expiry: another key's claim drops it.
    [still] = log.apply(claim(expires_ms - 1, "w1", [b], "k-1"))
    assert isinstance(still, ClaimKeyEntry)
    log.apply(claim(expires_ms, "w1", [b], "k-2"))
    rows = claim_key_rows(store)
    assert keys.claim_key(OWNER, "k-1") not in rows and keys.claim_key(OWNER, "k-2") in rows and len(rows) == 2
    # The key is free again: a new claim with it takes runs.
    [fresh] = log.apply(claim(expires_ms + 5, "w9", [c], "k-1"))
    assert isinstance(fresh, list) and isinstance(fresh[0], Run) and fresh[0].worker == "w9"


def test_an_expired_record_not_yet_dropped_does_not_answer(store):
    log = Log(store)
    a, b = make_runs(log, 2)
    # More expired records than one claim drops: the key's own is found
    # expired by its lookup and replaced.
    slots = make_runs(log, limits.claim_keys_dropped_per_claim + 2)
    for k, slot in enumerate(slots):
        log.apply(claim(T0 + 10 + k, "w1", [slot], f"old-{k}"))
    log.apply(claim(T0 + 100, "w1", [a], "k-1"))
    late_ms = T0 + 100 + limits.claim_key_kept_ms
    [outcome] = log.apply(claim(late_ms, "w2", [b], "k-1"))
    assert isinstance(outcome, list) and outcome[0] is not None and outcome[0].worker == "w2"
    entry = store.claim_key_entry(OWNER, "k-1", late_ms)
    assert entry is not None and entry.worker == "w2"
    # Each claim dropped at most its bound of expired records.
    old = [k for k in claim_key_rows(store) if k.startswith(b"k" + OWNER.encode() + b"\x00old-")]
    assert len(old) == len(slots) - limits.claim_keys_dropped_per_claim


def test_replicas_fed_the_same_entries_hold_the_same_records(store, tmp_path):
    log = Log(store)
    a, b, c = make_runs(log, 3)
    log.apply(claim(T0 + 10, "w1", [a, b], "k-1"))
    log.apply(claim(T0 + 20, "w1", [c], "k-1"))
    log.apply(claim(T0 + 10 + limits.claim_key_kept_ms, "w1", [c], "k-2"))
    copy = Store(str(tmp_path / "copy"), map_bytes=64 << 20)
    try:
        for index, data in enumerate(log.entries, 1):
            copy.apply_entry(index, data)
        assert copy.digest() == store.digest()
        assert copy.dump()["claim_keys"] == store.dump()["claim_keys"]
    finally:
        copy.close()


def test_a_command_with_a_key_round_trips():
    command = claim(T0, "w1", [("j_" + "0" * 26, T0)], "k-1")
    from tempo.engine.commands import decode_entry

    assert decode_entry(encode_entry([command])) == [command]


def test_a_store_made_before_claim_keys_opens_and_gains_the_table(tmp_path):
    path = str(tmp_path / "old")
    made = Store(path, map_bytes=64 << 20)
    with made.env.begin(write=True) as txn:
        txn.drop(made.db["claim_keys"], delete=True)
    made.close()
    reopened = Store(path, map_bytes=64 << 20)
    try:
        log = Log(reopened)
        [a] = make_runs(log, 1)
        log.apply(claim(T0 + 10, "w1", [a], "k-1"))
        assert reopened.claim_key_entry(OWNER, "k-1", T0 + 10) is not None
    finally:
        reopened.close()
