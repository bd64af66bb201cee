"""Ordinal likelihood in log space: value, derivatives, and class probabilities.

For K ordered classes with thresholds ``b_1 < ... < b_{K-1}`` (and ``b_0 = -inf``,
``b_K = +inf``) the ordinal likelihood of class ``k`` (0-based here) at latent value ``f``
is (ISBOR paper, Eq. 4)::

    P(y = k | f) = F((b_{k+1} - f) / sigma) - F((b_k - f) / sigma)

with ``F`` the CDF of the link's noise distribution (:mod:`bayesord._links`: probit,
logit, complementary log-log, log-log, Cauchit).

The difference is never formed in probability space.  With ``u > v`` the two
standardised arguments, ``log(F(u) - F(v)) = log F(u) + log1mexp(log F(v) - log F(u))``,
or when both lie in the upper tail (``v > 0``) the same in survival functions ``S = 1 - F``,
``log S(v) + log1mexp(log S(u) - log S(v))``, so both terms are taken where they are small
and accurate.  The outer classes use one function only (``F(u)`` or ``S(v)``).  Infinite
outer thresholds are never fed to arithmetic: safe placeholder values go into the
unselected branches ("double where"), so value and gradients stay finite.

Derivatives (Eq. 8-9 of the ISBOR paper, derived here in full): with ``lam_u =
f(u)/P``, ``lam_v = f(v)/P`` (``f`` the density) and ``g(z) = f'(z)/f(z)`` (``-z`` for the
probit, ``-tanh(z/2)`` for the logit; the table in :mod:`bayesord._links`),

    d logP / d f  = -(lam_u - lam_v) / sigma                      (the paper's -delta_n)
    -d2 logP / df2 = [(lam_u - lam_v)^2 - g(u) lam_u + g(v) lam_v] / sigma^2   (H_nn)

which for the probit is the paper's ``H_nn = [(N1-N2)^2/P^2 + (z1 N1 - z2 N2)/P]/sigma^2``
(the extraction drops the ``+``).  ``H_nn >= 0`` wherever the noise density is log-concave
(probit, logit, complementary log-log, log-log): the likelihood is then log-concave in f.
The Cauchy density is not, and an outlying observation can give ``H_nn < 0``.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

import numpy as np

from ._links import LINKS, get_link, log1mexp

__all__ = [
    "LINKS",
    "log_cdf",
    "log_sf",
    "log_pdf",
    "quantile",
    "predictive_scale",
    "log_predictive_probs",
    "log1mexp",
    "log_interval",
    "OrdinalTerms",
    "ordinal_terms",
    "ordinal_ratios",
    "terms_from_ratios",
    "ordinal_loglik",
    "log_class_probs",
    "log_cumulative_probs",
    "GH_NODES",
    "GH_WEIGHTS",
]

GH_NODES, GH_WEIGHTS = np.polynomial.hermite.hermgauss(64)
_GH_LOG_WEIGHTS = np.log(GH_WEIGHTS) - 0.5 * np.log(np.pi)


def log_cdf(z, link: str = "probit"):
    """``log F(z)`` of the link's noise distribution (:mod:`bayesord._links`)."""
    return get_link(link).log_cdf(z)


def log_sf(z, link: str = "probit"):
    """``log(1 - F(z))``, accurate where ``F(z)`` is close to one."""
    return get_link(link).log_sf(z)


def quantile(p, link: str = "probit"):
    """``F^{-1}(p)``."""
    return get_link(link).quantile(p)


def log_pdf(z, link: str = "probit"):
    """``log f(z)``, the log density of the link's noise distribution."""
    return get_link(link).log_pdf(z)


def _dlog_pdf(z, link: str):
    """``f'(z) / f(z)``."""
    return get_link(link).dlog_pdf(z)


def predictive_scale(var, sigma, link: str = "probit"):
    """Scale ``s`` with ``E[F(z / sigma)] ~= F(m / s)`` for ``z ~ N(m, var)``.

    Exact for the probit, ``s = sqrt(sigma^2 + var)``; for the logit the probit
    approximation of the logistic-Gaussian integral (MacKay 1992),
    ``s = sigma sqrt(1 + pi var / (8 sigma^2))``.  Links without such a form
    (``Link.predictive_scale`` is None) raise ``ValueError``: use
    :func:`log_predictive_probs`, which integrates them by quadrature.
    """
    scale = get_link(link).predictive_scale
    if scale is None:
        raise ValueError(f"the {link} link has no predictive scale; use log_predictive_probs")
    return scale(var, sigma)


