"""Execute the notebooks headless; any cell that raises fails the test.

Marked slow (each notebook fits models); CI runs them with ``python -m pytest -m slow``.
The kernel starts in the repository root, so it imports this checkout's ``bayesord``
and finds ``../shared/datasets``.  The notebooks compile with the optimisation a user's
session gets, so CI runs the user's compiled code end to end at least there.
"""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_notebooks_found():
    assert NOTEBOOKS, "no notebooks under notebooks/"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, datasets_dir, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # Compiled as in a user's session (the other tests compile for speed: tests/conftest.py).
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError naming the failing cell
