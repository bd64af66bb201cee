"""CuSumRank / PRank estimators: label handling, streaming, bad input, real data."""

import gzip
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from bayesord.estimators._perceptron import CuSumRank, PRank


def _data(seed=0, n=120, d=4, r=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)
    y = np.digitize(f, np.quantile(f, np.linspace(0, 1, r + 1)[1:-1]))
    return X, y


def test_labels_any_ordered_values_and_monotone_relabelling():
    X, y = _data()
    base = CuSumRank(random_state=0, max_epochs=3).fit(X, y)
    gapped = CuSumRank(random_state=0, max_epochs=3).fit(X, np.array([10, 20, 40, 80])[y])
    names = np.array(["low", "mid", "high", "top"])
    strings = CuSumRank(random_state=0, max_epochs=3).fit(X, names[y], classes=list(names))
    np.testing.assert_array_equal(gapped.coef_, base.coef_)
    np.testing.assert_array_equal(strings.coef_, base.coef_)
    np.testing.assert_array_equal(gapped.predict(X), np.array([10, 20, 40, 80])[base.predict(X)])
    np.testing.assert_array_equal(strings.predict(X), names[base.predict(X)])
    assert base.decision_function(X).shape == (len(y), 4)
    assert base.score(X, y) == -np.mean(np.abs(base.predict(X) - y))


def test_string_labels_need_an_order():
    X, y = _data()
    with pytest.raises(ValueError, match="classes"):
        CuSumRank().fit(X, np.array(["a", "b", "c", "d"])[y])


def test_partial_fit_streams_like_one_epoch_fit():
    X, y = _data(seed=1)
    one = CuSumRank(max_epochs=1, shuffle=False, averaged=True).fit(X, y)
    stream = CuSumRank(averaged=True)
    for start in range(0, len(y), 25):
        stream.partial_fit(X[start:start + 25], y[start:start + 25], classes=[0, 1, 2, 3])
    np.testing.assert_allclose(stream.coef_, one.coef_, atol=1e-12)
    np.testing.assert_allclose(stream.thresholds_, one.thresholds_, atol=1e-12)
    assert stream.n_steps_ == len(y)


@pytest.mark.parametrize("make", [CuSumRank, PRank])
def test_a_row_of_weight_zero_is_left_out_of_the_fit(make):
    """Weight 0 skips a row altogether: no update, no step of the average, no mistake
    counted; against the fit of the other rows (same order, no shuffle)."""
    X, y = _data(seed=4)
    keep = np.arange(len(y)) % 3 != 0
    weights = keep.astype(float)
    settings = dict(max_epochs=4, shuffle=False, averaged=True)
    zeroed = make(**settings).fit(X, y, sample_weight=weights)
    without = make(**settings).fit(X[keep], y[keep])
    np.testing.assert_allclose(zeroed.coef_, without.coef_, atol=1e-12)
    np.testing.assert_allclose(zeroed.thresholds_, without.thresholds_, atol=1e-12)
    np.testing.assert_array_equal(zeroed.mistakes_, without.mistakes_)
    np.testing.assert_allclose(zeroed.abs_error_, without.abs_error_)
    assert zeroed.n_steps_ == without.n_steps_ == 4 * keep.sum()


def test_partial_fit_bad_input():
    X, y = _data(seed=2)
    with pytest.raises(ValueError, match="classes"):
        CuSumRank().partial_fit(X, y)
    est = CuSumRank().partial_fit(X[:30], y[:30], classes=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="not in classes"):
        est.partial_fit(X[:5], np.array([0, 1, 7, 2, 3]))
    with pytest.raises(ValueError, match="differs"):
        est.partial_fit(X[:5], y[:5], classes=[0, 1, 2])
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:5, :3], y[:5])
    with pytest.raises(ValueError, match="linear"):
        CuSumRank(kernel="rbf").partial_fit(X, y, classes=[0, 1, 2, 3])


def test_declared_classes_may_be_missing_from_a_batch_but_not_from_fit():
    X, y = _data(seed=3)
    keep = y != 2
    est = CuSumRank().partial_fit(X[keep], y[keep], classes=[0, 1, 2, 3])
    assert est.decision_function(X).shape[1] == 4
    with pytest.raises(ValueError, match=r"classes \[2\] have no training samples; fit needs"):
        CuSumRank(max_epochs=2).fit(X[keep], y[keep], classes=[0, 1, 2, 3])


@pytest.mark.parametrize("kw,match", [
    (dict(algorithm="pa", delta=0.0), "delta"),
    (dict(algorithm="pa", delta=-1.0), "delta"),
    (dict(algorithm="adam"), "algorithm"),
    (dict(kernel="sigmoid"), "kernel"),
    (dict(margin=-0.5), "margin"),
    (dict(max_epochs=0), "max_epochs"),
    (dict(kernel="rbf", gamma=0.0), "gamma"),
])
def test_bad_parameters(kw, match):
    X, y = _data()
    with pytest.raises(ValueError, match=match):
        CuSumRank(**kw).fit(X, y)


