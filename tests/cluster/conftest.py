"""A real 3-node cluster of `tempo serve --node` processes behind fault proxies,
and a workload of writers and workers whose every acknowledgement is recorded.

Node k listens on 127.0.0.k:Lk; its fault proxy listens on 127.0.0.k:Pk and
forwards there, and the `--peers` URLs are the proxies'. A node's peer
connections come from its own 127.0.0.k, so a proxy tells the nodes apart by
source IP; the test's own clients bind 127.0.0.9 and so are never cut off by a
partition (they reach every node, the old leader included).

After each scenario `check` asserts (docs/api.md "General rules"): every job that got a
2xx exists on every node, every run of it reached `done`, no (run id, attempt)
was handed out twice, and all nodes have equal digests at equal applied index.
"""

import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tempo.loadgen import spawn
from tempo.loadgen.spawn import tempo_command as tempo_command

from .proxy import Proxy

NODE_COUNT = 3
CLIENT_IP = "127.0.0.9"
ready_timeout_s = 30.0
write_timeout_s = 3.0
# How long one create keeps trying the nodes before its outcome is "unknown".
submit_timeout_s = 25.0
converge_timeout_s = 30.0
log_tail_lines = 120

_reports = pytest.StashKey[dict]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    item.stash.setdefault(_reports, {})[report.when] = report
    return report


def client(timeout_s: float = write_timeout_s, follow: bool = True) -> httpx.Client:
    """A test client, from CLIENT_IP so that no partition applies to it."""
    return httpx.Client(
        transport=httpx.HTTPTransport(local_address=CLIENT_IP, retries=0),
        timeout=httpx.Timeout(timeout_s, connect=1.0),
        follow_redirects=follow,
    )


