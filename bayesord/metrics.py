"""Metrics for ordinal predictions: errors on the label scale, ranking agreement, and
scores of predicted class probabilities.

Everything here is host-side NumPy.  Label conventions:

* Label metrics (``mae``, ``mse``, ``zero_one``, ``macro_mae``, ``kendall_tau_b``,
  ``qwk``) take numeric labels and use their values as ranks: class positions 0..K-1,
  the labels 1..K of the shared datasets, or any other numbers.  MAE and MSE are measured
  on that scale, so labels with gaps (1, 2, 5) give |5 - 2| = 3.  Pass ``classes=[...]``
  (lowest to highest) to measure on positions instead; this is also how string labels or
  labels with gaps are scored.  With ``classes`` every label must be one of them
  (ValueError otherwise).  An ordered pandas Categorical uses its categories as
  ``classes``.
* Probability metrics (``rps``, ``ordinal_log_loss``, ``ece``) take ``proba`` of shape
  (n, K) whose column k is class position k, and ``y_true`` as positions 0..K-1
  (whole numbers), or any labels together with ``classes`` (then position = index in
  ``classes``).  Labels 1..K passed without ``classes`` are rejected only when K itself
  occurs (it is out of range); labels that all lie in 1..K-1 cannot be told apart from
  positions, so pass ``classes`` whenever the labels are not 0..K-1.
* ``proba`` must be finite, non-negative, with rows summing to 1 within ``atol``
  (default sqrt(machine epsilon) of its dtype: 1.5e-8 in float64, 3.5e-4 in float32).
  Nothing is clipped or renormalised.

Every function raises ValueError for empty input, mismatched lengths or NaN/inf, and
TypeError for non-numeric labels without ``classes``.

The pair metrics (``swapped_pairs_rate``, ``kendall_tau_b``) never enumerate the n²
pairs: they count concordant pairs by a vectorised bottom-up merge sort, O(n log² n)
time and O(n) memory (n = 10⁶ takes a few seconds).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from bayesord._validation import check_sample_weight, encode_known_labels

__all__ = [
    "mae",
    "mse",
    "zero_one",
    "macro_mae",
    "swapped_pairs_rate",
    "kendall_tau_b",
    "qwk",
    "rps",
    "ordinal_log_loss",
    "ece",
    "neg_log_loss_scorer",
    "neg_rps_scorer",
]


# ----------------------------------------------------------------------------- checks


def _categorical_classes(y):
    """The categories of an ordered pandas Categorical / categorical Series, else None."""
    cat = getattr(y, "cat", None)
    if cat is None and type(y).__name__ == "Categorical":
        cat = y
    if cat is not None and getattr(cat, "ordered", False):
        return list(cat.categories)
    return None


def _labels(y, name: str, classes: Sequence[Any] | None, n: int | None = None) -> np.ndarray:
    """1-D float64 label values (or positions in ``classes``), checked."""
    if classes is None:
        classes = _categorical_classes(y)
        if classes is not None:
            y = np.asarray(y.astype(object) if hasattr(y, "astype") else y, dtype=object)
    arr = np.asarray(y) if classes is None else np.asarray(y, dtype=object)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} entries, expected {n} (lengths differ)")
    if classes is not None:
        codes, _ = encode_known_labels(arr, classes, what=name)
        return codes.astype(np.float64)
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{name} must be numeric (got dtype {arr.dtype}); pass classes=[...] from lowest "
            "to highest to score labels that are not numbers"
        )
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _pair(y_true, y_pred, classes):
    yt = _labels(y_true, "y_true", classes)
    yp = _labels(y_pred, "y_pred", classes, n=yt.shape[0])
    return yt, yp


def _weights(sample_weight, n: int) -> np.ndarray:
    return check_sample_weight(sample_weight, n)


def _proba(proba, n: int, atol: float | None) -> np.ndarray:
    """(n, K) float array of class probabilities, checked, never modified."""
    p = np.asarray(proba)
    if p.dtype.kind not in "biuf":
        raise TypeError(f"proba must be numeric, got dtype {p.dtype}")
    if p.ndim != 2:
        raise ValueError(f"proba must be 2-D (n_samples, n_classes), got shape {p.shape}")
    if p.shape[0] != n:
        raise ValueError(f"proba has {p.shape[0]} rows but y_true has {n} entries (lengths differ)")
    if p.shape[1] < 2:
        raise ValueError(f"proba needs at least 2 class columns, got {p.shape[1]}")
    if atol is None:
        atol = float(np.sqrt(np.finfo(p.dtype if p.dtype.kind == "f" else np.float64).eps))
    p = p.astype(np.float64)
    if not np.all(np.isfinite(p)):
        raise ValueError("proba contains NaN or infinite values")
    if np.any(p < 0):
        raise ValueError(f"proba contains negative values (smallest {p.min():.3g})")
    dev = np.abs(p.sum(axis=1) - 1.0)
    if np.any(dev > atol):
        i = int(np.argmax(dev))
        raise ValueError(
            f"rows of proba must sum to 1 (within atol={atol:.2g}); row {i} sums to {p[i].sum():.17g}"
        )
    return p


def _proba_inputs(y_true, proba, classes, atol):
    """(y, p): y_true as int class positions 0..K-1 (columns of proba) and checked proba."""
    y = _labels(y_true, "y_true", classes)
    p = _proba(proba, y.shape[0], atol)
    n_classes = p.shape[1]
    if classes is not None and len(classes) != n_classes:
        raise ValueError(f"classes has {len(classes)} entries but proba has {n_classes} columns")
    bad = (y != np.round(y)) | (y < 0) | (y >= n_classes)
    if np.any(bad):
        raise ValueError(
            f"y_true must hold class positions 0..{n_classes - 1} (the columns of proba); found "
            f"{np.unique(y[bad])[:5].tolist()}. Pass classes=[...] to map other labels to columns"
        )
    return y.astype(np.int64), p


# ----------------------------------------------------------------------- label metrics


def mae(y_true, y_pred, *, classes: Sequence[Any] | None = None, sample_weight=None) -> float:
    """Mean absolute error |y - ŷ| on the label scale (positions when ``classes`` is given).

    Args:
        y_true: true labels, shape (n,).
        y_pred: predicted labels, shape (n,).
        classes: optional label order; labels are then scored by their position in it.
        sample_weight: optional non-negative weights, shape (n,).

    Returns:
        The (weighted) mean of |y_true - y_pred|.

    Raises:
        ValueError: empty input, lengths differ, NaN/inf, labels not in ``classes``,
            invalid weights.
        TypeError: non-numeric labels without ``classes``.

    Example:
        >>> mae([1, 2, 3], [1, 3, 5])
        1.0
    """
    yt, yp = _pair(y_true, y_pred, classes)
    return float(np.average(np.abs(yt - yp), weights=_weights(sample_weight, yt.shape[0])))


def mse(y_true, y_pred, *, classes: Sequence[Any] | None = None, sample_weight=None) -> float:
    """Mean squared error (y - ŷ)² on the label scale; arguments as in :func:`mae`.

    Example:
        >>> mse([1, 2, 3], [1, 3, 5])
        1.6666666666666667
    """
    yt, yp = _pair(y_true, y_pred, classes)
    return float(np.average((yt - yp) ** 2, weights=_weights(sample_weight, yt.shape[0])))


def zero_one(y_true, y_pred, *, classes: Sequence[Any] | None = None, sample_weight=None) -> float:
    """Mean zero-one error: the (weighted) fraction of wrong labels (1 - accuracy).

    Arguments as in :func:`mae`.

    Example:
        >>> zero_one([1, 2, 3, 4], [1, 3, 3, 1])
        0.5
    """
    yt, yp = _pair(y_true, y_pred, classes)
    return float(np.average(yt != yp, weights=_weights(sample_weight, yt.shape[0])))


def macro_mae(y_true, y_pred, *, classes: Sequence[Any] | None = None) -> float:
    """Macro-averaged MAE: the MAE within each true class, averaged over the classes.

    Each class present in ``y_true`` counts equally, whatever its size (Baccianella,
    Esuli and Sebastiani, 2009), so a model that ignores rare classes is penalised.
    Classes absent from ``y_true`` are not averaged over (their MAE is undefined).

    Args:
        y_true: true labels, shape (n,).
        y_pred: predicted labels, shape (n,).
        classes: optional label order; labels are then scored by their position in it.

    Returns:
        mean over distinct values c of y_true of mean(|c - y_pred[y_true == c]|).

    Example:
        >>> macro_mae([1, 1, 1, 2], [1, 1, 1, 1])
        0.5
    """
    yt, yp = _pair(y_true, y_pred, classes)
    uniq, inv = np.unique(yt, return_inverse=True)
    err_sum = np.bincount(inv, weights=np.abs(yt - yp), minlength=uniq.size)
    count = np.bincount(inv, minlength=uniq.size)
    return float(np.mean(err_sum / count))


# --------------------------------------------------------------------- ranking metrics


def _count_ascending_pairs(seq: np.ndarray) -> int:
    """Number of pairs p < q with seq[p] < seq[q], for non-negative int ranks.

    Bottom-up merge sort, vectorised per level: at block width w, every element of a
    right block counts the elements of its left partner block (already sorted) that are
    strictly smaller, by one global ``searchsorted`` on keys offset by the block pair.
    O(n log² n) time, O(n) memory.
    """
    n = seq.shape[0]
    if n < 2:
        return 0
    m = int(seq.max()) + 1
    cur = seq.astype(np.int64)
    pos = np.arange(n, dtype=np.int64)
    total = 0
    width = 1
    while width < n:
        pair = pos // (2 * width)
        right = (pos // width) % 2 == 1
        base = pair * m
        keys = base + cur
        left_keys = keys[~right]  # each left block sorted, blocks in order: globally sorted
        smaller = np.searchsorted(left_keys, keys[right], side="left")
        before = np.searchsorted(left_keys, base[right], side="left")
        total += int(np.sum(smaller - before))
        cur = np.sort(keys) - base
        width *= 2
    return total


def _tied_pairs(codes: np.ndarray) -> int:
    c = np.bincount(codes).astype(np.int64)
    return int(np.sum(c * (c - 1) // 2))


def _pair_counts(a: np.ndarray, b: np.ndarray):
    """Pair statistics of two equal-length 1-D arrays in O(n log² n).

    Returns:
        (n_pairs, ties_a, ties_b, ties_both, concordant): all unordered pairs, pairs tied
        in a, tied in b, tied in both, and pairs ordered the same way strictly in both.
    """
    n = a.shape[0]
    _, ra = np.unique(a, return_inverse=True)
    _, rb = np.unique(b, return_inverse=True)
    ra = ra.ravel().astype(np.int64)
    rb = rb.ravel().astype(np.int64)
    # Order by a ascending and, within ties of a, by b descending: then a pair p < q
    # with rb[p] < rb[q] is exactly a pair with a strictly increasing and b strictly
    # increasing (ties in a never count).
    order = np.lexsort((-rb, ra))
    concordant = _count_ascending_pairs(rb[order])
    joint = ra * (int(rb.max()) + 1) + rb
    _, joint_codes = np.unique(joint, return_inverse=True)
    return (
        n * (n - 1) // 2,
        _tied_pairs(ra),
        _tied_pairs(rb),
        _tied_pairs(joint_codes.ravel()),
        concordant,
    )


def swapped_pairs_rate(
    y_true, score, *, ties: str = "swapped", classes: Sequence[Any] | None = None
) -> float:
    """Fraction of swapped pairs, Eq. (1) of Díez, del Coz and Bahamonde.

    Δ_SP = #{(i, j): y_i > y_j and h(x_i) <= h(x_j)} / #{(i, j): y_i > y_j}.

    Ties in the score count as swapped by default (``ties="swapped"``), exactly as the
    ``<=`` in Eq. (1) and the labels y'_ij of Eq. (11)-(12) (y'_ij = 1 only when
    h(x_i) > h(x_j)): a constant score swaps every pair, rate 1.  ``ties="half"`` counts
    a tied pair as half swapped, which makes the rate (1 - AUC) for two classes and
    0.5 for a constant score.  Pairs with equal y_true are not comparable and not counted.

    Computed in O(n log² n) time by merge counting, never over the n² pairs.

    Args:
        y_true: true labels, shape (n,), numeric ranks (or any labels with ``classes``).
        score: predicted scores or labels h(x), shape (n,); larger means a higher class.
        ties: ``"swapped"`` (Eq. 1) or ``"half"``.
        classes: optional order of the labels of ``y_true`` (not applied to ``score``).

    Returns:
        The swapped-pairs rate in [0, 1].

    Raises:
        ValueError: bad input, unknown ``ties``, or y_true with a single distinct value
            (no comparable pair: the rate is undefined).

    Example:
        >>> swapped_pairs_rate([1, 2, 3], [0.1, 0.3, 0.2])
        0.3333333333333333
    """
    if ties not in ("swapped", "half"):
        raise ValueError(f"ties must be 'swapped' or 'half', got {ties!r}")
    yt = _labels(y_true, "y_true", classes)
    s = _labels(score, "score", None, n=yt.shape[0])
    n_pairs, ties_y, ties_s, ties_both, concordant = _pair_counts(yt, s)
    comparable = n_pairs - ties_y
    if comparable == 0:
        raise ValueError("y_true has a single distinct value: there are no pairs to order")
    swapped = comparable - concordant
    if ties == "half":
        tied_score = ties_s - ties_both  # comparable pairs with equal scores
        swapped = swapped - 0.5 * tied_score
    return float(swapped / comparable)


def kendall_tau_b(y_true, y_pred, *, classes: Sequence[Any] | None = None) -> float:
    """Kendall's τ-b rank correlation, with the tie correction of both variables.

    τ_b = (C - D) / sqrt((n0 - n1)(n0 - n2)), with C and D the concordant and
    discordant pairs, n0 = n(n-1)/2, n1 and n2 the pairs tied in y_true and in y_pred.
    Same definition as ``scipy.stats.kendalltau`` (variant "b"); O(n log² n).

    Args:
        y_true: true labels, shape (n,).
        y_pred: predicted labels or scores, shape (n,).
        classes: optional label order, applied to both arguments.

    Returns:
        τ_b in [-1, 1], or NaN when either argument is constant (undefined, as in SciPy).

    Example:
        >>> kendall_tau_b([1, 2, 3], [1, 3, 2])
        0.3333333333333333
    """
    yt, yp = _pair(y_true, y_pred, classes)
    n_pairs, ties_t, ties_p, ties_both, concordant = _pair_counts(yt, yp)
    discordant = n_pairs - ties_t - ties_p + ties_both - concordant
    denom = float(n_pairs - ties_t) * float(n_pairs - ties_p)
    if denom == 0.0:
        return float("nan")
    return float((concordant - discordant) / np.sqrt(denom))


def qwk(y_true, y_pred, *, classes: Sequence[Any] | None = None) -> float:
    """Quadratic weighted kappa (Cohen's kappa with weights (a - b)²).

    κ = 1 - Σ w O / Σ w E with w_ab = (a - b)², O the observed confusion counts and E
    the counts expected from the margins under independence.  With quadratic weights
    this is 1 - MSE / (var(y) + var(ŷ) + (mean(y) - mean(ŷ))²) (population variances),
    which is how it is computed here.  The weights use the label values (positions
    with ``classes``); for labels 0..K-1 or 1..K this is the usual QWK and agrees with
    ``sklearn.metrics.cohen_kappa_score(weights="quadratic")`` whenever the labels
    present are consecutive integers.  (scikit-learn weights by the index in the sorted
    labels present, which differs when some middle class never occurs.)

    Args:
        y_true: true labels, shape (n,).
        y_pred: predicted labels, shape (n,).
        classes: optional label order, applied to both arguments.

    Returns:
        κ (1 for perfect agreement, 0 for chance level), NaN when both are constant and
        equal (undefined).

    Example:
        >>> qwk([0, 1, 2, 3], [0, 1, 2, 3])
        1.0
    """
    yt, yp = _pair(y_true, y_pred, classes)
    observed = np.mean((yt - yp) ** 2)
    expected = yt.var() + yp.var() + (yt.mean() - yp.mean()) ** 2
    if expected == 0.0:
        return float("nan")
    return float(1.0 - observed / expected)


# ----------------------------------------------------------------- probability metrics


def rps(
    y_true,
    proba,
    *,
    classes: Sequence[Any] | None = None,
    normalize: bool = False,
    sample_weight=None,
    atol: float | None = None,
) -> float:
    """Ranked probability score: squared error of the predicted cumulative distribution.

    RPS_i = Σ_{k=0}^{K-2} (F_ik - 1[y_i <= k])², F_ik = Σ_{j<=k} p_ij, i.e. the sum of
    the Brier scores of the K-1 events "y <= k".  With ``normalize=True`` it is divided
    by K-1 (Epstein's 1969 scaling, in [0, 1]).  Lower is better; 0 for a certain
    correct prediction.  Unlike the log-loss it rewards putting mass near the true class.

    Args:
        y_true: class positions 0..K-1, shape (n,) (any labels with ``classes``).
        proba: class probabilities, shape (n, K), column k = class position k.
        classes: optional labels of the K columns, lowest to highest.
        normalize: divide by K-1.
        sample_weight: optional non-negative weights, shape (n,).
        atol: tolerance on row sums (default sqrt(eps) of proba's dtype).

    Returns:
        The (weighted) mean RPS.

    Example:
        >>> rps([0], [[0.5, 0.5, 0.0]])
        0.25
    """
    y, p = _proba_inputs(y_true, proba, classes, atol)
    n, n_classes = p.shape
    cum = np.cumsum(p, axis=1)[:, :-1]
    event = y[:, None] <= np.arange(n_classes - 1)[None, :]
    per_sample = np.sum((cum - event) ** 2, axis=1)
    if normalize:
        per_sample = per_sample / (n_classes - 1)
    return float(np.average(per_sample, weights=_weights(sample_weight, n)))


def ordinal_log_loss(
    y_true,
    proba,
    *,
    classes: Sequence[Any] | None = None,
    sample_weight=None,
    atol: float | None = None,
) -> float:
    """Mean negative log-probability of the true class, -mean log p(y_i).

    No clipping: a true class predicted with probability exactly 0 gives ``inf`` (the
    honest value of the log-loss), and probabilities are checked rather than repaired:
    negative entries or rows not summing to 1 within ``atol`` are a ValueError.

    Args:
        y_true: class positions 0..K-1, shape (n,) (any labels with ``classes``).
        proba: class probabilities, shape (n, K).
        classes: optional labels of the K columns, lowest to highest.
        sample_weight: optional non-negative weights, shape (n,); rows of weight 0 are
            left out (so their probabilities may be 0).
        atol: tolerance on row sums (default sqrt(eps) of proba's dtype).

    Returns:
        The (weighted) mean of -log proba[i, y_i]; ``inf`` if a weighted true class has
        probability 0.

    Example:
        >>> round(ordinal_log_loss([0, 1], [[0.5, 0.5], [0.25, 0.75]]), 6)
        0.490415
    """
    y, p = _proba_inputs(y_true, proba, classes, atol)
    n = p.shape[0]
    w = _weights(sample_weight, n)
    keep = w > 0
    p_true = p[np.arange(n), y][keep]
    with np.errstate(divide="ignore"):
        nll = -np.log(p_true)
    return float(np.average(nll, weights=w[keep]))


def _binned_gap(prob: np.ndarray, outcome: np.ndarray, n_bins: int) -> float:
    """Σ_b (n_b / n) |mean outcome_b - mean prob_b| over equal-width bins of [0, 1].

    Bin b holds probabilities in (b/B, (b+1)/B]; the first bin also holds 0.
    """
    idx = np.clip(np.ceil(prob * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    sum_p = np.bincount(idx, weights=prob, minlength=n_bins)
    sum_o = np.bincount(idx, weights=outcome.astype(np.float64), minlength=n_bins)
    return float(np.sum(np.abs(sum_o - sum_p)) / prob.shape[0])


def ece(
    y_true,
    proba,
    n_bins: int = 10,
    *,
    cumulative: bool = False,
    classes: Sequence[Any] | None = None,
    atol: float | None = None,
) -> float:
    """Expected calibration error with equal-width confidence bins.

    Top-class (default): confidence c_i = max_k p_ik, prediction argmax_k p_ik (the
    lowest class on ties), correct_i = 1[prediction = y_i]; with bins B_b = (b/B,
    (b+1)/B] of [0, 1] (the first bin also holds 0),
    ECE = Σ_b (|B_b| / n) |acc(B_b) - conf(B_b)|.

    Cumulative (``cumulative=True``): the same binned gap for each of the K-1 events
    "y <= k" with predicted probability F_ik = Σ_{j<=k} p_ij, averaged over k.  It checks
    the calibration of the whole ordinal distribution, not only of its mode.

    Args:
        y_true: class positions 0..K-1, shape (n,) (any labels with ``classes``).
        proba: class probabilities, shape (n, K).
        n_bins: number of equal-width bins (>= 1).
        cumulative: use the cumulative events instead of the top class.
        classes: optional labels of the K columns, lowest to highest.
        atol: tolerance on row sums (default sqrt(eps) of proba's dtype).

    Returns:
        The ECE in [0, 1].

    Example:
        >>> round(ece([0, 1], [[0.8, 0.2], [0.6, 0.4]], n_bins=5), 12)
        0.4
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    y, p = _proba_inputs(y_true, proba, classes, atol)
    if not cumulative:
        pred = np.argmax(p, axis=1)
        return _binned_gap(p.max(axis=1), pred == y, int(n_bins))
    # Round-off can push a cumulative sum a hair above 1; it only decides the bin.
    cum = np.clip(np.cumsum(p, axis=1)[:, :-1], 0.0, 1.0)
    gaps = [_binned_gap(cum[:, k], y <= k, int(n_bins)) for k in range(p.shape[1] - 1)]
    return float(np.mean(gaps))


# ----------------------------------------------------------------------------- scorers


def neg_log_loss_scorer(estimator, X, y, sample_weight=None) -> float:
    """A scikit-learn scorer: minus :func:`ordinal_log_loss` of ``estimator.predict_proba(X)``,
    its columns read as ``estimator.classes_``.

    ``cross_val_score(model, X, y, scoring=neg_log_loss_scorer)``.  scikit-learn's own
    ``scoring="neg_log_loss"`` reads the columns as the labels in sorted order, which is
    right for labels whose sorted order is their order (numbers) and wrong for string or
    categorical labels in another order (``["low", "mid", "high"]``); the models warn when
    they are scored that way.

    Example:
        >>> import numpy as np
        >>> from bayesord import OrdinalProbit
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array(["low", "low", "mid", "low", "high", "mid", "high", "high"])
        >>> model = OrdinalProbit(classes=["low", "mid", "high"]).fit(X, y)
        >>> bool(neg_log_loss_scorer(model, X, y) < 0)
        True
    """
    return -ordinal_log_loss(y, np.asarray(estimator.predict_proba(X)), classes=estimator.classes_,
                             sample_weight=sample_weight)


def neg_rps_scorer(estimator, X, y, sample_weight=None) -> float:
    """A scikit-learn scorer: minus :func:`rps` (the ranked probability score) of
    ``estimator.predict_proba(X)``, its columns read as ``estimator.classes_``."""
    return -rps(y, np.asarray(estimator.predict_proba(X)), classes=estimator.classes_, sample_weight=sample_weight)
