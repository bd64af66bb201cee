"""Swapped-pairs structural SVM (SVM-multi with the Δ_SP loss), 1-slack cutting plane.

Source: J. Díez, J. J. del Coz, A. Bahamonde, "A support vector method for ranking
minimizing the number of swapped pairs" (the equation and algorithm numbers below are
that paper's), which extends Joachims' multivariate SVM for the AUC to any number of
ordered ranks.

Problem (Eq. 9) with the loss and joint feature map of Eqs. (12)–(19), both divided by
the number (total weight) N of comparable pairs so that Δ is the probability of Eq. (1)::

    min_w ½‖w‖² + C ξ   s.t.   wᵀ[Ψ(x̄, ȳ) − Ψ(x̄, ȳ')] ≥ Δ_SP(ȳ', ȳ) − ξ   for all ȳ'.

A candidate ȳ' is a choice a_ij ∈ {0, 1} ("pair i > j is swapped", a_ij = (1 − y'_ij)/2)
for every pair with y_i > y_j and pair weight s_i s_j.  Writing
p_i = Σ_j s_j a_ij (pairs where i is the upper element) and q_j = Σ_i s_i a_ij, the
count vectors of Eq. (13) are c'_i = L_i − 2 p_i, d'_i = H_i − 2 q_i, and

    Δ(ȳ')              = (1/N) Σ_i s_i p_i                        (Eq. 17)
    Ψ(ȳ) − Ψ(ȳ')       = (2/N) Σ_i s_i (p_i − q_i) φ(x_i)          (Eq. 19)

so every constraint is "δ_k − wᵀg_k ≤ ξ" with g_k = Σ_i β_ki φ(x_i), β_k = (2/N) s ⊙ (p − q).
At the optimum ξ = (1/N) Σ_{y_i > y_j} s_i s_j max(0, 1 − 2 (f_i − f_j)): a pairwise hinge
with margin ½, which is why Lemma 1 shifts the scores by ∓¼.

Most violated constraint (Lemma 1, Algorithm 2): a_ij = 1 iff f_i − ¼ < f_j + ¼.  The
pairs are never enumerated; two exact counting schemes are offered:

* ``"classes"`` — Algorithm 2: one sort of the 2n shifted scores, then one O(n) prefix-sum
  sweep per rank: time O(n log n + n r), memory O(n).
* ``"bits"`` — sort-based dominance counting over the binary digits of the rank: a pair
  i > j is counted at the highest bit where y_i and y_j differ, inside the group of ranks
  sharing the higher bits.  One stable sort and two segmented prefix sums per bit:
  time O(n log n · ⌈log₂ r⌉) (O(n log² n) even when every target value is its own rank),
  memory O(n).  This is the choice for many ranks (raw continuous targets).

Cutting plane (Algorithm 1, in its 1-slack form): the working set CS is a fixed-capacity
buffer with a mask; slot 0 holds the trivial constraint ȳ' = ȳ (g = 0, δ = 0), which
turns ξ ≥ 0 into the equality Σα = C of the dual

    max_α  αᵀδ − ½ αᵀHα   s.t.  α ≥ 0, Σ_k α_k = C,     H_kl = g_kᵀ g_l,   w = Σ α_k g_k.

That small dual is solved inside ``jit`` by a primal–dual interior point (Mehrotra
predictor–corrector, Cholesky of capacity × capacity matrices) to a Frank–Wolfe gap
Σ_k α_k (max_j G_j − G_k) ≤ qp_tol·C (G = δ − Hα; qp_tol = 10⁻³ε, but at least 100 machine
epsilons, which in float32 is 1.2·10⁻⁵); pairwise (SMO) steps were tried first
and crawl on the nearly collinear constraints that cutting planes accumulate.  When the buffer is full, the oldest
constraint with α = 0 is recycled (dropping an inactive constraint leaves the QP optimum
unchanged); if every slot is active, the active constraints are folded into one, their
convex combination weighted by the dual solution (:func:`_aggregate`), which keeps the
current solution and frees the other slots: the working set never stops the run, and
its capacity bounds the cost of each QP.

Variants: linear (dense array or :class:`~bayesord._sparse.PaddedRows`, the sparse row layout
the other linear models share), exact Gaussian kernel
(the n × n Gram matrix, for moderate n), and a Nyström low-rank Gaussian kernel (m
landmarks, features Z = K_nm U Λ^{-1/2} with K_mm = U Λ Uᵀ, the Nyström map shared with
RED-SVM, then the linear solver: memory
O(n m), time per iteration O(n m) instead of O(n²)).  Passing an explicit pair list
replaces the all-pairs loss by the loss over those pairs: that is Herbrich's pairwise
SVM (Eq. 3) on a subsample of pairs ("Herbrich₅"), solved by the same machinery.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._basis import fit_kernel_map, kernel_matrix, transform_kernel_map
from ._mesh import partitioned
from ._precision import jit
from ._results import Prediction, checks_codes, result_type
from ._sparse import PaddedRows, rmatvec, row_dots
from ._status import Status
from ._validation import floating_dtype

__all__ = [
    "RankPairsConfig",
    "RankPairsResult",
    "predict_rankpairs",
    "score_thresholds",
    "violation_counts",
    "most_violated",
    "swapped_pairs_rate",
    "rbf_kernel",
    "solve_simplex_qp",
    "fit_rankpairs_linear",
    "fit_rankpairs_kernel",
    "fit_rankpairs_gram",
    "fit_rankpairs_nystroem",
    "decision_rankpairs",
    "sample_pairs",
]

_COUNTING = ("auto", "classes", "bits")
# Below this many ranks Algorithm 2's per-rank sweeps beat one sort per bit.
_AUTO_CLASSES_MAX_RANKS = 8


@dataclasses.dataclass(frozen=True)
class RankPairsConfig:
    """Static settings of the cutting-plane solver (hashable; a ``jit`` static argument).

    Attributes:
        n_ranks: number r of distinct ranks; codes lie in 0..r-1.
        capacity: slots of the working set, the trivial constraint included.
        max_iter: cap on cutting-plane iterations (most-violated searches).
        qp_max_iter: cap on interior-point iterations per working-set QP solve.
        counting: ``"classes"`` (Algorithm 2, O(n log n + n r)), ``"bits"``
            (O(n log n · ⌈log₂ r⌉)) or ``"auto"`` (classes when r ≤ 8).
        n_components: Nyström landmarks (``fit_rankpairs_nystroem`` only).
    """

    n_ranks: int
    capacity: int = 100
    max_iter: int = 1000
    qp_max_iter: int = 80
    counting: str = "auto"
    n_components: int = 0

    def __post_init__(self):
        if self.n_ranks < 2:
            raise ValueError(f"n_ranks must be at least 2, got {self.n_ranks}")
        if self.capacity < 3:
            raise ValueError(f"capacity must be at least 3 (the trivial constraint, an aggregate and a new one), "
                             f"got {self.capacity}")
        if self.counting not in _COUNTING:
            raise ValueError(f"counting must be one of {_COUNTING}, got {self.counting!r}")

    @property
    def n_classes(self) -> int:
        """The number of ranks, under the name every family's config uses."""
        return self.n_ranks

    @property
    def counting_method(self) -> str:
        if self.counting != "auto":
            return self.counting
        return "classes" if self.n_ranks <= _AUTO_CLASSES_MAX_RANKS else "bits"


