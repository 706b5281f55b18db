"""Every bound tempo enforces, in one place.

Names carry their unit last (`body_bytes_max`, `lease_s_max`). How bounds relate
to each other is asserted at import, so an edit that breaks a relation stops the
program at start-up instead of misbehaving under load.
"""

# Request bodies (docs/api.md "General rules").
body_bytes_max = 1 << 20
batch_body_bytes_max = 32 << 20
payload_bytes_max = 64 << 10
output_bytes_max = 64 << 10

# Field bounds (docs/api.md "Jobs").
name_chars_max = 200
# The note a pause may carry (`POST /v1/jobs/{id}/pause`), in characters.
pause_note_chars_max = 1000
# A repeating schedule's `max_runs`: how many slots the job runs before it
# is completed (docs/semantics.md "End conditions").
schedule_runs_max = 1_000_000_000
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
# A worker's long poll of its signals (docs/api.md "Signals"): as long as a
# claim may wait, and the runs one poll names, as a heartbeats batch.
signals_wait_s_max = claim_wait_s_max
signals_runs_max = batch_items_max

# Group commit: commands waiting for the next batch, and commands per batch.
# Past the pending bound a write is refused with 503 instead of queueing
# without limit; a batch is one LMDB transaction and one fsync.
commit_pending_max = 100_000
commit_batch_commands_max = 50_000
# Claims before results (docs/semantics.md "Claims before results"): on a
# node alone, while workers claim a backlog of due runs (a claim of a worker
# that may claim again meanwhile left runs ready in its queues within the
# last `claim_backlog_gap_ms`), the batches take claims ahead of the results
# waiting, for at most `results_wait_for_claims_ms` at a stretch; then the
# results go.
claim_backlog_gap_ms = 100
results_wait_for_claims_ms = 1000
# The workers remembered as claiming while their results wait (engine/claim_backlog.py).
claim_backlog_workers_kept_max = 10_000

# Storage.
# Runs are partitioned by due minute and by shard = hash(job ID) mod shards.
run_shards = 64
# A job's run slot is one millisecond; a trigger moves to the next free one,
# looking this far at most before giving up with a conflict.
trigger_slot_probe_max = 1000

# Time (docs/api.md: times are kept to the millisecond).
minute_ms = 60_000
# The time domain of what tempo stores (docs/api.md "Times"): every instant
# a record or a key holds lies in [stored_ms_min, time_ms_max]. Keys hold
# unsigned milliseconds, so nothing before 1970; runs keys carry the due
# minute in 32 bits, so nothing after year 10136. engine/keys.py asserts
# that its encodings hold both ends; decoding checks them (records.py `Ms`),
# on every node alike.
stored_ms_min = 0  # 1970-01-01T00:00:00.000Z
time_ms_max = (1 << 32) * minute_ms - 1

# Shutdown: how long the HTTP server waits for what is still in flight once
# the node has answered its long polls, waited for the requests in flight and
# closed its peers' streams (`shutdown_requests_s` below): a last margin.
shutdown_grace_s = 0.5
# With TLS: a connection that has not finished its handshake by then is closed.
tls_handshake_timeout_s = 10.0

# The edge (docs/operations.md "Limits"). A request line and headers of
# more than `header_bytes_max` are `431` (from hypercorn when they arrive in
# pieces, from tempo when whole). hypercorn enforces the next three: a
# connection kept alive idle `keep_alive_timeout_s` after its last answer is
# closed (a late head: `header_read_timeout_s`, below); so is one from which no byte
# arrives for `read_timeout_s`, which must outlast the longest long poll and
# an idle peer stream, since hypercorn keeps reading while a request waits.
header_bytes_max = 16 << 10
keep_alive_timeout_s = 75.0
read_timeout_s = 90.0
listen_backlog = 1024
# tempo enforces the rest. Connections open at once: past this a new one is
# answered `503` and closed before its request is read; keep it below the
# process's open-file limit (`fds_reserved` are kept for LMDB, snapshots,
# peer links and the HTTP executor).
connections_max = 4096
fds_reserved = 256
# Requests being handled at once (peer streams, /healthz, /readyz and
# /metrics not counted); past it, `503 overloaded` with Retry-After.
requests_in_flight_max = 2048
# Of those, long polls (`POST /v1/claim`, `GET /v1/events` with wait_s > 0).
long_polls_max = 1024
# A request body must arrive whole within this long, else `408`.
body_read_timeout_s = 30.0
# A body refused unread (413 over its route's bound, 503 over the body
# budget) is still read and dropped chunk by chunk up to this many bytes, so
# the client, which sends it all before it reads, gets the answer instead of
# a reset connection (net/asgi.py `discard_body`); nothing of it is kept.
# Just past the largest bound (a batch's 32 MiB): a body far past every
# bound is not worth the bandwidth, and its client gets the reset.
refused_body_discard_bytes_max = 36 << 20
# ... as long as it keeps coming: a client that sent only its headers and
# waits for the answer gets it after this pause.
refused_body_discard_gap_s = 0.5
# A connection refused before its request is read (503: too many
# connections, or too many from its address) is drained the same way, of
# what its client sent meanwhile: a head and the start of a body at most.
refused_connection_drain_bytes_max = 64 << 10
refused_connection_drain_s = 0.5
# A connection refused for `connections_max` tells the client to come back
# after this long, as every other `503` does (docs/api.md: `Retry-After: 1`).
retry_after_s = 1
# What the config file's `[http]` table may set them to.
http_setting_max = 1_000_000
body_read_timeout_s_min = 0.1
body_read_timeout_s_max = 3600.0

