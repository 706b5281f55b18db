"""Prometheus text exposition (format 0.0.4), by hand: a histogram type and
the few lines each metric needs. A client library would bring a registry and
global state for what is a dozen lines here.

Histograms keep one count per bucket (not cumulative); `lines` adds them up,
and `_count` is the `+Inf` bucket, so the two agree even when a scrape reads a
histogram that a worker thread is observing into.
"""

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
    for bound, count in zip((*histogram.bounds, "+Inf"), counts, strict=True):
        total += count
        le = bound if isinstance(bound, str) else _number(bound)
        out.append(sample(f"{name}_bucket", total, {**(labels or {}), "le": le}))
    out.append(sample(f"{name}_sum", histogram.sum, labels))
    out.append(sample(f"{name}_count", total, labels))
    return out