@result_type
class RankPairsResult:
    """Fitted swapped-pairs SVM."""

    config: RankPairsConfig
    """The static settings of the fit."""
    coef: jax.Array
    """Linear weights w (d,), or kernel expansion coefficients over the rows of ``basis``."""
    basis: Any
    """Rows the Gaussian-kernel expansion runs over (training rows or landmarks); None if linear."""
    gamma: Any
    """Gaussian kernel width g in exp(−g‖x − x'‖²); None if linear."""
    train_scores: jax.Array
    """Ranking scores f(x_i) of the training rows (n,)."""
    thresholds: jax.Array
    """(r-1,) cut-points of the score into ranks (:func:`score_thresholds`); rank k + 1
    lies above ``thresholds[k]``."""
    alpha: jax.Array
    """Dual variables of the working-set QP (capacity,); they sum to C."""
    working_set: jax.Array
    """Mask of occupied working-set slots (capacity,); slot 0 is the trivial constraint."""
    working_set_size: jax.Array
    """Number of occupied slots, the trivial constraint included."""
    delta: jax.Array
    """Loss Δ_SP (Eq. 17, normalised) of each working-set constraint (capacity,)."""
    slack: jax.Array
    """ξ at the returned w: the loss of the most violated constraint, max(0, ·)."""
    primal: jax.Array
    """Primal objective ½‖w‖² + C ξ at the returned w (Eq. 9)."""
    dual: jax.Array
    """Dual objective of the final working-set QP (a lower bound on the optimum)."""
    qp_gap: jax.Array
    """Frank–Wolfe gap / C of the last working-set QP solve (its suboptimality bound)."""
    n_aggregated: jax.Array
    """How many times a full working set was folded into one constraint (:func:`_aggregate`)."""
    n_iter: jax.Array
    """Number of cutting-plane iterations (most-violated searches)."""
    converged: jax.Array
    """Whether no constraint was violated by more than ε at the end."""
    status: jax.Array
    """``Status`` code (int32)."""


# --------------------------------------------------------------------------- counting


@partial(jit, static_argnames=("n_ranks", "method", "ties_violate"))
def violation_counts(t, u, codes, weights, n_ranks: int, method: str = "auto", ties_violate: bool = False):
    """Weighted dominance counts over comparable pairs, without enumerating them.

    For every pair with codes[i] > codes[j] the pair is "violated" when t[i] < u[j]
    (or t[i] ≤ u[j] with ``ties_violate``).  Returns

        p_i = Σ_j weights_j · [codes_j < codes_i] · violated(i, j)
        q_j = Σ_i weights_i · [codes_i > codes_j] · violated(i, j)

    With t = f − ¼, u = f + ¼ this is Lemma 1 / Algorithm 2; with t = u = f and
    ``ties_violate`` it counts the swapped pairs of Eq. (1).

    Args:
        t: lower shifted scores (n,).
        u: upper shifted scores (n,).
        codes: int ranks in 0..n_ranks-1 (n,).
        weights: non-negative sample weights (n,).
        n_ranks: r, static.
        method: ``"classes"`` (O(n log n + n r)), ``"bits"`` (O(n log n ⌈log₂ r⌉)) or
            ``"auto"``.
        ties_violate: whether equality counts as violated.

    Returns:
        (p, q), each (n,) in the dtype of t.
    """
    if method == "auto":
        method = RankPairsConfig(n_ranks=n_ranks).counting_method
    n = t.shape[0]
    dtype = t.dtype
    vals = jnp.concatenate([t, u.astype(dtype)])
    is_minus = jnp.concatenate([jnp.zeros(n, bool), jnp.ones(n, bool)])
    # At equal values the tie-break decides which event comes first: a minus event
    # "after" a plus event means u_j > t_i (strict) unless ties violate.
    tieb = jnp.where(is_minus, 1, 0) if ties_violate else jnp.where(is_minus, 0, 1)
    ids = jnp.arange(2 * n, dtype=jnp.int32)
    _, _, perm = lax.sort((vals, tieb.astype(jnp.int32), ids), num_keys=2)
    m = is_minus[perm]
    k = jnp.concatenate([codes, codes]).astype(jnp.int32)[perm]
    w = jnp.concatenate([weights, weights]).astype(dtype)[perm]
    if method == "classes":
        acc = _count_by_classes(m, k, w, n_ranks)
    elif method == "bits":
        acc = _count_by_bits(m, k, w, n_ranks)
    else:
        raise ValueError(f"unknown counting method {method!r}")
    out = jnp.zeros(2 * n, dtype).at[perm].set(acc)
    return out[:n], out[n:]


