"""The `tempo` command: `serve`, and a client for the jobs API."""

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from tempo import limits
from tempo.net.client import ApiError, Client, OutcomeUnknown, Unavailable, urls_from
from tempo.net.tls import TlsError

# `outcome`: the status of the job's last run that ended (docs/api.md
# "Outcomes"), so a one-off that failed does not read like one that succeeded.
JOB_COLUMNS = ("id", "name", "state", "outcome", "target", "schedule", "next_run_at")
RUN_COLUMNS = ("id", "status", "attempt", "nominal_at", "due_at", "worker", "finished_at", "error")
ALL_RUN_COLUMNS = ("id", "job_id", "status", "attempt", "due_at", "finished_at", "error")
ATTEMPT_COLUMNS = ("attempt", "claimed_at", "worker", "ended_at", "ok", "error", "output")
# A table cell shows at most this many characters of a text (an error, an output).
cell_chars_max = 60
CLUSTER_COLUMNS = ("node", "url", "role", "term", "leader", "commit", "applied")
URL_HELP = "server URL(s), comma-separated: the nodes of a cluster (default: $TEMPO_URL or http://127.0.0.1:8700)"
CA_FILE_HELP = "PEM file of the CA that signed the servers' certificates, for https:// URLs " \
    "(default: $TEMPO_CA_FILE, else the system trust store)"
# `tempo cluster status` asks at most this many URLs (given and discovered).
cluster_urls_max = 64


def _schedule_text(schedule: dict[str, Any]) -> str:
    if "cron" in schedule:
        return f"cron {schedule['cron']} ({schedule.get('timezone', 'UTC')})"
    if "every_s" in schedule:
        start = f" from {schedule['start_at']}" if "start_at" in schedule else ""
        return f"every {schedule['every_s']}s{start}"
    return f"at {schedule.get('at')}"


