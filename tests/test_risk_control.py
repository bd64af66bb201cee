"""Conformal risk control for ordinal sets (``predict_set(..., risk=...)``).

References: the guarantee ``E[loss] <= alpha`` of Angelopoulos et al. (2024, Theorem 1),
checked by simulation from a known model; with the miss as the loss the procedure must
reproduce split conformal's sets on the calibration rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from bayesord import OrdinalProbit, load_model
from bayesord.uncertainty import (
    conformal_quantile,
    conformity_scores,
    risk_threshold,
    set_losses,
    sets_from_scores,
)

CUTS = np.array([-1.5, -0.5, 0.5, 1.5])  # 5 classes


def _draw(rng, n):
    """Rows of a probit model and a model's probabilities that are too sure (scale 0.6)."""
    f = rng.normal(size=n) * 1.5
    y = np.digitize(f + rng.normal(size=n), CUTS)
    cum = norm.cdf((CUTS[None, :] - f[:, None]) / 0.6)
    proba = np.diff(np.column_stack([np.zeros(n), cum, np.ones(n)]), axis=1)
    return proba, y


def test_the_miss_as_loss_reproduces_split_conformal_on_the_calibration_rows():
    rng = np.random.default_rng(0)
    proba, y = _draw(rng, 300)
    anchor = proba.argmax(axis=1)
    S = conformity_scores(proba, anchor, "aps")
    for alpha in (0.05, 0.1, 0.2):
        q_risk = risk_threshold(S, y, anchor, alpha, "coverage")
        q_conf = conformal_quantile(S[np.arange(300), y], alpha)
        for q in (q_risk, q_conf):
            assert q.shape == (1,)
        a = sets_from_scores(S, q_risk, anchor)
        b = sets_from_scores(S, q_conf, anchor)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("loss", ["distance", "weights"])
def test_the_expected_loss_is_controlled_by_simulation(loss):
    """400 repetitions of 100 calibration and 200 test rows: the mean test loss is at most
    alpha (within 3 standard errors), and not far below it (within 0.04)."""
    rng = np.random.default_rng(1)
    alpha = 0.1
    weights = np.array([1.0, 1.0, 1.0, 1.0, 4.0])
    chosen = "distance" if loss == "distance" else weights
    losses = []
    for _ in range(400):
        p_cal, y_cal = _draw(rng, 100)
        p_test, y_test = _draw(rng, 200)
        a_cal, a_test = p_cal.argmax(axis=1), p_test.argmax(axis=1)
        q = risk_threshold(conformity_scores(p_cal, a_cal, "aps"), y_cal, a_cal, alpha, chosen)
        lower, upper = sets_from_scores(conformity_scores(p_test, a_test, "aps"), q, a_test)
        losses.append(set_losses(lower[:, 0], upper[:, 0], y_test, chosen, 5).mean())
    losses = np.asarray(losses)
    se = losses.std() / np.sqrt(losses.size)
    assert losses.mean() <= alpha + 3 * se
    assert losses.mean() >= alpha - 0.04


@pytest.fixture(scope="module")
def calibrated():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(700, 3))
    y = np.digitize(X @ [1.0, -0.5, 0.3] + rng.normal(size=700), CUTS)
    model = OrdinalProbit().fit(X[:400], y[:400])
    model.calibrate(X[400:600], y[400:600])
    return model, X[600:], y[600:]


def test_estimator_sets_under_each_risk(calibrated, tmp_path):
    model, X, y = calibrated
    pred = model.predict(X)
    cover = model.predict_set(X, 0.1)
    near = model.predict_set(X, 0.1, risk="distance")
    weighted = model.predict_set(X, 0.1, risk={4: 5.0, 0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0})
    # A class the dict leaves out weighs 1 (as in class_weight), not 0 (a miss that costs nothing).
    for a, b in zip(model.predict_set(X, 0.1, risk={4: 5.0}), weighted):
        np.testing.assert_array_equal(a, b)
    for lower, upper in (cover, near, weighted):
        assert np.all((lower <= pred) & (pred <= upper))
    # A near miss costs little under the distance: its sets are no wider than coverage's.
    assert np.all(near[1] - near[0] <= cover[1] - cover[0]) and np.mean(near[1] - near[0]) < np.mean(cover[1] - cover[0])
    # Nested in alpha.
    lo, hi = model.predict_set(X, [0.05, 0.2], risk="distance")
    assert np.all((lo[:, 0] <= lo[:, 1]) & (hi[:, 1] <= hi[:, 0]))
    # The calibration travels with the model file.
    path = tmp_path / "m.npz"
    model.save(path)
    again = load_model(path).predict_set(X, 0.1, risk="distance")
    np.testing.assert_array_equal(again[0], near[0])
    np.testing.assert_array_equal(again[1], near[1])


def test_bad_risks_are_refused(calibrated):
    model, X, _ = calibrated
    with pytest.raises(ValueError, match="risk must be"):
        model.predict_set(X, 0.1, risk="width")
    with pytest.raises(ValueError, match="not in classes_"):
        model.predict_set(X, 0.1, risk={9: 1.0})
    with pytest.raises(ValueError, match="5 finite non-negative"):
        model.predict_set(X, 0.1, risk=[1.0, -1.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="mondrian"):
        model.predict_set(X, 0.1, risk="distance", mondrian=True)
    with pytest.raises(ValueError, match="too few for a risk of 0.001"):
        model.predict_set(X, 0.001, risk="distance")
