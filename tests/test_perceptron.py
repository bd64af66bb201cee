"""Functional core of CuSum Rank / PRank against literal NumPy transcriptions of the paper."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from bayesord import _perceptron as P
from bayesord._sparse import padding_ratio, to_padded_rows

# ---------------------------------------------------------------------------------------
# Independent references (ranks 1..r, the constant attribute -1 appended explicitly).


def _last_argmax(s):
    return len(s) - 1 - int(np.argmax(s[::-1]))


def ref_cusum(X, y, r, orders, algorithm="perceptron", delta=1.0, margin=0.0,
              averaged=False, intercept=True):
    """Fig. 1 / Fig. 2 of the paper line by line, with naive Collins averaging."""
    Xa = np.hstack([X, -np.ones((X.shape[0], 1))]) if intercept else X
    W = np.zeros((r, Xa.shape[1]))
    W_sum = np.zeros_like(W)
    steps = 0
    for order in orders:
        for i in order:
            x, yi = Xa[i], y[i] + 1
            s = np.cumsum(W @ x)
            s_aug = s + margin * np.abs(np.arange(1, r + 1) - yi)
            yhat = _last_argmax(s_aug) + 1
            if yhat != yi:
                lo, hi = min(yi, yhat), max(yi, yhat)
                sgn = np.sign(yi - yhat)
                if algorithm == "perceptron":
                    W[lo:hi] += sgn * x  # 0-based rows lo..hi-1 are ranks lo+1..hi
                elif x @ x > 0:
                    wbar = W[lo:hi].sum(0)
                    rho = (sgn * delta - wbar @ x) / (abs(yhat - yi) * (x @ x))
                    W[lo:hi] += rho * x
            W_sum += W
            steps += 1
    return W_sum / steps if averaged else W


def ref_prank(X, y, r, orders):
    """Crammer & Singer's PRank loop (thresholds b_1..b_{r-1}, b_r = +inf).

    C&S update a threshold when y_t (w.x - b_t) <= 0, which also fires on an exact tie
    that the prediction already gets right.  The structured form (Eq. 13-14) only moves
    on prediction mistakes, so this reference tests each threshold by the side the
    predictor itself uses (w.x >= b counts as above); ties only happen at the zero start.
    """
    w = np.zeros(X.shape[1])
    b = np.zeros(r - 1)
    for order in orders:
        for i in order:
            x, yi = X[i], y[i] + 1
            v = w @ x - b
            pred_above = v >= 0
            tau = np.zeros(r - 1)
            for t in range(1, r):
                yt = 1 if yi > t else -1
                if pred_above[t - 1] != (yt == 1):
                    tau[t - 1] = yt
            w += tau.sum() * x
            b -= tau
    return w, b


def _data(seed=0, n=60, d=4, r=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = X @ rng.normal(size=d) + 0.5 * rng.normal(size=n)
    y = np.digitize(f, np.quantile(f, np.linspace(0, 1, r + 1)[1:-1]))
    return X, y.astype(np.int32)


def _fit(X, y, r, epochs=3, **kw):
    hyper_kw = {k: kw.pop(k) for k in ("delta", "margin") if k in kw}
    cfg = P.PerceptronConfig(n_classes=r, n_epochs=epochs, shuffle=False, **kw)
    return P.fit_perceptron(jnp.asarray(X), y, cfg, hyper=P.make_hyper(**hyper_kw))


# ---------------------------------------------------------------------------------------
# The paper's examples and bounds.

D0_X = np.array([[0.0, 0.0, -1.0], [0.0, 1.0, -1.0], [1.0, 1.0, -1.0], [1.0, 0.0, -1.0]])
D0_Y = np.array([0, 1, 1, 2], np.int32)


def test_d0_cusum_separates_it_and_prank_cannot():
    cfg = P.PerceptronConfig(n_classes=3, n_epochs=200, shuffle=False, stop_if_separated=True,
                             fit_intercept=False)
    res = P.fit_perceptron(jnp.asarray(D0_X), D0_Y, cfg)
    assert bool(res.converged) and int(res.status) == 0
    assert int(res.mistakes[int(res.n_iter) - 1]) == 0
    assert np.array_equal(P.predict(P.decision_function(res, D0_X)), D0_Y)
    # PRank on z = (x1, x2) with learned thresholds (the -1 attribute is its b).
    cfg_p = P.PerceptronConfig(n_classes=3, model="prank", n_epochs=200, shuffle=False,
                               stop_if_separated=True)
    res_p = P.fit_perceptron(jnp.asarray(D0_X[:, :2]), D0_Y, cfg_p)
    assert not bool(res_p.converged) and int(res_p.n_iter) == 200
    assert np.all(np.asarray(res_p.mistakes) > 0)


def _separable_stream(rng, n, d, r, min_margin):
    """Rank-linearly-separable data (Eq. 6 with the sign taken as + for k <= y) and its margin."""
    u = rng.normal(size=d)
    U = u + 0.6 * rng.normal(size=(r - 1, d))  # independent (untied) directions
    b = np.sort(rng.normal(scale=0.5, size=r - 1))
    W = np.hstack([U, b[:, None]])
    W /= np.linalg.norm(W)
    X = rng.normal(size=(20 * n, d))
    Xa = np.hstack([X, -np.ones((X.shape[0], 1))])
    V = Xa @ W.T  # (m, r-1): w_k . x for k = 2..r
    pos = V > 0
    monotone = np.all(pos[:, :-1] >= pos[:, 1:], axis=1)
    ok = monotone & (np.abs(V).min(1) >= min_margin)
    Xa, V = Xa[ok][:n], V[ok][:n]
    y = (V > 0).sum(1).astype(np.int32)
    return Xa, y, np.abs(V).min(), np.linalg.norm(Xa, axis=1).max()


@pytest.mark.parametrize("algorithm", ["perceptron", "pa"])
def test_mistake_bounds_on_rank_separable_streams(algorithm):
    """Corollary 3 (sum |y - y_hat| <= R^2/delta^2) and Corollary 4 (PA mistakes <= R^2/delta^4)."""
    rng = np.random.default_rng(1)
    r, n, d = 4, 80, 3
    cfg = P.PerceptronConfig(n_classes=r, algorithm=algorithm, n_epochs=60, shuffle=True,
                             stop_if_separated=True, fit_intercept=False)
    checked = 0
    for s in range(25):
        Xa, y, delta, R = _separable_stream(rng, n, d, r, 0.05)
        if len(y) < n or len(np.unique(y)) < 2:
            continue
        res = P.fit_perceptron(jnp.asarray(Xa), y, cfg, key=jax.random.PRNGKey(s),
                               hyper=P.make_hyper(delta=delta))
        assert bool(res.converged), "a separable stream must be separated within the epochs"
        if algorithm == "perceptron":
            assert float(res.abs_error.sum()) <= R**2 / delta**2
        else:
            assert int(res.mistakes.sum()) <= R**2 / delta**4
        checked += 1
    assert checked >= 15


# ---------------------------------------------------------------------------------------
# Equality with the references.


@pytest.mark.parametrize("algorithm,margin,averaged,intercept", [
    ("perceptron", 0.0, False, True),
    ("perceptron", 0.0, True, False),
    ("perceptron", 1.5, False, False),
    ("perceptron", 1.5, True, True),
    ("pa", 0.0, False, False),
    ("pa", 0.0, True, True),
])
def test_cusum_matches_reference(algorithm, margin, averaged, intercept):
    X, y = _data()
    r = 4
    res = _fit(X, y, r, epochs=3, algorithm=algorithm, margin=margin, delta=0.7,
               averaged=averaged, fit_intercept=intercept)
    W = ref_cusum(X, y, r, [np.arange(len(y))] * 3, algorithm, 0.7, margin, averaged, intercept)
    np.testing.assert_allclose(res.coef, W[:, : X.shape[1]], atol=1e-10)
    if intercept:
        np.testing.assert_allclose(res.thresholds, W[:, -1], atol=1e-10)
    else:
        np.testing.assert_array_equal(res.thresholds, 0.0)
    assert np.all(np.asarray(res.coef[0]) == 0.0), "w_1 is the sentinel and never moves"


def test_online_counts_match_reference_predictions():
    X, y = _data(seed=3)
    r = 4
    res = _fit(X, y, r, epochs=1)
    Xa = np.hstack([X, -np.ones((len(y), 1))])
    W = np.zeros((r, Xa.shape[1]))
    mistakes, abs_err, updates = 0, 0, 0
    for i in range(len(y)):
        yhat = _last_argmax(np.cumsum(W @ Xa[i]))
        mistakes += yhat != y[i]
        abs_err += abs(yhat - y[i])
        if yhat != y[i]:
            updates += 1
            lo, hi = min(y[i], yhat), max(y[i], yhat)
            W[lo + 1: hi + 1] += np.sign(y[i] - yhat) * Xa[i]
    assert int(res.mistakes[0]) == mistakes == int(res.updates[0])
    assert float(res.abs_error[0]) == abs_err


def test_prank_matches_textbook_loop():
    X, y = _data(seed=2, r=5)
    res = _fit(X, y, 5, epochs=4, model="prank")
    w, b = ref_prank(X, y, 5, [np.arange(len(y))] * 4)
    np.testing.assert_allclose(res.coef[0], w, atol=1e-10)
    np.testing.assert_allclose(res.thresholds[1:], b, atol=1e-10)
    # PRank keeps its thresholds ordered (Crammer & Singer, Lemma 1).
    assert np.all(np.diff(np.asarray(res.thresholds[1:])) >= 0)
    # ...so its cumsum argmax is the threshold rule max{y : u.z >= b_y} (Eq. 11-12).
    v = X @ w
    rule = np.array([max([0] + [k for k in range(1, 5) if v[i] >= b[k - 1]]) for i in range(len(y))])
    assert np.array_equal(P.predict(P.decision_function(res, X)), rule)


@pytest.mark.parametrize("algorithm,averaged,margin", [("perceptron", False, 0.0),
                                                       ("perceptron", True, 1.0),
                                                       ("pa", True, 0.0)])
def test_linear_kernel_dual_equals_primal(algorithm, averaged, margin):
    X, y = _data(seed=4, n=40)
    cfg = P.PerceptronConfig(n_classes=4, algorithm=algorithm, averaged=averaged, n_epochs=3,
                             shuffle=True, kernel="linear")
    hyper = P.make_hyper(delta=0.5, margin=margin)
    key = jax.random.PRNGKey(7)
    prim = P.fit_perceptron(jnp.asarray(X), y, cfg, key=key, hyper=hyper)
    dual = P.fit_kernel_perceptron(jnp.asarray(X), y, cfg, key=key, hyper=hyper)
    np.testing.assert_allclose(dual.dual_coef.T @ X, prim.coef, atol=1e-9)
    np.testing.assert_allclose(dual.thresholds, prim.thresholds, atol=1e-9)
    Xt = np.random.default_rng(5).normal(size=(13, X.shape[1]))
    np.testing.assert_allclose(P.kernel_decision_function(dual, Xt, batch_size=5),
                               P.decision_function(prim, Xt), atol=1e-9)
    assert np.array_equal(dual.mistakes, prim.mistakes)


def test_rbf_kernel_scores_match_numpy_expansion():
    X, y = _data(seed=6, n=30)
    cfg = P.PerceptronConfig(n_classes=4, n_epochs=2, shuffle=False, kernel="rbf")
    hyper = P.make_hyper(gamma=0.3)
    res = P.fit_kernel_perceptron(jnp.asarray(X), y, cfg, hyper=hyper)
    Xt = np.random.default_rng(8).normal(size=(7, X.shape[1]))
    K = np.exp(-0.3 * ((Xt[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    inc = K @ np.asarray(res.dual_coef) - np.asarray(res.thresholds)
    inc[:, 0] = 0.0
    np.testing.assert_allclose(P.kernel_decision_function(res, Xt), np.cumsum(inc, 1), atol=1e-10)
    # The kernel and its width are read from the result; passing them again is deprecated,
    # and passing other values is an error.
    with pytest.warns(DeprecationWarning):
        np.testing.assert_allclose(P.kernel_decision_function(res, Xt, hyper, "rbf"), np.cumsum(inc, 1),
                                   atol=1e-10)
    with pytest.raises(ValueError, match="kernel='poly'"):
        P.kernel_decision_function(res, Xt, kernel="poly")
    with pytest.raises(ValueError, match="hyper"):
        P.kernel_decision_function(res, Xt, P.make_hyper(gamma=0.5))
    # Fig. 5 atom counting: perceptron coefficients are integers.
    A = np.asarray(res.dual_coef)
    assert np.array_equal(A, np.round(A)) and np.all(A[:, 0] == 0)


def test_counting_predictor_eq2():
    X, y = _data(seed=9)
    res = _fit(X, y, 4, epochs=2)
    S = np.asarray(P.decision_function(res, X))
    inc = np.diff(S, axis=1)  # w_k . x for k = 2..r
    expected = (inc >= 0).sum(1)
    assert np.array_equal(P.predict_counting(S), expected)


# ---------------------------------------------------------------------------------------
# Sparse rows, streaming, jit/vmap properties.


def test_sparse_ell_equals_dense():
    rng = np.random.default_rng(10)
    Xs = sp.random(50, 30, density=0.15, random_state=11, format="csr")
    Xs = sp.csr_matrix(Xs.toarray() * (rng.random((50, 1)) > 0.1))  # some empty rows
    y = rng.integers(0, 3, size=50).astype(np.int32)
    ell = to_padded_rows(Xs)
    assert padding_ratio(ell) >= 1.0
    for algorithm in ("perceptron", "pa"):
        cfg = P.PerceptronConfig(n_classes=3, algorithm=algorithm, averaged=True, n_epochs=3,
                                 fit_intercept=False)
        key = jax.random.PRNGKey(0)
        dense = P.fit_perceptron(jnp.asarray(Xs.toarray()), y, cfg, key=key)
        sparse = P.fit_perceptron(ell, y, cfg, key=key, state=P.init_state(cfg, 30))
        np.testing.assert_allclose(sparse.coef, dense.coef, atol=1e-12)
        assert np.all(np.isfinite(np.asarray(sparse.coef)))
        np.testing.assert_allclose(P.decision_function(sparse, ell),
                                   P.decision_function(dense, Xs.toarray()), atol=1e-12)


def test_state_resume_equals_single_pass():
    X, y = _data(seed=12, n=50)
    cfg = P.PerceptronConfig(n_classes=4, averaged=True, n_epochs=1, shuffle=False)
    full = P.fit_perceptron(jnp.asarray(X), y, cfg)
    part = P.fit_perceptron(jnp.asarray(X[:20]), y[:20], cfg)
    part = P.fit_perceptron(jnp.asarray(X[20:]), y[20:], cfg, state=part.state)
    np.testing.assert_allclose(part.coef, full.coef, atol=1e-12)
    np.testing.assert_allclose(part.thresholds, full.thresholds, atol=1e-12)
    assert int(part.state.n_steps) == 50


def test_vmap_over_delta_equals_loop_and_no_recompile():
    X, y = _data(seed=13)
    cfg = P.PerceptronConfig(n_classes=4, algorithm="pa", n_epochs=2, shuffle=True)
    key = jax.random.PRNGKey(3)
    deltas = jnp.array([0.1, 1.0, 3.0])

    def coef(d):
        return P.fit_perceptron(jnp.asarray(X), y, cfg, key=key, hyper=P.make_hyper(delta=d)).coef

    batched = jax.vmap(coef)(deltas)
    for i, d in enumerate(deltas):
        np.testing.assert_allclose(batched[i], coef(d), atol=1e-10)
    size = P._fit_primal._cache_size()
    P.fit_perceptron(jnp.asarray(X + 1.0), y, cfg, key=jax.random.PRNGKey(4),
                     hyper=P.make_hyper(delta=2.0))
    assert P._fit_primal._cache_size() == size


def test_shuffle_is_key_driven():
    X, y = _data(seed=14)
    cfg = P.PerceptronConfig(n_classes=4, n_epochs=2, shuffle=True)
    a = P.fit_perceptron(jnp.asarray(X), y, cfg, key=jax.random.PRNGKey(0))
    b = P.fit_perceptron(jnp.asarray(X), y, cfg, key=jax.random.PRNGKey(0))
    c = P.fit_perceptron(jnp.asarray(X), y, cfg, key=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(a.coef, b.coef)
    assert not np.array_equal(np.asarray(a.coef), np.asarray(c.coef))
    with pytest.raises(ValueError, match="PRNG key"):
        P.fit_perceptron(jnp.asarray(X), y, cfg)


def test_pa_zero_rows_are_skipped_without_nan():
    X = np.zeros((6, 3))
    X[3] = [1.0, 2.0, 0.0]
    y = np.array([0, 1, 2, 1, 0, 2], np.int32)
    res = _fit(X, y, 3, epochs=2, algorithm="pa", fit_intercept=False, delta=1.0)
    assert np.all(np.isfinite(np.asarray(res.coef))) and int(res.status) == 0
    W = ref_cusum(X, y, 3, [np.arange(6)] * 2, "pa", 1.0, intercept=False)
    np.testing.assert_allclose(res.coef, W, atol=1e-12)


def test_float32_follows_input_dtype():
    X, y = _data(seed=15)
    res = P.fit_perceptron(jnp.asarray(X, jnp.float32), y,
                           P.PerceptronConfig(n_classes=4, n_epochs=2, shuffle=False))
    assert res.coef.dtype == jnp.float32 and res.thresholds.dtype == jnp.float32
    ref = _fit(X, y, 4, epochs=2)
    np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-5, atol=1e-5)


def test_config_rejects_bad_static_settings():
    with pytest.raises(ValueError, match="n_classes"):
        P.PerceptronConfig(n_classes=1)
    with pytest.raises(ValueError, match="algorithm"):
        P.PerceptronConfig(n_classes=3, algorithm="sgd")
    with pytest.raises(ValueError, match="kernel"):
        P.PerceptronConfig(n_classes=3, kernel="sigmoid")
    with pytest.raises(ValueError, match="fit_kernel_perceptron"):
        P.fit_perceptron(jnp.ones((4, 2)), np.array([0, 1, 2, 1]),
                         P.PerceptronConfig(n_classes=3, kernel="rbf", shuffle=False))


def test_unrolled_scan_for_long_inputs_matches_reference():
    n = P._UNROLL_MIN_ROWS + 5  # past the threshold and not a multiple of the unroll
    X, y = _data(seed=16, n=n, d=3)
    res = _fit(X, y, 4, epochs=1, averaged=True)
    W = ref_cusum(X, y, 4, [np.arange(n)], averaged=True)
    np.testing.assert_allclose(res.coef, W[:, :3], atol=1e-9)
    np.testing.assert_allclose(res.thresholds, W[:, -1], atol=1e-9)