def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    if column == "schedule" and isinstance(value, dict):
        return _schedule_text(value)
    if column == "outcome":
        last = row.get("last_run")
        value = last.get("status") if isinstance(last, dict) else None
    if column in ("error", "output") and isinstance(value, str):
        # One line a row: a text's newlines would break the table.
        value = value.replace("\n", " ").replace("\r", " ")
        if len(value) > cell_chars_max:
            value = value[: cell_chars_max - 1] + "…"
    return "-" if value is None else str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[_cell(row, c) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def record(row: dict[str, Any]) -> str:
    width = max(len(k) for k in row)
    return "\n".join(
        f"{k.ljust(width)}  {json.dumps(v) if isinstance(v, dict | list) else ('-' if v is None else v)}"
        for k, v in row.items()
    )


# -- jobs commands -------------------------------------------------------------


def _create_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"target": args.target, "schedule": _schedule_body(args)}
    if args.payload is not None:
        try:
            body["payload"] = json.loads(args.payload)
        except ValueError as exc:
            raise SystemExit(f"tempo jobs create: --payload is not JSON: {exc}") from None
    retry = _retry_body(args)
    if retry:
        body["retry"] = retry
    for name in ("name", "lease_s", "jitter_s", "request_key"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    return body


def _schedule_body(args: argparse.Namespace) -> dict[str, Any]:
    kinds = [k for k in ("at", "cron", "every_s") if getattr(args, k) is not None]
    if len(kinds) != 1:
        raise SystemExit("tempo jobs create: give exactly one of --at, --cron, --every-s")
    schedule: dict[str, Any] = {kinds[0]: getattr(args, kinds[0])}
    if args.timezone is not None:
        schedule["timezone"] = args.timezone
    if args.start_at is not None:
        schedule["start_at"] = args.start_at
    return schedule


def _retry_body(args: argparse.Namespace) -> dict[str, Any]:
    retry: dict[str, Any] = {}
    if args.max_attempts is not None:
        retry["max_attempts"] = args.max_attempts
    if args.backoff_s is not None:
        retry["backoff_s"] = [int(x) for x in args.backoff_s.split(",") if x.strip()]
    return retry


def _show(args: argparse.Namespace, value: Any, columns: Sequence[str] | None = None) -> None:
    if args.json:
        print(json.dumps(value, indent=2))
    elif value is None:
        print("deleted")
    elif isinstance(value, dict) and columns is not None and "next_cursor" in value:  # a page (a job has `runs` too)
        rows = value["jobs"] if "jobs" in value else value["runs"]
        print(table(rows, columns))
        if value.get("next_cursor"):
            print(f"next page: --cursor {value['next_cursor']}")
    else:
        print(record(value))


def _jobs(args: argparse.Namespace, client: Client) -> None:
    action: dict[str, Callable[[], Any]] = {
        "create": lambda: client.create_job(_create_body(args)),
        "get": lambda: client.get_job(args.id),
        "list": lambda: client.list_jobs(
            args.limit, args.cursor, state=args.state, target=args.target, name_prefix=args.name_prefix
        ),
        "pause": lambda: client.pause_job(args.id),
        "resume": lambda: client.resume_job(args.id),
        "delete": lambda: client.delete_job(args.id),
        "trigger": lambda: client.trigger_job(args.id),
        "update": lambda: client.update_job(args.id, _update_body(args), args.if_version),
        "runs": lambda: client.list_runs(
            args.id, since=args.since, until=args.until, limit=args.limit, cursor=args.cursor
        ),
    }
    value = action[args.action]()
    _show(args, value, RUN_COLUMNS if args.action == "runs" else JOB_COLUMNS)


def _add_jobs_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    jobs = sub.add_parser("jobs", help="create and manage jobs")
    actions = jobs.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a job")
    create.add_argument("--target", required=True, help="queue:<name> or an http(s):// URL")
    create.add_argument("--at", help="one-off: an RFC 3339 time with an offset")
    create.add_argument("--cron", help="5-field cron or @hourly/@daily/...")
    create.add_argument("--timezone", help="IANA time zone of --cron (default UTC)")
    create.add_argument("--every-s", dest="every_s", type=int, help="repeat every N seconds")
    create.add_argument("--start-at", dest="start_at", help="grid start of --every-s")
    create.add_argument("--name")
    create.add_argument("--payload", help="a JSON value")
    create.add_argument("--max-attempts", dest="max_attempts", type=int)
    create.add_argument("--backoff-s", dest="backoff_s", help="comma-separated gaps, e.g. 10,60,600")
    create.add_argument("--lease-s", dest="lease_s", type=int)
    create.add_argument("--jitter-s", dest="jitter_s", type=int)
    create.add_argument("--request-key", dest="request_key")
    for name in ("get", "pause", "resume", "delete", "trigger"):
        actions.add_parser(name, help=f"{name} a job").add_argument("id")
    _add_update_parser(actions)
    listing = actions.add_parser("list", help="the jobs, newest first")
    listing.add_argument("--state", help="only jobs in this state: active, paused or completed")
    listing.add_argument("--target", help="only jobs with exactly this target")
    listing.add_argument("--name-prefix", dest="name_prefix", help="only jobs whose name starts with this")
    runs = actions.add_parser("runs", help="a job's runs, newest first")
    runs.add_argument("id")
    runs.add_argument("--since")
    runs.add_argument("--until")
    for parser in (listing, runs):
        parser.add_argument("--limit", type=int)
        parser.add_argument("--cursor")
    for parser in (jobs, create, listing, runs, *[actions.choices[n] for n in ("get", "pause", "resume", "delete", "trigger")]):
        parser.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
        parser.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS, help=CA_FILE_HELP)
        parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")


# -- jobs update ---------------------------------------------------------------


def _update_body(args: argparse.Namespace) -> dict[str, Any]:
    """The merge patch of `tempo jobs update`: the fields given, a schedule
    whole (docs/api.md "Change a job")."""
    patch: dict[str, Any] = {}
    if any(getattr(args, k) is not None for k in ("at", "cron", "every_s", "timezone", "start_at")):
        patch["schedule"] = _schedule_body(args)
    if args.payload is not None:
        try:
            patch["payload"] = json.loads(args.payload)
        except ValueError as exc:
            raise SystemExit(f"tempo jobs update: --payload is not JSON: {exc}") from None
    retry = _retry_body(args)
    if retry:
        patch["retry"] = retry
    for name in ("name", "target", "lease_s", "jitter_s"):
        if getattr(args, name) is not None:
            patch[name] = getattr(args, name)
    if not patch:
        raise SystemExit("tempo jobs update: give at least one field to change")
    return patch


