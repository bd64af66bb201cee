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

**Several grouping factors** (crossed, as judges and bottles, or nested), each with its own
random design ``r_{ri}`` (an intercept, and slopes if asked) and ``u_{rj} = Lambda_r v_{rj} ~
N(0, Sigma_r)``: the latent value of a row adds ``r_{ri}^T u_{r, g_r(i)}`` for every factor,
and ``D`` is no longer block diagonal, since two factors' levels are coupled through the rows
they share.  Every factor's effects are padded with zeros to the largest ``p`` (a padded
entry has ``h = -v^2/2``, mode 0 and precision 1: it changes neither (1) nor anything else).
Ordering the effects with the factor of most levels, ``b``, first, ``D = [[A, B], [B^T, C]]``
with ``A`` block diagonal (q_b blocks of p x p) and ``C`` the other factors' levels (dense,
``(Q - q_b) p`` square, small when those factors have few levels), and Newton steps,
``log|D| = log|A| + log|S|`` and ``D^{-1}`` come from the Schur complement
``S = C - B^T A^{-1} B``.  Nothing of size ``q_b^2`` is formed; the cost per step is
``O(n p^2 + q_b p^3 ((Q - q_b)^2 + 1) + ((Q - q_b) p)^3)``.  The conditional modes then take one joint
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
from ._precision import jit
from ._results import checks_codes, mode_labels, result_type
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
            random intercept; ``()`` for random intercepts only.  With several grouping
            factors, one tuple of columns per factor (``()`` for a random intercept only).
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
        object.__setattr__(self, "slopes", _check_slopes(self.slopes, len(levels)))

    @property
    def levels(self):
        """Each grouping factor's number of levels, a tuple."""
        return self.n_groups if isinstance(self.n_groups, tuple) else (self.n_groups,)

    @property
    def factor_slopes(self):
        """Each grouping factor's slope columns, a tuple of tuples."""
        return (self.slopes,) if len(self.levels) == 1 else self.slopes

    @property
    def factor_effects(self):
        """Each grouping factor's number of group effects ``p_r`` (its intercept and slopes)."""
        return tuple(1 + len(s) for s in self.factor_slopes)

    @property
    def n_effects(self):
        """p, the number of group effects per level: the largest ``p_r`` (with several factors,
        the others' effects are padded with zeros to it)."""
        return max(self.factor_effects)

    @property
    def n_cov_params(self):
        """Entries of ``lambda``: ``p_r (p_r + 1) / 2`` per factor."""
        return sum(p * (p + 1) // 2 for p in self.factor_effects)


def _check_slopes(slopes, n_factors):
    """``slopes`` as column indices: a tuple for one factor, a tuple of tuples (one per factor,
    ``()`` for none) for several."""
    def columns(s, what):
        s = tuple(s)
        if not all(isinstance(j, (int, np.integer)) and not isinstance(j, bool) and j >= 0 for j in s):
            raise ValueError(f"{what} must be column indices (non-negative integers), got {s!r}")
        if len(set(s)) != len(s):
            raise ValueError(f"{what} names a column twice: {s!r}")
        return tuple(int(j) for j in s)

    slopes = tuple(slopes)
    if n_factors == 1:
        return columns(slopes, "slopes")
    if not slopes:
        return ((),) * n_factors
    if len(slopes) != n_factors or not all(isinstance(s, (tuple, list)) for s in slopes):
        raise ValueError(f"with {n_factors} grouping factors, slopes must hold one tuple of columns per "
                         f"factor (() for a random intercept only), got {slopes!r}")
    return tuple(columns(s, f"slopes of factor {r}") for r, s in enumerate(slopes))


@result_type
class MixedResult:
    """A fitted ordinal mixed model: random intercepts (and slopes) for one or several grouping
    factors.  With several factors, the group arrays hold every factor's levels one factor
    after the other (in the configuration's order), ``Q = sum q_r`` rows of ``p`` entries,
    ``p`` the most group terms of any factor (a factor with fewer has its entries padded with
    zeros)."""

    config: MixedConfig
    """The static configuration the model was fitted with (the link among it)."""
    coef: jax.Array
    """Fixed effects ``beta`` per unit of the user's columns, shape (d,)."""
    thresholds: jax.Array
    """Thresholds ``b_1 < ... < b_{K-1}`` at ``x = 0`` (as ``clmm`` reports them), (K-1,)."""
    group_cov: jax.Array
    """Covariance ``Sigma`` of the group effects on the user's scale (the intercept at
    ``x = 0``, slopes per unit of their columns), shape (p, p); with several factors block
    diagonal, each factor's ``Sigma_r`` in turn, (sum p_r, sum p_r)."""
    group_sd: jax.Array
    """Standard deviations of the group effects, ``sqrt(diag(group_cov))``, shape (sum p_r,)."""
    cov: jax.Array
    """Covariance of ``(coef, thresholds, group_sd, corr)``, shape (d + K - 1 + sum p_r +
    sum p_r (p_r - 1) / 2,) squared: the inverse of minus the Hessian of (1), mapped to these
    parameters by the delta method; ``corr`` are each factor's correlations of its group
    effects below the diagonal, row by row, one factor after the other."""
    center: jax.Array
    """Column offsets the fit was centred at, shape (d,)."""
    scale: jax.Array
    """Column scales the fit was standardised by, shape (d,)."""
    eta: jax.Array
    """The optimum in the fit's own parameters ``(beta_z, theta, lambda)``, shape (m,) with
    ``m = d + K - 1 + config.n_cov_params``; ``beta_z = scale * coef`` acts on the standardised
    columns, the thresholds ``thresholds_from_params(theta)`` on the centred latent, and
    ``lambda`` holds ``Lambda`` of the standardised random design row by row (with several
    factors, each factor's ``Lambda_r`` in turn)."""
    eta_cov: jax.Array
    """Laplace covariance of ``eta``, shape (m, m)."""
    effects: jax.Array
    """Conditional modes of the group effects ``u_j = Lambda v*_j`` on the standardised random
    design (intercept at the columns' centre, slopes per standardised unit), shape (Q, p)."""
    effects_cond_cov: jax.Array
    """Their covariances given ``eta``, ``Lambda D_j^{-1} Lambda^T`` (``clmm``'s ``condVar``),
    shape (q, p, p)."""
    effects_cov: jax.Array
    """Their posterior covariances: ``effects_cond_cov`` plus the part propagated from ``eta``,
    shape (q, p, p)."""
    effects_cross: jax.Array
    """Covariance of each group effect with ``eta``, shape (q, p, m)."""
    factor_cross_cov: jax.Array
    """With several factors, the posterior covariance between the effects of the levels of the
    factor with the most levels (``b``) and those of the others, in their order, as a matrix
    of (p, p) tiles, shape (q_b p, (Q - q_b) p) ((q, 0) for one factor)."""
    factor_rest_cov: jax.Array
    """With several factors, the posterior covariance among the effects of the levels of all
    factors but ``b``, as (p, p) tiles, shape ((Q - q_b) p, (Q - q_b) p) ((0, 0) for one
    factor)."""
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
    log_proba: jax.Array
    """Their logarithms, shape (n, K): accurate where ``proba`` underflows (float32 gives 0
    below about 1e-38 or 1e-45)."""

    labels = property(lambda self: mode_labels(self.proba), doc="(n,) codes of the most probable classes.")
    scores = property(lambda self: self.mean, doc="The latent mean ``mean`` (n,).")


# ----------------------------------------------------------------------- the model
def _tril_basis(p, dtype):
    """(p (p + 1) / 2, p, p): ``Lambda = sum_k lambda_k E_k`` for the lower triangle row by row
    (a contraction rather than a scatter, so it traces alike on every mesh)."""
    rows, cols = np.tril_indices(p)
    E = np.zeros((rows.size, p, p))
    E[np.arange(rows.size), rows, cols] = 1.0
    return jnp.asarray(E, dtype)


def _unpack(eta, d, config):
    """``(beta_z, b, Lambda)`` from ``eta = (beta_z, theta, lambda)``; ``b`` of the centred latent.

    ``Lambda`` is (p, p) for one factor; with several, each factor's ``Lambda_r`` (from its
    ``p_r (p_r + 1) / 2`` entries of ``lambda``, in the factors' order) padded with zeros to
    the largest ``p``, stacked, (R, p, p)."""
    n_lam, P = config.n_cov_params, config.n_effects
    lam = eta[eta.shape[0] - n_lam:]
    b = thresholds_from_params(eta[d:eta.shape[0] - n_lam])
    blocks, at = [], 0
    for p in config.factor_effects:
        k = p * (p + 1) // 2
        Lam = jnp.einsum("k,kij->ij", lam[at:at + k], _tril_basis(p, eta.dtype))
        blocks.append(jnp.pad(Lam, ((0, P - p), (0, P - p))))
        at += k
    return eta[:d], b, blocks[0] if len(blocks) == 1 else jnp.stack(blocks)


def _initial_lambda(config, dtype):
    """``lambda`` of every factor's ``Lambda_r = _INITIAL_SD I``."""
    return jnp.concatenate([jnp.einsum("kij,ij->k", _tril_basis(p, dtype), _INITIAL_SD * jnp.eye(p, dtype=dtype))
                            for p in config.factor_effects])


def _random_design(Z, slopes, width=None):
    """Each row's random-effects design ``r_i = (1, z_i[slopes])``, padded with zeros to
    ``width`` entries (default: none), shape (n, width)."""
    parts = [jnp.ones((Z.shape[0], 1), Z.dtype)]
    if slopes:
        parts.append(Z[:, np.asarray(slopes, np.int32)])
    if width is not None and width > 1 + len(slopes):
        parts.append(jnp.zeros((Z.shape[0], width - 1 - len(slopes)), Z.dtype))
    return jnp.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def _design(Z, config):
    """The random-effects design of rows ``Z``: (n, p) for one factor; for several each
    factor's, padded to the largest ``p``, (n, R, p)."""
    if len(config.levels) == 1:
        return _random_design(Z, config.slopes)
    return jnp.stack([_random_design(Z, s, config.n_effects) for s in config.factor_slopes], axis=1)


class _Layout(NamedTuple):
    """Where each factor's levels lie in the vector of all effects (static).

    The fit orders the effects with the factor of most levels, ``big``, first, then the
    others in their order (``rest``): ``D`` is then ``[[A, B], [B^T, C]]`` with ``A`` block
    diagonal (q_big blocks of p x p) and ``C`` dense but small (the other factors' levels).
    Results list the factors in the configuration's order."""

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
    """``D = [[A, B], [B^T, C]]`` for several factors (``A`` as its (q_b, p, p) blocks, ``B``
    (q_b p, (Q - q_b) p)), with the Schur complement ``S = C - B^T A^{-1} B`` factorised:
    ``Y = A^{-1} B``, ``L`` the Cholesky factor of ``S``."""

    A: jax.Array
    B: jax.Array
    Y: jax.Array
    L: jax.Array


def _group_terms(v, eta, Z, R, y, groups, weights, config):
    """Value, gradient (Q, p) and precision ``D`` of ``h(v) = l(Lambda v) - |v|^2/2``.

    One factor: the value per group (q,) and ``D`` as its blocks ``D_j`` (q, p, p).  Several
    factors: the total value (1,) and ``D`` as :class:`_Crossed`."""
    if len(config.levels) == 1:
        return _block_terms(v, eta, Z, R, y, groups, weights, config)
    return _crossed_terms(v, eta, Z, R, y, groups, weights, config)


def _block_terms(v, eta, Z, R, y, groups, weights, config):
    q, p, link = config.levels[0], R.shape[1], config.link
    beta, b, Lam = _unpack(eta, Z.shape[1], config)
    # Row i's latent adds r_i^T Lambda v_{g(i)}.  Sums over rows are taken of the designs r_i,
    # and Lambda is applied to the groups' sums, so no row-length array depends on Lambda.
    f = Z @ beta + jnp.sum(R * (v @ Lam.T)[groups], axis=1)
    sigma = jnp.ones((), f.dtype)
    r = ordinal_ratios(f, y, b, sigma, link)
    t = terms_from_ratios(f, y, b, sigma, *r, link)
    value = jax.ops.segment_sum(weights * r[0], groups, q) - 0.5 * jnp.sum(v * v, axis=1)
    if p == 1:  # random intercepts: sums of numbers
        lam = Lam[0, 0]
        grad = lam * jax.ops.segment_sum(weights * t.d_f, groups, q)[:, None] - v
        info = lam * lam * jax.ops.segment_sum(-weights * t.d_ff, groups, q)[:, None, None]
        return value, grad, 1.0 + info
    grad = jax.ops.segment_sum((weights * t.d_f)[:, None] * R, groups, q) @ Lam - v
    M = jax.ops.segment_sum((-weights * t.d_ff)[:, None, None] * R[:, :, None] * R[:, None, :], groups, q)
    return value, grad, jnp.eye(p, dtype=f.dtype) + jnp.einsum("ai,qab,bj->qij", Lam, M, Lam)


def _blocks_to_matrix(blocks, rows, cols):
    """(rows cols, p, p) blocks, row-major, as the (rows p, cols p) matrix they tile."""
    p = blocks.shape[-1]
    if p == 1:
        return blocks.reshape(rows, cols)
    return blocks.reshape(rows, cols, p, p).transpose(0, 2, 1, 3).reshape(rows * p, cols * p)


def _crossed_terms(v, eta, Z, R, y, groups, weights, config):
    layout = _layout(config.levels)
    n_fac, P = len(layout.levels), config.n_effects
    Q, qb = layout.n_effects, layout.levels[layout.big]
    Q2 = Q - qb
    beta, b, Lam = _unpack(eta, Z.shape[1], config)
    # Row i's latent adds r_ri^T Lambda_r v_j for its level j of each factor r.  Sums over rows
    # are taken of the designs r_ri, and Lambda_r is applied to the levels' sums, so no
    # row-length array depends on Lambda.
    at = [slice(layout.offset[r], layout.offset[r] + layout.levels[r]) for r in range(n_fac)]
    u = [v[at[r]] @ Lam[r].T for r in range(n_fac)]
    f = Z @ beta + sum(jnp.sum(R[:, r] * u[r][groups[:, r]], axis=1) for r in range(n_fac))
    sigma = jnp.ones((), f.dtype)
    r_ = ordinal_ratios(f, y, b, sigma, config.link)
    t = terms_from_ratios(f, y, b, sigma, *r_, config.link)
    value = (jnp.sum(weights * r_[0]) - 0.5 * jnp.sum(v * v))[None]
    g_f = (weights * t.d_f)[:, None]
    grad = jnp.concatenate([jax.ops.segment_sum(g_f * R[:, r], groups[:, r], layout.levels[r]) @ Lam[r]
                            for r in (layout.big,) + layout.rest]) - v
    W = -weights * t.d_ff

    def info(r, s, codes, size):  # sum over each (level of r, level of s) of Lambda_r^T W r_r r_s^T Lambda_s
        if P == 1:  # random intercepts: sums of numbers
            return (Lam[r, 0, 0] * Lam[s, 0, 0] * jax.ops.segment_sum(W * R[:, r, 0] * R[:, s, 0], codes, size)
                    )[:, None, None]
        M = jax.ops.segment_sum(W[:, None, None] * R[:, r, :, None] * R[:, s, None, :], codes, size)
        return jnp.einsum("ai,kab,bj->kij", Lam[r], M, Lam[s])

    big, rest = layout.big, layout.rest
    eye = jnp.eye(P, dtype=f.dtype)
    A = eye + info(big, big, groups[:, big], qb)
    rest_idx = {r: groups[:, r] + layout.rest_offset[r] for r in rest}
    B = _blocks_to_matrix(sum(info(big, r, groups[:, big] * Q2 + rest_idx[r], qb * Q2) for r in rest), qb, Q2)
    C = jnp.eye(Q2 * P, dtype=f.dtype) + _blocks_to_matrix(
        sum(info(r, s, rest_idx[r] * Q2 + rest_idx[s], Q2 * Q2) for r in rest for s in rest), Q2, Q2)
    Y = _precision_solve(A, B.reshape(qb, P, Q2 * P)).reshape(qb * P, Q2 * P)
    L = jnp.linalg.cholesky(C - B.T @ Y)  # NaN where D is not positive definite
    return value, grad, _Crossed(A, B, Y, L)


def _precision_solve(prec, rhs):
    """``D^{-1} rhs`` for rhs (Q, p) or (Q, p, m)."""
    if isinstance(prec, _Crossed):
        shape = rhs.shape
        qb, p = prec.A.shape[:2]
        g = rhs.reshape(shape[0] * p, -1)
        x2 = jax.scipy.linalg.cho_solve((prec.L, True), g[qb * p:] - prec.Y.T @ g[:qb * p])
        x1 = _precision_solve(prec.A, (g[:qb * p] - prec.B @ x2).reshape(qb, p, -1))
        return jnp.concatenate([x1.reshape(qb * p, -1), x2]).reshape(shape)
    if prec.shape[1] == 1:  # random intercepts: a division (a batch of 1 x 1 factorisations is slower)
        return rhs / prec.reshape(prec.shape[:1] + (1,) * (rhs.ndim - 1))
    L = jnp.linalg.cholesky(prec)  # NaN where a block is not positive definite
    return jax.vmap(lambda Lj, rj: jax.scipy.linalg.cho_solve((Lj, True), rj))(L, rhs)


def _precision_log_det(prec):
    """``log|D|`` (NaN where it is not positive definite)."""
    if isinstance(prec, _Crossed):
        return _precision_log_det(prec.A) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(prec.L)))
    if prec.shape[1] == 1:
        return jnp.sum(jnp.log(prec))
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(prec), axis1=1, axis2=2)))


