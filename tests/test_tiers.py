"""The test tiers: the markers are registered, and every test conftest.py marks ``slow`` by name still exists (a
renamed test would silently join the fast tier)."""

import ast
import os
import pathlib
import tomllib

from conftest import SLOW_TESTS

HERE = os.path.dirname(os.path.abspath(__file__))


def _test_functions(filename: str) -> set[str]:
    with open(os.path.join(HERE, filename), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test_")}


def test_every_slow_test_named_exists():
    missing = {f: sorted(names - _test_functions(f)) for f, names in SLOW_TESTS.items()
               if not os.path.exists(os.path.join(HERE, f)) or names - _test_functions(f)}
    assert missing == {}


def test_the_tier_markers_are_registered():
    with open(os.path.join(os.path.dirname(HERE), "pyproject.toml"), "rb") as f:
        markers = tomllib.load(f)["tool"]["pytest"]["ini_options"]["markers"]
    assert {m.split(":")[0] for m in markers} >= {"slow", "vllm", "multiprocess"}


def test_the_hook_marks_slow_tests_and_deepspeed_ones_multiprocess():
    import pytest
    from conftest import pytest_collection_modifyitems

    class Item:
        def __init__(self, path, name, markers=()):
            self.path, self.originalname, self.name, self.markers = pathlib.Path(path), name, name, list(markers)

        def add_marker(self, mark):
            self.markers.append(mark.name)

        def get_closest_marker(self, name):
            return name if name in self.markers else None

    file, name = next((f, sorted(names)[0]) for f, names in sorted(SLOW_TESTS.items()))
    slow, fast, ds = Item(f"tests/{file}", name), Item("tests/test_tiers.py", "test_x"), \
        Item("tests/test_deepspeed.py", "test_y", [pytest.mark.deepspeed.name])
    pytest_collection_modifyitems(None, [slow, fast, ds])
    assert slow.markers == ["slow"] and fast.markers == [] and ds.markers == ["deepspeed", "multiprocess"]
