"""The cumulative link model with nominal and scale effects (R's ``ordinal::clm``).

Model (Christensen, "Cumulative link models for ordinal regression with the R package
ordinal", Sections 2.1 and 2.3; Agresti, *Analysis of Ordinal Categorical Data*, Sections
3.6 and 5.4): for a row with location columns ``x``, nominal columns ``w`` and scale
columns ``s``,

    P(y <= k | x, w, s) = F( (b_k + w^T gamma_k - x^T beta) / exp(s^T zeta) ),   (1)

``F`` the link's CDF, ``b_1 < ... < b_{K-1}`` the thresholds at ``w = 0``, ``gamma_k`` the
threshold shifts of the nominal columns (partial proportional odds: a nominal column moves
each threshold by its own amount instead of moving the latent value), and ``exp(s^T zeta)``
a log-linear model of the latent scale.  Without nominal and scale columns (1) is the
ordinary cumulative link (proportional-odds) model.  A column may be a location and a scale
column at once (``clm(y ~ temp, scale = ~ temp)``); a nominal column cannot also be a
location column (the two effects are aliased).

**Fit.**  The log-likelihood of (1), ``l = sum_i w_i log(F(u_i) - F(v_i))`` with the margins
``u_i, v_i`` of row ``i``'s class, is maximised over ``eta = (beta_z, theta, gamma_z,
zeta_z)`` on standardised columns (:func:`bayesord._columns.center_and_scale`), ``theta`` the
thresholds' first value and log gaps (:mod:`bayesord._thresholds`), by damped Newton steps
with the exact Hessian (:func:`bayesord._laplace.maximise_exact`).  With nominal effects
the thresholds of a row, ``b_k + w^T gamma_k``, can cross; a trial step that crosses them at
a training row's own class gives a non-finite likelihood and is halved, and the result
counts the training rows where any two of them cross (``n_crossed``), as ``clm`` warns.

**Posterior.**  Under a flat prior the Laplace approximation of the posterior of ``eta`` is
``N(eta*, Sigma)``, ``Sigma`` the inverse of minus the Hessian (the covariance ``clm``
reports, mapped to the user's columns by the delta method).  A row's margins ``a_k = (b_k +
w^T gamma_k - x^T beta) / exp(s^T zeta)`` are Gaussian to first order in ``eta``, so
``P(y <= k) = E F(a_k)`` is ``Phi(a*_k / sqrt(1 + s_k^2))`` for the probit, the probit
approximation for the logit and quadrature for the other links
(:func:`bayesord._likelihood.log_predictive_probs`).

Coefficients are reported on the user's columns: with ``z = (c - center) / scale`` for each
column and ``kappa = exp(-center_s^T zeta)``, ``beta = beta_z / (scale_x kappa)``,
``gamma_k = gamma_z,k / (scale_w kappa)``, ``zeta = zeta_z / scale_s`` and the thresholds at
all columns 0.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._columns import center_and_scale
from ._effects import average_marginal_effects
from ._laplace import maximise_exact
from ._likelihood import log_class_probs, log_predictive_probs, ordinal_ratios
from ._linalg import safe_cholesky
from ._links import check_link
from ._results import result_type
from ._status import Status
from ._thresholds import initial_thresholds, thresholds_from_params

__all__ = [
    "ThresholdCrossingWarning",
    "CLMConfig",
    "CLMResult",
    "CLMPrediction",
    "fit_clm",
    "predict_clm",
    "sample_class_probs_clm",
    "marginal_effects_clm",
]


class ThresholdCrossingWarning(UserWarning):
    """The nominal effects of a fitted model make two thresholds cross at training rows."""


def _indices(name, value):
    if not isinstance(value, tuple) or not all(isinstance(j, int) and j >= 0 for j in value):
        raise TypeError(f"{name} must be a tuple of non-negative column indices, got {value!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{name} lists a column twice: {value}")


@dataclasses.dataclass(frozen=True)
class CLMConfig:
    """Static configuration of :func:`fit_clm` (hashable).

    The columns of the design matrix ``A`` are given to the three parts of (1) by index; a
    column may be in ``location`` and ``scale`` at once, not in ``location`` and ``nominal``.

    Attributes:
        n_classes: K, the number of ordered classes.
        location: the columns with one coefficient ``beta_j``.
        nominal: the columns with one threshold shift per threshold, ``gamma_jk``.
        scale: the columns of the log-linear scale model, ``zeta_j``.
        link: any of :data:`bayesord._links.LINKS`.
        max_newton: cap on Newton iterations.
    """

    n_classes: int
    location: tuple = ()
    nominal: tuple = ()
    scale: tuple = ()
    link: str = "probit"
    max_newton: int = 100

    def __post_init__(self):
        check_link(self.link)
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be at least 2, got {self.n_classes}")
        for name in ("location", "nominal", "scale"):
            _indices(name, getattr(self, name))
        both = sorted(set(self.location) & set(self.nominal))
        if both:
            raise ValueError(f"columns {both} are both location and nominal columns: their location "
                             "effect is not identified beside a shift of every threshold")
        if self.max_newton < 1:
            raise ValueError("max_newton must be at least 1")

    @property
    def sizes(self):
        """``(d, K-1, p, r)``: location columns, thresholds, nominal columns, scale columns."""
        return len(self.location), self.n_classes - 1, len(self.nominal), len(self.scale)


@result_type
class CLMResult:
    """A fitted cumulative link model with nominal and scale effects."""

    config: CLMConfig
    """The static configuration the model was fitted with (columns and link among it)."""
    coef: jax.Array
    """Location effects ``beta`` per unit of the user's columns, shape (d,)."""
    thresholds: jax.Array
    """Thresholds ``b_k`` at all columns 0 (as ``clm`` reports them), shape (K-1,)."""
    nominal_coef: jax.Array
    """Threshold shifts ``gamma``, shape (p, K-1): row j is nominal column j's shift of each
    threshold (``clm``'s ``1|2.contactyes``, ...)."""
    scale_coef: jax.Array
    """Log-scale effects ``zeta``, shape (r,)."""
    cov: jax.Array
    """Covariance of ``(coef, thresholds, nominal_coef.ravel(), scale_coef)``, shape (m, m)
    with ``m = d + (K-1)(1 + p) + r``."""
    center: jax.Array
    """Offsets of the design matrix's columns, shape (D,)."""
    scale: jax.Array
    """Scales of the design matrix's columns, shape (D,)."""
    eta: jax.Array
    """The optimum in the fit's own parameters ``(beta_z, theta, gamma_z, zeta_z)``, (m,)."""
    eta_cov: jax.Array
    """Laplace covariance of ``eta``, shape (m, m)."""
    loglik: jax.Array
    """The log-likelihood at the optimum (``clm``'s ``logLik``; weighted by the sample weights)."""
    n_crossed: jax.Array
    """Training rows (of positive weight) at which two thresholds cross."""
    n_iter: jax.Array
    """Newton iterations."""
    converged: jax.Array
    """Whether the Newton decrement met the tolerance and the Hessian is negative definite."""
    status: jax.Array
    """A :class:`bayesord._status.Status` code."""