assert payload_bytes_max < body_bytes_max
assert body_bytes_max <= batch_body_bytes_max
assert batch_body_bytes_max < refused_body_discard_bytes_max
assert batch_jobs_max * payload_bytes_max <= batch_body_bytes_max * 2
assert lease_s_min <= lease_s_default <= lease_s_max
assert 1 <= attempts_default <= attempts_max
assert len(backoff_s_default) <= backoff_gaps_max
assert all(0 <= gap <= backoff_gap_s_max for gap in backoff_s_default)
assert 1 <= page_limit_default <= page_limit_max
assert 1 <= preview_count_default <= preview_count_max
assert batch_jobs_max <= commit_batch_commands_max <= commit_pending_max
assert 0 < claim_backlog_gap_ms <= results_wait_for_claims_ms
assert 0 < run_shards <= 256  # the shard is one byte of the runs key

# Dispatch (docs/design.md "Dispatch on the leader").
# The loader keeps every waiting run due before the end of the minute after
# now + readahead in the timing wheel; each (minute) partition is read once.
readahead_ms = 30_000
dispatch_tick_ms = 10
lease_check_ms = 100
# The dispatch loop sleeps until its tick has work (`DispatchCore.next_tick_ms`),
# at least a tick and at most this long: the bound on how late it notices a
# forward step of the wall clock, which moves due times without an entry.
dispatch_idle_wake_ms = 100
expiries_per_command_max = 1000
http_executor_concurrency = 64
http_executor_batch_runs = 100
events_page_max = 1000
events_wait_s_max = 60
# Log lines about failed or expired attempts, per commit at most (a mass
# expiry after a worker fleet dies is one summary line past this).
run_log_lines_max = 100
# Rows one loader step may read before yielding to the event loop, and the
# runs the dispatcher holds in memory (wheel and ready queues) at most; past
# that, older runs stream in as claims take them out.
loader_rows_per_step = 5000
dispatch_memory_runs_max = 100_000
# Apply remembers the owner of the jobs it created or read (job IDs are
# never reused and a job's owner never changes), so that a one-off's claim,
# which reads no job, moves its run's runs-by-status row without reading
# the job for its owner. Forgotten all at once past this many: as many as
# the dispatcher holds in memory, with room (about 100 bytes each).
owners_remembered_max = 2 * dispatch_memory_runs_max
# Each owner's share of that memory (docs/operations.md "Fairness between
# owners"). An owner holding `dispatch_owner_runs_max` loaded runs before a
# minute is scanned is skipped from there on: its waiting runs stay in the
# table and are read again, from where it was skipped, once it holds fewer
# than `dispatch_owner_low_water_runs`. The total above counts each owner's
# runs up to its share, so an owner over its share never stops the loading
# of the others' runs. A quarter of the total: four owners at their share
# fill it. A minute of an owner below its share loads whole, and the change
# feed lets an owner past its share while memory has room, so a spike of
# one owner (25,000 or 100,000 runs due in one second) loads as before. The
# low water mark is half the share, so a re-read (a scan of the minutes from
# the skip point on) serves at least 12,500 claims.
dispatch_owner_runs_max = 25_000
dispatch_owner_low_water_runs = 12_500

# Pre-dispatch (docs/semantics.md "Pre-dispatch"): a claim may take runs
# due within the next `claim_ahead_ms_max` (its `ahead_ms`); the wheel has
# them already, since that is well inside the read-ahead. A pause, cancel,
# delete or patch stamped more than `predispatch_stop_ms` before a
# pre-claimed run's due time stops it: the worker asks to start it no
# earlier than that (`POST /v1/starts`), and the leader answers only once
# every command stamped before then is applied.
claim_ahead_ms_max = 10_000
# A claim that looks ahead and found nothing looks again this often: runs
# coming due within its `ahead_ms` wake no claimer.
claim_ahead_poll_ms = 50
predispatch_stop_ms = 100
# The runs one `POST /v1/starts` names. A worker asks for a wave's runs
# all at once, each call held by the leader until the wave's stop point,
# so a wave of 100,000 must fit in fewer calls than a client's connections
# (the worker library keeps 16): at 1000 a call its calls queued for a
# connection and the last were answered half a second after the due time
# (docs/performance.md "Pre-dispatch"). An item of a run ID and an
# attempt below 1000 is at most `starts_item_bytes_max` of JSON, so a
# full call fits `body_bytes_max`.
starts_runs_max = 10_000
starts_item_bytes_max = 72