def _per_unit(x, value):
    """Sum ``x`` (Q, p) over each line-search unit: per group for one factor, in all for several."""
    return jnp.sum(x, axis=1) if value.shape[0] == x.shape[0] else jnp.sum(x)[None]


class _ModeSearch(NamedTuple):
    """Carry of the conditional modes' damped Newton steps (per group, or joint when crossed)."""

    v: jax.Array  # the modes
    value: jax.Array  # the groups' objective there
    grad: jax.Array
    prec: object  # the precision blocks (:func:`_precision_solve` reads them)
    t: jax.Array  # each group's next step length
    n_iter: jax.Array


def _solve_modes(eta, Z, R, y, groups, weights, v0, rtol, config):
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
        return _group_terms(v, eta, Z, R, y, groups, weights, config)

    def small(step, v):
        return jnp.abs(step) <= jnp.sqrt(rtol) * (1.0 + jnp.abs(v))

    def cond(c):
        return (c.n_iter < config.max_inner) & ~jnp.all(small(_precision_solve(c.prec, c.grad), c.v))

    def body(c):
        v, value, grad, prec, t = c.v, c.value, c.grad, c.prec, c.t
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
        return _ModeSearch(v, value, grad, prec, t, c.n_iter + 1)

    value, grad, prec = evaluate(v0)
    end = jax.lax.while_loop(cond, body, _ModeSearch(v0, value, grad, prec, jnp.ones(value.shape, dtype),
                                                     jnp.zeros((), jnp.int32)))
    step = _precision_solve(end.prec, end.grad)
    converged = jnp.all(small(step, end.v)) & jnp.all(jnp.isfinite(end.value))
    return end.v + step, end.n_iter, converged


