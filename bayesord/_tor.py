"""Transductive ordinal regression (TOR) by label swapping over RED-SVM.

Source: Seah, Tsang & Ong, "Transductive Ordinal Regression", Section III (Algorithms 1
and 2, Eqs. 4-5, Proposition 2), Section IV (Eq. 10) and Section V-C (Algorithm 3).

TOR minimises Eq. (4)/(10) over the model ``(w, theta, b)`` *and* the labels ``y*`` of the
unlabeled rows::

    1/2 |w|^2 + 1/2 |theta|^2 + C1 sum_{labeled} loss_{y_i}(x_i) + C2 sum_{unlabeled} loss_{y_j}(x_j)

with the ordinal loss of Eq. (6) (any loss of :data:`bayesord._redsvm.LOSSES`).

1. Pseudo-labels (Algorithm 2): fit RED-SVM on the labeled rows only, sort the unlabeled
   rows by ``w.x`` and hand out classes 1..K in the labeled class ratios (or in ratios the
   caller knows, ``class_ratios``, as the positive fraction ``-p`` of Joachims' TSVM).
2. Annealing (Algorithm 1): ``C2`` starts at ``c2_init`` (1e-5) and is multiplied by
   ``c2_growth`` (2) while it is below ``C1``.  In each stage: retrain (warm start), then for
   each adjacent pair ``k, k+1`` swap the labels of the unlabeled pair ``i, j`` with
   ``y_i = k, y_j = k+1, f(x_i) > y_i, f(x_j) < y_j`` (Eq. 5) whose swap decreases the loss
   most; repeat until no pair qualifies.

Only the k-th binary task differs between labels k and k+1, so the decrease of a swap is
``c_i [loss(-g_k(x_i)) - loss(g_k(x_i))] + c_j [loss(g_k(x_j)) - loss(-g_k(x_j))]``: the two
rows can be chosen independently (each term is positive under Definition 3), which makes the
search O(u) per adjacent pair.

Monotone trace (Proposition 2).  With the model fixed a swap strictly lowers the objective;
retraining can only lower it further when solved exactly.  The inner solver stops at a
finite duality gap, so after a retrain the new model is kept only if its objective is not
above the post-swap objective of the previous model (otherwise the previous model is kept
and counted in ``n_rejected``); the recorded objective is therefore strictly decreasing
within each annealing stage.
"""

from __future__ import annotations

import dataclasses
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._redsvm import (
    RedSVMConfig,
    SharedNames,
    extended_labels,
    fit_redsvm,
    margin_loss,
    objective,
    predict_codes,
    threshold_prediction,
)
from ._results import Prediction, checks_codes, result_type
from ._loops import jit_serial_cpu
from ._progress import emit
from ._sparse import PaddedRows, row_dots
from ._status import Status, final_status

__all__ = ["TORConfig", "TORResult", "done_line", "fit_tor", "predict_tor", "init_pseudo_labels"]


@dataclasses.dataclass(frozen=True)
class TORConfig:
    """Static settings of :func:`fit_tor`.

    Attributes:
        n_classes: number of ordinal classes K.
        loss: RED-SVM loss (see :data:`bayesord._redsvm.LOSSES`).
        fit_intercept: include the unregularised intercept of Eq. (9)/(10).
        max_epochs: coordinate-descent epoch cap per inner solve.
        max_bias_iter: cap on intercept search steps per retrain.
        max_retrains: capacity of the objective trace; the run stops (status
            ``CAPACITY_REACHED``) when this many retrainings have been done.
        max_stages: cap on annealing stages (64 covers any ratio C1/c2_init below 2**64).
        swap_rule: "eq5" (the paper's Eq. 5) or "descent" (any pair whose swap lowers
            the loss; see :func:`_swap_round`).
        progress: report each retraining (stage, C2, swaps, objective) on stderr through
            a host callback (:mod:`bayesord._progress`).  Off by default: the compiled
            program then holds no callback.  Results are identical either way.
    """

    n_classes: int
    loss: str = "hinge"
    fit_intercept: bool = True
    max_epochs: int = 1000
    max_bias_iter: int = 60
    max_retrains: int = 2000
    max_stages: int = 64
    swap_rule: str = "eq5"
    progress: bool = False

    def __post_init__(self):
        if self.swap_rule not in ("eq5", "descent"):
            raise ValueError(f"swap_rule must be 'eq5' or 'descent', got {self.swap_rule!r}")

    @property
    def redsvm(self) -> RedSVMConfig:
        return RedSVMConfig(self.n_classes, self.loss, self.fit_intercept, self.max_epochs,
                            self.max_bias_iter)


