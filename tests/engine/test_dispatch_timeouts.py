"""Run timeouts and cancels in the dispatcher's core (docs/semantics.md "Run
timeouts", "Cancelling a run"): a timeout ends an attempt whatever its
heartbeats say, through the lease heap's expiry path; a run asked to stop
answers it on its heartbeats and ends cancelled by its lease at the latest.
Stepped on clocks of the test's own, as tests/engine/test_dispatch_core.py."""

import pytest

from tempo import errors, ids, limits
from tempo.engine.commands import CancelRun, Command
from tempo.engine.dispatch_core import DispatchCore, feed_size
from tempo.engine.store import Outcome
from tempo.schema import RetryIn

from .test_dispatch_core import OWNER, T0_MS, Rig, run_id


class StopRig(Rig):
    """A rig whose commits also hand the runs asked to stop to the core,
    as the driver does (`Dispatcher.on_changes`)."""

    def commit(self, command: Command) -> Outcome | list[Outcome]:
        self.index += 1
        [outcome], changes = self.store.apply_commands(self.index, [command])
        self.core.feed(changes, 0, feed_size(changes))
        if changes.stopping:
            self.core.stop_requested(changes.stopping)
        return outcome


@pytest.fixture
def rig(tmp_path):
    made = StopRig(str(tmp_path / "data"))
    yield made
    made.check()
    made.close()


def test_heartbeats_do_not_carry_an_attempt_past_its_timeout(rig: StopRig) -> None:
    rig.create(timeout_s=5, lease_s=60)
    rig.tick()
    [claimed] = rig.claim()
    assert claimed.run.timeout_at_ms == T0_MS + 5_000
    for _ in range(4):
        rig.advance(1)
        expires_ms, cancel = rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s)
        assert cancel is None and expires_ms == T0_MS + 5_000  # the lease ends at the timeout
        assert rig.expire() == []
    rig.advance(1)
    [ended] = rig.expire()
    assert ended.status == "waiting" and ended.error == "timeout" and ended.cancel == "timeout"
    assert rig.core.counters["timed_out"] == 1
    # The worker learns it from its next heartbeat, until a later attempt is claimed.
    assert rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s) == (None, "timeout")
    with pytest.raises(errors.StaleAttempt):
        rig.core.heartbeat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s)


def test_a_timeout_being_committed_answers_timeout(rig: StopRig) -> None:
    rig.create(timeout_s=1)
    rig.tick()
    [claimed] = rig.claim()
    rig.advance(1)
    command = rig.core.expire(rig.now_ms, rig.mono_s)
    assert command is not None and [e.reason for e in command.expiries] == ["timeout"]
    assert rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s) == (None, "timeout")
    rig.core.expire_failed(command, rig.mono_s)
    again = rig.core.expire(rig.now_ms, rig.mono_s)
    assert again is not None and [e.reason for e in again.expiries] == ["timeout"]
    rig.commit(again)


def test_a_new_leader_holds_the_attempt_to_the_instant_its_claim_fixed(rig: StopRig) -> None:
    rig.create(timeout_s=10, lease_s=60)
    rig.tick()
    [claimed] = rig.claim()
    rig.advance(4)
    # Another leader takes over (its memory from the tables): a full lease
    # from now, but the timeout 6 s away still, on its monotonic clock.
    fresh = DispatchCore(rig.store, rig.now_ms)
    fresh.load(rig.now_ms, 500.0)
    rig.core = fresh
    rig.mono_s = 500.0
    assert fresh.lease_of(claimed.run.job_id, claimed.run.nominal_ms, 1, rig.now_ms, rig.mono_s) == rig.now_ms + 6_000
    rig.advance(5)
    assert rig.expire() == []
    rig.advance(1)
    [ended] = rig.expire()
    assert ended.error == "timeout"


def test_a_run_asked_to_stop_is_told_so_and_its_lease_stops_growing(rig: StopRig) -> None:
    rig.create(lease_s=30, retry=RetryIn(max_attempts=3))
    rig.tick()
    [claimed] = rig.claim()
    job_id, nominal_ms = claimed.run.job_id, claimed.run.nominal_ms
    rig.advance(10)
    assert rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s)[1] is None
    asked = rig.commit(CancelRun(rig.now_ms, OWNER, job_id, nominal_ms))
    assert asked.cancel == "requested"  # type: ignore[union-attr]
    expires_ms = rig.now_ms + 30_000
    for _ in range(29):
        rig.advance(1)
        assert rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s) == (expires_ms, "requested")
    rig.advance(1)
    [ended] = rig.expire()
    assert ended.status == "cancelled"  # no retry, though attempts are left
    assert rig.core.counters["cancelled"] == 1
    assert rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s) == (None, "requested")