def _count_by_classes(m, k, w, n_ranks):
    """Algorithm 2: per rank, a suffix sum of its minus events and a prefix sum of its plus events."""

    def body(c, acc):
        xm = jnp.where(m & (k == c), w, 0)
        suffix = jnp.sum(xm) - jnp.cumsum(xm)  # weight strictly after each position
        acc = acc + jnp.where(~m & (k > c), suffix, 0)
        xp = jnp.where(~m & (k == c), w, 0)
        prefix = jnp.cumsum(xp) - xp  # weight strictly before
        return acc + jnp.where(m & (k < c), prefix, 0)

    return lax.fori_loop(0, n_ranks, body, jnp.zeros_like(w))


def _count_by_bits(m, k, w, n_ranks):
    """Count each pair at the highest bit where the two ranks differ (one sort per bit)."""
    n_bits = max(1, math.ceil(math.log2(n_ranks)))
    pos = jnp.arange(m.shape[0], dtype=jnp.int32)
    acc = jnp.zeros_like(w)
    for b in range(n_bits):
        grp = k >> (b + 1)
        grp_s, order = lax.sort((grp, pos), num_keys=2)  # groups, each still in score order
        m2, w2 = m[order], w[order]
        bit = ((k >> b) & 1)[order]
        start = jnp.searchsorted(grp_s, grp_s, side="left")
        end = jnp.searchsorted(grp_s, grp_s, side="right") - 1
        xm = jnp.where(m2 & (bit == 0), w2, 0)
        cm = jnp.cumsum(xm)
        suffix = cm[end] - cm  # lower-half minus events later in the same group
        xp = jnp.where(~m2 & (bit == 1), w2, 0)
        cp = jnp.cumsum(xp) - xp
        prefix = cp - cp[start]  # upper-half plus events earlier in the same group
        contrib = jnp.where(~m2 & (bit == 1), suffix, 0) + jnp.where(m2 & (bit == 0), prefix, 0)
        acc = acc.at[order].add(contrib)
    return acc


def _pair_total(codes, weights, n_ranks):
    """N = Σ_{y_i > y_j} s_i s_j in O(n + r)."""
    per_rank = jax.ops.segment_sum(weights, codes, num_segments=n_ranks)
    below = jnp.cumsum(per_rank) - per_rank
    return jnp.sum(weights * below[codes])


@partial(jit, static_argnames=("n_ranks", "method"))
def most_violated(scores, codes, weights, n_ranks: int, method: str = "auto", n_pairs=None):
    """Most violated constraint of Eq. (20) (Lemma 1), in the normalised form.

    Args:
        scores: f = wᵀφ(x_i) (n,).
        codes: ranks 0..r-1 (n,).
        weights: sample weights (n,).
        n_ranks: r, static.
        method: counting scheme (see :func:`violation_counts`).
        n_pairs: N, the total pair weight; computed when None.

    Returns:
        (delta, beta, p, q): Δ_SP of the constraint (Eq. 17 divided by N), the expansion
        coefficients β = (2/N) s ⊙ (p − q) of Ψ(ȳ) − Ψ(ȳ') (Eq. 19), and the counts.
    """
    if n_pairs is None:
        n_pairs = _pair_total(codes, weights, n_ranks)
    n_safe = jnp.where(n_pairs > 0, n_pairs, 1)
    p, q = violation_counts(scores - 0.25, scores + 0.25, codes, weights, n_ranks, method)
    delta = jnp.sum(weights * p) / n_safe
    beta = 2 * weights * (p - q) / n_safe
    return delta, beta, p, q


def _most_violated_pairs(scores, pairs, pair_weights, total):
    """The same search over an explicit list of (upper, lower) pairs: O(#pairs)."""
    n = scores.shape[0]
    hi, lo = pairs[:, 0], pairs[:, 1]
    viol = jnp.where(scores[hi] - 0.25 < scores[lo] + 0.25, pair_weights, 0).astype(scores.dtype)
    p = jax.ops.segment_sum(viol, hi, num_segments=n)
    q = jax.ops.segment_sum(viol, lo, num_segments=n)
    delta = jnp.sum(viol) / total
    return delta, 2 * (p - q) / total


def swapped_pairs_rate(scores, codes, weights=None, n_ranks: int | None = None, method: str = "auto"):
    """Δ_SP of Eq. (1): the weighted share of pairs y_i > y_j with f_i ≤ f_j (ties count as swapped).

    O(n log n + n r) or O(n log n ⌈log₂ r⌉) (see :func:`violation_counts`).

    Args:
        scores: f (n,).
        codes: int ranks 0..r-1 (n,).
        weights: sample weights (n,) or None.
        n_ranks: r (default: max code + 1, read on the host).
        method: counting scheme.

    Example:
        >>> import jax.numpy as jnp
        >>> round(float(swapped_pairs_rate(jnp.array([0.0, 2.0, 1.0]), jnp.array([0, 1, 2]))), 6)
        0.333333
    """
    scores = jnp.asarray(scores)
    codes = jnp.asarray(codes)
    if n_ranks is None:
        n_ranks = int(np.max(np.asarray(codes))) + 1
    weights = jnp.ones_like(scores) if weights is None else jnp.asarray(weights, scores.dtype)
    return _swapped_pairs_rate(scores, codes, weights, max(n_ranks, 2), method)


