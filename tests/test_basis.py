"""Blocked kernel/basis evaluation against NumPy brute force."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesord._basis import candidate_columns, check_kernel, kernel_matrix, kmeanspp_indices, sq_dists


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
