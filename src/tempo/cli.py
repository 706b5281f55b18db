"""The `tempo` command: `serve`, `worker`, and a client for the jobs API.

Exit statuses (docs/operations.md "The command line"): 0 ok; 1 the server
said no; 2 usage (a bad flag, value or file); 3 no server answered.
`tempo cluster status` has statuses of its own."""

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import httpx

from tempo import cli_calendars, cli_deps, limits
from tempo.net.agent import USER_AGENT
from tempo.net.client import (
    ApiError,
    CertificateRefused,
    Client,
    OutcomeUnknown,
    Unavailable,
    request_timeout_s,
    urls_from,
)
from tempo.net.tls import TlsError

# `outcome`: the status of the job's last run that ended (docs/api.md
# "Outcomes"), so a one-off that failed does not read like one that succeeded.
# `labels` last: its width varies most (long lists end in "…", `labels_chars_max`).
JOB_COLUMNS = ("id", "name", "state", "outcome", "target", "schedule", "next_run_at", "labels")
RUN_COLUMNS = ("id", "status", "attempt", "nominal_at", "due_at", "worker", "finished_at", "error")
ALL_RUN_COLUMNS = ("id", "job_id", "status", "attempt", "due_at", "finished_at", "error")
ATTEMPT_COLUMNS = ("attempt", "claimed_at", "worker", "ended_at", "ok", "error", "output")
# A table cell shows at most this many characters of a text (an error, an output).
cell_chars_max = 60
detail_chars_max = 120  # an event's detail in the events table (a target's error page can be long)
labels_chars_max = 40  # a job's labels in the jobs table, as `k=v,k=v` (a job may have 64 of them)
CLUSTER_COLUMNS = ("node", "url", "role", "term", "leader", "commit", "applied")
EVENT_COLUMNS = ("cursor", "at", "type", "job_id", "run_id", "detail")
# An admin's feed holds every owner's events, each naming its `owner`.
OWNER_EVENT_COLUMNS = ("cursor", "at", "type", "owner", "job_id", "run_id", "detail")
# `tempo events --follow` prints each event as it comes, so its columns are
# padded to these widths rather than to the widest cell of a page (a longer
# value widens its own line only; the detail is last and never padded).
follow_widths = {"cursor": 6, "at": 24, "type": 13, "owner": 12, "job_id": 28, "run_id": 38}
PREVIEW_COLUMNS = ("at", "local", "offset", "dst")
URL_HELP = "server URL(s), comma-separated: the nodes of a cluster (default: $TEMPO_URL or http://127.0.0.1:8700)"
CA_FILE_HELP = "PEM file of the CA that signed the servers' certificates, for https:// URLs " \
    "(default: $TEMPO_CA_FILE, else the system trust store)"
# `tempo cluster status` asks at most this many URLs (given and discovered).
cluster_urls_max = 64
# `tempo jobs create --file`: jobs per `POST /v1/jobs/batch`, and the bytes
# of their lines, under the server's bounds on a batch.
file_batch_jobs = limits.batch_jobs_max
file_batch_bytes = limits.batch_body_bytes_max - 1024  # room for `{"jobs": [...]}` and commas
# `tempo events --follow`: one long poll's wait.
events_wait_s = min(20, limits.events_wait_s_max)

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_STATUSES = f"""exit status:
  {EXIT_OK}  ok
  {EXIT_REFUSED}  the server said no: an error answer (not found, a bad value: the flag is named)
  {EXIT_USAGE}  usage: a bad flag or value, a file that cannot be read, a certificate refused
  {EXIT_UNREACHABLE}  no server answered (or a write's answer was lost: it may or may not have been made)
  `tempo cluster status` has statuses of its own (see its --help)."""


class Usage(Exception):
    """A command line that cannot be sent: exit status 2, naming the flag."""


def _version() -> str:
    return USER_AGENT.replace("/", " ", 1)


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _subparser(
    actions: "argparse._SubParsersAction[argparse.ArgumentParser]", name: str, help: str, *examples: str,
    epilog: str = "",
) -> argparse.ArgumentParser:
    """A subcommand with its help, and examples (and `epilog`) below its flags."""
    text = _examples(*examples) + (f"\n\n{epilog}" if epilog else "")
    return actions.add_parser(name, help=help, description=help, epilog=text,
                              formatter_class=argparse.RawDescriptionHelpFormatter)


def _global_flags(parser: argparse.ArgumentParser, json_help: str = "print the server's answers as JSON") -> None:
    """`--url`, `--ca-file` and `--json`, accepted before and after the
    subcommand: every parser on the way defines them with no default, so a
    later parser does not overwrite what an earlier one read."""
    parser.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    parser.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS, help=CA_FILE_HELP)
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=json_help)


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    """`--url` and `--ca-file` of the commands that print no answers."""
    parser.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    parser.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS, help=CA_FILE_HELP)


def _gaps_s(text: str) -> list[int]:
    """`--backoff-s 10,60,600`: whole seconds, not negative."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdecimal() for part in parts):
        raise argparse.ArgumentTypeError(f"comma-separated whole seconds, e.g. 10,60,600 (got {text!r})")
    return [int(part) for part in parts]


def _int_from(lo: int) -> Callable[[str], int]:
    """A flag's whole number, at least `lo`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"at least {lo} (got {value})")
        return value
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds, not {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"a number of seconds, 0 or more (got {text})")
    return value


def _label_pair(text: str) -> tuple[str, str]:
    """`--label team=payments` (or `team:payments`, as the API's filter
    writes it): a key and its value. A key holds neither `=` nor `:`, so the
    first of them ends it; the value may hold both."""
    cut = min((i for i in (text.find("="), text.find(":")) if i >= 0), default=-1)
    if cut <= 0:
        raise argparse.ArgumentTypeError(f"KEY=VALUE, e.g. team=payments (got {text!r})")
    return text[:cut], text[cut + 1:]


def _label_filter(text: str) -> str:
    """`tempo jobs list --label team=payments` (or `team:payments`): the
    API's `key:value`, so a label is written alike on create and list."""
    name, value = _label_pair(text)
    return f"{name}:{value}"


def _worker_id(text: str) -> str:
    if not 1 <= len(text) <= limits.worker_chars_max:
        raise argparse.ArgumentTypeError(f"1 to {limits.worker_chars_max} characters (got {len(text)})")
    return text


def _max_runs(text: str) -> int | str:
    """--max-runs: a count (the server checks its bounds), or `none`."""
    if text == "none":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