@result_type
class TORResult(SharedNames):
    """Outcome of Algorithm 1."""

    config: TORConfig
    """The static settings of the fit."""
    labels: jax.Array
    """(n,) codes 0..K-1: the given labels for labeled rows, the transduced ones for the rest."""
    init_labels: jax.Array
    """(n,) codes after the pseudo-label initialisation of Algorithm 2."""
    w: jax.Array
    """(d,) weights of the final inductive model."""
    theta: jax.Array
    """(K-1,) thresholds of the final model."""
    b: jax.Array
    """Intercept of the final model (effective thresholds ``theta + b``)."""
    init_w: jax.Array
    """(d,) weights of the labeled-only RED-SVM of Algorithm 2."""
    init_theta: jax.Array
    """(K-1,) thresholds of the labeled-only RED-SVM."""
    init_b: jax.Array
    """Intercept of the labeled-only RED-SVM."""
    objective_trace: jax.Array
    """(max_retrains,) Eq. (10) at the kept model after each retraining (NaN past the end)."""
    swapped_trace: jax.Array
    """(max_retrains,) Eq. (10) just after that retraining's swaps, model fixed (NaN if none)."""
    trace_stage: jax.Array
    """(max_retrains,) annealing stage of each entry (-1 past the end)."""
    trace_c2: jax.Array
    """(max_retrains,) the C2 of each entry."""
    trace_swaps: jax.Array
    """(max_retrains,) number of pairs swapped after each retraining."""
    n_retrains: jax.Array
    """Number of retrainings (entries used in the traces)."""
    n_stages: jax.Array
    """Number of annealing stages run."""
    n_swaps: jax.Array
    """Total number of swapped pairs."""
    n_rejected: jax.Array
    """Retrainings whose inexact solution was not better than the post-swap model."""
    n_iter: jax.Array
    """Total coordinate-descent epochs over all solves."""
    converged: jax.Array
    """True when every stage ended with no admissible swap and every solve converged."""
    status: jax.Array
    """:class:`bayesord._status.Status` code."""


def init_pseudo_labels(h, unlabeled, codes, n_classes: int, ratio=None):
    """Algorithm 2 lines 4 and 6-11: class-ratio labels for the unlabeled rows sorted by ``h``.

    Args:
        h: (n,) scores ``w.x`` of the labeled-only model.
        unlabeled: (n,) bool mask.
        codes: (n,) codes of the labeled rows (ignored where ``unlabeled``).
        n_classes: K.
        ratio: (K,) class proportions to hand out, summing to 1.  None (the paper): the
            proportions of the labeled rows.

    Returns:
        (n,) codes: unchanged on labeled rows, assigned on unlabeled rows; the first
        ``round(ratio_1 u)`` unlabeled rows in ascending ``h`` get class 0, and so on.
    """
    if ratio is None:
        lab = ~unlabeled
        counts = jnp.sum((codes[:, None] == jnp.arange(n_classes)[None, :]) & lab[:, None], axis=0)
        ratio = counts / jnp.maximum(jnp.sum(counts), 1)
    u = jnp.sum(unlabeled)
    # rank of each unlabeled row among the unlabeled rows, ascending in h
    key = jnp.where(unlabeled, h, jnp.inf)
    order = jnp.argsort(key, stable=True)
    rank = jnp.zeros_like(codes).at[order].set(jnp.arange(codes.shape[0], dtype=codes.dtype))
    bounds = jnp.round(jnp.cumsum(ratio)[:-1] * u).astype(codes.dtype)
    assigned = jnp.sum(rank[:, None] >= bounds[None, :], axis=1).astype(codes.dtype)
    return jnp.where(unlabeled, assigned, codes)


