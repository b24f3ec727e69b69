"""The package's own import graph, drawn from its source (ast, every import statement, those inside functions too):
no circles, nothing imports the package's root, and the lower layers (schedules and controllers, losses, the leaves)
import nothing from the layers above them. And the facts there is one of: one list of loss types, one Hub-id check,
one version."""

import ast
import importlib.metadata
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "trl_entropy")
PACKAGE = "trl_entropy"
# Top-level parts of the package that sit below the controls, the config, the trainer and the model card: they may
# import one another, never anything above.
LOWER = {"scheduling", "losses", "metrics", "answer_diversity", "_trl_private", "_paths", "_imports", "citations",
         "_version", "urls"}


def _module_name(path: str, root: str = ROOT) -> str:
    name = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _modules(root: str = ROOT) -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                out[_module_name(os.path.join(folder, f), root)] = os.path.join(folder, f)
    return out


def _targets(module: str, is_package: bool, node, modules, package: str = PACKAGE) -> list[str]:
    """The package's modules an import statement loads (``from .x import y`` names ``x.y`` where that is a module)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if a.name.split(".")[0] == package]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        if source.split(".")[0] != package:
            return []
        names = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
    out = []
    for name in names:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def import_graph(root: str = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """The import edges between the modules of ``package`` (the folder ``root``)."""
    modules = _modules(root)
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module].update(t for t in _targets(module, path.endswith("__init__.py"), node, modules, package)
                                     if t != module)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports as a list of modules (first repeated at the end), or None. Importing a submodule runs
    its parent packages' ``__init__`` first, but that is not an edge: a package importing its own submodules is how
    packages are built, so only the edges written in the source count."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_finder_sees_a_circle_and_a_lazy_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    graph = import_graph()
    # model_card imports the schedules' parser inside a function: still an edge
    assert "trl_entropy.scheduling.schedules" in graph["trl_entropy.model_card"]
    assert "trl_entropy.controls" in graph["trl_entropy.trainers.grpo_entropy_config"]


def test_the_package_has_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_benchmarks_have_no_import_circle():
    """payoff.py and payoff_smollm2.py once imported each other; what both need lives in benchmarks/_cache.py."""
    graph = import_graph(os.path.join(os.path.dirname(ROOT), "benchmarks"), "benchmarks")
    assert "benchmarks.payoff" in graph["benchmarks.payoff_smollm2"]
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_nothing_imports_the_package_root():
    """The root (``trl_entropy/__init__.py``) re-exports the public names; a module that imports it runs back up
    to the top of the package."""
    graph = import_graph()
    assert [m for m, targets in graph.items() if PACKAGE in targets and m != PACKAGE] == []


def test_the_lower_layers_import_nothing_above_them():
    graph = import_graph()
    up = {m: sorted(t for t in targets if t.split(".")[1] not in LOWER)
          for m, targets in graph.items() if m != PACKAGE and m.split(".")[1] in LOWER}
    assert {m: t for m, t in up.items() if t} == {}


@pytest.mark.parametrize("leaf", ["trl_entropy.citations", "trl_entropy._version", "trl_entropy._paths",
                                  "trl_entropy._imports"])
def test_the_leaves_import_nothing_of_the_package(leaf):
    assert import_graph()[leaf] == set()


def test_one_list_of_loss_types():
    """TRL's loss types are listed once, in losses/policy_loss.py (the ones its loss path implements, and the rest);
    anywhere else in the package a tuple, list or set literal that names two or more of them is another copy."""
    from trl_entropy.losses.policy_loss import SUPPORTED_LOSS_TYPES, UNSUPPORTED_TRL_LOSS_TYPES

    names = set(SUPPORTED_LOSS_TYPES) | set(UNSUPPORTED_TRL_LOSS_TYPES)
    copies = []
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        lists = {id(n.value) for n in ast.walk(tree) if module == "trl_entropy.losses.policy_loss"
                 and isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets]
                 in (["SUPPORTED_LOSS_TYPES"], ["UNSUPPORTED_TRL_LOSS_TYPES"])}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in lists:
                named = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
                if len(named) >= 2:
                    copies.append(f"{module}:{node.lineno} {sorted(named)}")
    assert not copies, f"lists of loss types besides policy_loss.py's: {copies}"


def test_one_hub_id_check_one_version():
    from trl_entropy import __version__, model_card
    from trl_entropy._paths import is_hub_model_id

    assert model_card.is_hub_model_id is is_hub_model_id
    assert __version__ == importlib.metadata.version("trl-entropy")
    for name, ok in (("owner/name", True), ("gpt2", True), ("a--b/c", False), ("./x", False), ("a/b/c", False),
                     ("-x", False), ("x" * 97, False), (None, False)):
        assert is_hub_model_id(name) is ok, name


@pytest.mark.parametrize("path,most", [("trainers/grpo_entropy_trainer.py", 600),
                                       ("trainers/grpo_entropy_config.py", 800), ("scheduling/controllers.py", 600)])
def test_the_wiring_stays_thin(path, most):
    """Issue 51's sizes: the trainer is wiring (the math in losses/ and scheduling/), the config composes the
    controls' settings groups, the controllers are the feedback laws in use. A file past its size says that code
    went into the wrong place."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    assert lines <= most, f"trl_entropy/{path} has {lines} lines (at most {most}): move what is not wiring out of it"


def test_the_bonus_keeps_at_most_16_settings():
    import dataclasses

    from trl_entropy.controls.entropy_bonus import EntropyBonusSettings

    assert len([f for f in dataclasses.fields(EntropyBonusSettings) if f.init]) <= 16
