"""The console's ASGI app in process, over a single node's API without
its services (tests/net/asgi_calls.py): what it sends, message by
message, whatever server carries it (docs/ui.md "Pages")."""

import pytest
import trio

from net.asgi_calls import call, standalone_api
from tempo.ui.console import Console

PAGES = ("/ui/", "/ui/counts", "/ui/jobs", "/ui/runs", "/ui/events", "/ui/cluster", "/ui/jobs/j_nope",
         "/ui/login", "/ui/static/console.css", "/")


@pytest.fixture
def console(tmp_path):
    with standalone_api(tmp_path / "data") as api:
        yield Console(api, auth_enabled=False, key=b"k" * 32, tls=False)


async def test_head_sends_the_status_and_headers_of_get_and_no_body(console) -> None:
    for path in PAGES:
        got = await call(console, "GET", path)
        head = await call(console, "HEAD", path)
        assert head.status == got.status, path
        assert head.body == b"", (path, head.body[:200])
        for name in (b"content-type", b"content-security-policy", b"cache-control", b"location"):
            assert head.headers.get(name) == got.headers.get(name), (path, name)
        assert int(head.headers[b"content-length"]) > 0 or path == "/" or head.status == 303, path


async def test_head_of_the_live_stream_ends_at_once_without_events(console) -> None:
    with trio.fail_after(5):
        head = await call(console, "HEAD", "/ui/live")
    assert head.status == 200 and head.headers[b"content-type"] == b"text/event-stream"
    assert head.body == b""
