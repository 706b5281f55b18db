"""Named bounds of the consensus core.

Every loop, batch and buffer in raft/ is bounded by one of these. How they
relate is asserted at import, so a bad edit fails loudly before any node runs.
"""

# Entries carried by one AppendRequest; bounds the work one message causes.
ENTRIES_PER_MESSAGE_MAX = 4096
# Payload bytes carried by one AppendRequest (the first entry always goes, so a
# single entry larger than this still makes progress).
MESSAGE_BYTES_MAX = 1 << 20
# AppendRequests in flight to one follower in the replicate state (pipelining).
INFLIGHT_MESSAGES_MAX = 256
# Payload bytes a leader holds proposed but not yet committed; above it a
# proposal raises ProposalDropped instead of growing memory without bound.
UNCOMMITTED_BYTES_MAX = 64 << 20
# Bytes of snapshot data in one SnapshotChunk.
SNAPSHOT_CHUNK_BYTES = 64 << 10
# Ticks a leader waits for a SnapshotResponse before sending the chunk again.
SNAPSHOT_RETRY_TICKS = 6
# Committed entries handed to the application in one Ready.
COMMITTED_ENTRIES_PER_READY_MAX = 8192
# Pending ReadIndex requests a leader holds before refusing more.
READ_REQUESTS_MAX = 4096

assert ENTRIES_PER_MESSAGE_MAX >= 1
assert MESSAGE_BYTES_MAX >= 1
assert INFLIGHT_MESSAGES_MAX >= 1
assert UNCOMMITTED_BYTES_MAX >= MESSAGE_BYTES_MAX
assert SNAPSHOT_CHUNK_BYTES <= MESSAGE_BYTES_MAX
assert SNAPSHOT_RETRY_TICKS >= 1
assert COMMITTED_ENTRIES_PER_READY_MAX >= ENTRIES_PER_MESSAGE_MAX
assert READ_REQUESTS_MAX >= 1
