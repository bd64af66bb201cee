"""Ordinal mixed models: a random intercept per group, integrated out by the Laplace approximation.

Model (the cumulative link mixed model of R's ``ordinal::clmm``; Christensen, "A tutorial on
fitting cumulative link mixed models with clmm2", and Agresti, *Analysis of Ordinal
Categorical Data*, Section 10.2):

    P(y_i <= k | u) = F(b_k - x_i^T beta - u_{g(i)}),   u_j ~ N(0, tau^2) independently,

for the ``q`` levels ``j`` of one grouping factor, ``F`` the link's CDF.  Writing
``u = tau v`` with ``v ~ N(0, I)`` (the parametrisation ``clmm`` uses), the marginal
likelihood ``L(beta, b, tau) = int p(y | beta, b, tau v) N(v; 0, I) dv`` is approximated by
Laplace's method at the conditional mode ``v*`` of ``h(v) = l(beta, b, tau v) - |v|^2 / 2``:

    log L ~= l(beta, b, tau v*) - |v*|^2 / 2 - 1/2 log|D|,   D = I + tau^2 Z^T W Z,   (1)

``W = diag(w_i * -d^2 log P_i / d f_i^2)`` (the observed information of each row's latent
value, ``w_i`` its sample weight) and ``Z`` the (n, q) indicator of the groups.  With one
grouping factor ``D`` is diagonal, ``D_jj = 1 + tau^2 sum_{i in j} W_ii``, so ``v*`` is found
group by group (a vectorised one-dimensional Newton solve) and ``log|D|`` is a sum: nothing of
size ``q^2`` is ever formed.  (1) is maximised over ``eta = (beta, theta, tau)`` (``theta`` the
thresholds' first value and log gaps, :mod:`bayesord._thresholds`) by Newton's method with the
exact Hessian of (1); its derivatives through ``v*`` come from the implicit function theorem,
``dv*/deta = D^{-1} d(grad_v h)/deta``.  ``tau`` enters (1) only through ``tau^2``, so it is
optimised unconstrained and ``|tau|`` reported: a group variance of zero is an ordinary point
(the fixed-effects model, ``clm``), not a boundary of the parameter space.

**Posterior.**  The Laplace approximation of the posterior of ``eta`` under a flat prior is
``N(eta*, Sigma)``, ``Sigma`` the inverse of minus the Hessian of (1) (the covariance
``clmm`` reports).  A group's effect given ``eta`` is ``N(tau v*_j, tau^2 / D_jj)`` (``clmm``'s
conditional modes and variances); its total variance adds the uncertainty of ``eta``
propagated through ``tau v*_j(eta)`` (delta method), and so does its covariance with ``eta``.

**Predictions.**  For a row of a known group ``j`` the margin ``a_k = b_k - x^T beta - u_j``
is Gaussian to first order with mean ``a*_k`` and variance ``s_k^2`` from the joint
Gaussian above, so ``P(y <= k) = E F(a_k) = Phi(a*_k / sqrt(1 + s_k^2))``, exact for the
probit (the probit approximation for the logit, quadrature for the other links:
:func:`bayesord._likelihood.log_predictive_probs`).  For a new
group ``u ~ N(0, tau^2)`` replaces the group's posterior: ``s_k^2 = Var(b_k - x^T beta) +
tau^2`` (the group variance at its estimate; the posterior draws of
:func:`sample_class_probs_mixed` include its uncertainty too).

Columns are standardised inside the fit (:func:`bayesord._columns.center_and_scale`), as
in the probit; coefficients and thresholds are reported on the user's scale, thresholds at
``x = 0`` as ``clm``/``clmm`` report them.
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
from ._likelihood import log_class_probs, log_predictive_probs, ordinal_ratios, terms_from_ratios
from ._laplace import maximise_exact
from ._linalg import safe_cholesky
from ._links import check_link
from ._mesh import partitioned
from ._results import result_type
from ._status import Status
from ._thresholds import initial_thresholds, thresholds_from_params, thresholds_jacobian

__all__ = [
    "MixedConfig",
    "MixedResult",
    "MixedPrediction",
    "fit_mixed",
    "predict_mixed",
    "sample_class_probs_mixed",
    "marginal_effects_mixed",
]

_INITIAL_TAU = 0.5  # the group sd the search starts from, in units of the latent noise sd


@dataclasses.dataclass(frozen=True)
class MixedConfig:
    """Static configuration of :func:`fit_mixed` (hashable).

    Attributes:
        n_classes: K, the number of ordered classes.
        n_groups: q, the number of levels of the grouping factor.
        link: any of :data:`bayesord._links.LINKS` ("probit", "logit", "cloglog",
            "loglog", "cauchit").
        max_newton: cap on Newton iterations of the outer maximisation of (1).
        max_inner: cap on Newton iterations of each conditional-mode solve.
    """

    n_classes: int
    n_groups: int
    link: str = "probit"
    max_newton: int = 100
    max_inner: int = 50

    def __post_init__(self):
        check_link(self.link)
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be at least 2, got {self.n_classes}")
        if self.n_groups < 1:
            raise ValueError(f"n_groups must be at least 1, got {self.n_groups}")
        if self.max_newton < 1 or self.max_inner < 1:
            raise ValueError("max_newton and max_inner must be at least 1")


@result_type
class MixedResult:
    """A fitted ordinal mixed model (random intercepts for one grouping factor)."""

    config: MixedConfig
    """The static configuration the model was fitted with (the link among it)."""
    coef: jax.Array
    """Fixed effects ``beta`` per unit of the user's columns, shape (d,)."""
    thresholds: jax.Array
    """Thresholds ``b_1 < ... < b_{K-1}`` at ``x = 0`` (as ``clmm`` reports them), (K-1,)."""
    group_sd: jax.Array
    """Standard deviation ``tau`` of the group effects (scalar)."""
    cov: jax.Array
    """Covariance of ``(coef, thresholds, group_sd)``, shape (d + K, d + K): the inverse of
    minus the Hessian of (1), mapped to these parameters by the delta method."""
    center: jax.Array
    """Column offsets the fit was centred at, shape (d,)."""
    scale: jax.Array
    """Column scales the fit was standardised by, shape (d,)."""
    eta: jax.Array
    """The optimum in the fit's own parameters ``(beta_z, theta, tau)``, shape (m,) with
    ``m = d + K``; ``beta_z = scale * coef`` acts on the standardised columns and the
    thresholds ``thresholds_from_params(theta)`` on the centred latent."""
    eta_cov: jax.Array
    """Laplace covariance of ``eta``, shape (m, m)."""
    effects: jax.Array
    """Conditional modes of the group effects ``u_j = tau v*_j``, shape (q,)."""
    effects_cond_var: jax.Array
    """Their variances given ``eta``, ``tau^2 / D_jj`` (``clmm``'s ``condVar``), shape (q,)."""
    effects_var: jax.Array
    """Their posterior variances: ``effects_cond_var`` plus the part propagated from ``eta``, (q,)."""
    effects_cross: jax.Array
    """Covariance of each group effect with ``eta``, shape (q, m)."""
    loglik: jax.Array
    """The Laplace approximation (1) of the marginal log-likelihood at the optimum."""
    n_iter: jax.Array
    """Newton iterations of the outer maximisation."""
    converged: jax.Array
    """Whether the outer and the last inner solves met their tolerances."""
    status: jax.Array
    """A :class:`bayesord._status.Status` code."""


