"""bayesord.metrics against independent references: scikit-learn, SciPy, brute force."""

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau
from sklearn.metrics import (
    accuracy_score,
    brier_score_loss,
    cohen_kappa_score,
    log_loss,
    mean_absolute_error,
    mean_squared_error,
    roc_auc_score,
)
from sklearn.model_selection import KFold, cross_val_score

from bayesord import OrdinalProbit
from bayesord import metrics as M


def brute_swapped(y, s, half=False):
    """Eq. (1) by enumerating all ordered pairs, O(n^2)."""
    y = np.asarray(y, float)
    s = np.asarray(s, float)
    higher = y[:, None] > y[None, :]
    swapped = higher & (s[:, None] < s[None, :])
    tied = higher & (s[:, None] == s[None, :])
    num = swapped.sum() + (0.5 if half else 1.0) * tied.sum()
    return num / higher.sum()


def random_proba(rng, n, k):
    p = rng.dirichlet(np.ones(k), size=n)
    return p / p.sum(axis=1, keepdims=True)


# ----------------------------------------------------------------------- label metrics


def test_label_metrics_match_sklearn():
    rng = np.random.default_rng(0)
    y = rng.integers(1, 6, 300)
    yp = np.clip(y + rng.integers(-2, 3, 300), 1, 5)
    w = rng.uniform(0, 2, 300)
    assert M.mae(y, yp) == pytest.approx(mean_absolute_error(y, yp), abs=1e-15)
    assert M.mae(y, yp, sample_weight=w) == pytest.approx(mean_absolute_error(y, yp, sample_weight=w), abs=1e-14)
    assert M.mse(y, yp, sample_weight=w) == pytest.approx(mean_squared_error(y, yp, sample_weight=w), abs=1e-14)
    assert M.zero_one(y, yp) == pytest.approx(1 - accuracy_score(y, yp), abs=1e-15)
    assert M.zero_one(y, yp, sample_weight=w) == pytest.approx(1 - accuracy_score(y, yp, sample_weight=w), abs=1e-14)


def test_macro_mae_reference():
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(90), 2 * np.ones(8), 3 * np.ones(2)]
    yp = rng.integers(1, 4, y.size)
    per_class = [np.abs(c - yp[y == c]).mean() for c in (1, 2, 3)]
    assert M.macro_mae(y, yp) == pytest.approx(np.mean(per_class), abs=1e-15)
    # always predicting the majority class: small MAE, large macro MAE
    maj = np.ones_like(y)
    assert M.mae(y, maj) == pytest.approx((8 + 2 * 2) / 100)
    assert M.macro_mae(y, maj) == pytest.approx((0 + 1 + 2) / 3)


def test_classes_map_labels_to_positions():
    order = ["low", "mid", "high"]
    yt = np.array(["low", "high", "mid", "mid"])
    yp = np.array(["mid", "low", "mid", "high"])
    pos_t = np.array([0, 2, 1, 1])
    pos_p = np.array([1, 0, 1, 2])
    assert M.mae(yt, yp, classes=order) == pytest.approx(mean_absolute_error(pos_t, pos_p))
    assert M.qwk(yt, yp, classes=order) == pytest.approx(M.qwk(pos_t, pos_p))
    cat_t = pd.Categorical(yt, categories=order, ordered=True)
    cat_p = pd.Categorical(yp, categories=order, ordered=True)
    assert M.mae(cat_t, cat_p) == pytest.approx(mean_absolute_error(pos_t, pos_p))
    # gaps in numeric labels: value scale by default, positions with classes
    assert M.mae([1, 5], [2, 2]) == pytest.approx(2.0)
    assert M.mae([1, 5], [2, 2], classes=[1, 2, 5]) == pytest.approx(1.0)


def test_label_errors():
    with pytest.raises(TypeError, match="classes"):
        M.mae(["a", "b"], ["a", "a"])
    with pytest.raises(ValueError, match="not in classes"):
        M.mae(["low", "huge"], ["low", "low"], classes=["low", "high"])
    with pytest.raises(ValueError, match="not in classes"):
        M.zero_one([1, 2], [1, 7], classes=[1, 2, 3])


