"""The test tiers: the markers are registered, and every test conftest.py marks ``slow`` by name still exists (a
renamed test would silently join the fast tier)."""

import ast
import os
import pathlib

import pytest
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


def _tomllib():
    """tomllib is Python 3.11's; on 3.10 (which requires-python allows) tomli reads the same, else the test skips."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib


def test_the_tier_markers_are_registered():
    tomllib = _tomllib()
    with open(os.path.join(os.path.dirname(HERE), "pyproject.toml"), "rb") as f:
        markers = tomllib.load(f)["tool"]["pytest"]["ini_options"]["markers"]
    assert {m.split(":")[0] for m in markers} >= {"slow", "vllm", "multiprocess"}


def test_no_module_imports_a_module_python_3_10_lacks_at_import_time():
    """requires-python allows 3.10: a module-level ``import tomllib`` (3.11) breaks collection or import there."""
    root = os.path.dirname(HERE)
    newer = {"tomllib"}
    found = []
    for folder in ("tests", "trl_entropy", "benchmarks", "examples"):
        for path in sorted(pathlib.Path(root, folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if not any(name in text for name in newer):
                continue
            tree = ast.parse(text)
            for node in tree.body:  # module level only: an import inside a function can fall back or skip
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                found += [f"{path.relative_to(root)}:{node.lineno}" for n in names if n.split(".")[0] in newer]
    assert not found, f"module-level imports of a module Python 3.10 lacks: {found}"


def test_the_hook_marks_slow_tests_and_deepspeed_ones_multiprocess():
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
