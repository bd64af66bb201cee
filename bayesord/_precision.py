"""Compiled programs whose float32 matrix products are computed in float32.

JAX lets an accelerator compute a float32 dot product in reduced precision unless told
otherwise: TF32 (a 10-bit mantissa, relative error about 1e-3) on NVIDIA GPUs since Ampere,
bfloat16 passes on TPUs (https://docs.jax.dev/en/latest/201/precision.html). The models'
Newton steps, Laplace covariances and evidence terms are built from such products (``Xᵀ r``,
``Xᵀ D X``, kernel Gram blocks): errors of 1e-3 in a gradient and a Hessian leave a Newton
solve that asks for float32's 1e-5 short of it, and move the reported uncertainty. (On an
H200 with jax 0.11.2, two float32 tests that pass on CPUs failed: sparse products against
SciPy and a float32 ISBOR Newton solve; TF32 fits both, though that run did not show the
errors.) Every compiled function of the library, and the row products of
:mod:`bayesord._sparse` called on their own, are therefore traced with
``jax.default_matmul_precision("highest")``: full float32 products, which on CPUs, and for
float64 anywhere, is what XLA computes anyway.
"""

from __future__ import annotations

import functools

import jax

__all__ = ["full_precision", "jit"]


def full_precision(fun):
    """``fun`` traced with every matrix product at its inputs' full precision.

    The setting is read when a product is traced, so it covers everything ``fun`` calls,
    jitted functions included; called eagerly, ``fun`` runs under it too.
    """

    @functools.wraps(fun)
    def traced(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fun(*args, **kwargs)

    return traced


def jit(fun=None, **jit_kwargs):
    """``jax.jit(full_precision(fun), **jit_kwargs)``; a decorator as well, bare (``@jit``)
    or with arguments (``@partial(jit, static_argnames=...)``)."""
    if fun is None:
        return functools.partial(jit, **jit_kwargs)
    return jax.jit(full_precision(fun), **jit_kwargs)
