"""ISBOR/SBOR numerics against independent dense references (tiny data, float64).

All ISBOR fits here share one configuration and shape so they compile once.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from bayesord._basis import kernel_matrix
from bayesord._isbor import (
    Action,
    ISBORConfig,
    ISBORResult,
    _gains,
    candidate_stats,
    weighted_sq_rows,
    evidence_grad,
    fit_isbor,
    fit_sbor,
    predict_isbor,
    sample_class_probs_isbor,
)
from bayesord._laplace import laplace_log_evidence, newton_map
from bayesord._likelihood import ordinal_terms
from bayesord._status import Status
from bayesord._thresholds import params_from_thresholds, thresholds_from_params

N, K, CAP, THETA = 60, 3, 16, 1.0
CONFIG = ISBORConfig(n_classes=K, capacity=CAP, max_iter=60, block_size=N, cache_basis=True)


def tiny_data(seed=0, n=N):
    """Standardised columns, so the fit's own standardisation leaves them as they are and
    the references below can work on X directly."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] + rng.normal(0, 0.2, n)
    y = np.digitize(f, np.quantile(f, [1 / 3, 2 / 3])).astype(np.int32)
    return (X - X.mean(0)) / X.std(0), y


def run_isbor(X, y, weights=None, key=0, theta=THETA, config=CONFIG):
    n = X.shape[0]
    w = np.ones(n) if weights is None else weights
    return fit_isbor(jnp.asarray(X), jnp.asarray(y, jnp.int32), jnp.asarray(w), jnp.arange(n, dtype=jnp.int32),
                     jnp.ones(n, bool), jax.random.PRNGKey(key), theta, config=config,
                     min_delta=1e-2)  # passed as the estimator passes it: one compiled version


@pytest.fixture(scope="module")
def data():
    return tiny_data()


@pytest.fixture(scope="module")
def fitted(data):
    X, y = data
    return run_isbor(X, y)


@pytest.fixture(scope="module")
def state(data):
    """A hand-made active set (4 centres) at its Laplace point, with H and t_hat."""
    X, y = data
    act = np.array([0, 7, 19, 33])
    Phi = np.asarray(kernel_matrix(X, X[act], THETA))
    alpha = np.array([0.5, 2.0, 1.0, 0.3])
    b, sigma = jnp.array([-0.4, 0.5]), 1.0
    res = newton_map(jnp.asarray(Phi), jnp.asarray(y), jnp.ones(N), b, sigma, jnp.asarray(alpha),
                     jnp.zeros(4), 1e-13)
    t = ordinal_terms(jnp.asarray(Phi) @ res.w, jnp.asarray(y), b, sigma)
    H, g = -np.asarray(t.d_ff), np.asarray(t.d_f)
    f = Phi @ np.asarray(res.w)
    return dict(act=act, Phi=Phi, alpha=alpha, b=b, sigma=sigma, res=res, H=H, g=g, f=f,
                t_hat=f + g / H, K_all=np.asarray(kernel_matrix(X, X, THETA)))


def _stats(st, block=20):
    K_all = jnp.asarray(st["K_all"])
    rows = lambda s: jax.lax.dynamic_slice_in_dim(K_all, s, block, axis=1).T
    Ht = st["H"] * st["f"] + st["g"]
    return candidate_stats(rows, jnp.asarray(st["Phi"]), st["res"].chol, jnp.asarray(st["H"]),
                           jnp.asarray(Ht), N, block)


def _log_gauss_evidence(C, t):
    _, logdet = np.linalg.slogdet(C)
    return -0.5 * (logdet + t @ np.linalg.solve(C, t))


def test_fast_S_Q_equal_direct_C_inverse(state):
    S, Q = _stats(state)
    Phi, alpha, H, K_all = state["Phi"], state["alpha"], state["H"], state["K_all"]
    C = np.diag(1 / H) + Phi @ np.diag(1 / alpha) @ Phi.T
    Cinv = np.linalg.inv(C)
    np.testing.assert_allclose(S, np.einsum("nj,nm,mj->j", K_all, Cinv, K_all), rtol=1e-7)
    np.testing.assert_allclose(Q, K_all.T @ Cinv @ state["t_hat"], rtol=1e-7, atol=1e-9)
    # s_j = phi_j^T C_{-j}^{-1} phi_j for an active j equals alpha S/(alpha - S) (Section 4.3)
    for k, j in enumerate(state["act"]):
        keep = np.arange(4) != k
        C_minus = np.diag(1 / H) + Phi[:, keep] @ np.diag(1 / alpha[keep]) @ Phi[:, keep].T
        s_direct = K_all[:, j] @ np.linalg.solve(C_minus, K_all[:, j])
        q_direct = K_all[:, j] @ np.linalg.solve(C_minus, state["t_hat"])
        a = alpha[k]
        np.testing.assert_allclose(a * S[j] / (a - S[j]), s_direct, rtol=1e-6)
        np.testing.assert_allclose(a * Q[j] / (a - S[j]), q_direct, rtol=1e-6)