def test_a_run_asked_to_stop_before_a_failover_is_told_so_by_the_new_leader(rig: StopRig) -> None:
    rig.create(lease_s=30)
    rig.tick()
    [claimed] = rig.claim()
    rig.commit(CancelRun(rig.now_ms, OWNER, claimed.run.job_id, claimed.run.nominal_ms))
    fresh = DispatchCore(rig.store, rig.now_ms)
    fresh.load(rig.now_ms, 900.0)
    rig.core, rig.mono_s = fresh, 900.0
    assert fresh.beat(OWNER, ids.run_id(claimed.run.job_id, claimed.run.nominal_ms), 1, rig.now_ms, 901.0)[1] == (
        "requested"
    )


def test_no_lease_is_answered_past_the_timeout_and_one_at_it_has_ended(rig: StopRig) -> None:
    """Scheduler time a few ms ahead of the monotonic clock (a slewed wall
    clock) does not carry a lease past `timeout_at`; a heartbeat at the
    timeout is told the attempt ended, before the lease check commits it."""
    rig.create(timeout_s=5, lease_s=60)
    rig.tick()
    [claimed] = rig.claim()
    timeout_at_ms = claimed.run.timeout_at_ms
    assert timeout_at_ms == T0_MS + 5_000
    rig.advance(2, wall_ms=17)
    expires_ms, cancel = rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s)
    assert cancel is None and expires_ms == timeout_at_ms
    rig.advance(3)  # the monotonic deadline of the timeout, exactly
    assert rig.core.beat(OWNER, run_id(claimed), 1, rig.now_ms, rig.mono_s) == (None, "timeout")
    assert rig.core.lease_of(claimed.run.job_id, claimed.run.nominal_ms, 1, rig.now_ms, rig.mono_s) == timeout_at_ms
    [ended] = rig.expire()
    assert ended.error == "timeout"


def test_the_next_expiry_is_the_earliest_deadline_in_the_lease_heap(rig: StopRig) -> None:
    """What the lease check sleeps until (`Dispatcher._expire_loop`): the
    timeout, not the next lease check after it."""
    assert rig.core.next_expiry_s() is None
    rig.create(timeout_s=3, lease_s=60)
    rig.tick()
    rig.claim()
    assert rig.core.next_expiry_s() == rig.mono_s + 3


def test_a_new_leader_that_loads_over_several_ticks_holds_each_attempt_to_its_own_instant(
    rig: StopRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A takeover whose loader reads the claimed runs a minute a tick: each
    run's timeout is its stored instant, read against the clocks of the
    tick that loaded it, so it fires neither late by the ticks the loading
    took nor early (docs/semantics.md "Run timeouts")."""
    rig.create(timeout_s=120, lease_s=600, at_s=0)
    rig.create(timeout_s=30, lease_s=600, at_s=61)  # due in the next minute
    rig.tick()
    [first] = rig.claim()
    rig.advance(61)
    rig.tick()
    [second] = rig.claim()
    assert (first.run.timeout_at_ms, second.run.timeout_at_ms) == (T0_MS + 120_000, T0_MS + 91_000)
    rig.advance(9)
    monkeypatch.setattr(limits, "loader_rows_per_step", 1)  # one minute a load
    fresh = DispatchCore(rig.store, rig.now_ms)
    rig.core, rig.mono_s = fresh, 500.0
    fresh.load(rig.now_ms, rig.mono_s)
    assert list(fresh.leases) == [(first.run.job_id, first.run.nominal_ms)]  # the earlier minute only
    rig.advance(15)
    rig.tick()  # loads the next minute, 15 s later
    assert len(fresh.leases) == 2
    for c in (first, second):
        assert fresh.lease_of(c.run.job_id, c.run.nominal_ms, 1, rig.now_ms, rig.mono_s) == c.run.timeout_at_ms
    rig.advance(5.999)
    assert rig.expire() == []
    rig.advance(0.001)
    [ended] = rig.expire()
    assert (ended.nominal_ms, ended.error) == (second.run.nominal_ms, "timeout")
