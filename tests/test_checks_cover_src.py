"""mypy --strict and ruff's rules hold for every module of src/tempo: no
module is left out of the type check, and no source file is let off a rule."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def mypy_skipped(config: dict) -> list[str]:
    """The modules a [[tool.mypy.overrides]] entry lets off their errors."""
    skipped = []
    for override in config["tool"]["mypy"].get("overrides", []):
        if override.get("ignore_errors"):
            modules = override["module"]
            skipped += [modules] if isinstance(modules, str) else modules
    return skipped


def ruff_let_off(config: dict) -> dict[str, list[str]]:
    """The per-file ruff ignores that reach source files."""
    per_file = config["tool"]["ruff"]["lint"].get("per-file-ignores", {})
    return {pattern: codes for pattern, codes in per_file.items() if pattern.startswith(("src/", "**", "*"))}


def test_mypy_checks_every_module():
    config = _config()
    assert config["tool"]["mypy"]["strict"] is True
    assert config["tool"]["mypy"]["files"] == ["src/tempo"]
    assert mypy_skipped(config) == []


def test_ruff_lets_no_source_file_off_a_rule():
    assert ruff_let_off(_config()) == {}


def test_the_checks_see_a_module_left_out():
    config = tomllib.loads(
        '[tool.mypy]\nstrict = true\n[[tool.mypy.overrides]]\nmodule = ["tempo.a", "tempo.b"]\nignore_errors = true\n'
        '[tool.ruff.lint.per-file-ignores]\n"tests/**" = ["ASYNC210"]\n"src/tempo/a.py" = ["C901"]\n'
    )
    assert mypy_skipped(config) == ["tempo.a", "tempo.b"]
    assert ruff_let_off(config) == {"src/tempo/a.py": ["C901"]}