@partial(jax.custom_jvp, nondiff_argnums=(8,))
def _modes(eta, Z, R, y, groups, weights, v0, rtol, config):
    """``v*(eta)``, differentiable in ``eta`` by the implicit function theorem."""
    return _solve_modes(eta, Z, R, y, groups, weights, v0, rtol, config)


@_modes.defjvp
def _modes_jvp(config, primals, tangents):
    eta, Z, R, y, groups, weights, v0, rtol = primals
    v, it, ok = _modes(eta, Z, R, y, groups, weights, v0, rtol, config)
    # grad_v h(v*(eta), eta) = 0, so dv* = D^{-1} d(grad_v h)/deta . deta.
    _, dgrad = jax.jvp(lambda e: _group_terms(v, e, Z, R, y, groups, weights, config)[1],
                       (eta,), (tangents[0],))
    prec = _group_terms(v, eta, Z, R, y, groups, weights, config)[2]
    zero_int = np.zeros((), dtype=jax.dtypes.float0)
    return (v, it, ok), (_precision_solve(prec, dgrad), zero_int, zero_int)


def _laplace_loglik(eta, Z, R, y, groups, weights, v0, rtol, config):
    """The Laplace approximation (1) and the conditional modes it was taken at."""
    v, it, ok = _modes(eta, Z, R, y, groups, weights, jax.lax.stop_gradient(v0), rtol, config)
    values, _, prec = _group_terms(v, eta, Z, R, y, groups, weights, config)
    value = jnp.sum(values) - 0.5 * _precision_log_det(prec)
    return value, (v, ok)