@pytest.mark.parametrize(
    "fn", [M.mae, M.mse, M.zero_one, M.macro_mae, M.kendall_tau_b, M.qwk, M.swapped_pairs_rate]
)
def test_bad_pairs_rejected(fn):
    with pytest.raises(ValueError, match="lengths differ"):
        fn([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="empty"):
        fn([], [])
    with pytest.raises(ValueError, match="NaN"):
        fn([1.0, np.nan, 2.0], [1, 2, 3])
    with pytest.raises(ValueError, match="NaN"):
        fn([1, 2, 3], [1.0, np.inf, 2.0])
    with pytest.raises(ValueError, match="1-D"):
        fn(np.ones((3, 2)), np.ones((3, 2)))


def test_bad_sample_weight():
    with pytest.raises(ValueError, match="negative"):
        M.mae([1, 2], [1, 2], sample_weight=[1, -1])
    with pytest.raises(ValueError, match="shape"):
        M.mae([1, 2], [1, 2], sample_weight=[1, 1, 1])


# --------------------------------------------------------------------- ranking metrics


@pytest.mark.parametrize("seed", range(5))
def test_swapped_pairs_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 150
    y = rng.integers(1, 5, n)
    s = rng.integers(0, 6, n) + 0.5 * y  # many tied scores
    assert M.swapped_pairs_rate(y, s) == pytest.approx(brute_swapped(y, s), abs=1e-13)
    assert M.swapped_pairs_rate(y, s, ties="half") == pytest.approx(brute_swapped(y, s, True), abs=1e-13)
    sc = rng.normal(size=n)
    assert M.swapped_pairs_rate(y, sc) == pytest.approx(brute_swapped(y, sc), abs=1e-13)


def test_swapped_pairs_large_n_against_per_class_reference():
    """n = 2e5 (4e10 pairs): compared with an O(nK log n) per-class count."""
    rng = np.random.default_rng(3)
    n = 200_000
    y = rng.integers(0, 6, n)
    s = np.round(y + rng.normal(0, 1.5, n), 1)  # ties in the score
    swapped = 0
    comparable = 0
    for c in range(6):
        lower = np.sort(s[y < c])
        mine = s[y == c]
        # pairs (i in c, j lower) with s_i <= s_j: lower scores >= s_i
        swapped += int(np.sum(lower.size - np.searchsorted(lower, mine, side="left")))
        comparable += mine.size * lower.size
    assert M.swapped_pairs_rate(y, s) == pytest.approx(swapped / comparable, rel=1e-12)


def test_swapped_pairs_special_cases():
    y = [1, 1, 2, 3, 3]
    assert M.swapped_pairs_rate(y, [1, 2, 3, 4, 5]) == 0.0
    assert M.swapped_pairs_rate(y, [5, 4, 3, 2, 1]) == 1.0
    assert M.swapped_pairs_rate(y, np.zeros(5)) == 1.0  # Eq. (1): ties are swapped
    assert M.swapped_pairs_rate(y, np.zeros(5), ties="half") == 0.5
    with pytest.raises(ValueError, match="single distinct"):
        M.swapped_pairs_rate([2, 2, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="ties"):
        M.swapped_pairs_rate(y, y, ties="none")


def test_swapped_pairs_two_classes_is_one_minus_auc():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 400)
    s = np.round(rng.normal(size=400) + y, 1)
    assert M.swapped_pairs_rate(y, s, ties="half") == pytest.approx(1 - roc_auc_score(y, s), abs=1e-13)


@pytest.mark.parametrize("seed", range(4))
def test_kendall_tau_b_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    n = 500
    y = rng.integers(1, 6, n)
    yp = np.clip(y + rng.integers(-1, 2, n), 1, 5)
    assert M.kendall_tau_b(y, yp) == pytest.approx(kendalltau(y, yp).statistic, abs=1e-13)
    s = rng.normal(size=n)
    assert M.kendall_tau_b(y, s) == pytest.approx(kendalltau(y, s).statistic, abs=1e-13)


def test_kendall_tau_b_constant_is_nan():
    assert np.isnan(M.kendall_tau_b([1, 2, 3], [2, 2, 2]))
    assert np.isnan(kendalltau([1, 2, 3], [2, 2, 2]).statistic)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(-3, 3)), min_size=2, max_size=40)
)
def test_pair_metrics_property(pairs):
    y = np.array([p[0] for p in pairs])
    s = np.array([p[1] for p in pairs], dtype=float)
    if np.unique(y).size > 1:
        assert M.swapped_pairs_rate(y, s) == pytest.approx(brute_swapped(y, s), abs=1e-12)
        assert M.swapped_pairs_rate(y, s, ties="half") == pytest.approx(brute_swapped(y, s, True), abs=1e-12)
    ref = kendalltau(y, s).statistic
    ours = M.kendall_tau_b(y, s)
    assert (np.isnan(ref) and np.isnan(ours)) or ours == pytest.approx(ref, abs=1e-12)


