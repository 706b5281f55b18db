"""Wall-clock steps under a real `tempo serve` (docs/semantics.md "Clocks").

libfaketime shifts the process's wall clock by the offset in a file that the
test rewrites (`FAKETIME_NO_CACHE`: read at every call), and leaves the
monotonic clock alone, as an NTP step or a clock set by hand would. The test
process itself keeps the real clock: it measures on its own monotonic clock
and compares the server's times only with each other."""

import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import LIBFAKETIME, Server, unique

pytestmark = pytest.mark.skipif(not LIBFAKETIME, reason="libfaketime not found (Debian package faketime)")

# How soon after a step runs must come again: a repeating job of one
# second runs at least every two seconds while a backward step is absorbed.
RUNS_WITHIN_S = 6.0


class FakeClock:
    """The offset of the server's wall clock from the real one, in seconds."""

    def __init__(self, path: Path):
        self.path = path
        self.offset_s = 0.0
        self._write()

    def step(self, delta_s: float) -> None:
        self.offset_s += delta_s
        self._write()

    def _write(self) -> None:
        # One write of the whole line: the server reads it at every call.
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{self.offset_s:+.3f}\n")
        tmp.replace(self.path)

    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": LIBFAKETIME[0],
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }


@pytest.fixture
def faked(tmp_path: Path):
    fake = FakeClock(tmp_path / "faketime")
    server = Server(tmp_path / "data", env=fake.env())
    try:
        yield server.start(), fake
    finally:
        server.cleanup()


def create(client: httpx.Client, **body) -> dict:
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def claim(client: httpx.Client, queue: str, wait_s: float = 0, worker: str = "w1") -> list:
    answer = client.post("/v1/claim", json={"worker": worker, "queues": [queue], "max_runs": 1, "wait_s": wait_s})
    assert answer.status_code == 200, answer.text
    return answer.json()["runs"]


def take_runs(server: Server, client: httpx.Client, queue: str, count: int) -> None:
    """`count` runs of the queue in a row, each within `RUNS_WITHIN_S`, each
    reported done."""
    for _ in range(count):
        started = time.monotonic()
        runs = claim(client, queue, wait_s=RUNS_WITHIN_S)
        assert server.proc.poll() is None, f"tempo serve exited: {server.log()}"
        assert runs, f"no run of {queue} within {RUNS_WITHIN_S} s: {server.log()}"
        assert time.monotonic() - started <= RUNS_WITHIN_S + 1
        [run] = runs
        done = client.post(f"/v1/runs/{run['id']}/result", json={"attempt": run["attempt"], "ok": True})
        assert done.status_code == 200, done.text


class Heartbeats:
    """A worker holding one run: a heartbeat every `every_s`, each answer kept."""

    def __init__(self, url: str, run: dict, every_s: float):
        self.url, self.run, self.every_s = url, run, every_s
        self.answers: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> "Heartbeats":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10.0) as client:
            while not self._stop.wait(self.every_s):
                try:
                    beat = client.post(f"/v1/runs/{self.run['id']}/heartbeat", json={"attempt": self.run["attempt"]})
                    self.answers.append(beat.status_code)
                except httpx.HTTPError:
                    self.answers.append(0)


def steps_counted(client: httpx.Client) -> dict[str, int]:
    text = client.get("/metrics").text
    found = re.findall(r'^tempo_clock_steps_total\{direction="(\w+)"\} (\d+)$', text, re.MULTILINE)
    return {direction: int(count) for direction, count in found}


@pytest.mark.parametrize(
    "steps_s",
    [
        pytest.param((-0.05, -0.2, -1.0, -3600.0), id="backward"),
        pytest.param((+3600.0, -3600.0), id="forward-then-back"),
    ],
)
def test_a_running_node_rides_out_clock_steps(faked, steps_s):
    """The node stays up, a repeating job keeps running, and a heartbeating
    worker keeps its lease, whichever way the wall clock steps."""
    server, fake = faked
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        every = unique("every")
        create(client, target=f"queue:{every}", schedule={"every_s": 1})
        held_queue = unique("held")
        create(client, target=f"queue:{held_queue}", schedule={"at": "2020-01-01T00:00:00Z"}, lease_s=20)
        [held] = claim(client, held_queue, wait_s=5, worker="holder")
        take_runs(server, client, every, 2)
        with Heartbeats(server.url, held, every_s=1.0) as beats:
            for delta_s in steps_s:
                fake.step(delta_s)
                # The crash this guards against came about 1.5 s after a step.
                time.sleep(2.0)
                assert server.proc.poll() is None, f"tempo serve exited after a step of {delta_s} s: {server.log()}"
                take_runs(server, client, every, 2)
                # Nobody else gets the run the heartbeating worker holds.
                assert claim(client, held_queue, wait_s=0.5, worker="other") == [], f"after a step of {delta_s} s"
                assert client.get("/healthz").status_code == 200
        assert beats.answers and set(beats.answers) == {200}, beats.answers
        shown = client.get(f"/v1/runs/{held['id']}").json()
        assert shown["status"] == "claimed" and shown["attempt"] == 1 and shown["worker"] == "holder"
        counted = steps_counted(client)
        assert counted.get("backward", 0) == sum(1 for d in steps_s if d < 0), counted
        assert counted.get("forward", 0) == sum(1 for d in steps_s if d > 0), counted
    # One log line per step.
    assert len(re.findall(r"wall clock stepped", server.log())) == len(steps_s), server.log()


def test_a_restart_with_the_clock_an_hour_back_continues_from_the_stamps(faked):
    server, fake = faked
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        held_queue = unique("held")
        created = create(client, target=f"queue:{held_queue}", schedule={"at": "2020-01-01T00:00:00Z"}, lease_s=5)
        [held] = claim(client, held_queue, wait_s=5, worker="gone")
        every = unique("every")
        paused = create(client, target=f"queue:{every}", schedule={"every_s": 2})
        assert client.post(f"/v1/jobs/{paused['id']}/pause").json()["state"] == "paused"
        retried_queue = unique("retried")
        retried = create(client, target=f"queue:{retried_queue}", schedule={"at": "2020-01-01T00:00:00Z"},
                         retry={"max_attempts": 3, "backoff_s": [1]})
        [failing] = claim(client, retried_queue, wait_s=5)
        failed = client.post(f"/v1/runs/{failing['id']}/result", json={"attempt": 1, "ok": False, "error": "x"})
        assert failed.json()["status"] == "waiting"
    server.kill()
    fake.step(-3600.0)
    server.start()
    restarted_s = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        resumed = client.post(f"/v1/jobs/{paused['id']}/resume").json()
        assert resumed["state"] == "active" and resumed["next_run_at"] is not None, resumed
        assert claim(client, every, wait_s=RUNS_WITHIN_S), f"the resumed job did not run: {server.log()}"
        # The retry a second after its failure: not an hour.
        [retry] = claim(client, retried_queue, wait_s=RUNS_WITHIN_S)
        assert retry["attempt"] == 2
        # A full lease (5 s) from the restart, then handed out again.
        [again] = claim(client, held_queue, wait_s=15, worker="fresh")
        assert again["id"] == held["id"] and again["attempt"] == 2
        assert time.monotonic() - restarted_s <= 5 + 4
        newer = create(client, target=f"queue:{unique('q')}", schedule={"every_s": 60})
        listed = client.get("/v1/jobs", params={"limit": 2}).json()["jobs"]
        assert [j["id"] for j in listed] == [newer["id"], retried["id"]]
        assert newer["created_at"] >= created["created_at"]