def _user_transform(center, scale, slopes, width=None):
    """``T`` (p, p) with ``u_user = T u``: the standardised random design ``(1, (x_s - c_s)/s_s)``
    rewritten as ``(1, x_s)`` (the intercept moves to ``x = 0``); padded with zeros to
    ``width`` (default: none)."""
    cols = np.asarray(slopes, np.int32)
    c, s = center[cols], scale[cols]
    top = jnp.concatenate([jnp.ones((1,), center.dtype), -c / s])
    T = jnp.concatenate([top[None], jnp.concatenate([jnp.zeros((len(slopes), 1), center.dtype),
                                                     jnp.diag(1.0 / s)], axis=1)], axis=0)
    pad = 0 if width is None else width - 1 - len(slopes)
    return jnp.pad(T, ((0, pad), (0, pad)))


def _user_transforms(center, scale, config):
    """Each factor's :func:`_user_transform`: (p, p) for one factor, (R, p, p) for several."""
    if len(config.levels) == 1:
        return _user_transform(center, scale, config.slopes)
    return jnp.stack([_user_transform(center, scale, s, config.n_effects) for s in config.factor_slopes])


def _factor_of(config):
    """Each effect's factor, in the results' order (Q,)."""
    return np.repeat(np.arange(len(config.levels)), config.levels)


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