assert readahead_ms >= 1000
assert claim_ahead_ms_max + 1000 <= readahead_ms
assert 0 < predispatch_stop_ms < claim_ahead_ms_max
assert starts_runs_max * starts_item_bytes_max <= body_bytes_max
assert long_polls_max < requests_in_flight_max <= connections_max
assert read_timeout_s > max(claim_wait_s_max, events_wait_s_max, signals_wait_s_max)
assert claim_runs_max * 10 <= dispatch_memory_runs_max
assert claim_runs_max <= dispatch_owner_low_water_runs < dispatch_owner_runs_max
assert dispatch_owner_runs_max * 4 <= dispatch_memory_runs_max
assert dispatch_tick_ms <= lease_check_ms
assert dispatch_tick_ms <= dispatch_idle_wake_ms

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
# hypercorn's read timeout must outlast an idle peer stream (see "The edge").
assert read_timeout_s > peer_stream_s + peer_timeout_s
peer_backoff_s_min = 0.05
peer_backoff_s_max = 1.0
# A node that leads when told to stop hands leadership over first, waiting
# this long at most (a transfer to a follower that is caught up takes a few
# heartbeats; this keeps the whole stop within 2 s, see "Stopping" below).
transfer_wait_s = 1.0
# A read on the leader waits at most this long for its ReadIndex round (a
# heartbeat quorum confirming it still leads) and for its applied index to
# reach the commit index of that round (docs/semantics.md "Reads"); past it,
# `503 no_quorum`. A leader cut off from its majority steps down within two
# election timeouts (CheckQuorum), which fails its reads sooner; this bounds
# the rest (a majority that is slow, not gone).
read_confirm_timeout_s = 2 * 2 * raft_election_ticks * raft_tick_ms / 1000

assert raft_election_ticks > raft_heartbeat_ticks >= 1
# A read waits out at least the longest election timeout: a cluster that
# is merely electing, or a follower that answers slowly, is not a lost quorum.
assert read_confirm_timeout_s >= 2 * raft_election_ticks * raft_tick_ms / 1000
assert batch_body_bytes_max + (8 << 20) <= peer_frame_bytes_max
assert raft_entry_bytes_target <= peer_post_bytes_target

# Retention (docs/operations.md "Retention"). Finished runs and events live in
# history buckets, one per day they finished (`day_ms`), in a ring of
# `history_buckets` LMDB databases opened at start-up. A bucket is dropped
# whole once every run in it is older than the retention period, which the
# leader checks every `retention_check_s`. The ring holds the days a period
# keeps (retention days + the current one) plus one for a drop that is late
# past midnight, so in normal operation no bucket's slot is reused early.
day_ms = 86_400_000
retention_days_default = 30
retention_days_min = 1
retention_days_max = 366
retention_check_s = 60.0
history_buckets = retention_days_max + 2
# The fixed tables (state, raft log and raft state) need a few databases; the
# ring of history buckets the rest. Room for tables later versions add.
lmdb_fixed_dbs_max = 32
lmdb_max_dbs = lmdb_fixed_dbs_max + history_buckets

assert day_ms == 24 * 60 * minute_ms
assert retention_days_min <= retention_days_default <= retention_days_max
assert history_buckets >= retention_days_max + 2
assert history_buckets < 1 << 16  # a bucket's slot is two bytes of a key
assert lmdb_max_dbs >= lmdb_fixed_dbs_max + history_buckets
# Fairness between owners (config.py `[limits]`, `[[owners]]`): each limit
# an operator sets is at most this, and the config lists at most this many
# owners. A claim held back by an owner's claim rate waits at least this long
# before it looks again, so a bucket that is nearly full is not polled.
owner_limit_max = 10_000_000
config_owners_max = 10_000
# `[executor] allow` lists at most this many networks and host names
# (docs/operations.md "Target policy"): each delivery's addresses are
# compared with every network, so the list stays short.
executor_allow_entries_max = 1000
claim_refill_wait_ms_min = 5

assert claim_runs_max <= owner_limit_max
assert claim_refill_wait_ms_min <= dispatch_tick_ms

# Request bodies in flight (docs/operations.md "Limits"): the bytes of the
# bodies a node holds at once, over all requests. A request takes its share
# before its body is read (its declared Content-Length; a chunked body as it
# arrives) and gives it back once answered; one that does not fit is `503`
# with Retry-After. What a body decodes to takes about as much again, so the
# node's memory for bodies is bounded by about twice the budget. The config
# (`[http] body_bytes_in_flight_max`) may set it from one largest body up.
body_bytes_in_flight_max = 256 << 20
body_bytes_in_flight_setting_min = batch_body_bytes_max
body_bytes_in_flight_setting_max = 1 << 40

assert body_bytes_in_flight_setting_min <= body_bytes_in_flight_max <= body_bytes_in_flight_setting_max
assert batch_body_bytes_max <= body_bytes_in_flight_setting_min

