"""The summary table `tempo loadgen` prints: its rows pinned, label by label
and figure by figure, with pre-dispatch's start rows (and without them)."""

from tempo.loadgen.report import summary, summary_rows

# Each figure distinct, so that a row that reads the wrong key shows.
_FIG = {
    "mode": "spike", "jobs": 300, "created": 299, "create_s": 1.25, "created_per_s": 239,
    "lateness_p50_s": 0.011, "lateness_p90_s": 0.022, "lateness_p99_s": 0.033, "lateness_max_s": 0.044,
    "late_over_5s": 0, "drain_s": 1.5, "runs_per_s": 200, "claimed": 298, "lost": 1,
    "duplicated": 2, "failed": 3,
}
_STARTS = {
    "started": 297, "start_early": 4, "start_duplicated": 5, "start_lateness_p50_s": -0.101,
    "start_lateness_p90_s": 0.202, "start_lateness_p99_s": 0.303, "start_lateness_max_s": None,
}


def test_the_summary_with_start_rows() -> None:
    assert summary(_FIG | _STARTS) == """\
jobs                299/300 created in 1.25 s
create rate         239 jobs/s
lateness p50        0.011 s
lateness p90        0.022 s
lateness p99        0.033 s
lateness max        0.044 s
start lateness p50  -0.101 s
start lateness p90  0.202 s
start lateness p99  0.303 s
start lateness max  -
started             297
started early       4
started twice       5
late > 5 s          0
drain               1.500 s
runs/s              200
claimed             298
lost                1
duplicated          2
failed              3"""


def test_without_pre_dispatch_the_start_rows_are_left_out() -> None:
    with_starts = summary_rows(_FIG | _STARTS)
    assert summary_rows(_FIG) == [row for row in with_starts if not row[0].startswith("start")]
