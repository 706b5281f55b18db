"""The load generator's pictures: the claims histogram's bins adapt to the
drain and its title names them, the lateness CDF shows p50 and p99 apart,
legends sit outside the data, and the page and the chart name the date, the
tempo version and the parameters of the run. Without the `report` extra the
run still prints its figures and says how to get the pictures."""

import itertools
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")  # the `report` extra, which the `test` extra includes

from tempo.loadgen import Claim, Options, Tally, about_run, charts, figures, html_page
from tempo.loadgen.figures import Figures

due_s = 1_800_000_000.0
runs = 25_000
drain_s = 0.3
run_timeout_s = 60


def spike(kill_at_s: float | None = None) -> Figures:
    """25,000 runs due at one instant, their first claims spread evenly over
    0.3 s from 20 ms after it: the spike of the README on a quiet machine."""
    tally = Tally(claims=[
        Claim(f"r{k}", f"j{k}", 1, due_at_s=due_s, claimed_at_s=due_s + 0.02 + drain_s * k / runs, planned_s=due_s)
        for k in range(runs)
    ])
    opts = Options(urls=["http://127.0.0.1:9"], jobs=runs, spawn=1)
    fig = figures(opts, [f"j{k}" for k in range(runs)], 1.0, due_s, tally)
    fig |= about_run(opts, due_s - 10.0)
    if kill_at_s is not None:
        fig["failover"] = {"node": "n2", "term": 2, "kill_at_s": kill_at_s, "first_write_s": 1.2,
                           "first_write_by": "n1", "first_claim_s": 1.3, "first_result_s": 1.3,
                           "restart_s": 3.0, "ready_again_s": 3.4, "error": None}
    return fig


def test_a_short_drain_gets_at_least_20_bins_of_a_named_width() -> None:
    fig = spike()
    assert fig["bin_s"] <= drain_s / 20
    assert len(fig["bins"]) >= 20
    assert sum(point["claims"] for point in fig["bins"]) == runs
    # Each bin starts one width after the one before, from the due instant.
    starts = [point["t_s"] for point in fig["bins"]]
    assert all(b - a == pytest.approx(fig["bin_s"]) for a, b in itertools.pairwise(starts))


def test_the_claims_chart_counts_per_bin_and_its_title_says_so() -> None:
    fig = spike()
    drawn = charts.draw(fig)
    claims_ax = drawn.axes[0]
    width_ms = round(fig["bin_s"] * 1000)
    assert claims_ax.get_title(loc="left") == f"runs claimed per {width_ms} ms"
    assert claims_ax.get_ylabel() == f"runs claimed per {width_ms} ms"
    # A step histogram: one flat step per bin, the count in that bin.
    [steps] = [p for p in claims_ax.patches if type(p).__name__ == "StepPatch"]
    values, edges, _ = steps.get_data()
    assert list(values) == [point["claims"] for point in fig["bins"]]
    assert len(edges) == len(values) + 1
    svg = charts.svg(fig)
    assert f"runs claimed per {width_ms} ms" in svg and "per second" not in svg


def test_the_lateness_cdf_marks_p50_and_p99_apart() -> None:
    fig = spike()
    cdf = fig["lateness_cdf"]
    fractions = [f for _, f in cdf]
    latenesses = [s for s, _ in cdf]
    assert fractions == sorted(fractions) and latenesses == sorted(latenesses)
    assert cdf[-1] == [fig["lateness_max_s"], 1.0]
    assert 100 <= len(cdf) <= 1001
    drawn = charts.draw(fig)
    cdf_ax = drawn.axes[1]
    marks = {line.get_label().split()[0]: line for line in cdf_ax.get_lines()
             if line.get_label().startswith(("p50", "p99"))}
    assert set(marks) == {"p50", "p99"}
    assert f"{fig['lateness_p50_s']:.3f} s" in marks["p50"].get_label()
    assert f"{fig['lateness_p99_s']:.3f} s" in marks["p99"].get_label()
    # Each mark stands at its own share of the runs, so neither hides the other.
    assert max(marks["p50"].get_ydata()) == 50 and max(marks["p99"].get_ydata()) == 99
    assert min(marks["p50"].get_xdata()) == fig["lateness_p50_s"]
    assert min(marks["p99"].get_xdata()) == fig["lateness_p99_s"]


def test_legends_sit_outside_the_data() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    drawn = charts.draw(spike(kill_at_s=0.1))
    canvas = FigureCanvasAgg(drawn)
    canvas.draw()
    renderer = canvas.get_renderer()
    assert len(drawn.axes) == 2
    for ax in drawn.axes:
        legend = ax.get_legend()
        assert legend is not None, ax.get_title(loc="left")
        assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)), ax.get_title(loc="left")
        assert legend.get_window_extent(renderer).x1 <= drawn.bbox.x1  # and inside the picture


def test_the_page_and_the_chart_name_date_version_and_parameters() -> None:
    fig = spike(kill_at_s=0.1)
    version = metadata.version("tempo")
    assert fig["tempo_version"] == version
    assert fig["started_at"] == "2027-01-15T07:59:50.000Z"
    assert fig["command"].startswith("tempo loadgen --spawn 1 --jobs 25000 ")
    assert "--workers 4" in fig["command"] and "--due-in-s 10" in fig["command"]
    assert fig["parameters"]["workers"] == 4 and fig["parameters"]["batch"] == 1000
    for text in (charts.svg(fig), html_page(fig)):
        assert "2027-01-15 07:59:50 UTC" in text
        assert f"tempo {version}" in text
        assert fig["command"] in text
        assert "SIGKILL n2" in text
    page = html_page(fig)
    assert page.count("<svg") == 1 and "<script" not in page and "<?xml" not in page
    assert "<th>batch</th><td>1000</td>" in page


