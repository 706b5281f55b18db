"""Every bound tempo enforces, in one place.

Names carry their unit last (`body_bytes_max`, `lease_s_max`). How bounds relate
to each other is asserted at import, so an edit that breaks a relation stops the
program at start-up instead of misbehaving under load.
"""

# Request bodies (API.md "General").
body_bytes_max = 1 << 20
batch_body_bytes_max = 32 << 20
payload_bytes_max = 64 << 10
output_bytes_max = 64 << 10

# Field bounds (API.md "Jobs").
name_chars_max = 200
target_chars_max = 2048
request_key_chars_max = 200
queue_name_chars_max = 200
worker_chars_max = 200
queues_per_claim_max = 100
lease_s_min = 1
lease_s_max = 3600
lease_s_default = 60
jitter_s_max = 3600
attempts_max = 100
attempts_default = 4
backoff_gaps_max = 20
backoff_gap_s_max = 86400
backoff_s_default = (10, 60, 600)
every_s_min = 1
# A repeating schedule's period may not exceed ten years: past that, grid
# arithmetic on UNIX milliseconds still works, but such a job is a typo.
every_s_max = 10 * 366 * 86400
cron_chars_max = 200

# Pages and batches.
batch_jobs_max = 1000
page_limit_max = 1000
page_limit_default = 100
preview_count_max = 1000
preview_count_default = 10
claim_runs_max = 1000
claim_wait_s_max = 60
batch_items_max = 1000

# Group commit: commands waiting for the next batch, and commands per batch.
# Past the pending bound a write is refused with 503 instead of queueing
# without limit; a batch is one LMDB transaction and one fsync.
commit_pending_max = 100_000
commit_batch_commands_max = 50_000

# Storage.
lmdb_map_bytes = 64 << 30
lmdb_max_dbs = 16
# Runs are partitioned by due minute and by shard = hash(job ID) mod shards.
run_shards = 64
# A job's run slot is one millisecond; a trigger moves to the next free one,
# looking this far at most before giving up with a conflict.
trigger_slot_probe_max = 1000

# Time (API.md: times are kept to the millisecond).
minute_ms = 60_000
# The latest UNIX millisecond a stored record may hold: runs keys carry the
# due minute in 32 bits (engine/keys.py). Decoding checks it (records.py).
time_ms_max = (1 << 32) * minute_ms - 1

# Shutdown: how long in-flight requests may take to finish after SIGTERM.
shutdown_grace_s = 10.0

assert payload_bytes_max < body_bytes_max
assert body_bytes_max <= batch_body_bytes_max
assert batch_jobs_max * payload_bytes_max <= batch_body_bytes_max * 2
assert lease_s_min <= lease_s_default <= lease_s_max
assert 1 <= attempts_default <= attempts_max
assert len(backoff_s_default) <= backoff_gaps_max
assert all(0 <= gap <= backoff_gap_s_max for gap in backoff_s_default)
assert 1 <= page_limit_default <= page_limit_max
assert 1 <= preview_count_default <= preview_count_max
assert batch_jobs_max <= commit_batch_commands_max <= commit_pending_max
assert 0 < run_shards <= 256  # the shard is one byte of the runs key

# Dispatch (DESIGN.md "Dispatch on the leader").
# The loader keeps every waiting run due before the end of the minute after
# now + readahead in the timing wheel; each (minute) partition is read once.
readahead_ms = 30_000
dispatch_tick_ms = 10
lease_check_ms = 100
expiries_per_command_max = 1000
http_executor_concurrency = 64
http_executor_batch_runs = 100
events_page_max = 1000
events_wait_s_max = 60
# Rows one loader step may read before yielding to the event loop, and the
# runs the dispatcher holds in memory (wheel and ready queues) at most; past
# that, older runs stream in as claims take them out.
loader_rows_per_step = 5000
dispatch_memory_runs_max = 100_000

assert readahead_ms >= 1000
assert claim_runs_max * 10 <= dispatch_memory_runs_max
assert dispatch_tick_ms <= lease_check_ms

# Cluster (docs/operations.md "Running a cluster"). Raft counts ticks; a tick
# is `raft_tick_ms` of wall time, so an election timeout is 1-2 s and a leader
# sends heartbeats every tick.
raft_tick_ms = 100
raft_election_ticks = 10
raft_heartbeat_ticks = 1
# Commands are packed into one log entry up to about this many bytes.
raft_entry_bytes_target = 4 << 20
# The log is compacted into a snapshot every this many applied entries.
snapshot_entries = 20_000
# Peer transport: one write of a stream carries frames up to this many bytes; a frame is
# one raft message, at most `peer_frame_bytes_max` (a batch create's entry is
# below 40 MiB); at most `peer_queue_frames_max` wait per peer (raft resends
# what is dropped); every peer request is bounded by `peer_timeout_s`.
peer_post_bytes_target = 8 << 20
peer_frame_bytes_max = 64 << 20
peer_queue_frames_max = 8192
peer_timeout_s = 5.0
# A peer stream is closed and a new one opened this often.
peer_stream_s = 30.0
peer_backoff_s_min = 0.05
peer_backoff_s_max = 1.0
# A node that leads when told to stop hands leadership over first, waiting
# this long at most.
transfer_wait_s = 3.0

assert raft_election_ticks > raft_heartbeat_ticks >= 1
assert batch_body_bytes_max + (8 << 20) <= peer_frame_bytes_max
assert raft_entry_bytes_target <= peer_post_bytes_target
