"""The NPSVOR estimator: input checks, label handling, sparse input, status, Treebank targets."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from bayesord.estimators._npsvor import NPSVOR


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = np.digitize(X @ np.array([1.0, -1.0, 0.5, 0.0]) + 0.3 * rng.normal(size=60), [-0.7, 0.7])
    return X, y


@pytest.mark.parametrize("kwargs, err", [
    (dict(C=0.0), ValueError), (dict(C=-1.0), ValueError), (dict(C1=0.0), ValueError),
    (dict(C2=-2.0), ValueError), (dict(C=np.inf), ValueError), (dict(epsilon=-0.1), ValueError),
    (dict(tol=0.0), ValueError), (dict(solver="sgd"), ValueError),
    (dict(predictor="mid"), ValueError), (dict(C="1"), TypeError),
    (dict(max_iter=0), ValueError), (dict(Cs=[1.0, -1.0]), ValueError),
    (dict(Cs=[1.0], C1=2.0), ValueError), (dict(Cs=[1.0], cv=1), ValueError),
])
def test_bad_parameters_rejected(data, kwargs, err):
    X, y = data
    with pytest.raises(err):
        NPSVOR(**kwargs).fit(X, y)


@pytest.mark.parametrize("kwargs, name", [(dict(C="abc"), "C"), (dict(C1="abc"), "C1"),
                                          (dict(C=2.0, C2=-1.0), "C2"), (dict(C=-1.0, C1=2.0), "C")])
def test_a_bad_penalty_is_named_as_given(data, kwargs, name):
    """`--param C=abc` was answered "C1 must be a real number": C1 and C2 default to C."""
    with pytest.raises((TypeError, ValueError), match=rf"^{name} must be"):
        NPSVOR(**kwargs).fit(*data)


def test_bad_data_rejected(data):
    X, y = data
    with pytest.raises(ValueError, match="NaN"):
        NPSVOR().fit(np.where(np.arange(60)[:, None] == 3, np.nan, X), y)
    with pytest.raises(ValueError, match="different lengths"):
        NPSVOR().fit(X, y[:-1])
    with pytest.raises(ValueError, match="1 class with positive weight"):
        NPSVOR().fit(X, np.zeros(60))
    model = NPSVOR(random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :3])
    with pytest.raises(ValueError, match="not in classes"):
        model.score(X, y + 7)


def test_fit_attributes_and_labels_map_back(data):
    X, y = data
    labels = np.array(["low", "mid", "high"])
    model = NPSVOR(random_state=0, classes=["low", "mid", "high"]).fit(X, labels[y])
    assert model.coef_.shape == (3, 4) and model.intercept_.shape == (3,)
    assert model.n_iter_.shape == (3,) and np.all(model.converged_)
    assert np.all(model.duality_gap_ >= -1e-8)
    pred = model.predict(X)
    assert set(pred) <= set(labels)
    assert model.decision_function(X).shape == (60, 3)
    F = X @ model.coef_.T + model.intercept_
    np.testing.assert_allclose(model.decision_function(X), F, atol=1e-10)
    np.testing.assert_array_equal(pred, labels[np.sum(F[:, :-1] + F[:, 1:] > 0, axis=1)])
    np.testing.assert_array_equal(model.predict(X, predictor="old"),
                                  labels[np.argmin(np.abs(F), axis=1)])
    assert model.score(X, labels[y]) == pytest.approx(-np.mean(np.abs(np.sum(F[:, :-1] + F[:, 1:] > 0, axis=1) - y)))


def test_monotone_relabelling_gives_the_same_fit(data):
    X, y = data
    a = NPSVOR(random_state=0).fit(X, y)
    b = NPSVOR(random_state=0).fit(X, np.array([10, 20, 35])[y])
    np.testing.assert_allclose(a.coef_, b.coef_)
    np.testing.assert_array_equal(np.array([10, 20, 35])[a.predict(X)], b.predict(X))


def test_sparse_input_equals_dense(data):
    X, y = data
    a = NPSVOR(random_state=0, fit_intercept=False).fit(X, y)
    b = NPSVOR(random_state=0, fit_intercept=False).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-10)
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(sp.csr_matrix(X)),
                               atol=1e-10)


def test_max_iter_warns(data):
    X, y = data
    with pytest.warns(ConvergenceWarning, match="NPSVOR"):
        model = NPSVOR(tol=1e-12, max_iter=2, random_state=0).fit(X, y)
    assert not np.any(model.converged_)
    np.testing.assert_array_equal(model.n_iter_, 2)


@pytest.mark.slow
def test_cv_option_picks_from_grid(data):
    X, y = data
    model = NPSVOR(Cs=[0.1, 1.0, 10.0], cv=3, random_state=0).fit(X, y)
    assert model.C_ in (0.1, 1.0, 10.0)
    assert model.cv_results_["fold_mae"].shape == (3, 3)
    assert model.C_ == model.cv_results_["Cs"][np.argmin(model.cv_results_["mean_mae"])]


def _treebank(datasets_dir):
    from bayesord.datasets import load_libsvm

    tb = datasets_dir / "treebank"
    Xtr, ytr = load_libsvm(tb / "treebank.train", n_features=8569)
    Xte, yte = load_libsvm(tb / "treebank.test", n_features=8569)
    return Xtr, ytr.astype(int), Xte, yte.astype(int)


def test_treebank_mae_without_bias(datasets_dir):
    """Issue target: C = 1, tol 0.1, no bias: test MAE <= 0.830 (C++ reference 0.824)."""
    Xtr, ytr, Xte, yte = _treebank(datasets_dir)
    model = NPSVOR(C=1.0, fit_intercept=False, random_state=0).fit(Xtr, ytr)
    mae_new = np.mean(np.abs(model.predict(Xte) - yte))
    mae_old = np.mean(np.abs(model.predict(Xte, predictor="old") - yte))
    assert mae_new <= 0.830
    assert mae_new <= mae_old


@pytest.mark.slow
def test_treebank_mae_with_bias(datasets_dir):
    """Issue target: with a bias feature, test MAE <= 0.790 (C++ reference 0.784)."""
    Xtr, ytr, Xte, yte = _treebank(datasets_dir)
    model = NPSVOR(C=1.0, fit_intercept=True, random_state=0).fit(Xtr, ytr)
    assert np.mean(np.abs(model.predict(Xte) - yte)) <= 0.790
