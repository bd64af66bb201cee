"""Average marginal effects with delta-method standard deviations, for any model whose class
probabilities are a differentiable function of its parameters.

For column ``j`` of the rows ``X``: the average over the rows of ``dP(y = k | x) / dx_j`` (a
continuous column) or of ``P(y = k | x, x_j = 1) - P(y = k | x, x_j = 0)`` (a 0/1 column),
and the same for the expected class ``sum_k c_k P(y = k)`` (``c_k`` the class values, or
positions; a shift of every ``c_k`` changes no effect).  Rows given as the data average the
effect over them (the average marginal effect); one row gives the effect at those values.  The effects are functions of the parameters
``theta``; their covariance is ``J Sigma J^T`` with ``J`` their Jacobian in ``theta``
(forward-mode) and ``Sigma`` the posterior covariance of ``theta`` (Laplace).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["average_marginal_effects"]


def average_marginal_effects(proba, theta, cov, X, discrete, values=None):
    """Marginal effects of each column on every class probability and on the expected class.

    Args:
        proba: ``proba(theta, X) -> (n, K)`` class probabilities (differentiable in both).
        theta: the parameters at their estimate, shape (m,).
        cov: their posterior covariance, shape (m, m).
        X: rows, shape (n, d).
        discrete: bool, shape (d,): which columns take the 0 -> 1 change.
        values: the value ``c_k`` of each class in the expected class, shape (K,) (None:
            positions 0..K-1).

    Returns:
        (effects, sds), each of shape (d, K + 1): the last column is the expected class.
    """
    X = jnp.asarray(X, theta.dtype)
    d = X.shape[1]

    def outcomes(p):
        c = jnp.arange(p.shape[-1], dtype=p.dtype) if values is None else jnp.asarray(values, p.dtype)
        return jnp.concatenate([p, (p @ c)[..., None]], axis=-1)

    def effects(t):
        def slope(j):
            tangent = jnp.zeros_like(X).at[:, j].set(1.0)
            _, dp = jax.jvp(lambda Xs: proba(t, Xs), (X,), (tangent,))
            return jnp.mean(outcomes(dp), axis=0)

        def change(j):
            hi = proba(t, X.at[:, j].set(1.0))
            lo = proba(t, X.at[:, j].set(0.0))
            return jnp.mean(outcomes(hi - lo), axis=0)

        cols = jnp.arange(d)
        return jnp.where(jnp.asarray(discrete)[:, None], jax.vmap(change)(cols), jax.vmap(slope)(cols))

    value = effects(theta)
    J = jax.jacfwd(effects)(theta)  # (d, K + 1, m)
    var = jnp.einsum("jkm,ml,jkl->jk", J, cov, J)
    return value, jnp.sqrt(jnp.maximum(var, 0.0))
