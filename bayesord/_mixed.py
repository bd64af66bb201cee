"""Ordinal mixed models: random intercepts and slopes per group, integrated out by the Laplace approximation.

Model (the cumulative link mixed model of R's ``ordinal::clmm``; Christensen, "A tutorial on
fitting cumulative link mixed models with clmm2", and Agresti, *Analysis of Ordinal
Categorical Data*, Section 10.2):

    P(y_i <= k | u) = F(b_k - x_i^T beta - r_i^T u_{g(i)}),   u_j ~ N(0, Sigma) independently,

for the ``q`` levels ``j`` of a grouping factor, ``F`` the link's CDF and ``r_i`` the row's
random-effects design: ``1`` (a random intercept) followed by the columns of ``x_i`` whose
slopes vary by group (``(1 + x | g)`` in a formula), ``p`` entries in all.  Writing
``u = Lambda v`` with ``v ~ N(0, I_p)`` and ``Lambda`` lower triangular, ``Sigma = Lambda
Lambda^T`` (the parametrisation ``clmm`` and ``lme4`` use), the marginal likelihood
``L(beta, b, Lambda) = int p(y | beta, b, Lambda v) N(v; 0, I) dv`` is approximated by Laplace's
method at the conditional mode ``v*`` of ``h(v) = l(beta, b, Lambda v) - |v|^2 / 2``:

    log L ~= l(beta, b, Lambda v*) - |v*|^2 / 2 - 1/2 log|D|,   D = I + Lambda^T Z^T W Z Lambda,   (1)

``W = diag(w_i * -d^2 log P_i / d f_i^2)`` (the observed information of each row's latent
value, ``w_i`` its sample weight) and ``Z`` the (n, q p) random-effects design (row ``i``
holds ``r_i`` in the block of its group).  With one grouping factor ``D`` is block diagonal,
``D_j = I + Lambda^T (sum_{i in j} W_ii r_i r_i^T) Lambda`` of size p x p, so ``v*`` is found
group by group (a vectorised p-dimensional Newton solve) and ``log|D|`` is a sum: nothing of
size ``q^2`` is ever formed.  (1) is maximised over ``eta = (beta, theta, lambda)``
(``theta`` the thresholds' first value and log gaps, :mod:`bayesord._thresholds`;
``lambda`` the ``p (p + 1) / 2`` entries of ``Lambda`` row by row) by Newton's method with
the exact Hessian of (1); its derivatives through ``v*`` come from the implicit function
theorem, ``dv*/deta = D^{-1} d(grad_v h)/deta``.  Flipping the sign of a column of
``Lambda`` leaves ``Sigma`` unchanged, so ``lambda`` is optimised unconstrained: a group
variance of zero is an ordinary point (the fixed-effects model, ``clm``), not a boundary.

**Posterior.**  The Laplace approximation of the posterior of ``eta`` under a flat prior is
``N(eta*, Sigma_eta)``, ``Sigma_eta`` the inverse of minus the Hessian of (1) (the
covariance ``clmm`` reports).  A group's effect given ``eta`` is ``N(Lambda v*_j, Lambda
D_j^{-1} Lambda^T)`` (``clmm``'s conditional modes and variances); its total covariance adds
the uncertainty of ``eta`` propagated through ``Lambda v*_j(eta)`` (delta method), and so
does its covariance with ``eta``.

**Several grouping factors** (crossed, as judges and bottles, or nested), each with a random
intercept ``u_r ~ N(0, tau_r^2 I)``: the latent value of a row adds one effect per factor, and
``D`` is no longer block diagonal, since two factors' levels are coupled through the rows they
share.  Ordering the effects with the factor of most levels, ``b``, first,
``D = [[A, B], [B^T, C]]`` with ``A`` diagonal (q_b) and ``C`` the other factors' levels
(dense, ``Q - q_b`` square, small when those factors have few levels), and Newton steps,
``log|D| = log|A| + log|S|`` and ``D^{-1}`` come from the Schur complement
``S = C - B^T A^{-1} B``.  Nothing of size ``q_b^2`` is formed; the cost per step is
``O(n + q_b (Q - q_b)^2 + (Q - q_b)^3)``.  The conditional modes then take one joint
backtracking step (the groups are coupled), and a row's predictive variance adds the
covariances between its levels of different factors.

**Predictions.**  For a row of a known group ``j`` the margin ``a_k = b_k - x^T beta - r^T
u_j`` is Gaussian to first order with mean ``a*_k`` and variance ``s_k^2`` from the joint
Gaussian above, so ``P(y <= k) = E F(a_k) = Phi(a*_k / sqrt(1 + s_k^2))``, exact for the
probit (the probit approximation for the logit, quadrature for the other links:
:func:`bayesord._likelihood.log_predictive_probs`).  For a new group ``u ~ N(0, Sigma)``
replaces the group's posterior: ``s_k^2 = Var(b_k - x^T beta) + r^T Sigma r`` (``Sigma`` at its
estimate; the posterior draws of :func:`sample_class_probs_mixed` include its uncertainty
too).

Columns are standardised inside the fit (:func:`bayesord._columns.center_and_scale`), as
in the probit, and the random slopes act on the standardised columns, so the group effects
the fit works with (:attr:`MixedResult.effects`) are intercepts at the columns' centre and
slopes per standardised unit.  Their covariance ``Sigma``, the coefficients and the
thresholds are reported on the user's scale, at ``x = 0`` as ``clm``/``clmm`` report them
(:func:`effects_on_user_scale` maps the group effects there too).  The approximation (1) is
unchanged by this linear change of the effects' coordinates.
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
    "effects_on_user_scale",
]

_INITIAL_SD = 0.5  # the group sds the search starts from, in units of the latent noise sd


@dataclasses.dataclass(frozen=True)
class MixedConfig:
    """Static configuration of :func:`fit_mixed` (hashable).

    Attributes:
        n_classes: K, the number of ordered classes.
        n_groups: q, the number of levels of the grouping factor; for several grouping
            factors (crossed or nested), a tuple with each one's number of levels.
        link: any of :data:`bayesord._links.LINKS` ("probit", "logit", "cloglog",
            "loglog", "cauchit").
        slopes: the columns of ``X`` (indices) whose slopes vary by group, besides the
            random intercept; ``()`` for random intercepts only (always, with several
            grouping factors).
        max_newton: cap on Newton iterations of the outer maximisation of (1).
        max_inner: cap on Newton iterations of each conditional-mode solve.
    """

    n_classes: int
    n_groups: int | tuple
    link: str = "probit"
    slopes: tuple = ()
    max_newton: int = 100
    max_inner: int = 50

    def __post_init__(self):
        check_link(self.link)
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be at least 2, got {self.n_classes}")
        levels = self.n_groups if isinstance(self.n_groups, tuple) else (self.n_groups,)
        if not levels or any(int(q) < 1 for q in levels):
            raise ValueError(f"n_groups must be at least 1 for every grouping factor, got {self.n_groups}")
        if isinstance(self.n_groups, tuple):  # one factor is given as its number of levels
            object.__setattr__(self, "n_groups", tuple(int(q) for q in levels) if len(levels) > 1
                               else int(levels[0]))
        if self.max_newton < 1 or self.max_inner < 1:
            raise ValueError("max_newton and max_inner must be at least 1")
        slopes = tuple(self.slopes)
        if not all(isinstance(j, (int, np.integer)) and j >= 0 for j in slopes):
            raise ValueError(f"slopes must be column indices (non-negative integers), got {self.slopes!r}")
        if len(set(slopes)) != len(slopes):
            raise ValueError(f"slopes names a column twice: {self.slopes!r}")
        if slopes and len(levels) > 1:
            raise ValueError("random slopes go with one grouping factor; with several, each has a "
                             "random intercept only")
        object.__setattr__(self, "slopes", tuple(int(j) for j in slopes))

    @property
    def levels(self):
        """Each grouping factor's number of levels, a tuple."""
        return self.n_groups if isinstance(self.n_groups, tuple) else (self.n_groups,)

    @property
    def n_effects(self):
        """p, the number of group effects per level (the intercept and the slopes)."""
        return 1 + len(self.slopes)

    @property
    def n_cov_params(self):
        """Entries of ``lambda``: ``p (p + 1) / 2`` for one factor, one per factor for several."""
        p = self.n_effects
        return p * (p + 1) // 2 if len(self.levels) == 1 else len(self.levels)


