"""Linear NPSVOR: solvers against an independent SciPy dual solve, KKT, predictors, data paths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp

from bayesord._npsvor import (
    NPSVORConfig,
    cv_npsvor,
    decision_values,
    fit_npsvor,
    predict_r_new,
    predict_r_old,
)
from bayesord._loops import permutation
from bayesord._sparse import to_padded_rows

N, D, P = 48, 5, 3
EPS = 0.1


def _data(seed=0, zero_rows=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    X[rng.random((N, D)) < 0.4] = 0.0
    X[:zero_rows] = 0.0
    y = np.digitize(X @ np.array([1.0, -0.5, 0.8, 0.0, 0.3]) + 0.4 * rng.normal(size=N),
                    [-0.4, 0.4])
    return X, y


def _augment(X, bias):
    return X if bias is None else np.hstack([X, np.full((X.shape[0], 1), bias)])


def _reference_dual(X, y, k, C1, C2, eps, weights=None):
    """Optimal value of the dual (6) for rank k, by L-BFGS-B on (beta, alpha+, alpha-).

    Returned with the sign of a lower bound on the primal (i.e. -min f_k).
    """
    n = X.shape[0]
    sw = np.ones(n) if weights is None else weights
    I = y == k
    yt = np.where(y > k, 1.0, -1.0)

    def f(z):
        beta, ap, am = z[:n], z[n:2 * n], z[2 * n:]
        coef = np.where(I, am - ap, yt * beta)
        w = coef @ X
        val = 0.5 * w @ w + eps * np.sum(np.where(I, ap + am, 0.0)) - np.sum(np.where(I, 0.0, beta))
        gw = X @ w
        grad = np.concatenate([np.where(I, 0.0, yt * gw - 1.0),
                               np.where(I, -gw + eps, 0.0), np.where(I, gw + eps, 0.0)])
        return val, grad

    ub = np.concatenate([np.where(I, 0.0, C2 * sw), np.where(I, C1 * sw, 0.0),
                         np.where(I, C1 * sw, 0.0)])
    z = so.minimize(f, np.zeros(3 * n), jac=True, method="L-BFGS-B",
                    bounds=list(zip(np.zeros(3 * n), ub)),
                    options=dict(ftol=1e-16, gtol=1e-12, maxiter=50000, maxfun=100000))
    return -z.fun


def _fit(X, y, solver, bias=1.0, tol=1e-9, C1=1.0, C2=1.0, block_size=8, key=0, **kw):
    E = to_padded_rows(X, bias=bias)
    cfg = NPSVORConfig(n_features=X.shape[1] + (bias is not None), solver=solver,
                       block_size=block_size, max_iter=20000, **kw)
    return fit_npsvor(E, y, P, C1, C2, EPS, tol, jax.random.key(key), cfg)


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.fixture(scope="module")
def reference(data):
    X, y = data
    return {bias: np.array([_reference_dual(_augment(X, bias), y, k, 1.0, 1.0, EPS)
                            for k in range(P)]) for bias in (None, 1.0)}


@pytest.mark.parametrize("solver", ["dcd1", "dcd2", "block"])
@pytest.mark.parametrize("bias", [None, 1.0])
def test_dual_optimum_matches_scipy(data, reference, solver, bias):
    X, y = data
    res = _fit(X, y, solver, bias=bias)
    assert np.all(np.asarray(res.converged)), res.status
    ref = reference[bias]
    np.testing.assert_allclose(res.dual, ref, rtol=1e-6)
    # strong duality: the primal objective of Eq. (4) reaches the same value
    np.testing.assert_allclose(res.primal, ref, rtol=1e-6)
    assert np.all(np.isfinite(res.coef))


def test_kkt_conditions_and_primal_dual_map(data):
    X, y = data
    res = _fit(X, y, "dcd2")
    Xa = _augment(X, 1.0)
    for k in range(P):
        I = y == k
        yt = np.where(y > k, 1.0, -1.0)
        a = np.asarray(res.alpha[k])
        w = np.asarray(res.coef[k])
        np.testing.assert_allclose(w, (yt * a) @ Xa, atol=1e-10)  # Eq. (19)
        f = Xa @ w
        tol = 1e-5
        m = yt * f  # margin of the hinge rows
        off = ~I
        assert np.all(m[off & (a <= 1e-12)] >= 1 - tol)
        assert np.all(m[off & (a >= 1 - 1e-12)] <= 1 + tol)
        free = off & (a > 1e-8) & (a < 1 - 1e-8)
        np.testing.assert_allclose(m[free], 1.0, atol=tol)
        # on I_k: alpha = 0 inside the tube, |alpha| = C1 outside, f = eps sign(alpha) on it
        assert np.all(np.abs(f[I & (a == 0)]) <= EPS + tol)
        inner = I & (np.abs(a) > 1e-8) & (np.abs(a) < 1 - 1e-8)
        np.testing.assert_allclose(np.abs(f[inner]), EPS, atol=tol)
        np.testing.assert_allclose(f[inner], EPS * np.sign(a[inner]), atol=tol)
        assert np.all(np.abs(f[I & (np.abs(a) >= 1 - 1e-12)]) >= EPS - tol)


def test_dcd1_pairs_are_complementary(data):
    """Eq. (8): alpha^+ alpha^- = 0 at the optimum of the n + |I| variable dual."""
    X, y = data
    res = _fit(X, y, "dcd1")
    am = np.asarray(res.alpha_minus)
    ap = np.asarray(res.alpha) + am
    in_I = y[None, :] == np.arange(P)[:, None]
    assert np.all(ap >= 0) and np.all(am >= 0)
    assert np.max(np.abs(ap * am)[in_I]) < 1e-10
    assert np.any(am[in_I] > 0) and np.any(ap[in_I] > 0)
    assert np.all(am[~in_I] == 0)


def test_dcd2_needs_fewer_updates_than_dcd1(data, reference):
    """The paper's Fig. 4 finding: same objective, fewer coordinate updates."""
    X, y = data
    r1 = _fit(X, y, "dcd1", tol=1e-6)
    r2 = _fit(X, y, "dcd2", tol=1e-6)
    for r in (r1, r2):
        np.testing.assert_allclose(r.dual, reference[1.0], rtol=1e-5)
    assert np.sum(r2.n_updates) < np.sum(r1.n_updates)


