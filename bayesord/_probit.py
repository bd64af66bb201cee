"""Bayesian linear ordinal regression (probit or logit link) with a Laplace posterior.

Model (ISBOR paper, Section 3, with the identity basis ``phi(x) = x``):
``f(x) = x^T w``, ``P(y = k | f) = F((b_{k+1} - f)/sigma) - F((b_k - f)/sigma)`` (Eq. 4),
prior ``w ~ N(0, A^{-1})`` with ``A = alpha I`` or ARD ``A = diag(alpha_j)`` (Eq. 5).

**Identifiability.** The likelihood depends on ``(w, b)`` only through ``(w/sigma,
b/sigma)``, and the Laplace evidence is exactly invariant under ``(w, b, sigma, alpha) ->
(w/c, b/c, sigma/c, alpha c^2)``.  So ``sigma`` is not identifiable in the linear model
and is fixed to 1: the scale of ``w`` is measured in noise standard deviations.  There is
no intercept either: the thresholds absorb it.

**Two treatments of the thresholds** (``ProbitConfig.thresholds``):

* ``"joint"``: thresholds are parameters, estimated jointly with ``w`` by Newton's method
  (:func:`bayesord._laplace.newton_map_joint`) for a fixed prior precision ``alpha``.  The
  Laplace posterior covers ``(w, b)``.  With ``alpha = 0`` this is maximum likelihood and the
  Laplace covariance is the inverse observed information (statsmodels' ``OrderedModel``).
* ``"evidence"``: thresholds and ``alpha`` are hyperparameters tuned by maximising the
  Laplace log evidence (Eq. 12) with optax's L-BFGS; gradients through the inner MAP
  come from the implicit function theorem (:func:`bayesord._laplace.map_weights`).  This
  is the type-II maximum likelihood of the ISBOR paper (Eq. 13-14 give the threshold
  gradient; here it is obtained by differentiation).  The evidence uses the Laplace
  posterior of ``w`` given the tuned hyperparameters; predictions use the joint one of
  ``(w, b)`` there (below).

**Columns are standardised inside the model.**  The fit works with ``z = (x - c) / s``,
``c`` and ``s`` the (weighted) column means and standard deviations of the training rows
(:func:`bayesord._columns.center_and_scale`), and stores both in the result.  With a free
threshold per class boundary the centred model is the same model (the thresholds absorb
``c^T w``), but the Laplace posterior is then computed where the weights and the
thresholds are nearly uncorrelated; and the prior is on the standardised coefficients
``s_j w_j ~ N(0, 1/alpha_j)`` (``alpha`` is the precision of the effect of one standard
deviation of a column).  So a per-column shift or rescaling of the data changes no
prediction or band, and the coefficients change only by the rescaling itself.  The result
reports the weights ``w`` per unit of the user's columns; thresholds are those of the
centred latent ``(x - c)^T w``, and :func:`thresholds_at_zero` gives them (and their
covariance) for ``x^T w``, as statsmodels and R's ``ordinal`` report them.

**The predictive distribution integrates the joint posterior of (w, b).**  In both modes
the result holds a Gaussian over the weights *and* the thresholds: the inverse of the joint
negative Hessian of the log posterior (a flat prior on the thresholds), at the joint MAP
("joint") or at the type-II optimum ("evidence"; :func:`bayesord._laplace.joint_posterior`).
With ``u_k = b_k - (x - c)^T w`` Gaussian under it,
``P(y <= k | x) = E[F(u_k / sigma)] = Phi((b_k - m) / sqrt(sigma^2 + s_k^2))`` exactly for
the probit, ``s_k^2 = Var(u_k) = x_c^T Sigma_ww x_c - 2 x_c^T Sigma_wb[:, k] + Sigma_bb[k, k]``
(``docs/maths.md``, "The joint predictive distribution").

Everything is a jitted pure function: ``fit_probit`` can be ``vmap``-ed over a grid of
``alpha`` values or over folds expressed as 0/1 sample weights.  float64 is recommended
for the evidence path (enable ``jax_enable_x64``).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._columns import center_and_scale
from ._effects import average_marginal_effects
from ._laplace import (
    joint_draws,
    joint_posterior,
    laplace_at,
    laplace_log_evidence,
    map_weights,
    newton_map_joint,
)
from ._likelihood import log_class_probs, log_predictive_probs, ordinal_terms
from ._linalg import chol_inverse, chol_logdet, chol_solve, safe_cholesky
from ._links import check_link
from ._mesh import partitioned
from ._precision import jit
from ._results import check_settings, checks_codes, mode_labels, result_type
from ._shapes import bucket_rows, pad_rows
from ._status import Status, final_status
from ._thresholds import (
    initial_thresholds,
    params_from_thresholds,
    thresholds_from_params,
    thresholds_jacobian,
)
from ._validation import floating_dtype

__all__ = [
    "ProbitConfig",
    "ProbitResult",
    "ProbitPrediction",
    "fit_probit",
    "fit_probit_weights",
    "predict_probit",
    "marginal_effects_probit",
    "sample_class_probs",
    "class_prob_bands",
    "thresholds_at_zero",
]

_LOG_ALPHA_BOUNDS = (-25.0, 25.0)
_SCALE_ROWS = 8192  # rows used to size the Newton start (see _initial_scale, _pilot_start)
_PILOT_MIN_ROWS = 4 * _SCALE_ROWS  # from this n on, a subsample's MAP starts Newton


@dataclasses.dataclass(frozen=True)
class ProbitConfig:
    """Static configuration of :func:`fit_probit` (hashable; sets control flow only).

    Attributes:
        link: "probit" (Gaussian noise, the ISBOR likelihood) or any other of
            :data:`bayesord._links.LINKS`.
        thresholds: "evidence" (type-II ML of thresholds and alpha) or "joint" (MAP of
            thresholds with w for a fixed alpha).
        prior: "gaussian" (one alpha) or "ard" (one alpha per feature).
        max_newton: cap on Newton iterations of each inner MAP solve.
        max_outer: cap on L-BFGS iterations of the evidence optimisation.
    """

    link: str = "probit"
    thresholds: str = "evidence"
    prior: str = "gaussian"
    max_newton: int = 100
    max_outer: int = 200

    def __post_init__(self):
        check_link(self.link)
        if self.thresholds not in ("evidence", "joint"):
            raise ValueError(f"thresholds must be 'evidence' or 'joint', got {self.thresholds!r}")
        if self.prior not in ("gaussian", "ard"):
            raise ValueError(f"prior must be 'gaussian' or 'ard', got {self.prior!r}")
        if self.max_newton < 1 or self.max_outer < 1:
            raise ValueError("max_newton and max_outer must be at least 1")


@result_type
class ProbitResult:
    """A fitted Bayesian linear ordinal model."""

    config: ProbitConfig
    """The static configuration it was fitted with (its link among it)."""
    coef: jax.Array
    """Posterior mean (MAP) of the weights w, shape (d,)."""
    coef_cov: jax.Array
    """Marginal covariance of w under the joint Laplace posterior of (w, b), shape (d, d)."""
    thresholds: jax.Array
    """Ordered thresholds b_1..b_{K-1} of the centred latent ``(x - center)^T w``, shape
    (K-1,); :func:`thresholds_at_zero` gives those of ``x^T w``."""
    thresholds_cov: jax.Array
    """Covariance of ``thresholds`` under the joint Laplace posterior, (K-1, K-1)."""
    cross_cov: jax.Array
    """Covariance between w and ``thresholds``, (d, K-1)."""
    sigma: jax.Array
    """Noise scale (fixed to 1: see the module docstring)."""
    alpha: jax.Array
    """Prior precisions of the standardised coefficients ``scale * w``, shape (d,) (all
    equal for the "gaussian" prior)."""
    log_evidence: jax.Array
    """Laplace log evidence (Eq. 12).  In "joint" mode the thresholds' flat prior is
    improper, so the value is defined up to a constant shared by all fits on the same data."""
    loglik: jax.Array
    """Log-likelihood at the posterior mode."""
    n_iter: jax.Array
    """Newton iterations ("joint") or L-BFGS iterations ("evidence")."""
    converged: jax.Array
    """Whether every solve met its tolerance."""
    status: jax.Array
    """A :class:`bayesord._status.Status` code."""
    center: jax.Array
    """Column offsets ``c`` the model is centred at (weighted training means), shape (d,)."""
    scale: jax.Array
    """Column scales ``s`` the prior is relative to (weighted training sds), shape (d,)."""


class ProbitPrediction(NamedTuple):
    """Predictive distribution for new inputs."""

    mean: jax.Array
    """Mean of the centred latent ``(x - center)^T w``, shape (n,): the scale of the
    result's ``thresholds``, and unchanged by shifts of the columns."""
    var: jax.Array
    """Its posterior variance ``(x - center)^T Sigma_w (x - center)``, shape (n,)."""
    proba: jax.Array
    """Class probabilities, shape (n, K), rows non-negative summing to 1."""
    cum_proba: jax.Array
    """Cumulative probabilities P(y <= k) for k < K-1, shape (n, K-1)."""
    log_proba: jax.Array
    """Their logarithms, shape (n, K): accurate where ``proba`` underflows (float32 gives 0
    below about 1e-38 or 1e-45)."""

    labels = property(lambda self: mode_labels(self.proba), doc="(n,) codes of the most probable classes.")
    scores = property(lambda self: self.mean, doc="The latent mean ``mean`` (n,).")


