"""`apply` sends each command to its rule (engine/apply.py): every tag of
the command union has one, and an unknown command stops the node."""

import typing

import pytest

from tempo.engine import apply as apply_module
from tempo.engine.commands import Command
from tempo.engine.store import Store


def test_every_command_has_a_rule() -> None:
    assert set(apply_module.RULES) == set(typing.get_args(Command))


def test_an_unknown_command_is_a_programmer_error(store: Store) -> None:
    class Unknown:
        at_ms = 0

    with pytest.raises(AssertionError, match="unknown command Unknown"):
        store.apply_commands(1, [Unknown()])  # type: ignore[list-item]
    assert store.applied_index() == 0
