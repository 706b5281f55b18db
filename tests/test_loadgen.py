"""`tempo loadgen --spawn 1` and `--spawn 3`: small spikes end to end, their
reports, and a spike through the leader's SIGKILL."""

import json
import subprocess
from pathlib import Path

from conftest import tempo_command
from tempo import metrics as prom
from tempo.loadgen import parse_pauses, pause_figures

run_timeout_s = 60


def test_small_spike_report_adds_up(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--spawn", "1", "--jobs", "300", "--due-in-s", "3",
         "--workers", "2", "--batch", "100", "--report", str(report)],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lateness p99" in done.stdout  # the summary table; stdout is no TTY, so no live line
    assert "\r" not in done.stdout
    fig = json.loads(report.read_text())
    assert fig["jobs"] == fig["created"] == 300
    assert fig["lost"] == 0 and fig["duplicated"] == 0 and fig["failed"] == 0
    assert fig["claimed"] == 300 == fig["reported"]
    assert sum(point["claims"] for point in fig["series"]) == fig["claimed"]
    assert fig["lateness_p50_s"] <= fig["lateness_p90_s"] <= fig["lateness_p99_s"] <= fig["lateness_max_s"]
    assert fig["drain_s"] >= 0 and fig["runs_per_s"] > 0 and fig["created_per_s"] > 0
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1 and "<script" not in page
    # Bins of a width that cuts the span of the claims into 40 or more (when
    # it is 40 ms or longer), named in the chart's title.
    assert sum(point["claims"] for point in fig["bins"]) == fig["claimed"]
    assert "runs claimed per " in page and "runs claimed per second" not in page
    assert fig["lateness_cdf"][-1] == [fig["lateness_max_s"], 1.0]
    assert f"<td>{fig['claimed']}</td>" in page and "lateness p99" in page
    chart = (tmp_path / "report.svg").read_text()
    assert chart.startswith("<?xml") and chart.count("<svg") == 1 and chart.rstrip().endswith("</svg>")
    assert "300 jobs" in chart and "lost 0, duplicated 0" in chart and fig["command"] in chart
    assert all("lateness_p50_s" in point for point in fig["series"])
    for key in ("jobs", "created_per_s", "lateness_p50_s", "lateness_p90_s", "lateness_p99_s",
                "lateness_max_s", "drain_s", "runs_per_s", "lost", "duplicated"):
        assert key in fig