# Liveness of followers (docs/operations.md "Checking the cluster"): a
# follower whose applied index is more than this many log entries behind its
# leader's commit index (heartbeats carry it) answers `/readyz` 503, and
# `tempo cluster status` counts it as lagging. A follower that keeps up is a
# round trip behind: a few entries, each a group-commit batch. The same bound
# holds for any node's own committed entries not yet applied: fewer are the
# normal state under load, not a reason for 503 ("Readiness and health").
follower_lag_entries_max = 32
# A node whose applied index has not moved for this long while work is
# pending (a leader's own writes, a follower's entries its leader has not
# committed, a single node's batch) answers `/readyz` 503 with the reason
# (docs/operations.md "Readiness and health"): a write stuck that long is
# no hiccup (an election takes 1-2 s).
progress_stall_s = 3.0
assert progress_stall_s * 1000 > 2 * raft_election_ticks * raft_tick_ms
# A leader does not compact its log while it sends a follower a snapshot
# (the follower would need the entries after it), as long as the follower
# answered a chunk within `snapshot_transfer_idle_s`, and never past this many
# entries beyond `snapshot_entries` (the log's disk use stays bounded).
snapshot_transfer_idle_s = 10.0
snapshot_defer_entries_max = 100_000
# A peer whose streams keep failing is logged at the first failure and then
# once every this many seconds while they do.
peer_failure_log_s = 10.0

# Storage bounds (docs/api.md "Limits", docs/operations.md "Config file").
# LMDB refuses a key longer than `lmdb_key_bytes_max` (its MDB_MAXKEYSIZE;
# py-lmdb `Environment.max_key_size()`, checked when the store opens) or
# empty, and a value longer than `lmdb_value_bytes_max`. A text that ends up
# in a key is bounded in UTF-8 bytes as well as in characters, so that every
# key the layouts of engine/keys.py make fits:
#   request keys:       owner | 0x00 | request key
#   jobs by owner:      owner | 0x00 | job key (26 bytes)
#   events (a bucket):  b"e" | owner | 0x00 | sequence u64
#   members:            node ID (ASCII)
# The edge (the request, the config) checks `owner_bytes_max` and
# `request_key_bytes_max`: owner and request key share the longest key, half
# each, so 200 ASCII characters of either fit, as docs/api.md promises, and 200
# four-byte ones do not. Apply checks only what a key can hold
# (`owner_key_bytes_max`, and owner + request key within LMDB's bound), so an
# entry an older version logged applies as it did there, or, where that
# version failed, as an error outcome.
lmdb_key_bytes_max = 511
lmdb_value_bytes_max = (1 << 32) - 1
owner_chars_max = 200
owner_separator_bytes = 1
owner_bytes_max = (lmdb_key_bytes_max - owner_separator_bytes) // 2
request_key_bytes_max = lmdb_key_bytes_max - owner_separator_bytes - owner_bytes_max
job_key_bytes = 26
event_key_head_bytes = 1
event_seq_bytes = 8
owner_key_bytes_max = lmdb_key_bytes_max - owner_separator_bytes - job_key_bytes
node_id_chars_max = 64  # ids.NODE_ID_PATTERN: ASCII, so as many bytes
# The largest record (a job: its payload as MessagePack, which is at most
# three times its JSON, and its texts at four bytes a character) and a log
# entry (one peer frame at most) are far below LMDB's value bound.
record_bytes_max = 3 * payload_bytes_max + 2 * output_bytes_max + 4 * (
    owner_chars_max + name_chars_max + target_chars_max + cron_chars_max + request_key_chars_max + worker_chars_max
) + 4096

assert owner_bytes_max + owner_separator_bytes + request_key_bytes_max <= lmdb_key_bytes_max
assert owner_bytes_max <= owner_key_bytes_max
assert event_key_head_bytes + owner_key_bytes_max + owner_separator_bytes + event_seq_bytes <= lmdb_key_bytes_max
assert node_id_chars_max <= lmdb_key_bytes_max
assert owner_chars_max <= owner_bytes_max and request_key_chars_max <= request_key_bytes_max
assert max(record_bytes_max, peer_frame_bytes_max) <= lmdb_value_bytes_max

# Storage faults (engine/storage_guard.py, docs/operations.md "Disk full"). The LMDB
# map is by default the data file's size plus the free space of its file
# system (at start, and again each time the map fills), at least
# `lmdb_map_bytes_min` and at most `lmdb_map_bytes_max`: address space, not
# memory, since LMDB maps the file read-only. It grows only by at least
# `lmdb_map_grow_bytes_min`, so a disk that is full too is not remapped over
# and over. While writes are refused, the node tries again after a backoff
# from `storage_retry_s_min` doubling up to `storage_retry_s_max`; a retry
# needs `storage_probe_bytes` free on the disk and in the map.
lmdb_map_bytes_min = 64 << 20
lmdb_map_bytes_max = 4 << 40
lmdb_map_grow_bytes_min = 64 << 20
storage_retry_s_min = 0.1
storage_retry_s_max = 2.0
storage_probe_bytes = 4 << 20

