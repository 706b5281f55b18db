"""`tempo loadgen`: the spike — N one-off jobs due at one instant, W workers —
or, with `--rate R --duration-s D`, a steady stream of R runs/s falling due;
with `--spawn`, on a node or cluster of its own, whose leader it can kill
mid-run (`--kill-leader-at-s`).

The modules, in the order a run uses them:

- `options`: what a run is asked to do, and `CannotRun` (exit status 2).
- `spawn`: local `tempo serve` processes, one node or a cluster; the one
  process harness, which bench/ and the integration tests use too.
- `workers`: worker processes running `tempo.worker.Worker`.
- `create`: the jobs, by `POST /v1/jobs/batch`.
- `failover`: the leader's SIGKILL and restart, and the first write after it.
- `run`: the phases, from the options to the exit status.
- `figures`: the numbers (lateness, drain, lost, duplicated, pauses).
- `report`: the summary table, and the JSON, HTML and SVG report files.
- `charts`: the pictures, drawn with matplotlib (the optional extra
  `tempo[report]`); without it the run reports all the same, minus pictures.

It reaches the servers only as a client does (`tempo.net` client code,
`tempo.worker`); nothing of the engine, node or raft (an import contract in
pyproject.toml).
"""

from tempo.loadgen.figures import (
    Claim,
    Tally,
    about_run,
    figures,
    iso,
    late_bound_s,
    parse_pauses,
    pause_figures,
    pct,
    scrape_pauses,
    take,
)
from tempo.loadgen.options import CannotRun, Options
from tempo.loadgen.report import chart_svg, html_page, summary_rows
from tempo.loadgen.run import run
from tempo.loadgen.spawn import Cluster, Node
from tempo.loadgen.workers import start_workers, stop_workers

__all__ = [
    "CannotRun",
    "Claim",
    "Cluster",
    "Node",
    "Options",
    "Tally",
    "about_run",
    "chart_svg",
    "figures",
    "html_page",
    "iso",
    "late_bound_s",
    "parse_pauses",
    "pause_figures",
    "pct",
    "run",
    "scrape_pauses",
    "start_workers",
    "stop_workers",
    "summary_rows",
    "take",
]
