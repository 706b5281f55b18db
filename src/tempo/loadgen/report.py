"""The report of a run: the summary table (text on stdout, HTML in the
page), and the report files.

`--report FILE` (default `tempo-loadgen-YYYYMMDD-HHMMSS.json` in the current
directory) gets the figures as JSON, and FILE's stem + `.html` a
self-contained page: the summary table and two inline SVG charts (claims per
second; lateness p50/p99 per second) drawn here from the JSON's series. The
same two charts, under a caption with the headline figures, go to FILE's stem
+ `.svg`, an image that stands alone (a README shows it).
"""

import html
import json
import math
import os
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tempo.loadgen.figures import Figures, late_bound_s, rounded
from tempo.loadgen.options import CannotRun

chart_width_px = 720
chart_height_px = 260
chart_margin_px = {"left": 64, "right": 16, "top": 28, "bottom": 44}
chart_ticks_max = 8


def _show(v: Any) -> str:
    """How a figure reads in the summary: "-" for none, seconds to the ms."""
    return "-" if v is None else (f"{v:.3f} s" if isinstance(v, float) else str(v))


def summary_rows(fig: Figures) -> list[tuple[str, str]]:
    steady = [("stream", f"{fig['rate']:g} runs/s due for {fig['duration_s']:g} s")] if fig["mode"] == "steady" else []
    return [
        *steady,
        ("jobs", f"{fig['created']}/{fig['jobs']} created in {fig['create_s']:.2f} s"),
        ("create rate", f"{fig['created_per_s']} jobs/s"),
        ("lateness p50", _show(fig["lateness_p50_s"])),
        ("lateness p90", _show(fig["lateness_p90_s"])),
        ("lateness p99", _show(fig["lateness_p99_s"])),
        ("lateness max", _show(fig["lateness_max_s"])),
        (f"late > {late_bound_s:g} s", _show(fig.get("late_over_5s"))),
        ("drain", _show(fig["drain_s"])),
        ("runs/s", _show(fig["runs_per_s"])),
        ("claimed", _show(fig["claimed"])),
        ("lost", _show(fig["lost"])),
        ("duplicated", _show(fig["duplicated"])),
        ("failed", _show(fig["failed"])),
        *([("redelivered", _show(fig["redelivered"]))] if fig.get("redelivered") else []),
        *pause_rows(fig),
        *failover_rows(fig.get("failover")),
    ]


def pause_rows(fig: Figures) -> list[tuple[str, str]]:
    if fig.get("loop_lag_p99_s") is None:
        return []
    return [
        ("event-loop lag p99", "≤ " + _show(fig["loop_lag_p99_s"])),
        ("event-loop lag max", _show(fig["loop_lag_max_s"])),
        ("GC pause max", f"{_show(fig['gc_pause_max_s'])} ({fig['gc_pauses']} collections)"),
    ]


def failover_rows(fail: Figures | None) -> list[tuple[str, str]]:
    if fail is None:
        return []
    if fail["kill_at_s"] is None:
        return [("leader killed", f"no: {fail['error']}")]
    by = f" (by {fail['first_write_by']})" if fail["first_write_by"] else ""
    rows = [
        ("leader killed", f"{fail['node']} (term {fail['term']}) at {fail['kill_at_s']:+.3f} s after the due instant"),
        ("first write after", _show(fail["first_write_s"]) + by),
        ("first claim after", _show(fail["first_claim_s"])),
        ("first result after", _show(fail["first_result_s"])),
        ("restarted after", _show(fail["restart_s"])),
        ("ready again after", _show(fail["ready_again_s"])),
    ]
    if fail["error"]:
        rows.append(("failover error", fail["error"]))
    return rows


def summary(fig: Figures) -> str:
    rows = summary_rows(fig)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


# -- report files --------------------------------------------------------------


def report_paths(report: str | None, now_s: float) -> tuple[str, str]:
    """The JSON and HTML paths: `--report FILE` and FILE's stem + `.html`, or a
    timestamped name in the current directory when no FILE was given. The
    charts alone go to FILE's stem + `.svg` (`chart_path`)."""
    if report is None:
        stamp = datetime.fromtimestamp(now_s).strftime("%Y%m%d-%H%M%S")
        report = f"tempo-loadgen-{stamp}.json"
    root, ext = os.path.splitext(report)
    if ext.lower() in (".html", ".svg"):
        raise CannotRun(f"--report {report}: the HTML page and the chart go beside the JSON file; name the JSON file")
    return report, root + ".html"


