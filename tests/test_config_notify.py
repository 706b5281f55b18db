"""The `[notify]` config table (docs/operations.md "Notifications"): what it
holds, and a clear error naming the key for each mistake."""

from pathlib import Path

import pytest
import trustme

from tempo.config import ConfigError, NotifyTarget, parse

SECRET = "x" * 32


def test_a_notify_table_with_owner_defaults(tmp_path: Path) -> None:
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    config = parse(
        f'[notify]\nsecret = "{SECRET}"\nca_file = "ca.pem"\n'
        '[[notify.owners]]\nname = "acme"\nurl = "https://h.example/t"\nevents = ["job.recovered", "run.failed"]\n'
        '[[notify.owners]]\nname = "beta"\nurl = "http://10.0.0.1:9000/hook"\n',
        base_dir=str(tmp_path),
    )
    assert config.notify is not None
    assert config.notify.secret == SECRET and config.notify.ca_file == str(tmp_path / "ca.pem")
    assert config.notify.owners == {
        "acme": NotifyTarget("https://h.example/t", ("job.recovered", "run.failed")),
        "beta": NotifyTarget("http://10.0.0.1:9000/hook", ("run.failed", "job.completed", "job.recovered")),
    }


def test_no_notify_table_is_no_notifications() -> None:
    assert parse("").notify is None


@pytest.mark.parametrize(("body", "message"), [
    ("[notify]\n", "notify.secret: a string of at least 32"),
    ('[notify]\nsecret = "short"\n', "notify.secret: a string of at least 32"),
    (f'[notify]\nsecret = "{SECRET}"\ncolour = 1\n', "notify: unknown keys ['colour']"),
    (f'[notify]\nsecret = "{SECRET}"\nca_file = "missing.pem"\n', "notify.ca_file: no PEM certificate"),
    (f'[notify]\nsecret = "{SECRET}"\n[[notify.owners]]\nname = "a"\nurl = "ftp://x"\n', "notify.owners[0].url"),
    (f'[notify]\nsecret = "{SECRET}"\n[[notify.owners]]\nname = "a"\nurl = "https://x"\nevents = ["x"]\n',
     "notify.owners[0].events"),
    (f'[notify]\nsecret = "{SECRET}"\n[[notify.owners]]\nname = "a"\nurl = "https://x"\nevents = []\n',
     "notify.owners[0].events"),
    (f'[notify]\nsecret = "{SECRET}"\n[[notify.owners]]\nurl = "https://x"\n', "notify.owners[0].name"),
    (f'[notify]\nsecret = "{SECRET}"\n[[notify.owners]]\nname = "a"\nurl = "https://x"\nhue = 1\n',
     "notify.owners[0]: unknown keys ['hue']"),
    (f'[notify]\nsecret = "{SECRET}"\n' + '[[notify.owners]]\nname = "a"\nurl = "https://x"\n' * 2,
     "notify.owners[1].name: 'a' is listed twice"),
    ('notify = 3\n', "notify: a table"),
])
def test_mistakes_name_the_key(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as raised:
        parse(body, base_dir=str(tmp_path))
    assert message in str(raised.value)
