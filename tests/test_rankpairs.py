"""Swapped-pairs SVM: counting against brute force, QP and 1-slack optimality against SciPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize as so
from sklearn.metrics import roc_auc_score

from bayesord._rankpairs import (
    RankPairsConfig,
    decision_rankpairs,
    fit_rankpairs_kernel,
    fit_rankpairs_linear,
    fit_rankpairs_nystroem,
    most_violated,
    predict_rankpairs,
    rbf_kernel,
    sample_pairs,
    solve_simplex_qp,
    swapped_pairs_rate,
    violation_counts,
)
from bayesord._status import Status


def brute_counts(t, u, codes, s, ties_violate):
    """O(n²) enumeration of p_i, q_j (definitions in violation_counts)."""
    up = codes[:, None] > codes[None, :]
    viol = (t[:, None] < u[None, :]) | (ties_violate & (t[:, None] == u[None, :]))
    a = up & viol
    return a @ s, a.T @ s


N_SHARED, D_SHARED, R_SHARED = 30, 3, 4
CFG = RankPairsConfig(n_ranks=R_SHARED)


def shared_problem(seed, noise=0.8):
    """A (30, 3) problem with 4 ranks: most linear tests reuse one compiled solver."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_SHARED, D_SHARED))
    codes = np.digitize(X @ [1.0, -1.0, 0.5] + noise * rng.normal(size=N_SHARED), [-1, 0, 1])
    return X, codes


def pair_list(codes):
    i, j = np.nonzero(codes[:, None] > codes[None, :])
    return np.stack([i, j], 1)


@pytest.mark.parametrize("r", [2, 5, 40])
@pytest.mark.parametrize("method", ["classes", "bits"])
@pytest.mark.parametrize("ties_violate", [False, True])
def test_counts_match_bruteforce(r, method, ties_violate):
    rng = np.random.default_rng(r)
    n = 60
    f = np.round(rng.normal(size=n) * 3) / 4  # multiples of 1/4: many exact ties at ±1/4 shifts
    codes = rng.integers(0, r, n)
    s = rng.uniform(0.2, 2.0, n) * (rng.uniform(size=n) > 0.1)
    p, q = violation_counts(jnp.asarray(f - 0.25), jnp.asarray(f + 0.25), jnp.asarray(codes), jnp.asarray(s),
                            r, method, ties_violate)
    pb, qb = brute_counts(f - 0.25, f + 0.25, codes, s, ties_violate)
    np.testing.assert_allclose(p, pb, atol=1e-12)
    np.testing.assert_allclose(q, qb, atol=1e-12)


@pytest.mark.parametrize("r", [2, 4, 9])
def test_argmax_is_algorithm2_and_eq17(r):
    """c', d' (Eq. 13) of the search equal a brute-force argmax over all pairs; Eq. 17 = direct count."""
    rng = np.random.default_rng(10 + r)
    n = 50
    X = rng.normal(size=(n, 3))
    w = rng.normal(size=3)
    f = np.round(X @ w * 4) / 4
    codes = rng.integers(0, r, n)
    delta, beta, p, q = most_violated(jnp.asarray(f), jnp.asarray(codes), jnp.ones(n), r)

    # brute force: maximise Σ_{i>j} [½(1 − y*_ij) + y*_ij (f_i − f_j)] pair by pair (Lemma 1's proof)
    P = pair_list(codes)
    diff = f[P[:, 0]] - f[P[:, 1]]
    y_star = np.where(diff >= 1 - diff, 1, -1)  # value(+1) = diff, value(−1) = 1 − diff; ties kept ordered
    c_ref = np.zeros(n)
    d_ref = np.zeros(n)
    np.add.at(c_ref, P[:, 0], y_star)
    np.add.at(d_ref, P[:, 1], y_star)
    L = np.array([(codes < codes[i]).sum() for i in range(n)])
    H = np.array([(codes > codes[i]).sum() for i in range(n)])
    np.testing.assert_allclose(L - 2 * np.asarray(p), c_ref)
    np.testing.assert_allclose(H - 2 * np.asarray(q), d_ref)
    N = len(P)
    delta17 = 0.25 * np.sum((L + H) - (c_ref + d_ref)) / N
    np.testing.assert_allclose(delta, delta17)
    np.testing.assert_allclose(delta, np.sum(y_star == -1) / N)
    # Ψ(ȳ) − Ψ(ȳ') through Eq. (19) equals the pair sum, normalised
    g_pairs = ((1 - y_star)[:, None] * (X[P[:, 0]] - X[P[:, 1]])).sum(0) / N
    np.testing.assert_allclose(X.T @ np.asarray(beta), g_pairs, atol=1e-12)


