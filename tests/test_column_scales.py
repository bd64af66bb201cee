"""Column offsets and scales: the statistics, the warning every estimator gives, and its rule
(scales for every model, offsets for the models that do not centre the columns)."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from bayesord import (
    ISBOR,
    NPSVOR,
    SBOR,
    ColumnScaleWarning,
    CuSumRank,
    OrdinalProbit,
    PRank,
    RedSVM,
    SwappedPairsSVM,
    TransductiveOrdinalRegression,
)
from bayesord._validation import column_moments, column_scale_problems

RNG = np.random.default_rng(0)
Z = RNG.standard_normal((80, 3))
Z = (Z - Z.mean(axis=0)) / Z.std(axis=0)  # mean 0, sd 1: the scales below are exact
Y = np.digitize(Z @ [1.0, -1.0, 0.5], [-0.7, 0.7])

# The Bayesian models standardise their columns themselves: nothing to warn about.
STANDARDISING = [OrdinalProbit(), ISBOR(theta=1.0), SBOR(theta=1.0)]
# (estimator, whether its fit depends on column offsets)
ESTIMATORS = [
    (SwappedPairsSVM(), False),
    (NPSVOR(), True),
    (CuSumRank(), True),
    (PRank(), True),
    (RedSVM(), False),  # the unregularised intercept takes the offsets
    (RedSVM(fit_intercept=False), True),
    (TransductiveOrdinalRegression(), False),
]
IDS = [repr(e) for e, _ in ESTIMATORS]


def test_column_moments_dense_and_sparse_agree_with_numpy():
    X = Z.copy()
    X[RNG.random(X.shape) < 0.6] = 0.0
    X[:, 1] += 5.0
    X = np.column_stack([X, np.full(80, 0.1)])  # constant, with a mean that rounding misses
    for given in (X, sp.csr_matrix(X)):
        mean, sd, constant = column_moments(given)
        np.testing.assert_allclose(mean, X.mean(axis=0), rtol=1e-13)
        np.testing.assert_allclose(sd, X.std(axis=0), rtol=1e-12, atol=1e-15)
        assert constant.tolist() == [False, False, False, True]


def test_column_moments_of_a_huge_sparse_matrix_stay_sparse():
    """200,000 x 100,000 would take 160 GB dense; its statistics take the stored entries only."""
    rows, cols = RNG.integers(200_000, size=20_000), RNG.integers(100, size=20_000)
    X = sp.csr_matrix((RNG.standard_normal(20_000), (rows, cols)), shape=(200_000, 100_000))
    mean, sd, constant = column_moments(X)
    col = X[:, [7]].toarray().ravel()
    assert mean[7] == pytest.approx(col.mean()) and sd[7] == pytest.approx(col.std())
    assert not constant[:100].any() and constant[100:].all()


def test_well_scaled_columns_have_no_problem():
    assert column_scale_problems(Z) is None
    assert column_scale_problems(1e4 * Z + 50.0) is None  # one common unit is no problem


def test_scale_spread_names_the_smallest_and_the_largest_column():
    X = Z * [0.003, 1.0, 700.0]
    message = column_scale_problems(X)
    assert "'x0'" in message and "'x2'" in message and "differ by a factor of 2.3e+05" in message
    frame = pd.DataFrame(X, columns=["density", "pH", "sulfur"])
    message = column_scale_problems(frame.to_numpy(), names=frame.columns)
    assert "'density'" in message and "'sulfur'" in message and "'pH'" not in message


def test_offsets_are_named_and_skipped_for_sparse_input_or_on_request():
    X = Z + [0.0, 0.0, 1e5]
    assert "'x2' (1e+05)" in column_scale_problems(X)
    assert column_scale_problems(X, offsets=False) is None
    assert column_scale_problems(sp.csr_matrix(X)) is None  # not centred on purpose


def test_constant_columns_are_left_out_without_division_warnings():
    X = np.column_stack([Z, np.zeros(80), np.full(80, 1e6)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert column_scale_problems(X) is None
        assert column_scale_problems(np.ones((5, 2))) is None
        assert column_scale_problems(sp.csr_matrix(np.zeros((5, 2)))) is None
        assert "x2" in column_scale_problems(np.column_stack([Z[:, :2], 1e-4 * Z[:, 2], np.zeros(80)]))


@pytest.mark.parametrize("est, offsets", ESTIMATORS, ids=IDS)
def test_every_estimator_warns_about_scales_and_offsets_it_depends_on(est, offsets):
    frame = pd.DataFrame(Z * [1.0, 1.0, 1e-4], columns=["a", "b", "tiny"])
    expected = rf"{type(est).__name__}: column standard deviations .*'tiny'.*StandardScaler"
    with pytest.warns(ColumnScaleWarning, match=expected):
        est._validate_fit(frame, Y)
    shifted = pd.DataFrame(Z + [0.0, 1e5, 0.0], columns=["a", "far", "c"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est._validate_fit(shifted, Y)
    messages = [str(w.message) for w in caught if w.category is ColumnScaleWarning]
    assert len(messages) == int(offsets)
    assert all("'far' (1e+05)" in m and "`bayesord fit` does it by default" in m for m in messages)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est._validate_fit(Z, Y)  # standardised columns: nothing to say


@pytest.mark.parametrize("est", STANDARDISING, ids=lambda e: type(e).__name__)
def test_models_that_standardise_their_columns_do_not_warn(est):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est._validate_fit(Z * [1.0, 1e4, 1e-4] + [0.0, 1e5, 0.0], Y)


def test_a_fit_warns_at_the_callers_line_and_a_sparse_fit_for_scales_only():
    X = Z + [0.0, 0.0, 1e5]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NPSVOR(random_state=0).fit(X, Y)  # which also stops at its iteration cap here
    scale = [w for w in caught if w.category is ColumnScaleWarning]
    assert len(scale) == 1 and "'x2'" in str(scale[0].message) and scale[0].filename == __file__
    sparse = sp.csr_matrix(Z * [1.0, 1.0, 1e4])
    with pytest.warns(ColumnScaleWarning, match="differ by a factor") as caught:
        PRank(random_state=0).fit(sparse, Y)
    assert not any("mean" in str(w.message) for w in caught)


def test_a_precomputed_basis_is_not_a_table_of_columns():
    K = np.exp(-((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1))
    K[:, 0] *= 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ISBOR(kernel="precomputed", theta=1.0)._validate_fit(K, Y)
