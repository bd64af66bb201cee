"""``set_output(transform="pandas")``: predictions as pandas objects labelled by class and
indexed as the input, with the same values as the default NumPy outputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from bayesord import OrdinalMixed, OrdinalProbit, RedSVM


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(120, 3)) * [1.0, 5.0, 0.2] + [0.0, 100.0, 3.0], columns=["a", "b", "c"],
                     index=pd.Index(np.arange(500, 620), name="row"))
    latent = X["a"] + 0.1 * (X["b"] - 100) + rng.normal(size=120)
    y = pd.cut(latent, [-np.inf, -1, 0, 1, np.inf], labels=["poor", "fair", "good", "great"]).astype(str)
    return X, y.to_numpy(), ["poor", "fair", "good", "great"]


def test_probit_predictions_are_labelled_frames_with_the_same_values(data):
    X, y, classes = data
    plain = OrdinalProbit(classes=classes).fit(X, y)
    plain.calibrate(X, y, cv=3)
    model = clone(plain).fit(X, y)
    model.calibrate(X, y, cv=3)
    assert model.set_output(transform="pandas") is model
    rows = X.iloc[5:9]
    proba = model.predict_proba(rows)
    assert list(proba.columns) == [f"P(y={c})" for c in classes] and proba.index.equals(rows.index)
    np.testing.assert_array_equal(proba.to_numpy(), plain.predict_proba(rows))
    labels = model.predict(rows)
    assert isinstance(labels, pd.Series) and labels.index.equals(rows.index)
    np.testing.assert_array_equal(labels.to_numpy(), plain.predict(rows))
    cum = model.predict_cumproba(rows)
    assert list(cum.columns) == ["P(y<=poor)", "P(y<=fair)", "P(y<=good)"]
    np.testing.assert_array_equal(cum.to_numpy(), plain.predict_cumproba(rows))
    lower, upper, sd = model.predict_proba_interval(rows)
    for ours, theirs in zip((lower, upper, sd), plain.predict_proba_interval(rows)):
        assert list(ours.columns) == list(proba.columns)
        np.testing.assert_allclose(ours.to_numpy(), theirs)
    sets = model.predict_set(rows, 0.2)
    assert list(sets.columns) == ["lower", "upper"]
    np.testing.assert_array_equal(sets.to_numpy(), np.column_stack(plain.predict_set(rows, 0.2)))
    several = model.predict_set(rows, alpha=[0.1, 0.3])
    assert list(several.columns) == [(0.1, "lower"), (0.1, "upper"), (0.3, "lower"), (0.3, "upper")]
    np.testing.assert_array_equal(several[0.3].to_numpy(), np.column_stack(plain.predict_set(rows, 0.3)))
    np.testing.assert_allclose(model.predict_expected(rows).to_numpy(), plain.predict_expected(rows))
    # The library's own calls still get arrays: score reads predict, calibrate predict_proba.
    assert model.score(X, y) == plain.score(X, y)
    model.calibrate(X, y, cv=3)
    # NumPy rows get 0..n-1; "default" switches back; a clone keeps the setting, as
    # scikit-learn's clone keeps its own estimators' set_output.
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        assert model.predict_proba(rows.to_numpy()).index.equals(pd.RangeIndex(4))
    assert isinstance(clone(model).fit(X, y).predict(rows), pd.Series)
    assert isinstance(model.set_output(transform="default").predict(rows), np.ndarray)


@pytest.mark.slow
def test_margin_and_mixed_models_label_their_outputs(data):
    X, y, classes = data
    Xs = (X - X.mean()) / X.std()  # a margin model wants standardised columns
    svm = RedSVM(classes=classes).fit(Xs, y).set_output(transform="pandas")
    svm.calibrate(Xs, y, cv=3)
    proba = svm.predict_proba(Xs.iloc[:3])
    assert list(proba.columns) == [f"P(y={c})" for c in classes]
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    frame = X.assign(y=y, site=np.repeat(["s1", "s2", "s3", "s4"], 30))
    mixed = OrdinalMixed.from_formula("y ~ a + b + (1 | site)", frame, classes=classes)
    expected = mixed.predict_proba(frame.iloc[:3])
    mixed.set_output(transform="pandas")
    got = mixed.predict_proba(frame.iloc[:3])
    assert got.index.equals(frame.index[:3])
    np.testing.assert_array_equal(got.to_numpy(), expected)
    assert mixed.predict(frame.iloc[:3]).name == "prediction"


def test_bad_output_setting_is_refused(data):
    with pytest.raises(ValueError, match="transform='pandas' or 'default'"):
        OrdinalProbit().set_output(transform="polars")