def test_swapped_pairs_rate_two_classes_is_one_minus_auc():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 300)
    f = rng.normal(size=300) + y
    rate = swapped_pairs_rate(jnp.asarray(f), jnp.asarray(y))
    np.testing.assert_allclose(rate, 1 - roc_auc_score(y, f), atol=1e-12)


def test_swapped_pairs_rate_counts_ties_as_swapped():
    rng = np.random.default_rng(4)
    codes = rng.integers(0, 6, 80)
    f = rng.integers(0, 5, 80).astype(float)
    P = pair_list(codes)
    ref = np.mean(f[P[:, 0]] <= f[P[:, 1]])
    for method in ("classes", "bits"):
        np.testing.assert_allclose(swapped_pairs_rate(jnp.asarray(f), jnp.asarray(codes), method=method), ref)
    assert float(swapped_pairs_rate(jnp.zeros(80), jnp.asarray(codes))) == 1.0


@pytest.mark.parametrize("C", [0.1, 3.0, 1000.0])
def test_simplex_qp_kkt_and_scipy(C):
    rng = np.random.default_rng(5)
    M = 12
    A = rng.normal(size=(M, 4))
    H = A @ A.T  # rank-deficient PSD, like a working set
    delta = rng.uniform(0, 1, M)
    mask = np.arange(M) < 10
    tol = 1e-10
    alpha, gap, _ = solve_simplex_qp(jnp.asarray(H), jnp.asarray(delta), jnp.asarray(mask), C, tol)
    alpha = np.asarray(alpha)
    np.testing.assert_allclose(alpha.sum(), C, rtol=1e-12)
    assert np.all(alpha >= 0) and np.all(alpha[~mask] == 0)
    G = delta - H @ alpha
    # KKT: the Frank–Wolfe gap Σ α_k (max G − G_k) vanishes at the optimum
    fw = np.sum(alpha[mask] * (G[mask].max() - G[mask])) / C
    np.testing.assert_allclose(gap, fw, atol=1e-14)
    assert fw <= tol

    def negdual(a):
        return 0.5 * a @ H[:10, :10] @ a - delta[:10] @ a

    ref = so.minimize(negdual, np.full(10, C / 10), jac=lambda a: H[:10, :10] @ a - delta[:10], method="SLSQP",
                      bounds=[(0, None)] * 10, constraints=[{"type": "eq", "fun": lambda a: a.sum() - C}],
                      options={"ftol": 1e-15, "maxiter": 1000})
    assert negdual(alpha[:10]) <= ref.fun + 1e-9 * max(1.0, abs(ref.fun))


def pairwise_reference(Kz, C, weights):
    """Dual of min ½‖w‖² + C Σ_e ω_e max(0, 1 − z_eᵀw), z_e = 2(φ_i − φ_j): box QP by L-BFGS-B."""
    ub = C * weights

    def fun(lam):
        v = Kz @ lam
        return 0.5 * lam @ v - lam.sum(), v - 1

    res = so.minimize(fun, np.zeros(len(ub)), jac=True, method="L-BFGS-B", bounds=list(zip(0 * ub, ub)),
                      options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 20000})
    return res.x


def test_linear_fit_matches_pairwise_reference():
    X, codes = shared_problem(6)
    C, eps = 2.0, 1e-4
    res = fit_rankpairs_linear(jnp.asarray(X), jnp.asarray(codes), jnp.ones(N_SHARED), C, eps, CFG)
    assert res.status == Status.SUCCESS and res.converged
    P = pair_list(codes)
    Z = 2 * (X[P[:, 0]] - X[P[:, 1]])
    lam = pairwise_reference(Z @ Z.T, C, np.full(len(P), 1 / len(P)))
    w_ref = Z.T @ lam

    def primal(w):
        return 0.5 * w @ w + C * np.mean(np.maximum(0, 1 - Z @ w))

    w = np.asarray(res.coef)
    p_ref = primal(w_ref)
    np.testing.assert_allclose(res.primal, primal(w), rtol=1e-10)
    assert primal(w) <= p_ref + C * eps + 1e-9  # Algorithm 1's ε guarantee
    assert res.dual <= p_ref + 1e-9  # weak duality
    assert np.sum((w - w_ref) ** 2) <= 2 * (C * eps + 1e-8)  # strong convexity
    # the returned working-set dual is feasible and solved to its KKT tolerance
    alpha, used = np.asarray(res.alpha), np.asarray(res.working_set)
    np.testing.assert_allclose(alpha.sum(), C)
    assert np.all(alpha >= 0) and np.all(alpha[~used] == 0)
    assert res.qp_gap <= 1e-3 * eps


