"""`tempo.engine`'s public face (engine/__init__.py): what it names is there."""

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