def chart_path(html_path: str) -> str:
    return os.path.splitext(html_path)[0] + ".svg"


def write_reports(fig: Figures, json_path: str, html_path: str) -> None:
    os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(fig, f, indent=2)
    with open(html_path, "w") as f:
        f.write(html_page(fig))
    with open(chart_path(html_path), "w") as f:
        f.write(chart_svg(fig))


def _nice_ticks(low: float, high: float) -> list[float]:
    """At most `chart_ticks_max` round ticks (1, 2, 5 × 10^k apart) covering low..high."""
    if high <= low:
        high = low + 1.0
    raw_step = (high - low) / (chart_ticks_max - 1)
    magnitude = 10 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw_step)
    first = math.floor(low / step) * step
    ticks: list[float] = []
    k = 0
    while first + k * step <= high + step * 1e-9:
        ticks.append(round(first + k * step, 10))
        k += 1
    if ticks[-1] < high:
        ticks.append(round(first + k * step, 10))
    assert 2 <= len(ticks) <= chart_ticks_max + 2
    return ticks


def _fmt_tick(value: float) -> str:
    return f"{value:g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


def svg_chart(title: str, x_label: str, y_label: str, xs: list[float],
              lines: list[tuple[str, str, list[float | None]]],
              marks: Sequence[tuple[float, str]] = ()) -> str:
    """A line chart as inline SVG: one polyline per (label, colour, ys), with
    axes, round ticks, axis labels and a legend. None in ys breaks no line; the
    point is skipped. Each (x, label) of `marks` inside the x range is a dashed
    vertical line (the leader's SIGKILL)."""
    w, h, m = chart_width_px, chart_height_px, chart_margin_px
    plot_w, plot_h = w - m["left"] - m["right"], h - m["top"] - m["bottom"]
    ys_all = [y for _, _, ys in lines for y in ys if y is not None]
    x_ticks = _nice_ticks(min(xs, default=0.0), max(xs, default=1.0))
    y_ticks = _nice_ticks(min(0.0, min(ys_all, default=0.0)), max(ys_all, default=1.0))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def px(x: float) -> float:
        return m["left"] + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return m["top"] + plot_h - (y - y0) / (y1 - y0) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           f'role="img" aria-label="{_esc(title)}">',
           f'<text x="{w / 2:.0f}" y="16" text-anchor="middle" class="title">{_esc(title)}</text>']
    for t in x_ticks:
        out.append(f'<line x1="{px(t):.1f}" y1="{m["top"]}" x2="{px(t):.1f}" y2="{m["top"] + plot_h}" class="grid"/>')
        out.append(f'<text x="{px(t):.1f}" y="{m["top"] + plot_h + 16}" text-anchor="middle">{_fmt_tick(t)}</text>')
    for t in y_ticks:
        out.append(f'<line x1="{m["left"]}" y1="{py(t):.1f}" x2="{m["left"] + plot_w}" y2="{py(t):.1f}" class="grid"/>')
        out.append(f'<text x="{m["left"] - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{_fmt_tick(t)}</text>')
    out.append(f'<line x1="{m["left"]}" y1="{m["top"] + plot_h}" x2="{m["left"] + plot_w}" y2="{m["top"] + plot_h}" class="axis"/>')
    out.append(f'<line x1="{m["left"]}" y1="{m["top"]}" x2="{m["left"]}" y2="{m["top"] + plot_h}" class="axis"/>')
    out.append(f'<text x="{m["left"] + plot_w / 2:.0f}" y="{h - 6}" text-anchor="middle">{_esc(x_label)}</text>')
    out.append(f'<text x="14" y="{m["top"] + plot_h / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {m["top"] + plot_h / 2:.0f})">{_esc(y_label)}</text>')
    for x, label in marks:
        if x0 <= x <= x1:
            out.append(f'<line x1="{px(x):.1f}" y1="{m["top"]}" x2="{px(x):.1f}" y2="{m["top"] + plot_h}" '
                       f'stroke="#444" stroke-dasharray="4 3" class="mark"/>')
            out.append(f'<text x="{px(x) + 4:.1f}" y="{m["top"] + 12}">{_esc(label)}</text>')
    for k, (label, colour, ys) in enumerate(lines):
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True) if y is not None)
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        for x, y in zip(xs, ys, strict=True):
            if y is not None:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{colour}"/>')
        lx = m["left"] + plot_w - 110
        ly = m["top"] + 10 + 16 * k
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 18}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 24}" y="{ly + 4}">{_esc(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