def _user_group_covs(T, Lam, config):
    """Each factor's ``Sigma_r`` on the user's scale, ``T_r Lambda_r Lambda_r^T T_r^T``, a list of (p_r, p_r)."""
    if len(config.levels) == 1:
        T, Lam = T[None], Lam[None]
    return [(T[r] @ Lam[r] @ Lam[r].T @ T[r].T)[:p, :p] for r, p in enumerate(config.factor_effects)]


def _natural(eta, d, center, scale, T, config):
    """``(coef, thresholds, every factor's sds, then every factor's correlations)`` on the
    user's scale (:class:`MixedResult`'s ``cov`` order) from ``eta``; ``T`` from
    :func:`_user_transforms`."""
    beta_z, b, Lam = _unpack(eta, d, config)
    coef = beta_z / scale
    sds, corrs = zip(*(_sd_and_corr(S) for S in _user_group_covs(T, Lam, config)))
    return jnp.concatenate([coef, b + center @ coef, *sds, *corrs])


def _effects_posterior(v, eta, eta_cov, args, config):
    """The group effects ``u = Lambda v*`` (Q, p), their conditional and total covariances
    (Q, p, p), their covariances with ``eta`` (Q, p, m), and, with several factors, the total
    covariances between levels of different factors (see :class:`MixedResult`)."""
    d = args[0].shape[1]
    prec = _group_terms(v, eta, *args, config)[2]
    # dv*/deta = D^{-1} d(grad_v h)/deta at v* (the implicit function theorem, as in _modes).
    dv = _precision_solve(prec, jax.jacfwd(lambda e: _group_terms(v, e, *args, config)[1])(eta))
    if not isinstance(prec, _Crossed):
        Lam = _unpack(eta, d, config)[2]
        q, p = v.shape
        du = jnp.einsum("ij,qjm->qim", Lam, dv) + jax.jacfwd(lambda e: v @ _unpack(e, d, config)[2].T)(eta)
        cross = du @ eta_cov
        cond_cov = Lam @ _precision_solve(prec, jnp.broadcast_to(Lam.T, (q, p, p)))
        effects_cov = jnp.einsum("qim,qjm->qij", cross, du) + cond_cov
        empty = jnp.zeros((q, 0), eta.dtype)
        return v @ Lam.T, cond_cov, effects_cov, cross, empty, jnp.zeros((0, 0), eta.dtype)
    layout = _layout(config.levels)
    factor_of = np.concatenate([np.full(layout.levels[r], r) for r in (layout.big,) + layout.rest])

    def lam_rows(e):  # each effect's Lambda, in the fit's order
        return _unpack(e, d, config)[2][factor_of]

    Lr = lam_rows(eta)
    du = jnp.einsum("qij,qjm->qim", Lr, dv) + jax.jacfwd(lambda e: jnp.einsum("qij,qj->qi", lam_rows(e), v))(eta)
    qb, P = layout.levels[layout.big], v.shape[1]
    Q2 = v.shape[0] - qb
    S_inv = jax.scipy.linalg.cho_solve((prec.L, True), jnp.eye(prec.L.shape[0], dtype=eta.dtype))
    YS = prec.Y @ S_inv
    # The (p, p) diagonal blocks of D^{-1}: A_j^{-1} + (Y S^{-1} Y^T)_jj, then those of S^{-1}.
    A_inv = _precision_solve(prec.A, jnp.broadcast_to(jnp.eye(P, dtype=eta.dtype), prec.A.shape))
    Yb, YSb = prec.Y.reshape(qb, P, -1), YS.reshape(qb, P, -1)
    S4 = S_inv.reshape(Q2, P, Q2, P)
    rest = np.arange(Q2)
    d_inv = jnp.concatenate([A_inv + jnp.einsum("qik,qjk->qij", YSb, Yb), S4[rest, :, rest, :]])
    cond_cov = Lr @ d_inv @ jnp.swapaxes(Lr, 1, 2)
    du_cov = jnp.einsum("qim,ml->qil", du, eta_cov)
    Lb, Lo = Lr[:qb], Lr[qb:]

    def between(L1, inv, L2, c1, c2):  # Cov(u_j, u_k) for levels j of c1 and k of c2, tiled (|c1| p, |c2| p)
        out = jnp.einsum("qia,qakb,kjb->qikj", L1, inv, L2) + jnp.einsum("qim,kjm->qikj", c1, c2)
        return out.reshape(L1.shape[0] * P, L2.shape[0] * P)

    between_big_rest = between(Lb, -YS.reshape(qb, P, Q2, P), Lo, du_cov[:qb], du[qb:])
    between_rest = between(Lo, S4, Lo, du_cov[qb:], du[qb:])
    order = _to_config_order(layout)  # the covariances between factors keep the fit's order
    effects_cov = cond_cov + jnp.einsum("qim,qjm->qij", du_cov, du)
    return (jnp.einsum("qij,qj->qi", Lr, v)[order], cond_cov[order], effects_cov[order], du_cov[order],
            between_big_rest, between_rest)


