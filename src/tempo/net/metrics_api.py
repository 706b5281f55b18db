"""`GET /metrics`: the node's counters in Prometheus text (docs/operations.md
"Metrics"), mixed into `net/api.py`'s `Api`, which sets up the counters
it names."""

from collections import Counter

from tempo import metrics as prom
from tempo.clock import Clock
from tempo.engine import (
    LATENESS_BUCKETS_S,
    Dispatcher,
    Jobs,
    Store,
)
from tempo.net.asgi import (
    BodyBudget,
    Request,
    Response,
)
from tempo.net.http import ConnectionGate
from tempo.net.notify import NotifyCounts
from tempo.net.notify import metric_lines as notify_metric_lines
from tempo.net.peer import EntryCheck
from tempo.node import ClusterMember, Standalone
from tempo.node.replica import Phase, Replica


class MetricsHandlers:
    """`GET /metrics` and the groups of lines it is made of."""

    # Set up by `Api.__init__`.
    bodies: BodyBudget
    cancels: Counter[str]
    clock: Clock | None
    dispatcher: Dispatcher
    durations: dict[str, prom.Histogram]
    entry_check: EntryCheck
    gate: ConnectionGate
    in_flight: int
    internal_errors: int
    jobs: Jobs
    long_polls: int
    node: Standalone | ClusterMember
    notify_counts: NotifyCounts | None
    pauses: prom.Pauses
    peer_frames_dropped: int
    rate_limited: Counter[str]
    requests: Counter[tuple[str, int]]
    store: Store

    async def metrics(self, request: Request) -> Response:
        lines = self._http_metrics()
        committer = self.jobs.committer
        lines += [
            "# HELP tempo_commit_batches_total Group-commit batches written (one fsync each).",
            "# TYPE tempo_commit_batches_total counter",
            f"tempo_commit_batches_total {committer.batches_committed}",
            "# HELP tempo_commit_commands_total Commands written by group commit.",
            "# TYPE tempo_commit_commands_total counter",
            f"tempo_commit_commands_total {committer.commands_committed}",
        ]
        lines += prom.head(
            "tempo_commit_commands_undecodable_total", "counter",
            "Commands refused (400) before they were proposed: the log's decoder refuses them.",
        )
        lines.append(prom.sample("tempo_commit_commands_undecodable_total", committer.commands_undecodable))
        if isinstance(self.node, ClusterMember):
            lines += _raft_metrics(self.node.replica)
            lines += prom.head(
                "tempo_peer_frames_dropped_total", "counter", "Corrupt raft frames from peers, dropped unread."
            )
            lines.append(prom.sample("tempo_peer_frames_dropped_total", self.peer_frames_dropped))
            lines += prom.head(
                "tempo_raft_entries_refused_total", "counter",
                "The leader's log entries this node could not decode, each counted once.",
            )
            lines.append(prom.sample("tempo_raft_entries_refused_total", self.entry_check.refused))
        else:
            lines += prom.head("tempo_commit_batch_commands", "histogram", "Commands per group-commit batch.")
            lines += prom.lines("tempo_commit_batch_commands", committer.batch_commands)
        lines += self._storage_metrics()
        lines += self._dispatch_metrics()
        lines += self._fairness_metrics()
        lines += self._clock_metrics()
        lines += notify_metric_lines(self.notify_counts)
        lines += self.pauses.lines()
        body = ("\n".join(lines) + "\n").encode()
        return Response(200, body, b"text/plain; version=0.0.4")

    def _http_metrics(self) -> list[str]:
        lines = prom.head("tempo_http_requests_total", "counter", "HTTP requests answered, by route and status.")
        for (route, status), count in sorted(self.requests.items()):
            lines.append(prom.sample("tempo_http_requests_total", count, {"route": route, "status": str(status)}))
        lines += prom.head(
            "tempo_http_request_duration_seconds", "histogram",
            "Seconds from a request's arrival to its answer sent, by route (long polls included).",
        )
        for route, histogram in sorted(self.durations.items()):
            lines += prom.lines("tempo_http_request_duration_seconds", histogram, {"route": route})
        lines += prom.head(
            "tempo_http_internal_errors_total", "counter",
            "Requests answered 500: an unexpected error, logged with its error_id.",
        )
        lines.append(prom.sample("tempo_http_internal_errors_total", self.internal_errors))
        lines += prom.head("tempo_http_body_bytes_in_flight", "gauge", "Bytes of request bodies held now.")
        lines.append(prom.sample("tempo_http_body_bytes_in_flight", self.bodies.used_bytes))
        lines += prom.head(
            "tempo_http_body_bytes_in_flight_max", "gauge", "The budget for request bodies held at once, in bytes."
        )
        lines.append(prom.sample("tempo_http_body_bytes_in_flight_max", self.bodies.bytes_max))
        lines += prom.head(
            "tempo_http_bodies_refused_total", "counter", "Requests answered 503: their body did not fit the budget."
        )
        lines.append(prom.sample("tempo_http_bodies_refused_total", self.bodies.refused))
        lines += prom.head("tempo_http_requests_in_flight", "gauge", "Requests being handled, of those bounded.")
        lines.append(prom.sample("tempo_http_requests_in_flight", self.in_flight))
        lines += prom.head("tempo_http_long_polls_in_flight", "gauge", "Claims and event reads that may wait.")
        lines.append(prom.sample("tempo_http_long_polls_in_flight", self.long_polls))
        lines += prom.head("tempo_http_connections_open", "gauge", "HTTP connections open.")
        lines.append(prom.sample("tempo_http_connections_open", self.gate.open))
        lines += prom.head(
            "tempo_http_connections_refused_total", "counter",
            "Connections answered 503 and closed: too many open from their address, or in all and none idle.",
        )
        lines.append(prom.sample("tempo_http_connections_refused_total", self.gate.refused))
        lines += prom.head(
            "tempo_http_connections_evicted_total", "counter",
            "Idle connections closed to make room for a new one past connections_max.",
        )
        lines.append(prom.sample("tempo_http_connections_evicted_total", self.gate.evicted))
        return lines

    def _storage_metrics(self) -> list[str]:
        file_bytes, used_bytes, map_bytes = self.store.usage()
        lines = prom.head("tempo_lmdb_file_bytes", "gauge", "Size of the LMDB data file.")
        lines.append(prom.sample("tempo_lmdb_file_bytes", file_bytes))
        lines += prom.head("tempo_lmdb_used_bytes", "gauge", "LMDB pages up to the highest in use, in bytes.")
        lines.append(prom.sample("tempo_lmdb_used_bytes", used_bytes))
        lines += prom.head("tempo_lmdb_map_bytes", "gauge", "LMDB map size: the most the data file may hold.")
        lines.append(prom.sample("tempo_lmdb_map_bytes", map_bytes))
        lines += prom.head("tempo_lmdb_map_used_ratio", "gauge", "Used bytes over the map size; writes fail at 1.")
        lines.append(prom.sample("tempo_lmdb_map_used_ratio", used_bytes / map_bytes))
        lines += prom.head(
            "tempo_lmdb_commit_seconds", "histogram", "Seconds per write-transaction commit (pages written and fsynced)."
        )
        lines += prom.lines("tempo_lmdb_commit_seconds", self.store.txn_commit_seconds)
        storage = self.jobs.committer.storage
        lines += prom.head("tempo_lmdb_map_grown_total", "counter", "Times the full LMDB map grew into free disk.")
        lines.append(prom.sample("tempo_lmdb_map_grown_total", self.store.map_grown))
        lines += prom.head("tempo_storage_writes_refused", "gauge", "1 while writes are refused: disk or map full.")
        lines.append(prom.sample("tempo_storage_writes_refused", int(storage.refused is not None)))
        lines += prom.head("tempo_storage_refusals_total", "counter", "Times writes became refused for storage.")
        lines.append(prom.sample("tempo_storage_refusals_total", storage.refusals))
        lines += prom.head(
            "tempo_storage_refused_commands_total", "counter", "Write commands answered 507 insufficient_storage."
        )
        lines.append(prom.sample("tempo_storage_refused_commands_total", storage.refused_commands))
        return lines

    def _clock_metrics(self) -> list[str]:
        """Wall-clock steps this node saw, and how far its scheduler time is
        ahead of the wall clock (docs/semantics.md "Clocks")."""
        if self.clock is None:
            return []
        lines = prom.head("tempo_clock_steps_total", "counter", "Wall-clock steps seen, by direction.")
        for direction, count in sorted(self.clock.steps.items()):
            lines.append(prom.sample("tempo_clock_steps_total", count, {"direction": direction}))
        lines += prom.head(
            "tempo_clock_lead_seconds", "gauge", "Scheduler time ahead of the wall clock (a step back being absorbed)."
        )
        lines.append(prom.sample("tempo_clock_lead_seconds", self.clock.lead_ms() / 1000))
        return lines

    def _fairness_metrics(self) -> list[str]:
        """Per owner: runs in flight, runs held back by a limit, and creates
        refused with 429 (docs/operations.md "Fairness between owners")."""
        d = self.dispatcher
        series = (
            ("tempo_owner_runs_in_flight", "gauge", "Runs claimed and not finished, by owner (leader only).",
             d.core.in_flight),
            ("tempo_owner_runs_held", "gauge", "Runs due but held back by the owner's limits, by owner.",
             d.held_back()),
            ("tempo_owner_creates_rate_limited_total", "counter", "Create requests refused with 429, by owner.",
             self.rate_limited),
        )
        lines: list[str] = []
        for name, kind, text, by_owner in series:
            lines += prom.head(name, kind, text)
            lines += [prom.sample(name, n, {"owner": owner}) for owner, n in sorted(by_owner.items())]
        return lines

    def _dispatch_metrics(self) -> list[str]:
        d = self.dispatcher.core
        lines = []
        for name in ("due", "claimed", "done", "failed", "waiting", "expired", "undelivered", "timed_out", "cancelled"):
            metric = "retried" if name == "waiting" else name
            lines += [
                f"# HELP tempo_runs_{metric}_total Runs {metric}.",
                f"# TYPE tempo_runs_{metric}_total counter",
                f"tempo_runs_{metric}_total {d.counters[name]}",
            ]
        lines += prom.head("tempo_runs_skipped_total", "counter", "Runs skipped, by reason (an overlap policy).")
        lines.append(prom.sample("tempo_runs_skipped_total", d.counters["skipped_overlap"], {"reason": "overlap"}))
        lines += prom.head(
            "tempo_run_cancels_total", "counter",
            "POST /v1/runs/{id}/cancel answered, by what it did (a waiting run cancelled, a claimed run asked to stop).",
        )
        lines += [prom.sample("tempo_run_cancels_total", self.cancels[kind], {"result": kind})
                  for kind in ("cancelled", "requested")]
        lines += [
            "# HELP tempo_claim_key_repeats_total Claims answered from their claim key's record.",
            "# TYPE tempo_claim_key_repeats_total counter",
            f"tempo_claim_key_repeats_total {d.counters['claim_key_repeats']}",
            "# HELP tempo_runs_due_not_claimed Runs due but not claimed yet.",
            "# TYPE tempo_runs_due_not_claimed gauge",
            f"tempo_runs_due_not_claimed {d.ready_count()}",
            "# HELP tempo_lease_heap_entries Entries in the lease heap (at most 2 per lease plus a slack).",
            "# TYPE tempo_lease_heap_entries gauge",
            f"tempo_lease_heap_entries {d.lease_heap_entries}",
            "# HELP tempo_claim_lateness_seconds Claim time minus due time.",
            "# TYPE tempo_claim_lateness_seconds histogram",
        ]
        total = 0
        for bound, count in zip((*LATENESS_BUCKETS_S, "+Inf"), d.lateness_buckets, strict=True):
            total += count
            lines.append(f'tempo_claim_lateness_seconds_bucket{{le="{bound}"}} {total}')
        lines += [
            f"tempo_claim_lateness_seconds_sum {d.lateness_sum_s:.6f}",
            f"tempo_claim_lateness_seconds_count {total}",
        ]
        return lines