def _log_tail(x, upper, link):
    """``log(1 - F(x))`` where ``upper``, else ``log F(x)``: one CDF evaluation per element
    for a symmetric link (``1 - F(x) = F(-x)``), both functions otherwise."""
    spec = get_link(link)
    if spec.symmetric:
        return spec.log_cdf(jnp.where(upper, -x, x))
    return jnp.where(upper, spec.log_sf(x), spec.log_cdf(x))


def log_interval(u, v, link: str = "probit"):
    """``log(F(u) - F(v))`` for finite ``u > v``, without subtracting probabilities.

    ``log F(u) + log1mexp(log F(v) - log F(u))``, or, when ``v > 0``, the same in survival
    functions, ``log S(v) + log1mexp(log S(u) - log S(v))`` with ``S = 1 - F``: both terms
    are taken where they are small and accurate, for symmetric and asymmetric links alike
    (``F(0)`` is 1/2 or ``1 - 1/e`` or ``1/e``, so neither form cancels badly at ``v = 0``).
    """
    reflect = v > 0
    la = _log_tail(jnp.where(reflect, v, u), reflect, link)
    return la + log1mexp(_log_tail(jnp.where(reflect, u, v), reflect, link) - la)


class OrdinalTerms(NamedTuple):
    """Per-sample log-likelihood and its derivatives in ``(f, b_lo, b_hi)``.

    ``b_lo``/``b_hi`` are the thresholds below/above the observed class; derivatives with
    respect to an infinite outer threshold are zero.
    """

    logp: jax.Array
    """log P(y_n | f_n), shape (n,)."""
    d_f: jax.Array
    """d logP / d f."""
    d_lo: jax.Array
    """d logP / d b_lo."""
    d_hi: jax.Array
    """d logP / d b_hi."""
    d_ff: jax.Array
    """d2 logP / d f2 (non-positive: minus the paper's H_nn)."""
    d_flo: jax.Array
    """d2 logP / d f d b_lo."""
    d_fhi: jax.Array
    """d2 logP / d f d b_hi."""
    d_lolo: jax.Array
    """d2 logP / d b_lo2."""
    d_hihi: jax.Array
    """d2 logP / d b_hi2."""
    d_lohi: jax.Array
    """d2 logP / d b_lo d b_hi."""


def _standardise(f, y, b, sigma):
    """Safe standardised arguments ``u = (b_hi - f)/sigma``, ``v = (b_lo - f)/sigma``.

    ``b`` is one set of thresholds, shape (K-1,), or one per sample, shape (n, K-1) (the
    nominal effects of :mod:`bayesord._clm`); ``sigma`` a scalar or one per sample.
    """
    n_thr = b.shape[-1]
    lo_inf = y <= 0
    hi_inf = y >= n_thr

    def at(k):
        k = jnp.clip(k, 0, n_thr - 1)
        return b[k] if b.ndim == 1 else jnp.take_along_axis(b, k[:, None], axis=1)[:, 0]

    b_lo_raw = at(y - 1)
    b_hi_raw = at(y)
    # Placeholders keep u > v finite in the branch that is not selected.
    b_lo = jnp.where(lo_inf, b_hi_raw - 1.0, b_lo_raw)
    b_hi = jnp.where(hi_inf, b_lo_raw + 1.0, b_hi_raw)
    return (b_hi - f) / sigma, (b_lo - f) / sigma, lo_inf, hi_inf


def _tails(u, v, lo_inf, hi_inf, link):
    """The two tail evaluations behind ``log(F(u) - F(v))`` (``v = -inf`` where ``lo_inf``,
    ``u = +inf`` where ``hi_inf``).

    One formula for all classes, :func:`log_interval`'s: ``log P = log T(a) + log1mexp(log
    T(c) - log T(a))`` with ``(T, a, c) = (F, u, v)`` or, reflected, ``(1 - F, v, u)``; an
    infinite ``c`` drops the second term.

    Returns:
        (reflect, a, c, c_inf, log T(a), log T(c)).
    """
    reflect = hi_inf | (~lo_inf & (v > 0))
    a = jnp.where(reflect, v, u)
    c = jnp.where(reflect, u, v)
    c_inf = lo_inf | hi_inf
    c = jnp.where(c_inf, jnp.where(reflect, a + 1.0, a - 1.0), c)
    return reflect, a, c, c_inf, _log_tail(a, reflect, link), _log_tail(c, reflect, link)