def _swap_round(h, theta, b, labels, unlabeled, c, loss, n_classes, rule="eq5"):
    """One pass of Algorithm 1 lines 9-15 with the model fixed; returns (labels, n_swapped).

    ``rule="eq5"`` admits the pairs of Eq. (5) (both rows predicted on the far side of
    their label).  ``rule="descent"`` admits any pair whose swap strictly lowers the loss
    (Joachims' condition for TSVM, of which Eq. 5 is a special case): the best ``i`` and
    ``j`` are still chosen independently, and swapped when the total gain is positive.
    """
    f = predict_codes(h, theta, b)
    n_sw = jnp.zeros((), jnp.int32)
    neg_inf = jnp.asarray(-jnp.inf, h.dtype)
    for k in range(n_classes - 1):
        g = h - theta[k] - b
        gain_up = c * (margin_loss(-g, loss) - margin_loss(g, loss))  # label k -> k+1
        # Eq. (5); the gain test only matters for unordered thresholds or zero weights,
        # where f(x) > k no longer implies g_k(x) > 0.
        if rule == "eq5":
            cand_i = unlabeled & (labels == k) & (f > k) & (gain_up > 0)
            cand_j = unlabeled & (labels == k + 1) & (f < k + 1) & (gain_up < 0)
        else:
            cand_i = unlabeled & (labels == k)
            cand_j = unlabeled & (labels == k + 1)
        i = jnp.argmax(jnp.where(cand_i, gain_up, neg_inf))
        j = jnp.argmax(jnp.where(cand_j, -gain_up, neg_inf))
        ok = jnp.any(cand_i) & jnp.any(cand_j) & (gain_up[i] - gain_up[j] > 0)
        labels = jnp.where(ok, labels.at[i].set(k + 1).at[j].set(k), labels)
        n_sw = n_sw + ok.astype(jnp.int32)
    return labels, n_sw


def _progress_line(v):
    """``TOR stage 3/17  C2 4e-05  retrainings 57  swaps 120  objective 12.34``."""
    stage = int(v["stage"].max())
    total = int(v["n_stages"].max())
    if not v["started"].all():
        return "TOR initial RED-SVM on the labeled rows (Algorithm 2)"
    obj = f"{float(v['objective'].max()):.6g}" if np.isfinite(v["objective"]).any() else "-"
    counts = f"retrainings {v['n_ret'].max()}  swaps {v['n_swaps'].max()}  objective {obj}"
    if "converged" in v:
        return (f"TOR done: {stage} stages  {counts}  "
                f"({'converged' if v['converged'].all() else 'not converged'})")
    return f"TOR stage {min(stage + 1, total)}/{total}  C2 {float(v['c2'].max()):.3g}  {counts}"


def done_line(res) -> str:
    """The final progress line of a transductive fit, written on the host from its
    :class:`TORResult`: ``TOR done: 17 stages  retrainings 40  swaps 98  objective 133.4
    (converged)``."""
    n_ret = int(res.n_retrains)
    objective = np.asarray(res.objective_trace)[n_ret - 1] if n_ret else np.nan
    values = {"stage": res.n_stages, "n_stages": res.n_stages, "started": True, "n_ret": n_ret,
              "n_swaps": res.n_swaps, "objective": objective, "converged": res.converged}
    return _progress_line({k: np.atleast_1d(np.asarray(v)) for k, v in values.items()})


