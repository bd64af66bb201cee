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

**Penalised fits.**  With ``alpha > 0`` the fit maximises instead

    l(eta) - W alpha ( l1_ratio |beta_z|_1 + (1 - l1_ratio) |beta_z|^2 / 2 ),   (2)

``W`` the total sample weight (so ``alpha`` penalises the mean log-likelihood, as in
scikit-learn's ``ElasticNet`` and glmnet) and ``beta_z`` the location coefficients per
standard deviation of their columns (every column penalised alike whatever its units, as
glmnet's ``standardize = TRUE``); thresholds, nominal and scale effects are not penalised.
An L1 part sets coefficients to exactly zero (proximal Newton steps).  The posterior is the
Laplace approximation at the penalised optimum (the ridge part acting as a Gaussian prior),
given which coefficients are zero: those are held at zero, with no spread.

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
from ._laplace import maximise_exact, saddle_free_precision
from ._likelihood import log_class_probs, log_predictive_probs, ordinal_ratios
from ._linalg import safe_cholesky
from ._links import check_link
from ._precision import jit
from ._results import checks_codes, mode_labels, result_type
from ._status import Status
from ._thresholds import initial_thresholds, thresholds_from_params
from ._validation import floating_dtype

__all__ = [
    "ThresholdCrossingWarning",
    "CLMColumns",
    "clm_columns",
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


class CLMColumns(NamedTuple):
    """Which columns of the design matrix ``A`` each part of (1) uses: int arrays of column
    indices.  They are data, not static configuration, so fits that differ only in which
    columns play which part (the refits of a likelihood-ratio test) share one compiled
    program.  Make them with :func:`clm_columns`, which checks them."""

    location: jax.Array
    """The columns with one coefficient ``beta_j``, shape (d,)."""
    nominal: jax.Array
    """The columns with one threshold shift per threshold, ``gamma_jk``, shape (p,)."""
    scale: jax.Array
    """The columns of the log-linear scale model, ``zeta_j``, shape (r,)."""


def clm_columns(location=(), nominal=(), scale=()) -> CLMColumns:
    """:class:`CLMColumns` from sequences of column indices.

    A column may be a location and a scale column at once, not a location and a nominal
    one (the two effects are aliased).

    Raises:
        TypeError: an index that is not a non-negative integer.
        ValueError: a column listed twice in one part, or in location and nominal.
    """
    parts = {}
    for name, value in (("location", location), ("nominal", nominal), ("scale", scale)):
        value = list(value)
        if not all(isinstance(j, (int, np.integer)) and not isinstance(j, bool) and j >= 0 for j in value):
            raise TypeError(f"{name} must hold non-negative column indices, got {value!r}")
        if len(set(value)) != len(value):
            raise ValueError(f"{name} lists a column twice: {value}")
        parts[name] = np.asarray(value, np.int32)
    both = sorted(set(parts["location"].tolist()) & set(parts["nominal"].tolist()))
    if both:
        raise ValueError(f"columns {both} are both location and nominal columns: their location "
                         "effect is not identified beside a shift of every threshold")
    return CLMColumns(**parts)


@dataclasses.dataclass(frozen=True)
class CLMConfig:
    """Static configuration of :func:`fit_clm` (hashable).

    Attributes:
        n_classes: K, the number of ordered classes.
        link: any of :data:`bayesord._links.LINKS`.
        max_newton: cap on Newton iterations.
        alpha: strength of the elastic-net penalty (2) on the location coefficients (0: none,
            the maximum-likelihood fit).
        l1_ratio: its share of L1, in [0, 1] (1: the lasso, 0: ridge).
    """

    n_classes: int
    link: str = "probit"
    max_newton: int = 100
    alpha: float = 0.0
    l1_ratio: float = 1.0

    def __post_init__(self):
        check_link(self.link)
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be at least 2, got {self.n_classes}")
        if self.max_newton < 1:
            raise ValueError("max_newton must be at least 1")
        if not (np.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha must be a non-negative number, got {self.alpha!r}")
        if not 0.0 <= self.l1_ratio <= 1.0:
            raise ValueError(f"l1_ratio must be in [0, 1], got {self.l1_ratio!r}")

    @property
    def l1(self) -> bool:
        """Whether the penalty has an L1 part (then the fit is a proximal Newton method)."""
        return self.alpha > 0 and self.l1_ratio > 0


@result_type
class CLMResult:
    """A fitted cumulative link model with nominal and scale effects."""

    config: CLMConfig
    """The static configuration the model was fitted with (the link among it)."""
    location: jax.Array
    """The design matrix's location columns, shape (d,) (:class:`CLMColumns`)."""
    nominal: jax.Array
    """Its nominal columns, shape (p,)."""
    scale_columns: jax.Array
    """Its scale columns, shape (r,)."""
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
    log_proba: jax.Array
    """Their logarithms, shape (n, K): accurate where ``proba`` underflows (float32 gives 0
    below about 1e-38 or 1e-45)."""

    labels = property(lambda self: mode_labels(self.proba), doc="(n,) codes of the most probable classes.")
    scores = property(lambda self: self.margin, doc="The margins ``margin`` (n, K-1).")


# ----------------------------------------------------------------------- the model
def _unpack(eta, cols: CLMColumns, k1):
    """``(beta_z, b, gamma_z (p, K-1), zeta_z)`` from ``eta``."""
    d, p = cols.location.shape[0], cols.nominal.shape[0]
    beta = eta[:d]
    b = thresholds_from_params(eta[d:d + k1])
    gamma = eta[d + k1:d + k1 + p * k1].reshape(p, k1)
    zeta = eta[d + k1 + p * k1:]
    return beta, b, gamma, zeta


def _latent(eta, Az, cols: CLMColumns, k1):
    """Each row's latent mean ``f`` (n,), thresholds ``B`` (n, K-1) and scale ``sigma`` (n,)."""
    beta, b, gamma, zeta = _unpack(eta, cols, k1)
    return Az[:, cols.location] @ beta, b + Az[:, cols.nominal] @ gamma, jnp.exp(Az[:, cols.scale] @ zeta)


def _loglik(eta, Az, y, weights, cols: CLMColumns, link, k1):
    f, B, sigma = _latent(eta, Az, cols, k1)
    return jnp.sum(weights * ordinal_ratios(f, y, B, sigma, link)[0])


def _margins(eta, Az, cols: CLMColumns, k1):
    """``a_k = (B_k - f) / sigma`` of (1), shape (n, K-1)."""
    f, B, sigma = _latent(eta, Az, cols, k1)
    return (B - f[:, None]) / sigma[:, None]


def _natural(eta, center, scale, cols: CLMColumns, k1):
    """``(coef, thresholds, nominal_coef.ravel(), scale_coef)`` on the user's columns."""
    loc, nom, sca = cols
    beta_z, b_z, gamma_z, zeta_z = _unpack(eta, cols, k1)
    zeta = zeta_z / scale[sca]
    kappa = jnp.exp(-center[sca] @ zeta)
    coef = beta_z / scale[loc] / kappa
    gamma = gamma_z / scale[nom][:, None] / kappa
    b = (b_z - (center[nom] / scale[nom]) @ gamma_z + (center[loc] / scale[loc]) @ beta_z) / kappa
    return jnp.concatenate([coef, b, gamma.ravel(), zeta])


def _columns_of(result) -> CLMColumns:
    return CLMColumns(result.location, result.nominal, result.scale_columns)


class _ProxState(NamedTuple):
    eta: jax.Array
    value: jax.Array  # F(eta), the penalised objective being minimised
    grad: jax.Array  # gradient of its smooth part
    hess: jax.Array  # Hessian of its smooth part
    n_iter: jax.Array
    done: jax.Array
    status: jax.Array


def _prox_newton(smooth, eta0, lam, rtol, max_iter, max_sweeps=200):
    """Minimise ``F = smooth(eta) + sum_j lam_j |eta_j|`` by proximal Newton steps.

    Each step minimises the quadratic model of ``smooth`` (its gradient and its saddle-free
    Hessian, :func:`bayesord._laplace.saddle_free_precision`) plus the L1 term by cyclic
    coordinate descent (soft thresholding, as glmnet's inner loop), then halves the step
    until ``F`` decreases by Armijo's rule on the step's predicted decrease ``Delta = g^T d +
    sum lam (|eta + d| - |eta|)``; it stops when ``-Delta <= rtol (1 + |F|)`` (Lee, Sun and
    Saunders, "Proximal Newton-type methods for minimizing composite functions", SIAM J.
    Optim. 24, 2014, Algorithm 1).

    Returns:
        (eta, hessian of ``smooth`` at eta, n_iter, converged, status).
    """
    dtype = eta0.dtype
    m = eta0.shape[0]

    def total(eta):
        return smooth(eta) + jnp.sum(lam * jnp.abs(eta))

    def derivatives(eta):
        grad, hvp = jax.linearize(jax.grad(smooth), eta)
        hess = jax.vmap(hvp)(jnp.eye(m, dtype=dtype))
        return grad, 0.5 * (hess + hess.T)

    def direction(eta, g, H):
        diag = jnp.diag(H)

        def coord(j, d):
            b = g[j] + H[j] @ d - diag[j] * d[j]
            u = eta[j] - b / diag[j]
            u = jnp.sign(u) * jnp.maximum(jnp.abs(u) - lam[j] / diag[j], 0.0)
            return d.at[j].set(u - eta[j])

        def sweep(c):
            d, _, k = c
            new = jax.lax.fori_loop(0, m, coord, d)
            return new, jnp.max(jnp.abs(new - d)), k + 1

        def more(c):
            d, change, k = c
            return (k < max_sweeps) & (change > 1e-3 * rtol * (1.0 + jnp.max(jnp.abs(d))))

        d, _, _ = jax.lax.while_loop(more, sweep, sweep((jnp.zeros_like(eta), jnp.inf, 0)))
        return d

    def body(c):
        d = direction(c.eta, c.grad, saddle_free_precision(-c.hess))
        decrease = c.grad @ d + jnp.sum(lam * (jnp.abs(c.eta + d) - jnp.abs(c.eta)))
        finished = -decrease <= rtol * (1.0 + jnp.abs(c.value))

        def shorter(s):
            t, _, k = s
            return 0.5 * t, total(c.eta + 0.5 * t * d), k + 1

        def too_high(s):
            t, v, k = s
            return ~finished & (k < 40) & ~(jnp.isfinite(v) & (v <= c.value + 1e-4 * t * decrease))

        t, value, halvings = jax.lax.while_loop(too_high, shorter, (jnp.ones((), dtype), total(c.eta + d), 0))
        moved = ~finished & jnp.isfinite(value) & (halvings < 40)
        eta = jnp.where(moved, c.eta + t * d, c.eta)
        grad, hess = jax.lax.cond(moved, derivatives, lambda e: (c.grad, c.hess), eta)
        n_iter = c.n_iter + 1
        status = jnp.where(finished, Status.SUCCESS,
                           jnp.where(~moved, Status.LINESEARCH_FAILED,
                                     jnp.where(n_iter >= max_iter, Status.MAX_ITER, Status.SUCCESS)))
        return _ProxState(eta=eta, value=jnp.where(moved, value, c.value), grad=grad, hess=hess, n_iter=n_iter,
                          done=~moved | (n_iter >= max_iter), status=status.astype(jnp.int32))

    grad, hess = derivatives(eta0)
    init = _ProxState(eta=eta0, value=total(eta0), grad=grad, hess=hess, n_iter=jnp.zeros((), jnp.int32),
                      done=jnp.zeros((), bool), status=jnp.asarray(Status.SUCCESS, jnp.int32))
    c = jax.lax.while_loop(lambda c: ~c.done, body, init)
    return c.eta, c.hess, c.n_iter, c.status == Status.SUCCESS, c.status


@partial(jit, static_argnames=("config",))
@checks_codes("y")
def fit_clm(A, y, weights, rtol, columns: CLMColumns, *, config: CLMConfig) -> CLMResult:
    """Fit the cumulative link model (1) by maximum likelihood, with its Laplace posterior.

    With ``config.alpha > 0`` the fit maximises the penalised likelihood (2) instead: Newton's
    method for a ridge penalty, proximal Newton steps (:func:`_prox_newton`) with an L1 part.

    Args:
        A: the design matrix, shape (n, D): every column the location, nominal and scale
            parts use (no intercept column: the thresholds hold it).
        y: classes 0..K-1, shape (n,).
        weights: non-negative sample weights, shape (n,) (zero-weight rows are ignored).
        rtol: relative tolerance of the Newton decrement (e.g. 1e-10 in float64).
        columns: :class:`CLMColumns` (from :func:`clm_columns`): the columns of each part.
        config: :class:`CLMConfig` (static).

    Returns:
        :class:`CLMResult`.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> A = rng.normal(size=(300, 1))
        >>> y = np.digitize(A[:, 0] + rng.normal(size=300) * np.exp(0.5 * A[:, 0]), [-1.0, 1.0])
        >>> res = fit_clm(A, y, np.ones(300), 1e-8, clm_columns(location=[0], scale=[0]),
        ...               config=CLMConfig(n_classes=3))
        >>> bool(res.converged), res.scale_coef.shape
        (True, (1,))
    """
    A = jnp.asarray(A)
    dtype = floating_dtype(A.dtype)
    A = A.astype(dtype)
    y = jnp.asarray(y, jnp.int32)
    weights = jnp.asarray(weights, dtype)
    rtol = jnp.asarray(rtol, dtype)
    cols = CLMColumns(*(jnp.asarray(c, jnp.int32) for c in columns))
    d, p, r = (c.shape[0] for c in cols)
    k1 = config.n_classes - 1
    link = config.link
    center, scale = center_and_scale(A, weights)
    # Zero-weight rows (padding among them) sit at the column means, where the thresholds are
    # ordered, so no non-finite value reaches the derivatives through them.
    Az = jnp.where(weights[:, None] > 0, (A - center) / scale, 0.0)
    b0 = initial_thresholds(y, weights, config.n_classes, config.link, dtype)
    theta0 = jnp.concatenate([b0[:1], jnp.log(jnp.diff(b0))])
    eta0 = jnp.concatenate([jnp.zeros(d, dtype), theta0, jnp.zeros(p * k1 + r, dtype)])

    # The penalty (2), in units of the log-likelihood: W alpha on the mean log-likelihood.
    located = jnp.arange(eta0.shape[0]) < d
    total_weight = jnp.sum(weights)
    lam1 = jnp.where(located, total_weight * config.alpha * config.l1_ratio, 0.0).astype(dtype)
    lam2 = jnp.where(located, total_weight * config.alpha * (1.0 - config.l1_ratio), 0.0).astype(dtype)

    def penalised(eta):
        return _loglik(eta, Az, y, weights, cols, link, k1) - 0.5 * jnp.sum(lam2 * eta * eta)

    if config.l1:
        eta, smooth_hess, n_iter, converged, status = _prox_newton(lambda e: -penalised(e), eta0, lam1, rtol,
                                                                    config.max_newton)
        hess = -smooth_hess
    else:
        eta, _, hess, _, n_iter, converged, status = maximise_exact(
            lambda e, v: (penalised(e), (v, jnp.ones((), bool))), eta0, jnp.zeros((0,), dtype), rtol,
            config.max_newton)
    value = _loglik(eta, Az, y, weights, cols, link, k1)
    # The Laplace posterior, given which coefficients the L1 part set to zero: those are
    # held at 0 (their rows and columns of the covariance are 0).
    free = (lam1 == 0) | (eta != 0)
    both = free[:, None] & free[None, :]
    eye = jnp.eye(eta.shape[0], dtype=dtype)
    L, chol_ok = safe_cholesky(jnp.where(both, -hess, eye))
    eta_cov = jnp.where(both, jax.scipy.linalg.cho_solve((L, True), eye), 0.0)
    status = jnp.where(chol_ok | (status != Status.SUCCESS), status, Status.NOT_POSITIVE_DEFINITE)
    status = jnp.where(jnp.isfinite(value), status, Status.NONFINITE)

    _, B, _ = _latent(eta, Az, cols, k1)
    crossed = jnp.any(jnp.diff(B, axis=1) <= 0, axis=1) & (weights > 0)

    return CLMResult(
        config=config, location=cols.location, nominal=cols.nominal, scale_columns=cols.scale, center=center,
        scale=scale, eta=eta, eta_cov=eta_cov, loglik=value, n_crossed=jnp.sum(crossed).astype(jnp.int32),
        n_iter=n_iter, converged=converged & chol_ok, status=status.astype(jnp.int32),
        **_user_parameters(eta, eta_cov, center, scale, cols, k1))


def _user_parameters(eta, eta_cov, center, scale, cols: CLMColumns, k1):
    """The result's parameters on the user's columns, ``coef``, ``thresholds``,
    ``nominal_coef``, ``scale_coef``, and their covariance ``cov`` (delta method)."""
    d, p = cols.location.shape[0], cols.nominal.shape[0]
    J = jax.jacfwd(_natural)(eta, center, scale, cols, k1)
    nat = _natural(eta, center, scale, cols, k1)
    return dict(coef=nat[:d], thresholds=nat[d:d + k1], nominal_coef=nat[d + k1:d + k1 + p * k1].reshape(p, k1),
                scale_coef=nat[d + k1 + p * k1:], cov=J @ eta_cov @ J.T)


@jit
def clm_parameters_at(result: CLMResult, center) -> dict:
    """``result``'s parameters on the user's columns had it been centred at ``center``
    (:func:`bayesord._columns.restore_offsets`)."""
    return _user_parameters(result.eta, result.eta_cov, jnp.asarray(center, result.eta.dtype), result.scale,
                            _columns_of(result), result.config.n_classes - 1)


# --------------------------------------------------------------------- predictions
def _standardised(result: CLMResult, A):
    return (jnp.asarray(A, result.eta.dtype) - result.center) / result.scale


@jit
def predict_clm(result: CLMResult, A) -> CLMPrediction:
    """Predictive class probabilities of rows ``A`` (the design matrix's columns).

    The posterior of ``eta`` is integrated (see the module docstring); where the thresholds
    of a row cross, the classes between them get probability 0
    (:func:`bayesord._likelihood.log_class_probs` keeps the cumulative ones monotone).
    """
    config = result.config
    cols, k1 = _columns_of(result), config.n_classes - 1
    Az = _standardised(result, A)
    margin = _margins(result.eta, Az, cols, k1)
    grad = jax.jacfwd(_margins)(result.eta, Az, cols, k1)  # (n, K-1, m)
    var = jnp.einsum("nkm,ml,nkl->nk", grad, result.eta_cov, grad)
    zero = jnp.zeros(margin.shape[:1], margin.dtype)
    log_p, log_cum = log_predictive_probs(zero, jnp.maximum(var, 0.0), jnp.ones((), margin.dtype), margin,
                                          config.link)
    return CLMPrediction(margin=margin, margin_var=var, proba=jnp.exp(log_p), cum_proba=jnp.exp(log_cum),
                         log_proba=log_p)


def _plugin_proba(eta, Az, result):
    a = _margins(eta, Az, _columns_of(result), result.config.n_classes - 1)
    one = jnp.ones(a.shape[:1], a.dtype)
    return jnp.exp(log_class_probs(jnp.zeros_like(one), one, a, result.config.link))


@partial(jit, static_argnames=("n_draws",))
def sample_class_probs_clm(result: CLMResult, A, key, *, n_draws: int = 200):
    """Class probabilities under ``n_draws`` draws of ``eta`` from its Laplace posterior,
    shape (n_draws, n, K): their spread is the posterior uncertainty of the probabilities."""
    Az = _standardised(result, A)
    L, ok = safe_cholesky(result.eta_cov)
    L = jnp.where(ok, L, jnp.nan)  # a failed factorisation shows as NaN draws, never as zeros
    e = jax.random.normal(key, (n_draws, result.eta.shape[0]), result.eta.dtype) @ L.T
    return jax.vmap(lambda e_s: _plugin_proba(result.eta + e_s, Az, result))(e)


@jit
def marginal_effects_clm(result: CLMResult, A, discrete, values=None):
    """Average marginal effects of each column of ``A`` on the class probabilities and the
    expected class, with delta-method sds (:func:`bayesord._effects.average_marginal_effects`).

    A column's effect goes through every part of (1) it is in: its location coefficient, its
    threshold shifts and its scale coefficient.  ``values``: the value of each class in the
    expected class, shape (K,) (None: 0..K-1).

    Returns:
        (effects, sds), each of shape (D, K + 1).
    """
    def proba(eta, A_rows):
        return _plugin_proba(eta, _standardised(result, A_rows), result)

    return average_marginal_effects(proba, result.eta, result.eta_cov, A, discrete, values)
