"""Prometheus exposition helpers (tempo/metrics.py), and a strict reader of
the text format that tests/net/test_metrics.py checks /metrics with."""

import math
import re
from collections import defaultdict

import pytest

from tempo import metrics as prom

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^(?P<name>{_NAME})(?:\{{(?P<labels>{_LABEL}(?:,{_LABEL})*)\}})? (?P<value>\S+)$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_exposition(text: str) -> dict[str, dict]:
    """Families by name: {"type", "help", "samples": [(name, labels, value)]}.
    Fails on anything the text format 0.0.4 does not allow, and on histograms
    whose buckets are not cumulative or whose +Inf bucket is not _count."""
    assert text.endswith("\n")
    families: dict[str, dict] = {}
    current = None
    seen: set[tuple] = set()
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert re.fullmatch(_NAME, name) and help_text, line
            assert name not in families, f"{name} declared twice"
            families[name] = {"help": help_text, "type": None, "samples": []}
            current = name
            continue
        if line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert name == current and families[name]["type"] is None, line
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            families[name]["type"] = kind
            continue
        assert not line.startswith("#"), line
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        assert current is not None and families[current]["type"] is not None, line
        name = match["name"]
        kind = families[current]["type"]
        allowed = {current} if kind != "histogram" else {f"{current}_bucket", f"{current}_sum", f"{current}_count"}
        assert name in allowed, f"{name} under the family {current}"
        labels = dict(_PAIR.findall(match["labels"] or ""))
        value = float(match["value"])
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen, f"{line} twice"
        seen.add(key)
        families[current]["samples"].append((name, labels, value))
    for name, family in families.items():
        assert family["type"] is not None, f"{name} has no TYPE"
        if family["type"] == "histogram":
            _check_histogram(name, family["samples"])
    return families


def _check_histogram(name: str, samples: list) -> None:
    series: dict[tuple, dict] = defaultdict(lambda: {"buckets": [], "sum": None, "count": None})
    for sample_name, labels, value in samples:
        rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        if sample_name.endswith("_bucket"):
            series[rest]["buckets"].append((math.inf if labels["le"] == "+Inf" else float(labels["le"]), value))
        else:
            series[rest]["sum" if sample_name.endswith("_sum") else "count"] = value
    for rest, one in series.items():
        bounds = [b for b, _ in one["buckets"]]
        counts = [c for _, c in one["buckets"]]
        assert bounds and bounds == sorted(bounds) and bounds[-1] == math.inf, f"{name}{rest}: buckets {bounds}"
        assert counts == sorted(counts), f"{name}{rest}: buckets not cumulative {counts}"
        assert one["count"] == counts[-1], f"{name}{rest}: +Inf {counts[-1]} != _count {one['count']}"
        assert one["sum"] is not None


def samples_of(families: dict, name: str, **labels: str) -> list[float]:
    found = []
    for family in families.values():
        for sample_name, sample_labels, value in family["samples"]:
            if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items()):
                found.append(value)
    return found


def test_a_histogram_counts_each_value_in_the_first_bucket_that_holds_it():
    h = prom.Histogram((0.1, 1.0, 10.0))
    for value in (0.05, 0.1, 0.5, 1.0, 5.0, 50.0):
        h.observe(value)
    assert h.counts == [2, 2, 1, 1]
    assert h.count == 6
    assert h.sum == pytest.approx(56.65)
    text = "\n".join(prom.head("t_seconds", "histogram", "Test.") + prom.lines("t_seconds", h, {"route": "a"})) + "\n"
    families = parse_exposition(text)
    assert samples_of(families, "t_seconds_bucket", route="a") == [2, 4, 5, 6]
    assert samples_of(families, "t_seconds_bucket", le="+Inf") == [6]
    assert samples_of(families, "t_seconds_count") == [6]


def test_label_values_are_escaped():
    line = prom.sample("x_total", 3, {"route": 'a"b\\c\nd'})
    assert line == 'x_total{route="a\\"b\\\\c\\nd"} 3'
    families = parse_exposition("\n".join([*prom.head("x_total", "counter", "X."), line]) + "\n")
    assert samples_of(families, "x_total") == [3]


@pytest.mark.parametrize(
    "text",
    [
        "x 1\n",  # no HELP/TYPE
        "# HELP x X.\n# TYPE x gauge\nx{a=b} 1\n",  # unquoted label
        "# HELP x X.\n# TYPE x gauge\nx 1",  # no final newline
        "# HELP h H.\n# TYPE h histogram\n" 'h_bucket{le="1"} 3\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 2\n',
        "# HELP h H.\n# TYPE h histogram\n" 'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n',
    ],
)
def test_the_reader_refuses_what_the_format_does_not_allow(text):
    with pytest.raises(AssertionError):
        parse_exposition(text)


def test_pauses_keep_a_histogram_and_the_longest():
    pauses = prom.Pauses()
    for lag_s in (0.0004, 0.012, 0.003):
        pauses.observe_lag(lag_s)
    assert pauses.lag_seconds.count == 3 and pauses.lag_max_s == 0.012
    pauses.on_gc("start", {})
    pauses.on_gc("stop", {})
    assert pauses.gc_seconds.count == 1 and 0 <= pauses.gc_max_s < 1
    families = parse_exposition("\n".join(pauses.lines()) + "\n")
    assert samples_of(families, "tempo_event_loop_lag_seconds_bucket", le="0.01")[0] == 2
    assert samples_of(families, "tempo_event_loop_lag_max_seconds")[0] == 0.012
