"""Link functions: the one place where a noise distribution of the latent variable is defined.

A cumulative link model says ``P(y <= k | f) = F((b_k - f) / sigma)`` with ``F`` the CDF of
the latent noise.  The five links of R's ``ordinal::clm`` (Christensen 2019, Table 1):

=========  ==========================  =========================  ==================
link       F(z)                        log f(z)                   f'(z) / f(z)
=========  ==========================  =========================  ==================
probit     Phi(z)                      -z^2/2 - log sqrt(2 pi)    -z
logit      1 / (1 + e^-z)              log s(z) + log s(-z)       -tanh(z/2)
cloglog    1 - exp(-e^z)               z - e^z                    1 - e^z
loglog     exp(-e^-z)                  -z - e^-z                  e^-z - 1
cauchit    1/2 + arctan(z) / pi        -log pi - log(1 + z^2)     -2z / (1 + z^2)
=========  ==========================  =========================  ==================

(``s`` the logistic sigmoid.)  The complementary log-log link has a Gumbel-minimum noise
(a long lower tail), the log-log link its mirror image; the Cauchit link a heavy-tailed
noise for data with outlying responses.

Every link gives ``log F`` and ``log(1 - F)`` separately, each accurate far into its small
tail, so the likelihood never subtracts probabilities near one; a symmetric link
(``F(-z) = 1 - F(z)``) evaluates one CDF per argument.  Adding a link means adding one
:class:`Link` to :data:`_REGISTRY`; every model that takes ``link=`` accepts it, and the tests
in ``tests/test_links.py`` run over the registry.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri

__all__ = ["LINKS", "Link", "get_link", "check_link", "log1mexp"]

_LOG_SQRT_2PI = 0.9189385332046727
_LOG_PI = 1.1447298858494002


class Link(NamedTuple):
    """The functions of one link (all elementwise and jittable)."""

    name: str
    log_cdf: Callable
    """``log F(z)``."""
    log_sf: Callable
    """``log(1 - F(z))``."""
    log_pdf: Callable
    """``log f(z)``, the log density of the noise."""
    dlog_pdf: Callable
    """``f'(z) / f(z)``."""
    quantile: Callable
    """``F^{-1}(p)``."""
    sample: Callable
    """``sample(rng, size)``: standard noise draws from a ``numpy.random.Generator``."""
    symmetric: bool
    """``F(-z) = 1 - F(z)``: ``log_sf(z)`` is ``log_cdf(-z)``."""
    normal_var: float
    """Variance of the normal that matches the noise's spread (its variance where finite;
    for the Cauchy noise, the normal with the same interquartile range).  Used to place
    default thresholds in :func:`bayesord.datasets.make_ordinal_probit`."""
    predictive_scale: Optional[Callable] = None
    """``s(var, sigma)`` with ``E[F(z / sigma)] ~= F(m / s)`` for ``z ~ N(m, var)``, where a
    closed form (exact or a standard approximation) exists; ``None``: the predictive
    probabilities are computed by Gauss-Hermite quadrature instead."""
    exact_hazard: Optional[tuple] = None
    """``(upper, log_h, dlog_h)`` for a tail that falls double-exponentially (``T = 1 - F``
    where ``upper``, else ``F``): its log hazard ``log(f/T)`` and that log's derivative in
    closed form.  There ``log f`` and ``log T`` are both about ``-e^|z|``, and their
    difference, and the likelihood's derivatives built from it, would lose every digit
    (:mod:`bayesord._likelihood` uses these instead).  ``None``: no such tail."""


def log1mexp(x):
    """``log(1 - exp(x))`` for ``x <= 0``, accurate at both ends (Maechler 2012)."""
    x = jnp.minimum(x, 0.0)
    near = x > -0.6931471805599453
    x_near = jnp.where(near, x, -1.0)
    x_far = jnp.where(near, -1.0, x)
    return jnp.where(near, jnp.log(-jnp.expm1(x_near)), jnp.log1p(-jnp.exp(x_far)))


def _log_ndtr(z):
    """``log Phi(z)``, accurate over the whole line and cheaper than ``jax.scipy``'s version.

    One ``erfc`` per element, ``e = erfc(|z|/sqrt 2)``, serves two regimes:
    ``log1p(-e/2)`` for ``z >= 0`` and ``log(e/2)`` for ``z < 0`` down to where ``e`` nears
    underflow; below that the asymptotic series
    ``log phi(z) - log(-z) + log(1 - 1/z^2 + 3/z^4 - 15/z^6 + 105/z^8)``, whose truncation
    error (``945/z^10``) is below the dtype's precision there.
    """
    cut = -37.0 if z.dtype == jnp.float64 else -9.0
    upper = z >= 0
    low = z <= cut
    half_e = 0.5 * jax.lax.erfc(jnp.abs(jnp.where(low, 0.0, z)) * 0.7071067811865476)
    z_low = jnp.where(low, z, cut)
    r = 1.0 / (z_low * z_low)
    series = 1.0 + r * (-1.0 + r * (3.0 + r * (-15.0 + r * 105.0)))
    tail = -0.5 * z_low * z_low - _LOG_SQRT_2PI - jnp.log(-z_low / series)
    lower = jnp.log(jnp.where(upper, 1.0, half_e))  # half_e underflows for large z >= 0
    return jnp.where(upper, jnp.log1p(-half_e), jnp.where(low, tail, lower))


