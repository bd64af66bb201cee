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


def _log_post(w, Phi, y, weights, b, sigma, alpha, link):
    f = Phi @ w
    return ordinal_loglik(f, y, b, sigma, link, weights) - 0.5 * jnp.sum(alpha * w * w)


def _termination(decrement, value, rtol):
    """Newton decrement criterion scaled by the objective: atol + rtol * |value|."""
    return 0.5 * decrement <= rtol * (1.0 + jnp.abs(value))


def _line_search(objective, x, step, value, slope):
    """Backtracking (Armijo) from the full Newton step; returns (t, new_value, ok)."""

    def cond(c):
        t, new_val, k = c
        ok = jnp.isfinite(new_val) & (new_val >= value + _ARMIJO * t * slope)
        return (~ok) & (k < _MAX_HALVINGS)

    def body(c):
        t, _, k = c
        t = 0.5 * t
        return t, objective(x + t * step), k + 1

    one = jnp.ones((), value.dtype)
    t, new_val, _ = jax.lax.while_loop(cond, body, (one, objective(x + step), 0))
    ok = jnp.isfinite(new_val) & (new_val >= value + _ARMIJO * t * slope)
    return t, new_val, ok


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
    dtype = Phi.dtype
    objective = lambda w: _log_post(w, Phi, y, weights, b, sigma, alpha, link)

    def derivatives(w):
        t = ordinal_terms(Phi @ w, y, b, sigma, link)
        grad = Phi.T @ (weights * t.d_f) - alpha * w
        L, ok = safe_cholesky(_precision(Phi, weights, t.d_ff, alpha))
        return grad, L, ok

    def cond(c):
        return (~c[4]) & (c[3] < max_iter)

    def body(c):
        w, value, _, it, _, _ = c
        grad, L, ok = derivatives(w)
        step = chol_solve(L, grad)
        decrement = grad @ step
        t, new_val, ls_ok = _line_search(objective, w, step, value, decrement)
        finished = _termination(decrement, value, rtol)
        status = jnp.where(
            ~ok,
            Status.NOT_POSITIVE_DEFINITE,
            jnp.where(finished, Status.SUCCESS, jnp.where(ls_ok, Status.SUCCESS, Status.LINESEARCH_FAILED)),
        ).astype(jnp.int32)
        move = ok & ls_ok & ~finished
        w_new = jnp.where(move, w + t * step, w)
        v_new = jnp.where(move, new_val, value)
        stop = finished | ~ok | ~ls_ok
        return w_new, v_new, L, it + 1, stop, status

    m = Phi.shape[1]
    init = (
        w0.astype(dtype),
        objective(w0.astype(dtype)),
        jnp.eye(m, dtype=dtype),
        jnp.zeros((), jnp.int32),
        jnp.zeros((), bool),
        jnp.asarray(Status.SUCCESS, jnp.int32),
    )
    w, value, _, n_iter, done, status = jax.lax.while_loop(cond, body, init)
    # Factor at the final point (the loop's factor belongs to the previous iterate).
    t = ordinal_terms(Phi @ w, y, b, sigma, link)
    L, ok = safe_cholesky(_precision(Phi, weights, t.d_ff, alpha))
    converged = done & (status == Status.SUCCESS)
    status = jnp.where(done, status, Status.MAX_ITER)
    status = jnp.where(ok, status, Status.NOT_POSITIVE_DEFINITE)
    status = jnp.where(jnp.isfinite(value), status, Status.NONFINITE).astype(jnp.int32)
    return NewtonResult(
        w=w,
        chol=L,
        log_post=value,
        loglik=jnp.sum(weights * t.logp),
        n_iter=n_iter,
        converged=converged & ok,
        status=status,
    )


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


