#!/usr/bin/env python3
"""The guard against drift: this working tree against a pinned baseline, in turns.

    python bench/compare.py --base 1872033               # the pinned baseline
    python bench/compare.py --base HEAD~1 --rounds 5     # the commit before
    python bench/compare.py --base 1872033 --no-spike    # perrun only (quick)

Steps that each look like noise add up: measured only against the commit
before, the 25,000-run spike got 1.6 times slower in a day. So every change
to claim, result, apply, commit or the wheel is measured against a fixed
point too (docs/performance.md "Comparing with a baseline").

The baseline REV is exported with `git archive` into a cache directory
(`$XDG_CACHE_HOME/tempo-compare/<sha>`, made once per commit) and installed
there in a virtual environment of its own. Then, `--rounds` times, and in
alternating order so that neither side always runs first on a warm or a
cooling machine:

- the spike: a fresh `tempo serve` of that side on a free loopback port
  (fsync on, as shipped) and `--jobs` one-off runs due at one instant,
  driven by *this* tree's `tempo loadgen` with `--workers` worker processes,
  so both sides are measured by the same black-box driver; lateness is each
  run's first claim minus its nominal due time. A side whose OpenAPI
  document has no `claim_key` in its claim body (a server from before
  claim keys, such as 1872033, refuses the field) is driven with
  `--no-claim-keys`;
- the plain spike: the same with `tempo loadgen --plain`, workers that
  claim 1,000 runs over JSON, report them, and only then claim again (the
  simplest client loop). The worker library reports and claims at once, so
  the two drivers weigh the order of the server's work differently: a
  change measured with one only once looked like a gain (0.63 ×) and was a
  loss with the other (1.1 ×; docs/performance.md "Two kinds of workers");
- perrun: that side's own `bench/perrun.py` (server CPU per run for claim and
  result, in process), one round of `--perrun-jobs` runs.

It prints each round's figures as they come, then the medians and the ratio
this tree / baseline (below 1.00 is faster), and exits 0; a side that failed
to measure shows `-`.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

import httpx

from _server import free_port, ready_timeout_s

HERE = Path(__file__).resolve().parent.parent
PERRUN_LINE = re.compile(r"claim \+ result: ([0-9.]+) µs per run")
# A whole spike (start, create, drain, stop) of 25,000 runs takes well under a
# minute here; a side that takes this long is stuck and is counted as failed.
spike_timeout_s = 600
perrun_timeout_s = 600


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tempo-compare"


def resolve(rev: str) -> str:
    return subprocess.run(["git", "-C", str(HERE), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                          check=True, capture_output=True, text=True).stdout.strip()


def install_base(sha: str) -> Path:
    """The baseline's tree and its own virtual environment, made once."""
    tree = cache_root() / sha
    python = tree / ".venv" / "bin" / "python"
    if python.exists():
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE), "archive", sha], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    print(f"installing {sha[:9]} in {tree} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(tree)], check=True)
    return tree


def claims_take_keys(python: Path) -> bool:
    """Whether the side's server knows `claim_key`: some schema of its
    OpenAPI document (`tempo openapi`) with `worker` and `max_runs`, the
    claim's body, names it."""
    done = subprocess.run([str(python), "-m", "tempo.cli", "openapi"], capture_output=True, text=True, check=True)
    schemas = json.loads(done.stdout).get("components", {}).get("schemas", {})
    claims = [s.get("properties", {}) for s in schemas.values() if {"worker", "max_runs"} <= set(s.get("properties", {}))]
    return any("claim_key" in properties for properties in claims)


def spike(python: Path, jobs: int, workers: int, plain: bool = False) -> dict[str, float] | None:
    """One spike against a fresh node of the side whose interpreter is `python`
    (started by hand: the process harness of bench/_server.py runs this
    tree's `tempo`, and the baseline needs its own)."""
    with tempfile.TemporaryDirectory(prefix="tempo-compare-") as tmp:
        port = free_port()
        node = subprocess.Popen([str(python), "-m", "tempo.cli", "serve", "--data-dir", f"{tmp}/data",
                                 "--listen", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        report = Path(tmp) / "report.json"
        done = None
        keys = ["--plain"] if plain else [] if claims_take_keys(python) else ["--no-claim-keys"]
        try:
            _wait_ready(port)
            done = subprocess.run(
                [sys.executable, "-m", "tempo.cli", "loadgen", "--url", f"http://127.0.0.1:{port}",
                 "--jobs", str(jobs), "--workers", str(workers), "--report", str(report), "--no-progress", *keys],
                capture_output=True, text=True, timeout=spike_timeout_s)
        except (subprocess.TimeoutExpired, RuntimeError) as exc:
            print(f"  spike failed: {exc}", flush=True)
        finally:
            node.terminate()
            node.wait(timeout=60)
        if done is None or not report.exists():
            if done is not None:
                print(f"  spike failed: {(done.stderr or done.stdout).strip()[-500:]}", flush=True)
            return None
        figures = json.loads(report.read_text())
        return {k: figures[k] for k in ("lateness_p50_s", "lateness_p99_s", "lost", "duplicated") if k in figures}


def _wait_ready(port: int) -> None:
    deadline_s = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline_s:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the node on port {port} was not ready within {ready_timeout_s:.0f} s")


# Runs a side's bench/perrun.py as `tempo serve` runs the server: the
# program imported (tempo.server, what `tempo serve` loads) and the cycle
# collector's generations frozen (cli.py), so that full collections walk
# only what the run itself made. A baseline whose perrun does not freeze
# them itself is measured as it would serve, not with 45,000 startup
# objects walked by every full collection.
_PERRUN_AS_SERVED = (
    "import gc, runpy, sys; import tempo.cli, tempo.server; gc.freeze(); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def perrun(tree: Path, python: Path, jobs: int) -> float | None:
    script = tree / "bench" / "perrun.py"
    if not script.exists():
        return None
    try:
        done = subprocess.run([str(python), "-c", _PERRUN_AS_SERVED, str(script), "--jobs", str(jobs), "--rounds", "1"],
                              capture_output=True, text=True, timeout=perrun_timeout_s, cwd=tree)
    except subprocess.TimeoutExpired:
        return None
    found = PERRUN_LINE.search(done.stdout)
    return float(found.group(1)) if found else None


def median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


Figures = dict[str, dict[str, list[float | None]]]  # figure -> side -> one value per round


def spike_cells(figures: Figures, side: str, kind: str, got: dict[str, float] | None) -> str:
    """Keeps one spike's p50 and p99 under `kind`; its part of the round's line."""
    for p in ("p50", "p99"):
        figures[f"{kind} {p} (s)"][side].append(None if got is None else got.get(f"lateness_{p}_s"))
    line = f"  {kind} p50 {cell(figures[f'{kind} p50 (s)'][side][-1])} s p99 {cell(figures[f'{kind} p99 (s)'][side][-1])} s"
    if got is not None:
        line += f" lost {got.get('lost')} duplicated {got.get('duplicated')}"
    return line


def measure(args: argparse.Namespace, figures: Figures, side: str, tree: Path, python: Path) -> str:
    """One side's turn of a round: its figures kept, its line answered."""
    line = ""
    if not args.no_spike:
        line += spike_cells(figures, side, "spike", spike(python, args.jobs, args.workers))
        if not args.no_plain:
            line += spike_cells(figures, side, "plain spike", spike(python, args.jobs, args.workers, plain=True))
    if not args.no_perrun:
        figures["perrun (µs per run)"][side].append(perrun(tree, python, args.perrun_jobs))
        line += f"  perrun {cell(figures['perrun (µs per run)'][side][-1], 2)} µs/run"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="1872033", help="the baseline commit (default: the pinned 1872033)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each side (default 3)")
    parser.add_argument("--jobs", type=int, default=25_000, help="runs in the spike (default 25,000)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes of the spike (default 4)")
    parser.add_argument("--perrun-jobs", type=int, default=25_000, help="runs of bench/perrun.py (default 25,000)")
    parser.add_argument("--no-spike", action="store_true", help="perrun only")
    parser.add_argument("--no-perrun", action="store_true", help="the spikes only")
    parser.add_argument("--no-plain", action="store_true", help="no plain spike (`tempo loadgen --plain`)")
    args = parser.parse_args()

    sha = resolve(args.base)
    base_tree = install_base(sha)
    sides = {"base": (base_tree, base_tree / ".venv" / "bin" / "python"), "this": (HERE, Path(sys.executable))}
    names = ["spike p50 (s)", "spike p99 (s)", "plain spike p50 (s)", "plain spike p99 (s)", "perrun (µs per run)"]
    figures: Figures = {name: {"base": [], "this": []} for name in names}
    print(f"baseline {sha[:9]} against this tree, {args.rounds} rounds in turns", flush=True)
    for round_no in range(args.rounds):
        order = ["base", "this"] if round_no % 2 == 0 else ["this", "base"]
        for side in order:
            tree, python = sides[side]
            print(f"round {round_no + 1} {side:<4}" + measure(args, figures, side, tree, python), flush=True)

    print()
    print(f"{'figure':<22}{'base ' + sha[:9]:>18}{'this tree':>14}{'this/base':>12}")
    for name in names:
        values = figures[name]
        if not values["base"] and not values["this"]:
            continue  # not measured
        base, this = median(values["base"]), median(values["this"])
        ratio = None if base in (None, 0) or this is None else this / base
        digits = 2 if name.startswith("perrun") else 3
        print(f"{name:<22}{cell(base, digits):>18}{cell(this, digits):>14}{cell(ratio, 2):>12}")


if __name__ == "__main__":
    main()
