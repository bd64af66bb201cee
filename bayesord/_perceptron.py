"""CuSum Rank and PRank as online structured perceptrons (Milidiú & Rocha, "Cumulative Sum Ranking").

Ranks are coded 0..r-1 here (the paper's 1..r).  Every model scores rank k by the
cumulative sum of per-rank increments (Eq. 5/8, Eq. 10)::

    a_k(x) = w_k . x_aug = U_k . z - b_k          (a_1 = 0: the sentinel w_1 = 0)
    s(x, k) = sum_{j <= k} a_j(x)
    y_hat   = argmax_k s(x, k)                    (ties go to the largest rank)

where ``x_aug = (z, -1)`` is the input with the paper's constant last attribute, stored
here as a separate threshold vector ``b`` so sparse rows never need an extra column.
With ``fit_intercept=False`` the thresholds stay at zero and ``x`` is used as given.

* ``model="cusum"``: one direction per rank, ``U`` of shape (r, d) (Section 3, Fig. 1).
* ``model="prank"``: one shared direction ``u`` (``U`` of shape (1, d)) and ordered
  thresholds (Section 6, Eq. 11-14): the same machinery with the directions tied, so
  the update ``u += (y - y_hat) z`` is the sum of the per-rank CuSum updates.

A mistake on (x, y) updates, for k = min(y, y_hat)+1 .. max(y, y_hat) (Fig. 1, Eq. 13-14),
the increments by ``c_k = tau * sign(y - y_hat)``:  ``U_k += c_k z``, ``b_k -= c_k``.

* ``algorithm="perceptron"``: ``tau = 1`` (Fig. 1).
* ``algorithm="pa"``: passive-aggressive with a known margin delta (Fig. 2):
  ``tau = (s(y_hat) - s(y) + delta) / ||Phi(x, y) - Phi(x, y_hat)||^2``, clipped at 0, with
  ``||dPhi||^2 = |y - y_hat| ||x_aug||^2`` for CuSum and
  ``(y - y_hat)^2 ||z||^2 + |y - y_hat|`` for PRank; a zero ``||dPhi||`` skips the row.
* ``margin > 0``: loss-augmented training prediction (Tsochantaridis et al. 2005, the
  "margin" version of Section 8): ``y_hat = argmax_k s(x, k) + margin * |y - k|``.
* ``averaged=True``: Collins (2002) averaging of the weights over every online step,
  kept in O(r d) memory with the counter trick ``avg = W - sum_t (t-1) dW_t / T``.

The kernel (dual) version (Section 7, Fig. 5) counts atoms: rank block k of sample i
carries a coefficient ``A[i, k]`` and ``a_k(x) = sum_i A[i, k] K(x_i, x) - b_k``; a mistake
adds ``c_k`` to ``A[t, k]`` on the same range.  With the linear kernel it reproduces the
primal fit exactly.

Sparse rows use the padded-row (ELL) layout :class:`bayesord._sparse.PaddedRows`, built on
the host from CSR by :func:`bayesord._sparse.to_padded_rows`: ``indices`` and ``values`` of
shape (n, m) with m the largest number of non-zeros in a row (padding entries point at
column 0 with value 0).  Memory is ``n * m * (4 + itemsize)`` bytes; a single dense row
makes m = d, so check :func:`bayesord._sparse.padding_ratio` on skewed data.

Functions:
    fit_perceptron, fit_kernel_perceptron: jitted online training (epochs as a
        ``lax.while_loop``, one epoch as a ``lax.scan`` over a key-shuffled order).
    decision_function, kernel_decision_function: the r cumulative scores s(x, k).
    predict_perceptron: labels and scores of new rows from either fit's result.
    predict, predict_counting: the CuSum argmax (Eq. 8) and the counting rule (Eq. 2).
"""

from __future__ import annotations

import dataclasses
import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._basis import kernel_matrix as basis_kernel
from ._loops import jit_serial_cpu
from ._precision import jit
from ._results import Prediction, check_settings, checks_codes, result_type
from ._sparse import PaddedRows, row_axpy, row_dot, row_dots, row_sq_norms
from ._status import final_status
from ._validation import check_lengths, floating_dtype

