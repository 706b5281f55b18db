"""What checking peer frames costs a follower (net/peer.py FrameReader).

Frames of AppendRequests whose entries hold group-commit batches of
CreateJobs, as a leader under load sends them; prints microseconds per frame
and per command for the plain decode, with raft.malformed, and with every
entry's commands decoded too (what a follower runs since corrupt frames are
dropped). Run: python bench/peer_frames.py [--commands N] [--frames N]
"""

import argparse
import json
import time

import msgspec

from tempo.engine.commands import CreateJobs, encode_entry
from tempo.engine.jobs import Jobs
from tempo.net.api import _entry_problem
from tempo.net.peer import FrameReader, encode_frames
from tempo.raft import MESSAGE_ENCODER, AppendRequest, Entry
from tempo.schema import JobCreate

T0 = 1_800_000_000_000


def frames(commands: int, count: int) -> bytes:
    body = msgspec.json.decode(json.dumps({"target": "queue:q", "schedule": {"at": "2030-01-01T00:00:00Z"},
                                           "payload": {"n": 1}}), type=JobCreate)
    maker = Jobs(None, None)  # type: ignore[arg-type] - new_job needs neither
    made = [maker.new_job("default", body, T0, from_msgpack=False) for _ in range(commands)]
    data = encode_entry([CreateJobs(T0, made)])
    out = [MESSAGE_ENCODER.encode(AppendRequest(2, 1, 2, i, 2, [Entry(2, i + 1, 0, data)], i)) for i in range(count)]
    return encode_frames(out)


def per_frame_us(stream: bytes, count: int, reader_of) -> float:
    best = float("inf")
    for _ in range(5):
        reader = reader_of()
        started = time.perf_counter()
        delivered = reader.feed(stream)
        best = min(best, time.perf_counter() - started)
        assert len(delivered) == count and reader.dropped == 0
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=1000, help="CreateJobs items per entry")
    parser.add_argument("--frames", type=int, default=50)
    args = parser.parse_args()
    stream = frames(args.commands, args.frames)
    print(f"{args.frames} frames of one entry of {args.commands} creates, {len(stream) // args.frames} bytes each")
    for name, reader_of in (("structure only", FrameReader), ("with entry check", lambda: FrameReader(_entry_problem))):
        us = per_frame_us(stream, args.frames, reader_of)
        print(f"{name:>17}: {us:9.1f} µs/frame  {us / args.commands:6.2f} µs/command")


if __name__ == "__main__":
    main()