class MixedPrediction(NamedTuple):
    """Predictive distribution of new rows."""

    mean: jax.Array
    """Mean of the centred latent ``(x - center)^T beta + u_g``, shape (n,) (``u_g = 0`` for
    a new group)."""
    margin_var: jax.Array
    """Variance of each margin ``b_k - latent``, shape (n, K-1) (the group variance
    included for new groups)."""
    proba: jax.Array
    """Class probabilities, shape (n, K)."""
    cum_proba: jax.Array
    """Cumulative probabilities ``P(y <= k)``, k < K-1, shape (n, K-1)."""


# ----------------------------------------------------------------------- the model
def _unpack(eta, d):
    """``(beta_z, b, tau)`` from ``eta = (beta_z, theta, tau)``; ``b`` of the centred latent."""
    return eta[:d], thresholds_from_params(eta[d:-1]), eta[-1]


def _group_terms(v, eta, Z, y, groups, weights, link, q):
    """Per-group value, gradient and curvature of ``h(v) = l(tau v) - |v|^2/2`` (all (q,))."""
    beta, b, tau = _unpack(eta, Z.shape[1])
    f = Z @ beta + tau * v[groups]
    sigma = jnp.ones((), f.dtype)
    r = ordinal_ratios(f, y, b, sigma, link)
    t = terms_from_ratios(f, y, b, sigma, *r, link)
    value = jax.ops.segment_sum(weights * r[0], groups, q) - 0.5 * v * v
    grad = tau * jax.ops.segment_sum(weights * t.d_f, groups, q) - v
    info = jax.ops.segment_sum(-weights * t.d_ff, groups, q)
    return value, grad, 1.0 + tau * tau * info