assert lmdb_map_bytes_min <= lmdb_map_bytes_max
assert storage_probe_bytes < lmdb_map_bytes_min
assert peer_frame_bytes_max <= lmdb_map_bytes_min  # one log entry (a batch) fits in the smallest map
assert 0 < storage_retry_s_min <= storage_retry_s_max
# A cluster node's snapshot (log compaction) that did not fit on the disk is
# tried again after this long; its log is kept meanwhile.
snapshot_retry_s = 30.0

# Clocks (clock.py, docs/semantics.md "Clocks"). Wall minus monotonic time
# changing by more than `clock_step_ms_min` between two reads is a step of
# the wall clock (NTP and the kernel slew by a few ppm, far below it). The
# wall clock is read between two monotonic reads; when more than
# `clock_read_us_max` passed between them (the thread was held up), it is
# read again, at most `clock_read_tries_max` times, and an unclean read is
# not taken for a step. While scheduler time is ahead of the wall clock (it
# stepped back), it runs at `clock_ahead_pace_percent` of real time, so a
# step back of d is absorbed after d * 100 / (100 - pace).
clock_step_ms_min = 20
clock_read_us_max = 1000
clock_read_tries_max = 3
clock_ahead_pace_percent = 50

assert 0 < clock_ahead_pace_percent < 100
assert clock_read_us_max * 1000 < clock_step_ms_min * 1_000_000
assert clock_read_tries_max >= 1

# Schedule arithmetic and the event loop (docs/semantics.md "What it costs,
# and what is rejected"; docs/operations.md "Event-loop lag"). A preview
# computes its cron times in slices of this many, with a checkpoint between
# them, so 1,000 times hold the trio thread for about a millisecond at a time.
# The lag probe sleeps this long and records how late it wakes.
preview_slice_times = 100
# Previews computing at once (the others wait their turn): the event loop
# runs every runnable task between two checkpoints, so N previews at once
# would hold it for N slices in a row.
previews_computing_max = 1
event_loop_probe_s = 0.01
# Batch handlers check and answer their items in slices of this many, with a
# checkpoint between them (a batch of 1,000 creates is 3-5 ms of checks).
batch_slice_items = 250
# sys.setswitchinterval of `tempo serve` (server.py says why).
gil_switch_interval_s = 0.001

assert 1 <= preview_slice_times <= preview_count_max
assert previews_computing_max >= 1
assert 1 <= batch_slice_items <= batch_jobs_max
assert 0 < gil_switch_interval_s < event_loop_probe_s

# Slow clients (docs/operations.md "Limits"). A request's line and headers
# must arrive whole within `header_read_timeout_s`: for a connection's first
# request, counted from its opening; for a later one, from its first byte
# (an idle keep-alive connection waits up to `keep_alive_timeout_s` for it).
# One client address holds at most `connections_per_address_max`
# connections (past it: `503`), by default a `connections_per_address_share`-th
# of `connections_max`. A new connection past `connections_max` takes the
# place of the longest idle one (its head not complete, or kept alive
# between requests), and is refused only when there is none: so peer streams
# and probes, whose requests are never refused, always find room while fewer
# than `connections_max` connections are busy, and client requests busy at
# once are bounded by `requests_in_flight_max`.
header_read_timeout_s = 5.0
connections_per_address_share = 4
connections_per_address_max = connections_max // connections_per_address_share

assert 0 < header_read_timeout_s < keep_alive_timeout_s
assert 1 <= connections_per_address_max <= connections_max
# A client must take each `write_chunk_bytes` of an answer within
# `write_timeout_s`, else it is cut off as if it had gone: hypercorn bounds
# reads only, and a client that stops reading would hold its connection and
# its place among `requests_in_flight_max` for ever.
write_timeout_s = 20.0
write_chunk_bytes = 64 << 10

assert 0 < write_timeout_s < read_timeout_s
assert write_chunk_bytes >= 1 << 10

# Stopping (server.py, docs/operations.md "Stopping"): on SIGTERM a node
# answers its long polls at once, hands leadership over (`transfer_wait_s`),
# waits at most `shutdown_requests_s` for the client requests in flight,
# then closes its peers' streams; the HTTP server then waits at most
# `shutdown_grace_s` for what is left. An empty long poll answered because
# the node stops carries `retry-after: shutdown_retry_after_s`.
shutdown_requests_s = 0.5
shutdown_poll_s = 0.01
shutdown_retry_after_s = 1

assert shutdown_poll_s < shutdown_requests_s
# The stop's bound: 2 s, whatever is attached.
assert transfer_wait_s + shutdown_requests_s + shutdown_grace_s <= 2.0