__all__ = [
    "PerceptronConfig",
    "PerceptronHyper",
    "PerceptronState",
    "PerceptronResult",
    "KernelPerceptronState",
    "KernelPerceptronResult",
    "make_hyper",
    "init_state",
    "fit_perceptron",
    "fit_perceptron_weights",
    "fit_kernel_perceptron",
    "decision_function",
    "kernel_decision_function",
    "predict_perceptron",
    "predict",
    "predict_counting",
    "kernel_matrix",
]

# Unrolling the per-row scan lets XLA fuse consecutive steps: about 5x more rows per
# second on CPU for d = 50, r = 10 (measured with 1, 8 and 16; 8 was best), at about
# 2.5x the compile time.  Small inputs (the row count is static) keep the cheap compile;
# the kernel model's steps are dominated by the kernel row and are not unrolled.
_UNROLL = 8
_UNROLL_MIN_ROWS = 4096

_MODELS = ("cusum", "prank")
_ALGORITHMS = ("perceptron", "pa")
_KERNELS = ("linear", "rbf", "poly")


@dataclasses.dataclass(frozen=True)
class PerceptronConfig:
    """Static settings (shapes and variants); hashable so it can be a jit static argument.

    Attributes:
        n_classes: number of ranks r (at least 2).
        model: "cusum" (one direction per rank) or "prank" (shared direction, Section 6).
        algorithm: "perceptron" (Fig. 1) or "pa" (passive-aggressive, Fig. 2).
        averaged: return Collins-averaged weights instead of the last ones.
        fit_intercept: learn thresholds b (the constant attribute x_d = -1); when False
            b stays 0 and x is used as given.
        n_epochs: maximum number of passes over the data.
        shuffle: visit the rows in a fresh key-driven random order each epoch.
        stop_if_separated: stop after an epoch without any update; reaching
            ``n_epochs`` without one is then reported as MAX_ITER.
        kernel: "linear", "rbf" or "poly"; used by :func:`fit_kernel_perceptron` only.
    """

    n_classes: int
    model: str = "cusum"
    algorithm: str = "perceptron"
    averaged: bool = False
    fit_intercept: bool = True
    n_epochs: int = 10
    shuffle: bool = True
    stop_if_separated: bool = False
    kernel: str = "linear"

    def __post_init__(self):
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be at least 2, got {self.n_classes}")
        if self.model not in _MODELS:
            raise ValueError(f"model must be one of {_MODELS}, got {self.model!r}")
        if self.algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm must be one of {_ALGORITHMS}, got {self.algorithm!r}")
        if self.kernel not in _KERNELS:
            raise ValueError(f"kernel must be one of {_KERNELS}, got {self.kernel!r}")
        if self.n_epochs < 1:
            raise ValueError(f"n_epochs must be at least 1, got {self.n_epochs}")


class PerceptronHyper(NamedTuple):
    """Numeric hyperparameters, traced so a grid of them can be ``vmap``-ed."""

    delta: jax.Array
    """Passive-aggressive target margin delta > 0 (Fig. 2); unused by the perceptron."""
    margin: jax.Array
    """Loss-augmentation scale (0 = plain argmax during training)."""
    gamma: jax.Array
    """Kernel scale: exp(-gamma ||x - x'||^2) for rbf, (gamma x.x' + coef0)^degree for poly."""
    coef0: jax.Array
    """Polynomial kernel offset."""
    degree: jax.Array
    """Polynomial kernel degree (a float, so it can be traced)."""


def make_hyper(dtype=None, *, delta=1.0, margin=0.0, gamma=1.0, coef0=1.0, degree=3.0):
    """Build :class:`PerceptronHyper` with every field an array of ``dtype``."""
    dtype = dtype or jnp.result_type(float)
    return PerceptronHyper(*(jnp.asarray(v, dtype) for v in (delta, margin, gamma, coef0, degree)))