def _log_hazard(z, upper, log_tail, link):
    """``log(f(z) / T(z))`` for the tail ``T`` (``1 - F`` where ``upper``) whose log is
    ``log_tail``: closed form on a link's double-exponential tail (``Link.exact_hazard``)."""
    spec = get_link(link)
    generic = spec.log_pdf(z) - log_tail
    if spec.exact_hazard is None:
        return generic
    side, log_h, _ = spec.exact_hazard
    return jnp.where(upper == side, log_h(z), generic)


def _curvature(u, v, lam_u, lam_v, link):
    """``(g(u) - lam_u, g(v) + lam_v)``, ``g = f'/f`` and ``lam = f/P``: the factors of the
    second derivatives.

    Written so, they cancel on a double-exponential tail.  With ``h = f/T`` that tail's
    hazard, ``g + h = (log h)'`` for ``T = 1 - F`` and, as ``f(v) - h(v) P = h(v) T(u)``,
    ``g(v) + lam_v = (log h)'(v) + lam_u h(v) / h(u)``; mirrored for ``T = F``,
    ``g(u) - lam_u = (log h)'(u) - lam_v h(u) / h(v)``.  Both are sums of like signs.
    """
    spec = get_link(link)
    curv_u, curv_v = _dlog_pdf(u, link) - lam_u, _dlog_pdf(v, link) + lam_v
    if spec.exact_hazard is None:
        return curv_u, curv_v
    upper, log_h, dlog_h = spec.exact_hazard
    if upper:
        return curv_u, dlog_h(v) + lam_u * jnp.exp(log_h(v) - log_h(u))
    return dlog_h(u) - lam_v * jnp.exp(log_h(u) - log_h(v)), curv_v


@partial(jax.custom_jvp, nondiff_argnums=(4,))
def _ratios_uv(u, v, lo_inf, hi_inf, link):
    # f/P at each end as a hazard f/T times T/P: T(a)/P = 1/D and T(c)/P = exp(lc - la)/D
    # with D = P/T(a), so no end's density is divided by a probability of another size.
    reflect, a, c, c_inf, la, lc = _tails(u, v, lo_inf, hi_inf, link)
    log_d = jnp.where(c_inf, 0.0, log1mexp(lc - la))
    lam_a = jnp.exp(_log_hazard(a, reflect, la, link) - log_d)
    lam_c = jnp.where(c_inf, 0.0, jnp.exp(_log_hazard(c, reflect, lc, link) + lc - la - log_d))
    lam_u = jnp.where(hi_inf, 0.0, jnp.where(reflect, lam_c, lam_a))
    lam_v = jnp.where(lo_inf, 0.0, jnp.where(reflect, lam_a, lam_c))
    return la + log_d, lam_u, lam_v


@_ratios_uv.defjvp
def _ratios_uv_jvp(link, primals, tangents):
    # d logP = lam_u du - lam_v dv, and d log lam = g dz - d logP with g = f'/f: algebraic
    # in the outputs, so derivatives of any order never differentiate erfc or log1mexp.
    u, v, lo_inf, hi_inf = primals
    du, dv = tangents[0], tangents[1]
    logp, lam_u, lam_v = _ratios_uv(u, v, lo_inf, hi_inf, link)
    curv_u, curv_v = _curvature(u, v, lam_u, lam_v, link)
    dlogp = lam_u * du - lam_v * dv
    dlam_u = lam_u * (curv_u * du + lam_v * dv)
    dlam_v = lam_v * (curv_v * dv - lam_u * du)
    return (logp, lam_u, lam_v), (dlogp, dlam_u, dlam_v)


def ordinal_ratios(f, y, b, sigma, link: str = "probit"):
    """The transcendental part of :func:`ordinal_terms`: ``(logp, lam_u, lam_v)``.

    ``lam_u = f(u)/P`` and ``lam_v = f(v)/P`` (zero at an infinite threshold).  Every
    derivative in :class:`OrdinalTerms` is an algebraic function of these and of ``(u, v)``
    (:func:`terms_from_ratios`), so an iterative solver can carry three arrays per sample
    between a line search and the next derivative pass instead of ten.  Automatic
    differentiation goes through the same identities (a custom JVP), not through ``erfc``.
    """
    u, v, lo_inf, hi_inf = _standardise(f, y, b, sigma)
    return _ratios_uv(u, v, lo_inf, hi_inf, link)