def test_plain_workers_claim_and_report_every_run(tmp_path: Path) -> None:
    """`--plain`: workers that claim over JSON, report, then claim again."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--spawn", "1", "--jobs", "300", "--due-in-s", "3",
         "--workers", "2", "--batch", "100", "--plain", "--report", str(report)],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fig = json.loads(report.read_text())
    assert fig["parameters"]["plain"] is True and fig["command"].endswith(" --plain")
    assert fig["jobs"] == fig["created"] == 300
    assert fig["lost"] == 0 and fig["duplicated"] == 0 and fig["failed"] == 0
    assert fig["claimed"] == 300 == fig["reported"]


def test_cluster_nodes_share_one_peers_list(tmp_path: Path) -> None:
    from tempo.loadgen import Cluster

    cluster = Cluster(str(tmp_path), 3)
    assert [n.id for n in cluster.nodes] == ["n1", "n2", "n3"]
    assert cluster.urls == [n.url for n in cluster.nodes] and len(set(cluster.urls)) == 3
    peers = {n.argv[n.argv.index("--peers") + 1] for n in cluster.nodes}
    assert peers == {",".join(f"{n.id}={n.url}" for n in cluster.nodes)}
    for node in cluster.nodes:
        assert node.argv[node.argv.index("--node") + 1] == node.id
        assert node.argv[node.argv.index("--listen") + 1] == node.url.removeprefix("http://")
        assert node.argv[node.argv.index("--data-dir") + 1] == str(tmp_path / node.id)
    single = Cluster(str(tmp_path / "one"), 1)
    assert "--node" not in single.nodes[0].argv and "--peers" not in single.nodes[0].argv


def test_bad_cluster_options_exit_2() -> None:
    cases = (
        (["--spawn", "2", "--jobs", "10"], "--spawn"),
        (["--spawn", "1", "--jobs", "10", "--kill-leader-at-s", "1"], "--kill-leader-at-s"),
        (["--url", "http://127.0.0.1:9", "--jobs", "10", "--kill-leader-at-s", "1"], "--kill-leader-at-s"),
        (["--spawn", "3", "--jobs", "10", "--kill-leader-at-s", "-6"], "--kill-leader-at-s"),
        (["--spawn", "1", "--jobs", "10", "--ahead-ms", "10001"], "--ahead-ms"),
        (["--spawn", "1", "--jobs", "10", "--ahead-ms", "1000", "--plain"], "--plain"),
        (["--spawn", "3", "--jobs", "10", "--lease-s", "0"], "--lease-s"),
        (["--url", "http://127.0.0.1:9", "--jobs", "10", "--work-dir", "x"], "--work-dir"),
    )
    for argv, named in cases:
        done = subprocess.run(
            [*tempo_command(), "loadgen", "--no-report", *argv],
            capture_output=True, text=True, timeout=run_timeout_s,
        )
        assert done.returncode == 2, (argv, done.stdout + done.stderr)
        assert named in done.stderr, (argv, done.stderr)


def check_spike_figures(fig: dict, jobs: int) -> None:
    assert fig["jobs"] == fig["created"] == jobs
    assert fig["lost"] == 0 and fig["duplicated"] == 0
    # A redelivered run (attempt > 1) may replace a first claim whose answer
    # died with the leader, or come on top of one that did arrive.
    assert jobs <= fig["claimed"] <= jobs + fig["redelivered"]
    assert sum(point["claims"] for point in fig["series"]) == fig["claimed"]
    assert fig["lateness_p50_s"] <= fig["lateness_p90_s"] <= fig["lateness_p99_s"] <= fig["lateness_max_s"]
    assert fig["drain_s"] >= 0 and fig["runs_per_s"] > 0 and fig["created_per_s"] > 0


def test_cluster_spike_report_adds_up(tmp_path: Path) -> None:
    report = tmp_path / "cluster.json"
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--spawn", "3", "--jobs", "300", "--due-in-s", "3",
         "--workers", "2", "--batch", "100", "--report", str(report)],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fig = json.loads(report.read_text())
    check_spike_figures(fig, 300)
    assert fig["failed"] == 0 and fig["redelivered"] == 0 and fig["reported"] == 300
    assert fig["nodes"] == 3 and len(fig["urls"]) == 3
    assert fig["node_exit_status"] == {"n1": 0, "n2": 0, "n3": 0}  # SIGTERM: a clean exit
    assert "failover" not in fig
    page = (tmp_path / "cluster.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1
    assert f"<td>{fig['claimed']}</td>" in page and "3 node(s)" in page
    assert len(page) > 3000


def test_cluster_survives_killing_the_leader(tmp_path: Path) -> None:
    report = tmp_path / "kill.json"
    # Jitter spreads the due times over 3 s, so runs fall due before, during
    # and after the failover.
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--spawn", "3", "--jobs", "300", "--due-in-s", "3", "--jitter-s", "3",
         "--workers", "2", "--batch", "100", "--kill-leader-at-s", "1", "--restart-after-s", "2",
         "--report", str(report)],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fig = json.loads(report.read_text())
    check_spike_figures(fig, 300)
    assert fig["lease_s"] == 10
    fail = fig["failover"]
    assert fail["error"] is None, fail
    assert fail["node"] in ("n1", "n2", "n3") and fail["first_write_by"] != fail["node"]
    assert 0.9 <= fail["kill_at_s"] < 2
    assert 0 < fail["first_write_s"] < 10 and 0 < fail["first_claim_s"] < 10
    assert 2 <= fail["restart_s"] <= fail["ready_again_s"]
    assert "leader killed" in done.stdout and "first write after" in done.stdout
    assert "SIGKILL" in (tmp_path / "kill.html").read_text()
    assert f"SIGKILL {fail['node']}" in (tmp_path / "kill.svg").read_text()  # marked on the claims chart
    assert set(fig["node_exit_status"].values()) == {0}


def test_no_server_exits_2() -> None:
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--url", "http://127.0.0.1:9", "--jobs", "10", "--no-progress"],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no server answered" in done.stderr


def test_creation_overrun_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--spawn", "1", "--jobs", "20000", "--due-in-s", "0.05",
         "--batch", "50", "--workers", "1", "--no-progress"],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "overran" in done.stderr


def test_steady_stream_report_adds_up(tmp_path: Path) -> None:
    report = tmp_path / "steady.json"
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--spawn", "1", "--rate", "200", "--duration-s", "4",
         "--workers", "2", "--report", str(report)],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fig = json.loads(report.read_text())
    assert fig["mode"] == "steady" and fig["rate"] == 200 and fig["duration_s"] == 4
    assert fig["jobs"] == fig["created"] == fig["claimed"] == 800
    assert fig["lost"] == 0 and fig["duplicated"] == 0 and fig["failed"] == 0
    assert fig["lateness_p50_s"] <= fig["lateness_p90_s"] <= fig["lateness_p99_s"] <= fig["lateness_max_s"]
    assert sum(point["claims"] for point in fig["series"]) == fig["claimed"]
    # Claims are spread over the stream's seconds, not bunched as in the spike.
    assert len(fig["series"]) >= 4
    for point in fig["series"]:
        assert point["lateness_p50_s"] <= point["lateness_p90_s"] <= point["lateness_p99_s"] <= point["lateness_max_s"]
    assert "<svg" in (tmp_path / "steady.html").read_text()


def test_bad_mode_options_exit_2() -> None:
    for argv in (["--jobs", "10", "--rate", "5", "--duration-s", "1"], ["--rate", "5"], []):
        done = subprocess.run(
            [*tempo_command(), "loadgen", "--url", "http://127.0.0.1:9", "--no-report", *argv],
            capture_output=True, text=True, timeout=run_timeout_s,
        )
        assert done.returncode == 2, argv
        assert "--rate" in done.stderr, (argv, done.stderr)


def test_lateness_counts_from_the_planned_time_so_a_redelivery_is_late() -> None:
    """Run r2's first claim (attempt 1) died with the leader; the claim that
    reached a worker is its re-delivery 12 s after the due instant, whose
    `due_at` the lease expiry reset to 0.05 s before it. That run is 12 s
    late, not 0.05 s."""
    from tempo.loadgen import Claim, Options, Tally, chart_svg, figures, html_page, summary_rows

    due_s = 1_000.0
    tally = Tally(claims=[
        Claim("r1", "j1", 1, due_at_s=due_s, claimed_at_s=due_s + 0.2, planned_s=due_s),
        Claim("r2", "j2", 2, due_at_s=due_s + 11.95, claimed_at_s=due_s + 12.0, planned_s=due_s),
        # A re-delivery of a run whose first claim arrived on time: still on time.
        Claim("r3", "j3", 1, due_at_s=due_s, claimed_at_s=due_s + 0.1, planned_s=due_s),
        Claim("r3", "j3", 2, due_at_s=due_s + 10.0, claimed_at_s=due_s + 10.1, planned_s=due_s),
    ])
    fig = figures(Options(urls=["http://127.0.0.1:9"], jobs=3), ["j1", "j2", "j3"], 1.0, due_s, tally)
    assert fig["lateness_max_s"] == 12.0
    assert fig["lateness_p50_s"] == 0.2
    assert fig["late_over_5s"] == 1
    assert fig["lost"] == 0 and fig["claimed"] == 4 and fig["redelivered"] == 2
    # Per second, each run counts once, in the second its first claim came.
    late = {p["t_s"]: p["lateness_max_s"] for p in fig["series"] if p["lateness_max_s"] is not None}
    assert late == {0: 0.2, 12: 12.0}
    rows = dict(summary_rows(fig))
    assert rows["late > 5 s"] == "1"
    assert "1 runs over 5 s late" in chart_svg(fig) and "<td>1</td>" in html_page(fig)


def _pauses_text(lag_counts: dict[str, int], lag_max_s: float, gc_count: int, gc_max_s: float) -> str:
    pauses = prom.Pauses()
    for bound, n in lag_counts.items():
        for _ in range(n):
            pauses.observe_lag(float(bound))
    pauses.lag_max_s = lag_max_s
    for _ in range(gc_count):
        pauses.gc_seconds.observe(0.002)
    pauses.gc_max_s = gc_max_s
    return "\n".join(pauses.lines()) + "\n"


def test_pause_figures_take_the_window_between_two_scrapes():
    before = {"u": parse_pauses(_pauses_text({"0.001": 500}, 0.2, 3, 0.03))}
    # 1,000 more: 985 fast, 10 at 20 ms, 5 at 40 ms; the max since start stays 0.2 s.
    after = {"u": parse_pauses(_pauses_text({"0.001": 1485, "0.02": 10, "0.04": 5}, 0.2, 5, 0.03))}
    fig = pause_figures(before, after)
    assert fig["loop_lag_p99_s"] == 0.02  # the 990th of 1,000 lies in the 20 ms bucket
    assert fig["loop_lag_max_s"] == 0.05  # not above the earlier max: the bound of the top bucket used
    assert fig["gc_pauses"] == 2
    risen = {"u": parse_pauses(_pauses_text({"0.001": 1485, "0.02": 10, "0.04": 5}, 0.3, 5, 0.03))}
    assert pause_figures(before, risen)["loop_lag_max_s"] == 0.3
    assert pause_figures(before, {}) == {}
