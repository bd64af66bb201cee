"""RED-SVM (bayesord._redsvm, RedSVM): loss family, Eq. (9) against SciPy, kernels, estimator."""

import numpy as np
import jax
import jax.numpy as jnp
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from bayesord._redsvm import (
    LOSSES,
    RedSVMConfig,
    binary_loss,
    decision_scores,
    fit_kernel_map,
    fit_redsvm,
    kernel_matrix,
    ordinal_loss,
    predict_codes,
    transform_kernel_map,
)
from bayesord._sparse import to_padded_rows
from bayesord.estimators._tor import RedSVM


def np_margin_loss(m, loss):
    """Table II written independently in NumPy (as functions of the margin y^k a)."""
    return {
        "hinge": np.maximum(0, 1 - m),
        "squared_hinge": np.maximum(0, 1 - m) ** 2,
        "logistic": np.logaddexp(0, -m),
        "square": (1 - m) ** 2,
        "laplacian": np.abs(1 - m),
    }[loss]


def ext_labels(y, K):
    return np.where(y[:, None] > np.arange(K - 1)[None, :], 1.0, -1.0)


def small_problem(seed=0, n=15, d=2, K=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.digitize(X[:, 0] + 0.5 * rng.normal(size=n), np.linspace(-0.6, 0.6, K - 1))
    return X, y


def reference_eq9(X, y, c, K, loss, intercept=True):
    """Eq. (9) solved by SciPy: slack QP (SLSQP) for hinge/Laplacian, BFGS otherwise."""
    n, d = X.shape
    S = ext_labels(y, K)
    nv = d + K - 1 + 1

    def unpack(v):
        return v[:d], v[d:d + K - 1], (v[-1] if intercept else 0.0)

    def margins(v):
        w, th, b = unpack(v)
        return S * ((X @ w)[:, None] - th[None, :] - b)

    def primal(v):
        w, th, _ = unpack(v)
        return 0.5 * w @ w + 0.5 * th @ th + np.sum(c[:, None] * np_margin_loss(margins(v), loss))

    if loss in ("hinge", "laplacian"):
        nx = n * (K - 1)
        cc = np.repeat(c, K - 1)

        def obj(z):
            w, th, _ = unpack(z[:nv])
            return 0.5 * w @ w + 0.5 * th @ th + cc @ z[nv:]

        cons = [{"type": "ineq", "fun": lambda z: z[nv:] - (1 - margins(z[:nv]).ravel())}]
        if loss == "laplacian":
            cons.append({"type": "ineq", "fun": lambda z: z[nv:] + (1 - margins(z[:nv]).ravel())})
        bounds = [(None, None)] * nv + [(0, None)] * nx
        if not intercept:
            bounds[nv - 1] = (0, 0)
        z0 = np.concatenate([np.zeros(nv), 2 * np.ones(nx)])
        out = minimize(obj, z0, constraints=cons, bounds=bounds, method="SLSQP",
                       options=dict(maxiter=2000, ftol=1e-15))
        v = out.x[:nv]
    else:
        out = minimize(primal, np.zeros(nv), method="BFGS", options=dict(gtol=1e-11))
        v = out.x
    return v, primal(v)


# ----------------------------------------------------------------- loss family (Table II)


@pytest.mark.parametrize("loss", LOSSES)
def test_definition3_properties(loss):
    a = np.linspace(1e-3, 6.0, 400)
    l_pos_neg = np.asarray(binary_loss(jnp.asarray(-a), 1.0, loss))
    l_pos = np.asarray(binary_loss(jnp.asarray(a), 1.0, loss))
    assert np.all(l_pos_neg > l_pos)  # Def. 3 (1)
    b = np.linspace(-6, 6, 401)
    for s in (1.0, -1.0):  # Def. 3 (2)
        np.testing.assert_allclose(binary_loss(jnp.asarray(b), s, loss),
                                   binary_loss(jnp.asarray(-b), -s, loss), rtol=0, atol=1e-14)
    np.testing.assert_allclose(binary_loss(jnp.asarray(b), 1.0, loss), np_margin_loss(b, loss), atol=1e-12)


@pytest.mark.parametrize("loss", LOSSES)
def test_proposition4_definition1(loss):
    """The superimposed loss (Eq. 6) satisfies Def. 1 for every pair of adjacent classes."""
    rng = np.random.default_rng(1)
    K = 5
    for _ in range(20):
        theta = np.sort(rng.normal(scale=2.0, size=K - 1))
        b = rng.normal()
        h = rng.normal(scale=3.0, size=200)
        f = np.sum(h[:, None] - theta[None, :] - b > 0, axis=1)  # codes 0..K-1
        for yi in range(K - 1):
            li = np.asarray(ordinal_loss(jnp.asarray(h), jnp.asarray(theta), b, jnp.full(200, yi), loss))
            lj = np.asarray(ordinal_loss(jnp.asarray(h), jnp.asarray(theta), b, jnp.full(200, yi + 1), loss))
            assert np.all(li[f < yi + 1] < lj[f < yi + 1])  # property 1: f(x_j) < y_j
            assert np.all(li[f > yi] > lj[f > yi])  # property 2: f(x_i) > y_i


# ----------------------------------------------------------------- Eq. (9) vs SciPy


@pytest.mark.parametrize("intercept", [True, pytest.param(False, marks=pytest.mark.slow)])
@pytest.mark.parametrize("loss", LOSSES)
def test_linear_matches_scipy_reference(loss, intercept):
    X, y = small_problem()
    K = 3
    c = np.full(len(y), 2.0)
    c[:3] = 0.5  # unequal weights exercise the per-row c
    res = fit_redsvm(X, y, c, RedSVMConfig(K, loss, intercept), tol=1e-13)
    assert bool(res.converged)
    v_ref, p_ref = reference_eq9(X, y, c, K, loss, intercept)
    ours = np.concatenate([res.w, res.theta, [res.b]])
    assert float(res.objective) <= p_ref * (1 + 1e-9) + 1e-12
    assert float(res.objective) == pytest.approx(p_ref, rel=1e-8)
    # (w, theta) are unique (strongly convex part); b is unique here too
    np.testing.assert_allclose(ours[:-1], v_ref[:-1], atol=2e-4)
    if intercept:
        np.testing.assert_allclose(ours[-1], v_ref[-1], atol=2e-4)


@pytest.mark.slow
def test_sparse_rows_equal_dense():
    X, y = small_problem(seed=3, n=30, d=6, K=4)
    X[np.abs(X) < 0.7] = 0.0
    cfg = RedSVMConfig(4, "hinge")
    dense = fit_redsvm(X, y, np.ones(30), cfg, tol=1e-12)
    sparse = fit_redsvm(to_padded_rows(sp.csr_matrix(X)), y, np.ones(30), cfg, tol=1e-12)
    assert float(sparse.objective) == pytest.approx(float(dense.objective), rel=1e-9)
    np.testing.assert_allclose(sparse.w, dense.w, atol=1e-6)
    np.testing.assert_allclose(decision_scores(sparse.w, to_padded_rows(sp.csr_matrix(X))),
                               X @ np.asarray(sparse.w), atol=1e-12)


@pytest.mark.parametrize("loss", LOSSES)
def test_thresholds_ordered(loss):
    """Li & Lin: the optimal thresholds of Eq. (9) are ordered without a constraint.

    Same shapes and config as the reference test above, so no new compilation; the K = 5
    case is in the slow test below.
    """
    for seed in range(1, 6):
        X, y = small_problem(seed=seed)
        X[:, 0] *= 3.0  # strong signal: thresholds far apart, a disorder would show
        res = fit_redsvm(X, y, np.full(15, 3.0), RedSVMConfig(3, loss), tol=1e-10)
        assert np.all(np.diff(np.asarray(res.theta)) >= -1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("loss", LOSSES)
def test_thresholds_ordered_five_classes(loss):
    for seed in range(4):
        X, y = small_problem(seed=seed, n=40, d=3, K=5)
        res = fit_redsvm(X, y, np.full(40, 3.0), RedSVMConfig(5, loss), tol=1e-10)
        assert np.all(np.diff(np.asarray(res.theta)) >= -1e-8)


def test_predict_codes_eq3():
    theta = jnp.asarray([-1.0, 0.0, 2.0])
    h = jnp.asarray([-3.0, -0.5, 0.5, 5.0, 2.0])
    np.testing.assert_array_equal(predict_codes(h, theta, 0.0), [0, 1, 2, 3, 2])
    np.testing.assert_array_equal(predict_codes(h, theta, 1.0), [0, 0, 1, 3, 2])


@pytest.mark.slow
def test_vmap_over_C_equals_loop():
    X, y = small_problem(seed=2, n=20)
    cfg = RedSVMConfig(3, "squared_hinge")
    Cs = jnp.asarray([0.3, 3.0])
    one = [fit_redsvm(X, y, float(C) * np.ones(20), cfg, tol=1e-10) for C in Cs]
    batched = jax.vmap(lambda C: fit_redsvm(jnp.asarray(X), jnp.asarray(y), C * jnp.ones(20), cfg, tol=1e-10))(Cs)
    for i, r in enumerate(one):
        assert float(batched.objective[i]) == pytest.approx(float(r.objective), rel=1e-8)


# ----------------------------------------------------------------- kernels (Eq. 11)


def reference_dual_eq11(X, y, C, K, delta_p):
    """Eq. (11) with the raw perceptron kernel Delta_p - |x - x'| solved by SLSQP."""
    n = len(y)
    S = ext_labels(y, K).ravel()
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    Kx = delta_p - D
    E = np.eye(K - 1)
    Kext = np.kron(Kx, np.ones((K - 1, K - 1))) + np.kron(np.ones((n, n)), E)
    Q = (S[:, None] * S[None, :]) * Kext

    def negdual(a):
        return 0.5 * a @ Q @ a - a.sum()

    out = minimize(negdual, np.full(n * (K - 1), 0.1 * C), jac=lambda a: Q @ a - 1,
                   bounds=[(0, C)] * (n * (K - 1)),
                   constraints=[{"type": "eq", "fun": lambda a: a @ S, "jac": lambda a: S}],
                   method="SLSQP", options=dict(maxiter=3000, ftol=1e-15))
    a = out.x
    beta = (a * S).reshape(n, K - 1).sum(1)
    theta = -(a * S).reshape(n, K - 1).sum(0)
    h = -D @ beta  # h(x_i) up to a constant, which the intercept absorbs
    return -negdual(a), theta, h


@pytest.mark.parametrize("delta_p", [0.0, 5.0])
def test_perceptron_kernel_matches_dual_eq11(delta_p):
    X, y = small_problem(seed=4, n=12, d=2, K=3)
    C = 1.5
    dual_val, theta_ref, h_ref = reference_dual_eq11(X, y, C, 3, delta_p)
    kmap = fit_kernel_map(jnp.asarray(X), "perceptron")
    Z = transform_kernel_map(kmap, jnp.asarray(X), "perceptron")
    res = fit_redsvm(Z, y, np.full(12, C), RedSVMConfig(3, "hinge"), tol=1e-13)
    assert float(res.objective) == pytest.approx(dual_val, rel=1e-7)  # strong duality
    np.testing.assert_allclose(res.theta, theta_ref, atol=1e-4)
    h = np.asarray(Z @ res.w)
    np.testing.assert_allclose(h - h.mean(), h_ref - h_ref.mean(), atol=1e-4)


def test_kernel_map_exact_and_low_rank():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 3))
    for kind in ("perceptron", "rbf"):
        kmap = fit_kernel_map(jnp.asarray(X), kind, 0.5)
        Z = np.asarray(transform_kernel_map(kmap, jnp.asarray(X), kind))
        Kt = np.asarray(kernel_matrix(jnp.asarray(X), jnp.asarray(X), kind, 0.5, kmap.center))
        np.testing.assert_allclose(Z @ Z.T, Kt, atol=1e-8)
    # perceptron form: |a - z0| + |b - z0| - |a - b|, checked entrywise
    z0 = X.mean(0)
    ref = (np.linalg.norm(X - z0, axis=1)[:, None] + np.linalg.norm(X - z0, axis=1)[None, :]
           - np.linalg.norm(X[:, None] - X[None], axis=-1))
    np.testing.assert_allclose(kernel_matrix(jnp.asarray(X), jnp.asarray(X), "perceptron", center=jnp.asarray(z0)),
                               ref, atol=1e-7)
    # Nystrom with 40 of 60 landmarks: exact on the landmarks, close elsewhere
    kmap = fit_kernel_map(jnp.asarray(X[:40]), "rbf", 0.5)
    Z = np.asarray(transform_kernel_map(kmap, jnp.asarray(X), "rbf"))
    K_true = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_allclose((Z @ Z.T)[:40, :40], K_true[:40, :40], atol=1e-8)
    # the Nystrom residual K - Z Z^T is positive semidefinite (a Schur complement)
    assert np.linalg.eigvalsh(K_true - Z @ Z.T).min() > -1e-8