# Where the server's problem `loc`s point among the flags (docs/api.md "Problems (errors)"):
# an error names the flag the user typed, not the field it became.
SCHEDULE_FLAGS = {
    "schedule": "--at/--cron/--every-s", "schedule.at": "--at", "schedule.cron": "--cron",
    "schedule.timezone": "--timezone", "schedule.every_s": "--every-s", "schedule.start_at": "--start-at",
    "schedule.end_at": "--end-at", "schedule.max_runs": "--max-runs",
    "schedule.dst": "--dst-gap/--dst-repeat", "schedule.dst.gap": "--dst-gap", "schedule.dst.repeat": "--dst-repeat",
    "schedule.after": "--after", "schedule.after.jobs": "--after", "schedule.after.on": "--on",
    "schedule.after.all": "--any/--all", "schedule.after.within_s": "--within-s", "schedule.requires": "--requires",
    "schedule.requires.jobs": "--requires", "schedule.requires.on": "--on", "schedule.requires.within_s": "--within-s",
    "schedule.requires.wait_s": "--wait-s",
} | cli_calendars.SCHEDULE_CALENDAR_FLAGS
CREATE_FLAGS = SCHEDULE_FLAGS | {
    "target": "--target", "name": "--name", "payload": "--payload", "retry": "--max-attempts/--backoff-s",
    "retry.max_attempts": "--max-attempts", "retry.backoff_s": "--backoff-s", "lease_s": "--lease-s",
    "jitter_s": "--jitter-s", "request_key": "--request-key", "timeout_s": "--timeout-s", "overlap": "--overlap",
    "catchup": "--catchup-policy/--catchup-window-s/--catchup-max-runs", "catchup.policy": "--catchup-policy",
    "catchup.window_s": "--catchup-window-s", "catchup.max_runs": "--catchup-max-runs",
    "labels": "--label", "notify": "--notify-url/--notify-event", "notify.url": "--notify-url",
    "notify.events": "--notify-event",
}
PAGE_FLAGS = {
    "query.limit": "--limit", "query.cursor": "--cursor", "query.since": "--since", "query.until": "--until",
    "query.state": "--state", "query.target": "--target", "query.name_prefix": "--name-prefix",
    "query.status": "--status", "query.label": "--label",
}
EVENT_FLAGS = {"query.after": "--after", "query.limit": "--limit"}
BACKFILL_FLAGS = {"from": "--from", "until": "--until", "overlap": "--overlap"}
PREVIEW_FLAGS = SCHEDULE_FLAGS | {"after": "--after", "count": "--count"}


def flag_of(loc: str, flags: dict[str, str]) -> str:
    """The flag that set the field at `loc` (`retry.backoff_s[2]` is
    `--backoff-s`), else `loc` itself."""
    for length in range(len(loc), 0, -1):
        head, rest = loc[:length], loc[length:]
        if head in flags and (not rest or rest[0] in ".["):
            return flags[head]
    return loc or "body"


def explain(exc: ApiError, flags: dict[str, str]) -> str:
    """An error answer as a line, its fields named by their flags."""
    problem = exc.problem
    errors = problem.get("errors") or []
    where = "; ".join(f"{flag_of(str(e.get('loc') or ''), flags)}: {e.get('msg')}" for e in errors if isinstance(e, dict))
    return f"{exc.status} {problem.get('type', 'error')}: {where or problem.get('detail') or problem.get('title') or ''}"


def token_hint(status: int) -> str:
    """What to do about a `401`: where the command takes its token from."""
    if status != 401:
        return ""
    if os.environ.get("TEMPO_TOKEN"):
        return " (the token in $TEMPO_TOKEN is not one the server knows)"
    return " (set $TEMPO_TOKEN to your bearer token)"


# -- tables --------------------------------------------------------------------


def _schedule_text(schedule: dict[str, Any]) -> str:
    gate = schedule.get("requires")
    needs = f", requires {','.join(gate['jobs'])}" if isinstance(gate, dict) else ""
    if "cron" in schedule:
        return f"cron {schedule['cron']} ({schedule.get('timezone', 'UTC')}){needs}"
    if "every_s" in schedule:
        start = f" from {schedule['start_at']}" if "start_at" in schedule else ""
        return f"every {schedule['every_s']}s{start}{needs}"
    after = schedule.get("after")
    if isinstance(after, dict):
        joined = "," if after.get("all", True) else "|"
        return f"after {joined.join(after['jobs'])} {after.get('on', 'succeeded')}"
    return f"at {schedule.get('at')}"


def zone_of(job: dict[str, Any]) -> str | None:
    """The time zone of a cron job, unless UTC: its times are shown there too."""
    schedule = job.get("schedule")
    zone = schedule.get("timezone") if isinstance(schedule, dict) else None
    return zone if isinstance(zone, str) and zone not in ("UTC", "Etc/UTC") else None


def local_time(at: str, timezone: str) -> str | None:
    """`at` (RFC 3339) as the wall clock of `timezone` with its offset, as a
    preview's `local` and `offset` spell it; None if it cannot be read."""
    from datetime import datetime

    from tempo import clock, schedule

    try:
        at_ms = clock.ms_from_datetime(datetime.fromisoformat(at))
        offset_s = schedule.utc_offset_s(timezone, at_ms)
    except (ValueError, KeyError, AssertionError):
        return None  # not a time with an offset, or a zone this machine does not know
    return clock.local_iso_from_ms(at_ms + offset_s * 1000) + clock.offset_text(offset_s)


def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    if column in ("reason", "range") and "job_id" in row:
        return _run_cell(row, column)
    if column == "schedule" and isinstance(value, dict):
        return _schedule_text(value)
    if column == "outcome":
        last = row.get("last_run")
        value = last.get("status") if isinstance(last, dict) else None
    if column == "labels" and isinstance(value, dict):
        return labels_text(value)
    if column in ("error", "output") and isinstance(value, str):
        # One line a row: a text's newlines would break the table.
        value = value.replace("\n", " ").replace("\r", " ")
        if len(value) > cell_chars_max:
            value = value[: cell_chars_max - 1] + "…"
    zone = zone_of(row)
    if column.endswith("_at") and isinstance(value, str) and zone is not None:
        local = local_time(value, zone)
        return value if local is None else f"{value} ({local})"
    if isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"))
        if column == "detail" and len(text) > detail_chars_max:
            text = text[: detail_chars_max - 1] + "…"
        return text
    return "-" if value is None else str(value)


