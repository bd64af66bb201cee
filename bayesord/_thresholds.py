"""Ordered cut-points from unconstrained parameters and back.

Thresholds ``b_1 < ... < b_{K-1}`` are parametrised as the first value plus cumulative
positive gaps, ``b_k = b_1 + sum_{j=2..k} exp(u_j)`` (ISBOR paper, Section 3.2:
``b_n = b_1 + sum Delta_i`` with ``Delta_i > 0``).  The gaps are ``exp`` of unconstrained
numbers, which is also the parametrisation used by statsmodels' ``OrderedModel``, so
standard errors can be compared one to one.  Ordered by construction, never sorted.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._likelihood import quantile

__all__ = ["initial_thresholds", "thresholds_from_params", "params_from_thresholds",
           "thresholds_jacobian"]


def initial_thresholds(y, weights, n_classes, link, dtype, *, clip=1e-6, min_gap=1e-3):
    """Thresholds that reproduce the weighted class frequencies at ``f = 0``.

    ``b_k = F^{-1}(P(y <= k))`` with ``F`` the link's CDF, the cumulative proportions
    clipped to ``[clip, 1 - clip]`` and consecutive thresholds at least ``min_gap`` apart
    (an empty class would otherwise give two equal thresholds).
    """
    counts = jax.ops.segment_sum(weights, y, num_segments=n_classes)
    cum = jnp.cumsum(counts)[:-1] / jnp.sum(counts)
    b = quantile(jnp.clip(cum, clip, 1 - clip), link).astype(dtype)
    return jnp.concatenate([b[:1], b[:1] + jnp.cumsum(jnp.maximum(jnp.diff(b), min_gap))])


def thresholds_from_params(theta):
    """Map ``theta = (b_1, log Delta_2, ..., log Delta_{K-1})`` to ordered thresholds.

    Args:
        theta: array of shape (K-1,).

    Returns:
        Array of shape (K-1,), strictly increasing whenever ``theta`` is finite.

    Example:
        >>> import jax.numpy as jnp
        >>> thresholds_from_params(jnp.array([-1.0, 0.0, jnp.log(2.0)]))
        Array([-1.,  0.,  2.], dtype=float32)
    """
    theta = jnp.asarray(theta)
    gaps = jnp.exp(theta[1:])
    return jnp.concatenate([theta[:1], theta[:1] + jnp.cumsum(gaps)])


def params_from_thresholds(b):
    """Inverse of :func:`thresholds_from_params`; ``b`` must be strictly increasing."""
    b = jnp.asarray(b)
    return jnp.concatenate([b[:1], jnp.log(jnp.diff(b))])


def thresholds_jacobian(theta):
    """Jacobian ``d b / d theta`` of shape (K-1, K-1): lower triangular."""
    theta = jnp.asarray(theta)
    m = theta.shape[0]
    scale = jnp.concatenate([jnp.ones((1,), theta.dtype), jnp.exp(theta[1:])])
    lower = jnp.tril(jnp.ones((m, m), theta.dtype))
    return lower * scale[None, :]
