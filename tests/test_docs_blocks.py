"""The Python blocks of the documentation pages and the README, read as a user copies them
into a session, page by page in order: each parses, and none uses a library's name (one of
bayesord's public names, a module alias such as ``np``, a scikit-learn function) that no
block of the page before it, or the block itself, imports or defines.

Names of data (``X``, ``y``, ``wine``) are left to the prose that introduces them; a name
of the library is not: a reader who pastes the block gets a ``NameError``.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

import bayesord

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _library_names():
    import sklearn.metrics
    import sklearn.model_selection
    import sklearn.pipeline
    import sklearn.preprocessing

    names = set(bayesord.__all__) | {"np", "pd", "jax", "jnp", "plt", "az", "sp", "scipy", "sklearn", "lax"}
    for module in (sklearn.model_selection, sklearn.metrics, sklearn.pipeline, sklearn.preprocessing):
        names |= set(module.__all__)
    return names


def _bound(tree) -> set[str]:
    """Every name an assignment, import, definition, loop, ``with``, ``except`` or argument
    list of ``tree`` binds."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


def _unimported(page: Path, library: set[str]) -> list[str]:
    problems, known = [], set(dir(builtins))
    for i, block in enumerate(_BLOCK.findall(page.read_text())):
        try:
            tree = ast.parse(block)
        except SyntaxError as err:
            problems.append(f"block {i + 1}: not valid Python ({err.msg}, line {err.lineno})")
            continue
        known |= _bound(tree)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        missing = sorted((used - known) & library)
        if missing:
            problems.append(f"block {i + 1} uses {', '.join(missing)} without importing it")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_a_docs_block_imports_every_library_name_it_uses(page):
    assert _unimported(page, _library_names()) == []


def test_the_check_finds_a_missing_import_and_ignores_data_names(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nfrom bayesord import ISBOR\nISBOR().fit(X, y)\n```\n\n"
                    "```python\nmodel = OrdinalProbit().fit(np.asarray(X), y)\n```\n")
    assert _unimported(page, _library_names()) == ["block 2 uses OrdinalProbit, np without importing it"]
