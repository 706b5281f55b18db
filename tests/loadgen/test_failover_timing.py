"""`--kill-leader-at-s` lands at the time asked, counted from the due
instant; when the spike drained before it, the kill tested nothing of the
spike, and the report says so loudly rather than nothing (issue 25
finding 7: `--kill-leader-at-s 1` after a 5,000-run spike that drained in
0.3 s)."""

import pytest

from tempo.loadgen import Claim, Options, Tally, figures
from tempo.loadgen.failover import Failover
from tempo.loadgen.figures import failover_figures
from tempo.loadgen.report import failover_rows, summary

due_s = 1_800_000_000.0
runs = 5000


def _fig(kill_after_due_s: float, killed_late_s: float = 0.0) -> dict:
    """5,000 runs claimed over 0.3 s from 20 ms after the due instant; the
    leader killed `kill_after_due_s` after it (asked), `killed_late_s` late."""
    tally = Tally(claims=[
        Claim(f"r{k}", f"j{k}", 1, due_at_s=due_s, claimed_at_s=due_s + 0.02 + 0.3 * k / runs, planned_s=due_s)
        for k in range(runs)
    ])
    opts = Options(urls=["http://127.0.0.1:9"], jobs=runs, spawn=3, kill_leader_at_s=kill_after_due_s)
    fig = figures(opts, [f"j{k}" for k in range(runs)], 1.0, due_s, tally)
    plan = Failover(kill_at_s=due_s + kill_after_due_s, restart_after_s=3.0, node="n2", term=2,
                    killed_at_s=due_s + kill_after_due_s + killed_late_s, first_write_at_s=due_s + kill_after_due_s + 1.5,
                    first_write_by="n1", restarted_at_s=due_s + kill_after_due_s + 3.0,
                    ready_again_at_s=due_s + kill_after_due_s + 3.5)
    fig["failover"] = failover_figures(plan, tally, due_s)
    return fig


def test_a_kill_after_the_spike_drained_is_said_loudly() -> None:
    fig = _fig(1.0)
    fail = fig["failover"]
    assert fail["drained_before_kill_s"] == pytest.approx(0.68, abs=1e-3)  # the last claim at +0.32 s, the SIGKILL at +1.00 s
    [warning] = fail["warnings"]
    assert "drained" in warning and "0.68 s before the SIGKILL" in warning and "--kill-leader-at-s" in warning
    assert ("WARNING", warning) in failover_rows(fail)
    assert "WARNING" in summary(fig)


def test_a_kill_during_the_spike_warns_of_nothing() -> None:
    fail = _fig(0.1)["failover"]
    assert fail["drained_before_kill_s"] is None and fail["warnings"] == []
    assert not [row for row in failover_rows(fail) if row[0] == "WARNING"]


def test_a_kill_later_than_asked_is_said() -> None:
    fail = _fig(0.1, killed_late_s=0.4)["failover"]
    assert fail["kill_late_s"] == pytest.approx(0.4)
    assert any("0.40 s later than asked" in w for w in fail["warnings"]), fail["warnings"]
