"""Padded-row layout (bayesord._sparse): conversion and products against scipy.sparse."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import bayesord._sparse as sparse_mod
from bayesord._sparse import (
    PaddedRows,
    as_rows,
    padding_ratio,
    rmatvec,
    row_axpy,
    row_dot,
    row_dots,
    row_sq_norms,
    to_padded_rows,
)

N, D = 12, 7
TOL = {np.float32: 1e-5, np.float64: 1e-12}


def _csr(dtype=np.float64, seed=0):
    """Random CSR with empty rows (0, 5) and a row holding every column (3)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(N, D)) * (rng.random((N, D)) < 0.3)
    A[[0, 5]] = 0.0
    A[3] = rng.normal(size=D) + 3.0  # no zeros
    return sp.csr_matrix(A.astype(dtype))


def _densify(P):
    """Rebuild the dense matrix from the layout with NumPy (duplicates would add up)."""
    idx, val = np.asarray(P.indices), np.asarray(P.values)
    out = np.zeros(P.shape, val.dtype)
    np.add.at(out, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.ravel()), val.ravel())
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layout_matches_scipy(dtype):
    X = _csr(dtype)
    P = to_padded_rows(X)
    lengths = np.diff(X.indptr)
    assert P.shape == X.shape and P.n_features == D
    assert P.values.dtype == dtype and P.indices.dtype == jnp.int32
    assert P.indices.shape == (N, D)  # the full row sets the width
    np.testing.assert_array_equal(_densify(P), X.toarray())
    # the padding after each row's entries is column 0 with value 0
    pad = np.arange(D)[None, :] >= lengths[:, None]
    assert np.all(np.asarray(P.indices)[pad] == 0) and np.all(np.asarray(P.values)[pad] == 0)
    assert np.all(np.asarray(P.values)[[0, 5]] == 0)
    ref = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    np.testing.assert_allclose(P.sq_norms, ref, rtol=TOL[dtype])
    assert padding_ratio(P) == pytest.approx(N * D / X.nnz)


def test_duplicates_summed_unsorted_and_other_formats():
    X = _csr()
    # every entry stored twice as halves, each row's entries in reverse column order
    indptr, indices, data = [0], [], []
    for i in range(N):
        sl = slice(X.indptr[i], X.indptr[i + 1])
        indices += list(np.r_[X.indices[sl], X.indices[sl]][::-1])
        data += list(np.r_[X.data[sl], X.data[sl]][::-1] / 2)
        indptr.append(len(indices))
    messy = sp.csr_matrix((np.array(data), np.array(indices), np.array(indptr)), shape=X.shape)
    assert not messy.has_canonical_format
    ref = to_padded_rows(X)
    for Y in (messy, X.tocsc(), X.tocoo(), sp.csr_array(X)):
        P = to_padded_rows(Y)
        np.testing.assert_array_equal(P.indices, ref.indices)  # summed and sorted
        np.testing.assert_allclose(P.values, ref.values, atol=1e-15)
        np.testing.assert_allclose(P.sq_norms, ref.sq_norms, atol=1e-12)
    assert messy.nnz == 2 * X.nnz  # the caller's matrix is left as it was


def test_bias_multiple_and_dense_input():
    X = _csr()
    P = to_padded_rows(X, bias=2.5, multiple=4)
    assert P.shape == (N, D + 1) and P.indices.shape[1] == 8  # 7 + 1 rounded up to 8
    np.testing.assert_array_equal(_densify(P), np.hstack([X.toarray(), np.full((N, 1), 2.5)]))
    Pd = to_padded_rows(X.toarray(), bias=2.5)
    assert Pd.shape == P.shape
    np.testing.assert_array_equal(_densify(Pd), _densify(P))
    np.testing.assert_allclose(Pd.sq_norms, P.sq_norms, rtol=1e-14)
    assert to_padded_rows(X, multiple=32).indices.shape[1] == 32


def test_dtype_rules_and_empty_inputs():
    assert to_padded_rows(_csr(np.float32)).dtype == np.float32
    assert to_padded_rows(sp.csr_matrix(np.eye(3, dtype=np.int64))).dtype == np.float64  # x64 on
    assert to_padded_rows(_csr(), dtype=np.float32).dtype == np.float32
    assert to_padded_rows([[1, 0], [0, 2]]).dtype == np.float64
    E = to_padded_rows(sp.csr_matrix((0, 4)))
    assert E.shape == (0, 4) and E.indices.shape == (0, 1)
    Z = to_padded_rows(sp.csr_matrix((3, 4)))
    assert Z.indices.shape == (3, 1) and not np.any(np.asarray(Z.values))
    np.testing.assert_array_equal(rmatvec(Z, jnp.ones(3)), np.zeros(4))