class PerceptronState(NamedTuple):
    """Online state of a primal model; feed it back to continue training (partial_fit)."""

    coef: jax.Array
    """(r, d) per-rank directions U for CuSum, (1, d) shared direction u for PRank."""
    thresholds: jax.Array
    """(r,) thresholds b (b_1 stays 0; it plays the sentinel role of w_1 = 0)."""
    coef_acc: jax.Array
    """Sum over steps t of (t - 1) times the coef update at t (for averaging)."""
    thresholds_acc: jax.Array
    """Same accumulator for the thresholds."""
    n_steps: jax.Array
    """int32 number of online steps (rows visited) so far."""


@result_type
class PerceptronResult:
    """Outcome of :func:`fit_perceptron`."""

    config: PerceptronConfig
    """The static settings of the fit."""
    coef: jax.Array
    """(r, d) or (1, d) directions used for prediction (averaged when config.averaged)."""
    thresholds: jax.Array
    """(r,) thresholds used for prediction (averaged when config.averaged)."""
    state: PerceptronState
    """Final online state, to resume training."""
    mistakes: jax.Array
    """(n_epochs,) int32 online mistakes 1[y_hat != y] of the plain predictor per epoch (0 past n_iter)."""
    abs_error: jax.Array
    """(n_epochs,) cumulative |y - y_hat| of the plain online predictor per epoch."""
    updates: jax.Array
    """(n_epochs,) int32 number of rows that triggered an update per epoch."""
    n_iter: jax.Array
    """int32 number of epochs run."""
    converged: jax.Array
    """True when the last epoch made no update (the data are separated with the margin used)."""
    status: jax.Array
    """int32 :class:`~bayesord._status.Status` code."""


class KernelPerceptronState(NamedTuple):
    """Online state of the dual (kernel) model over a fixed training set."""

    dual_coef: jax.Array
    """(n, r) atom counts A[i, k] (real-valued for passive-aggressive steps)."""
    thresholds: jax.Array
    """(r,) thresholds b."""
    dual_coef_acc: jax.Array
    """Averaging accumulator for dual_coef."""
    thresholds_acc: jax.Array
    """Averaging accumulator for thresholds."""
    n_steps: jax.Array
    """int32 number of online steps so far."""


@result_type
class KernelPerceptronResult:
    """Outcome of :func:`fit_kernel_perceptron`."""

    config: PerceptronConfig
    """The static settings of the fit (``config.kernel`` is the kernel)."""
    support: jax.Array
    """(n, d) training rows the kernel expansion runs over."""
    hyper: PerceptronHyper
    """The kernel's ``gamma``, ``coef0`` and ``degree`` (and the training hyperparameters)."""
    dual_coef: jax.Array
    """(n, r) coefficients used for prediction (averaged when config.averaged)."""
    thresholds: jax.Array
    """(r,) thresholds used for prediction."""
    state: KernelPerceptronState
    """Final online state."""
    mistakes: jax.Array
    """(n_epochs,) int32 online mistakes of the plain predictor per epoch."""
    abs_error: jax.Array
    """(n_epochs,) cumulative |y - y_hat| per epoch."""
    updates: jax.Array
    """(n_epochs,) int32 rows that triggered an update per epoch."""
    n_iter: jax.Array
    """int32 number of epochs run."""
    converged: jax.Array
    """True when the last epoch made no update."""
    status: jax.Array
    """int32 status code."""


def init_state(config: PerceptronConfig, n_features: int, dtype=None) -> PerceptronState:
    """All-zero primal state (Fig. 1: w_k <- 0)."""
    dtype = dtype or jnp.result_type(float)
    q = config.n_classes if config.model == "cusum" else 1
    r = config.n_classes
    return PerceptronState(
        jnp.zeros((q, n_features), dtype), jnp.zeros((r,), dtype),
        jnp.zeros((q, n_features), dtype), jnp.zeros((r,), dtype), jnp.zeros((), jnp.int32),
    )


# ---------------------------------------------------------------------------------------
# The structured-perceptron step shared by the primal and the dual model.


def _last_argmax(s):
    """argmax with ties going to the largest index (matches PRank's max{y : u.z >= b_y})."""
    r = s.shape[-1]
    return r - 1 - jnp.argmax(s[..., ::-1], axis=-1)


