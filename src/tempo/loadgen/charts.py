"""The report's pictures, drawn with matplotlib (the optional extra
`tempo[report]`) from the figures' JSON:

- runs claimed per bin, a step histogram of `bins` (`bin_s` wide, at least
  `figures.chart_bins_min` of them over the drain), titled with the bin's
  width; the leader's SIGKILL, the first write after it and its restart
  are dashed lines;
- the lateness CDF (`lateness_cdf`): the share of runs whose first claim
  came at most x after their planned time, with p50, p90 and p99 marked
  each at its own height, so none hides another;
- in steady mode, the lateness of the runs first claimed in each bin: p50
  as a line over a band up to p99 (in a spike that is only the claim time
  again, which the histogram shows).

Legends stand right of the data, never on it. Above both, the headline
figures, the date, the tempo version, the CPUs and load, and the command
that repeats the run. The SVG keeps its text as text (searchable, and the
page's alt text), carries no creation date and gets fixed element IDs, so
the same figures give the same file.
"""

import io
from contextlib import AbstractContextManager

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tempo.loadgen.captions import about_line, caption
from tempo.loadgen.figures import Figures, late_bound_s

figure_size_in = (10.0, 7.4)
_CLAIMS_COLOUR = "#1f77b4"
_MARK_COLOURS = {"p50": "#2ca02c", "p90": "#ff7f0e", "p99": "#d62728"}


def _style() -> AbstractContextManager[None]:
    """Text stays text in the SVG, and its element IDs come from a fixed salt
    rather than a random one."""
    return matplotlib.rc_context({
        "svg.fonttype": "none",
        "svg.hashsalt": "tempo-loadgen",
        "font.family": "sans-serif",
        "font.size": 9.0,
    })


def width_text(bin_s: float) -> str:
    """A bin's width as a reader says it: "5 ms", "0.5 s", "2 s"."""
    return f"{bin_s * 1000:g} ms" if bin_s < 0.1 else f"{bin_s:g} s"


def _legend_outside(ax: Axes) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False, fontsize=8)


def _claims(ax: Axes, fig: Figures) -> None:
    """Claims per bin as steps: each bin's count is flat across its width, so
    a 0.3 s drain reads as the 60 bins it is, not a line between two points."""
    bin_s = float(fig["bin_s"])
    bins = fig["bins"] or [{"t_s": 0.0, "claims": 0}]
    edges = [float(p["t_s"]) for p in bins] + [float(bins[-1]["t_s"]) + bin_s]
    counts = [int(p["claims"]) for p in bins]
    peak = max(counts)
    # The busiest bin is a count, never turned into a rate: workers claim in
    # batches (up to 1,000 runs a claim), and one batch landing whole in a
    # 2 ms bin is not 500,000 runs/s. The rate is the one measured over the
    # drain (`runs_per_s`, figures.py).
    label = f"claims\n(re-deliveries too)\nbusiest {width_text(bin_s)}: {peak:,} claims"
    if fig.get("runs_per_s") is not None:
        label += f"\n{fig['runs_per_s']:,} runs/s over the drain"
    ax.stairs(counts, edges, fill=True, facecolor="#aec7e8", edgecolor=_CLAIMS_COLOUR, linewidth=1.0, label=label)
    origin = "the due instant" if fig.get("mode", "spike") == "spike" else "the first due time"
    per = f"runs claimed per {width_text(bin_s)}"
    ax.set_title(per, loc="left", fontsize=10)
    ax.set_ylabel(per)
    ax.set_xlabel(f"seconds after {origin}")
    marks_s = _failover_marks(ax, fig.get("failover"))
    ax.set_xlim(min([0.0, edges[0], *marks_s]), max([edges[-1], *marks_s]))
    ax.set_ylim(0, peak * 1.05 if peak else 1)
    ax.grid(axis="y", color="#eee")
    _legend_outside(ax)


def _failover_marks(ax: Axes, fail: Figures | None) -> list[float]:
    """The leader's SIGKILL, the first write after it and its restart as
    vertical lines; their x (seconds after the origin)."""
    if not fail or fail.get("kill_at_s") is None:
        return []
    kill_s = float(fail["kill_at_s"])
    drained = " (the load had drained: see the warnings)" if fail.get("drained_before_kill_s") is not None else ""
    marks = [(kill_s, "--", "#444", f"SIGKILL {fail['node']} at {kill_s:+.2f} s{drained}")]
    if fail.get("first_write_s") is not None:
        marks.append((kill_s + fail["first_write_s"], ":", "#9467bd",
                      f"first write after it: {fail['first_write_s']:.2f} s later"))
    if fail.get("restart_s") is not None:
        marks.append((kill_s + fail["restart_s"], "-.", "#8c564b",
                      f"{fail['node']} restarted {fail['restart_s']:.2f} s later"))
    for x_s, style, colour, label in marks:
        ax.axvline(x_s, color=colour, linestyle=style, linewidth=1.2, label=label)
    return [x_s for x_s, *_ in marks]