def test_bad_data():
    X, y = _data()
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        CuSumRank().fit(Xn, y)
    with pytest.raises(ValueError, match="lengths"):
        CuSumRank().fit(X, y[:-1])
    with pytest.raises(ValueError, match="class"):
        CuSumRank().fit(X, np.zeros(len(y)))
    with pytest.raises(TypeError, match="dense"):
        CuSumRank(kernel="rbf").fit(sp.csr_matrix(X), y)
    est = CuSumRank(max_epochs=2).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        est.predict(X[:, :3])
    with pytest.raises(ValueError, match="not in classes"):
        est.score(X, y + 1)


def test_pa_with_zero_rows_stays_finite():
    X, y = _data(seed=4)
    X[::7] = 0.0
    est = CuSumRank(algorithm="pa", delta=0.5, fit_intercept=False, max_epochs=3).fit(X, y)
    assert np.all(np.isfinite(est.coef_))
    assert np.all(np.isfinite(est.decision_function(X)))


def test_sparse_input_equals_dense():
    X, y = _data(seed=5)
    X[np.abs(X) < 0.7] = 0.0
    d = CuSumRank(random_state=1, max_epochs=3).fit(X, y)
    s = CuSumRank(random_state=1, max_epochs=3).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(s.coef_, d.coef_, atol=1e-12)
    np.testing.assert_allclose(s.decision_function(sp.csr_matrix(X)), d.decision_function(X), atol=1e-12)


def test_stop_if_separated_warns_when_not_separated():
    X, y = _data(seed=6)
    y = np.random.default_rng(0).permutation(y)  # no linear rule fits shuffled labels
    with pytest.warns(ConvergenceWarning, match="CuSumRank"):
        est = CuSumRank(max_epochs=3, stop_if_separated=True, random_state=0).fit(X, y)
    assert not est.converged_ and est.n_iter_ == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CuSumRank(max_epochs=3, random_state=0).fit(X, y)  # a fixed epoch budget is no failure


def test_prank_estimator_threshold_rule():
    X, y = _data(seed=7)
    est = PRank(max_epochs=5, random_state=0).fit(X, y)
    assert est.coef_.shape == (X.shape[1],) and est.thresholds_[0] == -np.inf
    assert np.all(np.diff(est.thresholds_[1:]) >= 0)
    v = X @ est.coef_
    rule = np.array([max(k for k in range(4) if v[i] >= est.thresholds_[k]) for i in range(len(y))])
    np.testing.assert_array_equal(est.predict(X), rule)


def test_cusum_counting_predictor_and_kernel_attributes():
    X, y = _data(seed=8)
    est = CuSumRank(kernel="rbf", gamma=0.5, max_epochs=3, random_state=0).fit(X, y)
    assert est.dual_coef_.shape == (len(y), 4) and est.support_.shape == X.shape
    assert not hasattr(est, "coef_")
    inc = np.diff(est.decision_function(X), axis=1)
    np.testing.assert_array_equal(est.predict_counting(X), (inc >= 0).sum(1))


def test_real_data_toy_kernel_beats_linear_and_median(datasets_dir):
    """ORCA's toy set (2-D, 5 ranks, a non-linear rule): RBF CuSum must beat the linear one."""
    with gzip.open(datasets_dir / "toy.csv.gz", "rt") as fh:
        df = pd.read_csv(fh)
    X, y = df.drop(columns="y").to_numpy(float), df["y"].to_numpy()
    X = (X - X[:225].mean(0)) / X[:225].std(0)
    Xtr, ytr, Xte, yte = X[:225], y[:225], X[225:], y[225:]
    median = np.mean(np.abs(np.median(ytr) - yte))
    lin = CuSumRank(margin=1.0, max_epochs=20, random_state=0).fit(Xtr, ytr)
    rbf = CuSumRank(kernel="rbf", gamma=1.0, margin=1.0, max_epochs=20, random_state=0).fit(Xtr, ytr)
    mae_lin, mae_rbf = -lin.score(Xte, yte), -rbf.score(Xte, yte)
    assert mae_rbf < mae_lin < median


def test_unfitted_and_clone():
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    X, y = _data(seed=9)
    with pytest.raises(NotFittedError):
        CuSumRank().predict(X)
    est = CuSumRank(algorithm="pa", delta=0.3, max_epochs=2, random_state=0)
    twin = clone(est)
    assert twin.get_params() == est.get_params()
    np.testing.assert_array_equal(twin.fit(X, y).coef_, est.fit(X, y).coef_)
