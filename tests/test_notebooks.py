"""Execute the notebooks headless; any cell that raises fails the test.

Marked slow (each notebook fits models); CI runs them with ``python -m pytest -m slow``.
The kernel starts in the repository root, so it imports this checkout's ``bayesord``
and finds ``../shared/datasets``.  The quick start compiles with the optimisation a user's
session gets, so CI runs the user's compiled code end to end at least there; the others
compile for speed of compilation, as the rest of the suite does (tests/conftest.py): the
ISBOR notebook took two minutes of CI's twenty the other way.
"""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
USER_COMPILED = "01_quickstart.ipynb"


def test_notebooks_found():
    assert NOTEBOOKS, "no notebooks under notebooks/"
    assert USER_COMPILED in [p.name for p in NOTEBOOKS]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, datasets_dir, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    if path.name == USER_COMPILED:
        monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError naming the failing cell
