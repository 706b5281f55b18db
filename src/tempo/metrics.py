"""Prometheus text exposition (format 0.0.4), by hand: a histogram type and
the few lines each metric needs. A client library would bring a registry and
global state for what is a dozen lines here.

Histograms keep one count per bucket (not cumulative); `lines` adds them up,
and `_count` is the `+Inf` bucket, so the two agree even when a scrape reads a
histogram that a worker thread is observing into.
"""

import time
from bisect import bisect_left
from collections.abc import Iterable

# Seconds, from a fast fsync to a long poll.
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Items per batch (commands per commit, entries per raft write).
COUNT_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000)


class Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float] = SECONDS_BUCKETS):
        self.bounds = tuple(bounds)
        assert self.bounds and list(self.bounds) == sorted(set(self.bounds))
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # Prometheus buckets count observations <= their bound.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)


def _labels(labels: dict[str, str] | None) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)  # shortest exact form: a tiny ratio keeps its digits


def head(name: str, kind: str, text: str) -> list[str]:
    assert kind in ("counter", "gauge", "histogram")
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


def sample(name: str, value: float, labels: dict[str, str] | None = None) -> str:
    return f"{name}{_labels(labels)} {_number(value)}"


def lines(name: str, histogram: Histogram, labels: dict[str, str] | None = None) -> list[str]:
    """The bucket, sum and count samples of one histogram (no HELP/TYPE)."""
    out = []
    total = 0
    counts = list(histogram.counts)  # one copy, so the samples agree
    les = [*map(_number, histogram.bounds), "+Inf"]
    for le, count in zip(les, counts, strict=True):
        total += count
        out.append(sample(f"{name}_bucket", total, {**(labels or {}), "le": le}))
    out.append(sample(f"{name}_sum", histogram.sum, labels))
    out.append(sample(f"{name}_count", total, labels))
    return out


# Seconds an event-loop task wakes late: fine below 10 ms, where the target is.
LAG_SECONDS_BUCKETS = (
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)


class Pauses:
    """A histogram of pauses and the longest one since start, for the event
    loop's lag (observed by server.py's probe) and for garbage collection
    (`on_gc`, a `gc.callbacks` entry: collections stop every thread, so the
    two explain each other)."""

    __slots__ = ("_gc_started_s", "gc_max_s", "gc_seconds", "lag_max_s", "lag_seconds")

    def __init__(self) -> None:
        self.lag_seconds = Histogram(LAG_SECONDS_BUCKETS)
        self.lag_max_s = 0.0
        self.gc_seconds = Histogram(LAG_SECONDS_BUCKETS)
        self.gc_max_s = 0.0
        self._gc_started_s = 0.0

    def observe_lag(self, lag_s: float) -> None:
        self.lag_seconds.observe(lag_s)
        self.lag_max_s = max(self.lag_max_s, lag_s)

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        # A collection holds the GIL from start to stop, so the two calls of
        # one collection are never interleaved with another's.
        if phase == "start":
            self._gc_started_s = time.perf_counter()
            return
        pause_s = time.perf_counter() - self._gc_started_s
        self.gc_seconds.observe(pause_s)
        self.gc_max_s = max(self.gc_max_s, pause_s)

    def lines(self) -> list[str]:
        out = head(
            "tempo_event_loop_lag_seconds", "histogram",
            "How late a task that sleeps 10 ms at a time wakes: the longest the trio thread was held.",
        )
        out += lines("tempo_event_loop_lag_seconds", self.lag_seconds)
        out += head("tempo_event_loop_lag_max_seconds", "gauge", "The largest event-loop lag since start.")
        out.append(sample("tempo_event_loop_lag_max_seconds", self.lag_max_s))
        out += head("tempo_gc_pause_seconds", "histogram", "Seconds per garbage collection (all threads stop).")
        out += lines("tempo_gc_pause_seconds", self.gc_seconds)
        out += head("tempo_gc_pause_max_seconds", "gauge", "The longest garbage collection since start.")
        out.append(sample("tempo_gc_pause_max_seconds", self.gc_max_s))
        return out
