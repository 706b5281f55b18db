"""A claimed run keeps the lease length it was claimed with across a leader
change, even when a patch changed the job's `lease_s` since
(docs/semantics.md "Changing a job")."""

import msgspec
import pytest

from tempo.engine.commands import PatchJob
from tempo.engine.dispatch_core import DispatchCore

from .test_dispatch_core import OWNER, Rig, run_id


@pytest.fixture
def rig(tmp_path):
    made = Rig(str(tmp_path / "data"))
    yield made
    made.check()
    made.close()


def test_a_new_leader_renews_a_claimed_run_with_the_lease_it_was_claimed_with(rig: Rig) -> None:
    rig.create(lease_s=30)
    rig.tick()
    [claimed] = rig.claim()
    job = rig.store.get_job_any(claimed.run.job_id)
    assert job is not None
    longer = msgspec.structs.replace(job, lease_s=600)
    patched = rig.commit(PatchJob(rig.now_ms, OWNER, job.id, job.version, longer, False, None, None))
    assert patched.lease_s == 600
    rig.advance(10)
    fresh = DispatchCore(rig.store, rig.now_ms)
    fresh.load(rig.now_ms, 900.0)
    lease_ms = fresh.lease_of(claimed.run.job_id, claimed.run.nominal_ms, 1, rig.now_ms, 900.0)
    assert lease_ms == rig.now_ms + 30_000
    # Heartbeats extend it by the same length.
    assert fresh.heartbeat(OWNER, run_id(claimed), 1, rig.now_ms + 5_000, 905.0) == rig.now_ms + 35_000
