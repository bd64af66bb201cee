"""Column offsets and scales: the one place the models standardise their inputs.

The Bayesian models work internally with ``z = (x - center) / scale``, ``center`` and
``scale`` the weighted mean and standard deviation of each training column, and keep both
in their results so predictions apply the same map.  A shift or a rescaling of a column in
the user's data then changes nothing the model says (``docs/maths.md``, "Columns as they
arrive", lists what holds exactly).  Works on JAX arrays, inside ``jit`` too, and on NumPy
arrays, in their own (float64) precision on the host.  The host-side check of the user's
columns behind the scale warnings (sparse ones included) is
:func:`bayesord._validation.column_moments`.

Centring inside a float32 program comes too late for a column far from zero: the cast to
float32 has already rounded its values to about ``6e-8`` of their magnitude, so a column whose
mean is ``r`` standard deviations from zero keeps its spread only to ``6e-8 r`` of a standard
deviation, and a shift of the column changes the fit.  :func:`host_offsets` gives such
columns an offset to subtract on the host, in float64, before the cast.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["OFFSET_RATIO", "center_and_scale", "host_offsets", "offset_rows", "restore_offsets"]

# A column whose |mean| is more than this many standard deviations reaches a float32 program
# centred on the host (host_offsets).
OFFSET_RATIO = 100.0
# host_offsets estimates a fit's column means and sds from at most this many rows.
_OFFSET_ROWS = 256


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


def host_offsets(X, dtype, center=None, scale=None):
    """Offsets to subtract from the columns of ``X`` on the host, in float64, before a
    program computing in ``dtype`` receives them; None when no column needs one.

    Only float32 needs them, and only for columns whose |mean| exceeds :data:`OFFSET_RATIO`
    standard deviations (a 0/1 column never does unless it is almost constant).  Such a
    column gets its mean as offset, every other column 0.  The program then centres ``X -
    offsets`` as it centres any columns, and the caller adds the offsets back to the
    result's ``center``: the model is the same, its numbers no longer rounded away.  On the
    raw wine rows of the tests, shifted to 10^5 sds from zero, the float32 probit's
    probabilities moved by 8e-3 without the offsets and by 4e-5 with them (the float32
    solver's tolerance).

    Args:
        X: (n, d) float64 NumPy rows.
        dtype: the floating type of the program.
        center, scale: the fitted columns' means and sds (d,), for a fitted model's
            prediction; when not given (a fit), both are estimated from at most
            :data:`_OFFSET_ROWS` evenly spaced rows of ``X``, which is all the decision
            and an offset near the mean need.

    Returns:
        (d,) float64 offsets, or None.
    """
    if np.dtype(dtype) != np.float32:
        return None
    if center is None:
        n = X.shape[0]
        rows = X[np.unique(np.linspace(0, n - 1, min(n, _OFFSET_ROWS)).round().astype(np.int64))]
        center, scale = rows.mean(axis=0), rows.std(axis=0)
    center, scale = np.asarray(center, np.float64), np.asarray(scale, np.float64)
    far = (np.abs(center) > OFFSET_RATIO * scale) & (scale > 0)
    return np.where(far, center, 0.0) if far.any() else None


def offset_rows(X, result, dtype):
    """Rows ``X`` (float64) and a fitted ``result`` (with ``center`` and ``scale``) for a
    program computing in ``dtype``: the columns far from zero moved by their
    :func:`host_offsets`, and the result's ``center`` with them."""
    offsets = host_offsets(X, dtype, result.center, result.scale)
    if offsets is None:
        return X, result
    return X - offsets, result._replace(center=np.asarray(result.center, np.float64) - offsets)


def restore_offsets(result, offsets, parameters_at=None):
    """A result (NumPy arrays) fitted on ``X - offsets`` as the fit of ``X``: the offsets
    back in its ``center`` (float64), and, where the model reports parameters that depend
    on the centre (the clm's and the mixed model's at x = 0), those from
    ``parameters_at(result, center)`` (a dict of them)."""
    if offsets is None:
        return result
    center = np.asarray(result.center, np.float64) + offsets
    changed = {} if parameters_at is None else jax.tree_util.tree_map(np.asarray, parameters_at(result, center))
    return result._replace(center=center, **changed)