def terms_from_ratios(f, y, b, sigma, logp, lam_u, lam_v, link: str = "probit") -> OrdinalTerms:
    """:class:`OrdinalTerms` from :func:`ordinal_ratios` evaluated at the same ``(f, b, sigma)``."""
    u, v, _, _ = _standardise(f, y, b, sigma)
    curv_u, curv_v = _curvature(u, v, lam_u, lam_v, link)
    p_uu = lam_u * curv_u
    p_vv = -lam_v * curv_v
    p_uv = lam_u * lam_v
    s2 = sigma * sigma
    return OrdinalTerms(
        logp=logp,
        d_f=-(lam_u - lam_v) / sigma,
        d_lo=-lam_v / sigma,
        d_hi=lam_u / sigma,
        d_ff=(p_uu + p_vv + 2.0 * p_uv) / s2,
        d_flo=-(p_uv + p_vv) / s2,
        d_fhi=-(p_uu + p_uv) / s2,
        d_lolo=p_vv / s2,
        d_hihi=p_uu / s2,
        d_lohi=p_uv / s2,
    )


def ordinal_terms(f, y, b, sigma, link: str = "probit") -> OrdinalTerms:
    """Log-likelihood of each sample and its analytic first and second derivatives.

    Args:
        f: latent values, shape (n,).
        y: integer classes 0..K-1, shape (n,).
        b: thresholds, shape (K-1,), strictly increasing.
        sigma: noise scale (positive scalar).
        link: "probit" or "logit" (static).

    Returns:
        :class:`OrdinalTerms`; all entries finite for standardised arguments up to at
        least 40 in magnitude (float64).
    """
    return terms_from_ratios(f, y, b, sigma, *ordinal_ratios(f, y, b, sigma, link), link)


def ordinal_loglik(f, y, b, sigma, link: str = "probit", weights=None):
    """Weighted sum of ``log P(y_n | f_n, b, sigma)`` (Eq. 4); differentiable in f, b, sigma."""
    logp = ordinal_ratios(f, y, b, sigma, link)[0]
    if weights is not None:
        logp = weights * logp
    return jnp.sum(logp)


def _standardised_thresholds(mean, scale, b):
    """``z_k = (b_k - mean)/scale_k``, shape (n, K-1), made non-decreasing in k.

    ``scale`` is one standard deviation per sample, shape (n,), or one per sample and
    threshold, shape (n, K-1) (a predictive distribution whose thresholds are uncertain
    too: the variance of ``b_k - f`` differs between thresholds).  Two ways ``z`` could
    decrease, two remedies:

    * Thresholds that cross (a cumulative link model's nominal effects, far out in a
      column) are taken as their running maximum: the latent model in which the class is
      the first ``k`` with ``f + noise <= max_{j <= k} b_j``, so a class between crossed
      thresholds is impossible (probability 0, as the data of such a fit suggest).
    * With one scale per threshold each ``F(z_k)`` is the exact cumulative probability
      under the Gaussian posterior, but far in a tail (a wider ``b_{k+1} - f`` than
      ``b_k - f``) ``z`` can still decrease.  The values are then sorted: the monotone
      rearrangement of Chernozhukov, Fernandez-Val & Galichon (2009, Biometrika 96,
      "Improving point and interval estimators of monotone functions by rearrangement"),
      which brings a non-monotone estimate of a monotone curve closer to it in every Lp
      norm, and leaves every class a positive probability: a posterior makes no class
      impossible.  A running maximum here gave the class between exactly 0 (an infinite
      log-loss for a row of that class: ``OrdinalProbit(prior="ard")`` on 28 rows of
      pasture did so on one of five splits).
    """
    scale = scale[:, None] if scale.ndim == 1 else scale
    return jnp.sort((jax.lax.cummax(b, axis=b.ndim - 1) - mean[:, None]) / scale, axis=1)


def log_cumulative_probs(mean, scale, b, link: str = "probit"):
    """``log P(y <= k)`` for k = 0..K-2, shape (n, K-1): ``log F((b_k - mean)/scale_k)``.

    ``scale`` has shape (n,) or (n, K-1), as in :func:`log_class_probs`.
    """
    return log_cdf(_standardised_thresholds(mean, scale, b), link)


