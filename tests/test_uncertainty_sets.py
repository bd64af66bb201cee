"""Contiguous ordinal prediction sets (bayesord.uncertainty) against brute force and simulation."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayesord.uncertainty import (
    check_alpha,
    conformal_quantile,
    conformity_scores,
    credible_windows,
    sets_from_scores,
)


def _random_proba(rng, n, K, concentration=1.0):
    return rng.dirichlet(np.full(K, concentration), size=n)


def _aps_by_hand(p, anchor):
    """Lu et al.'s ordinal APS for one row, written as the plain greedy loop."""
    K = len(p)
    lo = hi = anchor
    mass = p[anchor]
    score = {anchor: 0.0}
    while hi - lo + 1 < K:
        left = p[lo - 1] if lo > 0 else -1.0
        right = p[hi + 1] if hi < K - 1 else -1.0
        if left > right:
            lo -= 1
            score[lo] = mass
            mass += left
        else:
            hi += 1
            score[hi] = mass
            mass += right
    return np.array([score[k] for k in range(K)])


def test_aps_scores_follow_the_greedy_interval_grown_from_the_anchor():
    rng = np.random.default_rng(0)
    P = _random_proba(rng, 50, 6)
    anchor = rng.integers(0, 6, size=50)
    S = conformity_scores(P, anchor, "aps")
    for i in range(50):
        np.testing.assert_allclose(S[i], _aps_by_hand(P[i], anchor[i]), rtol=0, atol=1e-15)


def test_cdf_scores_are_the_two_tails_of_the_cumulative_distribution():
    P = np.array([[0.1, 0.2, 0.3, 0.4]])
    S = conformity_scores(P, np.array([3]), "cdf")
    # max(F(k-1), 1 - F(k)) with F = 0.1, 0.3, 0.6, 1.0
    np.testing.assert_allclose(S[0], [0.9, 0.7, 0.4, 0.6])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), K=st.integers(2, 8), score=st.sampled_from(["aps", "cdf"]))
def test_sets_are_intervals_that_hold_the_anchor_and_grow_as_alpha_falls(seed, K, score):
    rng = np.random.default_rng(seed)
    P = _random_proba(rng, 40, K, concentration=0.5)
    anchor = rng.integers(0, K, size=40)
    S = conformity_scores(P, anchor, score)
    q = np.sort(rng.uniform(0, 1, size=5))  # increasing q = decreasing alpha
    lower, upper = sets_from_scores(S, q, anchor)
    assert np.all(lower <= anchor[:, None]) and np.all(anchor[:, None] <= upper)
    assert np.all(np.diff(lower, axis=1) <= 0) and np.all(np.diff(upper, axis=1) >= 0)
    # An interval: every class inside passes the test, or lies between the anchor and one that does.
    for i, j in itertools.product(range(40), range(5)):
        inside = np.arange(lower[i, j], upper[i, j] + 1)
        passing = set(np.flatnonzero(S[i] <= q[j])) | {anchor[i]}
        assert passing <= set(inside)
        assert lower[i, j] in passing and upper[i, j] in passing
        if score == "aps":  # nested scores: the set is exactly the passing classes
            assert set(inside) == passing


def test_conformal_quantile_is_the_finite_sample_rank():
    scores = np.arange(1.0, 20.0)  # n = 19
    # ceil(20 * 0.9) = 18th smallest; ceil(20 * 0.95) = 19th
    np.testing.assert_array_equal(conformal_quantile(scores[::-1], [0.1, 0.05]), [18.0, 19.0])


@pytest.mark.parametrize("n, alpha, ok", [(8, 0.1, False), (9, 0.1, True), (18, 0.05, False),
                                          (19, 0.05, True), (3, 0.2, False), (4, 0.2, True)])
def test_too_few_calibration_rows_for_alpha_is_refused(n, alpha, ok):
    if ok:
        conformal_quantile(np.arange(float(n)), alpha)
    else:
        with pytest.raises(ValueError, match=r"too few for alpha.*n_cal >= 1/alpha - 1"):
            conformal_quantile(np.arange(float(n)), alpha)


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.5, np.nan, [0.1, 1.0], [], [[0.1]]])
def test_alpha_outside_the_open_unit_interval_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha"):
        check_alpha(alpha)