@partial(jit, static_argnames=("n_ranks", "method"))
def _swapped_pairs_rate(scores, codes, weights, n_ranks, method):
    p, _ = violation_counts(scores, scores, codes, weights, n_ranks, method, ties_violate=True)
    total = _pair_total(codes, weights, n_ranks)
    return jnp.sum(weights * p) / jnp.where(total > 0, total, 1)


# --------------------------------------------------------------------------- working-set QP


class _InteriorPoint(NamedTuple):
    """Carry of :func:`solve_simplex_qp`: the primal-dual iterate and the stopping state."""

    alpha: jax.Array  # primal, on the simplex sum = C
    nu: jax.Array  # multiplier of the equality
    z: jax.Array  # multipliers of alpha >= 0
    it: jax.Array
    done: jax.Array


def solve_simplex_qp(H, delta, mask, C, tol, max_iter: int = 80):
    """Maximise αᵀδ − ½αᵀHα over {α ≥ 0, Σα = C, α = 0 off ``mask``}: a primal–dual interior point.

    Mehrotra predictor–corrector on the KKT conditions of min ½αᵀHα − δᵀα:
    Hα − δ + ν1 − z = 0, 1ᵀα = C, α ⊙ z = 0, α, z ≥ 0 (so z = ν − G with G = δ − Hα).
    Each step solves (H + diag(z/α)) u = r by Cholesky (positive definite even when H is
    singular, as cutting-plane Gram matrices are) and eliminates ν through the single
    equality.  Unlike pairwise (SMO) steps, which crawl on the nearly collinear
    constraints a cutting plane accumulates, it reaches 1e-10 relative accuracy in a few
    tens of factorisations of a capacity × capacity matrix.  The matrix takes a jitter of
    100 eps × max H_kk on its diagonal (a primal regularisation, as in Friedlander & Orban
    2012): with more columns than rows and a large C its active block is singular to
    rounding, and in float32 the factorisation broke down at a gap of 1e-3 (60 × 84
    separable rows, C = 100; 1.5e-5 with the jitter).  At the end coordinates below
    1e-9·C (float64; 1e-5·C in float32) are set to exactly 0 and α rescaled to sum to C.

    Stops when the Frank–Wolfe gap Σ_k α_k (max_j G_j − G_k) — an upper bound on the
    distance to the optimal dual value — is at most tol·C.

    Args:
        H: PSD Gram matrix of the constraints (M, M).
        delta: constraint losses (M,).
        mask: usable coordinates (M,).
        C: the simplex total (> 0).
        tol: tolerance on the gap divided by C (in units of δ).
        max_iter: cap on interior-point iterations (static).

    Returns:
        (alpha, gap, n_iter) with gap the Frank–Wolfe gap divided by C.
    """
    dtype = delta.dtype
    C = jnp.asarray(C, dtype)
    mf = mask.astype(dtype)
    m = jnp.maximum(jnp.sum(mf), 1)
    Hm = H * mf[:, None] * mf[None, :] + jnp.diag(1 - mf)  # unused coordinates decoupled
    dm = delta * mf
    scale = 1 + jnp.max(jnp.abs(jnp.diagonal(H) * mf)) * C + jnp.max(jnp.abs(dm))
    neg_inf = jnp.asarray(-jnp.inf, dtype)
    jitter = 100 * jnp.finfo(dtype).eps * jnp.max(jnp.abs(jnp.diagonal(Hm)))

    def fw_gap(alpha):
        g = dm - Hm @ alpha
        return jnp.sum(mf * alpha * (jnp.max(jnp.where(mask, g, neg_inf)) - g)) / C

    def solve(alpha, z, r, rp):
        Q = Hm + jnp.diag(mf * z / alpha + jitter)
        L = jnp.linalg.cholesky(Q)
        u = jax.scipy.linalg.cho_solve((L, True), jnp.stack([r, mf], 1))
        dnu = (mf @ u[:, 0] + rp) / (mf @ u[:, 1])
        return (u[:, 0] - u[:, 1] * dnu) * mf, dnu

    def max_step(x, dx):
        ratio = jnp.where(mask & (dx < 0), -x / jnp.where(dx < 0, dx, -1), jnp.inf)
        return jnp.minimum(1.0, jnp.min(ratio))

    def residuals(alpha, nu, z):
        rd = (Hm @ alpha - dm + nu * mf - z) * mf
        rp = mf @ alpha - C
        return rd, rp

    def cond(state):
        return (~state.done) & (state.it < max_iter)

    def body(state):
        alpha0, nu0, z0 = state.alpha, state.nu, state.z
        alpha, nu, z = alpha0, nu0, z0
        rd, rp = residuals(alpha, nu, z)
        mu = (mf @ (alpha * z)) / m
        # predictor (σ = 0)
        rc = alpha * z * mf
        da, dnu = solve(alpha, z, -rd - rc / alpha, rp)
        dz = (-rc - z * da) / alpha * mf
        a = jnp.minimum(max_step(alpha, da), max_step(z, dz))
        mu_aff = (mf @ ((alpha + a * da) * (z + a * dz))) / m
        sigma = (mu_aff / mu) ** 3
        # corrector
        rc = (alpha * z + da * dz - sigma * mu) * mf
        da, dnu = solve(alpha, z, -rd - rc / alpha, rp)
        dz = (-rc - z * da) / alpha * mf
        a = 0.99 * jnp.minimum(max_step(alpha, da), max_step(z, dz))
        alpha = jnp.where(mask, alpha + a * da, 1)
        z = jnp.where(mask, z + a * dz, 1)
        nu = nu + a * dnu
        rd, rp = residuals(alpha, nu, z)
        done = (((mf @ (alpha * z) <= 0.1 * tol * C) & (jnp.max(jnp.abs(rd)) <= 0.1 * tol)
                 & (jnp.abs(rp) <= 1e-9 * C * scale)) | (fw_gap(alpha * mf) <= 0.01 * tol))
        # In float32 the residual tests can lie below rounding, hence the second test on the
        # gap; past it the Cholesky of H + diag(z/alpha) breaks down.  Keep the last finite
        # iterate.
        finite = jnp.isfinite(nu) & jnp.all(jnp.isfinite(alpha)) & jnp.all(jnp.isfinite(z))
        alpha, nu, z = (jnp.where(finite, new, old) for new, old in ((alpha, alpha0), (nu, nu0), (z, z0)))
        return _InteriorPoint(alpha, nu, z, state.it + 1, done | ~finite)

    alpha0 = jnp.where(mask, C / m, 1)
    g0 = dm - Hm @ (alpha0 * mf)
    nu0 = jnp.max(jnp.where(mask, g0, neg_inf)) + scale / C
    z0 = jnp.where(mask, nu0 - g0, 1)
    end = lax.while_loop(cond, body, _InteriorPoint(alpha0, nu0, z0, jnp.asarray(0, jnp.int32), jnp.asarray(False)))
    alpha, it = end.alpha, end.it
    cut = (1e-9 if dtype == jnp.float64 else 1e-5) * C
    alpha = jnp.where(mask & (alpha > cut), alpha, 0)
    alpha = alpha * (C / jnp.sum(alpha))
    return alpha, fw_gap(alpha), it