@partial(jit, static_argnames=("config",))
@partitioned
@checks_codes("y")
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
        >>> res = fit_mixed(x, y, g, np.ones(200), 1e-6,
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
    if any(j >= d for s in config.factor_slopes for j in s):
        raise ValueError(f"config.slopes {config.slopes} names a column past the {d} columns of X")
    link, p = config.link, config.n_effects
    Q = sum(config.levels)
    center, scale = center_and_scale(X, weights)
    Z = (X - center) / scale
    R = _design(Z, config)
    b0 = initial_thresholds(y, weights, config.n_classes, link, dtype)
    theta0 = jnp.concatenate([b0[:1], jnp.log(jnp.diff(b0))])
    eta0 = jnp.concatenate([jnp.zeros(d, dtype), theta0, _initial_lambda(config, dtype)])
    args = (Z, R, y, groups, weights)

    def objective(eta, v0):
        return _laplace_loglik(eta, *args, v0, rtol, config)

    eta, value, hess, v, n_iter, converged, status = maximise_exact(objective, eta0, jnp.zeros((Q, p), dtype),
                                                                    rtol, config.max_newton)
    # The Laplace posterior of eta: minus the Hessian must be positive definite there.
    L, chol_ok = safe_cholesky(-hess)
    eye = jnp.eye(eta.shape[0], dtype=dtype)
    eta_cov = jax.scipy.linalg.cho_solve((L, True), eye)
    status = jnp.where(chol_ok | (status != Status.SUCCESS), status, Status.NOT_POSITIVE_DEFINITE)
    effects, cond_cov, effects_cov, cross, between_big_rest, between_rest = _effects_posterior(
        v, eta, eta_cov, args, config)
    status = jnp.where(jnp.isfinite(value), status, Status.NONFINITE)
    return MixedResult(
        config=config, center=center, scale=scale, eta=eta, eta_cov=eta_cov, effects=effects,
        effects_cond_cov=cond_cov, effects_cov=effects_cov, effects_cross=cross, factor_cross_cov=between_big_rest,
        factor_rest_cov=between_rest, loglik=value, n_iter=n_iter, converged=converged & chol_ok,
        status=status.astype(jnp.int32), **_user_parameters(eta, eta_cov, center, scale, config))


def _user_parameters(eta, eta_cov, center, scale, config):
    """The result's parameters on the user's columns, ``coef``, ``thresholds``,
    ``group_sd`` and ``group_cov``, and the covariance ``cov`` of :func:`_natural`'s vector
    (delta method)."""
    d = center.shape[0]
    k1, n_sd = config.n_classes - 1, sum(config.factor_effects)
    T = _user_transforms(center, scale, config)
    natural = partial(_natural, d=d, center=center, scale=scale, T=T, config=config)
    J = jax.jacfwd(natural)(eta)
    nat = natural(eta)
    group_cov = jax.scipy.linalg.block_diag(*_user_group_covs(T, _unpack(eta, d, config)[2], config))
    return dict(coef=nat[:d], thresholds=nat[d:d + k1], group_cov=group_cov, group_sd=nat[d + k1:d + k1 + n_sd],
                cov=J @ eta_cov @ J.T)


@jit
def mixed_parameters_at(result: MixedResult, center) -> dict:
    """``result``'s parameters on the user's columns had it been centred at ``center``
    (:func:`bayesord._columns.restore_offsets`)."""
    return _user_parameters(result.eta, result.eta_cov, jnp.asarray(center, result.eta.dtype), result.scale,
                            result.config)


@partial(jit, static_argnames=("n_draws",))
def sample_posterior_mixed(result: MixedResult, key, *, n_draws: int = 2000):
    """Joint draws of the parameters and the group effects from the Laplace posterior, on the
    user's scale.

    ``eta`` is drawn from ``N(eta*, Sigma_eta)`` and mapped to the coefficients, thresholds,
    group sds and correlations as the fit maps its estimate (so an sd is never negative and a
    correlation stays in [-1, 1]); each group's effect given that draw from its conditional
    Gaussian, ``u* + (du*/deta) (eta - eta*)`` plus a draw of their joint conditional
    covariance given ``eta`` (the joint Gaussian of the module docstring; with several
    factors the levels are correlated given ``eta``, see :func:`_conditional_effects_noise`).

    Returns:
        ``(natural, effects)``: (n_draws, m') in the order of :attr:`MixedResult.cov`, and the
        effects (n_draws, Q, p) as :func:`effects_on_user_scale` gives their modes.  A
        posterior covariance that is not positive definite gives NaN draws.
    """
    config = result.config
    eta, cov = result.eta, result.eta_cov
    d = result.coef.shape[0]
    L, ok = safe_cholesky(cov)
    L = jnp.where(ok, L, jnp.nan)
    k_eta, k_u = jax.random.split(key)
    e = jax.random.normal(k_eta, (n_draws, eta.shape[0]), eta.dtype) @ L.T
    T = _user_transforms(result.center, result.scale, config)
    natural = jax.vmap(partial(_natural, d=d, center=result.center, scale=result.scale, T=T, config=config))
    q, p, m = result.effects_cross.shape
    # effects_cross = (du*/deta) Sigma_eta, and the conditional covariance is cond_cov.
    gain = jax.scipy.linalg.cho_solve((L, True), result.effects_cross.reshape(q * p, m).T).T.reshape(q, p, m)
    u = result.effects + jnp.einsum("qpm,sm->sqp", gain, e) + _conditional_effects_noise(result, gain, k_u, n_draws)
    T = jnp.broadcast_to(T, (q,) + T.shape) if T.ndim == 2 else T[_factor_of(config)]
    return natural(eta + e), jnp.einsum("qij,sqj->sqi", T, u)


def _psd_root(C):
    """``R`` with ``R R^T = C`` for symmetric positive semi-definite ``C`` (batched): its
    eigenvectors scaled by the roots of its eigenvalues, rounding below 0 taken as 0 (a group
    sd fitted at 0 leaves ``C`` singular)."""
    w, V = jnp.linalg.eigh(C)
    return V * jnp.sqrt(jnp.maximum(w, 0.0))[..., None, :]


def _conditional_effects_noise(result: MixedResult, gain, key, n_draws):
    """Draws of ``u - E[u | eta]`` from the group effects' joint Gaussian given ``eta``,
    shape (n_draws, Q, p); ``gain = du*/deta`` (Q, p, m).

    One factor: the groups are independent given ``eta`` (``D`` is block diagonal), each
    drawn from its ``effects_cond_cov``.  Several: only the levels of the factor of most
    levels, ``b``, are (``A`` is block diagonal; two of its levels never share a row), and
    only given the other factors' effects.  So those are drawn first, jointly from their
    conditional covariance ``C_rr``, and then each level ``j`` of ``b`` from its Gaussian given
    them: mean ``K_j z_r`` with ``K = C_br C_rr^+``, covariance ``C_jj - K_j C_rj``.  The
    covariances given ``eta`` are the stored posterior ones less the part that ``eta``'s
    uncertainty adds, ``gain Sigma_eta gain^T = effects_cross gain^T``.
    """
    Q, p, m = gain.shape
    if result.factor_rest_cov.shape[0] == 0:
        eps = jax.random.normal(key, (n_draws, Q, p), gain.dtype)
        return jnp.einsum("qij,sqj->sqi", _psd_root(result.effects_cond_cov), eps)
    k_rest, k_big = jax.random.split(key)
    layout = _layout(result.config.levels)
    qb = layout.levels[layout.big]
    big = np.arange(qb) + layout.config_offset[layout.big]
    rest = np.concatenate([np.arange(layout.levels[r]) + layout.config_offset[r] for r in layout.rest])

    def flat(a):
        return a.reshape(-1, m)

    C_rr = result.factor_rest_cov - flat(result.effects_cross[rest]) @ flat(gain[rest]).T
    C_br = result.factor_cross_cov - flat(result.effects_cross[big]) @ flat(gain[rest]).T
    w, V = jnp.linalg.eigh(0.5 * (C_rr + C_rr.T))
    # Directions of C_rr at rounding level (a factor whose sd is fitted at 0) are no
    # direction at all: they get neither noise nor weight in K.
    tol = C_rr.shape[0] * jnp.finfo(w.dtype).eps * jnp.max(jnp.diagonal(result.effects_cov, axis1=1, axis2=2))
    kept = w > tol
    K = ((C_br @ V) * jnp.where(kept, 1.0 / jnp.where(kept, w, 1.0), 0.0)) @ V.T
    z_rest = (jax.random.normal(k_rest, (n_draws, w.shape[0]), gain.dtype) * jnp.sqrt(jnp.where(kept, w, 0.0))) @ V.T
    K3 = K.reshape(qb, p, -1)
    cov_big = result.effects_cond_cov[big] - jnp.einsum("qik,qjk->qij", K3, C_br.reshape(qb, p, -1))
    eps = jax.random.normal(k_big, (n_draws, qb, p), gain.dtype)
    z_big = jnp.einsum("qik,sk->sqi", K3, z_rest) + jnp.einsum(
        "qij,sqj->sqi", _psd_root(0.5 * (cov_big + jnp.swapaxes(cov_big, 1, 2))), eps)
    out = jnp.zeros((n_draws, Q, p), gain.dtype)
    return out.at[:, big].set(z_big).at[:, rest].set(z_rest.reshape(n_draws, -1, p))


@jit
def effects_on_user_scale(result: MixedResult):
    """The group effects on the user's scale (intercepts at ``x = 0``, slopes per unit of their
    columns, as ``clmm``'s ``ranef``): modes (Q, p), posterior covariances and conditional
    covariances (``clmm``'s ``condVar``), each (Q, p, p)."""
    config = result.config
    T = _user_transforms(result.center, result.scale, config)
    T = jnp.broadcast_to(T, (result.effects.shape[0],) + T.shape) if T.ndim == 2 else T[_factor_of(config)]
    Tt = jnp.swapaxes(T, 1, 2)
    return (jnp.einsum("qij,qj->qi", T, result.effects), T @ result.effects_cov @ Tt,
            T @ result.effects_cond_cov @ Tt)


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
        """``r^T Sigma r`` for a new group (one factor), or the sum of it over the factors
        whose level is new (several), at ``Lambda`` (n,)."""
        if Lam.ndim == 2:
            return self.unknown[:, 0] * jnp.sum((self.R @ Lam) ** 2, axis=1)
        return jnp.sum(self.unknown * jnp.sum(jnp.einsum("nrp,rpk->nrk", self.R, Lam) ** 2, axis=2), axis=1)


def _row_effects(result: MixedResult, Z, groups):
    """:class:`_RowEffects` of rows of standardised columns ``Z`` in ``groups`` (-1: a level
    the fit has not seen), shape (n,) for one factor or (n, R) for several."""
    config = result.config
    R = _design(Z, config)
    if isinstance(config.n_groups, int):
        known = groups >= 0
        g = jnp.where(known, groups, 0)
        mean = jnp.where(known, jnp.sum(R * result.effects[g], axis=1), 0.0)
        cross = known[:, None] * jnp.einsum("np,npm->nm", R, result.effects_cross[g])
        var = known * jnp.einsum("np,npq,nq->n", R, result.effects_cov[g], R)
        return _RowEffects(mean, cross, var, R, (~known)[:, None].astype(Z.dtype))
    layout = _layout(config.n_groups)
    n_fac, P = len(layout.levels), config.n_effects
    known = groups >= 0
    g = jnp.where(known, groups, 0)
    at = [g[:, r] + layout.config_offset[r] for r in range(n_fac)]
    mean = sum(jnp.where(known[:, r], jnp.sum(R[:, r] * result.effects[at[r]], axis=1), 0.0)
               for r in range(n_fac))
    cross = sum(known[:, r, None] * jnp.einsum("np,npm->nm", R[:, r], result.effects_cross[at[r]])
                for r in range(n_fac))
    var = sum(known[:, r] * jnp.einsum("np,npq,nq->n", R[:, r], result.effects_cov[at[r]], R[:, r])
              for r in range(n_fac))
    qb = layout.levels[layout.big]
    big_rest = result.factor_cross_cov.reshape(qb, P, -1, P)
    rest_rest = result.factor_rest_cov.reshape(big_rest.shape[2], P, -1, P)

    def between(r, s):  # r^T Cov(u of factor r, u of factor s) s at each row's levels, r != s
        if s == layout.big:
            r, s = s, r
        gs = g[:, s] + layout.rest_offset[s]
        if r == layout.big:
            cov = big_rest[g[:, r], :, gs, :]
        else:
            cov = rest_rest[g[:, r] + layout.rest_offset[r], :, gs, :]
        return jnp.einsum("np,npq,nq->n", R[:, r], cov, R[:, s])

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
    beta_z, b, Lam = _unpack(eta, d, config)
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


@jit
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
                           cum_proba=jnp.exp(log_cum), log_proba=log_p)