# ----------------------------------------------------------------- estimator


def data(seed=0, n=120):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.digitize(X @ np.array([1.5, -1.0, 0.0]) + 0.2 * rng.normal(size=n), [-1.0, 0.0, 1.0])
    return X, y


def test_estimator_accuracy_and_attributes():
    X, y = data()
    m = RedSVM(C=10.0).fit(X, y)
    Xt, yt = data(7)
    assert np.mean(m.predict(Xt) == yt) > 0.8
    assert m.thresholds_.shape == (3,) and np.all(np.diff(m.thresholds_) > 0)
    assert m.coef_.shape == (3,) and m.converged_ and m.n_iter_ > 0
    np.testing.assert_allclose(m.decision_function(X[:5]), X[:5] @ m.coef_, atol=1e-10)


def test_column_offsets_move_only_the_intercept():
    """With the unregularised intercept, Eq. (9) on x + c is Eq. (9) on x with b moved by
    w.c, so the offsets are not among the things a fit warns about (fit_intercept=False
    keeps the warning)."""
    X, y = data()
    shift = np.array([40.0, -7.0, 3.0])
    a = RedSVM(C=1.0).fit(X, y)
    b = RedSVM(C=1.0).fit(X + shift, y)
    assert a.converged_ and b.n_iter_ == a.n_iter_
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b.thresholds_, a.thresholds_ + shift @ a.coef_, rtol=1e-9)
    np.testing.assert_array_equal(b.predict(X + shift), a.predict(X))
    assert not RedSVM()._offset_sensitive and RedSVM(fit_intercept=False)._offset_sensitive