def _fit_tor_impl(X, codes, unlabeled, weight, C1, c2_init, c2_growth, tol, key, ratio, config):
    dtype = weight.dtype
    cfg = config.redsvm
    loss = config.loss
    K = config.n_classes
    lab_c = jnp.where(unlabeled, 0.0, C1 * weight)
    center = cfg.fit_intercept and not isinstance(X, PaddedRows)
    if center:
        # Run on centred columns, as fit_redsvm does (the model is the same: each intercept
        # takes back w.mu at the end).  On the columns as given, every retraining's warm
        # start b carries w.mu, which moves with w after each swap round, so the intercept
        # search started far from its root: on 500 + 1,910 raw rows of statsmodels' `fair`
        # data (columns up to 6.5 sds from zero) 1.8x the epochs in float64, 18x in float32.
        mu = jnp.mean(X, axis=0)
        X = X - mu

    cap = config.max_retrains
    nan = jnp.full((cap,), jnp.nan, dtype)
    d = X.shape[1]
    zeros_t = jnp.zeros((K - 1,), dtype)
    # The first pass of the loop is Algorithm 2 (labeled rows only, then pseudo-labels);
    # every later pass is one retraining of Algorithm 1 followed by one swap round.
    init = dict(
        started=jnp.zeros((), bool), labels=codes, init_labels=codes,
        alpha=jnp.zeros((codes.shape[0], K - 1), dtype), w=jnp.zeros((d,), dtype),
        theta=zeros_t, b=jnp.zeros((), dtype),
        init_w=jnp.zeros((d,), dtype), init_theta=zeros_t, init_b=jnp.zeros((), dtype),
        c2=jnp.asarray(c2_init, dtype), stage=jnp.zeros((), jnp.int32),
        n_ret=jnp.zeros((), jnp.int32), n_swaps=jnp.zeros((), jnp.int32),
        n_rej=jnp.zeros((), jnp.int32), n_iter=jnp.zeros((), jnp.int32), all_conv=jnp.ones((), bool),
        bad=jnp.zeros((), bool),
        obj_tr=nan, sw_tr=nan, st_tr=jnp.full((cap,), -1, jnp.int32), c2_tr=nan,
        nsw_tr=jnp.zeros((cap,), jnp.int32),
        stage_open=jnp.zeros((), bool), prev_swapped=jnp.asarray(jnp.inf, dtype),
    )

    def first_solve_failed(st):
        # Algorithm 2's solve on the labeled rows stopped at its cap: its pseudo-labels are
        # not a fit's, and every retraining from it would run to the cap as well (on raw
        # columns far apart in scale, minutes each), so the transduction is not started.
        return st["started"] & (st["n_ret"] == 0) & ~st["all_conv"]

    def cond(st):
        more_stages = (st["c2"] < C1) & (st["stage"] < config.max_stages)
        go_on = more_stages & (st["n_ret"] < cap) & ~first_solve_failed(st)
        return (~st["started"] | go_on) & ~st["bad"]

    def report(st, final=False, **extra):
        # stages of the schedule: C2 = c2_init * c2_growth**s for every s with C2 < C1
        n_stages = jnp.maximum(jnp.ceil(jnp.log(C1 / c2_init) / jnp.log(c2_growth)), 0).astype(jnp.int32)
        last = st["obj_tr"][jnp.maximum(st["n_ret"] - 1, 0)]
        emit(_progress_line, final=final, stage=st["stage"], n_stages=n_stages,
             started=st["started"], c2=st["c2"], n_ret=st["n_ret"], n_swaps=st["n_swaps"],
             objective=last, **extra)

    def body(st):
        started = st["started"]
        if config.progress:
            report(st)
        c = jnp.where(started, jnp.where(unlabeled, st["c2"] * weight, C1 * weight), lab_c)
        r = fit_redsvm(X, st["labels"], c, cfg, tol=tol, key=jax.random.fold_in(key, st["n_ret"]),
                       alpha0=st["alpha"], b0=st["b"])
        common = dict(n_iter=st["n_iter"] + r.n_iter, all_conv=st["all_conv"] & r.converged)

        def initialise():
            labels0 = init_pseudo_labels(row_dots(X, r.w), unlabeled, codes, K, ratio)
            return dict(st, started=jnp.ones((), bool), labels=labels0, init_labels=labels0,
                        alpha=r.alpha, w=r.w, theta=r.theta, b=r.b, init_w=r.w,
                        init_theta=r.theta, init_b=r.b, bad=~jnp.isfinite(r.objective), **common)

        def transduce():
            # keep the retrained model unless the inexact solve did not beat the post-swap point
            keep_new = ~st["stage_open"] | (r.objective <= st["prev_swapped"])
            w = jnp.where(keep_new, r.w, st["w"])
            theta = jnp.where(keep_new, r.theta, st["theta"])
            b = jnp.where(keep_new, r.b, st["b"])
            obj = jnp.where(keep_new, r.objective, st["prev_swapped"])
            labels, n_sw = _swap_round(row_dots(X, w), theta, b, st["labels"], unlabeled, c, loss, K,
                                       config.swap_rule)
            swapped_obj = jnp.where(n_sw > 0, objective(X, extended_labels(labels, K), c, w, theta, b, loss), jnp.nan)
            i = st["n_ret"]
            stage_done = n_sw == 0
            return dict(
                st, labels=labels, alpha=r.alpha, w=w, theta=theta, b=b,
                c2=jnp.where(stage_done, st["c2"] * c2_growth, st["c2"]),
                stage=st["stage"] + stage_done.astype(jnp.int32),
                n_ret=i + 1, n_swaps=st["n_swaps"] + n_sw,
                n_rej=st["n_rej"] + (~keep_new).astype(jnp.int32),
                bad=~jnp.isfinite(obj),
                obj_tr=st["obj_tr"].at[i].set(obj), sw_tr=st["sw_tr"].at[i].set(swapped_obj),
                st_tr=st["st_tr"].at[i].set(st["stage"]), c2_tr=st["c2_tr"].at[i].set(st["c2"]),
                nsw_tr=st["nsw_tr"].at[i].set(n_sw),
                stage_open=~stage_done,
                prev_swapped=jnp.where(stage_done, jnp.inf, swapped_obj), **common,
            )

        return lax.cond(started, transduce, initialise)

    st = lax.while_loop(cond, body, init)
    finished = ~(st["c2"] < C1)
    status = final_status(st["all_conv"], finite=~st["bad"],
                          failure=jnp.where(finished | first_solve_failed(st), Status.SUCCESS,
                                            Status.CAPACITY_REACHED))
    if config.progress:
        report(st, final=True, converged=finished & st["all_conv"] & ~st["bad"])
    b, init_b = st["b"], st["init_b"]
    if center:
        b, init_b = b + jnp.dot(st["w"], mu), init_b + jnp.dot(st["init_w"], mu)
    return TORResult(
        config=config, labels=st["labels"], init_labels=st["init_labels"], w=st["w"], theta=st["theta"], b=b,
        init_w=st["init_w"], init_theta=st["init_theta"], init_b=init_b,
        objective_trace=st["obj_tr"], swapped_trace=st["sw_tr"], trace_stage=st["st_tr"],
        trace_c2=st["c2_tr"], trace_swaps=st["nsw_tr"], n_retrains=st["n_ret"],
        n_stages=st["stage"], n_swaps=st["n_swaps"], n_rejected=st["n_rej"], n_iter=st["n_iter"],
        converged=finished & st["all_conv"] & ~st["bad"], status=status,
    )