def _step_coefficients(inc, y, weight, xnorm2, hyper, config):
    """One online step's bookkeeping from the per-rank increments a_k (Eq. 8, Fig. 1-2).

    Args:
        inc: (r,) increments a_k(x) (a_1 already 0).
        y: int code of the true rank.
        weight: the row's sample weight (scales the step; 0 skips the row).
        xnorm2: ||z||^2 of the raw row.

    Returns:
        (c, y_plain, updated): (r,) update coefficients c_k, the plain prediction, and
        whether this row triggered an update.
    """
    r = config.n_classes
    ks = jnp.arange(r)
    s = jnp.cumsum(inc)
    y_plain = _last_argmax(s)
    s_aug = s + hyper.margin * jnp.abs(ks - y).astype(s.dtype)
    y_hat = _last_argmax(s_aug)
    diff = (y - y_hat).astype(s.dtype)
    dist = jnp.abs(diff)
    sgn = jnp.sign(diff)
    lo, hi = jnp.minimum(y, y_hat), jnp.maximum(y, y_hat)
    in_range = (ks > lo) & (ks <= hi)
    mistake = (y_hat != y) & (weight > 0)
    if config.algorithm == "perceptron":
        tau = jnp.ones((), s.dtype)
        ok = mistake
    else:
        icpt = 1.0 if config.fit_intercept else 0.0
        if config.model == "cusum":
            dphi2 = dist * (xnorm2 + icpt)
        else:
            dphi2 = diff * diff * xnorm2 + dist * icpt
        gap = s[y_hat] - s[y]
        ok = mistake & (dphi2 > 0)
        # Double where: a zero row (||dPhi|| = 0) is skipped without forming 0/0.
        tau = jnp.where(ok, jnp.maximum(gap + hyper.delta, 0.0) / jnp.where(ok, dphi2, 1.0), 0.0)
        ok = ok & (tau > 0)
    c = jnp.where(in_range & ok, sgn * tau * weight, 0.0).astype(s.dtype)
    return c, y_plain, ok


def _online_step(st, inc, y, weight, xnorm2, hyper, config, add):
    """One online step of either model once its increments a_k(x) are known (Fig. 1-2, 5).

    Args:
        st: :class:`PerceptronState` or :class:`KernelPerceptronState` (the same field
            order: weights, thresholds, their averaging accumulators, n_steps).
        inc, y, weight, xnorm2: as for :func:`_step_coefficients`.
        add: ``add(W, dW)`` applies a weight update of shape (q,): a scatter of the row into
            its columns for the primal model, one row of atom counts for the dual model.

    Returns:
        (new state, (mistake, |y - y_plain|, updated)): the per-row epoch statistics.
    """
    weights, thresholds, weights_acc, thresholds_acc, n_steps = st
    dtype = weights.dtype
    c, y_plain, ok = _step_coefficients(inc, y, weight, xnorm2, hyper, config)
    dW = c if config.model == "cusum" else jnp.sum(c, keepdims=True)
    db = -c if config.fit_intercept else jnp.zeros_like(c)
    t_prev = n_steps.astype(dtype)
    if config.averaged:
        weights_acc = add(weights_acc, t_prev * dW)
        thresholds_acc = thresholds_acc + t_prev * db
    # A row of weight 0 is skipped altogether: no update, no step of the average, no count,
    # so a fit with rows at weight 0 is the fit without them (in the same order).
    live = weight > 0
    new = type(st)(add(weights, dW), thresholds + db, weights_acc, thresholds_acc,
                   n_steps + live.astype(n_steps.dtype))
    miss = ((y_plain != y) & live).astype(jnp.int32)
    return new, (miss, jnp.where(live, jnp.abs(y - y_plain), 0).astype(dtype), ok.astype(jnp.int32))


class _Epochs(NamedTuple):
    """Carry of the epoch loop: the online state and the per-epoch counts so far."""

    state: object  # PerceptronState or KernelPerceptronState
    epoch: jax.Array
    mistakes: jax.Array  # (n_epochs,)
    abs_error: jax.Array  # (n_epochs,)
    updates: jax.Array  # (n_epochs,)


