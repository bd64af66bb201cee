"""Every ``Example:`` in the package's docstrings runs and prints what it says.

The examples are what a user copies first, so they run as a user's session does: in a fresh
process with JAX's default float32 (the test process enables float64), through
``doctest``.  Two examples had drifted from the code without anyone noticing (a fit on
separable data that stopped at its iteration cap, a tolerance float32 cannot meet).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import doctest, importlib, pkgutil
    import bayesord, bayesord.estimators
    names = ["bayesord." + m.name for m in pkgutil.iter_modules(bayesord.__path__)]
    names += ["bayesord.estimators." + m.name for m in pkgutil.iter_modules(bayesord.estimators.__path__)]
    failed = attempted = 0
    for name in names:
        if name in ("bayesord.cli", "bayesord._bench"):  # entry points, no examples
            continue
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
        failed, attempted = failed + result.failed, attempted + result.attempted
    print(f"examples: {attempted} run, {failed} failed")
    raise SystemExit(1 if failed or not attempted else 0)
""")


@pytest.mark.slow
def test_every_docstring_example_runs_as_written():
    env = dict(os.environ, JAX_ENABLE_X64="0")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 failed" in done.stdout