@result_type
class MixedResult:
    """A fitted ordinal mixed model: random intercepts (and slopes) for one grouping factor, or
    random intercepts for several.  With several factors, the group arrays hold every
    factor's levels one factor after the other (in the configuration's order), ``Q = sum q_r``
    rows with ``p = 1``."""

    config: MixedConfig
    """The static configuration the model was fitted with (the link among it)."""
    coef: jax.Array
    """Fixed effects ``beta`` per unit of the user's columns, shape (d,)."""
    thresholds: jax.Array
    """Thresholds ``b_1 < ... < b_{K-1}`` at ``x = 0`` (as ``clmm`` reports them), (K-1,)."""
    group_cov: jax.Array
    """Covariance ``Sigma`` of the group effects on the user's scale (the intercept at
    ``x = 0``, slopes per unit of their columns), shape (p, p); with several factors the
    diagonal matrix of their variances, (R, R)."""
    group_sd: jax.Array
    """Standard deviations of the group effects, ``sqrt(diag(group_cov))``, shape (p,) or (R,)."""
    cov: jax.Array
    """Covariance of ``(coef, thresholds, group_sd, corr)``, shape (d + K - 1 + p + p (p - 1) / 2,)
    squared (``(coef, thresholds, group_sd)`` with several factors): the inverse of minus the
    Hessian of (1), mapped to these parameters by the delta method; ``corr`` are the
    correlations of the group effects below the diagonal, row by row."""
    center: jax.Array
    """Column offsets the fit was centred at, shape (d,)."""
    scale: jax.Array
    """Column scales the fit was standardised by, shape (d,)."""
    eta: jax.Array
    """The optimum in the fit's own parameters ``(beta_z, theta, lambda)``, shape (m,) with
    ``m = d + K - 1 + config.n_cov_params``; ``beta_z = scale * coef`` acts on the standardised
    columns, the thresholds ``thresholds_from_params(theta)`` on the centred latent, and
    ``lambda`` holds ``Lambda`` of the standardised random design row by row (with several
    factors, each factor's sd up to its sign)."""
    eta_cov: jax.Array
    """Laplace covariance of ``eta``, shape (m, m)."""
    effects: jax.Array
    """Conditional modes of the group effects ``u_j = Lambda v*_j`` on the standardised random
    design (intercept at the columns' centre, slopes per standardised unit), shape (q, p)
    ((Q, 1) with several factors)."""
    effects_cond_cov: jax.Array
    """Their covariances given ``eta``, ``Lambda D_j^{-1} Lambda^T`` (``clmm``'s ``condVar``),
    shape (q, p, p)."""
    effects_cov: jax.Array
    """Their posterior covariances: ``effects_cond_cov`` plus the part propagated from ``eta``,
    shape (q, p, p)."""
    effects_cross: jax.Array
    """Covariance of each group effect with ``eta``, shape (q, p, m)."""
    factor_cross_cov: jax.Array
    """With several factors, the posterior covariance between the levels of the factor with
    the most levels (``b``) and those of the others, in their order, shape (q_b, Q - q_b)
    ((q, 0) for one factor)."""
    factor_rest_cov: jax.Array
    """With several factors, the posterior covariance among the levels of all factors but
    ``b``, shape (Q - q_b, Q - q_b) ((0, 0) for one factor)."""
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
    """Mean of the centred latent ``(x - center)^T beta + r^T u_g``, shape (n,) (``u_g = 0``
    for a new group)."""
    margin_var: jax.Array
    """Variance of each margin ``b_k - latent``, shape (n, K-1) (the group covariance
    included for new groups)."""
    proba: jax.Array
    """Class probabilities, shape (n, K)."""
    cum_proba: jax.Array
    """Cumulative probabilities ``P(y <= k)``, k < K-1, shape (n, K-1)."""


