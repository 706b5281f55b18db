"""A `401` tells the user where the `tempo` command takes its token from
($TEMPO_TOKEN), whether it was not set or not known; `tempo --help` says it."""

from collections.abc import Iterator

import pytest

from conftest import Server, configured_server, tokens_config
from tempo import cli


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = tokens_config({"acme-client": ("acme", "client", None)})
    with configured_server(tmp_path_factory.mktemp("cli-token"), config) as srv:
        yield srv


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TEMPO_URL", "TEMPO_TOKEN", "TEMPO_CA_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_no_token_says_to_set_tempo_token(secured: Server, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["jobs", "list", "--url", secured.url]) == cli.EXIT_REFUSED
    err = capsys.readouterr().err
    assert err.startswith("tempo: 401 unauthorized") and "set $TEMPO_TOKEN" in err


def test_an_unknown_token_says_so(
    secured: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPO_TOKEN", "not-a-token")
    assert cli.main(["events", "--url", secured.url]) == cli.EXIT_REFUSED
    assert "the token in $TEMPO_TOKEN is not one the server knows" in capsys.readouterr().err
    monkeypatch.setenv("TEMPO_TOKEN", "acme-client")
    assert cli.main(["jobs", "get", "j_nope", "--url", secured.url]) == cli.EXIT_REFUSED
    assert "TEMPO_TOKEN" not in capsys.readouterr().err  # a 404 is not the token's fault


def test_help_names_tempo_token(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "$TEMPO_TOKEN" in capsys.readouterr().out
