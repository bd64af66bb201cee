"""The package's layers (docs/architecture.md), checked by reading every module's imports.

Imports point down only: core <- models <- tools <- estimators <- command line.  Modules of
one layer may import each other, without a cycle.  No module imports a ``bayesord`` module
inside a function, except the command line, which defers its imports so that
``bayesord --help`` answers without starting JAX, and ``datasets``, whose generator alone
needs the (JAX) link module, so that the command line reads a CSV and reports its errors
without starting JAX either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bayesord"

LAYERS = {
    "core": {"_links", "_likelihood", "_linalg", "_loops", "_status", "_validation", "_progress",
             "_shapes", "_sparse", "_columns", "_basis", "_thresholds", "_compile_cache", "_splits",
             "_results", "_registry", "_effects", "_mesh", "_precision"},
    "models": {"_laplace", "_probit", "_isbor", "_mixed", "_clm", "_npsvor", "_perceptron", "_rankpairs",
               "_redsvm", "_tor"},
    "tools": {"datasets", "metrics", "calibration", "uncertainty", "diagnostics", "io"},
    "estimators": {"estimators"},
    "interface": {"cli", "_bench", "distributed", "__init__"},
}
ORDER = list(LAYERS)
LOCAL_IMPORTS_ALLOWED = {"bayesord.cli", "bayesord.datasets"}


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    top = "__init__" if len(parts) == 1 else parts[1]
    for name, members in LAYERS.items():
        if top in members:
            return name
    raise AssertionError(f"{module} is in no layer: add it to LAYERS here and to docs/architecture.md")


def _imports(path: Path, root: Path = PACKAGE):
    """(imported bayesord module, line, inside a function?) for every import in ``path``."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function.update(id(child) for child in ast.walk(node) if child is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("bayesord"):
                continue
            # ``from . import x`` imports the submodule x when x is one.
            sub = [root.parent / f"{target}.{a.name}".replace(".", "/") for a in node.names]
            names = [f"{target}.{a.name}" for a, p in zip(node.names, sub)
                     if p.with_suffix(".py").exists() or p.is_dir()]
            for name in names or [target]:
                found.append((name, node.lineno, id(node) in in_function))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("bayesord"):
                    found.append((alias.name, node.lineno, id(node) in in_function))
    return module, found


MODULES = sorted(PACKAGE.rglob("*.py"))
GRAPH = dict(_imports(path) for path in MODULES)


def test_every_module_has_a_layer():
    for module in GRAPH:
        _layer(module)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down_and_stay_at_module_level(module):
    for target, line, local in GRAPH[module]:
        if target == module:
            continue
        below = ORDER.index(_layer(target)) <= ORDER.index(_layer(module))
        assert below, f"{module}:{line} imports {target}, a layer above it ({_layer(target)})"
        if module not in LOCAL_IMPORTS_ALLOWED:
            assert not local, f"{module}:{line} imports {target} inside a function"


def test_no_import_cycle():
    modules = set(GRAPH)

    def resolve(name):
        # ``bayesord.estimators._base`` -> itself; a package -> its __init__ module name.
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    edges = {m: {resolve(t) for t, _, local in GRAPH[m] if not local} - {m} for m in modules}
    # A package's __init__ importing its own submodules is the package, not a cycle.
    for m in modules:
        edges[m] = {t for t in edges[m] if not t.startswith(m + ".")}
    state = {}

    def visit(m, path):
        state[m] = "open"
        for t in edges[m]:
            if state.get(t) == "open":
                cycle = path[path.index(t):] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t, path + [t])
        state[m] = "done"

    for m in sorted(modules):
        if m not in state:
            visit(m, [m])


def test_the_checker_sees_a_violation(tmp_path):
    """The checks above can fail: a core module importing an estimator inside a function
    is found, with its layer above the module's."""
    fake = tmp_path / "bayesord"
    fake.mkdir()
    (fake / "_links.py").write_text("import numpy\n\n\ndef f():\n    from .estimators import OrdinalProbit\n")
    module, found = _imports(fake / "_links.py", root=fake)
    assert module == "bayesord._links"
    assert found == [("bayesord.estimators", 5, True)]
    assert ORDER.index(_layer("bayesord.estimators")) > ORDER.index(_layer(module))


def test_the_registry_lists_every_estimator_once():
    """``bayesord._registry.ESTIMATORS`` is the one list: every public estimator class is in
    it, the command line offers its commands, and ``load_model`` reads every format."""
    import bayesord.estimators as est
    from bayesord import cli
    from bayesord._registry import COMMANDS, ESTIMATORS
    from bayesord.estimators._base import OrdinalEstimator

    names = [entry.name for entry in ESTIMATORS]
    assert len(set(names)) == len(names)
    public = {name for name in est.__all__ if isinstance(getattr(est, name), type)
              and issubclass(getattr(est, name), OrdinalEstimator)}
    assert public == set(names)
    fit = cli._parser()._subparsers._group_actions[0].choices["fit"]
    model = next(a for a in fit._actions if a.dest == "model")
    assert list(model.choices) == list(COMMANDS)
    formats = {getattr(est, name)._format for name in names}
    assert len(formats) == len(names) and all(formats)