@pytest.mark.parametrize("alpha", [True, "0.1", [0.1, "0.2"], None])
def test_alpha_that_is_not_a_number_is_refused_not_converted(alpha):
    """True would otherwise be read as 1.0 and "0.1" as 0.1."""
    with pytest.raises(TypeError, match="alpha must be a number"):
        check_alpha(alpha)


@pytest.mark.parametrize("score", ["aps", "cdf"])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2])
def test_split_conformal_coverage_lies_in_its_guaranteed_band(score, alpha):
    """200 repetitions: calibration and test rows drawn from one distribution, scored by a
    deliberately miscalibrated model (over-confident, tempered probabilities).  The mean
    coverage must lie in [1 - alpha, 1 - alpha + 1/(n_cal + 1)] up to 3.5 standard errors."""
    rng = np.random.default_rng(int(alpha * 100) + len(score))
    K, n_cal, n_test, reps = 5, 99, 400, 200
    coverage = np.empty(reps)
    for r in range(reps):
        latent = rng.standard_normal((n_cal + n_test, K)) * 1.2
        true = np.exp(latent) / np.exp(latent).sum(axis=1, keepdims=True)
        y = (true.cumsum(axis=1) < rng.uniform(size=(n_cal + n_test, 1))).sum(axis=1)
        model = np.exp(2.5 * latent)  # over-confident: the sharpened probabilities
        model /= model.sum(axis=1, keepdims=True)
        anchor = model.argmax(axis=1)
        S = conformity_scores(model, anchor, score)
        cal_scores = S[np.arange(n_cal), y[:n_cal]]
        q = conformal_quantile(cal_scores, alpha)
        lower, upper = sets_from_scores(S[n_cal:], q, anchor[n_cal:])
        yt = y[n_cal:]
        coverage[r] = np.mean((lower[:, 0] <= yt) & (yt <= upper[:, 0]))
    se = coverage.std(ddof=1) / np.sqrt(reps)
    assert 1 - alpha - 3.5 * se <= coverage.mean() <= 1 - alpha + 1 / (n_cal + 1) + 3.5 * se
    # Without conformal calibration the over-confident model's own sets undercover.
    naive_lo, naive_hi = credible_windows(model[n_cal:], anchor[n_cal:], alpha)
    assert np.mean((naive_lo[:, 0] <= yt) & (yt <= naive_hi[:, 0])) < 1 - alpha - 0.05


def test_mondrian_thresholds_cover_every_class():
    """Per-class quantiles: each class's own coverage reaches 1 - alpha (the pooled ones
    leave the rare, hard class short)."""
    rng = np.random.default_rng(3)
    K, n, alpha = 4, 6000, 0.1
    latent = rng.standard_normal((n, K)) + np.array([1.5, 1.0, 0.5, -1.0])
    true = np.exp(latent) / np.exp(latent).sum(axis=1, keepdims=True)
    y = (true.cumsum(axis=1) < rng.uniform(size=(n, 1))).sum(axis=1)
    anchor = true.argmax(axis=1)
    S = conformity_scores(true, anchor, "aps")
    cal, test = np.arange(n // 2), np.arange(n // 2, n)
    cal_scores = S[cal, y[cal]]
    q = np.stack([conformal_quantile(cal_scores[y[cal] == k], alpha) for k in range(K)], axis=1)
    lower, upper = sets_from_scores(S[test], q, anchor[test])
    covered = (lower[:, 0] <= y[test]) & (y[test] <= upper[:, 0])
    for k in range(K):
        assert covered[y[test] == k].mean() >= 1 - alpha - 0.03


def test_credible_windows_are_the_shortest_intervals_with_enough_mass():
    rng = np.random.default_rng(5)
    K = 6
    P = _random_proba(rng, 200, K, concentration=0.7)
    anchor = rng.integers(0, K, size=200)
    alphas = np.array([0.05, 0.2, 0.5])
    lower, upper = credible_windows(P, anchor, alphas)
    for i, (j, a) in itertools.product(range(200), enumerate(alphas)):
        windows = [(lo, hi) for lo in range(K) for hi in range(lo, K)
                   if lo <= anchor[i] <= hi and P[i, lo:hi + 1].sum() >= 1 - a - 1e-12]
        shortest = min(hi - lo for lo, hi in windows)
        best_mass = max(P[i, lo:hi + 1].sum() for lo, hi in windows if hi - lo == shortest)
        assert upper[i, j] - lower[i, j] == shortest
        assert P[i, lower[i, j]:upper[i, j] + 1].sum() == pytest.approx(best_mass, abs=1e-12)