class CLMPrediction(NamedTuple):
    """Predictive distribution of new rows."""

    margin: jax.Array
    """The margins ``a*_k`` of (1) at the estimate, shape (n, K-1)."""
    margin_var: jax.Array
    """Their posterior variances (delta method), shape (n, K-1)."""
    proba: jax.Array
    """Class probabilities, shape (n, K)."""
    cum_proba: jax.Array
    """Cumulative probabilities ``P(y <= k)``, k < K-1, shape (n, K-1)."""


# ----------------------------------------------------------------------- the model
def _unpack(eta, config: CLMConfig):
    """``(beta_z, b, gamma_z (p, K-1), zeta_z)`` from ``eta``."""
    d, k1, p, r = config.sizes
    beta = eta[:d]
    b = thresholds_from_params(eta[d:d + k1])
    gamma = eta[d + k1:d + k1 + p * k1].reshape(p, k1)
    zeta = eta[d + k1 + p * k1:]
    return beta, b, gamma, zeta


def _parts(Az, config: CLMConfig):
    """The location, nominal and scale columns of the standardised design ``Az``."""
    def take(idx):
        return Az[:, jnp.asarray(idx, jnp.int32)] if idx else Az[:, :0]

    return take(config.location), take(config.nominal), take(config.scale)


def _latent(eta, Az, config: CLMConfig):
    """Each row's latent mean ``f`` (n,), thresholds ``B`` (n, K-1) and scale ``sigma`` (n,)."""
    X, W, S = _parts(Az, config)
    beta, b, gamma, zeta = _unpack(eta, config)
    return X @ beta, b + W @ gamma, jnp.exp(S @ zeta)


