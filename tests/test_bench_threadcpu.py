"""bench/threadcpu.py, which docs/performance.md "What would use more cores"
quotes: it reports the CPU of a busy thread, by its ID."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "threadcpu.py"
# A process whose main thread (its thread ID is the process ID) spins: it
# must be seen using most of a core.
SPINNER = """
import time
end = time.monotonic() + 3
while time.monotonic() < end:
    pass
"""


def test_it_reports_a_busy_thread() -> None:
    busy = subprocess.Popen([sys.executable, "-c", SPINNER])
    try:
        out = subprocess.run(
            [sys.executable, str(SCRIPT), str(busy.pid), "--interval-s", "0.5", "--until-s", "2"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    finally:
        busy.kill()
        busy.wait()
    mark = f"[{busy.pid}] "
    lines = [line for line in out.splitlines() if mark in line]
    assert lines, out
    # "python3[PID] 97%": at least half a core in some interval (a shared machine).
    shares = [int(line.split(mark, 1)[1].split("%", 1)[0]) for line in lines]
    assert max(shares) >= 50, out