# How chart text and lines look; the same rules style the HTML page and the
# standalone chart file (an SVG shown as an image carries its own style).
_CHART_CSS = """svg { font: 11px system-ui, sans-serif; }
svg .title { font-size: 13px; font-weight: 600; }
svg .grid { stroke: #eee; }
svg .axis { stroke: #444; }"""


def _charts(fig: Figures) -> tuple[str, str]:
    """The two charts drawn from `fig["series"]`: runs claimed per second, and
    lateness p50/p99 per second, with the leader's SIGKILL marked on both."""
    series, bin_s = fig.get("fine_series") or fig["series"], fig.get("fine_bin_s", 1.0)
    xs = [float(p["t_s"]) for p in series]
    origin = "the due instant" if fig.get("mode") == "spike" else "the first due time"
    fail: Figures = fig.get("failover") or {}
    marks = [(float(fail["kill_at_s"]), f"SIGKILL {fail['node']}")] if fail.get("kill_at_s") is not None else []
    claims_chart = svg_chart("runs claimed per second", f"seconds after {origin}", "runs claimed / s", xs,
                             [("claims", "#1f77b4", [p["claims"] / bin_s for p in series])], marks)
    per = "per second" if bin_s == 1.0 else f"per {bin_s:g} s"
    lateness_chart = svg_chart(f"lateness {per} (first claim − planned time)", f"seconds after {origin}", "lateness (s)", xs,
                               [("p50", "#2ca02c", [p.get("lateness_p50_s") for p in series]),
                                ("p99", "#d62728", [p.get("lateness_p99_s") for p in series])], marks)
    return claims_chart, lateness_chart


def _caption(fig: Figures) -> str:
    return (f"tempo loadgen, {fig.get('mode', 'spike')}: {fig.get('jobs')} jobs, {fig.get('nodes', 1)} node(s), "
            f"{fig.get('workers')} workers; lateness p50 {rounded(fig.get('lateness_p50_s'))} s, "
            f"p99 {rounded(fig.get('lateness_p99_s'))} s, late over {late_bound_s:g} s {fig.get('late_over_5s')}; "
            f"lost {fig.get('lost')}, duplicated {fig.get('duplicated')}")


def chart_svg(fig: Figures) -> str:
    """Both charts stacked in one self-contained SVG file under a caption with
    the headline figures, for a README or a ticket."""
    caption_px = 24
    w, h = chart_width_px, caption_px + 2 * chart_height_px
    claims_chart, lateness_chart = _charts(fig)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{_esc(_caption(fig))}">',
        f"<style>{_CHART_CSS}</style>",
        f'<rect width="{w}" height="{h}" fill="#fff"/>',
        f'<text x="{w / 2:.0f}" y="16" text-anchor="middle">{_esc(_caption(fig))}</text>',
        f'<g transform="translate(0 {caption_px})">{claims_chart}</g>',
        f'<g transform="translate(0 {caption_px + chart_height_px})">{lateness_chart}</g>',
        "</svg>",
    ])


def html_page(fig: Figures) -> str:
    """A self-contained page: the summary table and two inline SVG charts drawn
    from `fig["series"]` (no scripts, no network)."""
    claims_chart, lateness_chart = _charts(fig)
    rows = "\n".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>"
                     for k, v in summary_rows(fig))
    title = f"tempo loadgen — {fig.get('mode', 'spike')}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ padding: 3px 12px; border-bottom: 1px solid #ddd; text-align: left; }}
td {{ font-variant-numeric: tabular-nums; }}
svg {{ display: block; margin: 1em 0; }}
{_CHART_CSS}
</style></head><body>
<h1>{_esc(title)}</h1>
<p>{_esc(fig.get("nodes", 1))} node(s) at {_esc(", ".join(fig.get("urls", [])))}, {_esc(fig.get("workers"))} workers.</p>
<table>
{rows}
</table>
{claims_chart}
{lateness_chart}
</body></html>
"""