def _solve_modes(eta, Z, y, groups, weights, v0, rtol, link, q, max_iter):
    """Conditional modes ``v*`` by Newton's method, every group at once.

    ``h`` is a sum of one concave function per group, so each group takes its own step with
    its own backtracking (Armijo) on its own value.  The loop stops when every step is below
    ``sqrt(rtol) (1 + |v|)``; one last full step then brings ``v`` to about ``rtol`` (the
    quadratic convergence of Newton's method), as the implicit derivatives need.

    Returns:
        (v, n_iter, converged).
    """
    dtype = v0.dtype

    def evaluate(v):
        return _group_terms(v, eta, Z, y, groups, weights, link, q)

    def small(step, v):
        return jnp.abs(step) <= jnp.sqrt(rtol) * (1.0 + jnp.abs(v))

    def cond(c):
        v, _, grad, prec, _, it = c
        return (it < max_iter) & ~jnp.all(small(grad / prec, v))

    def body(c):
        v, value, grad, prec, t, it = c
        step = grad / prec
        trial = v + t * step
        value_t, grad_t, prec_t = evaluate(trial)
        ok = jnp.isfinite(value_t) & (value_t >= value + 1e-4 * t * grad * step)
        v, value, grad, prec = (jnp.where(ok, a, b) for a, b in
                                ((trial, v), (value_t, value), (grad_t, grad), (prec_t, prec)))
        t = jnp.where(ok, 1.0, 0.5 * t).astype(dtype)
        return v, value, grad, prec, t, it + 1

    value, grad, prec = evaluate(v0)
    init = (v0, value, grad, prec, jnp.ones_like(v0), jnp.zeros((), jnp.int32))
    v, value, grad, prec, _, it = jax.lax.while_loop(cond, body, init)
    step = grad / prec
    converged = jnp.all(small(step, v) & jnp.isfinite(value))
    return v + step, it, converged


@partial(jax.custom_jvp, nondiff_argnums=(7, 8, 9))
def _modes(eta, Z, y, groups, weights, v0, rtol, link, q, max_iter):
    """``v*(eta)``, differentiable in ``eta`` by the implicit function theorem."""
    return _solve_modes(eta, Z, y, groups, weights, v0, rtol, link, q, max_iter)


@_modes.defjvp
def _modes_jvp(link, q, max_iter, primals, tangents):
    eta, Z, y, groups, weights, v0, rtol = primals
    v, it, ok = _modes(eta, Z, y, groups, weights, v0, rtol, link, q, max_iter)
    # grad_v h(v*(eta), eta) = 0, so dv* = D^{-1} d(grad_v h)/deta . deta (D diagonal).
    _, dgrad = jax.jvp(lambda e: _group_terms(v, e, Z, y, groups, weights, link, q)[1],
                       (eta,), (tangents[0],))
    prec = _group_terms(v, eta, Z, y, groups, weights, link, q)[2]
    zero_int = np.zeros((), dtype=jax.dtypes.float0)
    return (v, it, ok), (dgrad / prec, zero_int, zero_int)


