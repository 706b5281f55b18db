"""Sequences the randomised lifecycle model (tests/engine/
test_lifecycle_model.py with `TEMPO_LIFECYCLE_RANDOM=1`) once found, as
hypothesis shrank them, replayed step by step through the same model: each
is a fault that was fixed (in the engine or in the model) and must stay so,
whatever examples the fixed seed of the normal suite happens to draw."""

from collections.abc import Iterator
from typing import Any

import pytest

from . import lifecycle_model
from .lifecycle_model import LifecycleModel


class Draws:
    """What a rule's `st.data()` draws, given in order."""

    def __init__(self, *values: Any):
        self.values = list(values)

    def draw(self, strategy: object, label: str | None = None) -> Any:
        assert self.values, f"the rule drew more than the case gives ({label})"
        return self.values.pop(0)


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[LifecycleModel]:
    # hypothesis's `event` records only inside a hypothesis test.
    monkeypatch.setattr(lifecycle_model, "event", lambda _: None)
    made = LifecycleModel()
    yield made
    made.teardown()


def steps(model: LifecycleModel, *calls: tuple[str, dict[str, Any]]) -> None:
    """Each rule with its arguments, and the checks after it, as hypothesis runs them."""
    model.check()
    for name, kwargs in calls:
        getattr(model, name)(**kwargs)
        model.check()


def test_runs_buffer_all_buffered_stay_buffered_under_buffer_one(model: LifecycleModel) -> None:
    """From `buffer_all` to `buffer_one`, the runs buffered already stay
    buffered (docs/semantics.md "Overlap"), two of them past the new bound:
    the model once called that a fault."""
    model.first_job(sched=("every", 1), retry=None, timeout_s=None, lease_s=None, jitter_s=0, queue="a")
    steps(
        model,
        ("patch", {"data": Draws(0, "buffer_all"), "stale": False, "what": "overlap"}),
        ("advance", {"by": 1}),
        ("trigger", {"data": Draws(0)}),
        ("claim", {"queues": ["a"], "runs_max": 1}),
        ("advance", {"by": 2}),
        ("claim", {"queues": ["a"], "runs_max": 1}),
        ("claim", {"queues": ["a"], "runs_max": 1}),
        ("result_failed", {"data": Draws(0)}),
        ("patch", {"data": Draws(0, "buffer_one"), "stale": False, "what": "overlap"}),
    )
    buffered = [r for r in model.engine.runs_of(model.jobs[0].id).values() if r.status == "waiting" and r.buffered]
    assert len([r for r in buffered if r.attempt == 0]) == 2  # the case still reaches what it is about
