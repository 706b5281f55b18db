"""The lines that name a run above its charts and on its report page: the
headline figures and when, which tempo and on what it ran. Apart from
`report.py` and `charts.py` so that both read them and neither imports the
other."""

from typing import Any

from tempo.loadgen.figures import Figures, late_bound_s


def show(v: Any) -> str:
    """How a figure reads in the summary: "-" for none, seconds to the ms."""
    return "-" if v is None else (f"{v:.3f} s" if isinstance(v, float) else str(v))


def caption(fig: Figures) -> str:
    """The headline figures, one line: above the charts and in their alt text."""
    return (f"tempo loadgen, {fig.get('mode', 'spike')}: {fig.get('jobs'):,} jobs, {fig.get('nodes', 1)} node(s), "
            f"{fig.get('workers')} workers; lateness p50 {show(fig.get('lateness_p50_s'))}, "
            f"p99 {show(fig.get('lateness_p99_s'))}, {fig.get('late_over_5s', 0):,} runs over {late_bound_s:g} s late; "
            f"lost {fig.get('lost')}, duplicated {fig.get('duplicated')}"
            + (f", redelivered {fig['redelivered']:,}" if fig.get("redelivered") else ""))


def about_line(fig: Figures) -> str:
    """When, which tempo and on what: "2026-12-03 22:15:07 UTC · tempo 0.1.0 · 2 CPUs, load 3.1"."""
    started_at = fig.get("started_at")
    at = "?" if started_at is None else f"{started_at[:10]} {started_at[11:19]} UTC"
    host = fig.get("host") or {}
    load = f", load {host['load_1m']:g} at start" if host.get("load_1m") is not None else ""
    cpus = f" · {host['cpus']} CPUs{load}" if host.get("cpus") else ""
    return f"{at} · tempo {fig.get('tempo_version', '?')}{cpus}"
