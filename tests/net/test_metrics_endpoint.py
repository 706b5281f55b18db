"""`GET /metrics` of a real server is valid Prometheus text and covers the
API, group commit, storage and dispatch; the raft families render too."""

import time
from types import SimpleNamespace

import pytest

from conftest import unique
from tempo.metrics import COUNT_BUCKETS, Histogram
from tempo.net.metrics_api import _raft_metrics
from tempo.node.replica import Phase
from test_metrics import parse_exposition, samples_of


def test_metrics_parse_and_cover_api_commit_storage_dispatch(http):
    queue = unique("q")
    created = http.post("/v1/jobs", json={"target": f"queue:{queue}", "schedule": {"at": "2020-01-01T00:00:00Z"}})
    assert created.status_code == 201
    claimed = http.post("/v1/claim", json={"worker": "w", "queues": [queue], "wait_s": 5}).json()["runs"]
    assert len(claimed) == 1
    assert http.get("/v1/jobs/nope").status_code == 404
    time.sleep(0.05)
    answer = http.get("/metrics")
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = parse_exposition(answer.text)

    kinds = {name: family["type"] for name, family in families.items()}
    assert kinds["tempo_http_requests_total"] == "counter"
    assert kinds["tempo_http_request_duration_seconds"] == "histogram"
    assert kinds["tempo_lmdb_commit_seconds"] == "histogram"
    assert kinds["tempo_commit_batch_commands"] == "histogram"
    assert kinds["tempo_claim_lateness_seconds"] == "histogram"
    for gauge in ("tempo_http_requests_in_flight", "tempo_http_long_polls_in_flight", "tempo_http_connections_open",
                  "tempo_lmdb_file_bytes", "tempo_lmdb_used_bytes", "tempo_lmdb_map_bytes",
                  "tempo_lmdb_map_used_ratio", "tempo_runs_due_not_claimed"):
        assert kinds[gauge] == "gauge", gauge

    assert samples_of(families, "tempo_http_requests_total", route="jobs", status="201")[0] >= 1
    assert samples_of(families, "tempo_http_requests_total", route="job", status="404")[0] >= 1
    assert samples_of(families, "tempo_http_request_duration_seconds_count", route="jobs")[0] >= 1
    [claim_sum] = samples_of(families, "tempo_http_request_duration_seconds_sum", route="claim")
    assert 0 < claim_sum < 60
    assert samples_of(families, "tempo_lmdb_commit_seconds_count")[0] >= 2  # the create and the claim
    assert samples_of(families, "tempo_commit_batch_commands_count")[0] >= 2
    [file_bytes] = samples_of(families, "tempo_lmdb_file_bytes")
    [used_bytes] = samples_of(families, "tempo_lmdb_used_bytes")
    [map_bytes] = samples_of(families, "tempo_lmdb_map_bytes")
    [ratio] = samples_of(families, "tempo_lmdb_map_used_ratio")
    assert 0 < used_bytes <= file_bytes <= map_bytes
    assert ratio == pytest.approx(used_bytes / map_bytes, rel=1e-9) and 0 < ratio < 1
    assert samples_of(families, "tempo_http_connections_open")[0] >= 1
    assert samples_of(families, "tempo_runs_claimed_total")[0] >= 1
    # Nothing got past the request checks that the log's decoder refuses.
    assert kinds["tempo_commit_commands_undecodable_total"] == "counter"
    assert samples_of(families, "tempo_commit_commands_undecodable_total") == [0]
    # A single node has no raft.
    assert not any(name.startswith("tempo_raft_") for name in families)


def test_raft_metrics_render_as_valid_families():
    entry_commands = Histogram(COUNT_BUCKETS)
    for n in (1, 3, 700):
        entry_commands.observe(n)
    replica = SimpleNamespace(
        propose_to_apply_seconds_sum=1.5, write_seconds_sum=0.25, readies=10, term=7, applied_index=40, commit_index=41,
        phase=Phase.LEADING, leader_changes=2, batch_commands=entry_commands, ready_entries=Histogram(COUNT_BUCKETS),
    )
    families = parse_exposition("\n".join(_raft_metrics(replica)) + "\n")
    assert samples_of(families, "tempo_raft_term") == [7]
    assert samples_of(families, "tempo_raft_commit_index") == [41]
    assert samples_of(families, "tempo_raft_applied_index") == [40]
    assert samples_of(families, "tempo_raft_is_leader") == [1]
    assert samples_of(families, "tempo_raft_leader_changes_total") == [2]
    assert samples_of(families, "tempo_raft_entry_commands_bucket", le="5") == [2]
    assert samples_of(families, "tempo_raft_entry_commands_count") == [3]
    assert samples_of(families, "tempo_raft_ready_entries_count") == [0]
    replica.phase = Phase.FOLLOWER
    assert samples_of(parse_exposition("\n".join(_raft_metrics(replica)) + "\n"), "tempo_raft_is_leader") == [0]


def test_event_loop_lag_and_gc_pauses_are_exported(http):
    time.sleep(0.2)  # some 20 ticks of the 10 ms probe
    families = parse_exposition(http.get("/metrics").text)
    assert families["tempo_event_loop_lag_seconds"]["type"] == "histogram"
    assert families["tempo_gc_pause_seconds"]["type"] == "histogram"
    assert samples_of(families, "tempo_event_loop_lag_seconds_count")[0] >= 5
    [lag_max] = samples_of(families, "tempo_event_loop_lag_max_seconds")
    assert lag_max >= 0
    assert samples_of(families, "tempo_gc_pause_max_seconds")[0] >= 0
