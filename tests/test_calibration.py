"""Calibration tools against hand computations and brute-force references."""

import numpy as np
import pytest
from scipy.stats import norm

from bayesord import calibration, metrics


def _random_proba(rng, n, K):
    return rng.dirichlet(np.ones(K), size=n)


def test_reliability_by_hand():
    y = np.array([0, 1, 2, 1])
    p = np.array([[0.7, 0.2, 0.1],
                  [0.3, 0.4, 0.3],
                  [0.1, 0.1, 0.8],
                  [0.5, 0.25, 0.25]])
    rel = calibration.reliability(y, p, n_bins=2, kind="cumulative")
    # P(y<=0) = .7 .3 .1 .5 -> bins (0,.5]: {.3,.1,.5} (outcomes 0,0,0); (.5,1]: {.7} (1).
    # P(y<=1) = .9 .7 .2 .75 -> (0,.5]: {.2} (0); (.5,1]: {.9,.7,.75} (1,1,1).
    assert rel.events == ["y<=0", "y<=1"]
    np.testing.assert_allclose(rel.count, [[3, 1], [1, 3]])
    np.testing.assert_allclose(rel.prob_mean, [[0.3, 0.7], [0.2, (0.9 + 0.7 + 0.75) / 3]])
    np.testing.assert_allclose(rel.freq, [[0.0, 1.0], [0.0, 1.0]])
    ece = calibration.calibration_error(y, p, n_bins=2, kind="cumulative", per_event=True)
    np.testing.assert_allclose(ece, [(3 * 0.3 + 1 * 0.3) / 4, (1 * 0.2 + 3 * (1 - 2.35 / 3)) / 4])


def test_class_events_and_empty_bins():
    y = np.array([0, 0, 1])
    p = np.array([[0.95, 0.05], [0.85, 0.15], [0.05, 0.95]])
    rel = calibration.reliability(y, p, n_bins=10, kind="class", classes=None)
    assert rel.events == ["y=0", "y=1"]
    # y=0 probabilities .95 (bin 9), .85 (bin 8), .05 (bin 0); outcomes 1, 1, 0.
    assert rel.count[0, 9] == 1 and rel.count[0, 8] == 1 and rel.count[0, 0] == 1
    assert np.isnan(rel.freq[0, 4])
    ece = calibration.calibration_error(y, p, n_bins=10, kind="class", per_event=True)
    np.testing.assert_allclose(ece, [(0.05 + 0.15 + 0.05) / 3, (0.05 + 0.15 + 0.05) / 3])


@pytest.mark.parametrize("kind,cum", [("top", False), ("cumulative", True)])
def test_ece_matches_metrics(kind, cum):
    rng = np.random.default_rng(1)
    p = _random_proba(rng, 500, 4)
    y = np.array([rng.choice(4, p=row) for row in p])
    ours = calibration.calibration_error(y, p, n_bins=7, kind=kind)
    assert ours == pytest.approx(metrics.ece(y, p, n_bins=7, cumulative=cum), abs=1e-12)


def test_calibrated_probabilities_have_small_ece_and_right_coverage():
    rng = np.random.default_rng(2)
    n, K = 20000, 5
    p = _random_proba(rng, n, K)
    u = rng.random(n)
    y = np.minimum((u[:, None] > np.cumsum(p, axis=1)).sum(axis=1), K - 1)
    assert calibration.calibration_error(y, p, kind="class") < 0.01
    assert calibration.calibration_error(y, p, kind="cumulative") < 0.01
    assert calibration.latent_interval_coverage(y, p, 0.9) == pytest.approx(0.9, abs=0.01)
    # Overconfident probabilities (sharpened) cover less than nominal.
    sharp = p ** 3 / np.sum(p ** 3, axis=1, keepdims=True)
    assert calibration.latent_interval_coverage(y, sharp, 0.9) < 0.85


def test_latent_interval_coverage_by_hand():
    p = np.array([[0.2, 0.6, 0.2], [0.5, 0.3, 0.2], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    y = np.array([1, 0, 1, 2])
    # level .5 -> [.25, .75].  Row 0: [.2,.8] -> .5/.6.  Row 1: [0,.5] -> .25/.5.
    # Row 2: [0,1] -> .5.  Row 3: class of probability 0 at F = 1, outside -> 0.
    cov = calibration.latent_interval_coverage(y, p, 0.5, pointwise=True)
    np.testing.assert_allclose(cov, [0.5 / 0.6, 0.5, 0.5, 0.0])
    assert calibration.latent_interval_coverage(y, p, 0.5) == pytest.approx(np.mean(cov))


def test_latent_interval_coverage_equals_latent_monte_carlo():
    """Brute force: sample the latent score from its predictive given the observed class."""
    rng = np.random.default_rng(3)
    b = np.array([-1.0, 0.2, 1.1])
    m = rng.normal(size=200)
    s = 1.3
    cdf = norm.cdf((b[None, :] - m[:, None]) / s)
    p = np.diff(np.concatenate([np.zeros((200, 1)), cdf, np.ones((200, 1))], axis=1), axis=1)
    y = rng.integers(0, 4, size=200)
    edges = np.concatenate([[-np.inf], b, [np.inf]])
    lo_u, hi_u = norm.cdf((edges[y] - m) / s), norm.cdf((edges[y + 1] - m) / s)
    u = lo_u[:, None] + (hi_u - lo_u)[:, None] * rng.random((200, 4000))
    z = m[:, None] + s * norm.ppf(u)
    q = norm.ppf(0.95)
    mc = np.mean(np.abs(z - m[:, None]) <= q * s, axis=1)
    ours = calibration.latent_interval_coverage(y, p, 0.9, pointwise=True)
    np.testing.assert_allclose(ours, mc, atol=0.03)


def test_interval_coverage():
    latent = np.array([0.0, 1.0, 2.0, -3.0])
    mean = np.zeros(4)
    sd = np.ones(4)
    # z(.8) = 1.2816: 0 and 1 inside, 2 and -3 outside.
    assert calibration.interval_coverage(latent, mean, sd, 0.8) == 0.5
    with pytest.raises(ValueError, match="level"):
        calibration.interval_coverage(latent, mean, sd, 1.5)
    with pytest.raises(ValueError, match="1-D"):
        calibration.interval_coverage(latent, mean[:3], sd, 0.9)


def test_bad_input():
    p = np.array([[0.5, 0.5], [0.2, 0.8]])
    with pytest.raises(ValueError, match="kind"):
        calibration.reliability([0, 1], p, kind="joint")
    with pytest.raises(ValueError, match="n_bins"):
        calibration.calibration_error([0, 1], p, n_bins=0)
    with pytest.raises(ValueError):
        calibration.calibration_error([0, 1], [[0.5, 0.6], [0.2, 0.8]])
    with pytest.raises(ValueError):
        calibration.latent_interval_coverage([0, 1, 1], p)


def test_plot_reliability():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(4)
    p = _random_proba(rng, 300, 3)
    y = np.array(["lo", "mid", "hi"])[rng.integers(0, 3, 300)]
    ax = calibration.plot_reliability(y, p, kind="cumulative", classes=["lo", "mid", "hi"])
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[0] == "perfect" and labels[1].startswith("y<=lo")
    plt.close("all")
