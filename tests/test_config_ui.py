"""The config file's `[ui]` table (docs/ui.md "Turning it off")."""

import pytest

from tempo.config import ConfigError, UiConfig, parse


def test_the_console_is_on_without_a_ui_table():
    assert parse("").ui == UiConfig(enabled=True)


def test_enabled_is_read():
    assert parse("[ui]\nenabled = false\n").ui.enabled is False
    assert parse("[ui]\nenabled = true\n").ui.enabled is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ui = 3", "ui: a table"),
        ("[ui]\nenable = false", "ui: unknown keys ['enable']"),
        ('[ui]\nenabled = "no"', "ui.enabled: true or false"),
        ("[ui]\nenabled = 0", "ui.enabled: true or false"),
    ],
)
def test_bad_ui_settings_name_the_key(text: str, message: str):
    with pytest.raises(ConfigError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        parse(text)