def _raft_metrics(replica: Replica) -> list[str]:
    lines = [
        "# HELP tempo_raft_commit_seconds_total Seconds from proposal to applied, summed over this leader's entries.",
        "# TYPE tempo_raft_commit_seconds_total counter",
        f"tempo_raft_commit_seconds_total {replica.propose_to_apply_seconds_sum:.6f}",
        "# HELP tempo_raft_write_seconds_total Seconds the replica loop spent in its write transactions.",
        "# TYPE tempo_raft_write_seconds_total counter",
        f"tempo_raft_write_seconds_total {replica.write_seconds_sum:.6f}",
        "# HELP tempo_raft_readies_total Raft Ready batches handled (one write transaction or two each).",
        "# TYPE tempo_raft_readies_total counter",
        f"tempo_raft_readies_total {replica.readies}",
        "# HELP tempo_raft_term The current raft term.",
        "# TYPE tempo_raft_term gauge",
        f"tempo_raft_term {replica.term}",
        "# HELP tempo_raft_applied_index The last applied log index.",
        "# TYPE tempo_raft_applied_index gauge",
        f"tempo_raft_applied_index {replica.applied_index}",
    ]
    lines += prom.head("tempo_raft_commit_index", "gauge", "The last log index this node knows is committed.")
    lines.append(prom.sample("tempo_raft_commit_index", replica.commit_index))
    lines += prom.head("tempo_raft_is_leader", "gauge", "1 while this node leads (with an entry of its term applied).")
    lines.append(prom.sample("tempo_raft_is_leader", int(replica.phase is Phase.LEADING)))
    lines += prom.head("tempo_raft_leader_changes_total", "counter", "Times this node learned of a new leader.")
    lines.append(prom.sample("tempo_raft_leader_changes_total", replica.leader_changes))
    lines += prom.head("tempo_raft_entry_commands", "histogram", "Commands per log entry this node proposed.")
    lines += prom.lines("tempo_raft_entry_commands", replica.batch_commands)
    lines += prom.head("tempo_raft_ready_entries", "histogram", "Log entries per Ready written to disk.")
    lines += prom.lines("tempo_raft_ready_entries", replica.ready_entries)
    return lines
