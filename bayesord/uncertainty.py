"""Contiguous ordinal prediction sets: conformity scores, conformal quantiles, credible windows.

The estimators' ``calibrate`` and ``predict_set`` (every model; see ``docs/uncertainty.md``)
are built on these functions, which also work on any class probabilities.  Host-side NumPy
(the work is O(n K) per call).  Every set here is an interval of classes
``[lower, upper]`` (class codes 0..K-1) that contains an *anchor*, the class the model
predicts for the row, so a set never skips a class and never leaves out the point
prediction.

Conformal sets (split conformal, Vovk et al. 2005; Angelopoulos & Bates 2023, Sec. 1):
a conformity score ``s(x, y)`` is computed for the calibration rows' true labels; with
``q`` the ``ceil((n + 1)(1 - alpha))``-th smallest of those n scores, the set
``{y : s(x, y) <= q}`` covers a new exchangeable row's label with probability between
``1 - alpha`` and ``1 - alpha + 1/(n + 1)`` (the upper bound when scores have no ties).
The scores here are built so that this set is an interval around the anchor:

* ``"aps"``, ordinal adaptive prediction sets (Lu et al. 2022, "Improving trustworthiness
  of AI disease severity rating in medical imaging with ordinal conformal prediction
  sets", Sec. 2): grow an interval from the anchor, each step adding whichever neighbouring
  class has the larger probability; ``s(x, y)`` is the probability mass of the interval
  just before ``y`` joins it (0 for the anchor).  The set ``s <= q`` is the interval grown
  until its mass exceeds ``q``; the sets are nested in ``q`` and always hold the anchor.
  Scoring the mass *before* ``y`` (not after) is what lets every set hold the anchor
  without breaking the upper bound: only the anchor's score is tied (at 0), and a tie
  below the quantile does not matter.
* ``"cdf"``, the two-sided cumulative score ``s(x, y) = max(F(y - 1), 1 - F(y))`` with
  ``F`` the predicted cumulative distribution (``F(-1) = 0``): ``s <= q`` keeps the classes
  between the ``1 - q`` and ``q`` quantiles of the predictive distribution, an interval
  in the spirit of the cumulative (CDF) scores of Xu, Guo & Wei (2023).  The anchor is added
  by taking the hull (which only enlarges a set).
* ``"distance"``, for a model that predicts by thresholds ``t_1 <= ... <= t_{K-1}`` on one
  score ``f(x)`` (RED-SVM, TOR, the swapped-pairs SVM): ``s(x, y)`` is the distance from
  ``f(x)`` to class ``y``'s interval ``[t_{y-1}, t_y]`` (0 inside it; ``t_0 = -inf``,
  ``t_K = inf``).  The set ``s <= q`` is every class whose interval meets ``[f - q, f + q]``:
  an interval of classes around the prediction by construction, with no probabilities
  needed.  The score is in the units of ``f``, so it is not comparable across models.

Mondrian (class-conditional) sets use one quantile per class, from the calibration rows of
that class (Vovk et al. 2005, Ch. 4.5): each class is tested against its own quantile and
the set is the hull of the anchor and the classes that pass, so every class's coverage is at
least ``1 - alpha``.

Conformal risk control (Angelopoulos, Bates, Fisch, Lei & Schuster, "Conformal risk
control", ICLR 2024, Theorem 1) bounds the expected value of a loss instead of the
miscoverage.  The sets of :func:`sets_from_scores` are nested in the threshold ``q``, so a
loss that shrinks as the set grows, bounded by ``B``, is controlled at ``alpha`` by the
smallest ``q`` with ``n/(n+1) R_n(q) + B/(n+1) <= alpha``, ``R_n`` the mean loss of the
calibration rows' sets: ``E[loss] <= alpha`` for a new exchangeable row
(:func:`risk_threshold`).  Two ordinal losses, of the two kinds Xu, Guo & Wei propose
("Conformal risk control for ordinal classification", arXiv:2405.00417: a loss that grows
with how far the set is from the label, and one that weights the classes): the
**distance** from the label to the set in classes over ``K - 1`` (``B = 1``; a near miss
costs little, a set far off a lot), and a **weighted** miss ``w_y 1[y not in set]`` with
one weight per class (``B = max w``; misses of the classes that matter most cost most).
The miss itself (``w = 1``) is ordinary conformal coverage.

Credible windows need no calibration: the shortest interval of classes that contains the
anchor and holds at least ``1 - alpha`` of the predictive mass (ties: the larger mass).
Their coverage is the model's own claim, right when the model is.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "SCORES",
    "check_alpha",
    "conformal_quantile",
    "conformity_scores",
    "credible_windows",
    "distance_scores",
    "risk_threshold",
    "set_losses",
    "sets_from_scores",
]

SCORES = ("aps", "cdf", "distance")


def check_alpha(alpha) -> np.ndarray:
    """``alpha`` as a 1-D float array with every entry in (0, 1).

    Raises:
        TypeError: ``alpha`` holds something other than numbers (a bool, a string).
        ValueError: an entry outside (0, 1), not finite, or an empty or >1-D ``alpha``.
    """
    given = np.asarray(alpha)
    if given.dtype.kind not in "iuf":
        raise TypeError(f"alpha must be a number or a 1-D sequence of numbers in (0, 1), got {alpha!r}")
    arr = given.astype(np.float64)
    if arr.ndim > 1 or arr.size == 0:
        raise ValueError(f"alpha must be a number or a 1-D sequence of numbers, got shape {arr.shape}")
    arr = np.atleast_1d(arr)
    bad = arr[~((arr > 0) & (arr < 1))]
    if bad.size:
        raise ValueError(f"alpha must lie strictly between 0 and 1 (the miscoverage rate), got {bad.tolist()}")
    return arr


def conformal_quantile(scores, alpha) -> np.ndarray:
    """The split-conformal threshold for each ``alpha``: the ``ceil((n+1)(1-alpha))``-th
    smallest of the ``n`` calibration scores.

    Args:
        scores: (n,) conformity scores of the calibration rows' true labels.
        alpha: miscoverage rate(s), each in (0, 1).

    Returns:
        (m,) thresholds, one per entry of ``alpha``.

    Raises:
        ValueError: ``n < 1/alpha - 1`` for some alpha (the rank would exceed n, so no
            finite threshold guarantees ``1 - alpha``), naming how many rows it needs.
    """
    s = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    alpha = check_alpha(alpha)
    n = s.size
    rank = np.ceil((n + 1) * (1 - alpha) - 1e-9).astype(np.int64)
    if np.any(rank > n):
        a = float(alpha[rank > n].min())
        raise ValueError(f"{n} calibration rows are too few for alpha={a:g}: a coverage of "
                         f"1 - alpha needs at least {math.ceil(1 / a - 1 - 1e-9)} "
                         "(n_cal >= 1/alpha - 1); calibrate on more rows or raise alpha")
    return s[rank - 1]


def _aps_matrix(proba, anchor):
    """Ordinal APS scores of every class, (n, K): the mass of the interval grown from
    ``anchor`` (each step towards the larger neighbouring probability) just before the
    class joins."""
    n, K = proba.shape
    rows = np.arange(n)
    lo = anchor.copy()
    hi = anchor.copy()
    mass = proba[rows, anchor].copy()
    out = np.empty((n, K))
    out[rows, anchor] = 0.0
    for _ in range(K - 1):
        left = np.where(lo > 0, proba[rows, np.maximum(lo - 1, 0)], -np.inf)
        right = np.where(hi < K - 1, proba[rows, np.minimum(hi + 1, K - 1)], -np.inf)
        go_left = left > right
        new = np.where(go_left, lo - 1, hi + 1)
        out[rows, new] = mass
        mass = mass + np.where(go_left, left, right)
        lo = np.where(go_left, new, lo)
        hi = np.where(go_left, hi, new)
    return out


def _cdf_matrix(proba):
    """Two-sided cumulative scores ``max(F(k-1), 1 - F(k))`` of every class, (n, K)."""
    cum = np.cumsum(proba, axis=1)
    below = np.concatenate([np.zeros((proba.shape[0], 1)), cum[:, :-1]], axis=1)
    return np.maximum(below, 1.0 - cum)


def conformity_scores(proba, anchor, score="aps") -> np.ndarray:
    """Conformity scores of every class for every row, (n, K) (smaller = more conforming).

    Args:
        proba: (n, K) class probabilities, rows summing to 1.
        anchor: (n,) class codes of the point predictions.
        score: ``"aps"`` or ``"cdf"`` (see the module docstring; ``"distance"`` scores a
            threshold model's decision values: :func:`distance_scores`).
    """
    proba = np.asarray(proba, dtype=np.float64)
    anchor = np.asarray(anchor, dtype=np.int64)
    if score == "aps":
        return _aps_matrix(proba, anchor)
    if score == "cdf":
        return _cdf_matrix(proba)
    raise ValueError(f"score must be 'aps' or 'cdf' for probabilities, got {score!r}")


def distance_scores(decision, thresholds) -> np.ndarray:
    """``"distance"`` scores of every class, (n, K): how far each row's score lies outside
    the class's threshold interval (see the module docstring).

    Args:
        decision: (n,) scores ``f(x)`` of a threshold model.
        thresholds: (K-1,) its thresholds, increasing.
    """
    f = np.asarray(decision, dtype=np.float64).reshape(-1, 1)
    t = np.asarray(thresholds, dtype=np.float64)
    lower = np.concatenate([[-np.inf], t])[None, :]
    upper = np.concatenate([t, [np.inf]])[None, :]
    return np.maximum(np.maximum(lower - f, f - upper), 0.0)


def sets_from_scores(score_matrix, q, anchor):
    """Interval sets ``hull({anchor} | {k : s(x, k) <= q_k})`` for each threshold.

    Args:
        score_matrix: (n, K) conformity scores.
        q: (m,) thresholds, one set per entry, or (m, K) with one threshold per class
            (Mondrian sets).
        anchor: (n,) class codes every set contains.

    Returns:
        (lower, upper): class codes, each (n, m).
    """
    s = np.asarray(score_matrix)[:, None, :]
    q = np.asarray(q, dtype=np.float64)
    q = q[None, :, None] if q.ndim == 1 else q[None, :, :]
    keep = s <= q
    n, m, K = keep.shape
    keep[np.arange(n)[:, None], np.arange(m)[None, :], np.asarray(anchor)[:, None]] = True
    lower = np.argmax(keep, axis=2)
    upper = K - 1 - np.argmax(keep[:, :, ::-1], axis=2)
    return lower, upper


def credible_windows(proba, anchor, alpha):
    """Shortest class intervals holding ``anchor`` and at least ``1 - alpha`` of the mass.

    Among the shortest such windows the one with the larger mass wins (then the lower one).

    Args:
        proba: (n, K) class probabilities.
        anchor: (n,) class codes each window must contain.
        alpha: miscoverage rate(s), each in (0, 1).

    Returns:
        (lower, upper): class codes, each (n, m).
    """
    proba = np.asarray(proba, dtype=np.float64)
    anchor = np.asarray(anchor, dtype=np.int64)
    alpha = check_alpha(alpha)
    n, K = proba.shape
    cum = np.concatenate([np.zeros((n, 1)), np.cumsum(proba, axis=1)], axis=1)
    lo, hi = np.triu_indices(K)                      # every window [lo, hi]
    mass = cum[:, hi + 1] - cum[:, lo]               # (n, W)
    holds = (lo[None, :] <= anchor[:, None]) & (anchor[:, None] <= hi[None, :])
    # Rounding must not push the full window [0, K-1] below 1 - alpha.
    enough = mass[:, None, :] >= (1 - alpha)[None, :, None] - 1e-12
    ok = holds[:, None, :] & (enough | ((lo == 0) & (hi == K - 1))[None, None, :])
    # Order windows by (length, -mass, lower): the first admissible one is the answer.
    key = (hi - lo)[None, :] * 4.0 - np.clip(mass, 0.0, 1.0)
    key = np.where(ok, key[:, None, :], np.inf)
    best = np.argmin(key, axis=2)
    return lo[best], hi[best]


def set_losses(lower, upper, labels, loss="distance", n_classes=None):
    """The loss of each set ``[lower, upper]`` (class codes) for the true ``labels``.

    Args:
        lower: the sets' lowest classes (codes), (n,) or (n, m).
        upper: their highest classes, shaped like ``lower``.
        labels: the true classes, (n,).
        loss: ``"distance"`` (``max(lower - y, y - upper, 0) / (K - 1)``), ``"coverage"``
            (``1[y not in set]``) or a (K,) array of non-negative class weights
            (``w_y 1[y not in set]``).
        n_classes: K (needed for ``"distance"``).

    Returns:
        The losses, shaped like ``lower``.
    """
    lower, upper = np.asarray(lower), np.asarray(upper)
    y = np.asarray(labels).reshape((-1,) + (1,) * (lower.ndim - 1))
    miss = (y < lower) | (y > upper)
    if isinstance(loss, str) and loss == "distance":
        return np.maximum(np.maximum(lower - y, y - upper), 0) / max(int(n_classes) - 1, 1)
    if isinstance(loss, str) and loss == "coverage":
        return miss.astype(np.float64)
    return np.asarray(loss, dtype=np.float64)[y] * miss


def risk_threshold(score_matrix, labels, anchor, alpha, loss="distance"):
    """The conformal-risk-control threshold for each ``alpha`` (module docstring).

    The smallest ``q`` among the calibration scores (or ``inf``: every class) with
    ``n/(n+1) R_n(q) + B/(n+1) <= alpha``, ``R_n(q)`` the mean :func:`set_losses` of the
    calibration rows' sets :func:`sets_from_scores` at ``q``; found by bisection, as the
    risk does not increase with ``q``.

    Args:
        score_matrix: (n, K) conformity scores of the calibration rows, every class.
        labels: (n,) their true class codes.
        anchor: (n,) the classes their sets hold (the predictions).
        alpha: risk level(s) in (0, 1).
        loss: as :func:`set_losses`.

    Returns:
        (m,) thresholds.

    Raises:
        ValueError: a loss bound ``B`` with ``B/(n+1) > alpha`` (too few rows: the bound
            is met by no set), naming the rows needed; bad weights.
    """
    S = np.asarray(score_matrix, dtype=np.float64)
    n, K = S.shape
    alpha = check_alpha(alpha)
    if isinstance(loss, str):
        if loss not in ("distance", "coverage"):
            raise ValueError(f"loss must be 'distance', 'coverage' or class weights, got {loss!r}")
        bound = 1.0
    else:
        w = np.asarray(loss, dtype=np.float64)
        if w.shape != (K,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
            raise ValueError(f"class weights must be {K} finite non-negative numbers, not all 0; got {loss!r}")
        bound = float(w.max())
    too_few = bound / (n + 1) > alpha
    if np.any(too_few):
        a = float(alpha[too_few].min())
        raise ValueError(f"{n} calibration rows are too few for a risk of {a:g} with a loss bounded by "
                         f"{bound:g}: it needs at least {math.ceil(bound / a - 1 - 1e-9)} "
                         "(n_cal >= B/alpha - 1); calibrate on more rows or raise alpha")
    candidates = np.append(np.unique(S[np.isfinite(S)]), np.inf)

    def adjusted_risk(q):
        lower, upper = sets_from_scores(S, np.array([q]), anchor)
        risk = float(np.mean(set_losses(lower[:, 0], upper[:, 0], labels, loss, K)))
        return n / (n + 1) * risk + bound / (n + 1)

    out = np.empty(alpha.size)
    for j, a in enumerate(alpha):
        lo, hi = 0, candidates.size - 1  # the last candidate (every class) always qualifies
        while lo < hi:
            mid = (lo + hi) // 2
            if adjusted_risk(candidates[mid]) <= a:
                hi = mid
            else:
                lo = mid + 1
        out[j] = candidates[lo]
    return out