def _train(sample_step, state, key, n, config, unroll=1):
    """Epochs as a while loop over key-shuffled scans, then averaging and the status.

    Args:
        sample_step: ``(state, i) -> (state, (mistake, abs_error, updated))`` for row i.
        state: initial :class:`PerceptronState` or :class:`KernelPerceptronState`.
        key: PRNG key of the epoch shuffles.
        n: number of rows.
        unroll: rows per iteration of the per-epoch scan.

    Returns:
        (weights, thresholds, state, mistakes, abs_error, updates, n_iter, converged,
        status): the fields of both result types after their first one.
    """
    E = config.n_epochs
    dtype = state[0].dtype

    def run_epoch(st, epoch):
        order = jax.random.permutation(jax.random.fold_in(key, epoch), n) if config.shuffle else jnp.arange(n)
        st, (m, e, u) = jax.lax.scan(sample_step, st, order, unroll=unroll)
        return st, (jnp.sum(m).astype(jnp.int32), jnp.sum(e), jnp.sum(u).astype(jnp.int32))

    def cond(c):
        go = c.epoch < E
        if config.stop_if_separated:
            go = go & ((c.epoch == 0) | (c.updates[jnp.maximum(c.epoch - 1, 0)] > 0))
        return go

    def body(c):
        st, (m, e, u) = run_epoch(c.state, c.epoch)
        return _Epochs(st, c.epoch + 1, c.mistakes.at[c.epoch].set(m), c.abs_error.at[c.epoch].set(e),
                       c.updates.at[c.epoch].set(u))

    carry0 = _Epochs(state, jnp.zeros((), jnp.int32), jnp.zeros((E,), jnp.int32),
                     jnp.zeros((E,), dtype), jnp.zeros((E,), jnp.int32))
    state, epoch, mis, err, upd = jax.lax.while_loop(cond, body, carry0)
    weights, thresholds, weights_acc, thresholds_acc, n_steps = state
    if config.averaged:  # Collins averaging: avg = W - sum_t (t-1) dW_t / T
        t = jnp.maximum(n_steps, 1).astype(dtype)
        weights = weights - weights_acc / t
        thresholds = thresholds - thresholds_acc / t
    converged = upd[jnp.maximum(epoch - 1, 0)] == 0
    finite = jnp.all(jnp.isfinite(weights)) & jnp.all(jnp.isfinite(thresholds))
    # Without stop_if_separated the epochs are the budget, not a cap: reaching them is success.
    status = final_status(converged if config.stop_if_separated else True, finite=finite)
    return weights, thresholds, state, mis, err, upd, epoch, converged, status


def _fit_primal_impl(X, y, sample_weight, key, hyper, state, config):
    n = X.shape[0]
    sq = row_sq_norms(X)

    def sample_step(st, i):
        inc = (row_dot(X, i, st.coef) - st.thresholds).at[0].set(0.0)
        return _online_step(st, inc, y[i], sample_weight[i], sq[i], hyper, config,
                            lambda W, dW: row_axpy(X, i, W, dW))

    unroll = _UNROLL if n >= _UNROLL_MIN_ROWS else 1
    return PerceptronResult(config, *_train(sample_step, state, key, n, config, unroll))


_fit_primal = jit_serial_cpu(_fit_primal_impl, static_argnames=("config",))


def _fit_primal_weights_impl(X, y, sample_weights, key, hyper, state, config):
    return jax.vmap(lambda w: _fit_primal_impl(X, y, w, key, hyper, state, config))(sample_weights)


_fit_primal_weights = jit_serial_cpu(_fit_primal_weights_impl, static_argnames=("config",))


