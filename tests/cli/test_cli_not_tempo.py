"""The CLI pointed at a URL where something other than tempo answers."""

from conftest import Arrival, endpoint

from .test_cli import tempo


def html_page(arrival: Arrival) -> tuple[int, bytes]:
    return 404, b"<!DOCTYPE html>\n<html>\n<body>\n<h1>Not Found</h1>\n" + b"<p>filler</p>\n" * 200 + b"</body></html>\n"


def test_a_web_server_at_the_url_is_named_in_one_line_not_printed():
    with endpoint(html_page) as web:
        done = tempo("jobs", "list", url=web.url, check=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "404" in lines[0] and "not a tempo" in lines[0], lines[0]
    assert "<html>" not in done.stderr
