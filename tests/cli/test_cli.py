"""The `tempo` command against a real server, and the client's failover against fake ones."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import pytest

from conftest import Server, free_port, tempo_command, unique
from tempo import limits
from tempo.cli import agreed_leader, cluster_rows, cluster_verdict, cluster_views
from tempo.net.client import (
    ApiError,
    Client,
    OutcomeUnknown,
    Unavailable,
    redirects_max,
    safe_to_repeat,
)


def tempo(*args: str, url: str | None = None, env_url: str | None = None, check: bool = True):
    env = dict(os.environ)
    env.pop("TEMPO_URL", None)
    if env_url is not None:
        env["TEMPO_URL"] = env_url
    argv = [*tempo_command(), *args] + (["--url", url] if url else [])
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_create_get_list_with_json_and_tables(server, http):
    name = unique("cli")
    created = tempo(
        "jobs", "create", "--target", "queue:cli", "--every-s", "600", "--name", name,
        "--payload", '{"a": 1}', "--max-attempts", "3", "--backoff-s", "5,50",
        "--lease-s", "30", "--request-key", name, "--json", url=server.url,
    )
    job = json.loads(created.stdout)
    assert job["name"] == name and job["payload"] == {"a": 1}
    assert job["retry"] == {"max_attempts": 3, "backoff_s": [5, 50]} and job["lease_s"] == 30
    assert http.get(f"/v1/jobs/{job['id']}").json() == job

    got = tempo("jobs", "get", job["id"], "--json", env_url=server.url)
    assert json.loads(got.stdout) == job
    shown = tempo("jobs", "get", job["id"], env_url=server.url).stdout
    assert job["id"] in shown and "every 600s" not in shown  # a record, not a table
    assert any(line.split()[:2] == ["id", job["id"]] for line in shown.splitlines())

    listing = tempo("jobs", "list", "--limit", "5", env_url=server.url).stdout.splitlines()
    assert listing[0].split() == ["ID", "NAME", "STATE", "OUTCOME", "TARGET", "SCHEDULE", "NEXT_RUN_AT", "LABELS"]
    assert listing[1].split()[:3] == [job["id"], name, "active"]
    assert "every 600s" in listing[1]
    page = json.loads(tempo("jobs", "list", "--limit", "1", "--json", url=server.url).stdout)
    assert [j["id"] for j in page["jobs"]] == [job["id"]]


def test_url_flag_wins_over_tempo_url(server):
    dead = f"http://127.0.0.1:{free_port()}"
    done = tempo("jobs", "list", "--json", url=server.url, env_url=dead)
    assert "jobs" in json.loads(done.stdout)
    failed = tempo("jobs", "list", env_url=dead, check=False)
    assert failed.returncode == 3 and "cannot reach" in failed.stderr


def test_pause_resume_trigger_runs_delete(server):
    job = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin", "--json", url=server.url).stdout)
    paused = json.loads(tempo("jobs", "pause", job["id"], "--json", url=server.url).stdout)
    assert paused["state"] == "paused"
    resumed = json.loads(tempo("jobs", "resume", job["id"], "--json", url=server.url).stdout)
    assert resumed["state"] == "active" and resumed["next_run_at"] == job["next_run_at"]
    run = json.loads(tempo("jobs", "trigger", job["id"], "--json", url=server.url).stdout)
    assert run["job_id"] == job["id"] and run["status"] == "waiting"
    assert "waiting" in tempo("jobs", "trigger", job["id"], url=server.url).stdout

    runs = json.loads(tempo("jobs", "runs", job["id"], "--json", url=server.url).stdout)["runs"]
    assert len(runs) == 3 and run["id"] in [r["id"] for r in runs]
    table = tempo("jobs", "runs", job["id"], "--limit", "2", url=server.url).stdout.splitlines()
    assert table[0].split() == ["ID", "STATUS", "ATTEMPT", "NOMINAL_AT", "DUE_AT", "WORKER", "FINISHED_AT", "ERROR"]
    assert len(table) == 4 and table[-1].startswith("next page: --cursor ")
    window = tempo("jobs", "runs", job["id"], "--since", run["nominal_at"], "--until", job["next_run_at"], "--json", url=server.url)
    assert run["id"] in [r["id"] for r in json.loads(window.stdout)["runs"]]

    other = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--json", url=server.url).stdout)
    deleted = json.loads(tempo("jobs", "delete", other["id"], "--json", url=server.url).stdout)
    assert deleted == {"id": other["id"], "deleted": True}
    assert tempo("jobs", "delete", job["id"], url=server.url).stdout.strip() == "deleted"
    gone = tempo("jobs", "get", job["id"], url=server.url, check=False)
    assert gone.returncode == 1 and "404" in gone.stderr and "not_found" in gone.stderr


def test_bad_create_is_reported(server):
    done = tempo("jobs", "create", "--target", "queue:cli", "--every-s", "0", url=server.url, check=False)
    assert done.returncode == 1 and "--every-s" in done.stderr
    done = tempo("jobs", "create", "--target", "queue:cli", url=server.url, check=False)
    assert done.returncode != 0 and "exactly one" in done.stderr
    done = tempo("jobs", "create", "--target", "queue:cli", "--at", "2030-01-01T00:00:00Z", "--payload", "{", url=server.url, check=False)
    assert done.returncode != 0 and "--payload" in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_exits_0_on_signal(tmp_path, sig):
    srv = Server(tmp_path / "data")
    try:
        srv.start()
        assert f"tempo serving on {srv.url}" in srv.log()
        srv.stop(sig)
    finally:
        srv.cleanup()


def test_serve_refuses_a_public_address_without_insecure(tmp_path):
    done = subprocess.run(
        [*tempo_command(), "serve", "--data-dir", str(tmp_path / "d"), "--listen", f"0.0.0.0:{free_port()}"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0
    assert "--insecure" in done.stderr and "0.0.0.0" in done.stderr


@pytest.mark.parametrize("how", ["-O", "PYTHONOPTIMIZE"])
def test_serve_refuses_python_optimize(tmp_path, how):
    """apply's invariants are asserts, which -O drops: the node refuses to
    start with one line, before it makes its data directory."""
    env = {**os.environ, "PYTHONOPTIMIZE": "1"} if how == "PYTHONOPTIMIZE" else None
    argv = [sys.executable, *(["-O"] if how == "-O" else []), "-m", "tempo.cli", "serve",
            "--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{free_port()}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tempo serve: ") and "-O" in lines[0], done.stderr
    assert not (tmp_path / "d").exists()


def test_serve_rejects_a_bad_listen_address(tmp_path):
    done = subprocess.run(
        [*tempo_command(), "serve", "--data-dir", str(tmp_path / "d"), "--listen", "nonsense"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0 and "--listen" in done.stderr


@pytest.mark.parametrize("listen", ["busy", "192.0.2.1:8717"])
def test_serve_that_cannot_listen_exits_2_with_one_line_and_leaves_no_data(tmp_path, listen):
    """A port in use, or an address this machine does not have: exit 2 and
    one line naming --listen (docs/operations.md), before the data directory
    is created."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        if listen == "busy":
            listen = f"127.0.0.1:{busy.getsockname()[1]}"
        done = subprocess.run(
            [*tempo_command(), "serve", "--data-dir", str(tmp_path / "d"), "--listen", listen, "--insecure"],
            capture_output=True, text=True, timeout=30,
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tempo serve: --listen "), done.stderr
    assert not (tmp_path / "d").exists()


# -- several URLs: failover and the leader -------------------------------------


def test_several_urls_with_a_dead_one_first(server):
    dead = f"http://127.0.0.1:{free_port()}"
    listing = tempo("jobs", "list", "--limit", "1", "--json", url=f"{dead},{server.url}")
    assert "jobs" in json.loads(listing.stdout)
    key = unique("cli-failover")
    argv = ("jobs", "create", "--target", "queue:cli", "--every-s", "600", "--request-key", key, "--json")
    first = json.loads(tempo(*argv, env_url=f"{dead}, {server.url}").stdout)
    again = json.loads(tempo(*argv, url=f"{dead},{server.url}").stdout)
    assert again["id"] == first["id"]
    assert json.loads(tempo("jobs", "get", first["id"], "--json", env_url=f"{dead},{server.url}").stdout) == first


def test_a_url_that_is_not_http_is_refused():
    done = tempo("jobs", "list", url="127.0.0.1:8700", check=False)
    assert done.returncode == 2 and "--url" in done.stderr and "127.0.0.1:8700" in done.stderr


def test_cluster_status_of_a_single_node(server):
    done = tempo("cluster", "status", url=server.url)
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["NODE", "URL", "ROLE", "TERM", "LEADER", "COMMIT", "APPLIED"]
    row = lines[1].split()
    assert row[:5] == ["n1", server.url, "leader", "0", "n1"] and row[5] == row[6]
    assert lines[-1] == "leader: n1"

    answers = json.loads(tempo("cluster", "status", "--json", env_url=server.url).stdout)
    assert len(answers) == 1
    assert answers[0]["node"] == "n1" and answers[0]["leader"] == "n1" and answers[0]["term"] == 0
    assert answers[0]["nodes"] == [{"id": "n1", "url": server.url, "role": "leader"}]

    dead = f"http://127.0.0.1:{free_port()}"
    with_dead = tempo("cluster", "status", url=f"{dead},{server.url}").stdout
    assert any(line.split()[1:3] == [dead, "unreachable"] for line in with_dead.splitlines())
    assert with_dead.splitlines()[-1] == "leader: n1"  # the dead URL is no node of the cluster

    nobody = tempo("cluster", "status", "--wait-s", "0", url=dead, check=False)
    assert nobody.returncode == 1 and "unreachable" in nobody.stdout
    assert json.loads(tempo("cluster", "status", "--json", "--wait-s", "0", url=dead, check=False).stdout) == []


A, B, C = "http://a.test:8701", "http://b.test:8702", "http://c.test:8703"


def fake_client(answer, urls=(A, B), **kwargs) -> tuple[Client, list[httpx.Request]]:
    """A Client whose requests `answer(request)` answers; the list records them."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request)

    kwargs.setdefault("failover_timeout_s", 5.0)
    client = Client(list(urls), transport=httpx.MockTransport(handler), rng=random.Random(7), **kwargs)
    return client, seen


def origin(request: httpx.Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc.decode()}"


def no_leader() -> httpx.Response:
    problem = {"type": "no_leader", "title": "no leader known", "status": 503}
    return httpx.Response(503, json=problem, headers={"retry-after": "1", "content-type": "application/problem+json"})


def test_a_307_is_followed_with_method_body_and_token_and_the_leader_is_remembered():
    def answer(request):
        if origin(request) == A:  # a follower: the leader is B
            return httpx.Response(307, headers={"location": f"{B}{request.url.raw_path.decode()}"})
        return httpx.Response(201, json={"method": request.method, "query": request.url.query.decode(),
                                         "body": json.loads(request.content) if request.content else None})

    client, seen = fake_client(answer, token="secret")
    got = client.request("POST", "/v1/jobs", {"target": "queue:x", "name": "é"}, params={"a": "1"})
    assert got == {"method": "POST", "query": "a=1", "body": {"target": "queue:x", "name": "é"}}
    assert [origin(r) for r in seen] == [A, B]
    assert all(r.headers["authorization"] == "Bearer secret" for r in seen)  # kept across origins
    assert client.leader_url == B
    assert client.request("GET", "/v1/jobs")["method"] == "GET"
    assert [origin(r) for r in seen] == [A, B, B]  # straight to the leader


def test_a_redirect_to_a_leader_not_in_the_list_is_remembered():
    def answer(request):
        if origin(request) == A:
            return httpx.Response(307, headers={"location": f"{C}/v1/jobs/j_1"})
        return httpx.Response(200, json={"id": "j_1"})

    client, _seen = fake_client(answer, urls=(A,))
    assert client.get_job("j_1") == {"id": "j_1"}
    assert client.leader_url == C and client.urls == [A, C]


def test_a_503_moves_on_and_comes_back_after_a_back_off():
    answers = iter([no_leader(), httpx.Response(200, json={"jobs": [], "next_cursor": None})])
    client, seen = fake_client(lambda request: next(answers), urls=(A,))
    assert client.list_jobs() == {"jobs": [], "next_cursor": None}
    assert [origin(r) for r in seen] == [A, A]

    client, seen = fake_client(lambda r: no_leader() if origin(r) == A else httpx.Response(200, json={}))
    assert client.request("POST", "/v1/jobs/j_1/trigger") == {}  # a 503 is safe to retry, any write
    assert [origin(r) for r in seen] == [A, B] and client.leader_url == B


def test_a_connection_refused_moves_on_for_any_write():
    def answer(request):
        if origin(request) == A:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"id": "r_1"})

    client, seen = fake_client(answer)
    assert client.trigger_job("j_1") == {"id": "r_1"}
    assert [origin(r) for r in seen] == [A, B]


def test_a_write_cut_off_after_sending_is_retried_only_when_safe():
    def answer(request):
        if origin(request) == A:
            raise httpx.ReadError("connection reset", request=request)
        return httpx.Response(201, json={"id": "j_1"})

    client, seen = fake_client(answer)
    with pytest.raises(OutcomeUnknown, match="may or may not"):
        client.create_job({"target": "queue:x", "schedule": {"every_s": 60}})
    assert len(seen) == 1
    with pytest.raises(OutcomeUnknown):
        client.trigger_job("j_1")
    client, seen = fake_client(answer)
    assert client.create_job({"target": "queue:x", "schedule": {"every_s": 60}, "request_key": "k"}) == {"id": "j_1"}
    assert client.pause_job("j_1") == {"id": "j_1"}
    assert client.get_job("j_1") == {"id": "j_1"}


def test_safe_to_repeat():
    assert safe_to_repeat("GET", "/v1/jobs", None)
    assert safe_to_repeat("POST", "/v1/schedules/preview", {"schedule": {"every_s": 1}})
    assert safe_to_repeat("POST", "/v1/jobs", {"request_key": "k"})
    assert not safe_to_repeat("POST", "/v1/jobs", {"target": "queue:x"})
    assert safe_to_repeat("POST", "/v1/jobs/batch", {"jobs": [{"request_key": "a"}, {"request_key": "b"}]})
    assert not safe_to_repeat("POST", "/v1/jobs/batch", {"jobs": [{"request_key": "a"}, {}]})
    assert not safe_to_repeat("POST", "/v1/jobs/batch", {"jobs": []})
    assert safe_to_repeat("POST", "/v1/jobs/j_1/pause", None) and safe_to_repeat("POST", "/v1/jobs/j_1/resume", None)
    assert not safe_to_repeat("POST", "/v1/jobs/j_1/trigger", None)
    assert not safe_to_repeat("DELETE", "/v1/jobs/j_1", None)


def test_no_answer_in_time_is_unavailable_naming_each_url():
    def answer(request):
        if origin(request) == A:
            raise httpx.ConnectError("connection refused", request=request)
        return no_leader()

    client, seen = fake_client(answer, failover_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        client.list_jobs()
    assert time.monotonic() - started < 2.0 and len(seen) >= 4  # more than one round
    assert f"{A}: cannot connect" in str(caught.value) and f"{B}: 503 no_leader" in str(caught.value)


def test_a_redirect_loop_is_bounded():
    def answer(request):
        return httpx.Response(307, headers={"location": f"{B if origin(request) == A else A}/v1/jobs"})

    client, seen = fake_client(answer, failover_timeout_s=0.0)
    with pytest.raises(Unavailable, match="redirects"):
        client.list_jobs()
    assert len(seen) == 2 * (redirects_max + 1)


def test_an_error_answer_is_not_retried():
    client, seen = fake_client(lambda r: httpx.Response(404, json={"type": "not_found", "status": 404}))
    with pytest.raises(ApiError) as caught:
        client.get_job("j_nope")
    assert caught.value.status == 404 and len(seen) == 1


def cluster_answer(node: str, leader: str | None, term: int = 3, down: tuple[str, ...] = ()) -> Callable:
    urls = {"n1": A, "n2": B, "n3": C}

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/cluster" and request.headers["authorization"] == "Bearer t"
        me = next(n for n, u in urls.items() if u == origin(request))
        if me in down:
            raise httpx.ConnectError("connection refused", request=request)
        nodes = [{"id": n, "url": u, "role": "leader" if n == leader else "follower"} for n, u in urls.items()]
        return httpx.Response(200, json={"node": me, "leader": leader, "term": term, "commit_index": 10,
                                         "applied_index": 9, "nodes": nodes})

    return answer


def test_cluster_status_finds_every_node_and_needs_a_majority():
    client, _seen = fake_client(cluster_answer("n1", "n2", down=("n3",)), urls=(A,), token="t")
    answers, failures = cluster_views(client, [A])
    assert [a["node"] for _, a in answers] == ["n1", "n2"] and list(failures) == [C]
    assert agreed_leader(answers) == "n2"  # two of three
    rows = cluster_rows(answers, failures)
    assert [(r["node"], r["role"]) for r in rows] == [("n1", "follower"), ("n2", "leader"), ("n3", "unreachable")]
    assert rows[0] == {"node": "n1", "url": A, "role": "follower", "term": 3, "leader": "n2", "commit": 10, "applied": 9}

    client, _ = fake_client(cluster_answer("n1", "n2", down=("n2", "n3")), urls=(A,), token="t")
    answers, failures = cluster_views(client, [A])
    assert len(answers) == 1 and agreed_leader(answers) is None  # one of three is no majority

    client, _ = fake_client(cluster_answer("n1", None), urls=(A,), token="t")
    answers, _ = cluster_views(client, [A])
    assert len(answers) == 3 and agreed_leader(answers) is None


def test_cluster_status_exits_1_when_the_leader_a_majority_names_is_dead():
    # n2 was SIGKILLed an instant ago: n1 and n3 still name it.
    client, _ = fake_client(cluster_answer("n1", "n2", down=("n2",)), urls=(A,), token="t")
    answers, _ = cluster_views(client, [A])
    assert agreed_leader(answers) == "n2"
    assert cluster_verdict(answers) == (1, "no leader: n2, named by a majority of the nodes, does not answer")

    client, _ = fake_client(cluster_answer("n1", None), urls=(A,), token="t")
    answers, _ = cluster_views(client, [A])
    assert cluster_verdict(answers) == (1, "no leader known by a majority of the nodes")


def test_cluster_status_exits_3_when_a_node_is_down_or_lags():
    client, _ = fake_client(cluster_answer("n1", "n2", down=("n3",)), urls=(A,), token="t")
    answers, _ = cluster_views(client, [A])
    assert cluster_verdict(answers) == (3, "leader: n2; degraded: n3 not answering")

    client, _ = fake_client(cluster_answer("n1", "n2"), urls=(A,), token="t")
    answers, _ = cluster_views(client, [A])
    assert cluster_verdict(answers) == (0, "leader: n2")
    # n1 stuck at applied index 34 while its leader committed 70.
    answers = [(url, a | {"commit_index": 70, "applied_index": 34 if a["node"] == "n1" else 70}) for url, a in answers]
    assert cluster_verdict(answers) == (3, f"leader: n2; degraded: n1 more than {limits.follower_lag_entries_max} entries behind")


def test_cluster_status_help_gives_the_exit_statuses():
    done = tempo("cluster", "status", "--help")
    assert "exit status:" in done.stdout and "no leader" in done.stdout and "lags" in done.stdout


def test_a_reader_that_goes_away_gets_no_traceback(server):
    """`tempo jobs list --json | head -1`: the pipe closes before tempo writes."""
    cmd = [*tempo_command(), "jobs", "list", "--json", "--url", server.url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