def _add_update_parser(actions: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    update = actions.add_parser("update", help="change a job in place (its ID and history stay)")
    update.add_argument("id")
    update.add_argument("--target", help="queue:<name> or an http(s):// URL")
    update.add_argument("--at", help="one-off: an RFC 3339 time with an offset")
    update.add_argument("--cron", help="5-field cron or @hourly/@daily/...")
    update.add_argument("--timezone", help="IANA time zone of --cron (default UTC)")
    update.add_argument("--every-s", dest="every_s", type=int, help="repeat every N seconds")
    update.add_argument("--start-at", dest="start_at", help="grid start of --every-s")
    update.add_argument("--name")
    update.add_argument("--payload", help="a JSON value, replacing the payload")
    update.add_argument("--max-attempts", dest="max_attempts", type=int)
    update.add_argument("--backoff-s", dest="backoff_s", help="comma-separated gaps, e.g. 10,60,600")
    update.add_argument("--lease-s", dest="lease_s", type=int)
    update.add_argument("--jitter-s", dest="jitter_s", type=int)
    update.add_argument("--if-version", dest="if_version", type=int,
                        help="change it only if it is at this version (else 412 version_mismatch)")
    update.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    update.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS, help=CA_FILE_HELP)
    update.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")


# -- runs commands -------------------------------------------------------------


def _runs(args: argparse.Namespace, client: Client) -> None:
    if args.action == "list":
        value = client.list_all_runs(
            status=args.status, since=args.since, until=args.until, limit=args.limit, cursor=args.cursor
        )
        _show(args, value, ALL_RUN_COLUMNS)
        return
    run = client.get_run(args.id)
    if args.json:
        print(json.dumps(run, indent=2))
        return
    print(record({k: v for k, v in run.items() if k != "attempts"}))
    print()
    print(table(run.get("attempts", []), ATTEMPT_COLUMNS))


def _add_runs_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    runs = sub.add_parser("runs", help="look at runs across jobs")
    actions = runs.add_subparsers(dest="action", required=True)
    get = actions.add_parser("get", help="one run and each of its attempts")
    get.add_argument("id", help="the run ID (r_...)")
    listing = actions.add_parser("list", help="runs of every job, newest first")
    listing.add_argument("--status", help="only runs in this status: waiting, claimed, done, failed or cancelled")
    listing.add_argument("--since", help="listed at or after this RFC 3339 time (a finished run: its end)")
    listing.add_argument("--until", help="listed before this RFC 3339 time")
    listing.add_argument("--limit", type=int, help="runs a page (1-1000, default 100)")
    listing.add_argument("--cursor", help="next page: the cursor the previous page printed")
    for parser in (runs, get, listing):
        parser.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
        parser.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS, help=CA_FILE_HELP)
        parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")


# -- cluster commands ----------------------------------------------------------


def cluster_views(client: Client, urls: Sequence[str]) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, tuple[str, str]]]:
    """Asks every URL, and every node URL named in an answer, for its
    `/v1/cluster`: ([(url, answer)], {url: (role shown, why no answer)})."""
    pending, asked = list(urls), set[str]()
    answers: list[tuple[str, dict[str, Any]]] = []
    failures: dict[str, tuple[str, str]] = {}
    while pending and len(asked) < cluster_urls_max:
        url = pending.pop(0).rstrip("/")
        if url in asked:
            continue
        asked.add(url)
        try:
            answer = client.cluster_at(url)
        except httpx.HTTPError as exc:
            failures[url] = ("unreachable", str(exc) or type(exc).__name__)
            continue
        except ApiError as exc:
            failures[url] = (f"error {exc.status}", str(exc))
            continue
        if any(seen.get("node") == answer.get("node") for _, seen in answers):
            continue  # the same node under another URL
        answers.append((url, answer))
        pending += [n["url"] for n in answer.get("nodes", []) if isinstance(n, dict) and n.get("url")]
    return answers, failures