def _log_gumbel_lower(z):
    """``log(1 - exp(-e^z))``: the complementary log-log CDF (and the log-log survival
    function at ``-z``).  Below ``z = -20`` the series ``z - e^z / 2`` (error below
    ``e^{2z}/24``), which stays finite where ``e^z`` underflows."""
    small = z < -20.0
    t = jnp.exp(jnp.where(small, -20.0, z))
    series = z - 0.5 * jnp.exp(jnp.where(small, z, -20.0))
    return jnp.where(small, series, log1mexp(-t))


def _log_cauchy_cdf(z):
    """``log(1/2 + arctan(z)/pi) = log(atan2(1, -z)) - log pi``: the angle form keeps the
    lower tail (``~ 1/(pi |z|)``) free of cancellation."""
    return jnp.log(jnp.arctan2(jnp.ones_like(z), -z)) - _LOG_PI


def _cauchy_quantile(p):
    """``tan(pi (p - 1/2))`` as ``-1/tan(pi p)`` below the median and ``1/tan(pi (1 - p))``
    above it, accurate in both tails."""
    lower = p < 0.5
    q = jnp.where(lower, p, 1.0 - p)
    t = 1.0 / jnp.tan(jnp.pi * q)
    return jnp.where(lower, -t, t)


_PROBIT = Link(
    name="probit",
    log_cdf=_log_ndtr,
    log_sf=lambda z: _log_ndtr(-z),
    log_pdf=lambda z: -0.5 * z * z - _LOG_SQRT_2PI,
    dlog_pdf=lambda z: -z,
    quantile=ndtri,
    sample=lambda rng, size: rng.standard_normal(size),
    symmetric=True,
    normal_var=1.0,
    # Exact: z / sigma + e with e ~ N(0, 1) is Gaussian.
    predictive_scale=lambda var, sigma: jnp.sqrt(sigma * sigma + var),
)

_LOGIT = Link(
    name="logit",
    log_cdf=jax.nn.log_sigmoid,
    log_sf=lambda z: jax.nn.log_sigmoid(-z),
    log_pdf=lambda z: jax.nn.log_sigmoid(z) + jax.nn.log_sigmoid(-z),
    dlog_pdf=lambda z: -jnp.tanh(0.5 * z),
    quantile=lambda p: jnp.log(p) - jnp.log1p(-p),
    sample=lambda rng, size: rng.logistic(0.0, 1.0, size),
    symmetric=True,
    normal_var=float(np.pi**2 / 3.0),
    # The probit approximation of the logistic-Gaussian integral (MacKay 1992).
    predictive_scale=lambda var, sigma: sigma * jnp.sqrt(1.0 + jnp.pi * var / (8.0 * sigma * sigma)),
)

# The Gumbel links' double-exponential tails: cloglog has f = e^z S (S = 1 - F), so
# f/S = e^z exactly; loglog has f = e^-z F, so f/F = e^-z.
_CLOGLOG = Link(
    name="cloglog",
    log_cdf=_log_gumbel_lower,
    log_sf=lambda z: -jnp.exp(z),
    log_pdf=lambda z: z - jnp.exp(z),
    dlog_pdf=lambda z: 1.0 - jnp.exp(z),
    quantile=lambda p: jnp.log(-jnp.log1p(-p)),
    sample=lambda rng, size: -rng.gumbel(0.0, 1.0, size),
    symmetric=False,
    normal_var=float(np.pi**2 / 6.0),
    exact_hazard=(True, lambda z: z, jnp.ones_like),
)

_LOGLOG = Link(
    name="loglog",
    log_cdf=lambda z: -jnp.exp(-z),
    log_sf=lambda z: _log_gumbel_lower(-z),
    log_pdf=lambda z: -z - jnp.exp(-z),
    dlog_pdf=lambda z: jnp.exp(-z) - 1.0,
    quantile=lambda p: -jnp.log(-jnp.log(p)),
    sample=lambda rng, size: rng.gumbel(0.0, 1.0, size),
    symmetric=False,
    normal_var=float(np.pi**2 / 6.0),
    exact_hazard=(False, lambda z: -z, lambda z: -jnp.ones_like(z)),
)

_CAUCHIT = Link(
    name="cauchit",
    log_cdf=_log_cauchy_cdf,
    log_sf=lambda z: _log_cauchy_cdf(-z),
    log_pdf=lambda z: -_LOG_PI - jnp.log1p(z * z),
    dlog_pdf=lambda z: -2.0 * z / (1.0 + z * z),
    quantile=_cauchy_quantile,
    sample=lambda rng, size: rng.standard_cauchy(size),
    symmetric=True,
    # Quartiles +-1 against the standard normal's +-0.6745.
    normal_var=float(1.0 / 0.6744897501960817**2),
)

_REGISTRY = {link.name: link for link in (_PROBIT, _LOGIT, _CLOGLOG, _LOGLOG, _CAUCHIT)}

LINKS = tuple(_REGISTRY)
"""The names of the links every model with a ``link=`` setting accepts."""


def check_link(link) -> str:
    """``link`` when it names a link, else a ``ValueError`` that lists them."""
    if not isinstance(link, str) or link not in _REGISTRY:
        raise ValueError(f"link must be one of {LINKS}, got {link!r}")
    return link


def get_link(link: str) -> Link:
    """The :class:`Link` called ``link``."""
    return _REGISTRY[check_link(link)]
