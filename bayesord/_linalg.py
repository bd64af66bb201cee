"""Cholesky-based linear algebra with a status instead of silent failure.

Symmetrise, add jitter scaled to the dtype and the matrix's diagonal, factorise, solve
with triangular solves, and take log-determinants from the factor's diagonal.  A failed
factorisation is reported through a boolean ``ok`` flag (turned into
``Status.NOT_POSITIVE_DEFINITE`` by callers), never replaced by zeros.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

__all__ = ["jitter_for", "safe_cholesky", "chol_solve", "chol_logdet", "chol_inverse"]


def jitter_for(A):
    """Jitter ``eps(dtype) * n * mean(diag(A))``: negligible for well-posed problems."""
    n = A.shape[-1]
    scale = jnp.maximum(jnp.mean(jnp.abs(jnp.diagonal(A, axis1=-2, axis2=-1)), axis=-1), 1.0)
    return jnp.finfo(A.dtype).eps * n * scale


def safe_cholesky(A):
    """Lower Cholesky factor of a symmetric positive definite matrix.

    Args:
        A: array of shape (..., n, n).

    Returns:
        (L, ok): the lower factor and a boolean that is False when the factorisation
        produced non-finite entries (A not positive definite to working precision).
    """
    A = 0.5 * (A + jnp.swapaxes(A, -1, -2))
    eye = jnp.eye(A.shape[-1], dtype=A.dtype)
    L = jnp.linalg.cholesky(A + jitter_for(A)[..., None, None] * eye)
    ok = jnp.all(jnp.isfinite(L), axis=(-2, -1))
    return L, ok


def chol_solve(L, b):
    """Solve ``A x = b`` given the lower Cholesky factor ``L`` of ``A``."""
    return cho_solve((L, True), b)


def chol_logdet(L):
    """``log |A|`` from the lower Cholesky factor of ``A``."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)


def chol_inverse(L):
    """``A^{-1}`` from its lower Cholesky factor (for reporting covariances only)."""
    eye = jnp.eye(L.shape[-1], dtype=L.dtype)
    Linv = solve_triangular(L, eye, lower=True)
    return Linv.T @ Linv
