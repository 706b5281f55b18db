"""`tempo.engine`'s public face (engine/__init__.py): what it names is there."""

import ast
import subprocess
import sys
from pathlib import Path

import tempo.engine as engine


def test_every_public_name_resolves_once():
    assert len(engine.__all__) == len(set(engine.__all__))
    missing = [name for name in engine.__all__ if not hasattr(engine, name)]
    assert missing == []


def test_a_star_import_gives_exactly_the_public_names():
    namespace: dict[str, object] = {}
    exec("from tempo.engine import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(engine.__all__)


def test_the_face_hands_out_the_modules_own_objects():
    from tempo.engine import store  # a test may reach into the modules

    assert engine.Store is store.Store


def test_the_engines_modules_do_not_import_from_the_face():
    # `from tempo.engine import Store` inside the engine would run while the
    # face is half built: an import cycle that breaks or not by the order of
    # engine/__init__.py. A module by its name (`from tempo.engine import
    # keys`) is fine.
    package = Path(engine.__file__).parent
    modules = {path.stem for path in package.glob("*.py")} | {p.name for p in package.iterdir() if p.is_dir()}
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "tempo.engine":
                found += [f"{path.name}: {alias.name}" for alias in node.names if alias.name not in modules]
    assert found == []


def test_importing_the_pure_planner_loads_neither_trio_nor_lmdb():
    # The face is lazy (PEP 562): `import tempo.engine.plan` runs the
    # package's `__init__` first, which must not load the engine's I/O.
    code = "import sys, tempo.engine.plan; print(sorted(m for m in ('trio', 'lmdb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_lazy_table_names_what_mypy_is_told():
    # `_WHERE` (read at run time) and the imports under TYPE_CHECKING (read
    # by mypy) must say the same module and name for each public name.
    tree = ast.parse(Path(engine.__file__).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If))
    told = {
        alias.asname or alias.name: (node.module, alias.name)
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert told == engine._WHERE
    assert set(told) == set(engine.__all__)