def rfc3339_ms(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


class Node(spawn.Node):
    """One `tempo serve --node` process (`tempo.loadgen.spawn`) and the fault
    proxy in front of it; probes come from CLIENT_IP, as the test's clients do."""

    def __init__(self, index: int, root: Path, peers: str, extra_args: tuple[str, ...]):
        host = f"127.0.0.{index}"
        listen_port = spawn.free_port(host)
        proxy_port = spawn.free_port(host)
        super().__init__(root / f"n{index}", port=listen_port, host=host, node_id=f"n{index}",
                         url=f"http://{host}:{proxy_port}", extra_args=extra_args, probe_address=CLIENT_IP)
        self.index = index
        self.listen_port = listen_port
        self.proxy_port = proxy_port
        self.peers = peers
        self.proxy = Proxy((host, proxy_port), (host, listen_port), name=self.id)
        self.expected_down = False  # killed on purpose, not yet restarted

    @property
    def alive(self) -> bool:
        return self.running()

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {datetime.now(UTC).isoformat()}\n".encode())
        super().start()
        self.expected_down = False

    def signal(self, sig: int) -> None:
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.expected_down = True
        super().signal(sig)

    def log_tail(self, lines: int = log_tail_lines) -> str:
        return super().log_tail(lines)

    def cleanup(self) -> None:
        super().cleanup()
        self.proxy.close()


class Cluster(spawn.Cluster):
    def __init__(self, root: Path, extra_args: tuple[str, ...] = ()):
        super().__init__(root, NODE_COUNT, extra_args=extra_args)
        self.workloads: list[Workload] = []

    def make_node(self, index: int, extra_args: tuple[str, ...]) -> Node:
        return Node(index, self.root, "", extra_args)

    def others(self, node: Node) -> list[Node]:
        return [n for n in self.nodes if n is not node]

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> "Cluster":
        for node in self.nodes:
            node.proxy.start()
        super().start(ready_timeout_s)
        return self

    def cleanup(self) -> None:
        for workload in self.workloads:
            workload.abort()
        super().cleanup()

    def logs(self) -> str:
        return "\n".join(f"===== {n.id} ({n.log_path}) =====\n{n.log_tail()}" for n in self.nodes)

    def assert_running(self) -> None:
        """Fails at once, with its log, when a node that should run has exited:
        a server process must not die of a fault it is built to survive."""
        for node in self.nodes:
            code = node.exit_code()
            if code is not None and not node.expected_down:
                raise AssertionError(f"{node.id} exited with {code}:\n{node.log_tail(60)}")

    # -- views --------------------------------------------------------------------

    def status(self, node: Node) -> dict | None:
        """The node's own GET /v1/cluster, or None when it does not answer."""
        return node.view()

    def view(self, node: Node, patience_s: float = 5.0) -> dict:
        """The node's GET /v1/cluster, waiting up to `patience_s` for an answer."""
        deadline_s = time.monotonic() + patience_s
        while True:
            self.assert_running()
            view = self.status(node)
            if view is not None:
                return view
            assert time.monotonic() < deadline_s, f"{node.id}: no answer to GET /v1/cluster in {patience_s} s"
            time.sleep(0.05)

    def digest(self, node: Node) -> dict | None:
        return node.probe("/v1/cluster/digest")

    def wait_leader(self, among: list[Node] | None = None, timeout_s: float = 10.0) -> Node:
        """The node that every node in `among` names leader and that says so
        itself; fails after `timeout_s`."""
        among = among or self.nodes
        deadline_s = time.monotonic() + timeout_s
        views: dict = {}
        while time.monotonic() < deadline_s:
            self.assert_running()
            views = {n.id: self.status(n) for n in among}
            named = {v["leader"] if v else None for v in views.values()}
            if len(named) == 1 and None not in named:
                leader = self.node(named.pop())
                own = views.get(leader.id) or self.status(leader)
                if own and own["leader"] == leader.id and role_of(own, leader.id) == "leader":
                    return leader
            time.sleep(0.05)
        raise AssertionError(f"no leader agreed by {among} within {timeout_s} s: {views}")

    def wait_stepped_down(self, node: Node, timeout_s: float) -> float:
        """Seconds until `node` no longer calls itself leader."""
        started = time.monotonic()
        view = None
        while time.monotonic() - started < timeout_s:
            self.assert_running()
            view = self.status(node)
            if view is not None and (view["leader"] != node.id or role_of(view, node.id) != "leader"):
                return time.monotonic() - started
            time.sleep(0.05)
        raise AssertionError(f"{node.id} still leader after {timeout_s} s: {view}")

    def wait_applied(self, node: Node, index: int, timeout_s: float) -> float:
        """Seconds until `node` has applied `index`."""
        started = time.monotonic()
        view = None
        while time.monotonic() - started < timeout_s:
            self.assert_running()
            view = self.digest(node)
            if view is not None and view["applied_index"] >= index:
                return time.monotonic() - started
            time.sleep(0.1)
        raise AssertionError(f"{node.id} did not apply {index} within {timeout_s} s: {view}")

    # -- faults -------------------------------------------------------------------

    def isolate(self, node: Node) -> None:
        """Cuts `node` off from the other nodes both ways (clients still reach it)."""
        others = self.others(node)
        node.proxy.block(o.host for o in others)
        for other in others:
            other.proxy.block([node.host])

    def heal(self) -> None:
        for node in self.nodes:
            node.proxy.heal()

    # -- invariants ---------------------------------------------------------------

    def wait_converged(self, timeout_s: float = converge_timeout_s) -> int:
        """The applied index at which every node reported the same digest.
        Equal applied index with unequal digests fails at once: divergence."""
        deadline_s = time.monotonic() + timeout_s
        views: list = []
        while time.monotonic() < deadline_s:
            self.assert_running()
            views = [self.digest(n) for n in self.nodes]
            if all(views) and len({v["applied_index"] for v in views}) == 1:
                assert len({v["digest"] for v in views}) == 1, f"state diverged at equal applied index: {views}"
                return views[0]["applied_index"]
            time.sleep(0.1)
        raise AssertionError(f"applied indexes did not converge within {timeout_s} s: {views}")

    def check(self, workload: "Workload") -> None:
        """Every invariant of the module docstring, after the workload stopped."""
        self.assert_running()
        workload.check_clean()
        workload.check_no_double_dispatch()
        index = self.wait_converged()
        print(f"converged at applied index {index}; {len(workload.acked)} jobs acknowledged, "
              f"{len(workload.handed)} runs handed out, {len(workload.unknown)} creates of unknown outcome")
        self.check_jobs_everywhere(workload)
        self.check_runs_done(workload)

    def check_jobs_everywhere(self, workload: "Workload", patience_s: float = 5.0) -> None:
        """GET /v1/jobs/{id}?stale=true of every acknowledged job on every node;
        the same job everywhere."""
        found: dict[str, dict] = {}
        errors: list[str] = []

        def read_all(node: Node) -> None:
            seen = {}
            with client(5.0, follow=False) as http:
                for job_id in workload.acked:
                    deadline_s = time.monotonic() + patience_s
                    while True:
                        try:
                            r = http.get(f"{node.url}/v1/jobs/{job_id}", params={"stale": "true"})
                            if r.status_code == 200:
                                seen[job_id] = r.json()
                                break
                            why = f"{r.status_code} {r.text[:200]}"
                        except httpx.HTTPError as exc:
                            why = repr(exc)
                        if time.monotonic() > deadline_s:
                            errors.append(f"{node.id}: acknowledged job {job_id} missing: {why}")
                            break
                        time.sleep(0.1)
            found[node.id] = seen

        threads = [threading.Thread(target=read_all, args=(n,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, f"{len(errors)} lookups failed, e.g. {errors[:5]}"
        for job_id, body in workload.acked.items():
            views = [found[n.id][job_id] for n in self.nodes]
            assert all(v == views[0] for v in views), f"job {job_id} differs between nodes: {views}"
            assert views[0]["id"] == job_id and views[0]["target"] == body["target"]

    def check_runs_done(self, workload: "Workload") -> None:
        """Every acknowledged job has exactly one run, and it is `done`."""
        bad = []
        with client(5.0) as http:
            base = self.wait_leader(timeout_s=10.0).url
            for job_id in workload.acked:
                r = http.get(f"{base}/v1/jobs/{job_id}/runs")
                assert r.status_code == 200, f"runs of {job_id}: {r.status_code} {r.text[:300]}"
                runs = r.json()["runs"]
                if [run["status"] for run in runs] != ["done"]:
                    bad.append((job_id, [(run["id"], run["status"], run["attempt"]) for run in runs]))
        assert not bad, f"{len(bad)} jobs whose run is not done (or not one run), e.g. {bad[:5]}"


def role_of(view: dict, node_id: str) -> str | None:
    """The role `view` (a GET /v1/cluster) gives the node `node_id`."""
    return next((n["role"] for n in view["nodes"] if n["id"] == node_id), None)


class Workload:
    """Writer threads creating one-off jobs due now (each with a request key,
    retried across the nodes until a 2xx or `submit_timeout_s`), and worker
    threads claiming them and reporting success.

    Records every acknowledged job, every (run id, attempt) handed out, and
    every answer no correct server gives (`anomalies`)."""

    def __init__(self, cluster: Cluster, seed: int | None = None, lease_s: int = 4):
        self.cluster = cluster
        self.seed = random.randrange(1 << 32) if seed is None else seed
        print(f"workload seed {self.seed}")
        self.queue = f"q-{uuid.uuid4().hex[:8]}"
        self.lease_s = lease_s
        self.lock = threading.Lock()
        self.acked: dict[str, dict] = {}  # job id -> body
        self.key_to_id: dict[str, str] = {}
        self.unknown: list[str] = []  # request keys whose create never got an answer
        self.handed: list[tuple[str, int, str, str]] = []  # (run id, attempt, worker, job id)
        self.done_jobs: set[str] = set()
        self.anomalies: list[str] = []
        self._stop_writers = threading.Event()
        self._stop_workers = threading.Event()
        self._writers: list[threading.Thread] = []
        self._workers: list[threading.Thread] = []
        cluster.workloads.append(self)

    # -- control ------------------------------------------------------------------

    def start(self, writers: int = 3, workers: int = 2) -> "Workload":
        for k in range(writers):
            t = threading.Thread(target=self._write_loop, args=(self.seed + k,), name=f"writer-{k}", daemon=True)
            self._writers.append(t)
            t.start()
        for k in range(workers):
            t = threading.Thread(target=self._work_loop, args=(f"w{k}", self.seed + 100 + k), daemon=True)
            self._workers.append(t)
            t.start()
        return self

    def stop_writers(self) -> None:
        self._stop_writers.set()
        for t in self._writers:
            t.join(timeout=submit_timeout_s + 10)
            assert not t.is_alive(), "a writer did not stop"

    def drain(self, timeout_s: float = 40.0) -> float:
        """Waits until workers reported every acknowledged job done, then stops
        them; seconds it took."""
        self.stop_writers()
        started = time.monotonic()
        pending: set[str] = set()
        while time.monotonic() - started < timeout_s:
            with self.lock:
                pending = set(self.acked) - self.done_jobs
            if not pending:
                break
            time.sleep(0.1)
        self._stop_workers.set()
        for t in self._workers:
            t.join(timeout=30.0)
            assert not t.is_alive(), "a worker did not stop"
        assert not pending, f"{len(pending)} acknowledged jobs not done after {timeout_s} s, e.g. {sorted(pending)[:5]}"
        return time.monotonic() - started

    def abort(self) -> None:
        self._stop_writers.set()
        self._stop_workers.set()

    def wait_acked(self, count: int, timeout_s: float) -> None:
        deadline_s = time.monotonic() + timeout_s
        while len(self.acked) < count:
            self.cluster.assert_running()
            assert time.monotonic() < deadline_s, f"only {len(self.acked)} of {count} jobs acknowledged in {timeout_s} s"
            time.sleep(0.05)

    # -- checks -------------------------------------------------------------------

    def check_clean(self) -> None:
        assert not self.anomalies, f"{len(self.anomalies)} answers no correct server gives: {self.anomalies[:5]}"

    def check_no_double_dispatch(self) -> None:
        counts = Counter((run_id, attempt) for run_id, attempt, _, _ in self.handed)
        twice = [(key, [h for h in self.handed if h[:2] == key]) for key, n in counts.items() if n > 1]
        assert not twice, f"{len(twice)} (run id, attempt) handed out more than once, e.g. {twice[:3]}"
        runs_per_job: dict[str, set[str]] = {}
        for run_id, _, _, job_id in self.handed:
            runs_per_job.setdefault(job_id, set()).add(run_id)
        multi = {j: r for j, r in runs_per_job.items() if len(r) > 1}
        assert not multi, f"one-off jobs with several runs: {list(multi.items())[:3]}"

    # -- threads ------------------------------------------------------------------

    def _anomaly(self, text: str) -> None:
        with self.lock:
            self.anomalies.append(text)

    def _post(self, http: httpx.Client, rng: random.Random, path: str, body: dict, give_up: threading.Event,
              timeout_s: float = submit_timeout_s) -> httpx.Response | None:
        """POSTs to the nodes in turn (redirects followed) until a 2xx; None
        when `timeout_s` passed or `give_up` was set first. Connection errors
        and 503 move on to the next node; other answers are anomalies."""
        nodes = self.cluster.nodes
        k = rng.randrange(len(nodes))
        deadline_s = time.monotonic() + timeout_s
        while time.monotonic() < deadline_s and not give_up.is_set():
            url = nodes[k % len(nodes)].url + path
            k += 1
            try:
                r = http.post(url, json=body)
            except httpx.HTTPError:
                time.sleep(0.05)
                continue
            if r.status_code < 300:
                return r
            if r.status_code != 503:
                self._anomaly(f"POST {path} at {url}: {r.status_code} {r.text[:300]}")
            time.sleep(0.1 if r.status_code == 503 else 0.5)
        return None

    def _job_body(self, rng: random.Random) -> dict:
        return {
            "target": f"queue:{self.queue}",
            "schedule": {"at": rfc3339_ms(datetime.now(UTC))},
            "retry": {"max_attempts": 50, "backoff_s": [1]},
            "lease_s": self.lease_s,
            "payload": {"n": rng.randrange(1 << 30)},
            "request_key": f"k-{uuid.UUID(int=rng.getrandbits(128)).hex}",
        }

    def _write_loop(self, seed: int) -> None:
        rng = random.Random(seed)
        never = threading.Event()  # a create that was sent is followed through
        with client(write_timeout_s) as http:
            while not self._stop_writers.is_set():
                bodies = [self._job_body(rng) for _ in range(1 if rng.random() < 0.8 else 5)]
                if len(bodies) == 1:
                    r = self._post(http, rng, "/v1/jobs", bodies[0], never)
                    jobs = [r.json()] if r is not None else None
                else:
                    r = self._post(http, rng, "/v1/jobs/batch", {"jobs": bodies}, never)
                    jobs = None
                    if r is not None:
                        results = r.json()["results"]
                        if any(x["status"] not in (200, 201) for x in results):
                            self._anomaly(f"batch item refused: {results}")
                            continue
                        jobs = [x["job"] for x in results]
                if jobs is None:
                    with self.lock:
                        self.unknown.extend(b["request_key"] for b in bodies)
                    continue
                with self.lock:
                    for body, job in zip(bodies, jobs, strict=True):
                        key = body["request_key"]
                        if self.key_to_id.setdefault(key, job["id"]) != job["id"]:
                            self.anomalies.append(f"request key {key} made two jobs")
                        self.acked[job["id"]] = body
                time.sleep(0.005)

    def _work_loop(self, worker: str, seed: int) -> None:
        rng = random.Random(seed)
        claim = {"worker": worker, "queues": [self.queue], "max_runs": 50, "wait_s": 1}
        with client(write_timeout_s + 2) as http:
            while not self._stop_workers.is_set():
                r = self._post(http, rng, "/v1/claim", claim, self._stop_workers, timeout_s=5.0)
                if r is None:
                    continue
                runs = r.json()["runs"]
                if not runs:
                    continue
                with self.lock:
                    self.handed.extend((run["id"], run["attempt"], worker, run["job_id"]) for run in runs)
                job_of = {run["id"]: run["job_id"] for run in runs}
                results = {"results": [{"run_id": run["id"], "attempt": run["attempt"], "ok": True} for run in runs]}
                r = self._post(http, rng, "/v1/results", results, self._stop_workers, timeout_s=15.0)
                if r is None:
                    continue  # the leases run out and the runs come back
                answer = r.json()
                with self.lock:
                    self.done_jobs.update(job_of[run_id] for run_id in answer["accepted"])
                for rejected in answer["rejected"]:
                    if rejected["type"] != "stale_attempt":
                        self._anomaly(f"result rejected: {rejected}")


@pytest.fixture
def make_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Starts clusters on demand (`make_cluster("--snapshot-entries", "50")`);
    kills every process at teardown and prints the node logs when the test failed."""
    made: list[Cluster] = []

    def make(*extra_args: str) -> Cluster:
        cluster = Cluster(tmp_path / f"c{len(made)}", tuple(extra_args))
        made.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in made:
            cluster.cleanup()
        reports = request.node.stash.get(_reports, {})
        if any(r.failed for r in reports.values()):
            for cluster in made:
                print(cluster.logs())