# ----------------------------------------------------------------------- the model
def _tril_basis(p, dtype):
    """(p (p + 1) / 2, p, p): ``Lambda = sum_k lambda_k E_k`` for the lower triangle row by row
    (a contraction rather than a scatter, so it traces alike on every mesh)."""
    rows, cols = np.tril_indices(p)
    E = np.zeros((rows.size, p, p))
    E[np.arange(rows.size), rows, cols] = 1.0
    return jnp.asarray(E, dtype)


def _unpack(eta, d, p, n_lam):
    """``(beta_z, b, Lambda)`` from ``eta = (beta_z, theta, lambda)``; ``b`` of the centred latent.

    ``Lambda`` is (p, p) for one factor; with several (``n_lam`` > ``p (p + 1) / 2``, p = 1)
    it is the vector of the factors' ``lambda`` (their sds up to sign), shape (R,)."""
    lam = eta[eta.shape[0] - n_lam:]
    b = thresholds_from_params(eta[d:eta.shape[0] - n_lam])
    if n_lam != p * (p + 1) // 2:
        return eta[:d], b, lam
    return eta[:d], b, jnp.einsum("k,kij->ij", lam, _tril_basis(p, eta.dtype))


def _random_design(Z, slopes):
    """Each row's random-effects design ``r_i = (1, z_i[slopes])``, shape (n, p)."""
    ones = jnp.ones((Z.shape[0], 1), Z.dtype)
    return jnp.concatenate([ones, Z[:, np.asarray(slopes, np.int32)]], axis=1) if slopes else ones


class _Layout(NamedTuple):
    """Where each factor's levels lie in the vector of all effects (static).

    The fit orders the effects with the factor of most levels, ``big``, first, then the
    others in their order (``rest``): ``D`` is then ``[[A, B], [B^T, C]]`` with ``A`` diagonal
    (q_big) and ``C`` dense but small (the other factors' levels).  Results list the factors
    in the configuration's order."""

    levels: tuple
    big: int
    rest: tuple
    offset: tuple       # each factor's first row in the fit's order
    rest_offset: tuple  # each factor's first row within the rest (-1 for big)
    config_offset: tuple  # each factor's first row in the results' order

    @property
    def n_effects(self):
        return sum(self.levels)


def _layout(levels):
    levels = tuple(int(q) for q in (levels if isinstance(levels, tuple) else (levels,)))
    big = int(np.argmax(levels))
    rest = tuple(r for r in range(len(levels)) if r != big)
    offset, rest_offset = [0] * len(levels), [-1] * len(levels)
    at = levels[big]
    for r in rest:
        offset[r], rest_offset[r] = at, at - levels[big]
        at += levels[r]
    config_offset = tuple(int(c) for c in np.r_[0, np.cumsum(levels)[:-1]])
    return _Layout(levels, big, rest, tuple(offset), tuple(rest_offset), config_offset)


def _to_config_order(layout):
    """Indices that take the fit's order of the effects to the results' order."""
    return np.concatenate([np.arange(q) + layout.offset[r] for r, q in enumerate(layout.levels)])


class _Crossed(NamedTuple):
    """``D = [[diag(A), B], [B^T, C]]`` for several factors, with the Schur complement
    ``S = C - B^T diag(A)^{-1} B`` factorised: ``Y = diag(A)^{-1} B``, ``L`` its Cholesky factor."""

    A: jax.Array
    B: jax.Array
    Y: jax.Array
    L: jax.Array


def _group_terms(v, eta, Z, R, y, groups, weights, link, levels):
    """Value, gradient (Q, p) and precision ``D`` of ``h(v) = l(Lambda v) - |v|^2/2``.

    One factor: the value per group (q,) and ``D`` as its blocks ``D_j`` (q, p, p).  Several
    factors: the total value (1,) and ``D`` as :class:`_Crossed`."""
    if not isinstance(levels, tuple) or len(levels) == 1:
        return _block_terms(v, eta, Z, R, y, groups, weights, link, levels)
    return _crossed_terms(v, eta, Z, y, groups, weights, link, _layout(levels))


