"""Column offsets and scales: the one place the models standardise their inputs.

The Bayesian models work internally with ``z = (x - center) / scale``, ``center`` and
``scale`` the weighted mean and standard deviation of each training column, and keep both
in their results so predictions apply the same map.  A shift or a rescaling of a column in
the user's data then changes nothing the model says (the docs' "Invariances" section lists
what holds exactly).  Works on NumPy and JAX arrays alike, inside ``jit`` too.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["column_moments"]


def column_moments(X, weights):
    """Weighted column means and standard deviations of ``X``.

    Args:
        X: shape (n, d), floating.
        weights: non-negative sample weights, shape (n,), with a positive sum.

    Returns:
        (center, scale), each shape (d,).  A constant column gets scale 1, so it maps to
        zeros instead of dividing by zero.
    """
    total = jnp.sum(weights)
    center = weights @ X / total
    var = weights @ jnp.square(X - center) / total
    return center, jnp.where(var > 0, jnp.sqrt(var), 1.0).astype(center.dtype)
