"""`tempo loadgen --spawn 1`: a small spike end to end, and its report."""

import json
import subprocess
from pathlib import Path

from conftest import tempo_command

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
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 2 and "<script" not in page
    assert "runs claimed per second" in page and "lateness per second" in page
    assert f"<td>{fig['claimed']}</td>" in page and "lateness p99" in page
    assert all("lateness_p50_s" in point for point in fig["series"])
    for key in ("jobs", "created_per_s", "lateness_p50_s", "lateness_p90_s", "lateness_p99_s",
                "lateness_max_s", "drain_s", "runs_per_s", "lost", "duplicated"):
        assert key in fig


def test_cluster_spawn_is_refused() -> None:
    done = subprocess.run(
        [*tempo_command(), "loadgen", "--spawn", "3", "--jobs", "10"],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 2
    assert "cluster mode is not available in this version" in done.stderr


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