def _block_terms(v, eta, Z, R, y, groups, weights, link, levels):
    q = levels[0] if isinstance(levels, tuple) else levels
    p = R.shape[1]
    beta, b, Lam = _unpack(eta, Z.shape[1], p, p * (p + 1) // 2)
    RL = R @ Lam  # d f_i / d v_{g(i)}
    f = Z @ beta + jnp.sum(RL * v[groups], axis=1)
    sigma = jnp.ones((), f.dtype)
    r = ordinal_ratios(f, y, b, sigma, link)
    t = terms_from_ratios(f, y, b, sigma, *r, link)
    value = jax.ops.segment_sum(weights * r[0], groups, q) - 0.5 * jnp.sum(v * v, axis=1)
    if p == 1:  # random intercepts: RL is the constant Lambda, so it factors out of the sums
        lam = Lam[0, 0]
        grad = lam * jax.ops.segment_sum(weights * t.d_f, groups, q)[:, None] - v
        info = lam * lam * jax.ops.segment_sum(-weights * t.d_ff, groups, q)[:, None, None]
        return value, grad, 1.0 + info
    grad = jax.ops.segment_sum((weights * t.d_f)[:, None] * RL, groups, q) - v
    info = jax.ops.segment_sum((-weights * t.d_ff)[:, None, None] * RL[:, :, None] * RL[:, None, :],
                               groups, q)
    return value, grad, jnp.eye(p, dtype=f.dtype) + info


def _crossed_terms(v, eta, Z, y, groups, weights, link, layout):
    n_fac = len(layout.levels)
    Q, qb = layout.n_effects, layout.levels[layout.big]
    Q2 = Q - qb
    beta, b, lam = _unpack(eta, Z.shape[1], 1, n_fac)
    idx = [groups[:, r] + layout.offset[r] for r in range(n_fac)]  # each row's level, fit's order
    vv = v[:, 0]
    f = Z @ beta + sum(lam[r] * vv[idx[r]] for r in range(n_fac))
    sigma = jnp.ones((), f.dtype)
    r_ = ordinal_ratios(f, y, b, sigma, link)
    t = terms_from_ratios(f, y, b, sigma, *r_, link)
    value = (jnp.sum(weights * r_[0]) - 0.5 * jnp.sum(vv * vv))[None]
    grad = sum(lam[r] * jax.ops.segment_sum(weights * t.d_f, idx[r], Q) for r in range(n_fac)) - vv
    W = -weights * t.d_ff
    big, rest = layout.big, layout.rest
    A = 1.0 + lam[big] ** 2 * jax.ops.segment_sum(W, groups[:, big], qb)
    rest_idx = {r: groups[:, r] + layout.rest_offset[r] for r in rest}
    B = sum(lam[big] * lam[r] * jax.ops.segment_sum(W, groups[:, big] * Q2 + rest_idx[r], qb * Q2)
            for r in rest).reshape(qb, Q2)
    C = jnp.eye(Q2, dtype=f.dtype) + sum(
        lam[r] * lam[s] * jax.ops.segment_sum(W, rest_idx[r] * Q2 + rest_idx[s], Q2 * Q2)
        for r in rest for s in rest).reshape(Q2, Q2)
    Y = B / A[:, None]
    L = jnp.linalg.cholesky(C - B.T @ Y)  # NaN where D is not positive definite
    return value, grad[:, None], _Crossed(A, B, Y, L)


def _precision_solve(prec, rhs):
    """``D^{-1} rhs`` for rhs (Q, p) or (Q, p, m)."""
    if isinstance(prec, _Crossed):
        shape = rhs.shape
        g = rhs.reshape(shape[0], -1)
        qb = prec.A.shape[0]
        x2 = jax.scipy.linalg.cho_solve((prec.L, True), g[qb:] - prec.Y.T @ g[:qb])
        x1 = (g[:qb] - prec.B @ x2) / prec.A[:, None]
        return jnp.concatenate([x1, x2]).reshape(shape)
    if prec.shape[1] == 1:  # random intercepts: a division (a batch of 1 x 1 factorisations is slower)
        return rhs / prec.reshape(prec.shape[:1] + (1,) * (rhs.ndim - 1))
    L = jnp.linalg.cholesky(prec)  # NaN where a block is not positive definite
    return jax.vmap(lambda Lj, rj: jax.scipy.linalg.cho_solve((Lj, True), rj))(L, rhs)


def _precision_log_det(prec):
    """``log|D|`` (NaN where it is not positive definite)."""
    if isinstance(prec, _Crossed):
        return jnp.sum(jnp.log(prec.A)) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(prec.L)))
    if prec.shape[1] == 1:
        return jnp.sum(jnp.log(prec))
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(prec), axis1=1, axis2=2)))


def _per_unit(x, value):
    """Sum ``x`` (Q, p) over each line-search unit: per group for one factor, in all for several."""
    return jnp.sum(x, axis=1) if value.shape[0] == x.shape[0] else jnp.sum(x)[None]