# --------------------------------------------------------------------------- cutting plane


class _Ops(NamedTuple):
    """How constraints are stored and scores evaluated for one variant."""

    init_store: Any  # () -> store
    add: Any  # (store, slot, beta) -> (store, h) with h = G g_new and h[slot] = ‖g_new‖²
    scores: Any  # (store, alpha) -> f (n,)


def _linear_ops(X, capacity, dtype):
    d = X.shape[1]

    def init_store():
        return jnp.zeros((capacity, d), dtype)

    def add(G, slot, beta):
        g = rmatvec(X, beta).astype(dtype)
        h = (G @ g).at[slot].set(g @ g)
        return G.at[slot].set(g), h

    def scores(G, alpha):
        return row_dots(X, G.T @ alpha).astype(dtype)

    return _Ops(init_store, add, scores)


def _kernel_ops(K, capacity, dtype):
    n = K.shape[0]

    def init_store():
        return jnp.zeros((capacity, n), dtype), jnp.zeros((capacity, n), dtype)

    def add(store, slot, beta):
        B, KB = store
        kb = K @ beta
        h = (B @ kb).at[slot].set(beta @ kb)
        return (B.at[slot].set(beta), KB.at[slot].set(kb)), h

    def scores(store, alpha):
        return store[1].T @ alpha

    return _Ops(init_store, add, scores)