def _loglik(eta, Az, y, weights, config: CLMConfig):
    f, B, sigma = _latent(eta, Az, config)
    return jnp.sum(weights * ordinal_ratios(f, y, B, sigma, config.link)[0])


def _margins(eta, Az, config: CLMConfig):
    """``a_k = (B_k - f) / sigma`` of (1), shape (n, K-1)."""
    f, B, sigma = _latent(eta, Az, config)
    return (B - f[:, None]) / sigma[:, None]


def _natural(eta, center, scale, config: CLMConfig):
    """``(coef, thresholds, nominal_coef.ravel(), scale_coef)`` on the user's columns."""
    loc, nom, sca = (np.asarray(i, np.int32) for i in (config.location, config.nominal, config.scale))
    beta_z, b_z, gamma_z, zeta_z = _unpack(eta, config)
    zeta = zeta_z / scale[sca]
    kappa = jnp.exp(-center[sca] @ zeta)
    coef = beta_z / scale[loc] / kappa
    gamma = gamma_z / scale[nom][:, None] / kappa
    b = (b_z - (center[nom] / scale[nom]) @ gamma_z + (center[loc] / scale[loc]) @ beta_z) / kappa
    return jnp.concatenate([coef, b, gamma.ravel(), zeta])


@partial(jax.jit, static_argnames=("config",))
def fit_clm(A, y, weights, rtol, *, config: CLMConfig) -> CLMResult:
    """Fit the cumulative link model (1) by maximum likelihood, with its Laplace posterior.

    Args:
        A: the design matrix, shape (n, D): every column the location, nominal and scale
            parts use (no intercept column: the thresholds hold it).
        y: classes 0..K-1, shape (n,).
        weights: non-negative sample weights, shape (n,) (zero-weight rows are ignored).
        rtol: relative tolerance of the Newton decrement (e.g. 1e-10 in float64).
        config: :class:`CLMConfig` (static).

    Returns:
        :class:`CLMResult`.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> A = rng.normal(size=(300, 1))
        >>> y = np.digitize(A[:, 0] + rng.normal(size=300) * np.exp(0.5 * A[:, 0]), [-1.0, 1.0])
        >>> res = fit_clm(A, y, np.ones(300), 1e-8,
        ...               config=CLMConfig(n_classes=3, location=(0,), scale=(0,)))
        >>> bool(res.converged), res.scale_coef.shape
        (True, (1,))
    """
    A = jnp.asarray(A)
    dtype = A.dtype if jnp.issubdtype(A.dtype, jnp.floating) else jnp.result_type(float)
    A = A.astype(dtype)
    y = jnp.asarray(y, jnp.int32)
    weights = jnp.asarray(weights, dtype)
    rtol = jnp.asarray(rtol, dtype)
    d, k1, p, r = config.sizes
    center, scale = center_and_scale(A, weights)
    # Zero-weight rows (padding among them) sit at the column means, where the thresholds are
    # ordered, so no non-finite value reaches the derivatives through them.
    Az = jnp.where(weights[:, None] > 0, (A - center) / scale, 0.0)
    b0 = initial_thresholds(y, weights, config.n_classes, config.link, dtype)
    theta0 = jnp.concatenate([b0[:1], jnp.log(jnp.diff(b0))])
    eta0 = jnp.concatenate([jnp.zeros(d, dtype), theta0, jnp.zeros(p * k1 + r, dtype)])

    def objective(eta, v):
        return _loglik(eta, Az, y, weights, config), (v, jnp.ones((), bool))

    eta, value, hess, _, n_iter, converged, status = maximise_exact(
        objective, eta0, jnp.zeros((0,), dtype), rtol, config.max_newton)
    L, chol_ok = safe_cholesky(-hess)
    eta_cov = jax.scipy.linalg.cho_solve((L, True), jnp.eye(eta.shape[0], dtype=dtype))
    status = jnp.where(chol_ok | (status != Status.SUCCESS), status, Status.NOT_POSITIVE_DEFINITE)
    status = jnp.where(jnp.isfinite(value), status, Status.NONFINITE)

    _, B, _ = _latent(eta, Az, config)
    crossed = jnp.any(jnp.diff(B, axis=1) <= 0, axis=1) & (weights > 0)

    J = jax.jacfwd(_natural)(eta, center, scale, config)
    nat = _natural(eta, center, scale, config)
    return CLMResult(
        config=config, coef=nat[:d], thresholds=nat[d:d + k1],
        nominal_coef=nat[d + k1:d + k1 + p * k1].reshape(p, k1), scale_coef=nat[d + k1 + p * k1:],
        cov=J @ eta_cov @ J.T, center=center, scale=scale, eta=eta, eta_cov=eta_cov, loglik=value,
        n_crossed=jnp.sum(crossed).astype(jnp.int32), n_iter=n_iter, converged=converged & chol_ok,
        status=status.astype(jnp.int32))