def _initial_weights(X, y, weights, b0, alpha):
    """Ridge regression of each class's typical latent value on X: a start for Newton.

    With thresholds ``b0`` at the class frequencies, the latent value of class k lies in
    (b_{k-1}, b_k]; its interval midpoint (one unit beyond the threshold for the outer
    classes) is regressed on X.  Costs one ``X^T X``, about one Newton iteration, and
    saves several; a failed factorisation falls back to zero.
    """
    lo = jnp.concatenate([b0[:1] - 2.0, b0])
    hi = jnp.concatenate([b0, b0[-1:] + 2.0])
    target = 0.5 * (lo + hi)[y]
    ridge = jnp.maximum(alpha, 1e-8 * jnp.sum(weights))
    L, ok = safe_cholesky((X * weights[:, None]).T @ X + jnp.diag(ridge))
    w = chol_solve(L, X.T @ (weights * target))
    return jnp.where(ok & jnp.all(jnp.isfinite(w)), w, 0.0)


def _initial_scale(f0, y, weights, b0, alpha, w0, link, max_iter=10):
    """The common scale ``c`` of the start ``(c w0, c b0)`` that maximises the log posterior.

    The ridge start gets the direction of ``w`` right but not its size: thresholds at the
    class frequencies of ``f = 0`` ignore the spread of ``f``, and both come out several
    times too small.  ``g(c) = sum log P(y | c f0, c b0) - c^2/2 w0^T A w0`` is concave
    (the ordinal log-likelihood is jointly concave in ``(f, b)``), and its derivatives
    follow from the per-sample terms by the chain rule, so a few scalar Newton steps on
    ``f0 = X w0`` alone (no pass over ``X``) find ``c``; this saves several full Newton
    iterations.  Steps are limited to a factor of 4 either way, a point worse than the best
    so far halves the move, and the best point evaluated is returned (never worse than
    ``c = 1``); the loop stops once the next move is under 1% of ``c``.
    """
    n_thr = b0.shape[0]
    b_lo = b0[jnp.clip(y - 1, 0, n_thr - 1)]
    b_hi = b0[jnp.clip(y, 0, n_thr - 1)]
    prior = jnp.sum(alpha * w0 * w0)
    sigma = jnp.ones((), f0.dtype)

    def derivatives(c):
        t = ordinal_terms(c * f0, y, c * b0, sigma, link)
        value = jnp.sum(weights * t.logp) - 0.5 * c * c * prior
        grad = jnp.sum(weights * (t.d_f * f0 + t.d_lo * b_lo + t.d_hi * b_hi)) - c * prior
        curv = jnp.sum(weights * (t.d_ff * f0 * f0 + t.d_lolo * b_lo * b_lo + t.d_hihi * b_hi * b_hi
                                  + 2.0 * (t.d_flo * f0 * b_lo + t.d_fhi * f0 * b_hi
                                           + t.d_lohi * b_lo * b_hi))) - prior
        return value, grad, curv

    def cond(carry):
        _, _, _, rel_step, it = carry
        return (rel_step > 1e-2) & (it < max_iter)

    def body(carry):
        c, best_c, best_val, _, it = carry
        value, grad, curv = derivatives(c)
        better = jnp.isfinite(value) & (value > best_val)
        best_c = jnp.where(better, c, best_c)
        best_val = jnp.where(better, value, best_val)
        step = jnp.where(better & (curv < 0), -grad / curv, 0.0)
        c_next = jnp.clip(best_c + step, 0.25 * best_c, 4.0 * best_c)
        # A rejected point (worse than the best) halves the move instead.
        c_next = jnp.where(better, c_next, 0.5 * (c + best_c))
        return c_next, best_c, best_val, jnp.abs(c_next - best_c) / best_c, it + 1

    one = jnp.ones((), f0.dtype)
    init = (one, one, jnp.asarray(-jnp.inf, f0.dtype), jnp.asarray(jnp.inf, f0.dtype), 0)
    return jax.lax.while_loop(cond, body, init)[1]