def _cutting_plane(oracle, ops, n, C, eps, config, dtype):
    """Algorithm 1 (1-slack form) with a fixed-capacity working set; see the module docstring."""
    M = config.capacity
    C = jnp.asarray(C, dtype)
    eps = jnp.asarray(eps, dtype)
    qp_tol = jnp.maximum(1e-3 * eps, 100 * jnp.finfo(dtype).eps)  # float32 resolves no finer
    slots = jnp.arange(M)
    int0 = jnp.asarray(0, jnp.int32)

    alpha0 = jnp.zeros(M, dtype).at[0].set(C)
    used0 = slots == 0
    carry0 = dict(
        alpha=alpha0,
        used=used0,
        H=jnp.zeros((M, M), dtype),
        delta=jnp.zeros(M, dtype),
        store=ops.init_store(),
        last=jnp.zeros(M, jnp.int32),
        f=jnp.zeros(n, dtype),
        it=int0,
        done=jnp.asarray(False),
        status=jnp.asarray(int(Status.SUCCESS), jnp.int32),
        qp_gap=jnp.asarray(0, dtype),
        n_aggregated=int0,
    )

    def cond(c):
        return (~c["done"]) & (c["it"] < config.max_iter)

    def body(c):
        delta_new, beta = oracle(c["f"])
        xi_new = delta_new - c["f"] @ beta  # wᵀg = fᵀβ for g = Σ β_i φ(x_i)
        xi_ws = jnp.max(jnp.where(c["used"], c["delta"] - c["H"] @ c["alpha"], -jnp.inf))
        violated = xi_new > xi_ws + eps
        it = c["it"] + 1
        full = violated & ~jnp.any(~c["used"]) & ~jnp.any(c["used"] & (c["alpha"] <= 0) & (slots != 0))
        c = lax.cond(full, lambda c: _aggregate(c, it), lambda c: c, c)
        free = ~c["used"]
        evictable = c["used"] & (c["alpha"] <= 0) & (slots != 0)
        oldest = jnp.argmin(jnp.where(evictable, c["last"], jnp.iinfo(jnp.int32).max))
        slot = jnp.where(jnp.any(free), jnp.argmax(free), oldest)

        def add(c):
            store, h = ops.add(c["store"], slot, beta)
            H = c["H"].at[slot, :].set(h).at[:, slot].set(h)
            used = c["used"].at[slot].set(True)
            delta = c["delta"].at[slot].set(delta_new)
            alpha, gap, _ = solve_simplex_qp(H, delta, used, C, qp_tol, config.qp_max_iter)
            last = jnp.where(alpha > 0, it, c["last"]).at[slot].set(it)
            return dict(c, alpha=alpha, used=used, H=H, delta=delta, store=store, last=last,
                        f=ops.scores(store, alpha), qp_gap=gap)

        c = lax.cond(violated, add, lambda c: c, c)
        return dict(c, it=it, done=~violated)

    c = lax.while_loop(cond, body, carry0)
    delta_end, beta_end = oracle(c["f"])
    slack = jnp.maximum(delta_end - c["f"] @ beta_end, 0)
    quad = c["alpha"] @ c["H"] @ c["alpha"]
    primal = 0.5 * quad + C * slack
    dual = c["alpha"] @ c["delta"] - 0.5 * quad
    status = jnp.where(c["done"], c["status"], jnp.int32(Status.MAX_ITER))
    # The last QP solve counts as solved when its gap is a tenth of eps or less: the answer is
    # then within C (eps + gap) <= 1.1 C eps of the optimum.  (The solves aim at qp_tol, far
    # below; in float32 a gap of about 100 machine epsilons is what rounding leaves.)  The gap
    # is read through G = delta - H alpha, whose rounding error is about eps_dtype (max delta +
    # C max_k H_kk), so where that is larger (float32, many columns, a large C) the gap is
    # known only to it: 60 x 84 separable rows at C = 100 gave gaps of 1.3e-4 to 5.9e-4 at
    # a solution whose dual equals float64's to 1e-5.
    used_diag = jnp.where(c["used"], jnp.diagonal(c["H"]), 0)
    rounding = 10 * jnp.finfo(dtype).eps * (jnp.max(jnp.where(c["used"], jnp.abs(c["delta"]), 0))
                                            + C * jnp.max(used_diag))
    qp_ok = c["qp_gap"] <= jnp.maximum(jnp.maximum(qp_tol, 0.1 * eps), rounding)
    status = jnp.where((status == Status.SUCCESS) & ~qp_ok, jnp.int32(Status.MAX_ITER), status)
    status = jnp.where(jnp.isfinite(primal) & jnp.all(jnp.isfinite(c["f"])), status, jnp.int32(Status.NONFINITE))
    return c, dict(slack=slack, primal=primal, dual=dual, status=status)


def _aggregate(c, it):
    """A full working set whose slots are all active, folded into one constraint.

    The constraints other than the trivial one are replaced by their convex combination
    with weights ``alpha_k / A`` (``A`` their total): ``delta_a = sum_k (alpha_k / A) delta_k``,
    ``g_a = sum_k (alpha_k / A) g_k``, a valid cutting plane (an average of valid ones) that
    carries ``alpha_a = A``.  The current dual solution stays feasible and keeps its value
    and ``w``, so the cutting plane goes on from where it was with the other slots free:
    the aggregation of limited-memory bundle methods (Kiwiel, "An aggregate subgradient
    method for nonsmooth convex minimization", Math. Programming 27, 1983).  The stored
    rows of the store and ``H`` are linear in ``g``, so they combine with the same weights.
    """
    slots = jnp.arange(c["alpha"].shape[0])
    keep = c["used"] & (slots != 0)
    alpha_kept = jnp.where(keep, c["alpha"], 0)
    total = jnp.sum(alpha_kept)
    wts = alpha_kept / jnp.where(total > 0, total, 1)
    agg = 1  # the aggregate's slot
    store = jax.tree_util.tree_map(lambda leaf: leaf.at[agg].set(wts @ leaf), c["store"])
    Hw = c["H"] @ wts
    h = Hw.at[agg].set(wts @ Hw)
    return dict(c, store=store, H=c["H"].at[agg, :].set(h).at[:, agg].set(h),
                delta=c["delta"].at[agg].set(wts @ c["delta"]), used=(slots == 0) | (slots == agg),
                alpha=jnp.where(slots == 0, c["alpha"], 0).at[agg].set(total), last=c["last"].at[agg].set(it),
                n_aggregated=c["n_aggregated"] + 1)


def _oracle(codes, weights, config, pairs, pair_weights, dtype):
    codes = jnp.asarray(codes, jnp.int32)
    weights = jnp.asarray(weights, dtype)
    if pairs is None:
        total = _pair_total(codes, weights, config.n_ranks)
        method = config.counting_method
        return lambda f: most_violated(f, codes, weights, config.n_ranks, method, total)[:2]
    pw = jnp.asarray(pair_weights, dtype)
    total = jnp.sum(pw)
    total = jnp.where(total > 0, total, 1)
    return lambda f: _most_violated_pairs(f, pairs, pw, total)


