"""SwappedPairsSVM: bad input, label handling, agreement with the functional core, real data."""

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from bayesord import OneClassWarning
from bayesord._rankpairs import RankPairsConfig, fit_rankpairs_linear
from bayesord.estimators._rankpairs import SwappedPairsSVM


def make_data(seed=0, n=30):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.digitize(X @ [1.0, -1.0, 0.5] + 0.5 * rng.normal(size=n), [-1, 0, 1])
    return X, y


def brute_swapped_rate(f, y):
    i, j = np.nonzero(y[:, None] > y[None, :])
    return np.mean(f[i] <= f[j])


def test_fit_matches_core_and_scores():
    X, y = make_data()
    model = SwappedPairsSVM(C=2.0, epsilon=1e-4).fit(X, y + 10)  # labels with an offset
    res = fit_rankpairs_linear(jnp.asarray(X), jnp.asarray(y), jnp.ones(30), 2.0, 1e-4, RankPairsConfig(n_ranks=4))
    np.testing.assert_allclose(model.coef_, res.coef, atol=1e-12)
    f = model.decision_function(X)
    np.testing.assert_allclose(model.score(X, y + 10), 1 - brute_swapped_rate(f, y), atol=1e-12)
    assert set(np.unique(model.predict(X))) <= {10, 11, 12, 13}
    assert model.converged_ and model.n_iter_ >= 1 and model.working_set_size_ >= 2
    assert np.all(np.diff(model.thresholds_) >= 0)


def test_string_labels_and_monotone_relabelling():
    X, y = make_data(1)
    names = np.array(["low", "mid", "high", "top"])
    a = SwappedPairsSVM(classes=list(names)).fit(X, names[y])
    b = SwappedPairsSVM().fit(X, np.array([1, 5, 6, 100])[y])
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-12)
    assert set(a.predict(X)) <= set(names)


def test_predict_thresholds_reproduce_class_shares():
    X, y = make_data(2, n=30)
    model = SwappedPairsSVM(C=10.0).fit(X, y)
    pred_counts = np.bincount(np.searchsorted(model.thresholds_, model.decision_function(X), side="right"),
                              minlength=4)
    np.testing.assert_array_equal(pred_counts, np.bincount(y, minlength=4))


def test_sparse_input_and_rbf():
    X, y = make_data(3)
    dense = SwappedPairsSVM().fit(X, y)
    sparse = SwappedPairsSVM().fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(dense.coef_, sparse.coef_, atol=1e-12)
    np.testing.assert_allclose(sparse.decision_function(sp.csr_matrix(X)), dense.decision_function(X), atol=1e-12)
    with pytest.raises(TypeError, match="dense"):
        SwappedPairsSVM(kernel="rbf").fit(sp.csr_matrix(X), y)
    rbf = SwappedPairsSVM(kernel="rbf", gamma=0.5).fit(X, y)
    assert rbf.basis_.shape == X.shape and rbf.score(X, y) > 0.8


def test_herbrich_option_uses_sampled_pairs():
    X, y = make_data(4)
    a = SwappedPairsSVM(pairs="herbrich", n_partners=3, random_state=0).fit(X, y)
    b = SwappedPairsSVM(pairs="herbrich", n_partners=3, random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.score(X, y) > 0.7


@pytest.mark.parametrize("kwargs, match", [
    (dict(C=0.0), "C must be"),
    (dict(C=-1.0), "C must be"),
    (dict(epsilon=0.0), "epsilon must be"),
    (dict(kernel="rbf", gamma=0.0), "gamma must be"),
    (dict(kernel="poly"), "kernel must be"),
    (dict(capacity=1), "capacity must be"),
    (dict(pairs="some"), "pairs must be"),
])
def test_bad_parameters(kwargs, match):
    X, y = make_data()
    with pytest.raises(ValueError, match=match):
        SwappedPairsSVM(**kwargs).fit(X, y)


def test_bad_input():
    X, y = make_data()
    with pytest.raises(ValueError, match="at least 2"):
        SwappedPairsSVM().fit(X, np.zeros(30))
    with pytest.raises(ValueError, match="at least 2"):
        SwappedPairsSVM().fit(X, y, sample_weight=(y == 1).astype(float))
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SwappedPairsSVM().fit(Xn, y)
    with pytest.raises(ValueError, match="different lengths"):
        SwappedPairsSVM().fit(X, y[:-1])
    model = SwappedPairsSVM().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :2])
    with pytest.raises(ValueError, match="not in classes"):
        model.score(X, y + 7)


def test_capacity_warns():
    X, y = make_data(5)
    y = np.random.default_rng(0).permutation(y)
    with pytest.warns(ConvergenceWarning):
        model = SwappedPairsSVM(C=100.0, epsilon=1e-4, capacity=3).fit(X, y)
    assert not model.converged_


def test_all_tied_scores():
    X = np.zeros((30, 3))
    y = np.arange(30) % 4
    with pytest.warns(OneClassWarning, match="predicts 3 for every one of its 30 training rows"):
        model = SwappedPairsSVM().fit(X, y)
    assert model.converged_
    assert model.score(X, y) == 0.0  # every pair tied: all swapped by Eq. (1)
    assert model.predict(X).shape == (30,)


def test_dataframe_feature_names():
    X, y = make_data(6)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    model = SwappedPairsSVM().fit(df, y)
    with pytest.raises(ValueError, match="feature names"):
        model.predict(df[["b", "a", "c"]])


@pytest.mark.slow
def test_real_data_machine_cpu(datasets_dir):
    """Gaussian kernel on machine_cpu (paper split 150/59): test swapped pairs near the paper's 13.96 %."""
    data = pd.read_csv(datasets_dir / "machine_cpu.csv.gz")
    X = data.drop(columns="y").to_numpy(float)
    y = data["y"].to_numpy()
    rng = np.random.default_rng(0)
    rates = []
    for _ in range(3):
        perm = rng.permutation(len(y))
        tr, te = perm[:150], perm[150:]
        mu, sd = X[tr].mean(0), X[tr].std(0)
        model = SwappedPairsSVM(kernel="rbf", C=10.0, gamma=0.1).fit((X[tr] - mu) / sd, y[tr])
        f = model.decision_function((X[te] - mu) / sd)
        rates.append(brute_swapped_rate(f, y[te]))
    assert 100 * np.mean(rates) < 18.0
