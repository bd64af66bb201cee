"""Blocked kernel/basis evaluation against NumPy brute force."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesord._basis import (
    candidate_columns,
    check_gamma,
    check_kernel,
    kernel_matrix,
    kmeanspp_indices,
    resolve_gamma,
    sq_dists,
)


@pytest.fixture
def pts():
    rng = np.random.default_rng(0)
    return rng.normal(size=(7, 3)), rng.normal(size=(5, 3))


def test_rbf_linear_poly_match_numpy(pts):
    X, C = pts
    d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(sq_dists(jnp.asarray(X), jnp.asarray(C)), d2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kernel_matrix(X, C, 0.7, "rbf"), np.exp(-0.7 * d2), rtol=1e-12)
    np.testing.assert_allclose(kernel_matrix(X, C, 0.7, "linear"), X @ C.T, rtol=1e-12)
    np.testing.assert_allclose(kernel_matrix(X, C, 0.7, "poly", 3), (0.7 * X @ C.T + 1) ** 3, rtol=1e-12)


def test_sq_dists_never_negative():
    X = jnp.full((4, 2), 1e8) + jnp.arange(4.0)[:, None] * 1e-8
    assert float(jnp.min(sq_dists(X, X))) >= 0.0


def test_candidate_columns_kernel_and_precomputed(pts):
    X, _ = pts
    idx = jnp.array([4, 0, 2])
    np.testing.assert_allclose(candidate_columns(X, idx, 0.3), kernel_matrix(X, X[[4, 0, 2]], 0.3))
    B = np.arange(49.0).reshape(7, 7)
    np.testing.assert_array_equal(candidate_columns(B, idx, 0.3, "precomputed"), B[:, [4, 0, 2]])


def test_unknown_kernel_raises():
    with pytest.raises(ValueError, match="kernel must be one of"):
        check_kernel("laplacian")


def test_kmeanspp_distinct_and_spread():
    rng = np.random.default_rng(1)
    # three tight clusters: the first three picks must land in three different clusters
    X = np.concatenate([rng.normal(c, 0.01, size=(30, 2)) for c in (0.0, 10.0, 20.0)])
    idx = np.asarray(kmeanspp_indices(jnp.asarray(X), jax.random.PRNGKey(0), 3))
    assert len(set(idx.tolist())) == 3
    assert sorted((idx // 30).tolist()) == [0, 1, 2]
    idx = np.asarray(kmeanspp_indices(jnp.asarray(X), jax.random.PRNGKey(3), 90))
    assert sorted(idx.tolist()) == list(range(90))


@pytest.mark.parametrize("sparse", [False, True])
def test_gamma_scale_is_scikit_learns_svc_rule_on_raw_columns(sparse):
    """``gamma="scale"`` against scikit-learn's own: ``SVC(gamma="scale")._gamma`` after a
    fit on the same raw columns (means far from 0, mixed scales, half the entries zero)."""
    import scipy.sparse as sp
    from sklearn.svm import SVC

    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 4)) * np.array([1.0, 30.0, 0.01, 5.0]) + np.array([0.0, 500.0, 0.0, -2.0])
    X[rng.random(X.shape) < 0.5] = 0.0
    y = np.arange(40) % 2
    ref = SVC(gamma="scale").fit(X, y)._gamma
    given = sp.csr_matrix(X) if sparse else X
    assert resolve_gamma("scale", given) == pytest.approx(ref, rel=1e-12)
    assert resolve_gamma(None, given) == 0.25 and resolve_gamma(0.3, given) == 0.3
    assert resolve_gamma("scale", np.ones((5, 2))) == 1.0  # no spread: scikit-learn's 1


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "auto", True, [1.0]])
def test_gamma_must_be_positive_scale_or_none(bad):
    with pytest.raises(ValueError, match="gamma must be"):
        check_gamma(bad)