@partial(jit, static_argnames=("n_draws",))
def sample_class_probs_mixed(result: MixedResult, X, groups, key, *, n_draws: int = 200):
    """Class probabilities under posterior draws, shape (n_draws, n, K).

    Each draw takes ``eta`` from its Laplace posterior and each row's group term (the sum of
    its known levels' effects) from its conditional Gaussian given that ``eta`` (the joint
    Gaussian of the module docstring); the effects of levels the fit has not seen (code -1)
    are integrated over ``N(0, Sigma_s)`` with the drawn ``Sigma_s``
    (:func:`bayesord._likelihood.log_predictive_probs`).
    Their spread is the posterior uncertainty of the class probabilities.  The standard
    normal of that conditional draw is one per draw, shared by every row (common random
    numbers): each row's draws follow its own posterior, and identical rows get identical
    draws (with a normal per row, one row given three times got lower P(y=3) bounds of
    0.249, 0.242 and 0.284).  The draws are therefore each row's, not a joint sample of
    several rows' probabilities.
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
    eps = jax.random.normal(k_u, (n_draws, 1), eta.dtype)
    one = jnp.ones((), eta.dtype)

    def one_draw(e_s, eps_s):
        beta_z, b, Lam = _unpack(eta + e_s, d, config)
        mean = Z @ beta_z + rows.mean + gain @ e_s + jnp.sqrt(cond_var) * eps_s
        return jnp.exp(log_predictive_probs(mean, rows.new_var(Lam), one, b, link)[0])

    return jax.vmap(one_draw)(e, eps)


# ------------------------------------------------------------------- marginal effects
def _plugin_proba(eta, result: MixedResult, X, groups):
    """Class probabilities at ``eta`` with each row's group effect at its conditional mode
    (0 for a new group), shape (n, K)."""
    config = result.config
    beta_z, b, _ = _unpack(eta, result.coef.shape[0], config)
    Z = (X - result.center) / result.scale
    c = _row_effects(result, Z, groups).mean
    one = jnp.ones((Z.shape[0],), eta.dtype)
    return jnp.exp(log_class_probs(Z @ beta_z + c, one, b, result.config.link))


@jit
def marginal_effects_mixed(result: MixedResult, X, groups, discrete, values=None):
    """Average marginal effects of each column on the class probabilities and the expected class.

    :func:`bayesord._effects.average_marginal_effects` with the probabilities at ``eta`` and
    each row's group effect at its conditional mode (0 for a new group, code -1: the effect in
    a typical group), and the Laplace posterior of ``eta``.

    Args:
        result: a :class:`MixedResult`.
        X: rows, shape (n, d), on the user's scale.
        groups: group codes, shape (n,) or (n, R) (-1 for a level the fit has not seen).
        discrete: bool, shape (d,): which columns take the 0/1 change.
        values: the value of each class in the expected class, shape (K,) (None: 0..K-1).

    Returns:
        (effects, sds), each of shape (d, K + 1).
    """
    groups = jnp.asarray(groups, jnp.int32)
    return average_marginal_effects(lambda eta, Xs: _plugin_proba(eta, result, Xs, groups),
                                    result.eta, result.eta_cov, X, discrete, values)
