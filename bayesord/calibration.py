"""Is the uncertainty right?  Reliability, calibration error and interval coverage.

Every function takes predicted class probabilities ``proba`` (n, K) from any model
(ours, statsmodels, mord, ...), so models can be compared on the same footing.

* :func:`reliability`: binned reliability curves for the events ``y = k`` (per class) or
  ``y <= k`` (cumulative), with bin counts.
* :func:`calibration_error`: the expected calibration error (ECE) of those events, or of
  the top class (the usual ECE; equal to :func:`bayesord.metrics.ece`).
* :func:`latent_interval_coverage`: coverage of the central ``level`` predictive
  interval of the latent score, computed from the observed class alone.  With ``F`` the
  predictive CDF of the latent score, the observed class ``y = k`` says that the latent
  value lies in ``(b_k, b_{k+1}]``, an interval of predictive probability ``[F_lo, F_hi] =
  [P(y < k), P(y <= k)]`` on the probability scale.  The central interval is ``[l, u] =
  [(1 - level)/2, (1 + level)/2]`` on that scale, so the predictive probability that the
  latent value lies inside it, given the class, is
  ``|[F_lo, F_hi] ∩ [l, u]| / (F_hi - F_lo)`` (the expected coverage of the randomised
  probability integral transform).  Averaged over rows it equals ``level`` in expectation
  when the model is calibrated, whatever the thresholds.
* :func:`interval_coverage`: the fraction of known latent values (synthetic data) inside
  the central Gaussian predictive intervals ``m ± z s``.
* :func:`plot_reliability`: the reliability diagram.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np
from scipy.special import ndtri

from .metrics import _proba_inputs

__all__ = [
    "Reliability",
    "reliability",
    "calibration_error",
    "latent_interval_coverage",
    "interval_coverage",
    "plot_reliability",
]

_KINDS = ("class", "cumulative", "top")


class Reliability(NamedTuple):
    """Binned reliability curves, one row per event."""

    events: list
    """Event names, e.g. ``"y=2"`` or ``"y<=2"`` (or ``"top"``), length E."""
    bin_edges: np.ndarray
    """Edges of the B equal-width bins of [0, 1], shape (B+1,).  Bin b is (e_b, e_{b+1}];
    the first bin also holds 0."""
    prob_mean: np.ndarray
    """Mean predicted probability of the event in each bin, (E, B); NaN for empty bins."""
    freq: np.ndarray
    """Observed frequency of the event in each bin, (E, B); NaN for empty bins."""
    count: np.ndarray
    """Number of rows in each bin, (E, B)."""


def _check_kind(kind):
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")


def _check_bins(n_bins):
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    return int(n_bins)


def _events(y, p, kind, labels):
    """Predicted probabilities (n, E) and outcomes (n, E) of the events of ``kind``."""
    K = p.shape[1]
    if kind == "class":
        return p, (y[:, None] == np.arange(K)[None, :]), [f"y={c}" for c in labels]
    if kind == "cumulative":
        # Round-off can push a cumulative sum a hair above 1; it only decides the bin.
        cum = np.clip(np.cumsum(p, axis=1)[:, :-1], 0.0, 1.0)
        return cum, (y[:, None] <= np.arange(K - 1)[None, :]), [f"y<={c}" for c in labels[:-1]]
    pred = np.argmax(p, axis=1)
    return p.max(axis=1)[:, None], (pred == y)[:, None], ["top"]


def reliability(y_true, proba, n_bins: int = 10, *, kind: str = "cumulative",
                classes: Sequence[Any] | None = None, atol: float | None = None) -> Reliability:
    """Reliability curves: predicted probability vs observed frequency, in bins.

    Args:
        y_true: class positions 0..K-1, shape (n,) (any labels with ``classes``).
        proba: class probabilities, shape (n, K) (rows non-negative, summing to 1).
        n_bins: number of equal-width bins of [0, 1].
        kind: "cumulative" (events y <= k, k < K-1), "class" (events y = k) or "top"
            (the most probable class is right).
        classes: labels of the K columns, lowest first (used to name events).
        atol: tolerance on row sums (default sqrt(eps) of proba's dtype).

    Returns:
        :class:`Reliability`.

    Example:
        >>> r = reliability([0, 1], [[0.8, 0.2], [0.6, 0.4]], n_bins=2, kind="class")
        >>> r.count[0].tolist(), float(r.freq[0, 1])
        ([0.0, 2.0], 0.5)
    """
    _check_kind(kind)
    n_bins = _check_bins(n_bins)
    y, p = _proba_inputs(y_true, proba, classes, atol)
    labels = list(classes) if classes is not None else list(range(p.shape[1]))
    prob, outcome, names = _events(y, p, kind, labels)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.ceil(prob * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    E = prob.shape[1]
    count = np.zeros((E, n_bins))
    sum_p = np.zeros((E, n_bins))
    sum_o = np.zeros((E, n_bins))
    for e in range(E):
        count[e] = np.bincount(idx[:, e], minlength=n_bins)
        sum_p[e] = np.bincount(idx[:, e], weights=prob[:, e], minlength=n_bins)
        sum_o[e] = np.bincount(idx[:, e], weights=outcome[:, e].astype(np.float64), minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        prob_mean = np.where(count > 0, sum_p / count, np.nan)
        freq = np.where(count > 0, sum_o / count, np.nan)
    return Reliability(names, edges, prob_mean, freq, count)


def calibration_error(y_true, proba, n_bins: int = 10, *, kind: str = "cumulative",
                      classes: Sequence[Any] | None = None, atol: float | None = None,
                      per_event: bool = False):
    """Expected calibration error ``Σ_b (n_b / n) |freq_b - prob_b|`` of each event.

    Arguments other than ``per_event`` are those of :func:`reliability`.

    Args:
        per_event: return one ECE per event instead of their mean.

    Returns:
        The mean ECE over the events of ``kind`` (a float in [0, 1]), or an array (E,)
        with ``per_event=True``.  ``kind="top"`` is the usual top-class ECE and
        ``kind="cumulative"`` the cumulative ECE of :func:`bayesord.metrics.ece`.

    Example:
        >>> round(calibration_error([0, 1], [[0.8, 0.2], [0.6, 0.4]], n_bins=5, kind="top"), 12)
        0.4
    """
    rel = reliability(y_true, proba, n_bins, kind=kind, classes=classes, atol=atol)
    n = rel.count[0].sum()
    gap = np.where(rel.count > 0, np.abs(rel.freq - rel.prob_mean), 0.0)
    per = np.sum(rel.count * gap, axis=1) / n
    return per if per_event else float(np.mean(per))


def _level(level):
    if not (isinstance(level, (float, int, np.floating)) and 0.0 < level < 1.0):
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return float(level)


def latent_interval_coverage(y_true, proba, level: float = 0.9, *,
                             classes: Sequence[Any] | None = None, atol: float | None = None,
                             pointwise: bool = False):
    """Coverage of the central ``level`` predictive interval of the latent score.

    For row i with observed class k, ``[F_lo, F_hi] = [P(y < k), P(y <= k)]`` and
    ``[l, u] = [(1 - level)/2, (1 + level)/2]``; the row's coverage is
    ``max(0, min(F_hi, u) - max(F_lo, l)) / (F_hi - F_lo)`` (1 or 0 when the observed
    class has predictive probability 0, by whether ``F_lo`` lies in [l, u]).  A calibrated
    model gives ``level`` in expectation; below ``level`` means intervals too narrow
    (overconfident), above means too wide.

    Args:
        y_true: class positions 0..K-1, shape (n,) (any labels with ``classes``).
        proba: class probabilities, shape (n, K).
        level: nominal coverage in (0, 1).
        classes: labels of the K columns, lowest first.
        atol: tolerance on row sums (default sqrt(eps) of proba's dtype).
        pointwise: return the per-row coverages (n,) instead of their mean.

    Example:
        >>> round(latent_interval_coverage([1], [[0.2, 0.6, 0.2]], level=0.5), 6)
        0.833333
    """
    level = _level(level)
    y, p = _proba_inputs(y_true, proba, classes, atol)
    cum = np.clip(np.concatenate([np.zeros((p.shape[0], 1)), np.cumsum(p, axis=1)], axis=1), 0, 1)
    cum[:, -1] = 1.0
    rows = np.arange(p.shape[0])
    f_lo, f_hi = cum[rows, y], cum[rows, y + 1]
    lo, hi = (1 - level) / 2, (1 + level) / 2
    width = f_hi - f_lo
    overlap = np.clip(np.minimum(f_hi, hi) - np.maximum(f_lo, lo), 0.0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = np.where(width > 0, overlap / np.where(width > 0, width, 1.0),
                       ((f_lo >= lo) & (f_lo <= hi)).astype(np.float64))
    return cov if pointwise else float(np.mean(cov))


def interval_coverage(latent, mean, sd, level: float = 0.9) -> float:
    """Fraction of known latent values inside the central Gaussian intervals
    ``mean ± z sd`` with ``z = Phi^{-1}((1 + level)/2)``.

    For synthetic data whose latent scores are known.  ``sd`` is the predictive standard
    deviation of the latent score (noise and weight uncertainty:
    ``sqrt(sigma^2 + v)`` for :class:`bayesord.OrdinalProbit`).

    Example:
        >>> interval_coverage([0.0, 3.0], [0.0, 0.0], [1.0, 1.0], level=0.9)
        0.5
    """
    level = _level(level)
    latent, mean, sd = (np.asarray(a, dtype=np.float64) for a in (latent, mean, sd))
    if not (latent.shape == mean.shape == sd.shape and latent.ndim == 1):
        raise ValueError(f"latent, mean and sd must be 1-D of one length, got "
                         f"{latent.shape}, {mean.shape}, {sd.shape}")
    if not (np.all(np.isfinite(latent)) and np.all(np.isfinite(mean)) and np.all(sd >= 0)):
        raise ValueError("latent and mean must be finite and sd non-negative")
    z = ndtri(0.5 + level / 2)
    return float(np.mean(np.abs(latent - mean) <= z * sd))


def plot_reliability(y_true, proba, n_bins: int = 10, *, kind: str = "cumulative",
                     classes: Sequence[Any] | None = None, ax=None, show_counts: bool = True):
    """Reliability diagram: one line per event against the diagonal.

    ``y_true``, ``proba``, ``n_bins``, ``kind`` and ``classes`` are those of
    :func:`reliability`.

    Args:
        ax: a matplotlib Axes (default: a new figure).
        show_counts: draw the bin counts as a histogram under the curves.

    Returns:
        The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    rel = reliability(y_true, proba, n_bins, kind=kind, classes=classes)
    per = calibration_error(y_true, proba, n_bins, kind=kind, classes=classes, per_event=True)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect")
    for e, name in enumerate(rel.events):
        ok = rel.count[e] > 0
        ax.plot(rel.prob_mean[e, ok], rel.freq[e, ok], marker="o", markersize=3,
                label=f"{name} (ECE {per[e]:.3f})")
    if show_counts:
        twin = ax.twinx()
        centers = 0.5 * (rel.bin_edges[:-1] + rel.bin_edges[1:])
        twin.bar(centers, rel.count.sum(axis=0), width=1.0 / n_bins, color="0.85", zorder=0)
        twin.set_ylabel("rows per bin (all events)")
        ax.set_zorder(twin.get_zorder() + 1)
        ax.patch.set_visible(False)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted probability")
    ax.set_ylabel("observed frequency")
    ax.set_title(f"reliability ({kind} events)")
    ax.legend(fontsize=7, loc="upper left")
    return ax