@pytest.mark.parametrize("offset", [0, 1])
def test_qwk_matches_sklearn(offset):
    rng = np.random.default_rng(5)
    y = rng.integers(0, 5, 400) + offset
    yp = np.clip(y + rng.integers(-2, 3, 400), offset, 4 + offset)
    ref = cohen_kappa_score(y, yp, weights="quadratic")
    assert M.qwk(y, yp) == pytest.approx(ref, abs=1e-12)
    assert M.qwk(y, y) == 1.0


# ----------------------------------------------------------------- probability metrics


def test_rps_hand_computed():
    proba = np.array([[0.2, 0.5, 0.3], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    y = np.array([1, 0, 0])
    # F = [.2,.7], O = [0,1] -> .04 + .09 = .13 ; 0 ; F = [0,0], O = [1,1] -> 2
    assert M.rps(y, proba) == pytest.approx((0.13 + 0.0 + 2.0) / 3, abs=1e-15)
    assert M.rps(y, proba, normalize=True) == pytest.approx((0.13 + 2.0) / 6, abs=1e-15)
    assert M.rps(y, proba, sample_weight=[1, 1, 0]) == pytest.approx(0.065, abs=1e-15)


def test_rps_is_sum_of_cumulative_brier_scores():
    rng = np.random.default_rng(6)
    K = 5
    p = random_proba(rng, 200, K)
    y = rng.integers(0, K, 200)
    cum = np.cumsum(p, axis=1)
    ref = sum(brier_score_loss((y <= k).astype(int), np.clip(cum[:, k], 0, 1)) for k in range(K - 1))
    assert M.rps(y, p) == pytest.approx(ref, abs=1e-12)


def test_log_loss_matches_sklearn_and_is_not_clipped():
    rng = np.random.default_rng(7)
    p = random_proba(rng, 100, 4)
    y = rng.integers(0, 4, 100)
    assert M.ordinal_log_loss(y, p) == pytest.approx(log_loss(y, p, labels=range(4)), abs=1e-12)
    p0 = np.array([[1.0, 0.0], [0.5, 0.5]])
    assert M.ordinal_log_loss([1, 0], p0) == np.inf
    assert M.ordinal_log_loss([1, 0], p0, sample_weight=[0, 1]) == pytest.approx(np.log(2))


def test_proba_labels_with_classes():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    assert M.ordinal_log_loss(["a", "c"], p, classes=["a", "b", "c"]) == pytest.approx(
        M.ordinal_log_loss([0, 2], p)
    )
    with pytest.raises(ValueError, match="positions 0..2"):
        M.ordinal_log_loss([1, 3], p)  # labels 1..K without classes
    with pytest.raises(ValueError, match="2 entries but proba has 3 columns"):
        M.rps(["a", "b"], p, classes=["a", "b"])
    with pytest.raises(ValueError, match="not in classes"):
        M.rps(["a", "z"], p, classes=["a", "b", "c"])


@pytest.mark.parametrize("fn", [M.rps, M.ordinal_log_loss, M.ece])
def test_bad_proba_rejected(fn):
    good = np.array([[0.5, 0.5], [0.25, 0.75]])
    with pytest.raises(ValueError, match="negative"):
        fn([0, 1], np.array([[1.1, -0.1], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="sum to 1"):
        fn([0, 1], np.array([[0.5, 0.4], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="NaN"):
        fn([0, 1], np.array([[np.nan, 0.5], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="lengths differ"):
        fn([0, 1, 1], good)
    with pytest.raises(ValueError, match="empty"):
        fn([], np.zeros((0, 2)))
    with pytest.raises(ValueError, match="NaN"):
        fn([0, np.nan], good)
    with pytest.raises(ValueError, match="2-D"):
        fn([0, 1], np.array([0.5, 0.5]))
    assert np.isfinite(fn([0, 1], good))


def test_ece_hand_computed():
    # 4 bins of width .25. conf .9 (bin 3) correct, conf .8 (bin 3) wrong,
    # conf .6 (bin 2) correct, conf .3 (bin 1) wrong [pred 2, true 0].
    p = np.array([[0.9, 0.05, 0.05], [0.8, 0.1, 0.1], [0.2, 0.6, 0.2], [0.35, 0.3, 0.35]])
    y = np.array([0, 2, 1, 1])
    # argmax of row 4 is column 0 (first of the tied .35): wrong for y = 1, conf .35
    expected = (2 / 4) * abs(0.5 - 0.85) + (1 / 4) * abs(1 - 0.6) + (1 / 4) * abs(0 - 0.35)
    assert M.ece(y, p, n_bins=4) == pytest.approx(expected, abs=1e-15)


def test_ece_cumulative_hand_computed():
    # K = 2: the only event is y <= 0 with probability p[:, 0]
    p = np.array([[0.1, 0.9], [0.3, 0.7], [0.8, 0.2], [0.9, 0.1]])
    y = np.array([0, 1, 0, 1])
    # 2 bins: (0,.5]: F=.1,.3 events 1,0 -> |1 - .4| / 4 ; (.5,1]: F=.8,.9 events 1,0 -> |1 - 1.7| / 4
    assert M.ece(y, p, n_bins=2, cumulative=True) == pytest.approx((0.6 + 0.7) / 4, abs=1e-15)


def test_ece_small_for_calibrated_predictions():
    rng = np.random.default_rng(8)
    n, K = 100_000, 4
    p = random_proba(rng, n, K)
    u = rng.uniform(size=n)[:, None]
    y = np.sum(u > np.cumsum(p, axis=1), axis=1).clip(0, K - 1)  # y ~ Categorical(p)
    assert M.ece(y, p) < 0.01
    assert M.ece(y, p, cumulative=True) < 0.01
    shuffled = p[rng.permutation(n)]
    assert M.ece(y, shuffled, cumulative=True) > 0.05
    with pytest.raises(ValueError, match="n_bins"):
        M.ece(y, p, n_bins=0)


def test_scorers_read_the_columns_as_the_model_orders_its_classes():
    """scikit-learn's 'neg_log_loss' reads predict_proba's columns in sorted label order:
    right for labels 0..K-1, wrong for ["low", "mid", "high"] (sorted: high, low, mid).
    The library's scorers equal scikit-learn's on the integer-coded labels, and the model
    warns when scikit-learn's scorer reads it in the wrong order."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 2))
    codes = np.digitize(X @ [1.0, -0.5] + rng.normal(size=150), [-0.7, 0.7])
    names = np.array(["low", "mid", "high"])[codes]
    cv = KFold(3, shuffle=True, random_state=0)
    reference = cross_val_score(OrdinalProbit(), X, codes, cv=cv, scoring="neg_log_loss")
    named = OrdinalProbit(classes=["low", "mid", "high"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the library's scorer reads classes_: nothing to say
        ours = cross_val_score(named, X, names, cv=cv, scoring=M.neg_log_loss_scorer)
        # nor a user's own scorer that reads classes_
        theirs = cross_val_score(named, X, names, cv=cv, scoring=lambda est, X, y: -M.ordinal_log_loss(
            y, est.predict_proba(X), classes=est.classes_))
    np.testing.assert_allclose(ours, reference, rtol=1e-9)
    np.testing.assert_allclose(theirs, reference, rtol=1e-9)
    np.testing.assert_allclose(cross_val_score(OrdinalProbit(), X, codes, cv=cv, scoring=M.neg_log_loss_scorer),
                               reference, rtol=1e-12)
    with pytest.warns(UserWarning, match=r"columns as the classes in sorted order, but .* classes_ = "
                                         r"\['low', 'mid', 'high'\]"):
        misread = cross_val_score(named, X, names, cv=cv, scoring="neg_log_loss")
    assert np.all(misread < reference - 0.05)  # what the warning is about
    model = named.fit(X, names)
    np.testing.assert_allclose(-M.neg_rps_scorer(model, X, names),
                               M.rps(codes, model.predict_proba(X)), rtol=1e-12)
