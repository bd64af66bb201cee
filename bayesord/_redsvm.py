"""RED-SVM: ordinal regression as one extended binary SVM, with a family of losses.

Source: Seah, Tsang & Ong, "Transductive Ordinal Regression" (TOR paper), Section II-B and
IV-A/B, after Li & Lin's reduction.  Each example ``(x_i, y_i)`` with ``y_i`` in 1..K
becomes K-1 binary examples (Eq. 1)::

    x_i^k = (x_i, e_k),   y_i^k = 1 - 2 I[y_i <= k],   k = 1..K-1,

a binary classifier with weight ``(w, -theta)`` (Eq. 2) scores them with
``g_k(x) = w.x - theta_k - b`` and the rank is ``f(x) = 1 + sum_k I[g_k(x) > 0]`` (Eq. 3).
Training solves Eq. (9) with any binary loss of Table II superimposed over the K-1 tasks
(Eq. 6)::

    min_{w, theta, b}  1/2 |w|^2 + 1/2 |theta|^2 + sum_i c_i sum_k loss(y_i^k g_k(x_i)),

where ``loss(m)`` is written as a function of the binary margin ``m = y_i^k a``:
hinge ``max(0, 1-m)``, squared hinge ``max(0, 1-m)^2``, logistic ``log(1+exp(-m))``,
square ``(1-m)^2 = (a - y_i^k)^2`` and Laplacian ``|1-m| = |a - y_i^k|``.
The intercept ``b`` is not regularised (it is the multiplier of the equality constraint of
the dual Eq. 11); ``fit_intercept=False`` drops it.

Solver.  For a fixed ``b`` the problem is a bias-free linear SVM over the extended examples;
its dual::

    max_alpha  sum_j c_j psi(alpha_j / c_j) + b sum_j alpha_j s_j - 1/2 |w(alpha)|^2 - 1/2 |theta(alpha)|^2,
    w = sum_{i,k} alpha_ik s_ik x_i,   theta_k = -sum_i alpha_ik s_ik,

(``psi(u) = -loss*(-u)``: ``u`` on [0,1] for hinge, on [-1,1] for Laplacian, ``u - u^2/4``
on u>=0 / all u for squared hinge / square, the binary entropy on [0,1] for logistic) is
maximised by dual coordinate descent (Hsieh et al. 2008; Yu et al. 2011 for logistic), with
each row's K-1 coordinates updated together so that a row costs one dot product and one
axpy.  The exact duality gap is computed after each epoch and is the stopping rule.
The unregularised intercept is found by an outer one-dimensional convex search: the optimal
value ``V(b)`` is convex with ``V'(b) = sum_j alpha_j(b) s_j``, so the root of that monotone
function (the equality constraint of Eq. 11) is bracketed and refined by alternating
regula-falsi and bisection steps, each warm-started from the previous dual point.

Kernels (Section V-B).  The kernel model of Eq. (11) is trained in the primal on an
empirical (Nystrom) feature map ``z(x) = Lambda^{-1/2} U^T k(L, x)`` of a positive definite
kernel, with ``K_LL = U Lambda U^T``.  With every training row as landmark this is exact (the
representer theorem puts ``w`` in the span of the training rows); with m < n landmarks it is
the usual low-rank approximation (memory O(n m), time O(n m^2) for the map).
The perceptron kernel ``-|x - x'|`` (Delta_p = 0) is only conditionally positive definite;
it is replaced by ``|x - z0| + |x' - z0| - |x - x'|`` (z0 the landmark mean), which is
positive definite and equals the perceptron kernel plus terms ``a(x) + a(x')`` that cancel
under the dual equality constraint, so with the intercept the solution and the decision
values ``g_k`` are the same as those of Eq. (11) with ``Delta_p = 0``.

Sparse input is held as padded rows (:class:`bayesord._sparse.PaddedRows`, built from scipy
CSR on the host by :func:`bayesord._sparse.to_padded_rows`): each row keeps its nonzeros and
is padded with explicit zeros to the longest row.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._basis import KernelMap, blocked_kernel_matrix, fit_kernel_map, transform_kernel_map
from ._loops import jit_serial_cpu, permutation
from ._precision import jit
from ._results import Prediction, checks_codes, result_type
from ._sparse import PaddedRows, rmatvec, row_dots, row_sq_norms
from ._status import final_status

__all__ = [
    "LOSSES",
    "KERNELS",
    "RedSVMConfig",
    "RedSVMResult",
    "margin_loss",
    "binary_loss",
    "ordinal_loss",
    "objective",
    "extended_labels",
    "fit_redsvm",
    "predict_redsvm",
    "threshold_prediction",
    "decision_scores",
    "predict_codes",
    "KernelMap",
    "kernel_matrix",
    "fit_kernel_map",
    "transform_kernel_map",
]

LOSSES = ("hinge", "squared_hinge", "logistic", "square", "laplacian")
KERNELS = ("linear", "perceptron", "rbf")


# --------------------------------------------------------------------------- losses


def margin_loss(m, loss: str):
    """Binary loss of Table II as a function of the margin ``m = y^k a`` (Def. 3 holds)."""
    if loss == "hinge":
        return jnp.maximum(0.0, 1.0 - m)
    if loss == "squared_hinge":
        return jnp.maximum(0.0, 1.0 - m) ** 2
    if loss == "logistic":
        return jnp.logaddexp(0.0, -m)
    if loss == "square":
        return (1.0 - m) ** 2
    if loss == "laplacian":
        return jnp.abs(1.0 - m)
    raise ValueError(f"unknown loss {loss!r}; choose one of {LOSSES}")


def binary_loss(a, s, loss: str):
    """``loss_{s}(a)`` of Table II for the binary label ``s`` in {-1, +1} and score ``a``."""
    return margin_loss(s * a, loss)


def extended_labels(codes, n_classes: int):
    """Eq. (1): the (n, K-1) binary labels ``y_i^k = 1 - 2 I[y_i <= k]`` for codes 0..K-1."""
    k = jnp.arange(n_classes - 1)
    return jnp.where(codes[:, None] > k[None, :], 1.0, -1.0)


def _signed_losses(s, h, theta, b, loss: str):
    """(n,) ``sum_k loss(s_ik (h_i - theta_k - b))`` for extended labels ``s`` (n, K-1)."""
    return jnp.sum(margin_loss(s * (h[:, None] - theta[None, :] - b), loss), axis=1)


def ordinal_loss(h, theta, b, codes, loss: str):
    """Eq. (6): the ordinal loss ``sum_k loss_{y^k}(h - theta_k - b)``, shape (n,)."""
    return _signed_losses(extended_labels(codes, theta.shape[0] + 1).astype(h.dtype), h, theta, b, loss)


def objective(X, s, c, w, theta, b, loss: str):
    """Eq. (9): ``|w|^2 / 2 + |theta|^2 / 2 + sum_i c_i sum_k loss(y_i^k (w.x_i - theta_k - b))``
    for the extended labels ``s = y_i^k`` (n, K-1) of :func:`extended_labels`."""
    h = row_dots(X, w)
    losses = _signed_losses(s.astype(h.dtype), h, theta, b, loss)
    return 0.5 * jnp.dot(w, w) + 0.5 * jnp.dot(theta, theta) + jnp.sum(c * losses)


def _dual_psi(a, c, loss: str):
    """``c psi(a / c)`` (the conjugate part of the dual), 0 where ``c == 0``."""
    safe_c = jnp.where(c > 0, c, 1.0)
    if loss in ("hinge", "laplacian"):
        val = a
    elif loss in ("squared_hinge", "square"):
        val = a - a**2 / (4.0 * safe_c)
    else:  # logistic: binary entropy scaled by c
        val = -(jax.scipy.special.xlogy(a, a / safe_c)
                + jax.scipy.special.xlogy(safe_c - a, (safe_c - a) / safe_c))
    return jnp.where(c > 0, val, 0.0)


def _box(c, loss: str):
    """Lower and upper bounds of ``alpha`` for the box of each loss."""
    inf = jnp.full_like(c, jnp.inf)
    if loss == "hinge" or loss == "logistic":
        return jnp.zeros_like(c), c
    if loss == "laplacian":
        return -c, c
    if loss == "squared_hinge":
        return jnp.zeros_like(c), jnp.where(c > 0, inf, 0.0)
    return jnp.where(c > 0, -inf, 0.0), jnp.where(c > 0, inf, 0.0)


def _coord_step(a, m, q, c, loss: str):
    """Maximise the dual along one coordinate: returns the new ``alpha``.

    ``m`` is the binary margin at the current point, ``q = |x_i|^2 + 1`` the diagonal of the
    extended Gram matrix.  The one-dimensional problem is
    ``max_t c psi((a+t)/c) - t m - t^2 q / 2``.
    """
    safe_c = jnp.where(c > 0, c, 1.0)
    if loss in ("hinge", "laplacian"):
        lo, hi = _box(c, loss)
        new = jnp.clip(a + (1.0 - m) / q, lo, hi)
    elif loss in ("squared_hinge", "square"):
        new = a + (1.0 - m - a / (2.0 * safe_c)) / (q + 1.0 / (2.0 * safe_c))
        if loss == "squared_hinge":
            new = jnp.maximum(new, 0.0)
    else:
        # Solve log((c-a')/a') - m - (a' - a) q = 0 for a' = c sigmoid(z), by Newton in z.
        z0 = jnp.clip(jnp.log(a) - jnp.log(jnp.maximum(safe_c - a, 0.0)), -40.0, 40.0)

        def newton(_, z):
            sig = jax.nn.sigmoid(z)
            f = -z - m - (safe_c * sig - a) * q
            df = -1.0 - q * safe_c * sig * (1.0 - sig)
            return jnp.clip(z - jnp.clip(f / df, -4.0, 4.0), -40.0, 40.0)

        z = lax.fori_loop(0, 16, newton, z0)
        new = safe_c * jax.nn.sigmoid(z)
    return jnp.where(c > 0, new, 0.0)


# --------------------------------------------------------------------------- solver


@dataclasses.dataclass(frozen=True)
class RedSVMConfig:
    """Static settings of :func:`fit_redsvm`.

    Attributes:
        n_classes: number of ordinal classes K (>= 2).
        loss: one of :data:`LOSSES`.
        fit_intercept: include the unregularised ``b`` of Eq. (9).
        max_epochs: cap on dual coordinate descent epochs per intercept value.
        max_bias_iter: cap on the outer intercept search steps.
    """

    n_classes: int
    loss: str = "hinge"
    fit_intercept: bool = True
    max_epochs: int = 1000
    max_bias_iter: int = 60

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; choose one of {LOSSES}")
        if self.n_classes < 2:
            raise ValueError("n_classes must be at least 2")


class SharedNames:
    """The names every family's result shares, for results that keep the paper's ``w``,
    ``theta`` and ``b`` as fields (RED-SVM's and TOR's)."""

    coef = property(lambda self: self.w, doc="The weights ``w`` (d,).")
    thresholds = property(lambda self: self.theta + self.b,
                          doc="The effective thresholds ``theta + b`` (K-1,) the score is cut at.")


@result_type
class RedSVMResult(SharedNames):
    """Solution of Eq. (9)."""

    config: RedSVMConfig
    """The static settings of the fit."""
    w: jax.Array
    """(d,) weights of the latent score ``h(x) = w.x``."""
    theta: jax.Array
    """(K-1,) thresholds (ordered at the optimum, as Li & Lin prove; not enforced)."""
    b: jax.Array
    """Scalar unregularised intercept; the effective thresholds are ``theta + b``."""
    alpha: jax.Array
    """(n, K-1) dual variables of the extended binary examples (warm start for a refit)."""
    objective: jax.Array
    """Primal objective of Eq. (9) at the solution."""
    gap: jax.Array
    """Duality gap of the last inner solve (for the final ``b``)."""
    n_iter: jax.Array
    """Total coordinate descent epochs over all intercept steps."""
    n_bias_iter: jax.Array
    """Number of intercept values tried by the outer search."""
    converged: jax.Array
    """Whether both the inner gap and the intercept condition met their tolerances."""
    status: jax.Array
    """:class:`bayesord._status.Status` code."""


def _w_theta(X, alpha, s):
    coef = jnp.sum(alpha * s, axis=1)
    return rmatvec(X, coef), -jnp.sum(alpha * s, axis=0)


def _dual(s, c, alpha, w, theta, b, loss):
    cc = jnp.broadcast_to(c[:, None], alpha.shape)
    return (jnp.sum(_dual_psi(alpha, cc, loss)) + b * jnp.sum(alpha * s)
            - 0.5 * jnp.dot(w, w) - 0.5 * jnp.dot(theta, theta))


class _Epochs(NamedTuple):
    """Carry of the dual coordinate descent at a fixed intercept, one epoch per iteration."""

    alpha: jax.Array  # (n, K-1) duals
    w: jax.Array
    theta: jax.Array
    gap: jax.Array  # duality gap after the epoch
    p: jax.Array  # primal objective after the epoch
    epoch: jax.Array


def _solve_fixed_b(X, s, c, sq, alpha, b, tol, key, config: RedSVMConfig):
    """Dual coordinate descent for a fixed intercept ``b``; returns (alpha, w, theta, gap, epochs)."""
    loss = config.loss
    km1 = config.n_classes - 1
    n = s.shape[0]
    lo, hi = _box(c, loss)
    n_active = jnp.sum(c > 0)
    alpha = jnp.clip(alpha, lo[:, None], hi[:, None])
    if loss == "logistic":  # the entropy is finite only strictly inside (0, c)
        alpha = jnp.where(c[:, None] > 0, jnp.clip(alpha, 1e-3 * c[:, None], 0.999 * c[:, None]), 0.0)
    w, theta = _w_theta(X, alpha, s)

    # An epoch visits the rows with c > 0 in a random order, in chunks of R rows whose data
    # (row, label signs, weights, alphas) are gathered before their steps run: a gather
    # indexed inside the step costs more than the step on XLA:CPU.  A row is visited once
    # per epoch, so its step reads its alphas from the gathered copy and writes the new ones
    # to a buffer the loop never reads (updating a carried buffer that the step also reads
    # made XLA copy all of alpha every row); the buffer is written back after the chunk.
    sparse = isinstance(X, PaddedRows)
    width = X.values.shape[1] if sparse else X.shape[1]
    U = 4
    R = U * max(1, min(256, 2**20 // (U * max(width, 1))))
    unit = 1.0 + 0.0 * b  # a runtime 1, see below

    def chunk_step(ci, carry):
        alpha, w, theta, perm = carry
        pos = ci * R + jnp.arange(R)
        ok = pos < n_active
        rows = perm[jnp.minimum(pos, n - 1)]
        # dense rows: the row itself; sparse rows: its column indices too
        cols_c = X.indices[rows] if sparse else jnp.zeros((R, 0), jnp.int32)
        vals_c = X.values[rows] if sparse else X[rows]
        a_c = jnp.where(ok[:, None], alpha[rows], 0.0)
        per_row = (cols_c, vals_c, s[rows], jnp.where(ok, c[rows], 0.0), sq[rows], a_c)

        def step(t, inner):
            w, theta, out = inner
            cols, vals, s_i, c_i, sq_i, a_i = (lax.dynamic_index_in_dim(a, t, keepdims=False)
                                               for a in per_row)
            q_i = sq_i + 1.0  # diagonal of the extended Gram matrix
            hx = vals @ w[cols] if sparse else vals @ w
            coef = jnp.zeros((), w.dtype)
            new = []
            for k in range(km1):  # the row's K-1 coordinates, one after another
                a_new = _coord_step(a_i[k], s_i[k] * (hx - theta[k] - b), q_i, c_i, loss)
                d = (a_new - a_i[k]) * s_i[k]
                hx = hx + d * sq_i
                theta = theta.at[k].add(-d)
                coef = coef + d
                new.append(a_new)
            # The division by a runtime 1 keeps XLA from fusing the K-1 steps into the
            # update of w, where they would be evaluated once per entry of the row.
            coef = coef / unit
            w = w.at[cols].add(coef * vals) if sparse else w + coef * vals
            return w, theta, lax.dynamic_update_index_in_dim(out, jnp.stack(new), t, 0)

        def unrolled(j, inner):
            for u in range(U):
                inner = step(j * U + u, inner)
            return inner

        n_here = jnp.clip((n_active - ci * R + U - 1) // U, 0, R // U)
        w, theta, out = lax.fori_loop(0, n_here, unrolled, (w, theta, a_c))
        alpha = alpha.at[jnp.where(ok, rows, n)].set(out, mode="drop")
        return alpha, w, theta, perm

    def gap_of(alpha, w, theta):
        p = objective(X, s, c, w, theta, b, loss)
        d = _dual(s, c, alpha, w, theta, b, loss)
        return p - d, p

    def cond(st):
        return (st.epoch < config.max_epochs) & ~(st.gap <= tol * jnp.maximum(st.p, 1e-300)) & jnp.isfinite(st.gap)

    def body(st):
        alpha, w, theta = st.alpha, st.w, st.theta
        perm = permutation(jax.random.fold_in(key, st.epoch), n)
        # rows with c == 0 have alpha == 0 for good: visit only the others
        perm = perm[jnp.argsort(c[perm] <= 0, stable=True)]
        n_chunks = (n_active + R - 1) // R
        alpha, w, theta, _ = lax.fori_loop(0, n_chunks, chunk_step, (alpha, w, theta, perm))
        w, theta = _w_theta(X, alpha, s)  # re-anchor against drift
        gap, p = gap_of(alpha, w, theta)
        return _Epochs(alpha, w, theta, gap, p, st.epoch + 1)

    gap0, p0 = gap_of(alpha, w, theta)
    st = lax.while_loop(cond, body, _Epochs(alpha, w, theta, gap0, p0, jnp.zeros((), jnp.int32)))
    inner_ok = st.gap <= tol * jnp.maximum(st.p, 1e-300)
    return st.alpha, st.w, st.theta, st.gap, st.p, st.epoch, inner_ok


class _BiasSearch(NamedTuple):
    """The carry of the search over the intercept ``b`` (bracketing, then regula falsi and
    bisection, on the slope of the dual in ``b``)."""

    alpha: jax.Array
    w: jax.Array
    theta: jax.Array
    gap: jax.Array
    p: jax.Array
    b: jax.Array
    lo: jax.Array
    f_lo: jax.Array
    hi: jax.Array
    f_hi: jax.Array
    step: jax.Array
    epochs: jax.Array
    it: jax.Array
    inner_ok: jax.Array
    done: jax.Array


def _fit_redsvm_impl(X, codes, c, alpha0, b0, tol, key, config):
    dtype = c.dtype
    s = extended_labels(codes, config.n_classes).astype(dtype)
    center = config.fit_intercept and not isinstance(X, PaddedRows)
    if center:
        # With a free intercept, w.(x - mu) - theta_k - (b - w.mu) is the same model, so the
        # problem is unchanged; centring removes the rank-one mean component of the Gram
        # matrix that slows coordinate descent.  Sparse rows are not centred (no densifying).
        mu = jnp.mean(X, axis=0)
        X = X - mu
        b0 = b0 - jnp.dot(_w_theta(X, alpha0, s)[0], mu)
    sq = row_sq_norms(X)
    tol = jnp.asarray(tol, dtype)

    def slope(alpha):
        return jnp.sum(alpha * s)  # V'(b): residual of the equality constraint of Eq. (11)

    def slope_ok(alpha):
        return jnp.abs(slope(alpha)) <= 10.0 * tol * jnp.maximum(jnp.sum(jnp.abs(alpha)), 1.0)

    max_it = config.max_bias_iter if config.fit_intercept else 1
    inf = jnp.asarray(jnp.inf, dtype)
    zero = jnp.zeros((), dtype)
    # The first step solves at b0; later steps move b towards the root of V'(b).
    init = _BiasSearch(alpha=alpha0, w=jnp.zeros(X.shape[1], dtype), theta=jnp.zeros(config.n_classes - 1, dtype),
                       gap=inf, p=inf, b=jnp.asarray(b0, dtype), lo=-inf, f_lo=-inf, hi=inf, f_hi=inf,
                       step=jnp.ones((), dtype), epochs=jnp.zeros((), jnp.int32), it=jnp.zeros((), jnp.int32),
                       inner_ok=jnp.zeros((), bool), done=jnp.zeros((), bool))

    def cond(st):
        return (~st.done) & (st.it < max_it)

    def body(st):
        f = slope(st.alpha)
        first = st.it == 0
        lo, f_lo = jnp.where(~first & (f < 0), st.b, st.lo), jnp.where(~first & (f < 0), f, st.f_lo)
        hi, f_hi = jnp.where(~first & (f > 0), st.b, st.hi), jnp.where(~first & (f > 0), f, st.f_hi)
        bracketed = jnp.isfinite(lo) & jnp.isfinite(hi)
        falsi = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        inside = (falsi > lo) & (falsi < hi)
        b_br = jnp.where((st.it % 2 == 0) & inside, falsi, 0.5 * (lo + hi))
        b_new = jnp.where(first, st.b, jnp.where(bracketed, b_br, jnp.where(f > 0, st.b - st.step, st.b + st.step)))
        step = jnp.where(first | bracketed, st.step, 2.0 * st.step)
        alpha, w, theta, gap, p, e, inner_ok = _solve_fixed_b(
            X, s, c, sq, st.alpha, b_new, tol, jax.random.fold_in(key, st.it), config)
        narrow = bracketed & ((hi - lo) <= 1e-12 * (1.0 + jnp.abs(b_new)))
        done = (slope_ok(alpha) if config.fit_intercept else True) | narrow | ~jnp.isfinite(p)
        return _BiasSearch(alpha=alpha, w=w, theta=theta, gap=gap, p=p, b=b_new, lo=lo, f_lo=f_lo, hi=hi,
                           f_hi=f_hi, step=step, epochs=st.epochs + e, it=st.it + 1, inner_ok=inner_ok,
                           done=done)

    st = lax.while_loop(cond, body, init)
    alpha, w, theta, gap, p, epochs, it = st.alpha, st.w, st.theta, st.gap, st.p, st.epochs, st.it
    b = st.b if config.fit_intercept else zero
    if center:
        b = b + jnp.dot(w, mu)
    converged = st.done & st.inner_ok & jnp.isfinite(p)
    status = final_status(converged, finite=jnp.isfinite(p))
    return RedSVMResult(config, w, theta, b, alpha, p, gap, epochs, it, converged, status)


_fit_redsvm_jit = jit_serial_cpu(_fit_redsvm_impl, static_argnames=("config",))


@checks_codes("codes")
def fit_redsvm(X, codes, c, config: RedSVMConfig, *, tol=1e-6, key=None, alpha0=None, b0=0.0):
    """Solve Eq. (9) for the extended binary ordinal SVM (RED-SVM) with any Table II loss.

    Args:
        X: (n, d) dense array or :class:`~bayesord._sparse.PaddedRows` (sparse rows).
        codes: (n,) int labels in 0..K-1.
        c: (n,) per-row loss weights (``C`` times the sample weight; ``C1``/``C2`` in TOR).
            Rows with ``c == 0`` do not enter the fit.
        config: static :class:`RedSVMConfig`.
        tol: relative duality-gap tolerance (traced).
        key: PRNG key for the coordinate order (default ``PRNGKey(0)``).
        alpha0: (n, K-1) warm start of the dual variables (default zeros).
        b0: starting intercept for the outer search.

    Returns:
        :class:`RedSVMResult`.

    Example:
        >>> import numpy as np, jax.numpy as jnp
        >>> X = jnp.asarray(np.random.default_rng(0).normal(size=(30, 2)))
        >>> y = jnp.asarray((X[:, 0] > -0.5).astype(int) + (X[:, 0] > 0.5))
        >>> res = fit_redsvm(X, y, jnp.ones(30), RedSVMConfig(n_classes=3))
        >>> bool(res.converged)
        True
    """
    if not isinstance(X, PaddedRows):
        X = jnp.asarray(X)
    dtype = X.dtype
    codes = jnp.asarray(codes, jnp.int32)
    c = jnp.asarray(c, dtype)
    n = codes.shape[0]
    if alpha0 is None:
        alpha0 = jnp.zeros((n, config.n_classes - 1), dtype)
    if key is None:
        key = jax.random.PRNGKey(0)
    return _fit_redsvm_jit(X, codes, c, jnp.asarray(alpha0, dtype), jnp.asarray(b0, dtype),
                           jnp.asarray(tol, dtype), key, config)


def decision_scores(w, X):
    """Latent score ``h(x) = w.x`` for dense rows or :class:`~bayesord._sparse.PaddedRows`."""
    if not isinstance(X, PaddedRows):
        X = jnp.asarray(X)
    return row_dots(X, w)


def predict_codes(h, theta, b):
    """Eq. (3): ``f(x) - 1 = sum_k I[h(x) - theta_k - b > 0]`` as codes 0..K-1."""
    return jnp.sum(h[:, None] - theta[None, :] - b > 0, axis=1).astype(jnp.int32)


@jit
def _threshold_prediction(w, theta, b, X):
    h = row_dots(X, w)
    return Prediction(predict_codes(h, theta, b), h)


def threshold_prediction(w, theta, b, X) -> Prediction:
    """Eq. (3) for new rows: scores ``h = w.x`` and the codes of the thresholds ``theta + b``
    below them (dense rows or :class:`~bayesord._sparse.PaddedRows`)."""
    if not isinstance(X, PaddedRows):
        X = jnp.asarray(X, w.dtype)
    if X.shape[1] != w.shape[0]:
        raise ValueError(f"X has {X.shape[1]} columns but the fit has {w.shape[0]} "
                         "(a kernel model predicts the kernel map's features of the rows)")
    return _threshold_prediction(w, theta, b, X)


def predict_redsvm(result: RedSVMResult, X) -> Prediction:
    """Classes of new rows (Eq. 3) from a :func:`fit_redsvm` result.

    Args:
        result: :class:`RedSVMResult`.
        X: rows in the fit's representation: dense (n, d), :class:`~bayesord._sparse.PaddedRows`,
            or kernel features from :func:`transform_kernel_map`.

    Returns:
        :class:`~bayesord._results.Prediction`: ``labels`` (n,) codes 0..K-1 and ``scores``
        the latent ``h(x) = w.x``.
    """
    return threshold_prediction(result.w, result.theta, result.b, X)


# --------------------------------------------------------------------------- kernels
# The Nystrom feature map lives with the other kernels (bayesord._basis); these names stay
# importable from here.
kernel_matrix = blocked_kernel_matrix
