"""Column offsets and scales: the one place the models standardise their inputs.

The Bayesian models work internally with ``z = (x - center) / scale``, ``center`` and
``scale`` the weighted mean and standard deviation of each training column, and keep both
in their results so predictions apply the same map.  A shift or a rescaling of a column in
the user's data then changes nothing the model says (``docs/maths.md``, "Columns as they
arrive", lists what holds exactly).  Works on JAX arrays, inside ``jit`` too, and on NumPy
arrays, in their own (float64) precision on the host.  The host-side check of the user's
columns behind the scale warnings (sparse ones included) is
:func:`bayesord._validation.column_moments`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = ["center_and_scale"]


def center_and_scale(X, weights):
    """Weighted column means and standard deviations of ``X``.

    Args:
        X: shape (n, d), floating: a NumPy array (computed with NumPy, in its dtype) or a
            JAX array.
        weights: non-negative sample weights, shape (n,), with a positive sum.

    Returns:
        (center, scale), each shape (d,).  A constant column gets scale 1, so it maps to
        zeros instead of dividing by zero; "constant" allows for the rounding of the mean,
        a standard deviation below ``64 eps |center|`` (a constant 0.1 leaves about 1e-17).
    """
    xp = np if isinstance(X, np.ndarray) else jnp
    total = xp.sum(weights)
    center = weights @ X / total
    sd = xp.sqrt(weights @ xp.square(X - center) / total)
    floor = 64 * xp.finfo(center.dtype).eps * xp.abs(center)
    return center, xp.where(sd > floor, sd, 1.0).astype(center.dtype)
