"""Column offsets and scales: the one place the models standardise their inputs.

The Bayesian models work internally with ``z = (x - center) / scale``, ``center`` and
``scale`` the weighted mean and standard deviation of each training column, and keep both
in their results so predictions apply the same map.  A shift or a rescaling of a column in
the user's data then changes nothing the model says (``docs/maths.md``, "Columns as they
arrive", lists what holds exactly).  Works on NumPy and JAX arrays alike, inside ``jit``
too.  The host-side check of the user's columns behind the scale warnings (sparse ones
included) is :func:`bayesord._validation.column_moments`.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["center_and_scale"]


def center_and_scale(X, weights):
    """Weighted column means and standard deviations of ``X``.

    Args:
        X: shape (n, d), floating.
        weights: non-negative sample weights, shape (n,), with a positive sum.

    Returns:
        (center, scale), each shape (d,).  A constant column gets scale 1, so it maps to
        zeros instead of dividing by zero; "constant" allows for the rounding of the mean,
        a standard deviation below ``64 eps |center|`` (a constant 0.1 leaves about 1e-17).
    """
    total = jnp.sum(weights)
    center = weights @ X / total
    sd = jnp.sqrt(weights @ jnp.square(X - center) / total)
    floor = 64 * jnp.finfo(center.dtype).eps * jnp.abs(center)
    return center, jnp.where(sd > floor, sd, 1.0).astype(center.dtype)
