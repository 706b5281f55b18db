"""Shared helpers of the benchmarks. Their `tempo serve` processes come from
the one process harness, `tempo.loadgen.spawn`, given the benchmarks' own
patience (a node that stored millions of jobs takes longer to start and to
stop); beside it, a few numbers about a node and a table printer."""

import os
import time
from pathlib import Path

from tempo.loadgen.spawn import Cluster, Node, SpawnError, free_port, tempo_command

__all__ = ["Cluster", "Node", "SpawnError", "free_port", "tempo_command"]

ready_timeout_s = 120.0
stop_timeout_s = 60.0


def start(node: Node) -> float:
    """Starts `node`; seconds from its start until /readyz answered 200."""
    started_s = time.monotonic()
    node.start()
    return node.wait_ready(ready_timeout_s, since_s=started_s)


def rss_mib(node: Node) -> float:
    for line in Path(f"/proc/{node.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def rss_split(node: Node) -> str:
    """RssAnon (heap) and RssFile (LMDB pages mapped in) of /proc/PID/status."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{node.pid}/status").read_text().splitlines() if ":" in line
    )
    return ", ".join(f"{k} {int(fields[k].split()[0]) / 1024:.0f} MiB" for k in ("RssAnon", "RssFile") if k in fields)


def dir_mib(path: str) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total / (1 << 20)


def table(rows: list[tuple], header: tuple) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