def test_without_the_report_extra_the_run_prints_its_figures_and_says_how_to_get_pictures(tmp_path: Path) -> None:
    report = tmp_path / "plain.json"
    # matplotlib missing: an import of it fails, as where the extra is not installed.
    blocked = "import sys; sys.modules['matplotlib'] = None; from tempo.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", blocked, "loadgen", "--spawn", "1", "--jobs", "100", "--due-in-s", "2",
         "--workers", "1", "--batch", "100", "--report", str(report)],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lateness p99" in done.stdout
    assert "tempo[report]" in done.stdout
    assert json.loads(report.read_text())["claimed"] == 100
    page = (tmp_path / "plain.html").read_text()
    assert "tempo[report]" in page and "<svg" not in page
    assert not (tmp_path / "plain.svg").exists()


@pytest.mark.parametrize("span_s", [0.04, 0.3, 0.95, 1.0, 3.4, 12.3, 60.0, 3600.0])
def test_any_drain_from_40_ms_gets_40_to_100_round_bins(span_s: float) -> None:
    from tempo.loadgen.figures import chart_bin_s

    bin_s = chart_bin_s(span_s)
    assert span_s / bin_s * (1 + 1e-9) >= 40 and span_s / bin_s <= 100
    mantissa = float(f"{bin_s:e}".split("e")[0])
    assert mantissa in (1.0, 2.0, 5.0), bin_s


@pytest.mark.filterwarnings("error")
def test_a_run_without_a_single_claim_still_gets_its_charts() -> None:
    opts = Options(urls=["http://127.0.0.1:9"], jobs=3, spawn=1)
    fig = figures(opts, ["j1", "j2", "j3"], 1.0, due_s, Tally()) | about_run(opts, due_s)
    assert fig["lost"] == 3 and fig["bins"] == [] and fig["lateness_cdf"] == []
    assert "lost 3" in charts.svg(fig) and "<svg" in html_page(fig)


def test_a_steady_stream_also_shows_lateness_by_claim_time_with_p50_above_the_p99_band() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rate, duration_s = 100, 5
    claims = []
    for k in range(rate * duration_s):
        planned_s = due_s + k / rate
        # Every tenth run is 0.2 s late, the rest 10 ms: p50 and p99 differ in each bin.
        claims.append(Claim(f"r{k}", f"j{k}", 1, due_at_s=planned_s, planned_s=planned_s,
                            claimed_at_s=planned_s + (0.2 if k % 10 == 0 else 0.01)))
    opts = Options(urls=["http://127.0.0.1:9"], rate=rate, duration_s=duration_s, spawn=1)
    fig = figures(opts, [c.job_id for c in claims], 1.0, due_s, Tally(claims=claims),
                  last_due_s=claims[-1].planned_s) | about_run(opts, due_s)
    assert fig["command"].startswith("tempo loadgen --spawn 1 --rate 100 --duration-s 5 ")
    drawn = charts.draw(fig)
    assert len(drawn.axes) == 3
    by_time = drawn.axes[2]
    steps = {p.get_label(): p for p in by_time.patches}
    assert set(steps) == {"p50 to p99 of the bin", "p99", "p50"}
    assert steps["p50"].get_zorder() > steps["p99"].get_zorder() > steps["p50 to p99 of the bin"].get_zorder()
    # While the stream lasts each bin holds about ten runs on time and one
    # late: p50 is 10 ms, p99 mostly 0.2 s.
    bins_in_stream = round(duration_s / fig["bin_s"])
    assert list(steps["p50"].get_data().values[:bins_in_stream]) == pytest.approx([0.01] * bins_in_stream)
    p99_values = [v for v in steps["p99"].get_data().values if v == v]
    assert max(p99_values) == pytest.approx(0.2) and sum(v > 0.1 for v in p99_values) >= bins_in_stream / 2
    canvas = FigureCanvasAgg(drawn)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in drawn.axes:
        legend = ax.get_legend()
        assert legend is not None and not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_the_claims_legend_states_the_measured_rate_not_one_batch_as_a_rate() -> None:
    """Workers claim 1,000 runs at a time: a whole batch lands in one narrow
    bin, and "1,000 per 10 ms = 100,000 runs/s" was a rate nobody measured
    (issue 25 finding 7). The legend gives the busiest bin as a count, and
    the rate over the drain, which is what was measured."""
    batch, batches = 1000, 5
    tally = Tally(claims=[
        Claim(f"r{b}-{k}", f"j{b}-{k}", 1, due_at_s=due_s, claimed_at_s=due_s + 0.02 + 0.0625 * b + k * 1e-6,
              planned_s=due_s)
        for b in range(batches) for k in range(batch)
    ])
    opts = Options(urls=["http://127.0.0.1:9"], jobs=batch * batches, spawn=1)
    fig = figures(opts, [f"j{b}-{k}" for b in range(batches) for k in range(batch)], 1.0, due_s, tally)
    fig |= about_run(opts, due_s - 10.0)
    bin_rate = batch / fig["bin_s"]
    assert bin_rate > 5 * fig["runs_per_s"]  # the trap: one batch per bin, as a rate
    [label] = [p.get_label() for p in charts.draw(fig).axes[0].patches if type(p).__name__ == "StepPatch"]
    assert f"{bin_rate:,.0f}" not in label, label
    assert f"{fig['runs_per_s']:,} runs/s" in label and "over the drain" in label, label
    assert f"busiest {round(fig['bin_s'] * 1000)} ms: {batch:,} claims" in label, label