@checks_codes("y")
def fit_perceptron(X, y, config: PerceptronConfig, *, sample_weight=None, key=None,
                   hyper: PerceptronHyper | None = None,
                   state: PerceptronState | None = None) -> PerceptronResult:
    """Train CuSum Rank or PRank online (Fig. 1 / Fig. 2 / Eq. 13-14), jitted.

    Args:
        X: (n, d) dense rows, or :class:`~bayesord._sparse.PaddedRows` of sparse rows.
        y: (n,) int rank codes 0..r-1.
        config: static :class:`PerceptronConfig`.
        sample_weight: (n,) non-negative step scales (None = ones; 0 skips a row).  A
            weight scales that row's update; it is not the same as repeating the row.
        key: PRNG key for the epoch shuffles (required when ``config.shuffle``).
        hyper: :class:`PerceptronHyper` (default :func:`make_hyper` of X's dtype).
        state: a previous :class:`PerceptronState` to continue from (default zeros).

    Returns:
        :class:`PerceptronResult`.

    Raises:
        ValueError: ``config.kernel`` other than "linear", a ``state`` whose feature count
            is not X's, ``config.shuffle`` without a key.

    Example:
        >>> import jax.numpy as jnp
        >>> X = jnp.array([[0., 0.], [0., 1.], [1., 1.], [1., 0.]])
        >>> cfg = PerceptronConfig(n_classes=3, n_epochs=50, shuffle=False, stop_if_separated=True)
        >>> res = fit_perceptron(X, jnp.array([0, 1, 1, 2]), cfg)
        >>> bool(res.converged), predict(decision_function(res, X)).tolist()
        (True, [0, 1, 1, 2])
    """
    X, key, hyper, state = _primal_inputs(X, config, key, hyper, state)
    sw = jnp.ones((X.shape[0],), X.dtype) if sample_weight is None else jnp.asarray(sample_weight, X.dtype)
    check_lengths(X.shape[0], y=y, sample_weight=sw)
    return _fit_primal(X, jnp.asarray(y, jnp.int32), sw, key, hyper, state, config)


@checks_codes("y")
def fit_perceptron_weights(X, y, config: PerceptronConfig, sample_weights, *, key=None,
                           hyper: PerceptronHyper | None = None,
                           state: PerceptronState | None = None) -> PerceptronResult:
    """:func:`fit_perceptron` once per row of ``sample_weights``, in one compiled program.

    The fits of cross-fitting: row j of ``sample_weights`` is 0 on the rows fit j leaves
    out, and a row of weight 0 is skipped altogether (no update, no step of the average),
    so fit j is the fit without those rows, the others visited in the order in which a fit
    of all n rows visits them (the epochs' shuffles are drawn over n).  The fits run side
    by side (``vmap``): the online steps of a small problem cost little more for m fits
    than for one (on 1,000 x 11 rows, five fits took 10 ms against 44 ms one by one).

    Args:
        X: (n, d) dense rows or :class:`~bayesord._sparse.PaddedRows`, as for
            :func:`fit_perceptron`.
        y: (n,) int rank codes 0..r-1.
        config: static :class:`PerceptronConfig`.
        sample_weights: (m, n) non-negative weights, one row per fit.
        key: PRNG key for the epoch shuffles, shared by the fits.
        hyper: :class:`PerceptronHyper` (default :func:`make_hyper` of X's dtype).
        state: the :class:`PerceptronState` every fit starts from (default zeros).

    Returns:
        :class:`PerceptronResult` whose arrays have a leading axis of length m.
    """
    X, key, hyper, state = _primal_inputs(X, config, key, hyper, state)
    sw = jnp.asarray(sample_weights, X.dtype)
    if sw.ndim != 2 or sw.shape[1] != X.shape[0]:
        raise ValueError(f"sample_weights must be (m, {X.shape[0]}), one row of weights per fit; got "
                         f"shape {sw.shape}")
    check_lengths(X.shape[0], y=y)
    return _fit_primal_weights(X, jnp.asarray(y, jnp.int32), sw, key, hyper, state, config)


