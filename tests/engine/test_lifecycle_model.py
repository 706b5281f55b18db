"""The job lifecycle against its model (tests/engine/lifecycle_model.py):
creates, patches, claims (also ahead of the due time), results, lease
expiries, timeouts, cancels, pauses, resumes, triggers, deletes and the
starts of held runs interleaved by hypothesis, checked
after every step. `TEMPO_LIFECYCLE_EXAMPLES` and `TEMPO_LIFECYCLE_STEPS`
run it longer; `TEMPO_LIFECYCLE_RANDOM=1` draws new examples rather than
the fixed ones of the normal suite."""

import os

from hypothesis import HealthCheck, settings

from .lifecycle_model import LifecycleModel

EXAMPLES = int(os.environ.get("TEMPO_LIFECYCLE_EXAMPLES", "200"))
STEPS = int(os.environ.get("TEMPO_LIFECYCLE_STEPS", "60"))

TestLifecycle = LifecycleModel.TestCase
TestLifecycle.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize=os.environ.get("TEMPO_LIFECYCLE_RANDOM") != "1",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
