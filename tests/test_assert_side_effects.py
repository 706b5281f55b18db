"""`python -O` drops every `assert` statement, its expression included: an
assert whose expression changes state (`assert txn.delete(key)`) would do
its work only without -O. `tempo serve` refuses -O (docs/operations.md
"Running under python -O"), and this check keeps src/tempo free of such
asserts all the same, so that the code does one thing under either flag."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Methods that change their object (containers, LMDB transactions and
# cursors, channels, events, files): a call of one inside an assert is work
# that -O skips. Names that only read (get, count, index, ...) are not here.
_CHANGING = frozenset({
    "delete", "put", "putmulti", "replace", "pop", "popitem", "popleft", "append", "appendleft", "extend",
    "extendleft", "insert", "remove", "discard", "add", "update", "clear", "setdefault", "sort", "reverse",
    "send", "send_nowait", "set", "write", "drop", "rotate", "acquire", "release", "cancel", "close",
})


def asserts_with_side_effects(src: Path) -> list[str]:
    """`path:line: method` of each assert under `src` that calls a method
    that changes state."""
    found = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assert):
                continue
            found.extend(
                f"{path.relative_to(src)}:{node.lineno}: {inner.func.attr}"
                for inner in ast.walk(node)
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in _CHANGING
            )
    return sorted(found, key=lambda f: (f.split(":")[0], int(f.split(":")[1])))


def test_no_assert_in_src_changes_state():
    found = asserts_with_side_effects(SRC)
    assert not found, "a checked call instead of an assert (it vanishes under -O):\n" + "\n".join(found)


def test_the_check_finds_a_planted_assert(tmp_path):
    (tmp_path / "a.py").write_text(
        "assert txn.delete(key, db=runs)\n"
        "assert queue.get(1) is None\n"
        "assert len(items) == 3, items.pop()\n"
        "assert all(seen.add(x) is None for x in xs)\n"
        "assert key in rows\n"
    )
    found = asserts_with_side_effects(tmp_path)
    assert found == ["a.py:1: delete", "a.py:3: pop", "a.py:4: add"]


def test_a_checked_call_fails_the_same_under_python_optimize():
    import subprocess
    import sys

    code = "from tempo.engine.tables.layout import must; must(True, 'kept'); must(False, 'a row apply deletes is there')"
    for flags in ([], ["-O"]):
        done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "AssertionError: a row apply deletes is there" in done.stderr, done.stderr