# Slices of the dispatcher's work on the trio thread (docs/operations.md
# "Event-loop lag"), each followed by a checkpoint: the tick moves at most
# this many due runs from the timing wheel to the ready queues (and
# cascades at most this many within the wheel) per step, so a spike of
# 25,000 runs due at once is some 25 steps of about a millisecond each
# rather than one of 30-50 ms.
dispatch_slice_runs = 1000

assert dispatch_slice_runs >= 1

# The lease heap (engine/dispatch.py): each lease has one entry in it, which
# a heartbeat does not add to; the entries of leases that ended stay until
# they come up, or until they outnumber the live leases by this many, when
# the heap is rebuilt from the leases (O(1) per ended lease, amortised). So
# the heap holds at most 2 * leases + this many entries.
lease_heap_slack_entries = 1024

assert lease_heap_slack_entries >= 1

# Instants tempo accepts and answers (docs/api.md "Times"): RFC 3339
# spells years 0001 to 9999 only, so every instant lies in UTC between the
# first millisecond of year 1 and the last of year 9999. An input outside is
# 400 naming the field; a schedule has no occurrence after the last.
instant_ms_min = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
instant_ms_max = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

assert instant_ms_min < 0 < instant_ms_max <= time_ms_max
# Of those, what a request may give in a field that is stored or reaches a
# key (`schedule.at`, `schedule.start_at`, `schedule.end_at`, a backfill's
# `from` and `until`): from the first instant keys hold to the last that
# RFC 3339 spells; outside, 400 at the field. The margin up to `time_ms_max`
# holds what tempo adds to such an instant (jitter, a retry's backoff).
stored_ms_max = instant_ms_max

assert instant_ms_min < stored_ms_min < stored_ms_max <= time_ms_max
assert stored_ms_max + (jitter_s_max + backoff_gap_s_max) * 1000 <= time_ms_max

# Idempotent claims (docs/semantics.md "Idempotent claims"). A claim key is
# 1-`claim_key_chars_max` characters of `CLAIM_KEY_PATTERN` (ASCII, so as
# many bytes), scoped to the owner. Its record lives in the `claim_keys`
# table under  b"k" | owner | 0x00 | claim key, and in an expiry index under
# b"x" | expires u64 | owner | 0x00 | claim key. A record is kept
# `claim_key_kept_ms` after the claim's stamp: far longer than a client
# keeps retrying one claim (`claim_retry_s_max`), plus an election or two.
# Each claim command with a key drops at most `claim_keys_dropped_per_claim`
# expired records: a command adds at most one, so the table holds about the
# records of the last `claim_key_kept_ms`, and apply's work stays bounded.
claim_key_chars_max = 128
CLAIM_KEY_PATTERN = f"^[A-Za-z0-9._:-]{{1,{claim_key_chars_max}}}$"
claim_key_bytes_max = claim_key_chars_max
claim_key_head_bytes = 1
claim_key_expiry_bytes = 8
claim_key_kept_ms = 10 * 60 * 1000
claim_keys_dropped_per_claim = 8
# The clients (worker.py, net/client.py): how long one claim whose outcome
# is unknown is retried with its key before the client gives up on it.
claim_retry_s_max = 60.0

assert (
    claim_key_head_bytes + claim_key_expiry_bytes + owner_bytes_max + owner_separator_bytes + claim_key_bytes_max
    <= lmdb_key_bytes_max
)
assert claim_retry_s_max * 1000 * 2 <= claim_key_kept_ms
assert claim_keys_dropped_per_claim >= 2

# Notifications (net/notify.py, docs/operations.md "Notifications"). The
# notifier reads the replicated event feed after its cursor, at most
# `notify_batch_events` events a read, and delivers the ones a notify
# setting asks for, on its own HTTP client: runs never wait for it. At most
# `notify_pending_events_max` notices are read and not yet finished (the
# bounded queue: past it, the notifier reads no more until one finishes;
# the feed holds the rest durably). Of those, at most `notify_concurrency`
# are being sent at once, and at most `notify_host_concurrency` to one host
# (scheme, host and port), so an endpoint that hangs holds only its own
# share; and at most `notify_host_pending_max` wait for one host: past
# that, the reader waits for room while the host answers, and drops the
# notice at once (counted, logged once per overflow) while the host's last
# try failed, so a stuck host cannot fill the queue every host shares.
# Each notice is tried at most `notify_attempts_max` times, each try
# bounded by `notify_timeout_s`, with back-off `notify_backoff_s[k-1]`
# after try k; then it is given up (dropped, counted and logged): a notice
# takes at most `notify_notice_s_max`. The cursor (the last sequence below
# which every notice finished) is committed (`NotifyCursor`) at most every
# `notify_cursor_commit_s`, when it moved.
notify_batch_events = 100
notify_pending_events_max = 1000
notify_concurrency = 16
notify_host_concurrency = 4
notify_host_pending_max = 100
notify_attempts_max = 5
notify_timeout_s = 10.0
notify_backoff_s = (1.0, 2.0, 4.0, 8.0)
notify_idle_wait_s = 1.0  # the feed is looked at again at least this often
notify_cursor_commit_s = 1.0
notify_url_chars_max = 2048
notify_events_max = 3  # run.failed, job.completed, job.recovered
notify_secret_chars_min = 32
notify_error_chars_max = 200
notify_notice_s_max = notify_attempts_max * notify_timeout_s + sum(notify_backoff_s)

