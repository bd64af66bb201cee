"""Test configuration: float64 everywhere (the library itself never flips this switch)."""

import os
from pathlib import Path

# XLA:CPU's multi-threaded Eigen kernels can deadlock batched (vmap-ed) solver loops with
# jax 0.10 on small machines; single-threaded Eigen avoids it at little cost on 2 cores.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
# Tests compile from scratch unless BAYESORD_COMPILE_CACHE names a folder: .ci/run gives
# its suites (and their pytest-xdist workers) one new folder, so a program compiled once is
# loaded everywhere else.  A user's own cache is never touched.
os.environ.setdefault("BAYESORD_COMPILE_CACHE", "off")

import jax  # noqa: E402
import pytest

from bayesord import _compile_cache  # noqa: E402

jax.config.update("jax_enable_x64", True)
_compile_cache.enable()

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def datasets_dir():
    """Path to the shared benchmark data, or skip when this checkout has none beside it."""
    if not DATASETS.is_dir():
        pytest.skip(f"shared datasets folder not found at {DATASETS} (expected ../shared/datasets)")
    return DATASETS


os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True, scope="module")
def _fresh_jit_caches():
    """Drop compiled programs after each test module.

    With everything compiled over the whole default run kept alive in one process, XLA:CPU
    (jax 0.10) segfaulted while compiling a RED-SVM fit late in the run, reproducibly,
    although every half of the suite passes on its own.  Modules share no compiled programs
    worth keeping, so clearing costs little.
    """
    yield
    jax.clear_caches()