def test_all_zero_rows_are_finite_and_optimal(data, reference):
    X, y = data
    assert np.all(X[:2] == 0)
    for solver in ("dcd1", "dcd2", "block"):
        res = _fit(X, y, solver, bias=None)
        assert np.all(np.isfinite(res.alpha)) and np.all(np.isfinite(res.coef))
        # a zero hinge row sits at its upper bound, a zero tube row at 0
        a = np.asarray(res.alpha)[:, :2]
        in_I = y[None, :2] == np.arange(P)[:, None]
        np.testing.assert_array_equal(a, np.where(in_I, 0.0, 1.0))


def test_predictors_match_brute_force():
    rng = np.random.default_rng(3)
    F = rng.normal(size=(200, 5))
    F[:5] = 0.0  # ties: argmin takes the first, g_k = 0 is not a vote
    old = np.array([min(range(5), key=lambda k: (abs(row[k]), k)) for row in F])
    new = np.array([sum(1 for k in range(4) if row[k] + row[k + 1] > 0) for row in F])
    np.testing.assert_array_equal(predict_r_old(jnp.asarray(F)), old)
    np.testing.assert_array_equal(predict_r_new(jnp.asarray(F)), new)


def test_decision_values_match_dense_product(data):
    X, y = data
    rng = np.random.default_rng(1)
    W = rng.normal(size=(P, D + 1))
    F = decision_values(jnp.asarray(W), to_padded_rows(sp.csr_matrix(X), bias=2.0))
    np.testing.assert_allclose(F, _augment(X, 2.0) @ W.T, atol=1e-12)


def test_sparse_and_dense_give_the_same_model(data):
    X, y = data
    dense = _fit(X, y, "dcd2", tol=0.1)
    sparse = _fit(sp.csr_matrix(X), y, "dcd2", tol=0.1)
    np.testing.assert_allclose(sparse.coef, dense.coef, atol=1e-10)
    np.testing.assert_array_equal(sparse.n_updates, dense.n_updates)


def test_csr_duplicates_and_unsorted_indices_are_summed(data):
    X, y = data
    csr = sp.csr_matrix(X)
    # every stored value split into two halves stored as duplicates, each row reversed
    indptr, indices, values = [0], [], []
    for i in range(N):
        cols = csr.indices[csr.indptr[i]:csr.indptr[i + 1]]
        vals = csr.data[csr.indptr[i]:csr.indptr[i + 1]]
        indices += list(np.concatenate([cols, cols])[::-1])
        values += list(np.concatenate([vals, vals])[::-1] / 2)
        indptr.append(len(indices))
    messy = sp.csr_matrix((np.array(values), np.array(indices), np.array(indptr)), shape=X.shape)
    assert not messy.has_canonical_format
    E1, E2 = to_padded_rows(csr, bias=1.0), to_padded_rows(messy, bias=1.0)
    np.testing.assert_allclose(E2.sq_norms, E1.sq_norms, atol=1e-12)
    a = _fit(csr, y, "dcd2", tol=0.1)
    b = _fit(messy, y, "dcd2", tol=0.1)
    np.testing.assert_allclose(b.coef, a.coef, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["dcd2", "block"])
def test_chunks_and_unrolling_only_regroup_the_same_steps(data, solver):
    """Gathering a chunk of coordinates at once and unrolling must not change the solve."""
    X, y = data
    base = _fit(X, y, solver, tol=0.1, block_size=4)
    for chunk, unroll in ((1, 1), (5, 3), (16, 2)):
        other = _fit(X, y, solver, tol=0.1, block_size=4, chunk=chunk, unroll=unroll)
        np.testing.assert_allclose(other.coef, base.coef, atol=1e-12)
        np.testing.assert_allclose(other.alpha, base.alpha, atol=1e-12)
        np.testing.assert_array_equal(other.n_iter, base.n_iter)
        np.testing.assert_array_equal(other.n_updates, base.n_updates)