def test_estimator_labels_mapped_and_monotone_relabel():
    X, y = data(1)
    a = RedSVM(C=1.0).fit(X, y)
    b = RedSVM(C=1.0).fit(X, np.array([10, 20, 35, 90])[y])
    np.testing.assert_array_equal(np.array([10, 20, 35, 90])[a.predict(X)], b.predict(X))
    names = np.array(["low", "mid", "high", "top"])
    c = RedSVM(C=1.0).fit(X, names[y], classes=["low", "mid", "high", "top"])
    np.testing.assert_array_equal(c.predict(X), names[a.predict(X)])


def test_estimator_sparse_equals_dense():
    X, y = data(2)
    X[np.abs(X) < 0.5] = 0
    a = RedSVM(C=1.0, tol=1e-10).fit(X, y)
    b = RedSVM(C=1.0, tol=1e-10).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-6)
    np.testing.assert_array_equal(a.predict(X), b.predict(sp.csr_matrix(X)))


@pytest.mark.slow
def test_estimator_kernel_nystrom():
    X, y = data(3)
    m = RedSVM(C=1.0, kernel="perceptron", n_components=50, random_state=0).fit(X, y)
    Xt, yt = data(8)
    assert np.mean(m.predict(Xt) == yt) > 0.6
    assert m.coef_ is None and m.w_.shape == (50,)


