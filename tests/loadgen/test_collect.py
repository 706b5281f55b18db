"""How long `tempo loadgen` takes the workers' messages (`run.collect`):
until every job was claimed, and a window more for duplicates; with
pre-dispatch, claims come before the due instant and the runs start at it,
so the window counts from the due instant (a `--kill-leader-at-s -2` on a
quiet machine was called off: the run had ended before it)."""

import importlib
import multiprocessing
import time

import pytest

from tempo.loadgen import Options, Tally
from tempo.loadgen.figures import iso

# The module, which the package's `run` (the function) hides.
run_module = importlib.import_module("tempo.loadgen.run")

window_s = 0.2


def _collect_after_claims(monkeypatch: pytest.MonkeyPatch, ahead_ms: int, due_in_s: float) -> float:
    """Seconds `collect` took when every job's claim was waiting already."""
    monkeypatch.setattr(run_module, "duplicate_window_s", window_s)
    due_s = time.time() + due_in_s
    out = multiprocessing.get_context("spawn").Queue()
    now_s = time.time()
    out.put(("claims", [(f"r{k}", f"j{k}", 1, iso(due_s), iso(due_s), now_s) for k in range(3)]))
    opts = Options(urls=["http://127.0.0.1:9"], jobs=3, ahead_ms=ahead_ms)
    started_s = time.time()
    run_module.collect(opts, out, ["j0", "j1", "j2"], due_s, lambda *_, **__: None, Tally())
    return time.time() - started_s


def test_pre_dispatch_collects_until_the_due_instant_and_a_window_more(monkeypatch) -> None:
    assert _collect_after_claims(monkeypatch, 5000, due_in_s=1.0) >= 1.0 + window_s


def test_claims_at_the_instant_collect_a_window_after_the_last(monkeypatch) -> None:
    assert _collect_after_claims(monkeypatch, 0, due_in_s=1.0) < 1.0
