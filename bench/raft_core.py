"""Committed entries per second of the raft core alone.

A 3-node cluster in memory (MemoryStorage, messages handed over directly, no
faults, no codec), stepped in one thread: the cost measured is the core's own
work per entry on all three nodes (propose, replicate, persist, commit,
apply); payloads are not copied. --codec adds a msgpack round trip of every
message, as a transport would. Run: python bench/raft_core.py [--entries N]
[--codec] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time

from tempo.raft import MESSAGE_DECODER, MESSAGE_ENCODER, Config, MemoryStorage, RawNode, Role

COMMAND_BYTES = 16  # a small command, as the engine's would be once encoded
PIPELINE_ENTRIES = 4096  # proposals kept outstanding by the client


class Bench:
    def __init__(self, codec: bool) -> None:
        self.codec = codec
        ids = (1, 2, 3)
        self.storages = {i: MemoryStorage(ids) for i in ids}
        self.nodes = {
            i: RawNode(Config(i), self.storages[i], random.Random(i)) for i in ids
        }
        self.queue: list = []
        self.applied = dict.fromkeys(ids, 0)

    def process(self, i: int) -> None:
        node, storage = self.nodes[i], self.storages[i]
        while node.has_ready():
            ready = node.ready()
            if ready.entries:
                storage.append(ready.entries)
            if ready.hard_state is not None:
                storage.set_hard_state(ready.hard_state)
            self.queue.extend(ready.messages)
            self.applied[i] += len(ready.committed_entries)
            node.advance(ready)

    def pump(self) -> None:
        for i in self.nodes:
            self.process(i)
        while self.queue:
            batch, self.queue = self.queue, []
            for m in batch:
                if self.codec:  # what a transport would add: msgpack both ways
                    m = MESSAGE_DECODER.decode(MESSAGE_ENCODER.encode(m))
                self.nodes[m.dst].step(m)
            for i in self.nodes:
                self.process(i)

    def elect(self) -> RawNode:
        self.nodes[1].campaign()
        self.pump()
        leader = self.nodes[1]
        assert leader.role == Role.LEADER
        return leader

    def run(self, entries: int, commands_per_entry: int) -> float:
        leader = self.elect()
        payload = b"c" * (COMMAND_BYTES * commands_per_entry)
        base = leader.log.committed
        proposed = 0
        started_s = time.perf_counter()
        while leader.log.committed - base < entries:
            outstanding = proposed - (leader.log.committed - base)
            while outstanding < PIPELINE_ENTRIES and proposed < entries:
                leader.propose(payload)
                proposed += 1
                outstanding += 1
            self.pump()
        elapsed_s = time.perf_counter() - started_s
        applied_min = min(self.applied.values())
        assert applied_min >= entries, "every node applied every entry"
        return elapsed_s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--codec", action="store_true", help="msgpack-encode every message")
    args = parser.parse_args()
    for commands_per_entry, entries in ((1, args.entries), (1000, max(args.entries // 20, 1))):
        bench = Bench(args.codec)
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
        elapsed_s = bench.run(entries, commands_per_entry)
        if args.profile:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        rate = entries / elapsed_s
        print(
            f"3 nodes{' +codec' if args.codec else ''}, {commands_per_entry:>4} command(s)/entry: "
            f"{entries} entries in "
            f"{elapsed_s:.2f} s = {rate:,.0f} entries/s committed and applied on all "
            f"({rate * commands_per_entry:,.0f} commands/s)"
        )


if __name__ == "__main__":
    main()
