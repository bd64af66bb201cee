"""Float32 matrix products at full precision in every compiled program (bayesord._precision).

An accelerator computes a float32 product in reduced precision by default (TF32 on NVIDIA
GPUs since Ampere); the library asks for full precision when it traces.  The request is in
the lowered program, so it is checked here on the CPU, where it changes no number.
"""

import ast
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesord import CLMConfig, ISBORConfig, ProbitConfig, clm_columns, fit_clm, fit_isbor, fit_probit
from bayesord._precision import full_precision, jit
from bayesord.datasets import make_ordinal_probit

PACKAGE = Path(__file__).resolve().parents[1] / "bayesord"
# jax.jit itself: the wrapper, the sequential loops' jit (which wraps with full_precision),
# the stored programs (re-jitting a wrapped function, calling an exported one) and
# distributed.map_sharded (the user's own function, whose library calls are wrapped).
JAX_JIT_ALLOWED = {"_precision.py", "_loops.py", "_compile_cache.py", "distributed.py"}


def _dot_precisions(lowered):
    text = lowered.as_text()
    return re.findall(r"stablehlo\.dot_general[^\n]*?precision = \[(\w+), (\w+)\]", text), text.count(
        "stablehlo.dot_general")


def _data(n=60, d=3):
    X, y, _ = make_ordinal_probit(n, d, 4, seed=0)
    return X.astype(np.float32), y.astype(np.int32), np.ones(n, np.float32)


@pytest.mark.parametrize("name", ["probit", "isbor", "clm"])
def test_every_product_of_a_float32_fit_asks_for_full_precision(name):
    X, y, w = _data()
    if name == "probit":
        lowered = fit_probit.lower(X, y, w, 1.0, 1e-5, config=ProbitConfig(), n_classes=4)
    elif name == "isbor":
        n = len(y)
        lowered = fit_isbor.lower(X, y, w, np.arange(n, dtype=np.int32), np.ones(n, bool), jax.random.key(0),
                                  1 / 3, config=ISBORConfig(n_classes=4, capacity=8, max_iter=5))
    else:
        lowered = fit_clm.lower(X, y, w, 1e-5, clm_columns(location=[0, 1, 2]), config=CLMConfig(n_classes=4))
    found, total = _dot_precisions(lowered)
    assert total > 0 and len(found) == total
    assert set(found) == {("HIGHEST", "HIGHEST")}


def test_without_the_wrapper_jax_leaves_the_precision_to_the_device():
    """The check above can fail: a plain jax.jit product is lowered at DEFAULT precision."""
    x = jnp.ones((4, 3), jnp.float32)
    plain, _ = _dot_precisions(jax.jit(lambda a: a.T @ a).lower(x))
    wrapped, _ = _dot_precisions(jit(lambda a: a.T @ a).lower(x))
    assert plain == [("DEFAULT", "DEFAULT")] and wrapped == [("HIGHEST", "HIGHEST")]


def test_the_setting_covers_nested_jitted_calls_and_is_not_left_behind():
    inner = jax.jit(lambda a: a.T @ a)
    outer = full_precision(lambda a: jax.jit(lambda b: inner(b) @ b.T)(a))
    found, total = _dot_precisions(jax.jit(outer).lower(jnp.ones((4, 3), jnp.float32)))
    assert total == 2 and set(found) == {("HIGHEST", "HIGHEST")}
    assert jax.config.jax_default_matmul_precision is None


def test_modules_compile_through_the_wrapper():
    """A new ``jax.jit`` in a model module would compile at the device's default precision."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in JAX_JIT_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "jit" and isinstance(node.value, ast.Name)
                    and node.value.id == "jax"):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not offenders, f"use bayesord._precision.jit instead of jax.jit: {offenders}"
