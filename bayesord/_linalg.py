"""Cholesky-based linear algebra with a status instead of silent failure.

Symmetrise, equilibrate to a unit diagonal, add jitter scaled to the dtype, factorise, solve
with triangular solves, and take log-determinants from the factor's diagonal.  A failed
factorisation is reported through a boolean ``ok`` flag (turned into
``Status.NOT_POSITIVE_DEFINITE`` by callers), never replaced by zeros.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

__all__ = ["jitter_for", "safe_cholesky", "chol_solve", "chol_logdet", "chol_inverse"]


def jitter_for(A):
    """Relative jitter ``eps(dtype) * n``, applied to the unit-diagonal scaled matrix."""
    return jnp.finfo(A.dtype).eps * A.shape[-1]


def safe_cholesky(A):
    """Lower Cholesky factor of a symmetric positive definite matrix.

    The factorisation runs on the equilibrated matrix ``S = D^-1/2 A D^-1/2``,
    ``D = diag(A)`` (unit diagonal), with jitter ``eps * n`` added to ``S``; the factor is
    scaled back, ``L = D^1/2 L_S``.  So the jitter is relative to each diagonal entry
    (``A + eps n D`` is what is factorised) and a few huge entries, such as a sparse
    Bayesian prior precision of ``1e10`` beside ones of ``0.1``, do not swamp the small
    ones (an absolute jitter scaled by the mean diagonal did: in float32 it added about
    ``1e3`` to every diagonal entry).

    Args:
        A: array of shape (..., n, n).

    Returns:
        (L, ok): the lower factor and a boolean that is False when the factorisation
        produced non-finite entries (A not positive definite to working precision).
    """
    A = 0.5 * (A + jnp.swapaxes(A, -1, -2))
    eye = jnp.eye(A.shape[-1], dtype=A.dtype)
    d = jnp.diagonal(A, axis1=-2, axis2=-1)
    # A zero (or negative) diagonal entry cannot be scaled by; it is left unscaled, so the
    # jitter is what keeps such a row positive, and a negative one fails as it should.
    root = jnp.sqrt(jnp.where(d > 0, d, 1.0))
    S = A / (root[..., :, None] * root[..., None, :])
    L = jnp.linalg.cholesky(S + jitter_for(A)[..., None, None] * eye) * root[..., :, None]
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
