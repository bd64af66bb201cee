"""Newton MAP, Laplace posterior and Laplace log evidence for ordinal models linear in w.

The latent function is ``f = Phi w`` with a design (basis) matrix ``Phi`` of shape
(n, m), the prior is ``w ~ N(0, A^{-1})`` with ``A = diag(alpha)`` (ISBOR paper, Eq. 5),
and the likelihood is the ordinal likelihood of :mod:`bayesord._likelihood` (Eq. 4).

* :func:`newton_map` maximises the log posterior Eq. (7) over ``w`` for fixed
  thresholds and noise: Newton steps with the Hessian ``-(Phi^T H Phi + A)`` (Eq. 9),
  backtracking so the log posterior never decreases.  The Laplace posterior is
  ``N(w*, Sigma)`` with ``Sigma = (A + Phi^T H Phi)^{-1}`` (Eq. 10); we return the
  Cholesky factor of the precision, never an explicit inverse.
* :func:`laplace_log_evidence` is Eq. (12):
  ``L(w*) - 1/2 w*^T A w* + 1/2 log|A| - 1/2 log|A + Phi^T H Phi|``.
* :func:`map_weights` wraps the Newton solve in a custom VJP that differentiates the
  optimum by the implicit function theorem (``dw*/deta = Sigma dG/deta`` where
  ``G = d logpost / dw``), reusing the Cholesky factor; the while loop itself is never
  differentiated.
* :func:`newton_map_joint` maximises over ``(w, b)`` jointly (thresholds as parameters with
  a flat prior): the ordinal log-likelihood is jointly concave in ``(f, b)``, so Newton with
  backtracking (which also rejects any step that would break the threshold order)
  converges to the unique maximum.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._likelihood import ordinal_loglik, ordinal_terms
from ._linalg import chol_logdet, chol_solve, safe_cholesky
from ._status import Status

__all__ = [
    "NewtonResult",
    "newton_map",
    "map_weights",
    "laplace_at",
    "laplace_log_evidence",
    "JointResult",
    "newton_map_joint",
]

_ARMIJO = 1e-4
_MAX_HALVINGS = 40


class NewtonResult(NamedTuple):
    """Outcome of the MAP solve over w for fixed hyperparameters."""

    w: jax.Array
    """MAP weights w*, shape (m,)."""
    chol: jax.Array
    """Lower Cholesky factor of the posterior precision A + Phi^T H Phi at w*, (m, m)."""
    log_post: jax.Array
    """Unnormalised log posterior at w* (Eq. 7)."""
    loglik: jax.Array
    """Log-likelihood L(w*)."""
    n_iter: jax.Array
    """Newton iterations taken."""
    converged: jax.Array
    """Whether the Newton decrement met the tolerance."""
    status: jax.Array
    """A :class:`bayesord._status.Status` code."""


def _precision(Phi, weights, d_ff, alpha):
    """A + Phi^T H Phi with H = -weights * d2 logP/df2 (non-negative)."""
    h = -weights * d_ff
    return (Phi * h[:, None]).T @ Phi + jnp.diag(alpha)


def _gram(Phi_t, h, extra):
    """``Phi^T [diag(h) Phi, E]`` from the sample-major ``Phi_t = Phi^T`` (m, n) and ``E^T``.

    ``extra`` holds the rows of ``E^T`` (shape (e, n)); the result is (m, m + e).  Both
    operands of the one matrix product run along the samples contiguously, which on CPU is
    faster than contracting the long axis of a row-major ``Phi``.
    """
    return Phi_t @ jnp.concatenate([Phi_t * h[None, :], extra], axis=0).T


def _log_post(w, Phi, y, weights, b, sigma, alpha, link):
    f = Phi @ w
    return ordinal_loglik(f, y, b, sigma, link, weights) - 0.5 * jnp.sum(alpha * w * w)


def _termination(decrement, value, rtol):
    """Newton decrement criterion scaled by the objective: atol + rtol * |value|."""
    return 0.5 * decrement <= rtol * (1.0 + jnp.abs(value))


def _line_search(evaluate, x, step, value, aux, slope, skip):
    """Backtracking (Armijo) from the full Newton step.

    The loop starts at ``t = 2`` with a failing value, so its first pass tries ``t = 1``
    and ``evaluate`` is traced once; ``skip`` (the solver is stopping anyway) runs no pass.
    Returns ``(t, ok, value, aux)`` at the accepted point (the inputs' ``value, aux`` when
    none is accepted).
    """

    def accepted(t, new_val):
        return jnp.isfinite(new_val) & (new_val >= value + _ARMIJO * t * slope)

    def cond(c):
        t, new_val, _, k = c
        return ~accepted(t, new_val) & (k <= _MAX_HALVINGS)

    def body(c):
        t, _, _, k = c
        t = 0.5 * t
        new_val, new_aux = evaluate(x + t * step)
        return t, new_val, new_aux, k + 1

    init = (jnp.asarray(2.0, value.dtype), jnp.asarray(-jnp.inf, value.dtype), aux,
            jnp.where(skip, _MAX_HALVINGS + 1, 0))
    t, new_val, new_aux, _ = jax.lax.while_loop(cond, body, init)
    ok = accepted(t, new_val)
    keep = lambda new, old: jnp.where(ok, new, old)
    return t, ok, keep(new_val, value), jax.tree_util.tree_map(keep, new_aux, aux)


def _newton(evaluate, derivatives, x0, rtol, max_iter):
    """Damped Newton ascent shared by the MAP solvers.

    ``evaluate(x) -> (value, aux)`` gives the objective (``-inf`` where x is infeasible)
    and whatever per-sample quantities the derivatives need (the likelihood terms);
    ``derivatives(x, aux) -> (grad, precision)`` with ``precision`` the negative Hessian.
    The line search evaluates trial points, and the accepted point's ``aux`` is carried to
    the next pass, so each Newton pass costs one evaluation plus the matrix products.
    Once the Newton decrement meets the tolerance, one more (polishing) step is taken and
    the loop ends after forming the derivatives there: the quadratic convergence of that
    last step makes ``x`` accurate enough for implicit differentiation, and the returned
    Cholesky factor belongs to the returned point.

    Returns:
        (x, value, chol, n_iter, converged, status).
    """
    dtype = x0.dtype

    def cond(c):
        return ~c[5]

    def body(c):
        x, value, aux, _, it, _, _, pending = c
        grad, prec = derivatives(x, aux)
        L, ok = safe_cholesky(prec)
        step = chol_solve(L, grad)
        decrement = grad @ step
        finite = jnp.isfinite(value) & jnp.all(jnp.isfinite(grad))
        finished = _termination(decrement, value, rtol)
        capped = it >= max_iter
        stopping = pending | ~finite | ~ok | capped
        t, ls_ok, new_value, new_aux = _line_search(evaluate, x, step, value, aux, decrement,
                                                    stopping)
        stop = stopping | ~ls_ok
        status = jnp.where(
            ~finite, Status.NONFINITE,
            jnp.where(~ok, Status.NOT_POSITIVE_DEFINITE,
                      jnp.where(pending | finished, Status.SUCCESS,
                                jnp.where(capped, Status.MAX_ITER,
                                          jnp.where(ls_ok, Status.SUCCESS, Status.LINESEARCH_FAILED)))))
        keep = lambda new, old: jnp.where(stop, old, new)
        return (keep(x + t * step, x), keep(new_value, value),
                jax.tree_util.tree_map(keep, new_aux, aux), L, it + (~stop).astype(jnp.int32),
                stop, status.astype(jnp.int32), finished & ~stop)

    n = x0.shape[0]
    value0, aux0 = evaluate(x0)
    init = (x0, value0, aux0, jnp.eye(n, dtype=dtype), jnp.zeros((), jnp.int32),
            jnp.zeros((), bool), jnp.asarray(Status.SUCCESS, jnp.int32), jnp.zeros((), bool))
    x, value, _, L, n_iter, _, status, _ = jax.lax.while_loop(cond, body, init)
    return x, value, L, n_iter, status == Status.SUCCESS, status


@partial(jax.jit, static_argnames=("link", "max_iter"))
def newton_map(Phi, y, weights, b, sigma, alpha, w0, rtol, *, link="probit", max_iter=100):
    """Maximise the log posterior (Eq. 7) over w by damped Newton.

    Args:
        Phi: design matrix, shape (n, m).
        y: classes 0..K-1, shape (n,).
        weights: non-negative sample weights, shape (n,).
        b: ordered thresholds, shape (K-1,).
        sigma: noise scale.
        alpha: prior precisions, shape (m,) (all positive).
        w0: starting point, shape (m,).
        rtol: relative tolerance on the Newton decrement.
        link: "probit" or "logit".
        max_iter: iteration cap.

    Returns:
        :class:`NewtonResult`.
    """
    m = Phi.shape[1]
    Phi_t = Phi.T  # materialised once, outside the Newton loop (see _gram)

    def evaluate(w):
        t = ordinal_terms(w @ Phi_t, y, b, sigma, link)
        return jnp.sum(weights * t.logp) - 0.5 * jnp.sum(alpha * w * w), t

    def derivatives(w, t):
        rows = _gram(Phi_t, -weights * t.d_ff, (weights * t.d_f)[None, :])
        return rows[:, m] - alpha * w, rows[:, :m] + jnp.diag(alpha)

    w, value, L, n_iter, converged, status = _newton(evaluate, derivatives, w0.astype(Phi.dtype),
                                                     rtol, max_iter)
    return NewtonResult(w=w, chol=L, log_post=value, loglik=value + 0.5 * jnp.sum(alpha * w * w),
                        n_iter=n_iter, converged=converged, status=status)


def _grad_w(w, Phi, weights, b, sigma, alpha, y, link):
    """G(w, eta) = d log posterior / d w; zero at the MAP."""
    return jax.grad(_log_post)(w, Phi, y, weights, b, sigma, alpha, link)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def map_weights(link, max_iter, Phi, weights, b, sigma, alpha, y, w0_rtol):
    """MAP weights w*(Phi, weights, b, sigma, alpha), differentiable by implicit function theorem.

    ``w0_rtol = (w0, rtol)`` is the warm start and tolerance (no gradient flows to it).

    Returns:
        (w, n_iter, converged, status): only ``w`` carries derivatives.  Recompute the
        log posterior and precision at ``w`` with :func:`laplace_at` to differentiate them.
    """
    w0, rtol = w0_rtol
    res = newton_map(Phi, y, weights, b, sigma, alpha, w0, rtol, link=link, max_iter=max_iter)
    return res.w, res.n_iter, res.converged, res.status


def _map_fwd(link, max_iter, Phi, weights, b, sigma, alpha, y, w0_rtol):
    w0, rtol = w0_rtol
    res = newton_map(Phi, y, weights, b, sigma, alpha, w0, rtol, link=link, max_iter=max_iter)
    saved = (res.w, res.chol, Phi, weights, b, sigma, alpha, y, w0_rtol)
    return (res.w, res.n_iter, res.converged, res.status), saved


def _map_bwd(link, max_iter, saved, cot):
    w, L, Phi, weights, b, sigma, alpha, y, w0_rtol = saved
    v = chol_solve(L, cot[0])
    _, vjp = jax.vjp(lambda *eta: _grad_w(w, *eta, y, link), Phi, weights, b, sigma, alpha)
    no_grad_y = np.zeros(y.shape, dtype=jax.dtypes.float0)
    no_grad_start = jax.tree_util.tree_map(jnp.zeros_like, w0_rtol)
    return (*vjp(v), no_grad_y, no_grad_start)


map_weights.defvjp(_map_fwd, _map_bwd)


def laplace_at(w, Phi, y, weights, b, sigma, alpha, link="probit"):
    """Log posterior, log-likelihood and precision factor at a given ``w`` (differentiable).

    Returns:
        (log_post, loglik, chol, ok) with ``chol`` the lower Cholesky factor of
        ``A + Phi^T H Phi`` (Eq. 10) and ``ok`` False if it failed.
    """
    t = ordinal_terms(Phi @ w, y, b, sigma, link)
    loglik = jnp.sum(weights * t.logp)
    L, ok = safe_cholesky(_precision(Phi, weights, t.d_ff, alpha))
    return loglik - 0.5 * jnp.sum(alpha * w * w), loglik, L, ok


def laplace_log_evidence(log_post, chol, alpha):
    """Laplace log evidence, Eq. (12): ``log_post(w*) + 1/2 log|A| - 1/2 log|A + Phi^T H Phi|``."""
    return log_post + 0.5 * jnp.sum(jnp.log(alpha)) - 0.5 * chol_logdet(chol)


class JointResult(NamedTuple):
    """Outcome of the joint MAP over weights and thresholds."""

    w: jax.Array
    """MAP weights, shape (m,)."""
    b: jax.Array
    """MAP thresholds, shape (K-1,)."""
    chol: jax.Array
    """Lower Cholesky factor of the joint precision over (w, b), shape (m+K-1, m+K-1)."""
    log_post: jax.Array
    """Log posterior (log-likelihood minus the Gaussian prior on w) at the optimum."""
    loglik: jax.Array
    """Log-likelihood at the optimum."""
    n_iter: jax.Array
    """Newton iterations taken."""
    converged: jax.Array
    """Whether the Newton decrement met the tolerance."""
    status: jax.Array
    """A :class:`bayesord._status.Status` code."""


def _joint_derivatives(Phi_t, y, weights, t, w, n_thr, alpha):
    """Gradient and negative Hessian of the joint log posterior over (w, b).

    ``t`` are the per-sample :class:`OrdinalTerms` at ``(Phi w, b)`` with ``n_thr``
    thresholds and ``Phi_t = Phi^T``.  The rows for ``w`` (``Phi^T H Phi``, the cross block
    with the thresholds and the gradient) come from one matrix product (:func:`_gram`); the
    threshold block from segment sums over the classes.
    """
    m = Phi_t.shape[0]
    lo_idx = jnp.where(y >= 1, y - 1, n_thr)  # index n_thr collects the (zero) infinite ends
    hi_idx = jnp.where(y <= n_thr - 1, y, n_thr)
    seg = lambda v, idx: jax.ops.segment_sum(weights * v, idx, num_segments=n_thr + 1)[:n_thr]
    k = jnp.arange(n_thr)[:, None]
    cross = (jnp.where(lo_idx[None, :] == k, weights * t.d_flo, 0.0)
             + jnp.where(hi_idx[None, :] == k, weights * t.d_fhi, 0.0))
    rows = _gram(Phi_t, weights * t.d_ff, jnp.concatenate([cross, (weights * t.d_f)[None, :]]))
    h_ww = rows[:, :m] - jnp.diag(alpha)
    h_wb = rows[:, m:m + n_thr]
    g_w = rows[:, -1] - alpha * w
    g_b = seg(t.d_lo, lo_idx) + seg(t.d_hi, hi_idx)
    diag_b = seg(t.d_lolo, lo_idx) + seg(t.d_hihi, hi_idx)
    # d_lohi couples thresholds y-1 and y of the classes strictly inside.
    off = seg(jnp.where((y >= 1) & (y <= n_thr - 1), t.d_lohi, 0.0), lo_idx)[: n_thr - 1]
    h_bb = jnp.diag(diag_b) + jnp.diag(off, 1) + jnp.diag(off, -1)
    hess = jnp.block([[h_ww, h_wb], [h_wb.T, h_bb]])
    return jnp.concatenate([g_w, g_b]), -hess


@partial(jax.jit, static_argnames=("link", "max_iter"))
def newton_map_joint(Phi, y, weights, b0, sigma, alpha, w0, rtol, *, link="probit", max_iter=100):
    """Maximise ``log p(y | w, b) - 1/2 w^T A w`` jointly over (w, b).

    With ``alpha = 0`` this is the maximum-likelihood ordinal regression (what
    statsmodels' ``OrderedModel`` computes); its Laplace covariance is the inverse
    observed information.  Steps that would make the thresholds non-increasing give a
    non-finite objective and are backtracked.

    Args: as :func:`newton_map`, with ``b0`` the starting thresholds (alpha may be 0).

    Returns:
        :class:`JointResult`.
    """
    m = Phi.shape[1]

    n_thr = b0.shape[0]
    Phi_t = Phi.T  # materialised once, outside the Newton loop (see _gram)

    def evaluate(x):
        w, b = x[:m], x[m:]
        t = ordinal_terms(w @ Phi_t, y, b, sigma, link)
        value = jnp.sum(weights * t.logp) - 0.5 * jnp.sum(alpha * w * w)
        return jnp.where(jnp.all(jnp.diff(b) > 0), value, -jnp.inf), t

    def derivatives(x, t):
        return _joint_derivatives(Phi_t, y, weights, t, x[:m], n_thr, alpha)

    x0 = jnp.concatenate([w0, b0]).astype(Phi.dtype)
    x, value, L, n_iter, converged, status = _newton(evaluate, derivatives, x0, rtol, max_iter)
    loglik = value + 0.5 * jnp.sum(alpha * x[:m] ** 2)
    return JointResult(w=x[:m], b=x[m:], chol=L, log_post=value, loglik=loglik,
                       n_iter=n_iter, converged=converged, status=status)