def score_thresholds(scores, codes, weights, n_ranks: int):
    """Cut-points that put the training rows in the ranks in their labels' proportions.

    The rows of positive weight are sorted by score; the k-th cut-point lies midway between
    the scores at which the cumulative weight reaches the (weighted) share of ranks <= k.

    Args:
        scores: (n,) training scores.
        codes: (n,) ranks 0..r-1.
        weights: (n,) non-negative row weights; rows of weight 0 take no part.
        n_ranks: r (static).

    Returns:
        (r-1,) thresholds, non-decreasing.
    """
    keep = weights > 0
    order = jnp.argsort(jnp.where(keep, scores, jnp.inf), stable=True)
    s, w = scores[order], jnp.where(keep, weights, 0)[order]
    cum = jnp.cumsum(w)
    total = cum[-1]
    target = jnp.cumsum(jnp.zeros(n_ranks, w.dtype).at[codes].add(jnp.where(keep, weights, 0)))[:-1]
    last = jnp.sum(keep) - 1
    idx = jnp.clip(jnp.searchsorted(cum, target - 1e-6 * total, side="left"), 0, last)
    return 0.5 * (s[idx] + s[jnp.minimum(idx + 1, last)])


def _result(config, c, end, coef, basis, gamma, codes, weights):
    return RankPairsResult(
        config=config,
        coef=coef,
        basis=basis,
        gamma=gamma,
        train_scores=c["f"],
        thresholds=score_thresholds(c["f"], codes, weights.astype(c["f"].dtype), config.n_ranks),
        alpha=c["alpha"],
        working_set=c["used"],
        working_set_size=jnp.sum(c["used"]).astype(jnp.int32),
        delta=c["delta"],
        slack=end["slack"],
        primal=end["primal"],
        dual=end["dual"],
        qp_gap=c["qp_gap"],
        n_aggregated=c["n_aggregated"],
        n_iter=c["it"],
        converged=end["status"] == Status.SUCCESS,
        status=end["status"],
    )


@partial(jit, static_argnames="config")
@partitioned
@checks_codes("codes")
def fit_rankpairs_linear(X, codes, weights, C, eps, config: RankPairsConfig, pairs=None, pair_weights=None):
    """Linear swapped-pairs SVM (Eq. 9, Algorithm 1 with Algorithm 2's search).

    Args:
        X: features (n, d), a dense array or :class:`~bayesord._sparse.PaddedRows` (from
            :func:`~bayesord._sparse.to_padded_rows`).  Dense rows may be sharded over a
            mesh of devices, with ``codes`` and ``weights`` sharded alike (rows of weight
            zero pad a row count that does not divide): the products with X stay on each
            device's rows, and each cutting-plane iteration gathers the n scores for the
            search's sort (``docs/scaleout.md``).
        codes: ranks 0..r-1 (n,), r = ``config.n_ranks``.
        weights: sample weights (n,); pair (i, j) weighs s_i s_j.  Zero weights mask rows
            out (how cross-validation folds are vmapped).
        C: regularisation trade-off (> 0), traced.
        eps: cutting-plane tolerance ε on Δ (a share of pairs), traced.
        config: static :class:`RankPairsConfig`.
        pairs: optional (P, 2) int array of (upper, lower) row pairs; when given the loss
            runs over these pairs only (Herbrich's pairwise SVM, Eq. 3, on a subsample).
        pair_weights: (P,) weights of ``pairs`` (required with ``pairs``).

    Returns:
        :class:`RankPairsResult` with ``coef`` = w.

    Example:
        >>> import jax.numpy as jnp
        >>> X = jnp.array([[0.0], [1.0], [2.0], [3.0]]); y = jnp.array([0, 0, 1, 1])
        >>> res = fit_rankpairs_linear(X, y, jnp.ones(4), 1.0, 1e-3, RankPairsConfig(n_ranks=2))
        >>> bool(res.coef[0] > 0)
        True
    """
    dtype = floating_dtype(X.dtype)
    n = X.shape[0]
    oracle = _oracle(codes, weights, config, pairs, pair_weights, dtype)
    c, end = _cutting_plane(oracle, _linear_ops(X, config.capacity, dtype), n, C, eps, config, dtype)
    w = c["store"].T @ c["alpha"]
    return _result(config, c, end, w, None, None, codes, weights)


def rbf_kernel(A, B, gamma):
    """Gaussian kernel exp(−g‖a − b‖²) between the rows of A (n, d) and B (m, d)
    (:func:`bayesord._basis.kernel_matrix`)."""
    return kernel_matrix(A, B, gamma, "rbf")


@partial(jit, static_argnames="config")
@checks_codes("codes")
def fit_rankpairs_kernel(X, codes, weights, C, gamma, eps, config: RankPairsConfig, pairs=None, pair_weights=None):
    """Exact Gaussian-kernel swapped-pairs SVM: forms the n × n Gram matrix (moderate n).

    Same arguments as :func:`fit_rankpairs_linear` (X dense) plus ``gamma`` (traced).
    Memory O(n² + capacity·n); each iteration one n × n matrix-vector product.

    Returns:
        :class:`RankPairsResult` with ``coef`` = Σ_k α_k β_k over ``basis`` = X.
    """
    dtype = floating_dtype(X.dtype)
    X = X.astype(dtype)
    gamma = jnp.asarray(gamma, dtype)
    res = _fit_gram(rbf_kernel(X, X, gamma), codes, weights, C, eps, config, pairs, pair_weights)
    return res._replace(basis=X, gamma=gamma)


@partial(jit, static_argnames="config")
@checks_codes("codes")
def fit_rankpairs_gram(K, codes, weights, C, eps, config: RankPairsConfig, pairs=None, pair_weights=None):
    """Swapped-pairs SVM on a precomputed PSD Gram matrix K (n, n) of any kernel.

    Same arguments as :func:`fit_rankpairs_linear` with X replaced by K.  ``coef`` holds
    the expansion coefficients c with training scores K c; scores of new rows are
    k(x, X_train) · c (``basis`` and ``gamma`` are None: the caller owns the kernel).
    """
    return _fit_gram(K, codes, weights, C, eps, config, pairs, pair_weights)


