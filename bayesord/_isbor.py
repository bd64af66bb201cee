"""ISBOR: incremental sparse Bayesian ordinal regression, and SBOR, its batch baseline.

Model (ISBOR paper, Sections 3-4): ``f(x) = sum_i phi_i(x) w_i`` over basis functions
centred on training points (Eq. 1-2), ordinal probit likelihood (Eq. 4), ARD prior
``w_i ~ N(0, 1/alpha_i)`` (Eq. 5), Newton MAP and Laplace posterior (Eq. 7-11), Laplace log
evidence (Eq. 12).  The shared numerics live in :mod:`bayesord._laplace`.

Sequential selection (Section 4.3, Tipping & Faul 2003).  At the Laplace point the
evidence equals, up to terms fixed by ``(H, t_hat)``, the evidence of a linear-Gaussian
model with targets ``t_hat = Phi w* + H^{-1} g`` and noise precision ``H``, where
``g = dlogP/df`` (the paper's ``-delta``) and ``H = -d2logP/df2`` (Eq. 9).  For every
candidate basis column ``phi_j``::

    S_j = phi_j^T H phi_j - phi_j^T H Phi Sigma Phi^T H phi_j          (Section 4.3)
    Q_j = phi_j^T H t_hat - phi_j^T H Phi Sigma Phi^T H t_hat

with ``H t_hat = H f + g`` formed directly (``t_hat`` itself is 0/0 where ``H``
underflows).  ``s_j, q_j`` follow the paper (``s_j = alpha_j S_j/(alpha_j - S_j)`` for
active ``j``, ``s_j = S_j`` otherwise), ``alpha_j = s_j^2/(q_j^2 - s_j)`` (Eq. 21) and a
candidate is relevant when ``q_j^2 > s_j``.  The change of Eq. (20) for adding,
re-estimating or deleting ``j`` is taken in Tipping & Faul's closed forms.

Algorithm 1, as implemented (one ``lax.while_loop``, everything jitted):

1. Initialise with one random candidate per class, ``alpha = 1e-3``, ``sigma = 1`` (Section
   5.1.4); thresholds start at the probit of the cumulative class proportions (the paper
   does not say; with ``f = 0`` these match the class frequencies).
2. Each iteration computes ``S, Q`` for every candidate in blocks of ``B`` columns (memory
   ``O(N M + N B)``, never ``N x N`` unless ``cache_basis``), takes the action with the
   largest evidence change, refits ``w`` by Newton (warm start) and recomputes the exact
   Laplace evidence.  The predicted change is exact only for a Gaussian likelihood, so an
   action that lowers the Laplace evidence is *rejected* (state restored, the candidate is
   barred until an accepted addition or deletion changes the basis, recorded as
   ``REJECTED``; a re-estimate elsewhere seldom makes its predicted change accurate, and
   lifting the bar then would propose it again every other iteration): the evidence trace
   is non-decreasing to ``1e-9 (1 + |E|)``.  A re-estimate to ``alpha > alpha_max`` becomes a
   deletion (``PRUNE``, Section 4.5) and is counted.
3. Thresholds and noise move by one gradient step on the Laplace evidence (Eq. 13-14 give
   only the likelihood part; the gradient here is exact: ``w*`` is differentiated
   implicitly (:func:`evidence_grad`, implicit function theorem), the log-determinant through
   the Cholesky factor).  The step has length ``lr`` in ``(b_1, log gaps, log sigma)``,
   is kept only if the evidence rises, and ``lr`` doubles on success and shrinks on
   failure.  We do not use the fixed point Eq. (15): it needs ``t_hat - Phi w = g/H``,
   which is 0/0 for confidently classified samples, and it does not guarantee an increase.
   (Note ``sigma`` is partly a gauge: ``(b, sigma, w, alpha) -> (c b, c sigma, c w,
   alpha/c^2)`` leaves the evidence unchanged.)
4. Stop when the best predicted change and the evidence change of the iteration are both
   below ``min_delta``, or when ``patience`` iterations in a row each changed the evidence
   by less than ``min_delta`` (converged: Algorithm 1, line 17, stops after one such
   iteration, but a rejected proposal changes nothing and a later candidate may still
   gain), when an add would exceed ``capacity`` (``CAPACITY_REACHED``) or after
   ``max_iter`` iterations (``MAX_ITER``).

``S, Q`` are a function of the current fit alone, so an iteration whose proposal was
rejected and whose threshold step failed keeps them for the next one, which scores the
same candidates minus the barred one: on 4,000 rows about half the iterations are such
rejections, and they cost a Newton refit instead of a pass over all candidates.

The active set is a buffer of ``capacity`` slots with a mask; a free slot has a zero basis
column, ``alpha = 1`` and ``w = 0``, which leaves the MAP, the evidence and the
predictions exactly as if the slot were absent (tested).  Cost per iteration:
``O(N N_c (d + capacity))`` for the candidate scores plus ``O(N capacity^2)`` per Newton
step, with ``N_c`` candidates (all training points unless a subset is given).

SBOR (:func:`fit_sbor`) starts with every candidate active and updates all ``alpha``
at once by MacKay's rule ``alpha_i = gamma_i / w_i^2``, ``gamma_i = 1 - alpha_i Sigma_ii``
(Tipping 2001), pruning ``alpha > alpha_max``; it shares the Newton/Laplace code, the
threshold step and the prediction.  Its cost is ``O(N T^2)`` per Newton step with ``T``
the surviving basis functions rounded up to a tier: ``O(N N_c^2)`` until pruning sets in.
"""

from __future__ import annotations

import dataclasses
import enum
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from ._basis import candidate_columns, candidate_rows, check_kernel, kernel_matrix
from ._columns import center_and_scale
from ._laplace import (
    grad_log_post_w,
    implicit_vjp,
    joint_draws,
    joint_posterior,
    laplace_at,
    laplace_log_evidence,
    newton_map,
)
from ._likelihood import log_class_probs, log_predictive_probs, ordinal_terms
from ._linalg import chol_inverse, chol_solve
from ._links import check_link
from ._mesh import partitioned
from ._precision import jit
from ._progress import batch_label, emit
from ._results import check_settings, checks_codes, result_type
from ._status import Status
from ._thresholds import initial_thresholds, params_from_thresholds, thresholds_from_params

__all__ = [
    "Action",
    "done_line",
    "ISBORConfig",
    "ISBORResult",
    "ISBORPrediction",
    "candidate_stats",
    "evidence_grad",
    "fit_isbor",
    "fit_sbor",
    "predict_isbor",
    "sample_class_probs_isbor",
    "weight_cov",
]


class Action(enum.IntEnum):
    """What one ISBOR iteration did with the selected candidate."""

    NONE = 0
    ADD = 1
    REESTIMATE = 2
    DELETE = 3
    PRUNE = 4
    REJECTED = 5
    REESTIMATE_ALL = 6