def _strided(X, y, weights, rows):
    """Every ``stride``-th row (at most about ``rows`` of them), with the weights scaled up so
    the subsample carries the full sample's total weight (the prior keeps its strength)."""
    stride = max(1, X.shape[0] // rows)
    w = weights[::stride]
    w = w * (jnp.sum(weights) / jnp.maximum(jnp.sum(w), jnp.finfo(w.dtype).tiny))
    return X[::stride], y[::stride], w


def _scaled_start(X, y, weights, alpha, link, n_classes):
    """Newton start ``(c w0, c b0)``: thresholds at the class frequencies, the ridge start of
    :func:`_initial_weights`, and the common scale of :func:`_initial_scale` (sized on at
    most ``_SCALE_ROWS`` rows)."""
    b0 = initial_thresholds(y, weights, n_classes, link, X.dtype)
    w0 = _initial_weights(X, y, weights, b0, alpha)
    Xs, ys, ws = _strided(X, y, weights, _SCALE_ROWS)
    scale = _initial_scale(Xs @ w0, ys, ws, b0, alpha, w0, link)
    return scale * w0, scale * b0


def _pilot_start(X, y, weights, alpha, rtol, config, n_classes):
    """Newton start for large n: the joint MAP of a strided subsample of ``_SCALE_ROWS`` rows.

    Its error is of the order of the subsample's sampling error, so the full-data Newton
    solve that follows needs one pass over ``X`` fewer and no ridge start (``X^T X``).
    When the pilot solve fails or the subsample misses a class (its thresholds would
    collapse), the subsample's :func:`_scaled_start` is used instead.
    """
    link = config.link
    Xs, ys, ws = _strided(X, y, weights, _SCALE_ROWS)
    w0, b0 = _scaled_start(Xs, ys, ws, alpha, link, n_classes)
    pilot = newton_map_joint(Xs, ys, ws, b0, jnp.ones((), X.dtype), alpha, w0, rtol, link=link,
                             max_iter=config.max_newton)
    present = jax.ops.segment_sum((ws > 0).astype(jnp.int32), ys, num_segments=n_classes) > 0
    use = pilot.converged & jnp.all(present)
    return jnp.where(use, pilot.w, w0), jnp.where(use, pilot.b, b0)


def _alpha_vector(alpha, d, dtype):
    return jnp.broadcast_to(jnp.asarray(alpha, dtype), (d,))


@partial(jit, static_argnames=("config", "n_classes"))
@partitioned
@checks_codes("y")
def fit_probit(X, y, weights, alpha, rtol, *, config: ProbitConfig, n_classes: int) -> ProbitResult:
    """Fit the Bayesian linear ordinal model.

    Args:
        X: features, shape (n, d).  Rows may be sharded over a mesh of devices, with
            ``y`` and ``weights`` sharded alike (:mod:`bayesord.distributed`); rows of
            weight zero pad a row count that does not divide evenly.
        y: classes 0..K-1, shape (n,) (int32).
        weights: non-negative sample weights, shape (n,) (a weight of 2 equals a duplicate).
        alpha: prior precision of the standardised coefficients ``s_j w_j``: scalar or
            shape (d,).  Fixed in "joint" mode (0 gives maximum likelihood); in "evidence"
            mode the prior of the joint fit that starts the search, whose first alpha is
            that fit's MacKay fixed-point update.
        rtol: relative tolerance of every solve (e.g. 1e-10 in float64, 1e-5 in float32).
        config: :class:`ProbitConfig` (static).
        n_classes: K (static).

    Returns:
        :class:`ProbitResult`.

    Example:
        >>> import jax, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 3))
        >>> y = np.digitize(X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=200), [-1.0, 1.0]).astype("int32")
        >>> res = fit_probit(X, y, np.ones(200), 1.0, 1e-6,
        ...                  config=ProbitConfig(), n_classes=3)
        >>> bool(res.converged)
        True
    """
    X = jnp.asarray(X)
    dtype = floating_dtype(X.dtype)
    weights = jnp.asarray(weights, dtype)
    X = X.astype(dtype)
    center, scale = center_and_scale(X, weights)
    res = _fit_standardised((X - center) / scale, jnp.asarray(y, jnp.int32), weights, alpha, rtol,
                            config, n_classes)
    # Back to the user's columns: w = w_z / s (the thresholds of the centred latent are the same).
    return res._replace(coef=res.coef / scale, coef_cov=res.coef_cov / jnp.outer(scale, scale),
                        cross_cov=res.cross_cov / scale[:, None], center=center, scale=scale)


@partial(jit, static_argnames=("config", "n_classes"))
def fit_probit_weights(X, y, weights, alpha, rtol, *, config: ProbitConfig, n_classes: int) -> ProbitResult:
    """:func:`fit_probit` once per row of ``weights``, in one compiled program (``vmap``).

    The fits of cross-fitting, each with its held-out rows at weight zero, which is exact
    here (weighted sums throughout, the column moments included).  Small fits share their
    per-step overhead: on 1,000 rows of six columns (a CuSumRank's decision values, float32),
    six joint-mode fits ran in 1.9 ms against 0.44 ms for one.

    Args:
        X: features, shape (n, d).
        y: classes 0..K-1, shape (n,) (int32).
        weights: (m, n) non-negative sample weights, one row per fit.
        alpha: prior precision, as for :func:`fit_probit`.
        rtol: relative tolerance of every solve.
        config: :class:`ProbitConfig` (static).
        n_classes: K (static).

    Returns:
        :class:`ProbitResult` whose arrays have a leading axis of length m.
    """
    return jax.vmap(lambda w: fit_probit(X, y, w, alpha, rtol, config=config, n_classes=n_classes))(weights)


def _fit_standardised(X, y, weights, alpha, rtol, config, n_classes):
    """:func:`fit_probit` on standardised columns (``center`` and ``scale`` left to the caller)."""
    dtype = X.dtype
    n, d = X.shape
    link = config.link
    sigma = jnp.ones((), dtype)
    alpha0 = _alpha_vector(alpha, d, dtype)
    rtol = jnp.asarray(rtol, dtype)
    if n >= _PILOT_MIN_ROWS:
        w0, b0 = _pilot_start(X, y, weights, alpha0, rtol, config, n_classes)
    else:
        w0, b0 = _scaled_start(X, y, weights, alpha0, link, n_classes)
    joint = newton_map_joint(X, y, weights, b0, sigma, alpha0, w0, rtol, link=link,
                             max_iter=config.max_newton)
    if config.thresholds == "joint":
        cov = chol_inverse(joint.chol)
        log_ev = (joint.log_post + 0.5 * jnp.sum(jnp.log(alpha0)) - 0.5 * chol_logdet(joint.chol)
                  + 0.5 * (n_classes - 1) * jnp.log(2 * jnp.pi))
        return ProbitResult(
            config=config, coef=joint.w, coef_cov=cov[:d, :d], thresholds=joint.b, thresholds_cov=cov[d:, d:],
            cross_cov=cov[:d, d:], sigma=sigma, alpha=alpha0, log_evidence=log_ev,
            loglik=joint.loglik, n_iter=joint.n_iter, converged=joint.converged,
            status=joint.status, center=jnp.zeros(d, dtype), scale=jnp.ones(d, dtype),
        )
    return _fit_evidence(X, y, weights, alpha0, rtol, joint, config, n_classes)


class _EvidenceSearch(NamedTuple):
    """Carry of the evidence maximisation (L-BFGS directions, Armijo steps) in z."""

    z: jax.Array  # last accepted point (eta = eta0 + P z)
    value: jax.Array  # minus the log evidence there
    grad: jax.Array  # its gradient in z
    direction: jax.Array  # the next search direction
    t: jax.Array  # the next trial's step length
    opt_state: object  # optax L-BFGS state
    inner: tuple  # (w, inner converged, inner status) of the last accepted point's MAP solve
    n_iter: jax.Array
    done: jax.Array


def _fit_evidence(X, y, weights, alpha0, rtol, joint, config, n_classes):
    """Type-II ML of (thresholds, alpha) by L-BFGS on the Laplace evidence (Eq. 12)."""
    dtype = X.dtype
    d = X.shape[1]
    link = config.link
    sigma = jnp.ones((), dtype)
    n_alpha = d if config.prior == "ard" else 1
    lo, hi = _LOG_ALPHA_BOUNDS

    def unpack(eta):
        b = thresholds_from_params(eta[: n_classes - 1])
        log_alpha = jnp.clip(eta[n_classes - 1:], lo, hi)
        return b, jnp.broadcast_to(jnp.exp(log_alpha), (d,))

    def neg_evidence(eta, w_warm):
        b, alpha = unpack(eta)
        w, _, ok, status = map_weights(link, config.max_newton, X, weights, b, sigma, alpha, y,
                                       (w_warm, rtol))
        log_post, _, L, _ = laplace_at(w, X, y, weights, b, sigma, alpha, link)
        return -laplace_log_evidence(log_post, L, alpha), (w, ok, status)

    # Start at the joint MAP's thresholds and at one MacKay (1992) fixed-point update of
    # alpha from the joint fit: gamma = 1 - alpha_j Sigma_jj well-determined parameters
    # (summed for the Gaussian prior), alpha = gamma / w^2.  It lands near the evidence
    # optimum, where a first L-BFGS step of unit length would overshoot.
    cov = chol_inverse(joint.chol)
    alpha_start = jnp.where(alpha0 > 0, alpha0, 1.0)
    gamma = jnp.clip(1.0 - alpha_start * jnp.diag(cov)[:d], 1e-6, 1.0)
    w2 = joint.w * joint.w
    if n_alpha == 1:
        gamma, w2 = jnp.sum(gamma, keepdims=True), jnp.sum(w2, keepdims=True)
    log_alpha = jnp.clip(jnp.log(gamma) - jnp.log(w2), lo, hi)
    log_alpha = jnp.where(jnp.isfinite(log_alpha), log_alpha, jnp.log(alpha_start[:n_alpha]))
    eta0 = jnp.concatenate([params_from_thresholds(joint.b), log_alpha]).astype(dtype)
    w_warm = jax.lax.stop_gradient(joint.w)
    # Precondition: the evidence is O(n) times more curved along the thresholds than along
    # log(alpha).  Optimise z with eta = eta0 + P z, where P's threshold block is the
    # Cholesky factor of the joint fit's threshold covariance (mapped to log-gap space by the
    # delta method) and its log(alpha) block the evidence's curvature there, about
    # sqrt(2 / gamma) (capped at 1), so one unit of z is about one posterior sd.
    k1 = n_classes - 1
    J = thresholds_jacobian(eta0[:k1])
    Jinv = jnp.linalg.solve(J, jnp.eye(k1, dtype=dtype))
    cov_theta = Jinv @ cov[d:, d:] @ Jinv.T
    L_theta, ok_theta = safe_cholesky(cov_theta)
    L_theta = jnp.where(ok_theta, L_theta, jnp.eye(k1, dtype=dtype))
    P = jax.scipy.linalg.block_diag(L_theta, jnp.diag(jnp.minimum(1.0, jnp.sqrt(2.0 / gamma))))

    def neg_evidence_z(z, w_start):
        return neg_evidence(eta0 + P @ z, w_start)

    # Each evaluation warm-starts the inner Newton solve at the last accepted MAP.
    value_and_grad = jax.value_and_grad(neg_evidence_z, has_aux=True)
    # L-BFGS directions from optax; the step is accepted or halved here (Armijo), so the
    # evidence (and its inner Newton solve) is traced once, which keeps compile time low.
    opt = optax.lbfgs(learning_rate=1.0, linesearch=None)

    def cond(c):
        return (~c.done) & (c.n_iter < config.max_outer)

    def body(c):
        eta, val, grad, direction, t, state, inner = c.z, c.value, c.grad, c.direction, c.t, c.opt_state, c.inner
        trial = eta + t * direction
        (v_new, inner_new), g_new = value_and_grad(trial, jax.lax.stop_gradient(inner[0]))
        slope = grad @ direction
        accept = jnp.isfinite(v_new) & (v_new <= val + 1e-4 * t * slope)
        small_f = jnp.isfinite(val) & (jnp.abs(val - v_new) <= rtol * (1.0 + jnp.abs(val)))
        small_x = t * jnp.max(jnp.abs(direction)) <= jnp.sqrt(rtol) * (1.0 + jnp.max(jnp.abs(eta)))
        upd, state_new = opt.update(g_new, state, trial)
        eta, val, grad, direction, state, inner = jax.tree_util.tree_map(
            lambda a, r: jnp.where(accept, a, r),
            (trial, v_new, g_new, upd, state_new, inner_new),
            (eta, val, grad, direction, state, inner))
        # A new direction starts with a step of at most 1 in every coordinate (about one
        # posterior sd of the thresholds, one e-fold of alpha).  Halve the step after a rejection; fall back to steepest descent when halving stalls.
        t = jnp.where(accept, jnp.minimum(1.0, 1.0 / jnp.max(jnp.abs(direction))), 0.5 * t)
        stalled = t < 1e-10
        direction = jnp.where(stalled, -grad / (1.0 + jnp.linalg.norm(grad)), direction)
        t = jnp.where(stalled, 1.0, t)
        # A step within both tolerances ends the search, and so does a rejected one along a
        # descent direction: at the optimum a rejection only says that the change is below
        # the evidence's rounding (float32 on a thousand rows), and halving the step down to
        # the steepest-descent fallback took some fits from 4 iterations to 41.
        done = (small_f & small_x & (accept | (slope < 0))) | ~jnp.isfinite(val)
        return _EvidenceSearch(eta, val, grad, direction, t.astype(dtype), state, inner, c.n_iter + 1, done)

    # The first pass evaluates eta0 (accepted against +inf) and takes the first direction.
    zeros = jnp.zeros_like(eta0)
    inner0 = (w_warm, jnp.zeros((), bool), jnp.asarray(Status.SUCCESS, jnp.int32))
    init = _EvidenceSearch(zeros, jnp.asarray(jnp.inf, dtype), zeros, zeros, jnp.ones((), dtype), opt.init(zeros),
                           inner0, jnp.zeros((), jnp.int32), jnp.zeros((), bool))
    end = jax.lax.while_loop(cond, body, init)
    z, last, n_iter, done = end.z, end.value, end.n_iter, end.done
    b, alpha = unpack(eta0 + P @ z)
    w, inner_ok, inner_status = end.inner
    log_post, loglik, L, chol_ok = laplace_at(w, X, y, weights, b, sigma, alpha, link)
    log_ev = laplace_log_evidence(log_post, L, alpha)
    # The predictive posterior: a Gaussian over (w, b) at the type-II optimum.
    post = joint_posterior(X, y, weights, w, b, sigma, alpha, L, link)
    coef_cov = chol_inverse(L) + post.gain @ post.thresholds_cov @ post.gain.T
    chol_ok = chol_ok & post.ok
    # The joint fit only starts the search: whether it converged says nothing of the optimum.
    status = final_status(done & inner_ok, finite=jnp.isfinite(log_ev) & jnp.isfinite(last),
                          failure=jnp.where(chol_ok, inner_status, Status.NOT_POSITIVE_DEFINITE))
    return ProbitResult(
        config=config, coef=w, coef_cov=coef_cov, thresholds=b, thresholds_cov=post.thresholds_cov,
        cross_cov=post.cross_cov, sigma=sigma, alpha=alpha, log_evidence=log_ev, loglik=loglik,
        n_iter=n_iter, converged=status == Status.SUCCESS,
        status=status.astype(jnp.int32), center=jnp.zeros(d, dtype), scale=jnp.ones(d, dtype),
    )


def predict_probit(result: ProbitResult, X, *, link: str | None = None) -> ProbitPrediction:
    """Predictive latent mean/variance and class probabilities for new inputs.

    Integrates the joint Gaussian posterior of (w, b): with ``x_c = x - center``,
    ``m = x_c^T w*`` and ``s_k^2 = Var(b_k - x_c^T w)`` (see the module docstring),
    ``P(y <= k) = E[F((b_k - x_c^T w) / sigma)]`` with ``b_k - x_c^T w ~ N(b_k - m, s_k^2)``:
    ``F((b_k - m) / sqrt(sigma^2 + s_k^2))`` for the probit (exact), the probit approximation
    for the logit, quadrature for the other links
    (:func:`bayesord._likelihood.log_predictive_probs`).  The link is the fit's
    (``result.config.link``); ``link=`` is accepted for older code only when it equals it.
    """
    check_settings(result.config, link=link)
    return _predict_probit(result, X)


@jit
def _predict_probit(result: ProbitResult, X) -> ProbitPrediction:
    link = result.config.link
    X = jnp.asarray(X, result.coef.dtype)
    Xc = X - result.center
    mean_c = Xc @ result.coef
    weight_var = jnp.einsum("ij,jk,ik->i", Xc, result.coef_cov, Xc)
    margin_var = (weight_var[:, None] - 2.0 * Xc @ result.cross_cov
                  + jnp.diag(result.thresholds_cov)[None, :])
    log_p, log_cum = log_predictive_probs(mean_c, margin_var, result.sigma, result.thresholds, link)
    return ProbitPrediction(mean=mean_c, var=jnp.maximum(weight_var, 0.0), proba=jnp.exp(log_p),
                            cum_proba=jnp.exp(log_cum), log_proba=log_p)


def thresholds_at_zero(result: ProbitResult):
    """The thresholds of the uncentred latent ``x^T w`` and their joint covariance with w.

    ``b0 = b + (center^T w) 1``: the cut points that statsmodels' ``OrderedModel`` and R's
    ``clm`` report.  Their covariance follows linearly from the joint posterior.

    A result of NumPy arrays (an estimator's) is transformed in NumPy, which costs a first
    fit of a process no program to trace and compile; JAX arrays go through a jitted program.

    Returns:
        (thresholds, thresholds_cov, cross_cov) of shapes (K-1,), (K-1, K-1), (d, K-1).
    """
    if all(isinstance(a, np.ndarray) for a in jax.tree_util.tree_leaves(result)):
        return _thresholds_at_zero(np, result)
    return _thresholds_at_zero_jit(result)


def _thresholds_at_zero(xp, result):
    c = result.center
    ones = xp.ones_like(result.thresholds)
    wc = result.coef_cov @ c
    bc = result.cross_cov.T @ c
    thresholds = result.thresholds + (c @ result.coef) * ones
    cov = (result.thresholds_cov + xp.outer(bc, ones) + xp.outer(ones, bc)
           + (c @ wc) * xp.outer(ones, ones))
    return thresholds, cov, result.cross_cov + xp.outer(wc, ones)


_thresholds_at_zero_jit = jit(partial(_thresholds_at_zero, jnp))


@jit
def marginal_effects_probit(result: ProbitResult, X, discrete, values=None):
    """Average marginal effects of each column on the class probabilities and the expected class.

    :func:`bayesord._effects.average_marginal_effects` with the class probabilities at the
    posterior mode of ``(w, b)``, ``P(y = k | x) = F((b_{k+1} - x_c^T w) / sigma) - F((b_k -
    x_c^T w) / sigma)``, and the joint Laplace posterior of ``(w, b)`` for the sds.

    Args:
        result: a :class:`ProbitResult`.
        X: rows, shape (n, d), on the user's scale.
        discrete: bool, shape (d,): which columns take the 0/1 change.
        values: the value of each class in the expected class, shape (K,) (None: 0..K-1).

    Returns:
        (effects, sds), each of shape (d, K + 1): per column, the effect on each class
        probability and on the expected class.
    """
    d = result.coef.shape[0]
    theta = jnp.concatenate([result.coef, result.thresholds])
    cov = jnp.block([[result.coef_cov, result.cross_cov], [result.cross_cov.T, result.thresholds_cov]])

    def proba(t, Xs):
        f = (Xs - result.center) @ t[:d]
        return jnp.exp(log_class_probs(f, jnp.broadcast_to(result.sigma, f.shape), t[d:], result.config.link))

    return average_marginal_effects(proba, theta, cov, X, discrete, values)


def _posterior_draws(result: ProbitResult, key, n_draws):
    """Draws of (w, b) from the Laplace posterior, every draw's thresholds ordered
    (:func:`bayesord._laplace.joint_draws`)."""
    return joint_draws(result.coef, result.coef_cov, result.cross_cov, result.thresholds,
                       result.thresholds_cov, key, n_draws)


def sample_class_probs(result: ProbitResult, X, key, *, n_draws: int = 200, link: str | None = None):
    """Class probabilities under posterior draws of (w, b): shape (n_draws, n, K).

    Each draw gives ``P(y = k | x, w_s, b_s)``; their spread is the posterior uncertainty
    of the class probabilities, always inside [0, 1].  The link is the fit's.
    """
    check_settings(result.config, link=link)
    return _sample_class_probs(result, X, key, n_draws=n_draws)


@partial(jit, static_argnames=("n_draws",))
def _sample_class_probs(result: ProbitResult, X, key, *, n_draws: int):
    link = result.config.link
    X = jnp.asarray(X, result.coef.dtype) - result.center
    w, b = _posterior_draws(result, key, n_draws)
    scale = jnp.broadcast_to(result.sigma, (X.shape[0],))

    def one(ws, bs):
        return jnp.exp(log_class_probs(X @ ws, scale, bs, link))

    return jax.vmap(one)(w, b)


def class_prob_bands(result: ProbitResult, X, key, *, level: float = 0.95, n_draws: int = 200,
                     link: str | None = None, block: int = 4096):
    """Central credible band and posterior sd of each class probability.

    Rows are processed in blocks of ``block`` so memory is ``O(n_draws * block * K)``.
    The link is the fit's.

    Returns:
        (lower, upper, sd), each of shape (n, K), with ``0 <= lower <= upper <= 1``.
    """
    check_settings(result.config, link=link)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    X = np.asarray(X, result.coef.dtype)
    q = jnp.asarray([(1 - level) / 2, (1 + level) / 2], X.dtype)
    outs = []
    for start in range(0, X.shape[0], block):
        rows = X[start:start + block]
        # Rows padded to a bucket size, so blocks of nearby sizes share one compiled program.
        (padded,) = pad_rows(bucket_rows(rows.shape[0]), rows)
        lo, hi, sd = _band_block(result, padded, key, q, n_draws=n_draws)
        outs.append((lo[:rows.shape[0]], hi[:rows.shape[0]], sd[:rows.shape[0]]))
    return tuple(jnp.concatenate([o[i] for o in outs]) for i in range(3))


@partial(jit, static_argnames=("n_draws",))
def _band_block(result, X, key, q, *, n_draws):
    """Quantiles ``q`` and sd of the class probabilities over posterior draws, one block."""
    draws = _sample_class_probs(result, X, key, n_draws=n_draws)
    lo_hi = jnp.quantile(draws, q, axis=0)
    return lo_hi[0], lo_hi[1], jnp.std(draws, axis=0)