def test_estimator_bad_input():
    X, y = data()
    with pytest.raises(ValueError, match="NaN"):
        RedSVM().fit(np.where(np.eye(120, 3) > 0, np.nan, X), y)
    with pytest.raises(ValueError, match="1 class with positive weight"):
        RedSVM().fit(X, np.zeros(120))
    with pytest.raises(ValueError, match="different lengths"):
        RedSVM().fit(X, y[:-1])
    with pytest.raises(ValueError, match="features"):
        RedSVM().fit(X, y).predict(X[:, :2])
    with pytest.raises(ValueError, match="loss"):
        RedSVM(loss="huber").fit(X, y)
    with pytest.raises(ValueError, match="C must"):
        RedSVM(C=-1).fit(X, y)
    with pytest.raises(TypeError, match="dense"):
        RedSVM(kernel="rbf").fit(sp.csr_matrix(X), y)
    with pytest.raises(ValueError, match="no natural order"):
        RedSVM().fit(X, np.array(["a", "b", "c", "d"])[y])


def test_a_fit_at_its_iteration_cap_names_columns_far_apart_in_scale():
    """RedSVM on a raw income beside an age stopped at its cap with near-uniform calibrated
    probabilities; the sd ratio (840) was below ColumnScaleWarning's 1,000, and the warning
    said nothing of the columns."""
    import pandas as pd
    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.default_rng(2)
    z = rng.normal(size=(200, 2))
    y = np.digitize(z[:, 0] + 0.5 * z[:, 1] + 0.5 * rng.normal(size=200), [-0.7, 0.7])
    raw = pd.DataFrame({"income": 5e4 + 1.5e4 * z[:, 0], "age": 45 + 18 * z[:, 1]})
    with pytest.warns(ConvergenceWarning, match=r"status MAX_ITER\); column standard deviations differ by a "
                                                r"factor of 7.9e\+02 \(from 18.6 for 'age' to 1.46e\+04 for "
                                                r"'income'; more than 10\): standardise the columns .* then if "
                                                r"need be a larger max_iter"):
        RedSVM(max_iter=2, tol=1e-12).fit(raw, y)
    with pytest.warns(ConvergenceWarning) as caught:
        RedSVM(max_iter=2, tol=1e-12).fit(z, y)
    message = str(caught[0].message)
    assert message.endswith("(status MAX_ITER); try a larger max_iter"), message