@pytest.mark.parametrize("bad, err, match", [
    ("abc", TypeError, "numeric"),
    ([["a", "b"]], TypeError, "numeric"),
    (None, TypeError, "numeric"),
    (np.array([[1, object()]], dtype=object), TypeError, "numeric"),
    (np.ones((2, 2), complex), TypeError, "real"),
    (sp.csr_matrix(np.ones((2, 2), complex)), TypeError, "real"),
    (np.ones(3), ValueError, "2-D"),
    (np.ones((2, 2, 2)), ValueError, "2-D"),
])
def test_bad_input(bad, err, match):
    with pytest.raises(err, match=match):
        to_padded_rows(bad)


def test_bad_options():
    X = _csr()
    with pytest.raises(TypeError, match="floating"):
        to_padded_rows(X, dtype=np.int32)
    for m in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="multiple"):
            to_padded_rows(X, multiple=m)
    with pytest.raises(TypeError, match="already PaddedRows"):
        to_padded_rows(to_padded_rows(X))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dense", [False, True])
def test_products_match_scipy(dtype, dense):
    X = _csr(dtype, seed=1)
    A = X.toarray()
    rows = jnp.asarray(A) if dense else to_padded_rows(X)
    rng = np.random.default_rng(2)
    w = rng.normal(size=D).astype(dtype)
    W = rng.normal(size=(3, D)).astype(dtype)
    u = rng.normal(size=N).astype(dtype)
    tol = TOL[dtype]
    np.testing.assert_allclose(row_dots(rows, jnp.asarray(w)), X @ w, rtol=tol, atol=tol)
    np.testing.assert_allclose(row_dots(rows, jnp.asarray(W)), (X @ W.T), rtol=tol, atol=tol)
    if not dense:  # several vectors in blocks of rows (here 5 rows per block, the last short)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sparse_mod, "BLOCK_ENTRIES", 15 * rows.values.shape[1])
            np.testing.assert_allclose(row_dots(rows, jnp.asarray(W)), (X @ W.T), rtol=tol, atol=tol)
    np.testing.assert_allclose(rmatvec(rows, jnp.asarray(u)), X.T @ u, rtol=tol, atol=tol)
    np.testing.assert_allclose(row_sq_norms(rows), np.asarray(X.multiply(X).sum(1)).ravel(),
                               rtol=tol, atol=tol)
    for i in (0, 3, 7):  # an empty row, the full row, an ordinary one
        x = A[i]
        np.testing.assert_allclose(row_dot(rows, i, jnp.asarray(w)), w @ x, rtol=tol, atol=tol)
        np.testing.assert_allclose(row_dot(rows, i, jnp.asarray(W)), W @ x, rtol=tol, atol=tol)
        np.testing.assert_allclose(row_axpy(rows, i, jnp.asarray(w), dtype(0.5)), w + 0.5 * x,
                                   rtol=tol, atol=tol)
        c = np.array([1.0, -2.0, 0.25], dtype)
        np.testing.assert_allclose(row_axpy(rows, i, jnp.asarray(W), jnp.asarray(c)),
                                   W + c[:, None] * x[None, :], rtol=tol, atol=tol)
    assert row_dots(rows, jnp.asarray(w)).dtype == dtype
    assert rmatvec(rows, jnp.asarray(u)).dtype == dtype


def test_pytree_under_jit_and_scan():
    X = _csr()
    P = to_padded_rows(X)
    assert len(jax.tree_util.tree_leaves(P)) == 3

    @jax.jit
    def f(P, u):
        # n_features is static, so it can size an array inside jit.
        z = jnp.zeros(P.n_features) + rmatvec(P, u)
        return jax.lax.fori_loop(0, P.shape[0], lambda i, w: row_axpy(P, i, w, u[i]), z)

    u = jnp.asarray(np.random.default_rng(3).normal(size=N))
    np.testing.assert_allclose(f(P, u), 2 * (X.T @ np.asarray(u)), atol=1e-12)
    doubled = jax.tree_util.tree_map(lambda a: a, P)
    assert isinstance(doubled, PaddedRows) and doubled.n_features == D


def test_as_rows_keeps_sparse_input_sparse_and_casts_dense():
    A = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    P = as_rows(sp.csr_matrix(A), np.float32)
    assert isinstance(P, PaddedRows) and P.dtype == np.float32 and P.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(row_dots(P, jnp.ones(3, np.float32))), A.sum(1))
    D = as_rows(A.astype(int), np.float32)
    assert not isinstance(D, PaddedRows) and D.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(D), A)
