"""The LABELS and OWNER columns of `tempo jobs list` and the OWNER column of `tempo
events` and `tempo events --follow` (an admin token's feed holds every
owner's events): against a real `tempo serve`, in this process."""

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import Server, as_token, configured_server, job_body, tokens_config, unique
from tempo import cli
from tempo.net.client import Client

TOKENS = {
    "globex-client": ("globex", "client", None),
    "ops-admin": ("ops", "admin", None),
}


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TEMPO_URL", "TEMPO_TOKEN", "TEMPO_CA_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with configured_server(tmp_path_factory.mktemp("cli-columns"), tokens_config(TOKENS)) as srv:
        yield srv


def tempo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_jobs_list_shows_each_jobs_labels(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique("lab")
    url = ("--url", server.url)
    assert tempo(capsys, "jobs", "create", *url, "--target", "queue:cli", "--every-s", "60", "--name", name,
                 "--label", "team=ops", "--label", "env=prod")[0] == 0
    assert tempo(capsys, "jobs", "create", *url, "--target", "queue:cli", "--every-s", "60", "--name", name)[0] == 0
    code, out, err = tempo(capsys, "jobs", "list", *url, "--name-prefix", name)
    assert code == 0, err
    header, bare, labelled = out.splitlines()  # newest first
    assert header.split()[-1] == "LABELS"
    assert bare.split()[-1] == "-" and labelled.split()[-1] == "env=prod,team=ops"
    assert labelled.index("env=prod") == header.index("LABELS")


def test_a_long_label_list_is_cut_with_an_ellipsis() -> None:
    labels = {f"key{i:02}": "v" * 10 for i in range(20)}
    cell = cli.labels_text(labels)
    assert len(cell) == cli.labels_chars_max and cell.endswith("…")
    assert cell.startswith("key00=vvvvvvvvvv,key01=")
    short = {"b": "2", "a": "1"}
    assert cli.labels_text(short) == "a=1,b=2" and cli.labels_text({}) == "-"
    row = {"id": "j_1", "labels": labels}
    assert cli.table([row], ("id", "labels")).splitlines()[1].endswith("…")


def _globex_event(secured: Server) -> str:
    """A `job.updated` event of owner globex; its job's ID."""
    with as_token(secured, "globex-client") as globex:
        job = globex.post("/v1/jobs", json=job_body()).json()
        answer = globex.patch(f"/v1/jobs/{job['id']}", json={"name": unique("n")},
                              headers={"content-type": "application/merge-patch+json"})
        assert answer.status_code == 200, answer.text
    return str(job["id"])


def _cursor_before_last(secured: Server) -> str:
    with as_token(secured, "ops-admin") as admin:
        events = admin.get("/v1/events", params={"limit": 1000}).json()["events"]
    return "0" if len(events) < 2 else str(events[-2]["cursor"])


def test_events_shows_an_admin_the_owner_before_the_detail(
    secured: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _globex_event(secured)
    monkeypatch.setenv("TEMPO_TOKEN", "ops-admin")
    code, out, err = tempo(capsys, "events", "--url", secured.url, "--limit", "1000")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["CURSOR", "AT", "TYPE", "OWNER", "JOB_ID", "RUN_ID", "DETAIL"]
    line = next(row for row in rows if job_id in row)
    assert line.split()[3] == "globex" and line.index("globex") == header.index("OWNER")


def follow(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> list[str]:
    """The lines of `tempo events --follow ARGS` after its first page: the
    second long poll is interrupted as Ctrl-C would."""
    request = Client.request
    calls: list[int] = []

    def once(self: Client, *a: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return request(self, *a, **kw)

    monkeypatch.setattr(Client, "request", once)
    code, out, err = tempo(capsys, "events", "--follow", *args)
    assert code == 0, err
    return out.splitlines()


def test_events_follow_shows_an_admin_the_owner_in_columns(
    secured: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _globex_event(secured)
    after = _cursor_before_last(secured)
    monkeypatch.setenv("TEMPO_TOKEN", "ops-admin")
    header, *rows = follow(capsys, monkeypatch, "--url", secured.url, "--after", after)
    assert header.split() == ["CURSOR", "AT", "TYPE", "OWNER", "JOB_ID", "RUN_ID", "DETAIL"]
    line = next(row for row in rows if job_id in row)
    for column, value in (("OWNER", "globex"), ("JOB_ID", job_id), ("DETAIL", "{")):
        assert line.index(value) == header.index(column), (column, line)


def test_events_follow_shows_a_client_no_owner(
    secured: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _globex_event(secured)
    monkeypatch.setenv("TEMPO_TOKEN", "globex-client")
    header, *rows = follow(capsys, monkeypatch, "--url", secured.url)
    assert header.split() == ["CURSOR", "AT", "TYPE", "JOB_ID", "RUN_ID", "DETAIL"]
    line = next(row for row in rows if job_id in row)
    assert line.index(job_id) == header.index("JOB_ID")


def test_events_follow_prints_no_header_before_an_event(
    server: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with as_token(server, None) as http:
        cursor = "0"
        while page := http.get("/v1/events", params={"after": cursor, "limit": 1000}).json()["events"]:
            cursor = str(page[-1]["cursor"])
    request = Client.request

    def empty_then_stop(self: Client, *a: Any, **kw: Any) -> Any:
        if kw.get("params", {}).get("after") != cursor:
            raise KeyboardInterrupt
        answer = request(self, *a, **{**kw, "params": {**kw["params"], "wait_s": None}})
        assert answer["events"] == []
        return {**answer, "next_cursor": "stop"}

    monkeypatch.setattr(Client, "request", empty_then_stop)
    assert tempo(capsys, "events", "--follow", "--url", server.url, "--after", cursor) == (0, "", "")


def test_jobs_list_shows_an_admin_the_owner_of_each_job(
    secured: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("own")
    with as_token(secured, "globex-client") as globex:
        assert globex.post("/v1/jobs", json=job_body(name=name)).status_code == 201
    monkeypatch.setenv("TEMPO_TOKEN", "ops-admin")
    assert tempo(capsys, "jobs", "create", "--url", secured.url, "--target", "queue:cli", "--every-s", "60",
                 "--name", name)[0] == 0
    code, out, err = tempo(capsys, "jobs", "list", "--url", secured.url, "--name-prefix", name)
    assert code == 0, err
    header, ops, globex_row = out.splitlines()  # newest first
    assert header.split()[:3] == ["ID", "NAME", "OWNER"]
    assert ops.split()[2] == "ops" and globex_row.split()[2] == "globex"
    # A client's listing is its own owner's: no OWNER column.
    monkeypatch.setenv("TEMPO_TOKEN", "globex-client")
    code, out, err = tempo(capsys, "jobs", "list", "--url", secured.url, "--name-prefix", name)
    assert code == 0 and "OWNER" not in out.splitlines()[0], err


MISSED = {"id": "r_1", "job_id": "j_1", "status": "missed", "attempt": 0, "nominal_at": "2027-01-01T00:00:00.000Z",
          "due_at": "2027-01-01T00:00:00.000Z", "reason": "paused", "missed_from": "2027-01-01T00:00:00.000Z",
          "missed_until": "2027-01-01T01:00:00.000Z", "count": 60, "backfill": False}
SKIPPED = {"id": "r_2", "job_id": "j_1", "status": "skipped", "attempt": 0, "nominal_at": "2027-01-01T02:00:00.000Z",
           "due_at": "2027-01-01T02:00:00.000Z", "reason": "overlap", "backfill": False}
BACKFILLED = {"id": "r_3", "job_id": "j_1", "status": "waiting", "attempt": 0, "nominal_at": "2026-12-01T00:00:00.000Z",
              "due_at": "2027-01-01T03:00:00.000Z", "reason": None, "backfill": True}
PLAIN = {"id": "r_4", "job_id": "j_1", "status": "done", "attempt": 1, "nominal_at": "2027-01-01T04:00:00.000Z",
         "due_at": "2027-01-01T04:00:00.000Z", "reason": None, "backfill": False}


@pytest.mark.parametrize("columns", [cli.RUN_COLUMNS, cli.ALL_RUN_COLUMNS])
def test_the_runs_table_shows_reason_range_and_backfill(columns: tuple[str, ...]) -> None:
    header, missed, skipped, backfilled, plain = cli.table(
        [MISSED, SKIPPED, BACKFILLED, PLAIN], cli.run_columns([MISSED, SKIPPED, BACKFILLED, PLAIN], columns)
    ).splitlines()
    assert "REASON" in header and "RANGE" in header and header.split()[-1] == "ERROR"
    at = header.index("REASON"), header.index("RANGE")
    assert missed[at[0]:].startswith("paused ") and missed[at[1]:].startswith(
        "2027-01-01T00:00:00.000Z..2027-01-01T01:00:00.000Z (60 slots)")
    assert skipped[at[0]:].startswith("overlap ") and skipped[at[1]:].startswith("- ")
    assert backfilled[at[0]:].startswith("backfill ")
    assert plain[at[0]:].startswith("- ")
    uncounted = dict(MISSED, count=None)
    assert "(too many to count)" in cli.table([uncounted], cli.run_columns([uncounted], columns))


@pytest.mark.parametrize("columns", [cli.RUN_COLUMNS, cli.ALL_RUN_COLUMNS])
def test_plain_runs_keep_the_table_narrow(columns: tuple[str, ...]) -> None:
    assert cli.run_columns([PLAIN], columns) == columns
    assert cli.run_columns([], columns) == columns


def test_jobs_runs_marks_backfilled_runs(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    url = ("--url", server.url)
    code, out, err = tempo(capsys, "jobs", "create", *url, "--target", f"queue:{unique('bf')}", "--cron", "0 0 * * *",
                           "--json")
    assert code == 0, err
    job_id = __import__("json").loads(out)["id"]
    code, out, err = tempo(capsys, "jobs", "backfill", *url, job_id, "--from", "2026-01-01T00:00:00Z",
                           "--until", "2026-01-03T00:00:00Z")
    assert code == 0, err
    code, out, err = tempo(capsys, "jobs", "runs", *url, job_id)
    assert code == 0, err
    header, *rows = out.splitlines()
    assert "REASON" in header, out
    marked = [row for row in rows if row[header.index("REASON"):].startswith("backfill")]
    assert len(marked) == 2, out
