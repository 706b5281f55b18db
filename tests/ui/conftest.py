"""The console tests' server: one `tempo serve` without tokens per module."""

import pytest

from conftest import Server


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("ui-open") / "data")
    try:
        yield srv.start()
    finally:
        srv.cleanup()