def _primal_inputs(X, config, key, hyper, state):
    """The inputs of a primal fit as arrays of X's floating dtype, defaults filled in."""
    if config.kernel != "linear":
        raise ValueError(f"fit_perceptron is the primal (linear) model; use fit_kernel_perceptron "
                         f"for kernel={config.kernel!r}")
    dtype = floating_dtype(X.dtype)
    if isinstance(X, PaddedRows):
        X = X._replace(indices=jnp.asarray(X.indices, jnp.int32), values=jnp.asarray(X.values, dtype),
                       sq_norms=jnp.asarray(X.sq_norms, dtype))
    else:
        X = jnp.asarray(X, dtype)
    n, n_features = X.shape
    if state is None:
        state = init_state(config, n_features, dtype)
    elif state.coef.shape[1] != n_features:
        raise ValueError(f"state has {state.coef.shape[1]} features but X has {n_features}")
    if config.shuffle and key is None:
        raise ValueError("config.shuffle=True needs a PRNG key")
    key = jax.random.PRNGKey(0) if key is None else key
    hyper = make_hyper(dtype) if hyper is None else PerceptronHyper(*(jnp.asarray(h, dtype) for h in hyper))
    return X, key, hyper, state


# ---------------------------------------------------------------------------------------
# Kernel (dual) version, Section 7 / Fig. 5.


def kernel_matrix(A, B, hyper: PerceptronHyper, kernel: str):
    """K(A_i, B_j) for dense row blocks A (p, d) and B (q, d) -> (p, q)
    (:func:`bayesord._basis.kernel_matrix` with the traced ``hyper``)."""
    return basis_kernel(A, B, hyper.gamma, kernel, hyper.degree, hyper.coef0)


@partial(jit, static_argnames="config")
def _fit_dual(X, y, sample_weight, key, hyper, state, config):
    n = X.shape[0]

    def sample_step(st, i):
        x = X[i]
        krow = kernel_matrix(X, x[None, :], hyper, config.kernel)[:, 0]
        kxx = kernel_matrix(x[None, :], x[None, :], hyper, config.kernel)[0, 0]
        if config.model == "cusum":
            lin = krow @ st.dual_coef
        else:
            lin = jnp.broadcast_to(krow @ st.dual_coef, (config.n_classes,))
        inc = (lin - st.thresholds).at[0].set(0.0)
        return _online_step(st, inc, y[i], sample_weight[i], kxx, hyper, config,
                            lambda A, dA: A.at[i].add(dA))

    return KernelPerceptronResult(config, X, hyper, *_train(sample_step, state, key, n, config))


@checks_codes("y")
def fit_kernel_perceptron(X, y, config: PerceptronConfig, *, sample_weight=None, key=None,
                          hyper: PerceptronHyper | None = None) -> KernelPerceptronResult:
    """Train the dual (kernel) structured perceptron with atom counting (Fig. 5), jitted.

    Each step evaluates one kernel row K(X, x_t) (O(n d) time, O(n) memory), so no n x n
    Gram matrix is formed.  Coefficients take O(n r) memory.

    Args:
        X: (n, d) dense training rows.
        y: (n,) int rank codes 0..r-1.
        config: :class:`PerceptronConfig` (``config.kernel`` picks the kernel).
        sample_weight: row weights, as in :func:`fit_perceptron`.
        key: PRNG key for the epoch shuffles.
        hyper: traced hyperparameters from :func:`make_hyper`.

    Returns:
        :class:`KernelPerceptronResult`.
    """
    X = jnp.asarray(X)
    X = X.astype(floating_dtype(X.dtype))
    dtype = X.dtype
    n = X.shape[0]
    q = config.n_classes if config.model == "cusum" else 1
    r = config.n_classes
    state = KernelPerceptronState(jnp.zeros((n, q), dtype), jnp.zeros((r,), dtype),
                                  jnp.zeros((n, q), dtype), jnp.zeros((r,), dtype),
                                  jnp.zeros((), jnp.int32))
    if config.shuffle and key is None:
        raise ValueError("config.shuffle=True needs a PRNG key")
    key = jax.random.PRNGKey(0) if key is None else key
    sw = jnp.ones((n,), dtype) if sample_weight is None else jnp.asarray(sample_weight, dtype)
    check_lengths(n, y=y, sample_weight=sw)
    hyper = make_hyper(dtype) if hyper is None else PerceptronHyper(*(jnp.asarray(h, dtype) for h in hyper))
    return _fit_dual(X, jnp.asarray(y, jnp.int32), sw, key, hyper, state, config)


# ---------------------------------------------------------------------------------------
# Prediction.


