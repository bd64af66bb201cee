"""Test configuration: float64 everywhere (the library itself never flips this switch)."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Read before importing bayesord, which adds its Eigen option to XLA_FLAGS (its __init__).
_CALLER_XLA_FLAGS = "XLA_FLAGS" in os.environ

from bayesord import _EIGEN_OPTION  # noqa: E402
from bayesord._compile_cache import QUICK_OPTIONS  # noqa: E402

# XLA:CPU's multi-threaded Eigen kernels can deadlock batched (vmap-ed) solver loops with
# jax 0.10 on small machines; bayesord turns them off on import, and so do the tests.
# Both runs spend most of their time compiling small problems, so they compile for speed of
# compilation with the options small probit fits use (QUICK_OPTIONS; that module imports
# nothing of JAX's): no LLVM optimisation and XLA's older loop emitters halve the compile
# time of a fit (7.7 s -> 3.9 s for the evidence-mode probit at n = 4,096), for compiled code
# that runs about 3.5x slower (22 -> 76 ms for that fit) and results equal to rounding.  The
# slow run (`-m slow`) did compile as a user's session does, and took 30 minutes of CI's 20
# (scikit-learn's checks of ISBOR alone compile for about 10); with the same options as the
# default run it also loads the programs that run compiled into the shared cache.
# XLA_FLAGS set by the caller are left alone (set `--xla_cpu_multi_thread_eigen=false` alone
# to test as a user's session compiles).  Flags this JAX does not know are dropped, and on an
# accelerator none is set (_flags_for_cpu).
_FAST_COMPILE_XLA_FLAGS = [_EIGEN_OPTION] + [f"--{name}={str(value).lower()}" for name, value in QUICK_OPTIONS.items()]
# Each test run compiles into a new, empty cache folder of its own (or the one that
# BAYESORD_COMPILE_CACHE names, as .ci/run does for both suites), made here in the main
# process before pytest-xdist starts its workers, so a program compiled by one worker or
# module is loaded, not compiled again, by the others.  A user's own cache is never touched.
_RUN_CACHE = None
if "BAYESORD_COMPILE_CACHE" not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ:
    _RUN_CACHE = tempfile.mkdtemp(prefix="bayesord-test-jax-")
    os.environ["BAYESORD_COMPILE_CACHE"] = _RUN_CACHE

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


def _flags_for_cpu(flags):
    """The flags of ``flags`` (a list) that XLA:CPU accepts, or none on an accelerator.

    XLA aborts a process on a flag it does not know (jax 0.11.2 no longer knows
    ``--xla_cpu_use_fusion_emitters``: every test worker crashed on start), so the flags are
    tried in a new process first, together and then one by one.  Where JAX runs on an
    accelerator (a GPU plugin) none is used: they tune XLA:CPU alone.
    """
    probe = "import jax; jax.jit(lambda x: x + 1)(1.0); print(jax.default_backend())"

    def backend(tried):
        try:
            done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "XLA_FLAGS": " ".join(tried)},
                                  capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return None
        return done.stdout.split()[-1] if done.returncode == 0 and done.stdout.split() else None

    found = backend(flags)
    if found == "cpu":
        return flags
    if found is not None:
        return []
    return [flag for flag in flags if backend([flag]) == "cpu"]


def pytest_configure(config):
    """Choose the compile flags before anything compiles (and before pytest-xdist starts its
    workers, which inherit them)."""
    if not _CALLER_XLA_FLAGS and "PYTEST_XDIST_WORKER" not in os.environ:
        os.environ["XLA_FLAGS"] = " ".join(_flags_for_cpu(_FAST_COMPILE_XLA_FLAGS))


def pytest_unconfigure(config):
    """Remove the run's own compile cache folder (the main process made it; workers skip)."""
    if _RUN_CACHE is not None:
        shutil.rmtree(_RUN_CACHE, ignore_errors=True)