def _laplace_loglik(eta, Z, y, groups, weights, v0, rtol, link, q, max_iter):
    """The Laplace approximation (1) and the conditional modes it was taken at."""
    v, it, ok = _modes(eta, Z, y, groups, weights, jax.lax.stop_gradient(v0), rtol, link, q, max_iter)
    beta, b, tau = _unpack(eta, Z.shape[1])
    f = Z @ beta + tau * v[groups]
    sigma = jnp.ones((), f.dtype)
    r = ordinal_ratios(f, y, b, sigma, link)
    d_ff = terms_from_ratios(f, y, b, sigma, *r, link).d_ff
    log_det = jnp.sum(jnp.log1p(tau * tau * jax.ops.segment_sum(-weights * d_ff, groups, q)))
    value = jnp.sum(weights * r[0]) - 0.5 * jnp.sum(v * v) - 0.5 * log_det
    return value, (v, ok)


@partial(jax.jit, static_argnames=("config",))
@partitioned
def fit_mixed(X, y, groups, weights, rtol, *, config: MixedConfig) -> MixedResult:
    """Fit the random-intercept ordinal model by maximising the Laplace likelihood (1).

    Args:
        X: fixed-effect columns, shape (n, d) (no intercept column: the thresholds hold it;
            d may be 0).
        y: classes 0..K-1, shape (n,).
        groups: the group of each row, integers 0..q-1, shape (n,).
        weights: non-negative sample weights, shape (n,).
        rtol: relative tolerance of the Newton solves (e.g. 1e-10 in float64).
        config: :class:`MixedConfig` (static).

    Returns:
        :class:`MixedResult`.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> g = np.repeat(np.arange(20), 10)
        >>> x = rng.normal(size=(200, 1))
        >>> f = x[:, 0] + rng.normal(size=20)[g] + rng.normal(size=200)
        >>> y = np.digitize(f, [-1.0, 1.0]).astype("int32")
        >>> res = fit_mixed(x, y, g, np.ones(200), 1e-8,
        ...                 config=MixedConfig(n_classes=3, n_groups=20))
        >>> bool(res.converged)
        True
    """
    X = jnp.asarray(X)
    dtype = X.dtype if jnp.issubdtype(X.dtype, jnp.floating) else jnp.result_type(float)
    X = X.astype(dtype)
    y = jnp.asarray(y, jnp.int32)
    groups = jnp.asarray(groups, jnp.int32)
    weights = jnp.asarray(weights, dtype)
    rtol = jnp.asarray(rtol, dtype)
    d = X.shape[1]
    q, link, k1 = config.n_groups, config.link, config.n_classes - 1
    center, scale = center_and_scale(X, weights)
    Z = (X - center) / scale
    b0 = initial_thresholds(y, weights, config.n_classes, link, dtype)
    theta0 = jnp.concatenate([b0[:1], jnp.log(jnp.diff(b0))])
    eta0 = jnp.concatenate([jnp.zeros(d, dtype), theta0, jnp.full((1,), _INITIAL_TAU, dtype)])
    args = (Z, y, groups, weights)

    def objective(eta, v0):
        return _laplace_loglik(eta, *args, v0, rtol, link, q, config.max_inner)

    eta, value, hess, v, n_iter, converged, status = maximise_exact(objective, eta0, jnp.zeros(q, dtype),
                                                               rtol, config.max_newton)
    # The Laplace posterior of eta: minus the Hessian must be positive definite there.
    L, chol_ok = safe_cholesky(-hess)
    eye = jnp.eye(eta.shape[0], dtype=dtype)
    eta_cov = jax.scipy.linalg.cho_solve((L, True), eye)
    status = jnp.where(chol_ok | (status != Status.SUCCESS), status, Status.NOT_POSITIVE_DEFINITE)

    # Group effects u = tau v*(eta): conditional variance tau^2 / D_jj plus the part of
    # eta's uncertainty that reaches them (delta method).
    tau = eta[-1]
    # dv*/deta = D^{-1} d(grad_v h)/deta at v* (the implicit function theorem, as in _modes).
    prec = _group_terms(v, eta, *args, link, q)[2]
    dv = jax.jacfwd(lambda e: _group_terms(v, e, *args, link, q)[1])(eta) / prec[:, None]
    du = tau * dv + jnp.outer(v, jnp.zeros_like(eta).at[-1].set(1.0))
    cross = du @ eta_cov
    cond_var = tau * tau / prec
    effects_var = jnp.sum(cross * du, axis=1) + cond_var

    def natural(e):
        beta_z, b, t = _unpack(e, d)
        coef = beta_z / scale
        return jnp.concatenate([coef, b + center @ coef, jnp.abs(t)[None]])

    J = jax.jacfwd(natural)(eta)
    nat = natural(eta)
    status = jnp.where(jnp.isfinite(value), status, Status.NONFINITE)
    return MixedResult(
        config=config, coef=nat[:d], thresholds=nat[d:d + k1], group_sd=nat[-1],
        cov=J @ eta_cov @ J.T, center=center, scale=scale, eta=eta, eta_cov=eta_cov,
        effects=tau * v, effects_cond_var=cond_var, effects_var=effects_var, effects_cross=cross, loglik=value,
        n_iter=n_iter, converged=converged & chol_ok,
        status=status.astype(jnp.int32))