@pytest.mark.parametrize("x64", [True, False])
def test_pass_order_is_a_permutation(x64):
    with jax.enable_x64(x64):
        orders = [np.asarray(permutation(jax.random.key(k), n)) for k in (0, 1)
                  for n in (1, 2, 37, 1000)]
    for order in orders:
        np.testing.assert_array_equal(np.sort(order), np.arange(order.size))
    assert not np.array_equal(orders[3], orders[7])  # another key, another order
    assert not np.array_equal(orders[3], np.arange(1000))


def _grid_setup(data):
    X, y = data
    return X, y, to_padded_rows(X, bias=1.0), NPSVORConfig(n_features=D + 1), jax.random.key(5)


@pytest.mark.slow
def test_grid_equals_separate_fits(data):
    X, y, E, cfg, key = _grid_setup(data)
    Cs = jnp.array([0.25, 1.0, 4.0])
    grid = fit_npsvor(E, y, P, Cs, Cs, EPS, 0.1, key, cfg)
    assert grid.coef.shape == (3, P, D + 1)
    for i, c in enumerate(Cs):
        one = fit_npsvor(E, y, P, c, c, EPS, 0.1, key, cfg)
        np.testing.assert_allclose(grid.coef[i], one.coef, atol=1e-12)
        np.testing.assert_array_equal(grid.n_iter[i], one.n_iter)


@pytest.mark.slow
def test_jax_vmap_over_C_equals_loop(data):
    X, y, E, cfg, key = _grid_setup(data)
    Cs = jnp.array([0.25, 4.0])
    mapped = jax.vmap(lambda c: fit_npsvor(E, y, P, c, c, EPS, 0.1, key, cfg))(Cs)
    for i, c in enumerate(Cs):
        one = fit_npsvor(E, y, P, c, c, EPS, 0.1, key, cfg)
        np.testing.assert_allclose(mapped.coef[i], one.coef, atol=1e-12)


def test_sample_weight_is_exact(data):
    """A weight multiplies the row's C: weight 2 acts as a duplicated row, 0 as a dropped one."""
    X, y = data
    w = np.ones(N)
    w[5:10] = 2.0
    w[10:14] = 0.0
    E = to_padded_rows(X, bias=1.0)
    cfg = NPSVORConfig(n_features=D + 1, solver="dcd2", block_size=8, max_iter=20000)
    res = fit_npsvor(E, y, P, 1.0, 1.0, EPS, 1e-9, jax.random.key(0), cfg, sample_weight=w)
    rows = np.concatenate([np.arange(N)[w > 0], np.arange(5, 10)])
    Xd = _augment(X[rows], 1.0)
    ref = [_reference_dual(Xd, y[rows], k, 1.0, 1.0, EPS) for k in range(P)]
    np.testing.assert_allclose(res.dual, ref, rtol=1e-6)
    assert np.all(np.asarray(res.alpha)[:, 10:14] == 0)


def test_cv_reports_a_class_missing_from_a_fold(data):
    X, y = data
    y = y.copy()
    y[y == 2] = 1
    y[0] = 2  # one example of the top class: absent from the training rows of its fold
    E = to_padded_rows(X, bias=1.0)
    cfg = NPSVORConfig(n_features=D + 1)
    with pytest.warns(UserWarning) as record:  # the fold helper also warns (1 row < 4 folds)
        cv = cv_npsvor(E, y, P, [0.5, 2.0], 4, EPS, 0.1, jax.random.key(0), cfg)
    assert any("no training rows" in str(w.message) for w in record)
    assert len(cv.missing) == 1 and cv.missing[0][1] == 2
    assert cv.fold_mae.shape == (2, 4) and np.all(np.isfinite(cv.fold_mae))
    assert cv.best_C in (0.5, 2.0)


def test_cv_fold_mae_matches_separate_fit(data):
    X, y = data
    E = to_padded_rows(X, bias=1.0)
    cfg = NPSVORConfig(n_features=D + 1)
    folds = np.arange(N) % 3
    cv = cv_npsvor(E, y, P, [0.5, 1.0], 3, EPS, 0.1, jax.random.key(2), cfg, folds=folds)
    whole = cv_npsvor(E, y, P, [0.5, 1.0], 3, EPS, 0.1, jax.random.key(2), cfg, folds=folds,
                      one_call=True)
    np.testing.assert_allclose(whole.fits.coef, cv.fits.coef, atol=1e-12)
    for f in range(3):
        tr = folds != f
        one = fit_npsvor(E, y, P, 1.0, 1.0, EPS, 0.1, jax.random.key(2), cfg,
                         sample_weight=tr.astype(float))
        pred = np.asarray(predict_r_new(decision_values(one.coef, E)))
        np.testing.assert_allclose(cv.fold_mae[1, f], np.mean(np.abs(pred - y)[~tr]))


@pytest.mark.parametrize("bad", [dict(solver="sgd"), dict(block_size=0), dict(max_iter=0),
                                 dict(unroll=0), dict(chunk=0)])
def test_config_rejects_bad_settings(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        NPSVORConfig(n_features=3, **bad)
