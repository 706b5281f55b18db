"""The events table keeps a long detail (a target's whole error page) to one short cell."""

from tempo import cli


def test_a_long_event_detail_is_clipped_in_the_table() -> None:
    page = "HTTP 501: <!DOCTYPE HTML>\n<html>" + "x" * 500 + "</html>\n"
    row = {"cursor": 3, "at": "2030-01-01T00:00:00.000Z", "type": "run.failed", "job_id": "j_1",
           "run_id": "r_1", "detail": {"attempt": 1, "error": page}}
    lines = cli.table([row], cli.EVENT_COLUMNS).splitlines()
    assert len(lines) == 2
    detail = lines[1].split("  ")[-1].strip()
    assert detail.startswith('{"attempt":1,"error":"HTTP 501')
    assert detail.endswith("…") and len(detail) == cli.detail_chars_max


def test_a_short_event_detail_is_whole() -> None:
    row = {"cursor": 4, "at": "2030-01-01T00:00:00.000Z", "type": "job.completed", "job_id": "j_1",
           "run_id": "r_1", "detail": {"status": "failed"}}
    assert cli.table([row], cli.EVENT_COLUMNS).splitlines()[1].endswith('{"status":"failed"}')