assert 1 <= notify_host_concurrency <= notify_concurrency <= notify_pending_events_max
assert notify_host_concurrency <= notify_host_pending_max < notify_pending_events_max
assert 1 <= notify_batch_events <= min(notify_pending_events_max, page_limit_max)
assert notify_attempts_max >= 1 and notify_timeout_s > 0 and all(b >= 0 for b in notify_backoff_s)
assert len(notify_backoff_s) == notify_attempts_max - 1
assert notify_notice_s_max <= 120.0, "a stuck endpoint holds a notice for at most 2 minutes"

# Outcomes and filters (docs/api.md "Outcomes", "GET /v1/runs"). A run keeps
# each attempt's claim, end, worker and texts (each text at most
# `output_bytes_max`, as the run's own); it keeps at most as many attempts as
# a retry policy may allow, the newest when an older entry allowed more. A
# filtered page of jobs reads at most `jobs_filter_rows_max` jobs and then
# answers with what it found and a cursor, so a filter that matches nothing
# costs a bounded time per page. A runs index key is
# owner | 0x00 | status u8 | ms u64 | job ID | nominal ms u64, with b"s"
# before it in a history bucket (`status_key_bytes_max` counts that byte).
run_attempts_kept_max = attempts_max
jobs_filter_rows_max = 10_000
# A page of a job's events newest first (`GET /v1/events?order=desc&job_id=`)
# reads at most this many of the owner's events, and then answers with what
# it found and a cursor, as a filtered page of jobs does.
events_filter_rows_max = 10_000
status_key_bytes_max = 1 + owner_bytes_max + owner_separator_bytes + 1 + 8 + job_key_bytes + 8
run_record_bytes_max = record_bytes_max + run_attempts_kept_max * (2 * output_bytes_max + 4 * worker_chars_max + 64)

assert run_attempts_kept_max >= 1 and jobs_filter_rows_max >= page_limit_max
assert events_filter_rows_max >= page_limit_max
assert status_key_bytes_max <= lmdb_key_bytes_max
assert run_record_bytes_max <= lmdb_value_bytes_max

# Catch-up and backfill (docs/semantics.md "Catch-up after missed slots",
# "Backfill"). A job's catch-up window is at most a year; the `all` policy
# runs at most `catchup_runs_max` slots of one outage. A missed range is
# counted from the cron fields day by day, walking only the days at its ends
# and around a UTC offset change, so its cost grows with the days it spans,
# at most `catchup_count_days_max` (some 270 years; a longer range, from a
# clock stepped that far, is recorded with no count). A backfill creates at
# most `backfill_runs_max` runs per request.
catchup_window_s_max = 31_536_000
catchup_runs_max = 1000
catchup_runs_default = 1000
catchup_count_days_max = 100_000
backfill_runs_max = 10_000

assert 1 <= catchup_runs_default <= catchup_runs_max
assert catchup_count_days_max * 86_400 >= catchup_window_s_max

# -- Changing a job (PATCH /v1/jobs/{id}) ----------------------------------------
# A patch without `If-Match` applies to the job's current version: when
# another change commits between the read it merged onto and its own
# commit, it is merged again onto the newer version, at most this many
# times in all before the client is told to retry (409 conflict).
patch_tries_max = 5
# A resume, a re-plan, a claim or a cancel that hands a repeating job's
# schedule on steps over the slots that hold a run already (its owner
# cancelled it, it finished, or a triggered run took that millisecond), at
# most this many.
taken_slots_stepped_max = 1000

assert patch_tries_max >= 1
assert taken_slots_stepped_max >= 1

# -- Labels (docs/api.md "Labels") ----------------------------------------------
# A job carries at most `job_labels_max` labels, key -> value: a key is 1-63
# characters of `LABEL_KEY_PATTERN`, a value at most `label_value_chars_max`
# characters. `GET /v1/jobs` takes at most `job_labels_max` `label` filters.
# The jobs-by-label index keys a (key, value) pair by its hash of
# `label_hash_bytes`: owner | 0x00 | hash | job key, within LMDB's bound
# whatever the value's length (a listing checks the job's own labels, so a
# collision of hashes never lists a job wrongly).
job_labels_max = 32
label_key_chars_max = 63
label_value_chars_max = 256
LABEL_KEY_PATTERN = r"^[a-z0-9._/-]{1,63}$"
label_hash_bytes = 16
label_index_key_bytes_max = owner_bytes_max + owner_separator_bytes + label_hash_bytes + job_key_bytes