@pytest.mark.parametrize("b, n", [(3, 7), (32, 16384), (32, 20001), (3, 20001), (35, 20001), (48, 5 * 4096)])
def test_weighted_sq_rows_equals_numpy(b, n):
    """Short rows, long rows summed in blocks of rows (row counts that are and are not a
    multiple of the block) give the plain weighted sum."""
    rng = np.random.default_rng(n)
    K, h = rng.normal(size=(b, n)), rng.random(n)
    np.testing.assert_allclose(np.asarray(jax.jit(weighted_sq_rows)(jnp.asarray(K), jnp.asarray(h))),
                               (K**2 * h).sum(axis=1), rtol=1e-12)


def test_gains_equal_brute_force_evidence_change(state):
    """Eq. (20) changes equal log N(t_hat | 0, C) differences computed densely."""
    S, Q = _stats(state)
    slot_of = np.full(N, -1)
    slot_of[state["act"]] = np.arange(4)
    alpha_buf = np.ones(CAP)
    alpha_buf[:4] = state["alpha"]
    gain, action, a_new = _gains(S, Q, jnp.asarray(slot_of), jnp.asarray(alpha_buf), jnp.ones(N, bool), 4)
    gain, action, a_new = map(np.asarray, (gain, action, a_new))
    Phi, alpha, H, K_all, t = state["Phi"], state["alpha"], state["H"], state["K_all"], state["t_hat"]
    base = np.diag(1 / H) + Phi @ np.diag(1 / alpha) @ Phi.T
    e0 = _log_gauss_evidence(base, t)
    checked = {a: 0 for a in (Action.ADD, Action.REESTIMATE, Action.DELETE)}
    for j in range(N):
        if action[j] == Action.NONE:
            continue
        phi = K_all[:, j:j + 1]
        if action[j] == Action.ADD:
            C = base + phi @ phi.T / a_new[j]
        else:
            k = slot_of[j]
            inv_new = 0.0 if action[j] == Action.DELETE else 1 / a_new[j]
            C = base + (inv_new - 1 / alpha[k]) * phi @ phi.T
        np.testing.assert_allclose(gain[j], _log_gauss_evidence(C, t) - e0, rtol=1e-5, atol=1e-8)
        checked[Action(action[j])] += 1
    assert checked[Action.ADD] > 0 and checked[Action.REESTIMATE] + checked[Action.DELETE] > 0


def test_masked_buffer_equals_sliced(state, data):
    X, y = data
    Phi, alpha = state["Phi"], state["alpha"]
    pad = np.concatenate([Phi[:, :2], np.zeros((N, 3)), Phi[:, 2:]], axis=1)
    alpha_pad = np.concatenate([alpha[:2], np.ones(3), alpha[2:]])
    args = (jnp.asarray(y), jnp.ones(N), state["b"], state["sigma"])
    r_pad = newton_map(jnp.asarray(pad), *args, jnp.asarray(alpha_pad), jnp.zeros(7), 1e-13)
    r = state["res"]
    np.testing.assert_allclose(np.asarray(r_pad.w)[[0, 1, 5, 6]], r.w, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(r_pad.w)[2:5], 0.0)
    np.testing.assert_allclose(laplace_log_evidence(r_pad.log_post, r_pad.chol, jnp.asarray(alpha_pad)),
                               laplace_log_evidence(r.log_post, r.chol, jnp.asarray(alpha)), rtol=1e-12)
    # predictions from a masked result equal those from the sliced posterior
    mask = np.array([1, 1, 0, 0, 0, 1, 1], bool)
    rows = np.array([0, 7, -1, -1, -1, 19, 33])
    centres = np.where(mask[:, None], X[np.maximum(rows, 0)], 0.0)
    zero = jnp.zeros(())
    k1 = state["b"].shape[0]
    # Thresholds known exactly (no cross covariance): the latent variance is the weights' alone.
    res = ISBORResult(config=ISBORConfig(n_classes=k1 + 1), relevance_index=jnp.asarray(rows),
                      mask=jnp.asarray(mask), centres=jnp.asarray(centres), w=r_pad.w, chol=r_pad.chol,
                      alpha=jnp.asarray(alpha_pad), b=state["b"], thresholds_cov=jnp.eye(k1),
                      cross_cov=jnp.zeros((7, k1)), sigma=jnp.asarray(1.0), theta=jnp.asarray(THETA),
                      log_evidence=zero, evidence_trace=zero, action_trace=zero, index_trace=zero,
                      n_active=zero, n_pruned=zero, n_iter=zero, converged=zero, status=zero,
                      center=jnp.zeros(2), scale=jnp.ones(2))
    Xt = np.random.default_rng(5).uniform(-2, 2, size=(9, 2))
    p = predict_isbor(res, jnp.asarray(Xt))
    Pt = np.asarray(kernel_matrix(Xt, X[state["act"]], THETA))
    L = np.asarray(r.chol)
    Sigma = np.linalg.inv(L @ L.T)
    np.testing.assert_allclose(p.latent_mean, Pt @ np.asarray(r.w), rtol=1e-9)
    np.testing.assert_allclose(p.latent_var, np.einsum("ni,ij,nj->n", Pt, Sigma, Pt), rtol=1e-7)