def _solve_modes(eta, Z, R, y, groups, weights, v0, rtol, link, levels, max_iter):
    """Conditional modes ``v*`` (Q, p) by Newton's method.

    With one factor ``h`` is a sum of one concave function per group, so each group takes
    its own step with its own backtracking (Armijo) on its own value; with several the
    groups are coupled, and one backtracking acts on the whole.  The loop stops when every
    step is below ``sqrt(rtol) (1 + |v|)``; one last full step then brings ``v`` to about
    ``rtol`` (the quadratic convergence of Newton's method), as the implicit derivatives need.

    Returns:
        (v, n_iter, converged).
    """
    dtype = v0.dtype

    def evaluate(v):
        return _group_terms(v, eta, Z, R, y, groups, weights, link, levels)

    def small(step, v):
        return jnp.abs(step) <= jnp.sqrt(rtol) * (1.0 + jnp.abs(v))

    def cond(c):
        v, _, grad, prec, _, it = c
        return (it < max_iter) & ~jnp.all(small(_precision_solve(prec, grad), v))

    def body(c):
        v, value, grad, prec, t, it = c
        step = _precision_solve(prec, grad)
        trial = v + (t[:, None] if t.shape[0] == v.shape[0] else t) * step
        value_t, grad_t, prec_t = evaluate(trial)
        ok = jnp.isfinite(value_t) & (value_t >= value + 1e-4 * t * _per_unit(grad * step, value))

        def keep(new, old):  # per group, or one choice for every array when the groups are coupled
            mask = ok.reshape(ok.shape + (1,) * (new.ndim - 1)) if ok.shape[0] == new.shape[0] else ok[0]
            return jnp.where(mask, new, old)

        v, grad, value = keep(trial, v), keep(grad_t, grad), keep(value_t, value)
        prec = jax.tree_util.tree_map(keep, prec_t, prec)
        t = jnp.where(ok, 1.0, 0.5 * t).astype(dtype)
        return v, value, grad, prec, t, it + 1

    value, grad, prec = evaluate(v0)
    init = (v0, value, grad, prec, jnp.ones(value.shape, dtype), jnp.zeros((), jnp.int32))
    v, value, grad, prec, _, it = jax.lax.while_loop(cond, body, init)
    step = _precision_solve(prec, grad)
    converged = jnp.all(small(step, v)) & jnp.all(jnp.isfinite(value))
    return v + step, it, converged


@partial(jax.custom_jvp, nondiff_argnums=(8, 9, 10))
def _modes(eta, Z, R, y, groups, weights, v0, rtol, link, levels, max_iter):
    """``v*(eta)``, differentiable in ``eta`` by the implicit function theorem."""
    return _solve_modes(eta, Z, R, y, groups, weights, v0, rtol, link, levels, max_iter)


@_modes.defjvp
def _modes_jvp(link, levels, max_iter, primals, tangents):
    eta, Z, R, y, groups, weights, v0, rtol = primals
    v, it, ok = _modes(eta, Z, R, y, groups, weights, v0, rtol, link, levels, max_iter)
    # grad_v h(v*(eta), eta) = 0, so dv* = D^{-1} d(grad_v h)/deta . deta.
    _, dgrad = jax.jvp(lambda e: _group_terms(v, e, Z, R, y, groups, weights, link, levels)[1],
                       (eta,), (tangents[0],))
    prec = _group_terms(v, eta, Z, R, y, groups, weights, link, levels)[2]
    zero_int = np.zeros((), dtype=jax.dtypes.float0)
    return (v, it, ok), (_precision_solve(prec, dgrad), zero_int, zero_int)


def _laplace_loglik(eta, Z, R, y, groups, weights, v0, rtol, link, levels, max_iter):
    """The Laplace approximation (1) and the conditional modes it was taken at."""
    v, it, ok = _modes(eta, Z, R, y, groups, weights, jax.lax.stop_gradient(v0), rtol, link, levels, max_iter)
    values, _, prec = _group_terms(v, eta, Z, R, y, groups, weights, link, levels)
    value = jnp.sum(values) - 0.5 * _precision_log_det(prec)
    return value, (v, ok)


def _user_transform(center, scale, slopes):
    """``T`` (p, p) with ``u_user = T u``: the standardised random design ``(1, (x_s - c_s)/s_s)``
    rewritten as ``(1, x_s)`` (the intercept moves to ``x = 0``)."""
    cols = np.asarray(slopes, np.int32)
    c, s = center[cols], scale[cols]
    top = jnp.concatenate([jnp.ones((1,), center.dtype), -c / s])
    return jnp.concatenate([top[None], jnp.concatenate([jnp.zeros((len(slopes), 1), center.dtype),
                                                        jnp.diag(1.0 / s)], axis=1)], axis=0)


def _sd_and_corr(S):
    """Standard deviations and the correlations below the diagonal of a covariance ``S``, with
    derivative 0 (not NaN) where a variance is 0 (a group variance fitted at zero)."""
    var = jnp.diagonal(S)
    positive = var > 0
    sd = jnp.where(positive, jnp.sqrt(jnp.where(positive, var, 1.0)), 0.0)
    rows, cols = np.tril_indices(S.shape[0], -1)
    both = positive[rows] & positive[cols]
    denom = jnp.where(both, sd[rows] * sd[cols], 1.0)
    return sd, jnp.where(both, S[rows, cols] / denom, 0.0)


def _group_cov(Lam):
    """``Sigma`` of the standardised random design from ``Lambda`` (or, with several factors,
    the vector of their ``lambda``)."""
    return Lam @ Lam.T if Lam.ndim == 2 else jnp.diag(Lam * Lam)


