"""How the console shows values: schedules in words, instants in a job's
zone, countdowns, and the home page's chart from the node's own metrics."""

import itertools
import math
from collections import deque
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import Options, get_description  # type: ignore[import-untyped]  # the library ships no types
from prometheus_client.parser import text_string_to_metric_families

# Samples the home chart keeps: one per poll of the page's chart.
CHART_SAMPLES_MAX = 60


def parse_instant(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def schedule_words(schedule: dict[str, Any]) -> str:
    if schedule.get("cron"):
        options = Options()
        options.use_24hour_time_format = True
        try:
            words = get_description(schedule["cron"], options)
        except Exception:  # noqa: BLE001 - the library raises several kinds for what it cannot say
            words = schedule["cron"]
        return f"{words} ({schedule.get('timezone') or 'UTC'})"
    if schedule.get("every_s"):
        return f"every {duration_words(schedule['every_s'])}"
    if schedule.get("at"):
        return f"once, at {schedule['at']}"
    if schedule.get("after"):
        after = schedule["after"]
        joined = " and " if after.get("all", True) else " or "
        return f"after {joined.join(after['jobs'])} {after.get('on', 'succeeded')}"
    return "?"


def duration_words(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2])


def zone_of(schedule: dict[str, Any]) -> str:
    return str(schedule.get("timezone") or "UTC")


def local_time(text: str | None, zone: str) -> str:
    """`text`, an RFC 3339 instant, as the wall clock of `zone`."""
    at = parse_instant(text)
    if at is None:
        return ""
    try:
        return at.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")
    except ZoneInfoNotFoundError:
        return text or ""


def countdown(text: str | None, now: datetime) -> str:
    at = parse_instant(text)
    if at is None:
        return ""
    delta_s = (at - now).total_seconds()
    if delta_s < 0:
        return f"{duration_words(-delta_s)} ago"
    return f"in {duration_words(delta_s)}"


def now_utc() -> datetime:
    return datetime.now(UTC)


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


class Chart:
    """Runs started per second and claim lateness p50/p99 between samples of
    the node's /metrics (`tempo_runs_claimed_total`,
    `tempo_claim_lateness_seconds`). The samples are the node's, shared by
    every viewer: the figures are the node's, not any owner's."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, float, list[tuple[float, float]]]] = deque(maxlen=CHART_SAMPLES_MAX + 1)

    def observe(self, metrics_text: str, t_s: float) -> None:
        claimed = 0.0
        buckets: list[tuple[float, float]] = []
        for family in text_string_to_metric_families(metrics_text):
            if family.name == "tempo_runs_claimed":
                claimed = sum(s.value for s in family.samples if s.name.endswith("_total"))
            elif family.name == "tempo_claim_lateness_seconds":
                buckets = [(float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket")]
        if self.samples and t_s - self.samples[-1][0] < 0.5:
            return  # two viewers at once: one sample serves
        self.samples.append((t_s, claimed, buckets))

    def points(self) -> list[tuple[float, float, float | None, float | None]]:
        """(seconds before the last sample, runs started per second, p50 s, p99 s) per interval."""
        out: list[tuple[float, float, float | None, float | None]] = []
        items = list(self.samples)
        if not items:
            return out
        last_t = items[-1][0]
        for (t0, c0, b0), (t1, c1, b1) in itertools.pairwise(items):
            span = max(t1 - t0, 1e-3)
            deltas = [(le, v1 - (b0[i][1] if i < len(b0) else 0.0)) for i, (le, v1) in enumerate(b1)]
            out.append((last_t - t1, (c1 - c0) / span, _quantile(deltas, 0.5), _quantile(deltas, 0.99)))
        return out

    def svg(self, width: int = 600, height: int = 120) -> dict[str, Any]:
        """Polyline points for the template's inline SVG."""
        pts = self.points()
        # The x axis spans the samples held (up to CHART_SAMPLES_MAX polls).
        horizon = max(max((p[0] for p in pts), default=0.0), 1.0)
        rate_max = max([p[1] for p in pts] + [1.0])
        late_max = max([p[3] or 0.0 for p in pts] + [0.01])

        def line(values: list[tuple[float, float | None]], top: float) -> str:
            coords = []
            for ago, value in values:
                if value is None or math.isinf(value):
                    continue
                x = width - ago / horizon * width
                y = height - value / top * (height - 10) - 5
                coords.append(f"{x:.1f},{y:.1f}")
            return " ".join(coords)

        return {
            "width": width, "height": height,
            "rate": line([(p[0], p[1]) for p in pts], rate_max),
            "p50": line([(p[0], p[2]) for p in pts], late_max),
            "p99": line([(p[0], p[3]) for p in pts], late_max),
            "rate_max": rate_max, "late_max": late_max,
            "last": pts[-1] if pts else None,
            "span_s": horizon if pts else 0.0,
        }


def _quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The bound of the first bucket holding the q-quantile of the
    (cumulative) bucket counts, as Prometheus' histogram_quantile would
    start from; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    want = q * buckets[-1][1]
    for le, count in buckets:
        if count >= want:
            return le if not math.isinf(le) else buckets[-2][0] if len(buckets) > 1 else None
    return None