def cluster_rows(answers: Sequence[tuple[str, dict[str, Any]]], failures: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    ids_by_url = {n["url"].rstrip("/"): n.get("id") for _, a in answers for n in a.get("nodes", []) if n.get("url")}
    rows = []
    for url, answer in answers:
        role = next((n.get("role") for n in answer.get("nodes", []) if n.get("id") == answer.get("node")), None)
        rows.append({
            "node": answer.get("node"), "url": url, "role": role, "term": answer.get("term"),
            "leader": answer.get("leader"), "commit": answer.get("commit_index"), "applied": answer.get("applied_index"),
        })
    for url, (role, _) in failures.items():
        rows.append({"node": ids_by_url.get(url), "url": url, "role": role})
    return sorted(rows, key=lambda r: (r["node"] is None, str(r["node"]), r["url"]))


def agreed_leader(answers: Sequence[tuple[str, dict[str, Any]]]) -> str | None:
    """The leader named by a majority of the cluster's nodes, if any. The
    cluster is every node named in any answer (a node that does not answer
    counts against the majority)."""
    nodes = {n.get("id") for _, a in answers for n in a.get("nodes", [])} | {a.get("node") for _, a in answers}
    votes: dict[str, int] = {}
    for _, answer in answers:
        if answer.get("leader") is not None:
            votes[answer["leader"]] = votes.get(answer["leader"], 0) + 1
    return next((leader for leader, count in votes.items() if 2 * count > len(nodes)), None)


# `tempo cluster status` exit statuses (docs/operations.md "Checking the cluster").
STATUS_HEALTHY, STATUS_NO_LEADER, STATUS_DEGRADED = 0, 1, 3
CLUSTER_STATUS_EXITS = f"""exit status:
  {STATUS_HEALTHY}  a majority of the nodes name one leader, that leader answers and says it
     leads, and every node answers and is at most {limits.follower_lag_entries_max} entries behind its commit index
  {STATUS_NO_LEADER}  no leader: no majority of the nodes names the same one, or the one named
     does not answer or does not say it leads
  {STATUS_DEGRADED}  a leader serves, but a node does not answer or lags behind it
  2  bad arguments, or a certificate refused"""


def cluster_verdict(answers: Sequence[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
    """The exit status of `tempo cluster status` and its last line. A leader
    counts only when a majority names it and it answers that it leads: the
    others may name one that has just died."""
    leader = agreed_leader(answers)
    if leader is None:
        return STATUS_NO_LEADER, "no leader known by a majority of the nodes"
    own = next((a for _, a in answers if a.get("node") == leader), None)
    if own is None:
        return STATUS_NO_LEADER, f"no leader: {leader}, named by a majority of the nodes, does not answer"
    if own.get("leader") != leader:
        return STATUS_NO_LEADER, (f"no leader: {leader}, named by a majority of the nodes, "
                                  f"names {own.get('leader') or 'no leader'} itself")
    voters = {n.get("id") for _, a in answers for n in a.get("nodes", []) if n.get("role") != "unknown"}
    answered = {a.get("node") for _, a in answers}
    commit = own.get("commit_index") or 0
    lagging = sorted(str(a.get("node")) for _, a in answers
                     if commit - (a.get("applied_index") or 0) > limits.follower_lag_entries_max)
    missing = sorted(str(node) for node in voters - answered)
    if missing or lagging:
        why = [f"{', '.join(missing)} not answering"] if missing else []
        why += [f"{', '.join(lagging)} more than {limits.follower_lag_entries_max} entries behind"] if lagging else []
        return STATUS_DEGRADED, f"leader: {leader}; degraded: {'; '.join(why)}"
    return STATUS_HEALTHY, f"leader: {leader}"


def _cluster(args: argparse.Namespace, client: Client) -> int:
    if args.action in ("add", "remove"):
        if args.action == "add":
            answer = client.request("POST", "/v1/cluster/nodes", {"id": args.id, "url": args.node_url})
        else:
            answer = client.request("DELETE", f"/v1/cluster/nodes/{args.id}")
        if args.json:
            print(json.dumps(answer, indent=2))
        else:
            voters = [n["id"] for n in answer["nodes"] if n["role"] != "unknown"]
            print(f"{args.action} {args.id}: done; voters now {', '.join(voters)}")
        return 0
    answers, failures = cluster_views(client, urls_from(getattr(args, "url", None)))
    status, verdict = cluster_verdict(answers)
    if args.json:
        print(json.dumps([answer for _, answer in answers], indent=2))
    else:
        print(table(cluster_rows(answers, failures), CLUSTER_COLUMNS))
        for url, (_, why) in failures.items():
            print(f"{url}: {why}")
        print(verdict)
    return status


def _add_cluster_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cluster = sub.add_parser("cluster", help="look at the nodes of a cluster")
    actions = cluster.add_subparsers(dest="action", required=True)
    status = actions.add_parser(
        "status", help="every node's view: role, term, leader, commit and applied index",
        epilog=CLUSTER_STATUS_EXITS, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = actions.add_parser("add", help="make a node started with `tempo serve --join` a voter")
    add.add_argument("id", help="the new node's ID, as its --node")
    add.add_argument("node_url", metavar="URL", help="the URL the others reach it at, as in its --peers entry")
    remove = actions.add_parser("remove", help="remove a node (a dead one, before adding its replacement)")
    remove.add_argument("id")
    for parser in (cluster, status, add, remove):
        parser.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
        parser.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS, help=CA_FILE_HELP)
        parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the answers as JSON")


def _add_serve_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    serve = sub.add_parser("serve", help="run a tempo node")
    serve.add_argument("--data-dir", default="tempo-data", help="where the node keeps its data (default ./tempo-data)")
    serve.add_argument("--listen", default=None, help="HOST:PORT to listen on (default 127.0.0.1:8700)")
    serve.add_argument("--log-format", choices=("text", "json"), default="text",
                       help="log lines as text (default) or as one JSON object per line")
    serve.add_argument("--node", help="this node's ID in a cluster")
    serve.add_argument("--peers", help="ID=URL,... of every node of the cluster, this one included")
    serve.add_argument("--join", action="store_true",
                       help="start empty and wait to be added (`tempo cluster add`), instead of founding a cluster")
    serve.add_argument("--snapshot-entries", type=int, default=None, help=argparse.SUPPRESS)
    # Tests only: the retention service's clock runs this many days ahead.
    serve.add_argument("--retention-skew-days", type=int, default=0, help=argparse.SUPPRESS)
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback --listen without tokens")
    serve.add_argument("--config", help="TOML config file (tokens, [tls])")


def ca_file_from(args: argparse.Namespace) -> str | None:
    """`--ca-file`, else `TEMPO_CA_FILE`, else None (the system trust store)."""
    return getattr(args, "ca_file", None) or os.environ.get("TEMPO_CA_FILE") or None


def _serve(args: argparse.Namespace) -> int:
    from tempo import server

    try:
        cluster = server.parse_cluster(args.node, args.peers)
        host, port = server.parse_listen(args.listen or server.default_listen(cluster))
    except server.ServeError as exc:
        print(f"tempo serve: {exc}", file=sys.stderr)
        return 2
    options = server.ServeOptions(
        log_format=args.log_format,
        data_dir=args.data_dir, host=host, port=port, insecure=args.insecure, config_path=args.config,
        cluster=cluster, join=args.join,
        snapshot_entries=args.snapshot_entries or limits.snapshot_entries,
        retention_skew_days=args.retention_skew_days,
    )
    if args.join and cluster is None:
        print("tempo serve: --join needs --node and --peers", file=sys.stderr)
        return 2
    # What is imported by now (about 45,000 objects: modules, functions,
    # classes) lives as long as the process. Frozen, the cycle collector's
    # full collections no longer walk it (11 ms each), which a spike sets
    # off every few thousand runs.
    gc.freeze()
    return server.main(options)


def _add_worker_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    worker = sub.add_parser("worker", help="run a command for each run claimed from queues")
    worker.add_argument("--url", default=None, help="server URL(s), comma-separated (default: $TEMPO_URL or http://127.0.0.1:8700)")
    worker.add_argument("--ca-file", dest="ca_file", default=None, help=CA_FILE_HELP)
    worker.add_argument("--queue", action="append", required=True, help="a queue to claim from (repeatable)")
    worker.add_argument("--concurrency", type=int, default=1, help="runs at a time (default 1)")
    worker.add_argument("--worker-id", dest="worker_id", default=None, help="default: HOST-PID")
    worker.add_argument("--grace-s", dest="grace_s", type=float, default=30.0, help="on SIGTERM/SIGINT, how long running commands may finish")
    worker.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND...: gets the payload as JSON on stdin")


def _worker(args: argparse.Namespace) -> int:
    import logging
    import socket

    import trio

    from tempo import worker
    from tempo.net.client import urls_from

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        print("tempo worker: give the command after --", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs every request at INFO
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"[:200]
    try:
        trio.run(lambda: worker.serve_command(
            urls_from(args.url), args.queue, argv, worker_id=worker_id, concurrency=args.concurrency,
            grace_s=args.grace_s, token=os.environ.get("TEMPO_TOKEN"), ca_file=ca_file_from(args),
        ))
    except worker.WorkerError as exc:
        print(f"tempo worker: {exc}", file=sys.stderr)
        return 2
    except TlsError as exc:
        print(f"tempo worker: --ca-file: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_loadgen_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    gen = sub.add_parser("loadgen", help="the spike: N one-off jobs due at one instant, W workers")
    gen.add_argument("--url", default=None, help="server URL(s), comma-separated")
    gen.add_argument("--ca-file", dest="ca_file", default=None, help=CA_FILE_HELP)
    gen.add_argument("--jobs", type=int, default=0, help="the spike: how many jobs, all due at one instant")
    gen.add_argument("--rate", type=float, default=0.0, help="steady mode: runs falling due per second (with --duration-s)")
    gen.add_argument("--duration-s", dest="duration_s", type=float, default=0.0, help="steady mode: for this many seconds")
    gen.add_argument("--due-in-s", dest="due_in_s", type=float, default=10.0, help="due this long after start (default 10)")
    gen.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    gen.add_argument("--batch", type=int, default=1000, help="jobs per create request (default 1000)")
    gen.add_argument("--jitter-s", dest="jitter_s", type=int, default=0, help="jitter_s of each job (default 0)")
    gen.add_argument("--timeout-s", dest="timeout_s", type=float, default=60.0, help="a job unclaimed this long after the due instant is lost (default 60)")
    gen.add_argument("--report", help="write the figures as JSON to this file, and an HTML page and an SVG chart beside it "
                     "(default: tempo-loadgen-YYYYMMDD-HHMMSS.json in the current directory)")
    gen.add_argument("--no-report", dest="no_report", action="store_true", help="write no report files")
    gen.add_argument("--no-progress", dest="progress", action="store_false", help="no live progress line")
    gen.add_argument("--spawn", type=int, default=0,
                     help="start a local server (1) or cluster (3 or 5 nodes) on free loopback ports for the run")
    gen.add_argument("--kill-leader-at-s", dest="kill_leader_at_s", type=float, default=None,
                     help="with --spawn 3: SIGKILL the leader this long after the due instant, then restart it")
    gen.add_argument("--restart-after-s", dest="restart_after_s", type=float, default=3.0,
                     help="restart the killed leader this long after the SIGKILL (default 3)")
    gen.add_argument("--lease-s", dest="lease_s", type=int, default=None,
                     help="lease_s of each job (default: the server's; 10 with --kill-leader-at-s)")
    gen.add_argument("--work-dir", dest="work_dir", default=None,
                     help="with --spawn: keep the nodes' data dirs and logs here (default: a temp dir, removed)")


def _loadgen(args: argparse.Namespace) -> int:
    from tempo import loadgen
    from tempo.net.client import urls_from

    opts = loadgen.Options(
        urls=urls_from(args.url), jobs=args.jobs, rate=args.rate, duration_s=args.duration_s, due_in_s=args.due_in_s, workers=args.workers,
        batch=args.batch, jitter_s=args.jitter_s, timeout_s=args.timeout_s, report=args.report,
        no_report=args.no_report, progress=args.progress, spawn=args.spawn,
        kill_leader_at_s=args.kill_leader_at_s, restart_after_s=args.restart_after_s, lease_s=args.lease_s,
        work_dir=args.work_dir, ca_file=ca_file_from(args),
    )
    return loadgen.run(opts)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tempo", description="tempo, a job scheduler")
    sub = top.add_subparsers(dest="command", required=True)
    _add_serve_parser(sub)
    _add_jobs_parser(sub)
    _add_runs_parser(sub)
    _add_cluster_parser(sub)
    _add_worker_parser(sub)
    _add_loadgen_parser(sub)
    openapi = sub.add_parser("openapi", help="print the OpenAPI document of the HTTP API (no server needed)")
    openapi.add_argument(
        "--markdown", action="store_true", help="print it as the API reference, docs/reference.md, instead of JSON"
    )
    return top


def _openapi(args: argparse.Namespace) -> int:
    from tempo.net import openapi, reference

    document = openapi.document()
    if args.markdown:
        sys.stdout.write(reference.render(document))
    else:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader of our output went away (`tempo jobs list | head -1`):
        # no traceback, and nothing more written to the closed pipe when
        # the interpreter flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    # The commands that are not a client of a running server.
    local: dict[str, Callable[[argparse.Namespace], int]] = {
        "serve": _serve, "worker": _worker, "loadgen": _loadgen, "openapi": _openapi,
    }
    if args.command in local:
        return local[args.command](args)
    args.json = getattr(args, "json", False)
    try:
        client = Client(getattr(args, "url", None) or "", ca_file=ca_file_from(args))
    except TlsError as exc:
        print(f"tempo: --ca-file: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"tempo: --url: {exc}", file=sys.stderr)
        return 2
    try:
        with client:
            if args.command == "cluster":
                return _cluster(args, client)
            if args.command == "runs":
                _runs(args, client)
                return 0
            _jobs(args, client)
    except ApiError as exc:
        print(f"tempo: {exc}", file=sys.stderr)
        return 1
    except OutcomeUnknown as exc:
        print(f"tempo: {exc}", file=sys.stderr)
        return 2
    except (Unavailable, httpx.HTTPError) as exc:
        print(f"tempo: cannot reach the server: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