def _joint_derivatives(Phi, y, weights, w, b, sigma, alpha, link):
    """Gradient and negative Hessian of the joint log posterior over (w, b)."""
    n_thr = b.shape[0]
    t = ordinal_terms(Phi @ w, y, b, sigma, link)
    lo_idx = jnp.where(y >= 1, y - 1, n_thr)  # index n_thr collects the (zero) infinite ends
    hi_idx = jnp.where(y <= n_thr - 1, y, n_thr)
    seg = lambda v, idx: jax.ops.segment_sum(weights * v, idx, num_segments=n_thr + 1)[:n_thr]
    g_w = Phi.T @ (weights * t.d_f) - alpha * w
    g_b = seg(t.d_lo, lo_idx) + seg(t.d_hi, hi_idx)
    onehot_lo = jax.nn.one_hot(lo_idx, n_thr + 1, dtype=Phi.dtype)[:, :n_thr]
    onehot_hi = jax.nn.one_hot(hi_idx, n_thr + 1, dtype=Phi.dtype)[:, :n_thr]
    M = onehot_lo * (weights * t.d_flo)[:, None] + onehot_hi * (weights * t.d_fhi)[:, None]
    h_ww = (Phi * (weights * t.d_ff)[:, None]).T @ Phi - jnp.diag(alpha)
    h_wb = Phi.T @ M
    diag_b = seg(t.d_lolo, lo_idx) + seg(t.d_hihi, hi_idx)
    # d_lohi couples thresholds y-1 and y of the classes strictly inside.
    off = seg(jnp.where((y >= 1) & (y <= n_thr - 1), t.d_lohi, 0.0), lo_idx)[: n_thr - 1]
    h_bb = jnp.diag(diag_b) + jnp.diag(off, 1) + jnp.diag(off, -1)
    hess = jnp.block([[h_ww, h_wb], [h_wb.T, h_bb]])
    return jnp.concatenate([g_w, g_b]), -hess, jnp.sum(weights * t.logp)


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
    dtype = Phi.dtype

    def objective(x):
        w, b = x[:m], x[m:]
        ordered = jnp.all(jnp.diff(b) > 0)
        val = _log_post(w, Phi, y, weights, b, sigma, alpha, link)
        return jnp.where(ordered, val, -jnp.inf)

    def cond(c):
        return (~c[3]) & (c[2] < max_iter)

    def body(c):
        x, value, it, _, _ = c
        grad, prec, _ = _joint_derivatives(Phi, y, weights, x[:m], x[m:], sigma, alpha, link)
        L, ok = safe_cholesky(prec)
        step = chol_solve(L, grad)
        decrement = grad @ step
        t, new_val, ls_ok = _line_search(objective, x, step, value, decrement)
        finished = _termination(decrement, value, rtol)
        status = jnp.where(
            ~ok,
            Status.NOT_POSITIVE_DEFINITE,
            jnp.where(finished | ls_ok, Status.SUCCESS, Status.LINESEARCH_FAILED),
        ).astype(jnp.int32)
        move = ok & ls_ok & ~finished
        x_new = jnp.where(move, x + t * step, x)
        v_new = jnp.where(move, new_val, value)
        return x_new, v_new, it + 1, finished | ~ok | ~ls_ok, status

    x0 = jnp.concatenate([w0, b0]).astype(dtype)
    init = (x0, objective(x0), jnp.zeros((), jnp.int32), jnp.zeros((), bool),
            jnp.asarray(Status.SUCCESS, jnp.int32))
    x, value, n_iter, done, status = jax.lax.while_loop(cond, body, init)
    _, prec, loglik = _joint_derivatives(Phi, y, weights, x[:m], x[m:], sigma, alpha, link)
    L, ok = safe_cholesky(prec)
    converged = done & (status == Status.SUCCESS) & ok
    status = jnp.where(done, status, Status.MAX_ITER)
    status = jnp.where(ok, status, Status.NOT_POSITIVE_DEFINITE)
    status = jnp.where(jnp.isfinite(value), status, Status.NONFINITE).astype(jnp.int32)
    return JointResult(w=x[:m], b=x[m:], chol=L, log_post=value, loglik=loglik,
                       n_iter=n_iter, converged=converged, status=status)