def _effects_posterior(v, eta, eta_cov, args, link, config):
    """The group effects ``u = Lambda v*`` (Q, p), their conditional and total covariances
    (Q, p, p), their covariances with ``eta`` (Q, p, m), and, with several factors, the total
    covariances between levels of different factors (see :class:`MixedResult`)."""
    d, p, n_lam = args[0].shape[1], config.n_effects, config.n_cov_params
    levels = config.n_groups
    prec = _group_terms(v, eta, *args, link, levels)[2]
    # dv*/deta = D^{-1} d(grad_v h)/deta at v* (the implicit function theorem, as in _modes).
    dv = _precision_solve(prec, jax.jacfwd(lambda e: _group_terms(v, e, *args, link, levels)[1])(eta))
    Lam = _unpack(eta, d, p, n_lam)[2]
    if not isinstance(prec, _Crossed):
        q = v.shape[0]
        du = jnp.einsum("ij,qjm->qim", Lam, dv) + jax.jacfwd(lambda e: v @ _unpack(e, d, p, n_lam)[2].T)(eta)
        cross = du @ eta_cov
        cond_cov = Lam @ _precision_solve(prec, jnp.broadcast_to(Lam.T, (q, p, p)))
        effects_cov = jnp.einsum("qim,qjm->qij", cross, du) + cond_cov
        empty = jnp.zeros((q, 0), eta.dtype)
        return v @ Lam.T, cond_cov, effects_cov, cross, empty, jnp.zeros((0, 0), eta.dtype)
    layout = _layout(levels)
    factor_of = np.concatenate([np.full(layout.levels[r], r) for r in (layout.big,) + layout.rest])
    lam_rows = Lam[factor_of]  # each effect's lambda, in the fit's order
    du = lam_rows[:, None] * dv[:, 0] + v * jax.jacfwd(lambda e: _unpack(e, d, 1, n_lam)[2][factor_of])(eta)
    qb = layout.levels[layout.big]
    S_inv = jax.scipy.linalg.cho_solve((prec.L, True), jnp.eye(prec.L.shape[0], dtype=eta.dtype))
    YS = prec.Y @ S_inv
    d_inv = jnp.concatenate([1.0 / prec.A + jnp.sum(YS * prec.Y, axis=1), jnp.diagonal(S_inv)])
    du_cov = du @ eta_cov
    lb, lr = lam_rows[:qb], lam_rows[qb:]
    between_big_rest = -lb[:, None] * YS * lr[None, :] + du_cov[:qb] @ du[qb:].T
    between_rest = lr[:, None] * S_inv * lr[None, :] + du_cov[qb:] @ du[qb:].T
    cond_var = lam_rows**2 * d_inv
    order = _to_config_order(layout)  # the covariances between factors keep the fit's order
    return ((lam_rows * v[:, 0])[order][:, None], cond_var[order][:, None, None],
            (cond_var + jnp.sum(du_cov * du, axis=1))[order][:, None, None], du_cov[order][:, None, :],
            between_big_rest, between_rest)