# --------------------------------------------------------------------- predictions
def _margin_moments(result: MixedResult, X, groups):
    """Mean latent (n,), thresholds of the centred latent (K-1,) and ``Var(b_k - latent)``
    (n, K-1) for rows ``X`` in groups ``groups`` (-1: a new group)."""
    eta, cov = result.eta, result.eta_cov
    d = result.coef.shape[0]
    Z = (jnp.asarray(X, eta.dtype) - result.center) / result.scale
    beta_z, b, tau = _unpack(eta, d)
    known = groups >= 0
    g = jnp.where(known, groups, 0)
    u = jnp.where(known, result.effects[g], 0.0)
    # d(b_k - z^T beta_z)/d eta, shape (n, K-1, m): -z for beta_z, the threshold Jacobian
    # for theta, 0 for tau.
    Jb = thresholds_jacobian(eta[d:-1])
    n, k1 = Z.shape[0], b.shape[0]
    grad = jnp.concatenate([jnp.broadcast_to(-Z[:, None, :], (n, k1, d)),
                            jnp.broadcast_to(Jb[None], (n, k1, k1)),
                            jnp.zeros((n, k1, 1), eta.dtype)], axis=2)
    fixed_var = jnp.einsum("nkm,ml,nkl->nk", grad, cov, grad)
    # Known group: Var(a - u_j) = Var(a) - 2 Cov(a, u_j) + Var(u_j); new group: + tau^2.
    cross = jnp.einsum("nkm,nm->nk", grad, result.effects_cross[g])
    known_var = fixed_var - 2.0 * cross + result.effects_var[g][:, None]
    margin_var = jnp.where(known[:, None], known_var, fixed_var + tau * tau)
    return Z @ beta_z + u, b, jnp.maximum(margin_var, 0.0)


@jax.jit
def predict_mixed(result: MixedResult, X, groups) -> MixedPrediction:
    """Predictive class probabilities of rows ``X`` in groups ``groups``.

    Args:
        result: a :class:`MixedResult`.
        X: fixed-effect columns, shape (n, d), on the scale the model was fitted on.
        groups: each row's group code 0..q-1, or -1 for a group the fit has not seen
            (integrated over the group distribution ``N(0, tau^2)``), shape (n,).

    Returns:
        :class:`MixedPrediction`; see the module docstring for the formulas.
    """
    link = result.config.link
    groups = jnp.asarray(groups, jnp.int32)
    mean, b, margin_var = _margin_moments(result, X, groups)
    log_p, log_cum = log_predictive_probs(mean, margin_var, jnp.ones((), mean.dtype), b, link)
    return MixedPrediction(mean=mean, margin_var=margin_var, proba=jnp.exp(log_p),
                           cum_proba=jnp.exp(log_cum))