@dataclasses.dataclass(frozen=True)
class ISBORConfig:
    """Static settings of an ISBOR/SBOR fit (shapes and control flow; hashable).

    Attributes:
        n_classes: number of ordered classes K (at least 2).
        kernel: ``"rbf"``, ``"linear"``, ``"poly"`` or ``"precomputed"``.
        degree: polynomial degree for ``"poly"``.
        capacity: slots in the active-set buffer (ISBOR; at least K).  SBOR ignores it.
        max_iter: cap on outer iterations.
        block_size: candidates scored per block (memory ``O(N * block_size)``).
        cache_basis: keep the whole ``N x N_c`` candidate basis in memory (small N only).
        link: any of :data:`bayesord._links.LINKS`.
        newton_max_iter: cap on Newton iterations per MAP solve.
        learn_noise: whether sigma is learned (else it stays at 1).
        joint_reestimate: ISBOR also tries, every iteration, re-estimating every active
            basis function whose own re-estimate is predicted to gain (each to its
            closed-form alpha at once), and keeps whichever of that and the single best
            action gives the higher Laplace evidence (``REESTIMATE_ALL`` in the trace).
            False runs Algorithm 1 as published, one action per iteration.
        patience: ISBOR also stops, as converged, once this many iterations in a row have
            each changed the Laplace evidence by less than ``min_delta``.  Algorithm 1 (line
            17) stops at the first such iteration; but a proposal whose exact evidence falls
            is rejected and changes nothing, and the next candidate may still gain, so one
            flat iteration is not enough.  SBOR ignores it.
        progress: report each iteration on stderr through a host callback (see
            :mod:`bayesord._progress`).  Off by default: the compiled program then holds no
            callback.  Results are identical either way.
    """

    n_classes: int
    kernel: str = "rbf"
    degree: int = 2
    capacity: int = 128
    max_iter: int = 500
    block_size: int = 256
    cache_basis: bool = False
    link: str = "probit"
    newton_max_iter: int = 50
    learn_noise: bool = True
    joint_reestimate: bool = True
    patience: int = 30
    progress: bool = False

    def __post_init__(self):
        check_kernel(self.kernel)
        check_link(self.link)
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be at least 2, got {self.n_classes}")
        if self.capacity < self.n_classes:
            raise ValueError(
                f"capacity ({self.capacity}) is smaller than the number of classes "
                f"({self.n_classes}); the initial active set holds one basis function per class"
            )
        for name in ("max_iter", "block_size", "newton_max_iter", "degree", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or value < 1 or value != int(value):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


@result_type
class ISBORResult:
    """A fitted sparse Bayesian ordinal model (ISBOR or SBOR); slot arrays have length M."""

    config: ISBORConfig
    """The static configuration it was fitted with (kernel, degree and link among it)."""
    relevance_index: jax.Array
    """Training row (or basis column) of each slot's centre, -1 for a free slot, (M,)."""
    mask: jax.Array
    """Whether each slot is active, (M,)."""
    centres: jax.Array
    """Centre coordinates per slot on the standardised columns (zeros in free slots), (M, d);
    (M, 0) if precomputed."""
    w: jax.Array
    """Posterior mean (MAP) of the weights, zero in free slots, (M,)."""
    chol: jax.Array
    """Lower Cholesky factor of the posterior precision A + Phi^T H Phi (Eq. 10), (M, M)."""
    alpha: jax.Array
    """Prior precisions of active slots (1 in free slots), (M,)."""
    b: jax.Array
    """Ordered thresholds, (K-1,)."""
    thresholds_cov: jax.Array
    """Covariance of the thresholds under the joint Laplace posterior of (w, b) at the
    type-II optimum (:func:`bayesord._laplace.joint_posterior`), (K-1, K-1)."""
    cross_cov: jax.Array
    """Covariance of the weights with the thresholds under it, (M, K-1)."""
    sigma: jax.Array
    """Noise scale."""
    theta: jax.Array
    """Kernel width used."""
    log_evidence: jax.Array
    """Final Laplace log evidence (Eq. 12)."""
    evidence_trace: jax.Array
    """Log evidence after initialisation and after each iteration (NaN past n_iter), (max_iter+1,)."""
    action_trace: jax.Array
    """:class:`Action` code of each iteration (0 past n_iter), (max_iter,)."""
    index_trace: jax.Array
    """Training row (basis column) the action concerned, -1 if none, (max_iter,)."""
    n_active: jax.Array
    """Number of relevance vectors."""
    n_pruned: jax.Array
    """Basis functions removed because their alpha exceeded alpha_max."""
    n_iter: jax.Array
    """Outer iterations taken."""
    converged: jax.Array
    """Whether the stopping rule was met."""
    status: jax.Array
    """A :class:`bayesord._status.Status` code."""
    center: jax.Array
    """Column means the inputs were centred by, (d,) (zeros if precomputed)."""
    scale: jax.Array
    """Column standard deviations the inputs were divided by, (d,) (ones if precomputed)."""

    # The names every family's result shares (the paper's w and b stay the fields).
    coef = property(lambda self: self.w, doc="The weights ``w`` (M,), under the shared name.")
    thresholds = property(lambda self: self.b, doc="The thresholds ``b`` (K-1,), under the shared name.")


class ISBORPrediction(NamedTuple):
    """Predictive outputs for new points (Laplace posterior pushed through the probit)."""

    labels: jax.Array
    """Class codes 0..K-1: the class whose interval holds the latent mean (predictive median)."""
    proba: jax.Array
    """Predictive class probabilities P(y = k | x), (n, K)."""
    log_proba: jax.Array
    """Their logarithms, (n, K)."""
    latent_mean: jax.Array
    """Posterior mean of f(x) = phi(x)^T w*, (n,)."""
    latent_var: jax.Array
    """Marginal posterior variance of f(x) under the joint posterior of weights and
    thresholds, (n,)."""
    weight_var: jax.Array
    """Variance of f(x) over the weights' conditional posterior alone (thresholds held),
    phi(x)^T P_ww^{-1} phi(x), (n,)."""

    scores = property(lambda self: self.latent_mean, doc="The latent mean ``latent_mean`` (n,).")


# ---------------------------------------------------------------------------------------
# Shared pieces: Laplace fit, threshold/noise step, candidate statistics


class _Fit(NamedTuple):
    w: jax.Array
    chol: jax.Array
    evidence: jax.Array
    ok: jax.Array


def _laplace(Phi, y, weights, b, sigma, alpha, w0, rtol, cfg) -> _Fit:
    res = newton_map(Phi, y, weights, b, sigma, alpha, w0, rtol, link=cfg.link,
                     max_iter=cfg.newton_max_iter)
    ev = laplace_log_evidence(res.log_post, res.chol, alpha)
    ok = jnp.isfinite(ev) & (res.status != Status.NOT_POSITIVE_DEFINITE) & (res.status != Status.NONFINITE)
    return _Fit(res.w, res.chol, jnp.where(ok, ev, -jnp.inf), ok)


def _slice_fit(fit: _Fit, T: int) -> _Fit:
    """The fit restricted to the first ``T`` slots (all active slots are among them)."""
    return _Fit(fit.w[:T], fit.chol[:T, :T], fit.evidence, fit.ok)


def _pad_fit(fit: _Fit, cap: int) -> _Fit:
    """A width-``T`` fit padded to ``cap`` slots: free slots have ``w = 0`` and, as their
    basis column is zero and ``alpha = 1``, an identity block in the Cholesky factor."""
    T = fit.w.shape[0]
    if T == cap:
        return fit
    w = jnp.zeros(cap, fit.w.dtype).at[:T].set(fit.w)
    chol = jnp.eye(cap, dtype=fit.chol.dtype).at[:T, :T].set(fit.chol)
    return _Fit(w, chol, fit.evidence, fit.ok)


def _eta(b, sigma):
    return jnp.concatenate([params_from_thresholds(b), jnp.log(sigma)[None]])


def _from_eta(eta):
    return thresholds_from_params(eta[:-1]), jnp.exp(eta[-1])


def _evidence_at(w, eta, Phi, y, weights, alpha, link):
    b, sigma = _from_eta(eta)
    log_post, _, L, _ = laplace_at(w, Phi, y, weights, b, sigma, alpha, link)
    return laplace_log_evidence(log_post, L, alpha)


def evidence_grad(w, chol, eta, Phi, y, weights, alpha, link="probit"):
    """Total derivative of the Laplace evidence (Eq. 12) in ``eta = (b_1, log gaps, log sigma)``.

    At the MAP ``G(w*, eta) = d log posterior / dw = 0``, so ``dw*/deta = Sigma dG/deta``
    (implicit function theorem) and ``dE/deta = dE/deta|_w + (Sigma dE/dw)^T dG/deta``,
    with ``Sigma`` applied through the Cholesky factor ``chol``.  No Newton solve and no
    differentiation of a loop; ``E`` includes the log-determinant's dependence on ``H``.
    """
    e_w, e_eta = jax.grad(_evidence_at, argnums=(0, 1))(w, eta, Phi, y, weights, alpha, link)
    grad_w = lambda e: grad_log_post_w(w, Phi, weights, *_from_eta(e), alpha, y, link)  # noqa: E731
    return e_eta + implicit_vjp(chol, e_w, grad_w, eta)[0]


def _hyper_step(Phi, y, weights, alpha, b, sigma, fit: _Fit, lr, rtol, cfg):
    """One evidence-ascent step on (b_1, log gaps, log sigma); kept only if it helps."""
    eta = _eta(b, sigma)
    grad = evidence_grad(fit.w, fit.chol, eta, Phi, y, weights, alpha, cfg.link)
    if not cfg.learn_noise:
        grad = grad.at[-1].set(0.0)
    grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
    norm = jnp.sqrt(jnp.sum(grad * grad))
    step = lr * grad / jnp.maximum(norm, jnp.finfo(grad.dtype).tiny)
    b_new, sigma_new = _from_eta(eta + step)
    trial = _laplace(Phi, y, weights, b_new, sigma_new, alpha, fit.w, rtol, cfg)
    accept = trial.ok & (trial.evidence > fit.evidence) & (norm > 0)
    new_fit = jax.tree_util.tree_map(lambda a, c: jnp.where(accept, a, c), trial, fit)
    lr = jnp.where(accept, jnp.minimum(2.0 * lr, 1.0), jnp.maximum(0.25 * lr, 1e-8))
    return jnp.where(accept, b_new, b), jnp.where(accept, sigma_new, sigma), new_fit, lr


def _tiered_laplace(n_used, Phi, y, weights, b, sigma, alpha, w0, rtol, cfg) -> _Fit:
    """:func:`_laplace` on the first ``T >= n_used`` slots (a tier), padded back to full width."""
    cap = Phi.shape[1]
    return _by_tier(n_used, cap, lambda T: _pad_fit(_laplace(
        Phi[:, :T], y, weights, b, sigma, alpha[:T], w0[:T], rtol, cfg), cap))


def _tiered_hyper_step(n_used, Phi, y, weights, alpha, b, sigma, fit: _Fit, lr, rtol, cfg):
    """:func:`_hyper_step` on the first ``T >= n_used`` slots, its fit padded to full width."""
    cap = Phi.shape[1]

    def step(T):
        b_new, sigma_new, f, lr_new = _hyper_step(Phi[:, :T], y, weights, alpha[:T], b, sigma,
                                                  _slice_fit(fit, T), lr, rtol, cfg)
        return b_new, sigma_new, _pad_fit(f, cap), lr_new

    return _by_tier(n_used, cap, step)


def _link_terms(Phi, w, y, weights, b, sigma, cfg):
    """Curvature H and ``H t_hat = H f + g`` at the current MAP (never t_hat itself)."""
    f = Phi @ w
    t = ordinal_terms(f, y, b, sigma, cfg.link)
    H = -weights * t.d_ff
    return H, H * f + weights * t.d_f


# XLA's CPU row reduction slows down about 15x once a row is longer than about 16,000
# elements (jax 0.10.2: 5 ms for 1,000 x 15,000 in float64, 72 ms for 1,000 x 20,000).  Long
# rows are therefore summed as matrix-vector products (``(K_c * K_c) @ h``), a few rows of
# K at a time: 38 ms for 256 x 200,000 against 52 ms for a reduction in column chunks and
# 219 ms for all rows at once, with a temporary of ``_ROW_BLOCK`` rows.  The slices run
# along the candidates, never along the training rows, so rows sharded over devices stay
# where they are (a slice along them made the compiler gather the whole block).
_ROW_BLOCK = 16
_LONG_ROW = 16384


def weighted_sq_rows(K, h):
    """``sum_n K[b, n]**2 h[n]`` for every row b (long rows as matrix-vector products)."""
    b, n = K.shape
    if n <= _LONG_ROW:
        return jnp.einsum("bn,bn,n->b", K, K, h)
    c = _ROW_BLOCK
    full = b - b % c

    def block(i, out):
        Kc = jax.lax.dynamic_slice_in_dim(K, i * c, c, axis=0)
        return jax.lax.dynamic_update_slice_in_dim(out, (Kc * Kc) @ h, i * c, axis=0)

    out = jnp.zeros(b, K.dtype)
    if full:
        out = jax.lax.fori_loop(0, full // c, block, out)
    if full < b:  # the last rows, fewer than a block
        out = out.at[full:].set((K[full:] * K[full:]) @ h)
    return out


def candidate_stats(rows, Phi, chol, H, Ht, n_cand: int, block: int):
    """Tipping-Faul statistics ``S_j, Q_j`` for all candidates, computed in blocks.

    Per block of candidate basis rows ``K`` (``K[j] = phi_j`` over the training points) the
    work is one matrix product ``K [H Phi, H t_hat]`` (``O(N B T)``), one fused pass for
    ``phi_j^T H phi_j`` and a triangular solve of the small ``T x B`` result.

    Args:
        rows: ``start -> (block, N)`` basis rows of candidates ``start..start+block-1``.
        Phi: active-set basis, (N, T) (zero columns in free slots).
        chol: lower Cholesky factor of ``A + Phi^T H Phi``, (T, T).
        H: curvature per sample, (N,).
        Ht: ``H t_hat``, (N,).
        n_cand: number of candidates (a multiple of ``block``).
        block: candidates per block (static).

    Returns:
        ``(S, Q)``, each (n_cand,).
    """
    G = jnp.concatenate([Phi * H[:, None], Ht[:, None]], axis=1)  # (N, T + 1)
    mu = chol_solve(chol, Ht @ Phi)  # Sigma Phi^T H t_hat (= w* at the MAP)

    def one(start):
        K = rows(start)
        PR = K @ G
        V = solve_triangular(chol, PR[:, :-1].T, lower=True)
        S = weighted_sq_rows(K, H) - jnp.sum(V * V, axis=0)
        Q = PR[:, -1] - PR[:, :-1] @ mu
        return S, Q

    starts = jnp.arange(n_cand // block, dtype=jnp.int32) * block
    S, Q = jax.lax.map(one, starts)
    return S.reshape(-1), Q.reshape(-1)


def _gains(S, Q, slot_of, alpha, allowed, n_active):
    """Evidence change (Eq. 20) and action for every candidate (Tipping & Faul's forms)."""
    tiny = jnp.finfo(S.dtype).tiny
    active = slot_of >= 0
    a = jnp.where(active, alpha[jnp.maximum(slot_of, 0)], 1.0)
    denom = jnp.where(active, a - S, 1.0)
    s = jnp.where(active, a * S / denom, S)
    q = jnp.where(active, a * Q / denom, Q)
    relevance = q * q - s
    Q2 = Q * Q
    S_safe = jnp.where(S > tiny, S, 1.0)
    a_new = s * s / jnp.where(relevance > 0, relevance, 1.0)
    g_add = 0.5 * ((Q2 - S) / S_safe + jnp.log(S_safe) - jnp.log(jnp.maximum(Q2, tiny)))
    d = 1.0 / a_new - 1.0 / a
    d_safe = jnp.where(d == 0, 1.0, d)
    g_re = jnp.where(d == 0, 0.0, 0.5 * (Q2 / (S + 1.0 / d_safe) - jnp.log1p(S * d)))
    g_del = 0.5 * (Q2 / jnp.where(active, S - a, -1.0) - jnp.log1p(-S / a))
    ok_active = active & (S < a)
    can_add = (~active) & allowed & (relevance > 0) & (S > tiny)
    can_re = ok_active & allowed & (relevance > 0)
    can_del = ok_active & allowed & (relevance <= 0) & (n_active > 1)
    gain = jnp.where(can_add, g_add, jnp.where(can_re, g_re, jnp.where(can_del, g_del, -jnp.inf)))
    gain = jnp.where(jnp.isfinite(gain), gain, -jnp.inf)
    action = jnp.where(can_add, Action.ADD, jnp.where(can_re, Action.REESTIMATE,
                       jnp.where(can_del, Action.DELETE, Action.NONE))).astype(jnp.int32)
    return gain, action, a_new


def _cast_inputs(X, y, weights, theta, cfg):
    """Floating X (float64 under x64 when X is integer), int32 classes, weights and theta in
    X's dtype, and X standardised by its weighted column moments (not a precomputed basis);
    returns ``(X, y, weights, theta, center, scale)``."""
    dtype = X.dtype if jnp.issubdtype(X.dtype, jnp.floating) else jnp.result_type(float)
    X, weights = X.astype(dtype), weights.astype(dtype)
    if cfg.kernel == "precomputed":
        center, scale = jnp.zeros(X.shape[1], dtype), jnp.ones(X.shape[1], dtype)
    else:
        center, scale = center_and_scale(X, weights)
    return ((X - center) / scale, y.astype(jnp.int32), weights, jnp.asarray(theta, dtype),
            center, scale)


def _initial_thresholds(y, weights, cfg, dtype):
    """The link's quantiles of the cumulative weighted class proportions, gaps at least 1e-2."""
    return initial_thresholds(y, weights, cfg.n_classes, cfg.link, dtype, clip=1e-3, min_gap=1e-2)


def _threshold_posterior(Phi, y, weights, fit, alpha, b, sigma, cfg):
    """Thresholds' covariance and their covariance with w (the joint Laplace posterior)."""
    post = joint_posterior(Phi, y, weights, fit.w, b, sigma, alpha, fit.chol, cfg.link)
    return post.thresholds_cov, post.cross_cov, post.ok


def _centres(X, rows, mask, cfg):
    if cfg.kernel == "precomputed":
        return jnp.zeros((rows.shape[0], 0), X.dtype)
    return jnp.where(mask[:, None], jnp.take(X, jnp.maximum(rows, 0), axis=0), 0.0)


def _tiers(cap):
    """Active-set sizes compiled for: 16, 32, 64, ... below ``cap``, then ``cap``."""
    tiers, t = [], 16
    while t < cap:
        tiers.append(t)
        t *= 2
    return tuple(tiers) + (cap,)


def _by_tier(n_active, cap, make):
    """``make(T)`` for the smallest tier ``T >= n_active`` (``lax.switch``; shapes stay static).

    The active slots are kept compact (slots ``0..n_active-1``), so matrices of width ``T``
    hold every active column: the candidate scoring (``O(N N_c T)``) and the Newton solves
    and threshold steps (``O(N T^2)`` per Newton step) scale with the active set rather
    than the capacity.  Each tier is compiled once, so compile time grows with the number
    of tiers.
    """
    tiers = _tiers(cap)
    if len(tiers) == 1:
        return make(cap)
    idx = jnp.searchsorted(jnp.asarray(tiers), n_active)
    return jax.lax.switch(jnp.minimum(idx, len(tiers) - 1), [partial(make, t) for t in tiers])


def _progress_line(solver, v):
    """``ISBOR theta 0.3 iter 37/500  log-evidence -1234.5  RVs 22`` (ranges when vmapped)."""
    it, ev, rv = v["it"], v["evidence"], v["n_active"]
    span = lambda a, f: f"{f(a.min())}-{f(a.max())}" if a.min() != a.max() else f"{f(a.max())}"
    rvs = span(rv, int)
    ev_txt = f"{np.nanmax(ev):.1f}" if np.any(np.isfinite(ev)) else "nan"
    best = " max" if ev.size > 1 else ""
    head = f"{solver}{batch_label(v)}"
    if "theta" in v:  # the kernel width tells the fits of a width grid apart
        head += f" theta {span(v['theta'], lambda t: format(float(t), 'g'))}"
    if "converged" in v:
        done = int(np.sum(v["converged"]))
        its = span(it, int)
        return (f"{head} done: {its} iterations  log-evidence{best} {ev_txt}  RVs {rvs}  "
                f"({done}/{v['converged'].size} converged)")
    return f"{head} iter {it.max()}/{v['max_iter'].max()}  log-evidence{best} {ev_txt}  RVs {rvs}"


_isbor_line = partial(_progress_line, "ISBOR")
_sbor_line = partial(_progress_line, "SBOR")


def done_line(solver: str, res: ISBORResult) -> str:
    """The final progress line of a fit, written on the host from its result (``solver``:
    "ISBOR" or "SBOR"): ``ISBOR theta 0.3 done: 61 iterations  log-evidence -1230.2  RVs 24
    (1/1 converged)``, ranges over a stacked result's fits."""
    values = {"it": res.n_iter, "evidence": res.log_evidence, "n_active": res.n_active,
              "theta": res.theta, "converged": res.converged}
    return _progress_line(solver, {k: np.atleast_1d(np.asarray(v)) for k, v in values.items()})


# ---------------------------------------------------------------------------------------
# ISBOR


class _State(NamedTuple):
    slot_pos: jax.Array      # candidate position of each slot, -1 free
    mask: jax.Array
    alpha: jax.Array
    Phi: jax.Array
    fit: _Fit
    b: jax.Array
    sigma: jax.Array
    lr: jax.Array
    slot_of: jax.Array       # slot of each candidate, -1 inactive
    barred: jax.Array        # candidates whose action was rejected since the basis last changed
    S: jax.Array             # candidate statistics of the current fit (valid unless ``stale``)
    Q: jax.Array
    stale: jax.Array         # whether the fit changed since S and Q were computed
    flat: jax.Array          # iterations in a row whose evidence changed by less than min_delta
    n_pruned: jax.Array
    it: jax.Array
    done: jax.Array
    status: jax.Array
    ev_trace: jax.Array
    act_trace: jax.Array
    idx_trace: jax.Array


@partial(jit, static_argnames=("config",))
@partitioned
@checks_codes("y")
def fit_isbor(X, y, weights, cand_index, cand_valid, key, theta, *, config: ISBORConfig,
              min_delta=1e-2, alpha_init=1e-3, alpha_max=1e10, newton_rtol=1e-10, hyper_lr=0.1):
    """Fit ISBOR by Algorithm 1 (sequential Tipping-Faul selection on the Laplace evidence).

    Args:
        X: training inputs (N, d), or the (N, N) basis matrix when ``kernel="precomputed"``
            (column j centred on training row j).  Rows may be sharded over a mesh of
            devices, with ``y`` and ``weights`` sharded alike and the candidate arrays
            replicated (``docs/scaleout.md``): each device then holds its share of every
            candidate block, and the devices exchange per block the ``block x (T + 1)``
            and ``block x d`` products, never a vector over the rows.
        y: classes 0..K-1, (N,).
        weights: non-negative sample weights, (N,) (zero-weight rows are ignored and their
            centres are never selected: this is how cross-validation folds are fitted).
        cand_index: training rows (basis columns) that may become relevance vectors, (N_c,).
        cand_valid: which of them may be used, (N_c,) bool.
        key: PRNG key for the initial one-per-class draw.
        theta: kernel width (traced: a grid of widths is one program under ``jax.lax.map``,
            which gives each width the single fit's result; under ``vmap`` the batched
            products round differently, and the greedy selection can part from the single
            fit after tens of iterations).
        config: :class:`ISBORConfig` (static).
        min_delta: stopping tolerance on the log evidence (Algorithm 1, line 17).
        alpha_init: alpha of the initial basis functions (Section 5.1.4).
        alpha_max: alphas above this are pruned (Section 4.5).
        newton_rtol: relative tolerance of the inner Newton solves.
        hyper_lr: initial step length of the threshold/noise ascent.

    Returns:
        :class:`ISBORResult`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> X = jnp.linspace(-2, 2, 40)[:, None]; y = jnp.digitize(X[:, 0], jnp.array([-.7, .7]))
        >>> cfg = ISBORConfig(n_classes=3, capacity=10, max_iter=30)
        >>> r = fit_isbor(X, y, jnp.ones(40), jnp.arange(40), jnp.ones(40, bool),
        ...               jax.random.PRNGKey(0), 1.0, config=cfg)
        >>> bool(r.n_active <= 10)
        True
    """
    cfg = config
    X, y, weights, theta, center, scale = _cast_inputs(X, y, weights, theta, cfg)
    dtype = X.dtype
    n = X.shape[0]
    cap, K = cfg.capacity, cfg.n_classes
    n_c = cand_index.shape[0]
    # A cached basis is scored in one block; otherwise rows are recomputed block by block.
    block = n_c if cfg.cache_basis else min(cfg.block_size, n_c)
    n_pad = -(-n_c // block) * block
    cand_index = jnp.concatenate([cand_index.astype(jnp.int32), jnp.zeros(n_pad - n_c, jnp.int32)])
    eligible = jnp.concatenate([cand_valid.astype(bool), jnp.zeros(n_pad - n_c, bool)])
    eligible = eligible & (weights[jnp.minimum(cand_index, n - 1)] > 0)

    def rows(idx_pos):
        return candidate_rows(X, cand_index[idx_pos], theta, cfg.kernel, cfg.degree)

    if cfg.cache_basis:
        full = rows(jnp.arange(n_pad))
        block_rows = lambda start: jax.lax.dynamic_slice_in_dim(full, start, block, axis=0)
        one_col = lambda p: full[p]
    else:
        block_rows = lambda start: rows(start + jnp.arange(block))
        one_col = lambda p: rows(p[None])[0]

    # Initialise: one random eligible candidate per class (Algorithm 1, line 4).
    cand_y = y[jnp.minimum(cand_index, n - 1)]
    g = jax.random.gumbel(key, (K, n_pad), dtype)
    score = jnp.where((cand_y[None, :] == jnp.arange(K)[:, None]) & eligible[None, :], g, -jnp.inf)
    found = jnp.isfinite(jnp.max(score, axis=1))
    order = jnp.argsort(~found, stable=True)  # found classes first: slots stay compact
    picks = jnp.argmax(score, axis=1).astype(jnp.int32)[order]
    found = found[order]
    mask = jnp.zeros(cap, bool).at[:K].set(found)
    slot_pos = jnp.full(cap, -1, jnp.int32).at[:K].set(jnp.where(found, picks, -1))
    alpha = jnp.ones(cap, dtype).at[:K].set(jnp.where(found, alpha_init, 1.0))
    Phi = jnp.zeros((n, cap), dtype).at[:, :K].set(rows(picks).T * found[None, :])
    slot_of = jnp.full(n_pad, -1, jnp.int32).at[jnp.where(found, picks, n_pad)].set(
        jnp.arange(K, dtype=jnp.int32), mode="drop")
    b = _initial_thresholds(y, weights, cfg, dtype)
    sigma = jnp.ones((), dtype)
    fit = _laplace(Phi, y, weights, b, sigma, alpha, jnp.zeros(cap, dtype), newton_rtol, cfg)

    ev_trace = jnp.full(cfg.max_iter + 1, jnp.nan, dtype).at[0].set(fit.evidence)
    state = _State(
        slot_pos=slot_pos, mask=mask, alpha=alpha, Phi=Phi, fit=fit, b=b, sigma=sigma,
        lr=jnp.asarray(hyper_lr, dtype), slot_of=slot_of, barred=jnp.zeros(n_pad, bool),
        S=jnp.zeros(n_pad, dtype), Q=jnp.zeros(n_pad, dtype), stale=jnp.ones((), bool),
        flat=jnp.zeros((), jnp.int32), n_pruned=jnp.zeros((), jnp.int32), it=jnp.zeros((), jnp.int32),
        done=~fit.ok,
        status=jnp.where(fit.ok, Status.SUCCESS, Status.NOT_POSITIVE_DEFINITE).astype(jnp.int32),
        ev_trace=ev_trace, act_trace=jnp.zeros(cfg.max_iter, jnp.int32),
        idx_trace=jnp.full(cfg.max_iter, -1, jnp.int32),
    )

    def cond(s):
        return (~s.done) & (s.it < cfg.max_iter)

    def body(s: _State):
        e_start = s.fit.evidence
        n_active = jnp.sum(s.mask).astype(jnp.int32)
        if cfg.progress:
            emit(_isbor_line, it=s.it, max_iter=cfg.max_iter, evidence=e_start, n_active=n_active, theta=theta)

        def stats():
            H, Ht = _link_terms(s.Phi, s.fit.w, y, weights, s.b, s.sigma, cfg)
            return _by_tier(n_active, cap, lambda T: candidate_stats(
                block_rows, s.Phi[:, :T], s.fit.chol[:T, :T], H, Ht, n_pad, block))

        # S and Q are a function of the fit alone: after a rejected proposal (and no accepted
        # threshold step) they are still exact, and only the bar on the candidate is new.
        S, Q = jax.lax.cond(s.stale, stats, lambda: (s.S, s.Q))
        gain, action, a_new = _gains(S, Q, s.slot_of, s.alpha, eligible & ~s.barred, n_active)
        j = jnp.argmax(gain).astype(jnp.int32)
        best = gain[j]
        act = jnp.where(best > 0, action[j], Action.NONE)
        act = jnp.where((act == Action.REESTIMATE) & (a_new[j] > alpha_max), Action.PRUNE, act)
        cap_hit = (act == Action.ADD) & (n_active >= cap)
        act = jnp.where(cap_hit, Action.NONE, act).astype(jnp.int32)
        is_add = act == Action.ADD
        is_del = (act == Action.DELETE) | (act == Action.PRUNE)
        changes = is_add | is_del | (act == Action.REESTIMATE)

        # Add into the first free slot; delete by moving the last active slot into the hole.
        slot = jnp.where(is_add, jnp.minimum(n_active, cap - 1), jnp.maximum(s.slot_of[j], 0))
        last = jnp.maximum(n_active - 1, 0)
        src = jnp.where(is_del, last, slot)
        moved = s.slot_pos[last]
        col = jnp.where(is_add, one_col(j), jnp.where(is_del, s.Phi[:, src], s.Phi[:, slot]))
        Phi = s.Phi.at[:, slot].set(col)
        Phi = Phi.at[:, last].set(jnp.where(is_del, 0.0, Phi[:, last]))
        alpha = s.alpha.at[slot].set(jnp.where(is_add | (act == Action.REESTIMATE), a_new[j],
                                               jnp.where(is_del, s.alpha[src], s.alpha[slot])))
        alpha = alpha.at[last].set(jnp.where(is_del, 1.0, alpha[last]))
        w0 = s.fit.w.at[slot].set(jnp.where(is_add, 0.0, s.fit.w[src]))
        w0 = w0.at[last].set(jnp.where(is_del, 0.0, w0[last]))
        mask = jnp.arange(cap) < n_active + is_add.astype(jnp.int32) - is_del.astype(jnp.int32)
        slot_pos = s.slot_pos.at[slot].set(jnp.where(is_add, j, s.slot_pos[src]))
        slot_pos = slot_pos.at[last].set(jnp.where(is_del, -1, slot_pos[last]))
        slot_of = s.slot_of.at[moved].set(jnp.where(is_del, slot, s.slot_of[moved]))
        slot_of = slot_of.at[j].set(jnp.where(is_add, slot, jnp.where(is_del, -1, slot_of[j])))

        n_new = n_active + is_add.astype(jnp.int32) - is_del.astype(jnp.int32)
        trial = _tiered_laplace(n_new, Phi, y, weights, s.b, s.sigma, alpha, w0, newton_rtol, cfg)
        accept = changes & trial.ok & (trial.evidence >= e_start - 1e-9 * (1.0 + jnp.abs(e_start)))
        keep = lambda new, old: jnp.where(accept, new, old)
        fit = jax.tree_util.tree_map(keep, trial, s.fit)
        alpha, mask, Phi = keep(alpha, s.alpha), keep(mask, s.mask), keep(Phi, s.Phi)
        slot_pos, slot_of = keep(slot_pos, s.slot_pos), keep(slot_of, s.slot_of)
        use_all = jnp.zeros((), bool)
        if cfg.joint_reestimate:
            # Every active basis function with a predicted gain to its own closed-form alpha at
            # once, from the iteration's start; kept when its evidence beats the single action's.
            joint = (action == Action.REESTIMATE) & (gain > 0) & (a_new <= alpha_max)
            alpha_all = s.alpha.at[jnp.where(joint, s.slot_of, cap)].set(a_new, mode="drop")
            several = jnp.sum(joint) > 1
            trial_all = jax.lax.cond(
                several,
                lambda: _tiered_laplace(n_active, s.Phi, y, weights, s.b, s.sigma, alpha_all, s.fit.w,
                                        newton_rtol, cfg),
                lambda: s.fit)
            use_all = several & trial_all.ok & (trial_all.evidence > jnp.where(accept, fit.evidence, e_start))
            pick = lambda new, old: jnp.where(use_all, new, old)
            fit = jax.tree_util.tree_map(pick, trial_all, fit)
            alpha, mask, Phi = pick(alpha_all, alpha), pick(s.mask, mask), pick(s.Phi, Phi)
            slot_pos, slot_of = pick(s.slot_pos, slot_pos), pick(s.slot_of, slot_of)
        single = accept & ~use_all
        structural = single & (is_add | is_del)
        barred = jnp.where(structural, jnp.zeros_like(s.barred), s.barred.at[j].set(s.barred[j] | (changes & ~accept)))
        n_pruned = s.n_pruned + (single & (act == Action.PRUNE)).astype(jnp.int32)

        b, sigma, fit, lr = _tiered_hyper_step(jnp.where(single, n_new, n_active), Phi, y, weights, alpha,
                                               s.b, s.sigma, fit, s.lr, newton_rtol, cfg)
        stale = accept | use_all | jnp.any(b != s.b) | (sigma != s.sigma)

        code = jnp.where(use_all, Action.REESTIMATE_ALL,
                         jnp.where(changes & ~accept, Action.REJECTED, act)).astype(jnp.int32)
        small = jnp.abs(fit.evidence - e_start) < min_delta
        flat = jnp.where(small, s.flat + 1, 0)
        converged = ((best < min_delta) & small) | (flat >= cfg.patience)
        status = jnp.where(cap_hit, Status.CAPACITY_REACHED,
                           jnp.where(fit.ok, s.status, Status.NONFINITE)).astype(jnp.int32)
        return _State(
            slot_pos=slot_pos, mask=mask, alpha=alpha, Phi=Phi, fit=fit, b=b, sigma=sigma,
            lr=lr, slot_of=slot_of, barred=barred, S=S, Q=Q, stale=stale, flat=flat,
            n_pruned=n_pruned, it=s.it + 1,
            done=converged | cap_hit | ~fit.ok, status=status,
            ev_trace=s.ev_trace.at[s.it + 1].set(fit.evidence),
            act_trace=s.act_trace.at[s.it].set(code),
            idx_trace=s.idx_trace.at[s.it].set(jnp.where((act == Action.NONE) | use_all, -1, cand_index[j])),
        )

    s = jax.lax.while_loop(cond, body, state)
    status = jnp.where(s.done, s.status, Status.MAX_ITER).astype(jnp.int32)
    if cfg.progress:
        emit(_isbor_line, final=True, it=s.it, evidence=s.fit.evidence, theta=theta,
             n_active=jnp.sum(s.mask).astype(jnp.int32), converged=s.done & (status == Status.SUCCESS))
    rows = jnp.where(s.mask, cand_index[jnp.maximum(s.slot_pos, 0)], -1)
    thr_cov, cross_cov, ok = _threshold_posterior(s.Phi, y, weights, s.fit, s.alpha, s.b, s.sigma, cfg)
    status = jnp.where(ok, status, Status.NOT_POSITIVE_DEFINITE).astype(jnp.int32)
    return ISBORResult(
        config=cfg, relevance_index=rows, mask=s.mask, centres=_centres(X, rows, s.mask, cfg),
        w=s.fit.w, chol=s.fit.chol, alpha=s.alpha, b=s.b, thresholds_cov=thr_cov,
        cross_cov=cross_cov, sigma=s.sigma, theta=theta,
        log_evidence=s.fit.evidence, evidence_trace=s.ev_trace, action_trace=s.act_trace,
        index_trace=s.idx_trace, n_active=jnp.sum(s.mask).astype(jnp.int32), n_pruned=s.n_pruned,
        n_iter=s.it, converged=s.done & (status == Status.SUCCESS), status=status,
        center=center, scale=scale,
    )


# ---------------------------------------------------------------------------------------
# SBOR (batch baseline)


class _SBORState(NamedTuple):
    """The carry of :func:`fit_sbor`'s loop."""

    slot_pos: jax.Array
    mask: jax.Array
    alpha: jax.Array
    Phi: jax.Array
    fit: _Fit
    b: jax.Array
    sigma: jax.Array
    lr: jax.Array
    n_pruned: jax.Array
    it: jax.Array
    done: jax.Array
    status: jax.Array
    ev_trace: jax.Array
    act_trace: jax.Array


@partial(jit, static_argnames=("config",))
@checks_codes("y")
def fit_sbor(X, y, weights, cand_index, cand_valid, theta, *, config: ISBORConfig,
             min_delta=1e-2, alpha_init=1.0, alpha_max=1e10, alpha_tol=1e-1,
             newton_rtol=1e-10, hyper_lr=0.1):
    """Batch sparse Bayesian ordinal regression: all candidates start active (Tipping 2001).

    Each iteration: MacKay's update ``alpha_i = (1 - alpha_i Sigma_ii) / w_i^2`` for every
    active basis function, pruning of ``alpha_i > alpha_max`` (one basis function always
    stays, its alpha capped at ``alpha_max``: labels with no signal in X end there, with
    a weight near 0 and the class frequencies as predictions), Newton MAP and Laplace
    posterior (Eq. 10-11), one evidence-ascent step on thresholds and noise (as ISBOR).
    Stops when the evidence changes by less than ``min_delta`` and no active ``log alpha``
    moves by more than ``alpha_tol``.  ``config.capacity`` is ignored: the buffer holds all
    ``N_c`` candidates, so memory is ``O(N N_c + N_c^2)``.  Pruned columns are moved behind
    the active ones and the work runs at the active-set tier (as in ISBOR), so a Newton step
    costs ``O(N T^2)`` with ``T`` the active count rounded up: ``O(N N_c^2)`` at the start,
    falling as basis functions are pruned.

    Args and Returns: as :func:`fit_isbor` (no key; ``alpha_init`` is every initial alpha).
    """
    cfg = config
    X, y, weights, theta, center, scale = _cast_inputs(X, y, weights, theta, cfg)
    dtype = X.dtype
    n = X.shape[0]
    m = cand_index.shape[0]
    cand_index = cand_index.astype(jnp.int32)
    valid = cand_valid.astype(bool) & (weights[jnp.minimum(cand_index, n - 1)] > 0)
    order = jnp.argsort(~valid, stable=True)  # usable candidates first: slots stay compact
    slot_pos = order.astype(jnp.int32)
    mask = valid[order]
    Phi = candidate_columns(X, cand_index[order], theta, cfg.kernel, cfg.degree) * mask[None, :]
    alpha = jnp.where(mask, jnp.asarray(alpha_init, dtype), 1.0)
    b = _initial_thresholds(y, weights, cfg, dtype)
    sigma = jnp.ones((), dtype)
    fit = _laplace(Phi, y, weights, b, sigma, alpha, jnp.zeros(m, dtype), newton_rtol, cfg)

    def cond(c):
        return (~c.done) & (c.it < cfg.max_iter)

    def body(c):
        slot_pos, mask, alpha, Phi, fit, b, sigma, lr, n_pruned, it, _, status, ev_trace, act_trace = c
        e_start = fit.evidence
        n_active = jnp.sum(mask).astype(jnp.int32)
        if cfg.progress:
            emit(_sbor_line, it=it, max_iter=cfg.max_iter, evidence=e_start, n_active=n_active)
        sigma_diag = _by_tier(n_active, m, lambda T: jnp.ones(m, dtype).at[:T].set(
            jnp.diagonal(chol_inverse(fit.chol[:T, :T]))))
        gamma = 1.0 - alpha * sigma_diag
        w2 = fit.w * fit.w
        # gamma_i is in (0, 1] exactly; gamma_i <= 0 is rounding of a weight fixed by its
        # prior alone (alpha_i Sigma_ii = 1), i.e. an irrelevant basis function: alpha = inf,
        # never the 0 that clipping gamma would give (log|A| = -inf).
        a_new = jnp.where(gamma > 0, gamma / jnp.maximum(w2, jnp.finfo(dtype).tiny), jnp.inf)
        a_new = jnp.where(mask, a_new, 1.0)
        prune = mask & ((a_new > alpha_max) | ~jnp.isfinite(a_new))
        # Never prune them all: the most relevant one (smallest alpha) stays.
        best = jnp.argmin(jnp.where(mask, a_new, jnp.inf))
        prune = jnp.where(jnp.any(mask & ~prune), prune, prune & (jnp.arange(m) != best))
        # The one basis function kept when all would be pruned stays at alpha_max: left
        # free, its alpha grows without bound on data with no signal and the evidence
        # overflows (NaN after ~30 iterations on 10 rows with random labels).
        a_new = jnp.minimum(a_new, alpha_max)
        dlog = jnp.max(jnp.where(mask & ~prune, jnp.abs(jnp.log(a_new) - jnp.log(alpha)), 0.0))
        keep = mask & ~prune
        perm = jnp.argsort(~keep, stable=True)  # survivors first, in their old order
        slot_pos, mask = slot_pos[perm], keep[perm]
        alpha = jnp.where(mask, a_new[perm], 1.0)
        Phi = Phi[:, perm] * mask[None, :]
        w0 = jnp.where(mask, fit.w[perm], 0.0)
        n_keep = jnp.sum(mask).astype(jnp.int32)
        fit = _tiered_laplace(n_keep, Phi, y, weights, b, sigma, alpha, w0, newton_rtol, cfg)
        b, sigma, fit, lr = _tiered_hyper_step(n_keep, Phi, y, weights, alpha, b, sigma, fit, lr,
                                               newton_rtol, cfg)
        converged = (jnp.abs(fit.evidence - e_start) < min_delta) & (dlog < alpha_tol)
        n_prune = jnp.sum(prune).astype(jnp.int32)
        status = jnp.where(fit.ok, status, Status.NONFINITE).astype(jnp.int32)
        return _SBORState(slot_pos, mask, alpha, Phi, fit, b, sigma, lr, n_pruned + n_prune, it + 1,
                          converged | ~fit.ok, status, ev_trace.at[it + 1].set(fit.evidence),
                          act_trace.at[it].set(jnp.where(n_prune > 0, Action.PRUNE, Action.REESTIMATE)))

    init = _SBORState(slot_pos, mask, alpha, Phi, fit, b, sigma, jnp.asarray(hyper_lr, dtype),
                      jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), ~fit.ok,
                      jnp.where(fit.ok, Status.SUCCESS, Status.NOT_POSITIVE_DEFINITE).astype(jnp.int32),
                      jnp.full(cfg.max_iter + 1, jnp.nan, dtype).at[0].set(fit.evidence),
                      jnp.zeros(cfg.max_iter, jnp.int32))
    slot_pos, mask, alpha, Phi, fit, b, sigma, _, n_pruned, it, done, status, ev_trace, act_trace = \
        jax.lax.while_loop(cond, body, init)
    status = jnp.where(done, status, Status.MAX_ITER).astype(jnp.int32)
    if cfg.progress:
        emit(_sbor_line, final=True, it=it, evidence=fit.evidence,
             n_active=jnp.sum(mask).astype(jnp.int32), converged=done & (status == Status.SUCCESS))
    rows = jnp.where(mask, cand_index[slot_pos], -1)
    thr_cov, cross_cov, ok = _threshold_posterior(Phi, y, weights, fit, alpha, b, sigma, cfg)
    status = jnp.where(ok, status, Status.NOT_POSITIVE_DEFINITE).astype(jnp.int32)
    return ISBORResult(
        config=cfg, relevance_index=rows, mask=mask, centres=_centres(X, rows, mask, cfg), w=fit.w,
        chol=fit.chol, alpha=alpha, b=b, thresholds_cov=thr_cov, cross_cov=cross_cov,
        sigma=sigma, theta=theta, log_evidence=fit.evidence,
        evidence_trace=ev_trace, action_trace=act_trace,
        index_trace=jnp.full(cfg.max_iter, -1, jnp.int32), n_active=jnp.sum(mask).astype(jnp.int32),
        n_pruned=n_pruned, n_iter=it, converged=done & (status == Status.SUCCESS), status=status,
        center=center, scale=scale,
    )


# ---------------------------------------------------------------------------------------
# Prediction



def weight_cov(result: ISBORResult):
    """Marginal covariance of the slot weights under the joint posterior of (w, b), (M, M):
    ``P_ww^{-1} + Sigma_wb Sigma_bb^{-1} Sigma_wb^T`` (see :func:`bayesord._laplace.joint_posterior`)."""
    cross = result.cross_cov
    return chol_inverse(result.chol) + cross @ jnp.linalg.solve(result.thresholds_cov, cross.T)


def predict_isbor(result: ISBORResult, X, *, kernel=None, degree=None, link=None) -> ISBORPrediction:
    """Predictive distribution at new points.

    Inputs are standardised with the fit's ``center`` and ``scale``.  Under the joint
    Laplace posterior of (w, b), ``f(x) = phi(x)^T w`` has mean ``m = phi(x)^T w*`` and
    ``u_k = b_k - f(x)`` variance ``s_k^2 = v + Sigma_bb[k, k] - 2 a_k + a^T Sigma_bb^{-1} a``
    with ``v = phi(x)^T P_ww^{-1} phi(x)`` (the weights' conditional posterior) and
    ``a = Sigma_wb^T phi(x)``; ``P(y <= k | x) = F((b_k - m) / s_k)`` with
    ``s_k = sqrt(sigma^2 + s_k^2)`` for the probit (exact), the probit approximation for
    the logit, and quadrature for the other links
    (:func:`bayesord._likelihood.log_predictive_probs`).  ``latent_var`` is the
    marginal variance of f(x), ``v + a^T Sigma_bb^{-1} a``.  The posterior spread of the
    class probabilities themselves is :func:`sample_class_probs_isbor`'s.

    Args:
        result: a fitted :class:`ISBORResult`.
        X: new inputs (n, d), or for ``kernel="precomputed"`` their basis values against
            every training column, (n, N).
        kernel: read from ``result.config``; accepted for older code only when it equals it.
        degree: likewise.
        link: likewise.

    Returns:
        :class:`ISBORPrediction`.
    """
    check_settings(result.config, kernel=kernel, degree=degree, link=link)
    return _predict_isbor(result, X)


def _basis(result: ISBORResult, X):
    """The active basis functions at new inputs, (n, M), inactive slots zero."""
    X = (X.astype(result.w.dtype) - result.center) / result.scale
    if result.config.kernel == "precomputed":
        Phi = jnp.take(X, jnp.maximum(result.relevance_index, 0), axis=1)
    else:
        Phi = kernel_matrix(X, result.centres, result.theta, result.config.kernel, result.config.degree)
    return Phi * result.mask[None, :]


@jit
def _predict_isbor(result: ISBORResult, X) -> ISBORPrediction:
    Phi = _basis(result, X)
    mean = Phi @ result.w
    V = solve_triangular(result.chol, Phi.T, lower=True)
    a = Phi @ result.cross_cov
    L_b = jnp.linalg.cholesky(result.thresholds_cov)
    c = jax.scipy.linalg.cho_solve((L_b, True), a.T).T
    weight_var = jnp.sum(V * V, axis=0)
    var = weight_var + jnp.sum(a * c, axis=1)
    margin_var = var[:, None] + jnp.diag(result.thresholds_cov)[None, :] - 2.0 * a
    log_p = log_predictive_probs(mean, margin_var, result.sigma, result.b, result.config.link)[0]
    labels = jnp.sum(mean[:, None] > result.b[None, :], axis=1).astype(jnp.int32)
    return ISBORPrediction(labels=labels, proba=jnp.exp(log_p), log_proba=log_p,
                           latent_mean=mean, latent_var=var, weight_var=weight_var)


def sample_class_probs_isbor(result: ISBORResult, X, key, *, n_draws: int = 200):
    """Class probabilities under draws of (w, b) from the joint Laplace posterior, shape
    (n_draws, n, K).

    Each draw gives ``P(y = k | x, w_s, b_s)`` with the noise at its estimate; the
    thresholds are drawn in (b_1, log-gap) space (:func:`bayesord._laplace.joint_draws`),
    so every draw's are ordered.  The spread of the draws is the posterior uncertainty of
    the class probabilities, thresholds included; their mean approaches
    :func:`predict_isbor`'s ``proba`` up to the linearisation behind it.

    Args:
        result: a fitted :class:`ISBORResult`.
        X: new inputs, as for :func:`predict_isbor`.
        key: a ``jax.random`` key.
        n_draws: the number of draws.
    """
    return _sample_class_probs_isbor(result, X, key, n_draws=n_draws)


@partial(jit, static_argnames=("n_draws",))
def _sample_class_probs_isbor(result: ISBORResult, X, key, *, n_draws: int):
    Phi = _basis(result, X)
    active = result.mask.astype(result.w.dtype)
    both = active[:, None] * active[None, :] > 0
    # Inactive slots get an identity block, so the factorisation sees a proper covariance;
    # their basis columns are zero, so their draws change nothing.
    w_cov = jnp.where(both, weight_cov(result), jnp.eye(active.shape[0], dtype=active.dtype))
    w, b = joint_draws(result.w * active, w_cov, result.cross_cov * active[:, None], result.b,
                       result.thresholds_cov, key, n_draws)
    scale = jnp.broadcast_to(result.sigma, (Phi.shape[0],))
    return jax.vmap(lambda ws, bs: jnp.exp(log_class_probs(Phi @ ws, scale, bs, result.config.link)))(w, b)