@partial(jax.jit, static_argnames=("config",))
@partitioned
def fit_mixed(X, y, groups, weights, rtol, *, config: MixedConfig) -> MixedResult:
    """Fit the ordinal mixed model by maximising the Laplace likelihood (1).

    Args:
        X: fixed-effect columns, shape (n, d) (no intercept column: the thresholds hold it;
            d may be 0).  ``config.slopes`` picks the ones whose slopes vary by group.
        y: classes 0..K-1, shape (n,).
        groups: the group of each row, integers 0..q-1, shape (n,); with several factors
            (``config.n_groups`` a tuple), each row's level of each factor, shape (n, R).
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
    n_fac = len(config.levels)
    if groups.shape[1:] != (() if isinstance(config.n_groups, int) else (n_fac,)):
        raise ValueError(f"groups has shape {groups.shape}; config.n_groups={config.n_groups} needs "
                         f"{'(n,)' if isinstance(config.n_groups, int) else f'(n, {n_fac})'}")
    if any(j >= d for j in config.slopes):
        raise ValueError(f"config.slopes {config.slopes} names a column past the {d} columns of X")
    link, k1, p = config.link, config.n_classes - 1, config.n_effects
    n_lam, Q = config.n_cov_params, sum(config.levels)
    center, scale = center_and_scale(X, weights)
    Z = (X - center) / scale
    R = _random_design(Z, config.slopes)
    b0 = initial_thresholds(y, weights, config.n_classes, link, dtype)
    theta0 = jnp.concatenate([b0[:1], jnp.log(jnp.diff(b0))])
    if n_fac == 1:
        lam0 = jnp.einsum("kij,ij->k", _tril_basis(p, dtype), _INITIAL_SD * jnp.eye(p, dtype=dtype))
    else:
        lam0 = jnp.full((n_fac,), _INITIAL_SD, dtype)
    eta0 = jnp.concatenate([jnp.zeros(d, dtype), theta0, lam0])
    args = (Z, R, y, groups, weights)

    def objective(eta, v0):
        return _laplace_loglik(eta, *args, v0, rtol, link, config.n_groups, config.max_inner)

    eta, value, hess, v, n_iter, converged, status = maximise_exact(objective, eta0, jnp.zeros((Q, p), dtype),
                                                                    rtol, config.max_newton)
    # The Laplace posterior of eta: minus the Hessian must be positive definite there.
    L, chol_ok = safe_cholesky(-hess)
    eye = jnp.eye(eta.shape[0], dtype=dtype)
    eta_cov = jax.scipy.linalg.cho_solve((L, True), eye)
    status = jnp.where(chol_ok | (status != Status.SUCCESS), status, Status.NOT_POSITIVE_DEFINITE)
    effects, cond_cov, effects_cov, cross, between_big_rest, between_rest = _effects_posterior(
        v, eta, eta_cov, args, link, config)
    T = _user_transform(center, scale, config.slopes)

    def user_cov(Lam_e):  # Sigma on the user's scale (several factors: intercepts only, unchanged)
        S = _group_cov(Lam_e)
        return T @ S @ T.T if n_fac == 1 else S

    def natural(e):
        beta_z, b, Lam_e = _unpack(e, d, p, n_lam)
        coef = beta_z / scale
        sd, corr = _sd_and_corr(user_cov(Lam_e))
        return jnp.concatenate([coef, b + center @ coef, sd, corr if n_fac == 1 else corr[:0]])

    J = jax.jacfwd(natural)(eta)
    nat = natural(eta)
    n_sd = p if n_fac == 1 else n_fac
    status = jnp.where(jnp.isfinite(value), status, Status.NONFINITE)
    return MixedResult(
        config=config, coef=nat[:d], thresholds=nat[d:d + k1],
        group_cov=user_cov(_unpack(eta, d, p, n_lam)[2]), group_sd=nat[d + k1:d + k1 + n_sd],
        cov=J @ eta_cov @ J.T, center=center, scale=scale, eta=eta, eta_cov=eta_cov, effects=effects,
        effects_cond_cov=cond_cov, effects_cov=effects_cov, effects_cross=cross,
        factor_cross_cov=between_big_rest, factor_rest_cov=between_rest, loglik=value, n_iter=n_iter,
        converged=converged & chol_ok, status=status.astype(jnp.int32))


def effects_on_user_scale(result: MixedResult):
    """The group effects on the user's scale (intercepts at ``x = 0``, slopes per unit of their
    columns, as ``clmm``'s ``ranef``): modes (q, p), posterior covariances and conditional
    covariances (``clmm``'s ``condVar``), each (q, p, p)."""
    if len(result.config.levels) > 1:  # random intercepts only: nothing moves
        return result.effects, result.effects_cov, result.effects_cond_cov
    T = _user_transform(result.center, result.scale, result.config.slopes)
    return result.effects @ T.T, T @ result.effects_cov @ T.T, T @ result.effects_cond_cov @ T.T


# --------------------------------------------------------------------- predictions
class _RowEffects(NamedTuple):
    """The group part ``c = sum over known levels of r^T u`` of each row's latent: its mean
    (n,), covariance with ``eta`` (n, m) and variance (n,), and the variance its unknown
    levels add given ``Lambda`` (:meth:`new_var`)."""

    mean: jax.Array
    cross: jax.Array
    var: jax.Array
    R: jax.Array
    unknown: jax.Array

    def new_var(self, Lam):
        """``r^T Sigma r`` for a new group (one factor), or the sum of the new factors'
        variances (several), at ``Lambda`` (n,)."""
        if Lam.ndim == 2:
            return self.unknown[:, 0] * jnp.sum((self.R @ Lam) ** 2, axis=1)
        return self.unknown @ (Lam * Lam)


def _row_effects(result: MixedResult, Z, groups):
    """:class:`_RowEffects` of rows of standardised columns ``Z`` in ``groups`` (-1: a level
    the fit has not seen), shape (n,) for one factor or (n, R) for several."""
    config = result.config
    R = _random_design(Z, config.slopes)
    if isinstance(config.n_groups, int):
        known = groups >= 0
        g = jnp.where(known, groups, 0)
        mean = jnp.where(known, jnp.sum(R * result.effects[g], axis=1), 0.0)
        cross = known[:, None] * jnp.einsum("np,npm->nm", R, result.effects_cross[g])
        var = known * jnp.einsum("np,npq,nq->n", R, result.effects_cov[g], R)
        return _RowEffects(mean, cross, var, R, (~known)[:, None].astype(Z.dtype))
    layout = _layout(config.n_groups)
    n_fac = len(layout.levels)
    known = groups >= 0
    g = jnp.where(known, groups, 0)
    at = [g[:, r] + layout.config_offset[r] for r in range(n_fac)]
    mean = sum(jnp.where(known[:, r], result.effects[at[r], 0], 0.0) for r in range(n_fac))
    cross = sum(known[:, r, None] * result.effects_cross[at[r], 0] for r in range(n_fac))
    var = sum(known[:, r] * result.effects_cov[at[r], 0, 0] for r in range(n_fac))

    def between(r, s):  # Cov(u of factor r, u of factor s) at each row's levels, r != s
        if s == layout.big:
            r, s = s, r
        gs = g[:, s] + layout.rest_offset[s]
        if r == layout.big:
            return result.factor_cross_cov[g[:, r], gs]
        return result.factor_rest_cov[g[:, r] + layout.rest_offset[r], gs]

    for r in range(n_fac):
        for s in range(r + 1, n_fac):
            var = var + 2.0 * (known[:, r] & known[:, s]) * between(r, s)
    return _RowEffects(mean, cross, var, R, (~known).astype(Z.dtype))


def _margin_moments(result: MixedResult, X, groups):
    """Mean latent (n,), thresholds of the centred latent (K-1,) and ``Var(b_k - latent)``
    (n, K-1) for rows ``X`` in groups ``groups`` (-1: a level the fit has not seen)."""
    eta, cov, config = result.eta, result.eta_cov, result.config
    d = result.coef.shape[0]
    Z = (jnp.asarray(X, eta.dtype) - result.center) / result.scale
    beta_z, b, Lam = _unpack(eta, d, config.n_effects, config.n_cov_params)
    rows = _row_effects(result, Z, groups)
    # d(b_k - z^T beta_z)/d eta, shape (n, K-1, m): -z for beta_z, the threshold Jacobian
    # for theta, 0 for lambda.
    Jb = thresholds_jacobian(eta[d:d + b.shape[0]])
    n, k1 = Z.shape[0], b.shape[0]
    grad = jnp.concatenate([jnp.broadcast_to(-Z[:, None, :], (n, k1, d)),
                            jnp.broadcast_to(Jb[None], (n, k1, k1)),
                            jnp.zeros((n, k1, eta.shape[0] - d - k1), eta.dtype)], axis=2)
    fixed_var = jnp.einsum("nkm,ml,nkl->nk", grad, cov, grad)
    # Var(a - c) = Var(a) - 2 Cov(a, c) + Var(c) over the known levels, plus the prior
    # variance of the new ones.
    cross = jnp.einsum("nkm,nm->nk", grad, rows.cross)
    margin_var = fixed_var - 2.0 * cross + (rows.var + rows.new_var(Lam))[:, None]
    return Z @ beta_z + rows.mean, b, jnp.maximum(margin_var, 0.0)


@jax.jit
def predict_mixed(result: MixedResult, X, groups) -> MixedPrediction:
    """Predictive class probabilities of rows ``X`` in groups ``groups``.

    Args:
        result: a :class:`MixedResult`.
        X: fixed-effect columns, shape (n, d), on the scale the model was fitted on.
        groups: each row's group code 0..q-1, or -1 for a group the fit has not seen
            (integrated over the group distribution ``N(0, Sigma)``), shape (n,); with several
            factors each row's code of each factor, shape (n, R).

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

    Each draw takes ``eta`` from its Laplace posterior and each row's group term (the sum of
    its known levels' effects) from its conditional Gaussian given that ``eta`` (the joint
    Gaussian of the module docstring); the effects of levels the fit has not seen (code -1)
    are integrated over ``N(0, Sigma_s)`` with the drawn ``Sigma_s``
    (:func:`bayesord._likelihood.log_predictive_probs`).
    Their spread is the posterior uncertainty of the class probabilities.
    """
    config = result.config
    link = config.link
    eta, cov = result.eta, result.eta_cov
    d = result.coef.shape[0]
    Z = (jnp.asarray(X, eta.dtype) - result.center) / result.scale
    rows = _row_effects(result, Z, jnp.asarray(groups, jnp.int32))
    L, ok = safe_cholesky(cov)
    L = jnp.where(ok, L, jnp.nan)  # a failed factorisation shows as NaN draws, never as zeros
    k_eta, k_u = jax.random.split(key)
    e = jax.random.normal(k_eta, (n_draws, eta.shape[0]), eta.dtype) @ L.T
    # c | eta = c* + C Sigma_eta^{-1} (eta - eta*) + N(0, Var(c) - C Sigma_eta^{-1} C^T).
    gain = jax.scipy.linalg.cho_solve((L, True), rows.cross.T).T  # (n, m)
    cond_var = jnp.maximum(rows.var - jnp.sum(gain * rows.cross, axis=1), 0.0)
    eps = jax.random.normal(k_u, (n_draws, Z.shape[0]), eta.dtype)
    one = jnp.ones((), eta.dtype)

    def one_draw(e_s, eps_s):
        beta_z, b, Lam = _unpack(eta + e_s, d, config.n_effects, config.n_cov_params)
        mean = Z @ beta_z + rows.mean + gain @ e_s + jnp.sqrt(cond_var) * eps_s
        return jnp.exp(log_predictive_probs(mean, rows.new_var(Lam), one, b, link)[0])

    return jax.vmap(one_draw)(e, eps)


# ------------------------------------------------------------------- marginal effects
def _plugin_proba(eta, result: MixedResult, X, groups):
    """Class probabilities at ``eta`` with each row's group effect at its conditional mode
    (0 for a new group), shape (n, K)."""
    config = result.config
    beta_z, b, _ = _unpack(eta, result.coef.shape[0], config.n_effects, config.n_cov_params)
    Z = (X - result.center) / result.scale
    c = _row_effects(result, Z, groups).mean
    one = jnp.ones((Z.shape[0],), eta.dtype)
    return jnp.exp(log_class_probs(Z @ beta_z + c, one, b, result.config.link))


@jax.jit
def marginal_effects_mixed(result: MixedResult, X, groups, discrete):
    """Average marginal effects of each column on the class probabilities and the expected class.

    :func:`bayesord._effects.average_marginal_effects` with the probabilities at ``eta`` and
    each row's group effect at its conditional mode (0 for a new group, code -1: the effect in
    a typical group), and the Laplace posterior of ``eta``.

    Args:
        result: a :class:`MixedResult`.
        X: rows, shape (n, d), on the user's scale.
        groups: group codes, shape (n,) or (n, R) (-1 for a level the fit has not seen).
        discrete: bool, shape (d,): which columns take the 0/1 change.

    Returns:
        (effects, sds), each of shape (d, K + 1).
    """
    groups = jnp.asarray(groups, jnp.int32)
    return average_marginal_effects(lambda eta, Xs: _plugin_proba(eta, result, Xs, groups),
                                    result.eta, result.eta_cov, X, discrete)