@partial(jax.jit, static_argnames=("n_draws",))
def sample_class_probs_mixed(result: MixedResult, X, groups, key, *, n_draws: int = 200):
    """Class probabilities under posterior draws, shape (n_draws, n, K).

    Each draw takes ``eta`` from its Laplace posterior and each row's group effect from
    its conditional Gaussian given that ``eta`` (the joint Gaussian of the module docstring);
    a row of a new group (code -1) gets the probabilities integrated over ``N(0, tau_s^2)``
    with the drawn ``tau_s`` (:func:`bayesord._likelihood.log_predictive_probs`).
    Their spread is the posterior uncertainty of the class probabilities.
    """
    link = result.config.link
    eta, cov = result.eta, result.eta_cov
    d = result.coef.shape[0]
    Z = (jnp.asarray(X, eta.dtype) - result.center) / result.scale
    groups = jnp.asarray(groups, jnp.int32)
    known = groups >= 0
    g = jnp.where(known, groups, 0)
    L, ok = safe_cholesky(cov)
    L = jnp.where(ok, L, jnp.nan)  # a failed factorisation shows as NaN draws, never as zeros
    k_eta, k_u = jax.random.split(key)
    e = jax.random.normal(k_eta, (n_draws, eta.shape[0]), eta.dtype) @ L.T
    # u_j | eta = u*_j + C_j Sigma^{-1} (eta - eta*) + N(0, Var(u_j) - C_j Sigma^{-1} C_j^T).
    C = result.effects_cross[g]
    gain = jax.scipy.linalg.cho_solve((L, True), C.T).T  # (n, m)
    cond_var = jnp.maximum(result.effects_var[g] - jnp.sum(gain * C, axis=1), 0.0)
    eps = jax.random.normal(k_u, (n_draws, Z.shape[0]), eta.dtype)
    one = jnp.ones((), eta.dtype)

    def one_draw(e_s, eps_s):
        beta_z, b, tau = _unpack(eta + e_s, d)
        u = result.effects[g] + gain @ e_s + jnp.sqrt(cond_var) * eps_s
        mean = Z @ beta_z + jnp.where(known, u, 0.0)
        var = jnp.where(known, 0.0, tau * tau)
        return jnp.exp(log_predictive_probs(mean, var, one, b, link)[0])

    return jax.vmap(one_draw)(e, eps)


# ------------------------------------------------------------------- marginal effects
def _plugin_proba(eta, result: MixedResult, X, groups):
    """Class probabilities at ``eta`` with each row's group effect at its conditional mode
    (0 for a new group), shape (n, K)."""
    d = result.coef.shape[0]
    beta_z, b, _ = _unpack(eta, d)
    Z = (X - result.center) / result.scale
    known = groups >= 0
    u = jnp.where(known, result.effects[jnp.where(known, groups, 0)], 0.0)
    one = jnp.ones((Z.shape[0],), eta.dtype)
    return jnp.exp(log_class_probs(Z @ beta_z + u, one, b, result.config.link))


@jax.jit
def marginal_effects_mixed(result: MixedResult, X, groups, discrete):
    """Average marginal effects of each column on the class probabilities and the expected class.

    :func:`bayesord._effects.average_marginal_effects` with the probabilities at ``eta`` and
    each row's group effect at its conditional mode (0 for a new group, code -1: the effect in
    a typical group), and the Laplace posterior of ``eta``.

    Args:
        result: a :class:`MixedResult`.
        X: rows, shape (n, d), on the user's scale.
        groups: group codes, shape (n,) (-1 for a new group).
        discrete: bool, shape (d,): which columns take the 0/1 change.

    Returns:
        (effects, sds), each of shape (d, K + 1).
    """
    groups = jnp.asarray(groups, jnp.int32)
    return average_marginal_effects(lambda eta, Xs: _plugin_proba(eta, result, Xs, groups),
                                    result.eta, result.eta_cov, X, discrete)
