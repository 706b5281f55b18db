"""What holds the event loop: a spike against a server whose trio run is
traced, and, for each late wake of the lag probe, the task steps since its
wake before (wall time and the trio thread's CPU time).

    .venv/bin/python bench/lagtrace.py [--jobs N] [--late-ms L]

Starts `tempo serve` (this script in `--serve` mode: server.main under a
trio Instrument) on a free loopback port, runs `tempo loadgen --jobs N`
(default 25,000) against it, stops it, and prints how many probe wakes came
more than L ms (default 10) late, how many of those followed more than L ms
of the loop's own CPU (the rest: the process waited for a core, or for the
GIL), and the twelve with the most CPU, each with its four longest steps,
named by where the task stopped after the step, with the garbage
collection within it (`GC`, when any: a collection runs in whichever step
allocates when a generation is full). The tracing costs some CPU
itself; the figures to quote come from bench/spike.py.
"""

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

import trio

sys.path.insert(0, os.path.dirname(__file__))
from _server import Node, ready_timeout_s, stop_timeout_s, tempo_command
from tempo import server as tempo_server

# Plumbing of trio and hypercorn, left out of a task's name.
SKIPPED_FRAMES = ("wait_task_rescheduled", "cancel_shielded_checkpoint", "checkpoint", "ASGIWrapper", "_handle:",
                  "TCPServer.", "ProtocolWrapper", "H11Protocol", "HTTPStream.", "_run_handler", "unrolled_run")
FRAMES_MAX = 14
SHOWN_MAX = 12


def where(task: trio.lowlevel.Task) -> str:
    """The task's coroutine chain where it stopped, minus the plumbing."""
    names = []
    coro = task.coro
    while coro is not None and len(names) < FRAMES_MAX:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            break
        names.append(f"{frame.f_code.co_qualname}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    names = [n for n in names if not n.startswith(SKIPPED_FRAMES)]
    if len(names) > 5:
        names = [*names[:3], "…", *names[-2:]]
    return " > ".join(names)


class LateWakes(trio.abc.Instrument):
    def __init__(self, late_s: float) -> None:
        self.late_s = late_s
        self.steps: list[tuple[str, float, float, float]] = []
        self.last_probe_s: float | None = None
        self.wakes = 0
        self.late: list[dict] = []
        self.gc_s = 0.0  # garbage collection within the current step
        self._gc_started_s = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started_s = time.perf_counter()
        else:
            self.gc_s += time.perf_counter() - self._gc_started_s

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.started_s = time.perf_counter()
        self.cpu_s = time.thread_time()
        self.gc_s = 0.0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        now_s = time.perf_counter()
        if "_probe_lag" in task.name:
            self.wakes += 1
            if self.last_probe_s is not None:
                late_s = self.started_s - self.last_probe_s - tempo_server.limits.event_loop_probe_s
                if late_s > self.late_s:
                    top = sorted(self.steps, key=lambda s: -s[2])[:4]
                    self.late.append({"late_s": late_s, "cpu_s": sum(s[2] for s in self.steps),
                                      "steps": len(self.steps), "top": top})
            self.last_probe_s = now_s
            self.steps = []
            return
        self.steps.append((where(task), now_s - self.started_s, time.thread_time() - self.cpu_s, self.gc_s))


def serve(port: int, data_dir: str, out_path: str, late_s: float) -> int:
    trace = LateWakes(late_s)
    run = trio.run
    tempo_server.trio.run = lambda fn, *a, **k: run(fn, *a, instruments=[trace], **k)
    gc.freeze()  # as `tempo serve` does (cli.py)
    try:
        return tempo_server.main(tempo_server.ServeOptions(data_dir=data_dir, host="127.0.0.1", port=port))
    finally:
        with open(out_path, "w") as out:
            json.dump({"wakes": trace.wakes, "late": trace.late}, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=25_000)
    parser.add_argument("--late-ms", type=float, default=10.0)
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "DATA_DIR", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    late_s = args.late_ms / 1000
    if args.serve:
        port, data_dir, out_path = args.serve
        return serve(int(port), data_dir, out_path, late_s)
    with tempfile.TemporaryDirectory(prefix="tempo-lagtrace-") as tmp:
        out_path = os.path.join(tmp, "trace.json")
        server = Node(os.path.join(tmp, "n1"))
        with open(server.log_path, "ab") as log:
            server.proc = subprocess.Popen(
                [sys.executable, __file__, "--late-ms", str(args.late_ms), "--serve", str(server.port),
                 server.data_dir, out_path], stdout=log, stderr=subprocess.STDOUT,
            )
        try:
            server.wait_ready(ready_timeout_s)
            subprocess.run([*tempo_command(), "loadgen", "--url", server.url, "--jobs", str(args.jobs),
                            "--no-report", "--no-progress"], check=False, timeout=600)
            server.stop(timeout_s=stop_timeout_s)
        finally:
            server.cleanup()
        with open(out_path) as f:
            trace = json.load(f)
    late = trace["late"]
    busy = [w for w in late if w["cpu_s"] > late_s]
    print(f"\nprobe wakes {trace['wakes']}; more than {args.late_ms:g} ms late: {len(late)}; "
          f"of those, after more than {args.late_ms:g} ms of the loop's CPU: {len(busy)}")
    for wake in sorted(late, key=lambda w: -w["cpu_s"])[:SHOWN_MAX]:
        steps = " | ".join(f"{name} ({wall * 1000:.1f} ms, CPU {cpu * 1000:.1f}" + (f", GC {gc_s * 1000:.1f})" if gc_s >= 0.0005 else ")")
                           for name, wall, cpu, gc_s in wake["top"])
        print(f"late {wake['late_s'] * 1000:.0f} ms, {wake['steps']} steps, CPU {wake['cpu_s'] * 1000:.1f} ms: {steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