def _fit_gram(K, codes, weights, C, eps, config, pairs, pair_weights):
    dtype = floating_dtype(K.dtype)
    K = K.astype(dtype)
    oracle = _oracle(codes, weights, config, pairs, pair_weights, dtype)
    c, end = _cutting_plane(oracle, _kernel_ops(K, config.capacity, dtype), K.shape[0], C, eps, config, dtype)
    coef = c["store"][0].T @ c["alpha"]
    return _result(config, c, end, coef, None, None, codes, weights)


@partial(jit, static_argnames="config")
@checks_codes("codes")
def fit_rankpairs_nystroem(X, codes, weights, C, gamma, eps, key, config: RankPairsConfig, pairs=None,
                           pair_weights=None):
    """Low-rank Gaussian-kernel swapped-pairs SVM (Nyström, ``config.n_components`` landmarks).

    Landmarks are drawn without replacement with ``key``; the features are the Nyström map
    shared with RED-SVM (:func:`bayesord._basis.fit_kernel_map`), Z = K_nm P with
    P = U Λ^{-1/2} from K_mm = U Λ Uᵀ (negligible eigenvalues dropped); the linear solver
    runs on Z; ``coef`` = P w so that f(x) = k(x, landmarks) · coef.  Memory O(n m), O(n m)
    per iteration.
    """
    dtype = floating_dtype(X.dtype)
    X = X.astype(dtype)
    m = config.n_components
    if not 0 < m <= X.shape[0]:
        raise ValueError(f"n_components must be in 1..n ({X.shape[0]}), got {m}")
    gamma = jnp.asarray(gamma, dtype)
    idx = jax.random.choice(key, X.shape[0], (m,), replace=False)
    kmap = fit_kernel_map(X[idx], "rbf", gamma)
    Z = transform_kernel_map(kmap, X, "rbf")
    oracle = _oracle(codes, weights, config, pairs, pair_weights, dtype)
    c, end = _cutting_plane(oracle, _linear_ops(Z, config.capacity, dtype), X.shape[0], C, eps, config, dtype)
    w = c["store"].T @ c["alpha"]
    return _result(config, c, end, kmap.projection @ w, kmap.landmarks, gamma, codes, weights)


def decision_rankpairs(result: RankPairsResult, X, block_size: int = 4096):
    """Ranking scores f(x) for new rows: X·w (linear) or k(X, basis)·coef (kernel), in row blocks.

    Args:
        result: a fitted :class:`RankPairsResult`.
        X: (n, d) dense array (or padded rows for the linear model).
        block_size: rows per kernel block (memory O(block_size · |basis|)).
    """
    if result.basis is None:
        return row_dots(X, result.coef)
    X = jnp.asarray(X, result.coef.dtype)
    n = X.shape[0]
    if n <= block_size:
        return rbf_kernel(X, result.basis, result.gamma) @ result.coef
    pad = (-n) % block_size
    Xp = jnp.concatenate([X, jnp.zeros((pad, X.shape[1]), X.dtype)]).reshape(-1, block_size, X.shape[1])
    out = lax.map(lambda B: rbf_kernel(B, result.basis, result.gamma) @ result.coef, Xp)
    return out.reshape(-1)[:n]


def predict_rankpairs(result: RankPairsResult, X) -> Prediction:
    """Ranks of new rows: the score f(x) cut at ``result.thresholds``.

    Args:
        result: a fitted :class:`RankPairsResult` (any of the ``fit_rankpairs_*``).
        X: (n, d) rows (dense, or padded rows for the linear model); for
            :func:`fit_rankpairs_gram`, the kernel rows k(x, X_train), shape (n, n_train).

    Returns:
        :class:`~bayesord._results.Prediction`: ``labels`` (n,) codes 0..r-1 and ``scores``
        f(x) (n,).
    """
    width = result.coef.shape[0] if result.basis is None else result.basis.shape[1]
    if X.shape[1] != width:
        raise ValueError(f"X has {X.shape[1]} columns but the fit expects {width}")
    if not isinstance(X, PaddedRows):
        X = jnp.asarray(X, result.coef.dtype)
    scores = decision_rankpairs(result, X)
    labels = jnp.searchsorted(result.thresholds, scores, side="right").astype(jnp.int32)
    return Prediction(labels, scores)


# --------------------------------------------------------------------------- Herbrich pairs


def sample_pairs(codes, n_partners: int, rng: np.random.Generator, weights=None):
    """Herbrich₅-style pair subsample (host side, NumPy).

    Each row with positive weight is paired with ``n_partners`` rows of a different rank
    drawn uniformly without replacement (fewer when fewer exist); every pair is
    oriented (upper, lower).  Duplicated pairs (i with j and j with i) are kept: they
    simply weigh twice.

    Returns:
        (pairs (P, 2) int32, pair_weights (P,) float64 = s_i s_j).
    """
    codes = np.asarray(codes)
    n = codes.shape[0]
    weights = np.ones(n) if weights is None else np.asarray(weights, float)
    live = np.flatnonzero(weights > 0)
    out = []
    for i in live:
        cand = live[codes[live] != codes[i]]
        if cand.size == 0:
            continue
        js = rng.choice(cand, size=min(n_partners, cand.size), replace=False)
        for j in js:
            out.append((i, j) if codes[i] > codes[j] else (j, i))
    pairs = np.asarray(out, dtype=np.int32).reshape(-1, 2)
    return pairs, weights[pairs[:, 0]] * weights[pairs[:, 1]]