_fit_tor_jit = jit_serial_cpu(_fit_tor_impl, static_argnames=("config",))


@checks_codes("codes", unlabeled="unlabeled")
def fit_tor(X, codes, unlabeled, config: TORConfig, *, C1=1.0, c2_init=1e-5, c2_growth=2.0,
            weight=None, tol=1e-6, key=None, class_ratios=None) -> TORResult:
    """Algorithm 1: transductive ordinal regression over RED-SVM.

    Args:
        X: (n, d) dense array or :class:`bayesord._sparse.PaddedRows`, labeled and unlabeled
            rows together.
        codes: (n,) int codes 0..K-1 of the labeled rows (entries at unlabeled rows ignored).
        unlabeled: (n,) bool mask of the unlabeled rows.
        config: static :class:`TORConfig`.
        C1: loss weight of the labeled rows.
        c2_init: first C2 of the annealing (Algorithm 1 line 5).
        c2_growth: factor applied to C2 after each stage (line 17; 2 in the paper).
        weight: (n,) per-row weights (default ones).
        tol: relative duality-gap tolerance of each inner solve.
        key: PRNG key for the coordinate orders.
        class_ratios: (K,) proportions of the classes among the unlabeled rows, summing to
            1, for the pseudo-labels of Algorithm 2 (which the swaps then keep).  None (the
            paper): the proportions of the labeled rows.

    Returns:
        :class:`TORResult`.  The caller validates the schedule (``0 < c2_init``,
        ``c2_growth > 1``) and the ratios; the estimator does this.  When the first solve,
        on the labeled rows (Algorithm 2), stops at its epoch cap, no retraining follows:
        the result is that solve's model and pseudo-labels, ``n_retrains`` 0 and status
        ``MAX_ITER``.
    """
    if not isinstance(X, PaddedRows):
        X = jnp.asarray(X)
    dtype = X.dtype
    codes = jnp.asarray(codes, jnp.int32)
    unlabeled = jnp.asarray(unlabeled, bool)
    weight = jnp.ones(codes.shape[0], dtype) if weight is None else jnp.asarray(weight, dtype)
    if key is None:
        key = jax.random.PRNGKey(0)
    return _fit_tor_jit(X, codes, unlabeled, weight, jnp.asarray(C1, dtype),
                        jnp.asarray(c2_init, dtype), jnp.asarray(c2_growth, dtype),
                        jnp.asarray(tol, dtype), key,
                        None if class_ratios is None else jnp.asarray(class_ratios, dtype), config)


def predict_tor(result: TORResult, X) -> Prediction:
    """Classes of new rows from the final inductive model of :func:`fit_tor` (Eq. 3).

    Args:
        result: :class:`TORResult`.
        X: rows in the fit's representation (dense, :class:`~bayesord._sparse.PaddedRows`
            or kernel features).

    Returns:
        :class:`~bayesord._results.Prediction`: ``labels`` (n,) codes 0..K-1 and ``scores``
        the latent ``h(x) = w.x``.  The transduced labels of the fit's own rows are
        ``result.labels``.
    """
    return threshold_prediction(result.w, result.theta, result.b, X)