def run_columns(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> Sequence[str]:
    """`columns` with REASON and RANGE before ERROR when a row needs them
    (a missed row, a skipped one, a backfilled run), so a table of plain
    runs stays as narrow as it was."""
    if not any(row.get("reason") or row.get("backfill") or row.get("missed_until") for row in rows):
        return columns
    at = list(columns).index("error")
    return (*columns[:at], "reason", "range", *columns[at:])


def _run_cell(row: dict[str, Any], column: str) -> str:
    """A run's REASON (why a row got no run, or `backfill`) or RANGE (a
    missed row's slots `[from, until)` and how many, docs/api.md "Runs")."""
    if column == "reason":
        marks = [row["reason"]] if row.get("reason") else []
        return ",".join(marks + (["backfill"] if row.get("backfill") else [])) or "-"
    if row.get("missed_until") is None:
        return "-"
    count = row.get("count")
    slots = "too many to count" if count is None else f"{count} slot{'' if count == 1 else 's'}"
    return f"{row.get('missed_from') or row.get('nominal_at')}..{row['missed_until']} ({slots})"


def labels_text(labels: dict[str, Any]) -> str:
    """A job's labels as one cell, `key=value` by key, comma-separated, cut
    to `labels_chars_max` with "…" (`tempo jobs get` shows them whole)."""
    text = ",".join(f"{key}={labels[key]}" for key in sorted(labels)) or "-"
    return text if len(text) <= labels_chars_max else text[: labels_chars_max - 1] + "…"


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[_cell(row, c) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def record(row: dict[str, Any]) -> str:
    width = max(len(k) for k in row)
    zone = zone_of(row)

    def text(key: str, value: Any) -> str:
        if isinstance(value, dict | list):
            return json.dumps(value)
        if value is None:
            return "-"
        if isinstance(value, str) and ("\n" in value or "\r" in value):
            # A command's output or error of several lines: each line under
            # the first, in the value's column, and no empty line for the
            # final line break (`--json` shows the text as it is).
            lines = value.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n")
            return ("\n" + " " * (width + 2)).join(lines)
        local = local_time(value, zone) if zone is not None and key.endswith("_at") and isinstance(value, str) else None
        return f"{value} ({local} {zone})" if local is not None else str(value)

    return "\n".join(f"{k.ljust(width)}  {text(k, v)}" for k, v in row.items())


# -- jobs commands -------------------------------------------------------------

# The flags of one job, which `--file` replaces.
JOB_FLAGS = ("target", "at", "cron", "every_s", "timezone", "start_at", "end_at", "max_runs", "name", "payload", "max_attempts",
             "backoff_s", "lease_s", "jitter_s", "request_key", "labels", "notify_url", "notify_events", "timeout_s",
             "overlap")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _put_given(body: dict[str, Any], args: argparse.Namespace, names: tuple[str, ...]) -> None:
    """The payload, the retry policy and the plain fields `names` the
    command line gave, into a create body or a merge patch."""
    if args.payload is not None:
        body["payload"] = args.payload
    retry = _retry_body(args)
    if retry:
        body["retry"] = retry
    for name in names:
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)


def _create_body(args: argparse.Namespace) -> dict[str, Any]:
    if args.target is None:
        raise Usage("the following arguments are required: --target")
    body: dict[str, Any] = {"target": args.target, "schedule": _schedule_body(args)}
    _put_given(body, args, ("name", "lease_s", "jitter_s", "request_key", "timeout_s", "overlap"))
    catchup = _catchup_body(args)
    if catchup:
        body["catchup"] = catchup
    if args.labels is not None:
        body["labels"] = dict(args.labels)
    if args.notify_events is not None and args.notify_url is None:
        raise Usage("--notify-event goes with --notify-url (where the notices go)")
    notify = _notify_body(args)
    if notify:
        body["notify"] = notify
    return body


def _notify_body(args: argparse.Namespace) -> dict[str, Any]:
    """The `notify` field from --notify-url and --notify-event (each event
    once, in the order given); the server checks them."""
    notify: dict[str, Any] = {}
    if args.notify_url is not None:
        notify["url"] = args.notify_url
    if args.notify_events is not None:
        notify["events"] = list(dict.fromkeys(args.notify_events))
    return notify


def _catchup_body(args: argparse.Namespace) -> dict[str, Any]:
    """The `catchup` field from the --catchup-* flags; the server checks
    the values and its errors name the flag (`CREATE_FLAGS`)."""
    flags = {"policy": args.catchup_policy, "window_s": args.catchup_window_s, "max_runs": args.catchup_max_runs}
    return {name: value for name, value in flags.items() if value is not None}


# Each kind of schedule and the flag's attribute (`preview` has an `--after` of its own).
_KINDS = {"at": "at", "cron": "cron", "every_s": "every_s", "after": "after_jobs"}


def _kind_value(args: argparse.Namespace, kind: str) -> Any:
    """The value of a schedule kind's flag, None when not given; `--after`'s
    with its flags (cli_deps.py)."""
    return cli_deps.after_value(args) if kind == "after" else getattr(args, _KINDS[kind], None)


def _schedule_body(args: argparse.Namespace) -> dict[str, Any]:
    kinds = [k for k in _KINDS if _kind_value(args, k) is not None]
    if len(kinds) != 1:  # two at once argparse refuses; none is left to here
        raise Usage("give exactly one of --at, --cron, --every-s or --after")
    schedule: dict[str, Any] = {kinds[0]: _kind_value(args, kinds[0])} | cli_deps.requires_field(args)
    if args.timezone is not None:
        schedule["timezone"] = args.timezone
    if args.start_at is not None:
        schedule["start_at"] = args.start_at
    return schedule | _dst_field(args) | _end_fields(args) | cli_calendars.schedule_fields(args)


def _dst_field(args: argparse.Namespace) -> dict[str, Any]:
    """The schedule's `dst` from --dst-gap and --dst-repeat (a patch merges
    it key by key, so one flag alone keeps the other's value)."""
    dst = {name: getattr(args, f"dst_{name}") for name in ("gap", "repeat") if getattr(args, f"dst_{name}") is not None}
    return {"dst": dst} if dst else {}


def _schedule_patch(args: argparse.Namespace, job_schedule: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The `schedule` of `jobs update`'s merge patch: only the keys given,
    merged into the job's schedule by the server (docs/api.md "Change a
    job"), so --cron alone keeps the zone and the DST policy, and
    --timezone alone changes only the zone. A kind flag removes the other
    kinds (null), so --every-s turns a cron job into a periodic one.
    `job_schedule` reads the job's schedule, for --on and the other flags
    that change its edges alone (cli_deps.py)."""
    schedule: dict[str, Any] = {}
    for kind in _KINDS:
        if _kind_value(args, kind) is not None:
            schedule = dict.fromkeys(k for k in _KINDS if k != kind)
            schedule[kind] = _kind_value(args, kind)
    for name in ("timezone", "start_at"):
        if getattr(args, name) is not None:
            schedule[name] = getattr(args, name)
    edges = cli_deps.patch_fields(args, job_schedule)
    return schedule | _dst_field(args) | _end_fields(args) | edges | cli_calendars.schedule_fields(args)


def _end_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The schedule's end conditions from --end-at and --max-runs; `none`
    (for `jobs update`) is null, which removes one."""
    ends: dict[str, Any] = {}
    for name in ("end_at", "max_runs"):
        value = getattr(args, name)
        if value is not None:
            ends[name] = None if value == "none" else value
    return ends


def _retry_body(args: argparse.Namespace) -> dict[str, Any]:
    retry: dict[str, Any] = {}
    if args.max_attempts is not None:
        retry["max_attempts"] = args.max_attempts
    if args.backoff_s is not None:
        retry["backoff_s"] = args.backoff_s
    return retry


def job_columns(jobs: Sequence[dict[str, Any]]) -> Sequence[str]:
    """The jobs table's columns: with OWNER after NAME when the page holds
    jobs of more than one owner (an admin token lists every owner's)."""
    if len({job.get("owner") for job in jobs}) < 2:
        return JOB_COLUMNS
    return (*JOB_COLUMNS[:2], "owner", *JOB_COLUMNS[2:])


def _show(args: argparse.Namespace, value: Any, columns: Sequence[str] | None = None) -> None:
    if value is None:  # a delete, which the server answers with no body
        print(json.dumps({"id": args.id, "deleted": True}, indent=2) if args.json else "deleted")
    elif args.json:
        print(json.dumps(value, indent=2))
    elif isinstance(value, dict) and columns is not None and "next_cursor" in value:  # a page (a job has `runs` too)
        rows = value["jobs"] if "jobs" in value else value["runs"]
        if columns is JOB_COLUMNS:
            columns = job_columns(rows)
        elif columns in (RUN_COLUMNS, ALL_RUN_COLUMNS):
            columns = run_columns(rows, columns)
        print(table(rows, columns))
        if value.get("next_cursor"):
            print(f"next page: --cursor {value['next_cursor']}")
    else:  # one job, or one run (a trigger's)
        print(record(run_record(value) if "job_id" in value else value))


def _jobs(args: argparse.Namespace, client: Client) -> int:
    if args.action == "create" and args.file is not None:
        return _create_from_file(args, client)
    action: dict[str, Callable[[], Any]] = {
        "create": lambda: client.create_job(_create_body(args)),
        "get": lambda: client.get_job(args.id),
        "list": lambda: client.list_jobs(
            args.limit, args.cursor, state=args.state, target=args.target, name_prefix=args.name_prefix,
            label=args.labels,
        ),
        "pause": lambda: client.pause_job(args.id, args.note),
        "resume": lambda: client.resume_job(args.id),
        "delete": lambda: client.delete_job(args.id),
        "trigger": lambda: client.trigger_job(args.id),
        "graph": lambda: client.job_graph(args.id, args.depth),
        "backfill": lambda: client.backfill_job(args.id, args.since, args.until, args.overlap),
        "update": lambda: _update(args, client),
        "runs": lambda: client.list_runs(
            args.id, since=args.since, until=args.until, limit=args.limit, cursor=args.cursor
        ),
    }
    value = action[args.action]()
    if args.action == "graph" and not args.json:
        print(graph_lines(value))
        return EXIT_OK
    _show(args, value, RUN_COLUMNS if args.action == "runs" else JOB_COLUMNS)
    return EXIT_OK


def graph_lines(graph: dict[str, Any]) -> str:
    """`tempo jobs graph`'s text: one edge a line, parent first, the
    upstream edges then the downstream ones."""
    lines = [f"{graph['job_id']} (depth {graph['depth']})"]
    for side in ("upstream", "downstream"):
        edges = graph[side]
        lines.append(f"{side}:" + ("" if edges else " none"))
        lines += [f"  {edge['parent']} -> {edge['child']}" for edge in edges]
    if graph["truncated"]:
        lines.append("(more edges left out: the answer's bound)")
    return "\n".join(lines)


def read_job_lines(stream: IO[str]) -> list[tuple[int, dict[str, Any], int]]:
    """(line number, job body, its bytes) of each non-blank line of a JSON
    Lines file; `Usage` naming the first line that is not a JSON object."""
    jobs = []
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except ValueError as exc:
            raise Usage(f"--file: line {number}: not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise Usage(f"--file: line {number}: not a JSON object (a job's create body)")
        jobs.append((number, body, len(line.encode())))
    return jobs


def file_batches(jobs: list[tuple[int, dict[str, Any], int]]) -> Iterator[list[tuple[int, dict[str, Any], int]]]:
    """The lines in batches of at most `file_batch_jobs` jobs and
    `file_batch_bytes` bytes (a longer line goes alone; the server says 413)."""
    batch: list[tuple[int, dict[str, Any], int]] = []
    size = 0
    for job in jobs:
        if batch and (len(batch) == file_batch_jobs or size + job[2] > file_batch_bytes):
            yield batch
            batch, size = [], 0
        batch.append(job)
        size += job[2] + 1
    if batch:
        yield batch


def _create_from_file(args: argparse.Namespace, client: Client) -> int:
    given = [_flag(name) for name in JOB_FLAGS if getattr(args, name) is not None]
    if given:
        raise Usage(f"--file: each line is a whole job; {', '.join(given)} is for one job from flags")
    try:
        if args.file == "-":
            jobs = read_job_lines(sys.stdin)
        else:
            with open(args.file, encoding="utf-8") as stream:
                jobs = read_job_lines(stream)
    except (OSError, UnicodeDecodeError) as exc:
        raise Usage(f"--file: {exc}") from None
    refused = 0
    if not args.json:
        print(f"{'LINE':<6}  {'STATUS':<6}  RESULT", flush=True)
    for batch in file_batches(jobs):
        try:
            results = client.create_jobs([body for _, body, _ in batch])
        except ApiError as exc:
            # The batch as a whole was refused: none of its lines was created.
            lines = f"lines {batch[0][0]}-{batch[-1][0]}" if len(batch) > 1 else f"line {batch[0][0]}"
            raise ApiError(exc.status, exc.problem | {"detail": f"{lines}: {explain(exc, {})}", "errors": []}) from None
        for (number, _, _), result in zip(batch, results, strict=True):
            status = int(result.get("status", 0))
            refused += status >= 300
            if args.json:
                print(json.dumps({"line": number} | result), flush=True)
                continue
            if status < 300:
                job = result.get("job") or {}
                text = str(job.get("id")) + (f" {job['name']}" if job.get("name") else "")
            else:
                text = explain(ApiError(status, result.get("problem") or {}), {}).split(": ", 1)[-1]
                text = f"{(result.get('problem') or {}).get('type', 'error')}: {text}"
            print(f"{number:<6}  {status:<6}  {text}", flush=True)
    return EXIT_REFUSED if refused else EXIT_OK


def _add_job_flags(parser: argparse.ArgumentParser, *, payload_help: str, max_attempts_help: str) -> None:
    """The job's fields besides its target and schedule, as `jobs create`
    and `jobs update` both take them."""
    parser.add_argument("--name", help="a name to recognise the job by (not unique)")
    parser.add_argument("--payload", type=_json_value, help=payload_help)
    parser.add_argument("--max-attempts", dest="max_attempts", type=int, metavar="N", help=max_attempts_help)
    parser.add_argument("--backoff-s", dest="backoff_s", type=_gaps_s, metavar="S,S,...",
                        help="seconds to wait before each retry, comma-separated, e.g. 10,60,600")
    parser.add_argument("--lease-s", dest="lease_s", type=int, metavar="S",
                        help="how long a claimed run is a worker's without a heartbeat")
    parser.add_argument("--jitter-s", dest="jitter_s", type=int, metavar="S",
                        help="spread each run's due time over up to S seconds")
    parser.add_argument("--label", dest="labels", action="append", type=_label_pair, metavar="KEY=VALUE",
                        help=f"a label to find the job by, e.g. team=payments; repeat for more (at most "
                             f"{limits.job_labels_max}; keys are a-z 0-9 . _ / -)")
    parser.add_argument("--notify-url", dest="notify_url", metavar="URL",
                        help="POST a signed notice here on the job's events (the server needs a [notify] config)")
    parser.add_argument("--notify-event", dest="notify_events", action="append", metavar="EVENT",
                        help="an event that sends a notice: run.failed, job.completed or job.recovered; repeat "
                             "for more (default: all three)")
    parser.add_argument("--timeout-s", dest="timeout_s", type=int, metavar="S",
                        help="end each attempt S seconds after its claim, whatever its heartbeats (1-86400)")
    parser.add_argument("--overlap", metavar="POLICY",
                        help="what a slot due while an earlier run runs does: allow (the default), skip, "
                             "buffer_one, buffer_all or cancel_other (repeating schedules only)")


def _add_schedule_flags(
    parser: argparse.ArgumentParser, *, with_file: bool, removable: bool = False, with_deps: bool = True
) -> None:
    what = "exactly one of --at, --cron or --every-s" + (" (or --file, for many jobs)" if with_file else "")
    group = parser.add_argument_group("schedule", f"give {what}")
    kinds = group.add_mutually_exclusive_group()
    kinds.add_argument("--at", help="one-off: an RFC 3339 time with an offset, e.g. 2030-01-01T09:00:00+01:00")
    kinds.add_argument("--cron", help="5-field cron or @hourly/@daily/..., e.g. '0 3 * * *'")
    kinds.add_argument("--every-s", dest="every_s", type=int, metavar="N", help="repeat every N seconds")
    if with_deps:
        kinds.add_argument("--after", dest="after_jobs", metavar="IDS",
                           help="a dependent job: run after these jobs end, e.g. j_A,j_B (all of them, unless --any)")
    if with_file:
        kinds.add_argument("--file", help="create the jobs of a JSON Lines file (- for stdin), one create body "
                           "per line, through the batch API; each line's result is printed. A line with a "
                           "request_key may be sent again safely")
    if with_deps:
        cli_deps.add_flags(group)
    group.add_argument("--timezone", help="IANA time zone of --cron, e.g. Europe/Berlin (default UTC)")
    group.add_argument("--start-at", dest="start_at", help="RFC 3339 start of the --every-s grid (default: now)")
    group.add_argument("--dst-gap", dest="dst_gap", metavar="POLICY",
                       help="with --cron: a local time that a DST change skips runs at the first instant after "
                            "the gap (shift, the default) or not at all (skip)")
    group.add_argument("--dst-repeat", dest="dst_repeat", metavar="POLICY",
                       help="with --cron: a local time that a DST change repeats runs at its first pass (first, "
                            "the default), its last (last) or both (both)")
    removes = "; none removes it" if removable else ""
    group.add_argument("--end-at", dest="end_at", metavar="TIME",
                       help=f"with --cron or --every-s: no run after this RFC 3339 time, e.g. 2030-06-30T23:59:59Z{removes}")
    group.add_argument("--max-runs", dest="max_runs", type=_max_runs, metavar="N",
                       help=f"with --cron or --every-s: run N slots (triggered runs not counted), then the job is "
                            f"completed, e.g. --max-runs 10 (1-{limits.schedule_runs_max}){removes}")
    cli_calendars.add_schedule_flags(group, removable=removable)


def _add_catchup_flags(parser: argparse.ArgumentParser) -> None:
    """The --catchup-* flags, as `jobs create` and `jobs update` take them."""
    parser.add_argument("--catchup-policy", dest="catchup_policy", metavar="POLICY",
                        help="slots missed while down or paused: latest (default: run the latest), all (each, "
                             "in order) or none")
    parser.add_argument("--catchup-window-s", dest="catchup_window_s", type=int, metavar="S",
                        help="catch up only slots missed in the last S seconds (default: no window)")
    parser.add_argument("--catchup-max-runs", dest="catchup_max_runs", type=int, metavar="N",
                        help="with --catchup-policy all: at most N catch-up runs (default 1000)")


def _add_jobs_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    jobs = _subparser(sub, "jobs", "create and manage jobs", "tempo jobs list", "tempo jobs create --help")
    actions = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = _subparser(
        actions, "create", "create a job (or many, from a file)",
        "tempo jobs create --target queue:reports --cron '0 3 * * *' --timezone Europe/Berlin",
        "tempo jobs create --target https://example.com/hook --at 2030-01-01T09:00:00Z --payload '{\"id\": 7}'",
        "tempo jobs create --target queue:mail --every-s 600 --max-attempts 5 --backoff-s 10,60,600",
        "tempo jobs create --target queue:pay --cron '@hourly' --label team=payments --notify-url https://hooks.example.com/t",
        "tempo jobs create --file jobs.jsonl",
    )
    create.add_argument("--target", help="queue:<name> (claimed by workers) or an http(s):// URL (POSTed to); needed unless --file")
    _add_schedule_flags(create, with_file=True)
    _add_job_flags(
        create, payload_help="a JSON value given to each run, e.g. '{\"n\": 3}'",
        max_attempts_help="attempts of each run before it fails (default 4)",
    )
    create.add_argument("--request-key", dest="request_key", metavar="KEY",
                        help="makes the create safe to repeat: a second create with it answers the first job")
    _add_catchup_flags(create)
    create.set_defaults(flags=CREATE_FLAGS)
    one = {"get": "show a job", "resume": "resume a paused job", "delete": "delete a job and its waiting runs",
           "trigger": "make a run of a job due now, beside its schedule"}
    for name, help in one.items():
        _subparser(actions, name, help, f"tempo jobs {name} j_01J...").add_argument("id", help="the job's ID")
    graph = _subparser(actions, "graph", "the jobs a job runs after, and those that run after it",
                       "tempo jobs graph j_01J...", "tempo --json jobs graph j_01J... --depth 3")
    graph.add_argument("id", help="the job's ID")
    graph.add_argument("--depth", type=int, metavar="N",
                       help=f"steps up and down from the job (default 1, at most {limits.deps_graph_depth_max})")
    graph.set_defaults(flags={"query.depth": "--depth"})
    pause = _subparser(actions, "pause", "pause a job: no run falls due until it is resumed",
                       "tempo jobs pause j_01J...", "tempo jobs pause j_01J... --note 'upstream outage, INC-1234'")
    pause.add_argument("id", help="the job's ID")
    pause.add_argument("--note", metavar="TEXT",
                       help=f"why, shown with the job while it is paused (at most {limits.pause_note_chars_max} characters)")
    pause.set_defaults(flags={"note": "--note"})
    backfill = _subparser(
        actions, "backfill", "runs for a job's past slots in [--from, --until), each due at once",
        "tempo jobs backfill j_01J... --from 2026-11-01T00:00:00Z --until 2026-11-08T00:00:00Z",
    )
    backfill.add_argument("id", help="the job's ID")
    backfill.add_argument("--from", dest="since", required=True, metavar="TIME", help="the first instant, RFC 3339 with an offset")
    backfill.add_argument("--until", required=True, metavar="TIME", help="the end of the range, excluded; not in the future")
    backfill.add_argument("--overlap", help='"allow" (backfill runs are not held to the job\'s overlap policy)')
    backfill.set_defaults(flags=BACKFILL_FLAGS)
    _add_update_parser(actions)
    listing = _subparser(actions, "list", "the jobs, newest first", "tempo jobs list --limit 20",
                         "tempo jobs list --state paused --name-prefix nightly-",
                         "tempo jobs list --label team:payments --label env:prod", "tempo --json jobs list")
    listing.add_argument("--state", help="only jobs in this state: active, paused or completed")
    listing.add_argument("--target", help="only jobs with exactly this target")
    listing.add_argument("--name-prefix", dest="name_prefix", help="only jobs whose name starts with this")
    listing.add_argument("--label", dest="labels", action="append", type=_label_filter, metavar="KEY=VALUE",
                         help="only jobs with this label, e.g. team=payments (or team:payments); repeat: jobs "
                              "with all of them")
    runs = _subparser(actions, "runs", "a job's runs, newest first",
                      "tempo jobs runs j_01J... --since 2030-01-01T00:00:00Z")
    runs.add_argument("id", help="the job's ID")
    runs.add_argument("--since", help="runs due at or after this RFC 3339 time")
    runs.add_argument("--until", help="runs due before this RFC 3339 time")
    for parser in (listing, runs):
        parser.add_argument("--limit", type=int, metavar="N", help="at most N on a page (default 100)")
        parser.add_argument("--cursor", help="the page after this one (printed below a full page)")
        parser.set_defaults(flags=PAGE_FLAGS)
    for parser in (jobs, *actions.choices.values()):
        _global_flags(parser)


def event_columns(events: Sequence[dict[str, Any]]) -> Sequence[str]:
    """The events table's columns: with OWNER when the events name their
    owner (an admin token's feed holds every owner's)."""
    return OWNER_EVENT_COLUMNS if any("owner" in event for event in events) else EVENT_COLUMNS


def follow_line(row: dict[str, Any], columns: Sequence[str]) -> str:
    """One line of `tempo events --follow`: an event, or the header (a row
    of the column names in capitals), padded to `follow_widths` so that the lines stay in columns."""
    cells = [_cell(row, c) for c in columns]
    return "  ".join(v.ljust(follow_widths.get(c, 0)) for v, c in zip(cells, columns, strict=True)).rstrip()


def _events(args: argparse.Namespace, client: Client) -> int:
    cursor: str = args.after or "0"
    if not args.follow:
        page = client.request("GET", "/v1/events", params={"after": cursor, "limit": args.limit})
        if args.json:
            print(json.dumps(page, indent=2))
        else:
            print(table(page["events"], event_columns(page["events"])))
            if page["events"]:
                print(f"next page: --after {page['next_cursor']}")
        return EXIT_OK
    # The header comes with the first event: only then is it known whether
    # the feed names owners (an admin's) and needs the OWNER column.
    columns: Sequence[str] | None = None
    try:
        while True:
            page = client.request("GET", "/v1/events", params={"after": cursor, "limit": args.limit,
                                  "wait_s": events_wait_s}, timeout_s=events_wait_s + request_timeout_s)
            if page["events"] and columns is None and not args.json:
                columns = event_columns(page["events"])
                print(follow_line({c: c.upper() for c in columns}, columns), flush=True)
            for event in page["events"]:
                print(json.dumps(event) if columns is None else follow_line(event, columns), flush=True)
            cursor = page["next_cursor"]
    except KeyboardInterrupt:
        return EXIT_OK


def _add_events_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    events = _subparser(sub, "events", "the owner's events (run.failed, job.completed, ...; an admin token's: every owner's), oldest first",
                        "tempo events", "tempo events --follow", "tempo --json events --follow --after 1234")
    events.add_argument("--after", metavar="CURSOR", help="events after this cursor (default: from the oldest kept)")
    events.add_argument("--limit", type=int, metavar="N", help="at most N on a page (default 100)")
    events.add_argument("--follow", "-f", action="store_true",
                        help="keep printing events as they happen (long polls), one line each, until interrupted")
    events.set_defaults(flags=EVENT_FLAGS)
    _global_flags(events, "print the page as JSON; with --follow, one JSON object per line")


def _preview(args: argparse.Namespace, client: Client) -> int:
    body: dict[str, Any] = {"schedule": _schedule_body(args)}
    if args.after is not None:
        body["after"] = args.after
    if args.count is not None:
        body["count"] = args.count
    if args.include_excluded:
        body["include_excluded"] = True
    answer = client.request("POST", "/v1/schedules/preview", body)
    if args.json:
        print(json.dumps(answer, indent=2))
    elif "calendar" in body["schedule"]:  # where the calendar put each run, and why
        rows = [o | {"moved_from": (o["calendar"] or {}).get("moved_from"), "reason": (o["calendar"] or {}).get("reason")}
                for o in answer["occurrences"]]
        print(table(rows, (*PREVIEW_COLUMNS, "excluded", "moved_from", "reason")))
    else:
        print(table(answer["occurrences"], PREVIEW_COLUMNS))
    return EXIT_OK


def _add_preview_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    preview = _subparser(sub, "preview", "the next times of a schedule, in UTC and in its time zone",
                         "tempo preview --cron '0 3 * * *' --timezone Europe/Berlin --count 5",
                         "tempo preview --every-s 900 --after 2030-01-01T00:00:00Z")
    _add_schedule_flags(preview, with_file=False, with_deps=False)
    preview.add_argument("--after", help="times after this RFC 3339 time (default: now)")
    preview.add_argument("--count", type=int, metavar="N",
                         help=f"how many times (default {limits.preview_count_default}, at most {limits.preview_count_max})")
    preview.add_argument("--include-excluded", dest="include_excluded", action="store_true",
                         help="with --calendar: list the slots the calendar leaves out too, with why")
    preview.set_defaults(flags=PREVIEW_FLAGS)
    _global_flags(preview)


# -- jobs update ---------------------------------------------------------------


def _update(args: argparse.Namespace, client: Client) -> Any:
    """`tempo jobs update`: one merge patch, which the server merges into
    the job as it is when the patch arrives (so nothing is read first)."""
    return client.update_job(args.id, _update_body(args, lambda: dict(client.get_job(args.id)["schedule"])),
                             args.if_version)


def _update_body(args: argparse.Namespace, job_schedule: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The merge patch of `tempo jobs update`: the fields given; objects
    (`schedule`, `retry`, `catchup`, ...) merged key by key by the server
    (docs/api.md "Change a job")."""
    patch: dict[str, Any] = {}
    schedule = _schedule_patch(args, job_schedule)
    if schedule:
        patch["schedule"] = schedule
    catchup = _catchup_body(args)
    if catchup:
        patch["catchup"] = catchup
    _put_given(patch, args, ("name", "target", "lease_s", "jitter_s", "timeout_s", "overlap"))
    labels: dict[str, str | None] = dict.fromkeys(args.remove_labels or ())
    labels.update(args.labels or ())
    if labels:
        patch["labels"] = labels  # merged key by key: null removes one
    notify = _notify_body(args)
    if notify:
        patch["notify"] = notify  # merged: --notify-event alone keeps the URL
    patch |= _timeout_patch(args)
    if not patch:
        raise Usage("give at least one field to change")
    return patch


def _timeout_patch(args: argparse.Namespace) -> dict[str, Any]:
    """`--no-timeout`: the patch that removes the job's `timeout_s`."""
    if not args.no_timeout:
        return {}
    if args.timeout_s is not None:
        raise Usage("give --timeout-s or --no-timeout, not both")
    return {"timeout_s": None}


def _add_update_parser(actions: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    update = _subparser(
        actions, "update", "change a job in place: its ID, runs and history stay",
        "tempo jobs update j_01J... --cron '30 4 * * *' --timezone Europe/Berlin --if-version 1",
        "tempo jobs update j_01J... --timezone America/New_York --dst-repeat last",
        "tempo jobs update j_01J... --target queue:reports-v2 --max-attempts 2",
        "tempo jobs update j_01J... --label env=prod --remove-label tier",
        "tempo jobs update j_01J... --notify-url https://hooks.example.com/tempo --notify-event run.failed",
        "tempo jobs update j_01J... --max-runs 20 --end-at 2030-12-31T23:59:59Z",
        "tempo jobs update j_01J... --on finished --all",
        epilog="Each flag changes only its own field: --cron alone keeps the time zone and the DST policy, "
               "--timezone alone changes only the zone, and --at, --cron or --every-s replaces the schedule's "
               "kind (a cron's zone and DST policy go with it); --label adds or changes one label and keeps the "
               "others; the --catchup-* flags change only their key of the job's catch-up policy; --on, --any, --all, "
               "--within-s and --wait-s alone change only their key of the job's own after or requires edges.",
    )
    update.add_argument("id", help="the job's ID")
    update.add_argument("--target", help="queue:<name> or an http(s):// URL")
    _add_schedule_flags(update, with_file=False, removable=True)
    _add_job_flags(
        update, payload_help="a JSON value, replacing the payload",
        max_attempts_help="attempts of each run before it fails",
    )
    update.add_argument("--remove-label", dest="remove_labels", action="append", metavar="KEY",
                        help="remove the label KEY; repeat for more")
    update.add_argument("--no-timeout", dest="no_timeout", action="store_true",
                        help="remove the job's timeout_s: attempts are bounded by their lease only")
    _add_catchup_flags(update)
    update.add_argument("--if-version", dest="if_version", type=int, metavar="N",
                        help="change it only if it is at version N (else 412 version_mismatch)")
    update.set_defaults(flags=CREATE_FLAGS)


# -- runs commands -------------------------------------------------------------


def _runs(args: argparse.Namespace, client: Client) -> int:
    if args.action == "list":
        value = client.list_all_runs(
            status=args.status, since=args.since, until=args.until, limit=args.limit, cursor=args.cursor
        )
        _show(args, value, ALL_RUN_COLUMNS)
        return EXIT_OK
    run = client.cancel_run(args.id) if args.action == "cancel" else client.get_run(args.id)
    if args.json:
        print(json.dumps(run, indent=2))
        return EXIT_OK
    print(record(run_record(run)))
    print()
    print(table(run.get("attempts", []), ATTEMPT_COLUMNS))
    return EXIT_OK


# The fields only a `missed` row fills (docs/api.md "Runs"): `null` on a
# run, and left out of its record so that what the run did stands out.
MISSED_FIELDS = ("reason", "missed_from", "missed_until", "count")


def run_record(run: dict[str, Any]) -> dict[str, Any]:
    """The fields `tempo runs get` prints above the attempts table."""
    # A slot range's fields show on a `missed` row, and on a `skipped` one
    # its calendar left out (docs/api.md "Runs").
    ranged = run.get("status") == "missed" or run.get("reason") == "calendar"
    hidden = {"attempts", *(MISSED_FIELDS if not ranged else ())}
    shown = {k: v for k, v in run.items() if k not in hidden and not (k == "caused_by" and not v)}
    if shown.get("caused_by"):  # a dependent job's run: the parent ends that made it, one a line
        shown["caused_by"] = ", ".join(f"{c['run_id']} ({c['status']})" for c in shown["caused_by"])
    return shown


def _add_runs_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    runs = _subparser(sub, "runs", "look at runs across jobs", "tempo runs list --status failed", "tempo runs get r_01J...")
    actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")
    get = _subparser(actions, "get", "one run and each of its attempts", "tempo runs get r_01J...")
    get.add_argument("id", help="the run ID (r_...)")
    cancel = _subparser(
        actions, "cancel", "cancel a run: a waiting one at once; a claimed one is asked to stop",
        "tempo runs cancel r_01J...",
    )
    cancel.add_argument("id", help="the run ID (r_...)")
    listing = _subparser(actions, "list", "runs of every job, newest first", "tempo runs list --status failed",
                         "tempo runs list --since 2030-01-01T00:00:00Z --limit 20")
    listing.add_argument("--status", help="only runs in this status: waiting, claimed, done, failed, cancelled "
                                          "or skipped; missed: only the ranges of slots that got no run")
    listing.add_argument("--since", metavar="TIME", help="listed at or after this RFC 3339 time (a finished run: its end)")
    listing.add_argument("--until", metavar="TIME", help="listed before this RFC 3339 time")
    listing.add_argument("--limit", type=int, metavar="N", help="at most N on a page (1-1000, default 100)")
    listing.add_argument("--cursor", help="the page after this one (printed below a full page)")
    listing.set_defaults(flags=PAGE_FLAGS)
    for parser in (runs, get, cancel, listing):
        _global_flags(parser)


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


def cluster_status_waiting(
    client: Client, urls: Sequence[str], *, wait_s: float,
    monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, tuple[str, str]], int, str]:
    """`cluster_views` and `cluster_verdict`, asked again every
    `limits.cluster_status_poll_s` while the cluster is not healthy, up to
    `wait_s`: nodes started in the background a moment ago are not
    listening yet, then electing, and on a loaded machine two may elect
    before the third listens; the first answer would call them unreachable,
    leaderless or degraded when they are only starting (docs/operations.md
    "Checking the cluster")."""
    deadline_s = monotonic() + wait_s
    while True:
        answers, failures = cluster_views(client, urls)
        status, verdict = cluster_verdict(answers)
        left_s = deadline_s - monotonic()
        if status == STATUS_HEALTHY or left_s <= 0:
            return answers, failures, status, verdict
        sleep(min(limits.cluster_status_poll_s, left_s))


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
    if not 0 <= args.wait_s <= limits.cluster_status_wait_s_max:  # NaN too
        raise Usage(f"--wait-s: {args.wait_s:g} is not a number of seconds from 0 to {limits.cluster_status_wait_s_max}")
    answers, failures, status, verdict = cluster_status_waiting(
        client, urls_from(getattr(args, "url", None)), wait_s=args.wait_s
    )
    if status == STATUS_NO_LEADER and args.wait_s > 0:
        verdict += f" (asked for {args.wait_s:g} s, --wait-s)"
    if args.json:
        print(json.dumps([answer for _, answer in answers], indent=2))
    else:
        print(table(cluster_rows(answers, failures), CLUSTER_COLUMNS))
        for url, (_, why) in failures.items():
            print(f"{url}: {why}")
        print(verdict)
    return status


def _add_cluster_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cluster = _subparser(sub, "cluster", "look at the nodes of a cluster, add and remove them",
                         "tempo cluster status --url http://10.0.0.1:8700")
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = _subparser(
        actions, "status", "every node's view: role, term, leader, commit and applied index",
        "tempo cluster status --url http://10.0.0.1:8700,http://10.0.0.2:8700", epilog=CLUSTER_STATUS_EXITS,
    )
    status.add_argument("--wait-s", type=float, default=limits.cluster_status_wait_s_default, metavar="S",
                        help="while the cluster is not healthy (nodes still starting or electing), ask again for up to S "
                             f"seconds (default {limits.cluster_status_wait_s_default:g}; 0: ask once)")
    add = _subparser(actions, "add", "make a node started with `tempo serve --join` a voter",
                     "tempo cluster add n4 http://10.0.0.4:8700")
    add.add_argument("id", help="the new node's ID, as its --node")
    add.add_argument("node_url", metavar="URL", help="the URL the others reach it at, as in its --peers entry")
    remove = _subparser(actions, "remove", "remove a node (a dead one, before adding its replacement)",
                        "tempo cluster remove n3")
    remove.add_argument("id", help="the node's ID, as its --node")
    for parser in (cluster, status, add, remove):
        _global_flags(parser, "print the answers as JSON")


def _add_serve_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    serve = _subparser(sub, "serve", "run a tempo node", "tempo serve",
                       "tempo serve --data-dir /var/lib/tempo --listen 0.0.0.0:8700 --config tempo.toml",
                       "tempo serve --node n1 --peers n1=http://10.0.0.1:8700,n2=http://10.0.0.2:8700,n3=http://10.0.0.3:8700")
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

    if sys.flags.optimize:
        # apply's invariants are asserts (docs/operations.md "Running under
        # python -O"): -O would drop them, and a broken invariant would be
        # written to disk instead of stopping the node.
        print("tempo serve: refuses to run under python -O or PYTHONOPTIMIZE: apply's invariants are asserts, "
              "which -O removes", file=sys.stderr)
        return 2
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


def _ahead_ms(text: str) -> int:
    """`tempo worker --ahead-ms`: 0..`limits.claim_ahead_ms_max`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of ms: {text!r}") from None
    if not 0 <= value <= limits.claim_ahead_ms_max:
        raise argparse.ArgumentTypeError(f"0..{limits.claim_ahead_ms_max} ms, not {value}")
    return value


def _add_worker_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    worker = _subparser(sub, "worker", "run a command for each run claimed from queues",
                        "tempo worker --queue reports -- ./make-report.sh",
                        "tempo worker --queue mail --queue sms --concurrency 8 --log-format json -- python send.py")
    _connection_flags(worker)
    worker.add_argument("--queue", action="append", required=True, help="a queue to claim from (repeatable)")
    worker.add_argument("--concurrency", type=_int_from(1), default=1, metavar="N", help="runs at a time (default 1)")
    worker.add_argument("--ahead-ms", dest="ahead_ms", type=_ahead_ms, default=0, metavar="N",
                        help="pre-dispatch: claim runs due within N ms (0-10000), hold each (in a slot of "
                             "--concurrency) and start its command at its due time (default 0)")
    worker.add_argument("--worker-id", dest="worker_id", type=_worker_id, default=None,
                        help="its name in runs and logs (default: HOST-PID)")
    worker.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="log lines as text (default) or as one JSON object per line")
    worker.add_argument("--grace-s", dest="grace_s", type=_seconds, default=10.0, metavar="S",
                        help="how long a command told to stop (a cancel, its timeout, a lost lease) has between "
                             "SIGTERM and SIGKILL; and on SIGTERM/SIGINT, how long running commands may finish "
                             "(default 10)")
    worker.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND...: gets the payload as JSON on stdin")


def _worker(args: argparse.Namespace) -> int:
    import logging
    import socket

    import trio

    from tempo import worker
    from tempo.logs import JsonFormatter, TextFormatter

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        print("tempo worker: give the command after --", file=sys.stderr)
        return 2
    if len(set(args.queue)) > limits.queues_per_claim_max:
        print(f"tempo worker: --queue: at most {limits.queues_per_claim_max} queues", file=sys.stderr)
        return 2
    # tempo's own log lines on stderr, as `tempo serve` writes them; not the
    # libraries' (httpx logs every request at INFO).
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if args.log_format == "json" else TextFormatter())
    root = logging.getLogger("tempo")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"[:200]
    try:
        trio.run(lambda: worker.serve_command(
            urls_from(getattr(args, "url", None)), args.queue, argv, worker_id=worker_id, concurrency=args.concurrency,
            grace_s=args.grace_s, token=os.environ.get("TEMPO_TOKEN"), ca_file=ca_file_from(args),
            ahead_ms=args.ahead_ms,
        ))
    except worker.WorkerError as exc:
        print(f"tempo worker: {exc}", file=sys.stderr)
        return 2
    except TlsError as exc:
        print(f"tempo worker: --ca-file: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_loadgen_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    gen = _subparser(sub, "loadgen", "the spike: N one-off jobs due at one instant, W workers",
                     "tempo loadgen --spawn 1 --jobs 100000", "tempo loadgen --url http://127.0.0.1:8700 --jobs 10000 --workers 8")
    _connection_flags(gen)
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
                     help="with --spawn 3: SIGKILL the leader this long after the due instant (negative: before "
                          "it, at most half of --due-in-s), then restart it")
    gen.add_argument("--restart-after-s", dest="restart_after_s", type=float, default=3.0,
                     help="restart the killed leader this long after the SIGKILL (default 3)")
    gen.add_argument("--lease-s", dest="lease_s", type=int, default=None,
                     help="lease_s of each job (default: the server's; 10 with --kill-leader-at-s)")
    gen.add_argument("--work-dir", dest="work_dir", default=None,
                     help="with --spawn: keep the nodes' data dirs and logs here (default: a temp dir, removed)")
    gen.add_argument("--no-claim-keys", dest="claim_keys", action="store_false",
                     help="claim without claim keys, for a server from before them (bench/compare.py)")
    gen.add_argument("--ahead-ms", dest="ahead_ms", type=int, default=0, metavar="N",
                     help="pre-dispatch: workers claim runs due within N ms (0-10000), hold them and start each at "
                          "its due time; reports start lateness at the workers beside claim lateness (default 0)")
    gen.add_argument("--plain", action="store_true",
                     help="workers as the simplest client loop, over JSON: claim up to 1000 runs, report them, "
                          "then claim again (default: the worker library, which reports and claims at once)")


def _loadgen(args: argparse.Namespace) -> int:
    from tempo import loadgen
    from tempo.net.client import urls_from

    opts = loadgen.Options(
        urls=urls_from(getattr(args, "url", None)), jobs=args.jobs, rate=args.rate, duration_s=args.duration_s, due_in_s=args.due_in_s, workers=args.workers,
        batch=args.batch, jitter_s=args.jitter_s, timeout_s=args.timeout_s, report=args.report,
        no_report=args.no_report, progress=args.progress, spawn=args.spawn,
        kill_leader_at_s=args.kill_leader_at_s, restart_after_s=args.restart_after_s, lease_s=args.lease_s,
        work_dir=args.work_dir, ca_file=ca_file_from(args), claim_keys=args.claim_keys, ahead_ms=args.ahead_ms,
        plain=args.plain,
    )
    return loadgen.run(opts)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="tempo", description="tempo, a job scheduler", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_examples("tempo serve", "tempo jobs create --target queue:reports --cron '0 3 * * *' --timezone Europe/Berlin",
                         "tempo --json jobs list", "tempo worker --queue reports -- ./make-report.sh",
                         "tempo jobs create --help")
        + "\n\nflags --url, --ca-file and --json go before or after the command; the bearer token\n"
          "(when the server has tokens) comes from $TEMPO_TOKEN.\n\n" + EXIT_STATUSES,
    )
    top.add_argument("--version", action="version", version=_version(), help="print tempo's version")
    _global_flags(top)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve_parser(sub)
    _add_jobs_parser(sub)
    _add_runs_parser(sub)
    _add_events_parser(sub)
    _add_preview_parser(sub)
    cli_calendars.add_parser(sub, _subparser, _global_flags)
    _add_cluster_parser(sub)
    _add_worker_parser(sub)
    _add_loadgen_parser(sub)
    openapi = _subparser(sub, "openapi", "print the OpenAPI document of the HTTP API (no server needed)",
                         "tempo openapi > openapi.json", "tempo openapi --markdown > docs/reference.md")
    openapi.add_argument(
        "--markdown", action="store_true", help="print it as the API reference, docs/reference.md, instead of JSON"
    )
    return top


def _calendars(args: argparse.Namespace, client: Client) -> int:
    try:
        return cli_calendars.run(args, client, print, table)
    except cli_calendars.CalendarUsage as exc:
        raise Usage(str(exc)) from None


def _openapi(args: argparse.Namespace) -> int:
    from tempo.net import openapi, reference

    document = openapi.document()
    if args.markdown:
        sys.stdout.write(reference.render(document))
    else:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return 0


def _fail(line: str, code: int) -> int:
    """`line` on stderr; `code`, the exit status it goes with."""
    print(line, file=sys.stderr)
    return code


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
    top = parser()
    args = top.parse_args(argv)
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
        return _fail(f"tempo: --ca-file: {exc}", EXIT_USAGE)
    except ValueError as exc:
        return _fail(f"tempo: --url: {exc}", EXIT_USAGE)
    commands: dict[str, Callable[[argparse.Namespace, Client], int]] = {
        "cluster": _cluster, "jobs": _jobs, "runs": _runs, "events": _events, "preview": _preview,
        "calendars": _calendars,
    }
    try:
        with client:
            return commands[args.command](args, client)
    except (Usage, cli_deps.DepsUsage, cli_calendars.CalendarUsage) as exc:
        action = f" {args.action}" if getattr(args, "action", None) else ""
        return _fail(f"tempo {args.command}{action}: error: {exc}", EXIT_USAGE)
    except ApiError as exc:
        return _fail(f"tempo: {explain(exc, getattr(args, 'flags', {}))}{token_hint(exc.status)}", EXIT_REFUSED)
    except CertificateRefused as exc:
        return _fail(f"tempo: cannot reach the server: {exc}", EXIT_USAGE)
    except OutcomeUnknown as exc:
        return _fail(f"tempo: {exc}", EXIT_UNREACHABLE)
    except (Unavailable, httpx.HTTPError) as exc:
        return _fail(f"tempo: cannot reach the server: {exc}", EXIT_UNREACHABLE)


if __name__ == "__main__":
    sys.exit(main())