def _increments_primal(coef, thresholds, X):
    inc = row_dots(X, coef) - thresholds[None, :]
    return inc.at[:, 0].set(0.0)


@jit
def _primal_scores(coef, thresholds, X):
    return jnp.cumsum(_increments_primal(coef, thresholds, X), axis=1)


def decision_function(result: PerceptronResult, X):
    """The r cumulative scores s(x, k) = sum_{j<=k} w_j . x_aug (Eq. 10), shape (n, r).

    The first column is 0 (the sentinel w_1 = 0).  ``X`` is dense or
    :class:`~bayesord._sparse.PaddedRows`.
    """
    return _primal_scores(result.coef, result.thresholds, X)


@partial(jit, static_argnames=("batch_size",))
def _dual_scores(result, X, batch_size):
    def one(x):
        return kernel_matrix(x[None, :], result.support, result.hyper, result.config.kernel)[0] @ result.dual_coef

    lin = jax.lax.map(one, X, batch_size=batch_size)
    inc = lin - result.thresholds[None, :]
    return jnp.cumsum(inc.at[:, 0].set(0.0), axis=1)


def kernel_decision_function(result: KernelPerceptronResult, X, hyper: PerceptronHyper | None = None,
                             kernel: str | None = None, batch_size: int = 256):
    """Cumulative scores of the kernel model, evaluated in row blocks of ``batch_size``.

    The kernel and its parameters are read from ``result``; passing ``hyper`` or ``kernel``
    again is deprecated (a different value is a ``ValueError``).  Memory is
    O(batch_size * n_support) for the kernel block, never n_test x n_support.
    """
    check_settings(result.config, kernel=kernel)
    if hyper is not None:
        fitted = [np.asarray(h) for h in result.hyper]
        if not all(np.array_equal(np.asarray(h, f.dtype), f) for h, f in zip(hyper, fitted)):
            raise ValueError("hyper was passed, but differs from the result's; the prediction reads it "
                             "from the result, so leave it out")
        warnings.warn("passing hyper= is no longer needed: the prediction reads it from the result",
                      DeprecationWarning, stacklevel=2)
    X = jnp.asarray(X, result.support.dtype)
    return _dual_scores(result, X, batch_size)


def predict_perceptron(result: PerceptronResult | KernelPerceptronResult, X) -> Prediction:
    """Ranks of new rows by the CuSum argmax (Eq. 8) of either perceptron fit.

    Args:
        result: :class:`PerceptronResult` (X dense or :class:`~bayesord._sparse.PaddedRows`)
            or :class:`KernelPerceptronResult` (X dense; scored in blocks of 256 rows).
        X: (n, d) new rows.

    Returns:
        :class:`~bayesord._results.Prediction`: ``labels`` (n,) codes 0..r-1 and ``scores``
        the cumulative scores s(x, k), shape (n, r).
    """
    if isinstance(result, KernelPerceptronResult):
        scores = kernel_decision_function(result, X)
    else:
        if not isinstance(X, PaddedRows):
            X = jnp.asarray(X, result.coef.dtype)
        if X.shape[1] != result.coef.shape[1]:
            raise ValueError(f"X has {X.shape[1]} columns but the fit has {result.coef.shape[1]}")
        scores = decision_function(result, X)
    return Prediction(predict(scores).astype(jnp.int32), scores)


def predict(scores):
    """CuSum Rank prediction (Eq. 8) from cumulative scores (n, r): codes 0..r-1.

    Ties go to the largest rank, which makes PRank's rule max{y : u.z >= b_y} (Eq. 11)
    a special case.
    """
    return _last_argmax(jnp.asarray(scores))


def predict_counting(scores):
    """The counting predictor (Eq. 2) from cumulative scores: 1 + #{k >= 2 : w_k . x >= 0}.

    Returns codes 0..r-1 (the count minus one).  With PRank's ordered thresholds it equals
    :func:`predict`; with independent CuSum directions it can differ.
    """
    scores = jnp.asarray(scores)
    inc = jnp.diff(scores, axis=1)
    return jnp.sum(inc >= 0, axis=1).astype(jnp.int32)