@pytest.mark.parametrize("C", [1.0, 100.0])
@pytest.mark.parametrize("wide", [False, True])
def test_float32_fit_keeps_algorithm1_guarantee(C, wide):
    """In float32 the working-set QP used to run past what float32 resolves: at C = 100 the
    interior point's Cholesky broke down and every fit of this problem ended NONFINITE.
    With more columns than rows (``wide``: 60 x 84, separable) the working set's Gram matrix
    is singular to rounding: at C = 100 the last QP solve stopped at gaps of 1.3e-4 (status
    MAX_ITER, and the estimator's hint, a larger max_iter, could not help), which is what
    float32 resolves of the gap there."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 84 if wide else 3))
    codes = np.digitize(X[:, :3] @ [1.0, -1.0, 0.5] + 0.3 * rng.normal(size=60), [-1, 0, 1])
    eps = 1e-3
    res = fit_rankpairs_linear(jnp.asarray(X, jnp.float32), jnp.asarray(codes), jnp.ones(60, jnp.float32),
                               C, eps, CFG)
    assert res.coef.dtype == jnp.float32
    assert res.status == Status.SUCCESS
    P = pair_list(codes)
    Z = 2 * (X[P[:, 0]] - X[P[:, 1]])

    def primal(w):
        return 0.5 * w @ w + C * np.mean(np.maximum(0, 1 - Z @ w))

    w_ref = Z.T @ pairwise_reference(Z @ Z.T, C, np.full(len(P), 1 / len(P)))
    # Within C (eps + gap) of the optimum, the last QP's gap at most a tenth of eps, or, for
    # the wide rows at C = 100, what float32 rounding lets it read (5.9e-4 here).
    assert res.qp_gap <= (6e-4 if wide and C == 100 else 0.1 * eps)
    assert primal(np.asarray(res.coef, np.float64)) <= primal(w_ref) + C * (eps + res.qp_gap) * (1 + 1e-3)


def test_kernel_fit_matches_pairwise_reference():
    rng = np.random.default_rng(7)
    n, r = 25, 3
    X = rng.normal(size=(n, 2))
    codes = np.digitize(np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.3 * rng.normal(size=n), [0.3, 1.2])
    C, g, eps = 5.0, 0.5, 1e-4
    res = fit_rankpairs_kernel(jnp.asarray(X), jnp.asarray(codes), jnp.ones(n), C, g, eps,
                               RankPairsConfig(n_ranks=r))
    assert res.status == Status.SUCCESS
    K = np.exp(-g * ((X[:, None] - X[None]) ** 2).sum(-1))
    P = pair_list(codes)
    i, j = P[:, 0], P[:, 1]
    Kz = 4 * (K[i][:, i] - K[i][:, j] - K[j][:, i] + K[j][:, j])
    lam = pairwise_reference(Kz, C, np.full(len(P), 1 / len(P)))
    coef_ref = np.zeros(n)
    np.add.at(coef_ref, i, 2 * lam)
    np.add.at(coef_ref, j, -2 * lam)

    def primal(coef):
        f = K @ coef
        return 0.5 * coef @ K @ coef + C * np.mean(np.maximum(0, 1 - 2 * (f[i] - f[j])))

    coef = np.asarray(res.coef)
    np.testing.assert_allclose(res.primal, primal(coef), rtol=1e-8)
    assert primal(coef) <= primal(coef_ref) + C * eps + 1e-9
    np.testing.assert_allclose(decision_rankpairs(res, jnp.asarray(X)), res.train_scores, atol=1e-10)


def test_working_set_constraints_satisfied_within_eps():
    """At the end no constraint (in or out of the working set) beats the working-set slack by more than ε."""
    X, codes = shared_problem(8, noise=3.0)
    n = N_SHARED
    eps = 1e-3
    res = fit_rankpairs_linear(jnp.asarray(X), jnp.asarray(codes), jnp.ones(n), 10.0, eps, CFG)
    assert res.converged
    alpha, used = np.asarray(res.alpha), np.asarray(res.working_set)
    f = np.asarray(res.train_scores)
    delta_mv, beta_mv, _, _ = most_violated(jnp.asarray(f), jnp.asarray(codes), jnp.ones(n), R_SHARED)
    xi_true = float(delta_mv - f @ np.asarray(beta_mv))
    # dual = ½‖w‖² + C ξ_ws for an exactly solved working set, so primal − dual = C (ξ − ξ_ws) ≤ C ε
    assert res.primal - res.dual <= 10.0 * eps + 1e-9
    assert res.primal - res.dual >= -1e-9
    np.testing.assert_allclose(res.slack, max(xi_true, 0.0), atol=1e-12)
    assert np.all(alpha[used] >= 0) and np.isclose(alpha.sum(), 10.0)


def test_explicit_all_pairs_equal_counting():
    X, codes = shared_problem(9, noise=2.0)
    n = N_SHARED
    s = np.random.default_rng(9).uniform(0.5, 2, n)
    cfg = CFG
    a = fit_rankpairs_linear(jnp.asarray(X), jnp.asarray(codes), jnp.asarray(s), 1.0, 1e-4, cfg)
    P = pair_list(codes)
    b = fit_rankpairs_linear(jnp.asarray(X), jnp.asarray(codes), jnp.asarray(s), 1.0, 1e-4, cfg,
                             pairs=jnp.asarray(P), pair_weights=jnp.asarray(s[P[:, 0]] * s[P[:, 1]]))
    np.testing.assert_allclose(a.coef, b.coef, atol=1e-10)


def test_weights_equal_duplication_and_zero_weight_is_masking():
    X, codes = shared_problem(11, noise=2.0)
    n = N_SHARED
    w = np.ones(n)
    w[:5] = 2
    w[5:10] = 0
    a = fit_rankpairs_linear(jnp.asarray(X), jnp.asarray(codes), jnp.asarray(w), 1.0, 1e-5, CFG)
    idx = np.concatenate([np.arange(5), np.arange(10, n)])  # rows 0..4 twice, rows 5..9 dropped
    idx = np.concatenate([idx, idx[:5]])
    assert len(idx) == n  # same shape: the compiled solver is reused
    b = fit_rankpairs_linear(jnp.asarray(X[idx]), jnp.asarray(codes[idx]), jnp.ones(n), 1.0, 1e-5, CFG)
    # both are ε-solutions of the same strongly convex problem
    assert np.sum((np.asarray(a.coef) - np.asarray(b.coef)) ** 2) <= 2 * 2e-5


@pytest.mark.slow
def test_vmap_over_C_equals_loop():
    X, codes = shared_problem(12, noise=2.0)
    n = N_SHARED
    X, codes, cfg = jnp.asarray(X), jnp.asarray(codes), CFG
    Cs = jnp.array([0.1, 1.0, 10.0])
    batched = jax.vmap(lambda C: fit_rankpairs_linear(X, codes, jnp.ones(n), C, 1e-3, cfg))(Cs)
    for k, C in enumerate(Cs):
        single = fit_rankpairs_linear(X, codes, jnp.ones(n), C, 1e-3, cfg)
        np.testing.assert_allclose(batched.coef[k], single.coef, atol=1e-10)
        assert int(batched.n_iter[k]) == int(single.n_iter)


def test_sparse_equals_dense():
    import scipy.sparse as sp

    from bayesord._sparse import to_padded_rows

    rng = np.random.default_rng(13)
    Xs = sp.random(N_SHARED, D_SHARED, density=0.4, format="csr", random_state=1)
    codes = jnp.asarray(rng.integers(0, R_SHARED, N_SHARED))
    a = fit_rankpairs_linear(jnp.asarray(Xs.toarray()), codes, jnp.ones(N_SHARED), 1.0, 1e-4, CFG)
    rows = to_padded_rows(Xs)
    b = fit_rankpairs_linear(rows, codes, jnp.ones(N_SHARED), 1.0, 1e-4, CFG)
    np.testing.assert_allclose(a.coef, b.coef, atol=1e-10)
    np.testing.assert_allclose(predict_rankpairs(b, rows).scores, Xs.toarray() @ np.asarray(b.coef), atol=1e-10)


def test_nystroem_with_all_landmarks_equals_exact():
    rng = np.random.default_rng(14)
    n = 25  # the shapes of test_kernel_fit_matches_pairwise_reference: its compilation is reused
    X = jnp.asarray(rng.normal(size=(n, 2)))
    codes = jnp.asarray(rng.integers(0, 3, n))
    ex = fit_rankpairs_kernel(X, codes, jnp.ones(n), 1.0, 0.3, 1e-5, RankPairsConfig(n_ranks=3))
    ny = fit_rankpairs_nystroem(X, codes, jnp.ones(n), 1.0, 0.3, 1e-5, jax.random.PRNGKey(0),
                                RankPairsConfig(n_ranks=3, n_components=n))
    assert ny.status == Status.SUCCESS
    Xt = jnp.asarray(rng.normal(size=(10, 2)))
    np.testing.assert_allclose(decision_rankpairs(ny, Xt), decision_rankpairs(ex, Xt), atol=5e-3)
    np.testing.assert_allclose(ny.primal, ex.primal, rtol=1e-3)


def test_a_full_working_set_is_aggregated_and_reaches_the_same_optimum():
    """With 3 slots (the trivial constraint, the aggregate and the newest) the fit folds its
    working set many times and still ends eps-optimal: its primal objective and the
    100-slot fit's lie within C eps of each other, and each is within 1.1 C eps of its own
    dual lower bound; the 100-slot fit never aggregates here."""
    X, codes = shared_problem(15, noise=3.0)
    C, eps = 100.0, 1e-4
    args = (jnp.asarray(X), jnp.asarray(codes), jnp.ones(N_SHARED), C, eps)
    small = fit_rankpairs_linear(*args, RankPairsConfig(n_ranks=R_SHARED, capacity=3, max_iter=5000))
    large = fit_rankpairs_linear(*args, RankPairsConfig(n_ranks=R_SHARED, capacity=100))
    assert small.converged and large.converged
    assert int(small.n_aggregated) > 10 and int(large.n_aggregated) == 0
    assert abs(float(small.primal) - float(large.primal)) <= C * eps
    for res in (small, large):
        assert float(res.primal) - float(res.dual) <= 1.1 * C * eps
    with pytest.raises(ValueError, match="capacity must be at least 3"):
        RankPairsConfig(n_ranks=3, capacity=2)


def test_all_tied_scores():
    n = N_SHARED
    codes = jnp.asarray(np.arange(n) % R_SHARED)
    res = fit_rankpairs_linear(jnp.zeros((n, D_SHARED)), codes, jnp.ones(n), 1.0, 1e-3, CFG)
    assert res.converged
    np.testing.assert_allclose(res.coef, 0)
    np.testing.assert_allclose(res.slack, 1.0)  # every pair inside the margin
    np.testing.assert_allclose(res.primal, 1.0)


def test_sample_pairs():
    rng = np.random.default_rng(16)
    codes = rng.integers(0, 4, 50)
    pairs, pw = sample_pairs(codes, 5, np.random.default_rng(0))
    assert pairs.shape == (250, 2)
    assert np.all(codes[pairs[:, 0]] > codes[pairs[:, 1]])
    np.testing.assert_allclose(pw, 1.0)


def test_rbf_kernel():
    rng = np.random.default_rng(17)
    A, B = rng.normal(size=(5, 3)), rng.normal(size=(4, 3))
    ref = np.exp(-0.7 * ((A[:, None] - B[None]) ** 2).sum(-1))
    np.testing.assert_allclose(rbf_kernel(jnp.asarray(A), jnp.asarray(B), 0.7), ref, atol=1e-12)


def test_swapped_pairs_rate_matches_library_metric():
    from bayesord.metrics import swapped_pairs_rate as metric

    rng = np.random.default_rng(18)
    y = rng.integers(0, 50, 400)  # many ranks: the per-bit counting
    f = np.round(rng.normal(size=400) + 0.05 * y, 1)  # ties in the score
    np.testing.assert_allclose(swapped_pairs_rate(jnp.asarray(f), jnp.asarray(y)), metric(y, f), atol=1e-12)