def _cdf(ax: Axes, fig: Figures) -> None:
    """The empirical CDF as steps from 0 %, and p50, p90 and p99 as dotted
    drops from the curve to the axis, each labelled with its value."""
    cdf = fig.get("lateness_cdf") or []
    if cdf:
        xs = [float(cdf[0][0])] + [float(s) for s, _ in cdf]
        ys = [0.0] + [100.0 * float(f) for _, f in cdf]
        ax.plot(xs, ys, drawstyle="steps-post", color=_CLAIMS_COLOUR, linewidth=1.6,
                label="runs at most\nthis late")
    else:
        ax.plot([], [], " ", label="no run was claimed")
    for name, share in (("p50", 50), ("p90", 90), ("p99", 99)):
        late_s = fig.get(f"lateness_{name}_s")
        if late_s is not None:
            ax.plot([late_s, late_s], [0, share], color=_MARK_COLOURS[name], linestyle=":", linewidth=1.4,
                    marker="o", markevery=[1], markersize=4, label=f"{name} {late_s:.3f} s")
    if fig.get("lateness_max_s") is not None:
        ax.plot([], [], " ", label=f"max {fig['lateness_max_s']:.3f} s")
    if fig.get("lateness_max_s") is not None and fig["lateness_max_s"] > late_bound_s:
        ax.axvline(late_bound_s, color="#444", linestyle="--", linewidth=1.0,
                   label=f"{fig.get('late_over_5s', 0):,} runs over {late_bound_s:g} s late")
    ax.set_title("lateness of each run's first claim (CDF)", loc="left", fontsize=10)
    ax.set_xlabel("lateness: first claim − planned time (s)")
    ax.set_ylabel("% of runs at most this late")
    ax.set_ylim(0, 101)
    ax.set_xlim(left=min(0.0, float(cdf[0][0])) if cdf else 0.0)
    ax.grid(color="#eee")
    _legend_outside(ax)


def _lateness_by_time(ax: Axes, fig: Figures) -> None:
    """Steady mode: the lateness of the runs first claimed in each bin, p50
    as a line over a band that reaches up to p99, so p50 shows even where
    the two meet; a bin without a first claim is a gap."""
    bin_s = float(fig["bin_s"])
    bins = fig["bins"]
    if not bins:
        ax.plot([], [], " ", label="no run was claimed")
    else:
        edges = [float(p["t_s"]) for p in bins] + [float(bins[-1]["t_s"]) + bin_s]
        nan = float("nan")
        p50 = [nan if p["lateness_p50_s"] is None else float(p["lateness_p50_s"]) for p in bins]
        p99 = [nan if p["lateness_p99_s"] is None else float(p["lateness_p99_s"]) for p in bins]
        ax.stairs(p99, edges, baseline=p50, fill=True, facecolor="#f4b6b6", edgecolor="none",
                  label="p50 to p99 of the bin", zorder=2)
        ax.stairs(p99, edges, baseline=None, color=_MARK_COLOURS["p99"], linewidth=0.8, label="p99", zorder=3)
        ax.stairs(p50, edges, baseline=None, color=_MARK_COLOURS["p50"], linewidth=1.8, label="p50", zorder=4)
        marks_s = _failover_marks(ax, fig.get("failover"))
        ax.set_xlim(min([0.0, edges[0], *marks_s]), max([edges[-1], *marks_s]))
    ax.set_title(f"lateness of the runs first claimed in each {width_text(bin_s)}", loc="left", fontsize=10)
    ax.set_xlabel("seconds after the first due time")
    ax.set_ylabel("lateness (s)")
    ax.set_ylim(bottom=0)
    ax.grid(color="#eee")
    _legend_outside(ax)


def draw(fig: Figures) -> Figure:
    """The charts under the run's caption, as one matplotlib Figure (no
    pyplot: no global state, no display); steady mode adds lateness by
    claim time."""
    steady = fig.get("mode") == "steady"
    with _style():
        width_in, height_in = figure_size_in
        out = Figure(figsize=(width_in, height_in * 1.45 if steady else height_in), layout="constrained")
        out.suptitle(f"{caption(fig)}\n{about_line(fig)}\n{fig.get('command', '')}", fontsize=9)
        axes = out.subplots(3 if steady else 2, 1)
        _claims(axes[0], fig)
        _cdf(axes[1], fig)
        if steady:
            _lateness_by_time(axes[2], fig)
    return out


def svg(fig: Figures) -> str:
    """`draw` as a standalone SVG document."""
    buffer = io.StringIO()
    with _style():
        draw(fig).savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()
