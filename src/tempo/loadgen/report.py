"""The report of a run: the summary table (text on stdout, HTML in the
page), and the report files.

`--report FILE` (default `tempo-loadgen-YYYYMMDD-HHMMSS.json` in the current
directory) gets the figures as JSON, and FILE's stem + `.html` a
self-contained page: when and with which tempo and parameters it ran, the
summary table, and the charts (`charts.py`: the claims histogram and the
lateness CDF) inline as SVG. The same charts, under a caption with the
headline figures, the date, the version and the command, go to FILE's stem +
`.svg`, an image that stands alone (a README shows it). The charts need
matplotlib, the optional extra `tempo[report]`; without it the JSON and the
page are written all the same, and the page says how to get them.
"""

import html
import json
import os
from datetime import datetime

from tempo.loadgen.captions import about_line, show
from tempo.loadgen.figures import Figures, late_bound_s
from tempo.loadgen.options import CannotRun

# What `tempo loadgen` says where the charts cannot be drawn.
charts_hint = "Install the report extra tempo[report] for them: in the checkout, .venv/bin/pip install -e '.[report]'"


# The percentiles of a lateness the summary shows, as its figures name them.
_PERCENTILES = ("p50", "p90", "p99", "max")


def percentile_rows(fig: Figures, name: str) -> list[tuple[str, str]]:
    """The rows `name p50` to `name max`, from the figures of that name
    (`start lateness p99` from `start_lateness_p99_s`)."""
    key = name.replace(" ", "_")
    return [(f"{name} {p}", show(fig[f"{key}_{p}_s"])) for p in _PERCENTILES]


def summary_rows(fig: Figures) -> list[tuple[str, str]]:
    steady = [("stream", f"{fig['rate']:g} runs/s due for {fig['duration_s']:g} s")] if fig["mode"] == "steady" else []
    return [
        *steady,
        ("jobs", f"{fig['created']}/{fig['jobs']} created in {fig['create_s']:.2f} s"),
        ("create rate", f"{fig['created_per_s']} jobs/s"),
        *percentile_rows(fig, "lateness"),
        *start_rows(fig),
        (f"late > {late_bound_s:g} s", show(fig.get("late_over_5s"))),
        ("drain", show(fig["drain_s"])),
        ("runs/s", show(fig["runs_per_s"])),
        ("claimed", show(fig["claimed"])),
        ("lost", show(fig["lost"])),
        ("duplicated", show(fig["duplicated"])),
        ("failed", show(fig["failed"])),
        *([("redelivered", show(fig["redelivered"]))] if fig.get("redelivered") else []),
        *pause_rows(fig),
        *failover_rows(fig.get("failover")),
    ]


def start_rows(fig: Figures) -> list[tuple[str, str]]:
    """Pre-dispatch (`--ahead-ms`): start lateness at the workers, beside
    the claim lateness above (negative: claimed ahead)."""
    if "started" not in fig:
        return []
    return [
        *percentile_rows(fig, "start lateness"),
        ("started", show(fig["started"])),
        ("started early", show(fig["start_early"])),
        ("started twice", show(fig["start_duplicated"])),
    ]


def pause_rows(fig: Figures) -> list[tuple[str, str]]:
    if fig.get("loop_lag_p99_s") is None:
        return []
    return [
        ("event-loop lag p99", "≤ " + show(fig["loop_lag_p99_s"])),
        ("event-loop lag max", show(fig["loop_lag_max_s"])),
        ("GC pause max", f"{show(fig['gc_pause_max_s'])} ({fig['gc_pauses']} collections)"),
    ]


def failover_rows(fail: Figures | None) -> list[tuple[str, str]]:
    if fail is None:
        return []
    if fail["kill_at_s"] is None:
        return [("leader killed", f"no: {fail['error']}")]
    by = f" (by {fail['first_write_by']})" if fail["first_write_by"] else ""
    rows = [
        ("leader killed", f"{fail['node']} (term {fail['term']}) at {fail['kill_at_s']:+.3f} s after the due instant"),
        ("first write after", show(fail["first_write_s"]) + by),
        ("first claim after", show(fail["first_claim_s"])),
        ("first result after", show(fail["first_result_s"])),
        ("restarted after", show(fail["restart_s"])),
        ("ready again after", show(fail["ready_again_s"])),
    ]
    if fail["error"]:
        rows.append(("failover error", fail["error"]))
    rows += [("WARNING", warning) for warning in fail.get("warnings", [])]
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


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _chart(fig: Figures) -> str | None:
    """The charts as one SVG, or None where matplotlib is missing (the
    optional extra `tempo[report]` is not installed)."""
    try:
        from tempo.loadgen import charts
    except ImportError:
        return None
    return charts.svg(fig)


def chart_svg(fig: Figures) -> str:
    """The charts as one standalone SVG image (raises ImportError without
    the `report` extra)."""
    from tempo.loadgen import charts

    return charts.svg(fig)


def write_reports(fig: Figures, json_path: str, html_path: str) -> list[str]:
    """Writes the JSON, the HTML page and, with the `report` extra, the
    standalone chart; the paths written."""
    os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(fig, f, indent=2)
    chart = _chart(fig)
    with open(html_path, "w") as f:
        f.write(_page(fig, chart))
    if chart is None:
        return [json_path, html_path]
    with open(chart_path(html_path), "w") as f:
        f.write(chart)
    return [json_path, html_path, chart_path(html_path)]


def html_page(fig: Figures) -> str:
    return _page(fig, _chart(fig))


def _page(fig: Figures, chart: str | None) -> str:
    """A self-contained page (no scripts, no network): what ran, the summary
    table, the parameters and the charts, inline."""
    rows = "\n".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in summary_rows(fig))
    params = "\n".join(f"<tr><th>{_esc(k)}</th><td>{_esc('-' if v is None else v)}</td></tr>"
                       for k, v in (fig.get("parameters") or {}).items())
    # An SVG inline in HTML starts at its <svg> element: no XML declaration or DOCTYPE.
    pictures = (chart[chart.index("<svg"):] if chart is not None else
                f"<p>No charts: they need matplotlib. {_esc(charts_hint)}</p>")
    title = f"tempo loadgen — {fig.get('mode', 'spike')}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ padding: 3px 12px; border-bottom: 1px solid #ddd; text-align: left; }}
td {{ font-variant-numeric: tabular-nums; }}
code {{ font-size: 13px; }}
svg {{ display: block; margin: 1em 0; max-width: 100%; height: auto; }}
</style></head><body>
<h1>{_esc(title)}</h1>
<p>{_esc(about_line(fig))}</p>
<p><code>{_esc(fig.get("command", ""))}</code></p>
<p>{_esc(fig.get("nodes", 1))} node(s) at {_esc(", ".join(fig.get("urls", [])))}, {_esc(fig.get("workers"))} workers.</p>
<table>
{rows}
</table>
{pictures}
<h2>Parameters</h2>
<table>
{params}
</table>
</body></html>
"""