def test_incremental_fit_equals_full_laplace_on_its_active_set(fitted, data):
    X, y = data
    r = fitted
    assert bool(r.converged) and int(r.status) == Status.SUCCESS
    mask = np.asarray(r.mask)
    assert 3 <= int(r.n_active) == mask.sum() <= CAP
    rows = np.asarray(r.relevance_index)[mask]
    Phi = kernel_matrix(X, X[rows], THETA)
    alpha = jnp.asarray(np.asarray(r.alpha)[mask])
    ref = newton_map(Phi, jnp.asarray(y), jnp.ones(N), r.b, r.sigma, alpha, jnp.zeros(mask.sum()), 1e-13)
    np.testing.assert_allclose(np.asarray(r.w)[mask], ref.w, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(np.asarray(r.w)[~mask], 0.0)
    np.testing.assert_allclose(r.log_evidence, laplace_log_evidence(ref.log_post, ref.chol, alpha), rtol=1e-8)


def test_evidence_never_decreases_across_iterations(fitted):
    n = int(fitted.n_iter)
    trace = np.asarray(fitted.evidence_trace)[: n + 1]
    assert np.all(np.isfinite(trace)) and np.all(np.isnan(np.asarray(fitted.evidence_trace)[n + 1:]))
    assert np.all(np.diff(trace) >= -1e-9 * (1 + np.abs(trace[1:])))
    assert trace[-1] == pytest.approx(float(fitted.log_evidence))
    acts = np.asarray(fitted.action_trace)[:n]
    assert (acts == Action.ADD).sum() >= 1
    idx = np.asarray(fitted.index_trace)[:n]
    assert np.all((idx >= 0) == ((acts != Action.NONE) & (acts != Action.REESTIMATE_ALL)))


def test_evidence_gradient_matches_finite_differences(state, data):
    X, y = data
    Phi, alpha = jnp.asarray(state["Phi"]), jnp.asarray(state["alpha"])
    yj = jnp.asarray(y)

    def evidence(eta):
        b, sigma = thresholds_from_params(eta[:-1]), jnp.exp(eta[-1])
        r = newton_map(Phi, yj, jnp.ones(N), b, sigma, alpha, jnp.zeros(4), 1e-14)
        return float(laplace_log_evidence(r.log_post, r.chol, alpha)), r

    eta = jnp.concatenate([params_from_thresholds(state["b"]), jnp.zeros(1)])
    _, r = evidence(eta)
    g = np.asarray(jax.jit(evidence_grad)(r.w, r.chol, eta, Phi, yj, jnp.ones(N), alpha))
    h = 1e-5
    fd = [(evidence(eta.at[i].add(h))[0] - evidence(eta.at[i].add(-h))[0]) / (2 * h) for i in range(3)]
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


def _joint_blocks(fitted, Xt):
    """The joint Gaussian of the weights and thresholds from the result's blocks, built here
    in NumPy: the basis at ``Xt``, the precision's factor, and the covariances of w, (w, b), b."""
    Pt = np.asarray(kernel_matrix(Xt, np.asarray(fitted.centres), THETA)) * np.asarray(fitted.mask)
    L = np.asarray(fitted.chol)
    S_bb, S_wb = np.asarray(fitted.thresholds_cov), np.asarray(fitted.cross_cov)
    S_ww = np.linalg.inv(L @ L.T) + S_wb @ np.linalg.solve(S_bb, S_wb.T)
    return Pt, L, S_ww, S_wb, S_bb


def test_predictive_probabilities_match_quadrature(fitted, data):
    X, _ = data
    Xt = np.random.default_rng(7).uniform(-2.5, 2.5, size=(6, 2))
    p = predict_isbor(fitted, jnp.asarray(Xt))
    proba = np.asarray(p.proba)
    assert np.all(proba >= 0) and np.allclose(proba.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.exp(p.log_proba), proba, rtol=1e-12)
    Pt, L, S_ww, S_wb, S_bb = _joint_blocks(fitted, Xt)
    b_hat, s = np.asarray(fitted.b), float(fitted.sigma)
    for i in range(len(Xt)):
        m, v = float(p.latent_mean[i]), float(p.latent_var[i])
        np.testing.assert_allclose(v, Pt[i] @ S_ww @ Pt[i], rtol=1e-8)
        # P(y <= k) = E[Phi((b_k - f)/s)] with b_k - f ~ N(b_k - m, Var(b_k - f)).
        var_u = v + np.diag(S_bb) - 2 * Pt[i] @ S_wb
        cum = norm.cdf((b_hat - m) / np.sqrt(s**2 + var_u))
        np.testing.assert_allclose(proba[i], np.diff(np.r_[0.0, cum, 1.0]), atol=1e-12)
    labels = np.asarray(p.labels)
    np.testing.assert_array_equal(labels, (np.asarray(p.latent_mean)[:, None] > np.asarray(fitted.b)).sum(1))


def test_probability_draws_carry_the_thresholds_uncertainty(fitted):
    # Reference: (f(x), b_1, log(b_2 - b_1)) drawn in NumPy from their Gaussian, built from
    # the result's blocks by the delta method (the coordinates the library draws in).
    Xt = np.random.default_rng(7).uniform(-2.5, 2.5, size=(6, 2))
    n_draws = 40_000
    draws = np.asarray(sample_class_probs_isbor(fitted, jnp.asarray(Xt), jax.random.key(0), n_draws=n_draws))
    assert draws.shape == (n_draws, 6, 3)
    assert np.all(draws >= 0) and np.allclose(draws.sum(-1), 1.0, atol=1e-9)  # ordered thresholds
    Pt, L, S_ww, S_wb, S_bb = _joint_blocks(fitted, Xt)
    b_hat, s = np.asarray(fitted.b), float(fitted.sigma)
    gap = b_hat[1] - b_hat[0]
    T = np.diag([1.0, 1.0, 0.0])
    T[2, 1:] = [-1.0 / gap, 1.0 / gap]  # d(f, b_1, log gap) / d(f, b_1, b_2)
    rng = np.random.default_rng(1)
    spread_from_thresholds = []
    for i in range(len(Xt)):
        a = Pt[i] @ S_wb
        cov = np.block([[np.atleast_2d(Pt[i] @ S_ww @ Pt[i]), a[None, :]], [a[:, None], S_bb]])
        z = rng.multivariate_normal(np.r_[Pt[i] @ np.asarray(fitted.w), b_hat[0], np.log(gap)],
                                    T @ cov @ T.T, size=n_draws)
        b = np.c_[z[:, 1], z[:, 1] + np.exp(z[:, 2])]
        cum = norm.cdf((b - z[:, :1]) / s)
        ref = np.diff(np.c_[np.zeros(n_draws), cum, np.ones(n_draws)], axis=1)
        np.testing.assert_allclose(draws[:, i].mean(0), ref.mean(0), atol=3e-3)
        if ref.mean(0).max() > 0.99:
            continue  # a few extreme draws make up the sd: its Monte Carlo error is large
        np.testing.assert_allclose(draws[:, i].std(0), ref.std(0), rtol=0.05, atol=2e-3)
        # The same with the thresholds held at their estimate: the spread they add.
        f = rng.normal(Pt[i] @ np.asarray(fitted.w), np.sqrt(Pt[i] @ np.linalg.solve(L @ L.T, Pt[i])), n_draws)
        held = np.diff(np.c_[np.zeros(n_draws), norm.cdf((b_hat - f[:, None]) / s), np.ones(n_draws)], axis=1)
        spread_from_thresholds.append(np.max(ref.std(0) - held.std(0)))
    assert max(spread_from_thresholds) > 0.05


def test_zero_weight_rows_are_ignored(data):
    """A zero-weight row changes nothing but may not become a relevance vector."""
    X, y = data
    w = np.ones(N)
    w[::4] = 0.0
    r = run_isbor(X, y, weights=w)
    rows = np.asarray(r.relevance_index)[np.asarray(r.mask)]
    assert np.all(w[rows] > 0)
    assert np.isfinite(float(r.log_evidence))


@pytest.mark.slow
def test_vmap_over_theta_equals_loop(data):
    X, y = data
    thetas = jnp.array([0.3, 2.0])
    batched = jax.vmap(lambda t: run_isbor(X, y, theta=t))(thetas)
    for i, t in enumerate([0.3, 2.0]):
        single = run_isbor(X, y, theta=t)
        np.testing.assert_allclose(batched.log_evidence[i], single.log_evidence, rtol=1e-8)
        assert int(batched.n_active[i]) == int(single.n_active)


@pytest.mark.slow
def test_capacity_reached_is_a_status_not_a_crash(data):
    X, y = data
    r = run_isbor(X, y, config=ISBORConfig(n_classes=K, capacity=K, max_iter=60, block_size=N))
    assert int(r.status) == Status.CAPACITY_REACHED and not bool(r.converged)
    assert int(r.n_active) == K


@pytest.fixture(scope="module")
def sbor_fitted(data):
    X, y = data
    return fit_sbor(jnp.asarray(X), jnp.asarray(y), jnp.ones(N), jnp.arange(N), jnp.ones(N, bool), THETA,
                    config=dataclasses.replace(CONFIG, max_iter=200))


@pytest.mark.slow
def test_sbor_is_sparse_and_agrees_with_isbor(sbor_fitted, fitted):
    r = sbor_fitted
    assert int(r.status) in (Status.SUCCESS, Status.MAX_ITER)
    assert int(r.n_active) < N // 2 and int(r.n_pruned) == N - int(r.n_active)
    Xt, yt = tiny_data(seed=3, n=400)
    acc_s = np.mean(np.asarray(predict_isbor(r, jnp.asarray(Xt)).labels) == yt)
    acc_i = np.mean(np.asarray(predict_isbor(fitted, jnp.asarray(Xt)).labels) == yt)
    assert acc_s > 0.7 and acc_i > 0.7
    assert abs(acc_s - acc_i) < 0.1


@pytest.mark.slow
def test_sbor_compacted_state_is_the_dense_fit_on_its_survivors(sbor_fitted, data):
    """After pruning, survivors sit in the leading slots and the stored posterior is the
    from-scratch Laplace fit on just those columns (the tiered, compacted work is exact)."""
    X, y = data
    r = sbor_fitted
    mask = np.asarray(r.mask)
    m = int(r.n_active)
    np.testing.assert_array_equal(mask, np.arange(N) < m)
    rows = np.asarray(r.relevance_index)[:m]
    assert len(set(rows.tolist())) == m and rows.min() >= 0
    Phi = kernel_matrix(jnp.asarray(X), jnp.asarray(X[rows]), THETA)
    alpha = r.alpha[:m]
    ref = newton_map(Phi, jnp.asarray(y), jnp.ones(N), r.b, r.sigma, alpha, jnp.zeros(m), 1e-13)
    np.testing.assert_allclose(np.asarray(r.w)[:m], ref.w, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(r.w)[m:], 0.0)
    np.testing.assert_allclose(r.log_evidence, laplace_log_evidence(ref.log_post, ref.chol, alpha),
                               rtol=1e-9)


@pytest.mark.slow
def test_sbor_on_labels_without_signal_ends_at_the_class_frequencies():
    """Labels independent of X at small widths: every basis function is irrelevant.  SBOR
    keeps one, its alpha capped at alpha_max and its weight near 0, and predicts the training
    class frequencies; float32 agrees with float64.  Before the cap that alpha grew without
    bound and the fit ended NONFINITE after ~30 iterations; in float32 a rounded gamma <= 0
    gave an alpha of 0, and the Cholesky jitter (then scaled by the mean diagonal, 1e9 here)
    moved the float32 evidence from -6.1 to -38."""
    rng = np.random.RandomState(0)
    X = rng.uniform(size=(10, 3))
    y = np.r_[np.zeros(3), np.ones(7)].astype(np.int32)
    cfg = ISBORConfig(n_classes=2, max_iter=300)
    for theta in (0.01, 1.0, 10.0):
        fits = {}
        for dtype in (jnp.float64, jnp.float32):
            r = fit_sbor(jnp.asarray(X, dtype), jnp.asarray(y), jnp.ones(10, dtype), jnp.arange(10),
                         jnp.ones(10, bool), theta, config=cfg)
            assert int(r.status) == Status.SUCCESS, (theta, dtype)
            fits[dtype] = r
        r64, r32 = fits[jnp.float64], fits[jnp.float32]
        # float32 ends within 2e-6 (relative) at theta 0.01 and 1, and 2.0e-4 at theta 10,
        # where the kernel matrix is nearly the identity and float32 stops on a flatter
        # evidence (measured on the 2-core CI machine; the bug this guards against was sixfold).
        np.testing.assert_allclose(float(r32.log_evidence), float(r64.log_evidence), rtol=1e-3)
        if theta < 1:  # wide kernels on the standardised columns
            assert int(r64.n_active) == 1 and float(r64.alpha[0]) == pytest.approx(1e10)
            # The threshold's estimate reproduces the frequency; the predictive integrates
            # its uncertainty (10 rows), Phi(b / sqrt(sigma^2 + var b)), pulled towards 1/2.
            b, var_b, s = float(r64.b[0]), float(r64.thresholds_cov[0, 0]), float(r64.sigma)
            assert norm.cdf(b / s) == pytest.approx(0.3, abs=5e-3)
            p = np.asarray(predict_isbor(r64, jnp.asarray(X)).proba)
            p_ref = norm.cdf(b / np.sqrt(s * s + var_b))
            assert 0.3 < p_ref < 0.5
            np.testing.assert_allclose(p, np.tile([p_ref, 1 - p_ref], (10, 1)), atol=1e-3)


def test_config_rejects_capacity_below_classes():
    with pytest.raises(ValueError, match="capacity"):
        ISBORConfig(n_classes=4, capacity=3)


def test_float32_newton_asked_for_less_than_rounding_still_converges():
    """A float32 solve with rtol=1e-10 (below float32's rounding on 2,000 rows; a wide kernel
    and weak priors, as early in an ISBOR fit) stops at the float64 MAP in a few steps
    instead of running to its iteration cap."""
    X, y = tiny_data(seed=3, n=2000)
    Phi = np.asarray(kernel_matrix(X, X[:20], 0.1))
    b, alpha = np.array([-0.4, 0.5]), np.full(20, 1e-3)
    ref = newton_map(jnp.asarray(Phi), jnp.asarray(y), jnp.ones(2000), b, 1.0, alpha, jnp.zeros(20), 1e-13)
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    r32 = newton_map(f32(Phi), jnp.asarray(y), jnp.ones(2000, jnp.float32), f32(b), jnp.float32(1.0), f32(alpha),
                     jnp.zeros(20, jnp.float32), 1e-10, max_iter=40)
    assert r32.w.dtype == jnp.float32
    assert int(r32.status) == Status.SUCCESS and int(r32.n_iter) < 15
    # The weights of a wide kernel are ill-determined; the fit and its objective are not.
    np.testing.assert_allclose(float(r32.log_post), float(ref.log_post), rtol=1e-5)
    np.testing.assert_allclose(Phi @ np.asarray(r32.w, float), Phi @ np.asarray(ref.w), atol=2e-2)


@pytest.mark.parametrize("patience", [1, 3])
def test_patience_flat_iterations_end_the_fit(patience):
    """With ``patience=P`` a converged fit ends either on the paper's rule (best predicted
    gain and the last change below min_delta) or after P flat iterations in a row, and no
    earlier run of P flat iterations went on (checked on the evidence trace in NumPy).  On
    these rows the default patience meets a run of six flat (rejected) iterations."""
    X, y = tiny_data(seed=5)
    r = run_isbor(X, y, theta=3.0, config=dataclasses.replace(CONFIG, patience=patience))
    assert bool(r.converged)
    n = int(r.n_iter)
    flat = np.abs(np.diff(np.asarray(r.evidence_trace)[: n + 1])) < 1e-2
    assert flat[-1]
    run = 0
    for i, f in enumerate(flat[:-1]):
        run = run + 1 if f else 0
        assert run < patience, f"iteration {i}: {patience} flat iterations in a row did not stop the fit"
    if patience == 1:  # Algorithm 1, line 17: the first flat iteration ends it
        assert flat.sum() == 1