def log_class_probs(mean, scale, b, link: str = "probit"):
    """Log class probabilities, shape (n, K), of a latent value with mean ``mean``.

    ``P(y = k) = F((b_{k+1} - mean)/s_{k+1}) - F((b_k - mean)/s_k)``, each computed by
    :func:`log_interval` so rows are non-negative and sum to one to rounding.

    Args:
        mean: latent means, shape (n,).
        scale: total standard deviation per sample, shape (n,) (``sqrt(sigma^2 + v)``
            for a probit with latent variance v), or per sample and threshold, shape
            (n, K-1) (``sqrt(sigma^2 + Var(b_k - f))`` when the thresholds are uncertain
            too; see :func:`_standardised_thresholds`).
        b: thresholds, shape (K-1,), or one set per sample, shape (n, K-1).
    """
    z = _standardised_thresholds(mean, scale, b)
    first = log_cdf(z[:, :1], link)
    last = log_sf(z[:, -1:], link)
    middle = log_interval(z[:, 1:], z[:, :-1], link)
    return jnp.concatenate([first, middle, last], axis=1)


def _quadrature_log_probs(mean, var, sigma, b, link):
    """:func:`log_predictive_probs` by 64-point Gauss-Hermite quadrature over each
    ``b_k - f ~ N(b_k - mean, var_k)``.

    ``log P(y <= k)`` and ``log P(y > k)`` are each a log-sum-exp over the nodes of the
    link's ``log F`` and ``log(1 - F)``, so both stay accurate in their small tails; the
    class probabilities are their differences, taken as in :func:`log_interval` (in
    ``P(y <= k)`` below the median, in ``P(y > k)`` above it), with crossed thresholds and
    decreasing cumulative probabilities treated as in :func:`_standardised_thresholds`.
    """
    var = jnp.broadcast_to(var[:, None] if var.ndim == 1 else var, (mean.shape[0], b.shape[-1]))
    b = jax.lax.cummax(b, axis=b.ndim - 1)  # crossed thresholds, as in _standardised_thresholds
    nodes = jnp.asarray(GH_NODES, mean.dtype)
    log_w = jnp.asarray(_GH_LOG_WEIGHTS, mean.dtype)
    z = ((b - mean[:, None])[..., None]
         + jnp.sqrt(2.0 * jnp.maximum(var, 0.0))[..., None] * nodes) / sigma
    log_cum = jnp.sort(jax.nn.logsumexp(log_cdf(z, link) + log_w, axis=-1), axis=1)
    log_sur = -jnp.sort(-jax.nn.logsumexp(log_sf(z, link) + log_w, axis=-1), axis=1)
    lo_cum, hi_cum = log_cum[:, :-1], log_cum[:, 1:]
    lo_sur, hi_sur = log_sur[:, :-1], log_sur[:, 1:]
    upper = lo_cum > -0.6931471805599453
    la = jnp.where(upper, lo_sur, hi_cum)
    lc = jnp.where(upper, hi_sur, lo_cum)
    middle = la + log1mexp(jnp.minimum(lc - la, 0.0))
    return jnp.concatenate([log_cum[:, :1], middle, log_sur[:, -1:]], axis=1), log_cum


def log_predictive_probs(mean, var, sigma, b, link: str = "probit"):
    """Log class and cumulative probabilities of a latent value with Gaussian uncertainty.

    ``P(y <= k) = E[F((b_k - f) / sigma)]`` where ``b_k - f ~ N(b_k - mean, var_k)``.  Links
    with a predictive scale (:func:`predictive_scale`: exact for the probit, MacKay's
    approximation for the logit) use ``F((b_k - mean) / s_k)``; the others are integrated by
    64-point Gauss-Hermite quadrature, accurate to about 1e-6 while ``sqrt(var)`` is at most
    a few ``sigma`` (``tests/test_links.py`` checks it against adaptive quadrature).

    Args:
        mean: latent means, shape (n,).
        var: variance of ``b_k - f``, shape (n,) (certain thresholds) or (n, K-1).
        sigma: noise scale.
        b: thresholds, shape (K-1,), or one set per sample, shape (n, K-1).

    Returns:
        ``(log_proba, log_cum_proba)`` of shapes (n, K) and (n, K-1).
    """
    scale = get_link(link).predictive_scale
    if scale is None:
        return _quadrature_log_probs(mean, var, sigma, b, link)
    s = scale(jnp.maximum(var, 0.0), sigma)
    return log_class_probs(mean, s, b, link), log_cumulative_probs(mean, s, b, link)
