"""The rule of pyproject.toml's [tool.mypy] that mypy cannot check itself:
every `# type: ignore` in src/tempo names the error it silences and says
why, on its own line."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[a-z0-9,\- ]+\])?(?P<rest>.*)$")
# After the codes, the reason: another comment of at least a few words' length.
_REASON = re.compile(r"^\s+#\s*\S.{8,}")


def _module_of(src: Path, path: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _not_yet_typed() -> set[str]:
    """The modules [tool.mypy] does not check yet ("being typed"): their
    ignores are looked at when they leave that list."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    overrides = config["tool"]["mypy"].get("overrides", [])
    skipped = [o["module"] for o in overrides if o.get("ignore_errors")]
    return {module for modules in skipped for module in ([modules] if isinstance(modules, str) else modules)}


def unexplained_ignores(src: Path, skip: set[str]) -> list[str]:
    """`path:line: text` of each ignore under `src` without codes and a reason."""
    found = []
    for path in sorted(src.rglob("*.py")):
        if _module_of(src, path) in skip:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = _IGNORE.search(line)
            if match and not (match["codes"] and _REASON.match(match["rest"])):
                found.append(f"{path.relative_to(src)}:{number}: {line.strip()}")
    return found


def test_every_type_ignore_names_its_error_and_says_why():
    found = unexplained_ignores(SRC, _not_yet_typed())
    assert not found, "a `# type: ignore[code]  # why` on each:\n" + "\n".join(found)


def test_the_check_finds_an_ignore_without_a_reason(tmp_path):
    package = tmp_path / "tempo"
    package.mkdir()
    (package / "a.py").write_text(
        "x = f()  # type: ignore\n"
        "y = f()  # type: ignore[attr-defined]\n"
        "z = f()  # type: ignore[attr-defined]  # lmdb has no stubs\n"
    )
    (package / "b.py").write_text("w = f()  # type: ignore[misc]\n")
    found = unexplained_ignores(tmp_path, {"tempo.b"})
    assert [f.split(":")[1] for f in found] == ["1", "2"]