assert job_labels_max >= 1 and label_key_chars_max <= 63
assert label_index_key_bytes_max <= lmdb_key_bytes_max
# A job's record with its labels at their bounds (four bytes a character)
# still fits a value of LMDB.
assert record_bytes_max + job_labels_max * (label_key_chars_max + 4 * label_value_chars_max + 8) <= lmdb_value_bytes_max
# -- Run timeouts and cancels (docs/semantics.md "Run timeouts", "Cancelling a run")
# A job's `timeout_s` bounds one attempt, counted from its claim: at most a day.
timeout_s_min = 1
timeout_s_max = 86_400

assert 1 <= timeout_s_min <= timeout_s_max

# -- Overlap (docs/semantics.md "Overlap")
# Runs of a `buffer_all` job waiting for the running one to end; a slot past
# it is skipped. Apply reads a job's open runs when one of them is claimed
# or ends, so this bounds that read too.
overlap_buffered_runs_max = 100
# The due time a buffered run is stored with until apply releases it (the
# last millisecond of year 9999, which views still show as a date): far past
# any read-ahead window, so the dispatcher never loads it.
overlap_buffered_due_ms = 253_402_300_799_999
# Due runs of such jobs the dispatcher hands apply in one `OverlapRuns`.
overlap_runs_per_command_max = 1000

assert overlap_buffered_runs_max >= 1
assert 1 <= overlap_runs_per_command_max <= commit_batch_commands_max
assert readahead_ms < overlap_buffered_due_ms <= time_ms_max

# -- `tempo cluster status` (docs/operations.md "Running a cluster")
# How long it asks again, by default, while the cluster is not healthy:
# nodes started in the background a moment ago are still binding their
# ports and electing (an election takes up to two election timeouts), and
# on a loaded machine two may elect before the third listens. `--wait-s 0`
# asks once.
cluster_status_wait_s_default = 5.0
cluster_status_wait_s_max = 600
cluster_status_poll_s = 0.25  # the gap between two rounds of asking every node

assert 0 < cluster_status_poll_s <= cluster_status_wait_s_default <= cluster_status_wait_s_max

# Dependencies (docs/semantics.md "Dependencies"). A dependent job names
# 1..`deps_parents_max` parents; a job has at most `deps_dependents_max`
# dependents, so an ending result makes at most that many runs in its
# commit. A cycle check walks at most `deps_walk_max` jobs upstream (a
# graph too big to check is refused); the job view names at most
# `deps_shown_max` dependents; `GET /v1/jobs/{id}/graph` goes at most
# `deps_graph_depth_max` edges each way and answers at most
# `deps_graph_edges_max` edges.
deps_parents_max = 32
deps_dependents_max = 1_000
deps_walk_max = 10_000
deps_shown_max = 32
deps_graph_depth_max = 10
deps_graph_depth_default = 1
deps_graph_edges_max = 2_000
# How long a gated slot (`schedule.requires.wait_s`) may wait for its parents.
deps_wait_s_max = 7 * 86_400

assert 1 <= deps_parents_max <= deps_shown_max
assert deps_dependents_max <= trigger_slot_probe_max  # one free slot each, probed from the last taken
assert 1 <= deps_graph_depth_default <= deps_graph_depth_max

# -- Calendars (docs/semantics.md "Calendars") ---------------------------------
calendars_per_owner_max = 1000
# Dates one calendar lists in `exclude_dates` (its holidays come on top).
calendar_dates_max = 10_000
# A calendar's `base` chain: the calendar and at most this many below it.
calendar_base_depth_max = 4
# Holidays are resolved for the year the calendar is put in and this many after.
calendar_holiday_years_ahead = 10
calendar_name_chars_max = 63
# Days one move looks through for a business day (a calendar that excludes
# more days in a row than this moves no run: the slot is skipped).
calendar_days_searched_max = 3660
# Jobs a `409 in_use` names (the first ones, by job ID).
calendar_users_named_max = 20
# Slots a calendar preview looks through, for `count` entries, per entry asked.
calendar_preview_scan_factor = 20
# Slots one claim records as one `skipped` range when each moves onto a
# slot of its own (a `* * * * *` job's weekend under next_business_day):
# a longer run of them is one row per this many, each claim bounded.
calendar_skip_range_slots_max = 1_000
# Claim decisions a job's view follows from its waiting run to the first
# run its calendar lets happen (`next_run_at`); past them, none is shown.
calendar_view_steps_max = 8
# Jobs' `next_run_at` kept by a node for runs due ahead (cleared when full).
calendar_view_cache_max = 10_000
# Jobs that move runs (next or previous business day) a calendar `PUT`
# re-plans, reading them before it proposes; the waiting runs of jobs past
# it are decided at their claim, as a `skip` job's always are.
calendar_replan_jobs_max = 10_000

assert 1 <= calendar_base_depth_max <= 16
assert calendar_dates_max >= 1
assert 0 <= calendar_holiday_years_ahead <= 50
assert calendar_days_searched_max >= 366
assert calendar_skip_range_slots_max >= 2 and calendar_view_steps_max >= 1
assert calendar_replan_jobs_max >= 1