# --------------------------------------------------------------------- predictions
def _standardised(result: CLMResult, A):
    return (jnp.asarray(A, result.eta.dtype) - result.center) / result.scale


@jax.jit
def predict_clm(result: CLMResult, A) -> CLMPrediction:
    """Predictive class probabilities of rows ``A`` (the design matrix's columns).

    The posterior of ``eta`` is integrated (see the module docstring); where the thresholds
    of a row cross, the classes between them get probability 0
    (:func:`bayesord._likelihood.log_class_probs` keeps the cumulative ones monotone).
    """
    config = result.config
    Az = _standardised(result, A)
    margin = _margins(result.eta, Az, config)
    grad = jax.jacfwd(_margins)(result.eta, Az, config)  # (n, K-1, m)
    var = jnp.einsum("nkm,ml,nkl->nk", grad, result.eta_cov, grad)
    zero = jnp.zeros(margin.shape[:1], margin.dtype)
    log_p, log_cum = log_predictive_probs(zero, jnp.maximum(var, 0.0), jnp.ones((), margin.dtype), margin,
                                          config.link)
    return CLMPrediction(margin=margin, margin_var=var, proba=jnp.exp(log_p), cum_proba=jnp.exp(log_cum))


def _plugin_proba(eta, Az, config: CLMConfig):
    a = _margins(eta, Az, config)
    one = jnp.ones(a.shape[:1], a.dtype)
    return jnp.exp(log_class_probs(jnp.zeros_like(one), one, a, config.link))


@partial(jax.jit, static_argnames=("n_draws",))
def sample_class_probs_clm(result: CLMResult, A, key, *, n_draws: int = 200):
    """Class probabilities under ``n_draws`` draws of ``eta`` from its Laplace posterior,
    shape (n_draws, n, K): their spread is the posterior uncertainty of the probabilities."""
    Az = _standardised(result, A)
    L, ok = safe_cholesky(result.eta_cov)
    L = jnp.where(ok, L, jnp.nan)  # a failed factorisation shows as NaN draws, never as zeros
    e = jax.random.normal(key, (n_draws, result.eta.shape[0]), result.eta.dtype) @ L.T
    return jax.vmap(lambda e_s: _plugin_proba(result.eta + e_s, Az, result.config))(e)


@jax.jit
def marginal_effects_clm(result: CLMResult, A, discrete):
    """Average marginal effects of each column of ``A`` on the class probabilities and the
    expected class, with delta-method sds (:func:`bayesord._effects.average_marginal_effects`).

    A column's effect goes through every part of (1) it is in: its location coefficient, its
    threshold shifts and its scale coefficient.

    Returns:
        (effects, sds), each of shape (D, K + 1).
    """
    def proba(eta, A_rows):
        return _plugin_proba(eta, _standardised(result, A_rows), result.config)

    return average_marginal_effects(proba, result.eta, result.eta_cov, A, discrete)
