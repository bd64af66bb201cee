"""Bayesian linear ordinal probit: against statsmodels (ML limit), an MCMC reference, finite
differences of the evidence, and the properties every solver keeps."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayesord import OrdinalProbit
from bayesord._laplace import laplace_at, laplace_log_evidence, map_weights, newton_map_joint
from bayesord._linalg import chol_inverse
from bayesord._probit import (
    _PILOT_MIN_ROWS,
    _SCALE_ROWS,
    ProbitConfig,
    _pilot_start,
    _scaled_start,
    _strided,
    class_prob_bands,
    fit_probit,
    predict_probit,
    thresholds_at_zero,
)
from bayesord._status import Status
from bayesord.datasets import make_ordinal_probit


@pytest.fixture(scope="module")
def data():
    X, y, truth = make_ordinal_probit(600, 3, 4, seed=0, w=np.array([1.0, -0.7, 0.4]),
                                      thresholds=np.array([-1.0, 0.2, 1.1]))
    return X, (y - 1).astype(np.int32), truth


def _fit(X, y, alpha=1.0, w=None, **cfg):
    w = np.ones(len(y)) if w is None else w
    return fit_probit(X, y, w, alpha, 1e-12, config=ProbitConfig(**cfg), n_classes=int(y.max()) + 1)


def _standardised(X, res):
    """The columns the fit worked on, and its weights on them (``alpha`` is their prior)."""
    scale = np.asarray(res.scale)
    return (X - np.asarray(res.center)) / scale, np.asarray(res.coef) * scale


def test_flat_prior_joint_map_equals_statsmodels_ml(data):
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    X, y, _ = data
    res = _fit(X, y, alpha=0.0, thresholds="joint")
    assert int(res.status) == Status.SUCCESS
    sm = OrderedModel(y, X, distr="probit").fit(method="bfgs", disp=False, maxiter=2000, gtol=1e-10)
    d = X.shape[1]
    np.testing.assert_allclose(res.coef, sm.params[:d], atol=1e-4)
    b_sm = np.concatenate([sm.params[d:d + 1], sm.params[d] + np.cumsum(np.exp(sm.params[d + 1:]))])
    thresholds, thresholds_cov, _ = thresholds_at_zero(res)
    np.testing.assert_allclose(thresholds, b_sm, atol=1e-4)
    # Standard errors: statsmodels reports them for (coef, b_1, log gaps).
    from bayesord._thresholds import params_from_thresholds, thresholds_jacobian

    J = np.asarray(thresholds_jacobian(params_from_thresholds(thresholds)))
    Jinv = np.linalg.inv(J)
    cov_theta = Jinv @ np.asarray(thresholds_cov) @ Jinv.T
    se = np.concatenate([np.sqrt(np.diag(res.coef_cov)), np.sqrt(np.diag(cov_theta))])
    np.testing.assert_allclose(se, sm.bse, rtol=1e-3)


def test_logit_link_flat_prior_equals_statsmodels(data):
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    X, y, _ = data
    res = _fit(X, y, alpha=0.0, thresholds="joint", link="logit")
    sm = OrderedModel(y, X, distr="logit").fit(method="bfgs", disp=False, maxiter=2000, gtol=1e-10)
    np.testing.assert_allclose(res.coef, sm.params[:3], atol=1e-4)


def _log_posterior_np(theta, X, y, alpha):
    """Log posterior over (w, b_1, log gaps) in plain NumPy/SciPy (flat prior on thresholds,
    with the log-Jacobian of the gap transform so the target is the density in b), for a
    batch of points ``theta`` of shape (chains, d + K - 1)."""
    from scipy.special import ndtr

    d = X.shape[1]
    w, t = theta[:, :d], theta[:, d:]
    inner = t[:, :1] + np.concatenate([np.zeros((len(t), 1)), np.cumsum(np.exp(t[:, 1:]), axis=1)], axis=1)
    inf = np.full((len(t), 1), np.inf)
    b = np.concatenate([-inf, inner, inf], axis=1)
    f = w @ X.T
    p = ndtr(b[:, y + 1] - f) - ndtr(b[:, y] - f)
    with np.errstate(divide="ignore"):
        out = np.sum(np.log(p), axis=1) - 0.5 * alpha * np.sum(w * w, axis=1) + np.sum(t[:, 1:], axis=1)
    return np.where(np.all(p > 0, axis=1), out, -np.inf)


@pytest.mark.slow
def test_laplace_sd_within_10_percent_of_mcmc():
    """Random-walk Metropolis (NumPy) as the reference posterior on a small problem: 50
    independent chains from the mode, stepped together, 24,000 draws after burn-in."""
    X, y, _ = make_ordinal_probit(80, 2, 3, seed=3, w=np.array([1.0, -0.5]),
                                  thresholds=np.array([-0.5, 0.6]))
    y = (y - 1).astype(np.int32)
    alpha = 1.0
    res = _fit(X, y, alpha=alpha, thresholds="joint")
    # The prior is on the standardised coefficients: sample the model the fit worked on.
    X, coef = _standardised(X, res)
    coef_cov = np.asarray(res.coef_cov) * np.outer(res.scale, res.scale)
    sd_laplace = np.sqrt(np.diag(coef_cov))
    rng = np.random.default_rng(0)
    from bayesord._thresholds import params_from_thresholds

    chains = 50
    theta = np.tile(np.concatenate([coef, np.asarray(params_from_thresholds(res.thresholds))]), (chains, 1))
    cov = np.zeros((4, 4))
    cov[:2, :2] = coef_cov
    cov[2:, 2:] = np.diag([0.05, 0.05])
    chol = np.linalg.cholesky(cov * (2.38**2 / 4))
    lp = _log_posterior_np(theta, X, y, alpha)
    draws = []
    for it in range(3_000):
        prop = theta + rng.normal(size=(chains, 4)) @ chol.T
        lp_prop = _log_posterior_np(prop, X, y, alpha)
        accept = np.log(rng.uniform(size=chains)) < lp_prop - lp
        theta, lp = np.where(accept[:, None], prop, theta), np.where(accept, lp_prop, lp)
        if it >= 600 and it % 5 == 0:
            draws.append(theta[:, :2].copy())
    sd_mcmc = np.std(np.concatenate(draws), axis=0)
    np.testing.assert_allclose(sd_laplace, sd_mcmc, rtol=0.10)


def test_evidence_gradient_by_implicit_differentiation_matches_finite_differences(data):
    X, y, _ = data
    Xj, yj, wt = jnp.asarray(X), jnp.asarray(y), jnp.ones(len(y))
    b0 = jnp.array([-1.0, 0.2, 1.1])

    def log_ev(log_alpha, b):
        a = jnp.exp(log_alpha) * jnp.ones(3)
        w, *_ = map_weights("probit", 100, Xj, wt, b, 1.0, a, yj, (jnp.zeros(3), 1e-14))
        lp, _, L, _ = laplace_at(w, Xj, yj, wt, b, 1.0, a)
        return laplace_log_evidence(lp, L, a)

    g_alpha, g_b = jax.grad(log_ev, argnums=(0, 1))(0.3, b0)
    eps = 1e-4  # value noise ~1e-12 relative: smaller steps amplify it
    fd_alpha = (log_ev(0.3 + eps, b0) - log_ev(0.3 - eps, b0)) / (2 * eps)
    fd_b = [(log_ev(0.3, b0.at[k].add(eps)) - log_ev(0.3, b0.at[k].add(-eps))) / (2 * eps) for k in range(3)]
    np.testing.assert_allclose(g_alpha, fd_alpha, rtol=2e-5)
    np.testing.assert_allclose(g_b, fd_b, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("prior", ["gaussian", pytest.param("ard", marks=pytest.mark.slow)])
def test_evidence_mode_is_a_stationary_point_of_the_evidence(data, prior):
    X, y, _ = data
    res = _fit(X, y, thresholds="evidence", prior=prior)
    assert bool(res.converged) and int(res.status) == Status.SUCCESS
    Z, coef = _standardised(X, res)
    Xj, yj, wt = jnp.asarray(Z), jnp.asarray(y), jnp.ones(len(y))

    def log_ev(b, log_alpha):
        a = jnp.exp(log_alpha) * jnp.ones(3)
        w, *_ = map_weights("probit", 100, Xj, wt, b, 1.0, a, yj, (jnp.asarray(coef), 1e-14))
        lp, _, L, _ = laplace_at(w, Xj, yj, wt, b, 1.0, a)
        return laplace_log_evidence(lp, L, a)

    la = jnp.log(res.alpha if prior == "ard" else res.alpha[0])
    g_b, g_a = jax.grad(log_ev, argnums=(0, 1))(res.thresholds, la)
    assert float(jnp.max(jnp.abs(g_b))) < 1e-3
    assert float(jnp.max(jnp.abs(g_a))) < 1e-3
    assert float(res.log_evidence) == pytest.approx(float(log_ev(res.thresholds, la)), rel=1e-10)
    # The evidence-tuned fit beats the joint fit at the starting alpha on evidence.
    assert float(res.log_evidence) >= float(log_ev(res.thresholds, jnp.log(jnp.ones_like(la)))) - 1e-9


def test_evidence_verdict_is_the_optimum_s_not_the_joint_start_s(data):
    """The joint fit only starts the evidence search.  Capped at one Newton step it stops
    short; the search, whose inner solves then warm-start at the last MAP, still reaches the
    uncapped fit's optimum, and says so with one verdict (it said status SUCCESS with
    converged False)."""
    X, y, _ = data
    assert not bool(_fit(X, y, thresholds="joint", max_newton=1).converged)
    res = _fit(X, y, thresholds="evidence", max_newton=1)
    ref = _fit(X, y, thresholds="evidence")
    assert bool(res.converged) and int(res.status) == Status.SUCCESS
    np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-6)
    np.testing.assert_allclose(res.thresholds, ref.thresholds, rtol=1e-6)


@pytest.mark.parametrize("mode, thr_atol", [("joint", 1e-10), ("evidence", 1e-7)])
def test_sample_weight_two_equals_duplicated_rows(data, mode, thr_atol):
    X, y, _ = data
    w = np.ones(len(y))
    w[:50] = 2.0
    Xd = np.concatenate([X, X[:50]])
    yd = np.concatenate([y, y[:50]])
    # Newton (joint) converges quadratically, so both fits land on the same point to 1e-8.
    # The evidence optimiser stops on the relative change of the evidence; rounding sends
    # the two inputs along different L-BFGS paths, so there the thresholds agree to the
    # optimiser's tolerance (a mishandled weight would move them by ~1e-2) and the
    # evidence itself to 1e-12.
    a = _fit(X, y, w=w, thresholds=mode)
    b = _fit(Xd, yd, thresholds=mode)
    np.testing.assert_allclose(a.coef, b.coef, rtol=1e-8)
    np.testing.assert_allclose(a.thresholds, b.thresholds, rtol=1e-8, atol=thr_atol)
    np.testing.assert_allclose(a.coef_cov, b.coef_cov, rtol=1e-7)
    np.testing.assert_allclose(a.log_evidence, b.log_evidence, rtol=1e-12)


@pytest.mark.slow
def test_vmap_over_alpha_equals_python_loop(data):
    X, y, _ = data
    alphas = jnp.array([0.1, 1.0, 10.0])
    cfg = ProbitConfig(thresholds="joint")
    batched = jax.vmap(lambda a: fit_probit(X, y, np.ones(len(y)), a, 1e-12, config=cfg, n_classes=4))(alphas)
    for i, a in enumerate(alphas):
        single = fit_probit(X, y, np.ones(len(y)), a, 1e-12, config=cfg, n_classes=4)
        # Batched loops run in lockstep, so iterates may differ within the solver tolerance.
        np.testing.assert_allclose(batched.coef[i], single.coef, rtol=1e-7)
        np.testing.assert_allclose(batched.log_evidence[i], single.log_evidence, rtol=1e-10)


@pytest.mark.slow
def test_vmap_over_folds_as_weights_equals_sliced_fits(data):
    X, y, _ = data
    from bayesord.datasets import kfold_masks

    masks = kfold_masks(y, 3, seed=0).astype(np.float64)
    cfg = ProbitConfig(thresholds="joint")
    batched = jax.vmap(lambda m: fit_probit(X, y, m, 1.0, 1e-12, config=cfg, n_classes=4))(jnp.asarray(masks))
    for i, m in enumerate(masks.astype(bool)):
        sliced = fit_probit(X[m], y[m], np.ones(m.sum()), 1.0, 1e-12, config=cfg, n_classes=4)
        np.testing.assert_allclose(batched.coef[i], sliced.coef, rtol=1e-7)
        np.testing.assert_allclose(batched.thresholds[i], sliced.thresholds, rtol=1e-7)


@pytest.mark.slow
def test_jit_equals_no_jit_and_no_recompile(data):
    X, y, _ = data
    with jax.disable_jit():
        slow = _fit(X[:200], y[:200], thresholds="joint")
    fast = _fit(X[:200], y[:200], thresholds="joint")
    np.testing.assert_allclose(slow.coef, fast.coef, rtol=1e-10)
    before = fit_probit._cache_size()
    _fit(X[:200], y[:200] , alpha=3.0, thresholds="joint")
    assert fit_probit._cache_size() == before


@pytest.mark.slow
def test_monotone_relabelling_gives_the_same_fit():
    X, y, _ = make_ordinal_probit(300, 2, 3, seed=5)
    a = OrdinalProbit().fit(X, y)
    b = OrdinalProbit().fit(X, np.array([10, 25, 90])[y - 1])
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), atol=1e-12)
    np.testing.assert_array_equal(b.predict(X), np.array([10, 25, 90])[a.predict(X) - 1])


@pytest.mark.parametrize("mode", [pytest.param("evidence", marks=pytest.mark.slow), "joint"])
def test_predictive_probabilities_integrate_the_joint_posterior(data, mode):
    """P(y=k|x) equals the Monte Carlo average over draws of (w, b) from the joint Gaussian,
    on columns with large offsets (where w and the thresholds at x = 0 are correlated)."""
    X, y, _ = data
    X = X[:100] + np.array([1e3, -50.0, 7.0])
    res = _fit(X, y[:100], thresholds=mode)
    pred = predict_probit(res, X[:5])
    np.testing.assert_allclose(pred.proba.sum(axis=1), 1.0, atol=1e-12)
    assert bool(jnp.all(pred.proba >= 0))
    rng = np.random.default_rng(0)
    b0, b_cov, cross = (np.asarray(a) for a in thresholds_at_zero(res))
    cov = np.block([[np.asarray(res.coef_cov), cross], [cross.T, b_cov]])
    draws = rng.multivariate_normal(np.concatenate([res.coef, b0]), cov, size=200_000)
    from scipy.stats import norm

    cum = norm.cdf(draws[:, None, 3:] - (draws[:, :3] @ X[:5].T)[:, :, None]).mean(axis=0)
    cum = np.concatenate([np.zeros((5, 1)), cum, np.ones((5, 1))], axis=1)
    np.testing.assert_allclose(pred.proba, np.diff(cum, axis=1), atol=3e-3)
    lo, hi, sd = class_prob_bands(res, X[:5], jax.random.key(0))
    assert bool(jnp.all((0 <= lo) & (lo <= pred.proba + 1e-9) & (pred.proba <= hi + 1e-9) & (hi <= 1)))


def test_float32_fit_runs_and_agrees_roughly(data):
    X, y, _ = data
    r64 = _fit(X, y, thresholds="joint")
    with jax.enable_x64(False):
        r32 = fit_probit(X.astype(np.float32), y, np.ones(len(y), np.float32), np.float32(1.0), 1e-5,
                         config=ProbitConfig(thresholds="joint"), n_classes=4)
        assert r32.coef.dtype == jnp.float32
    np.testing.assert_allclose(r32.coef, r64.coef, rtol=1e-3)


@pytest.mark.slow
def test_recovers_true_parameters_on_large_data():
    X, y, truth = make_ordinal_probit(20_000, 3, 4, seed=1)
    res = _fit(X, (y - 1).astype(np.int32), thresholds="evidence")
    np.testing.assert_allclose(res.coef, truth.w, atol=0.05)
    np.testing.assert_allclose(thresholds_at_zero(res)[0], truth.thresholds, atol=0.06)


def _reference_joint(X, y, alpha):
    """The joint MAP by Newton from the ridge-and-scale start on all rows (no pilot)."""
    n, d = X.shape
    k = int(y.max()) + 1
    a = jnp.full(d, alpha)
    w0, b0 = _scaled_start(jnp.asarray(X), jnp.asarray(y), jnp.ones(n), a, "probit", k)
    return newton_map_joint(X, y, np.ones(n), b0, 1.0, a, w0, 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("drop_class_from_pilot", [False, True])
def test_pilot_start_on_large_n_reaches_the_same_joint_map(drop_class_from_pilot):
    # From _PILOT_MIN_ROWS rows on, Newton starts at the MAP of a strided subsample; the
    # optimum is unique, so the result must equal a solve that starts from scratch.  With
    # a class absent from the subsample the pilot is skipped (its thresholds would collapse).
    n = _PILOT_MIN_ROWS + 1000
    X, y, _ = make_ordinal_probit(n, 3, 4, seed=3)
    y = (y - 1).astype(np.int32)
    stride = n // _SCALE_ROWS
    if drop_class_from_pilot:
        y[(np.arange(n) % stride == 0) & (y == 3)] = 2
        assert not np.any(y[::stride] == 3) and np.sum(y == 3) > 1000
    res = _fit(X, y, alpha=1e-3, thresholds="joint")
    X, coef = _standardised(X, res)
    ref = _reference_joint(X, y, 1e-3)
    assert bool(res.converged) and bool(ref.converged)
    np.testing.assert_allclose(coef, ref.w, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(res.thresholds, ref.b, rtol=1e-8, atol=1e-10)
    cov_ref = np.asarray(chol_inverse(ref.chol))
    np.testing.assert_allclose(res.coef_cov * np.outer(res.scale, res.scale), cov_ref[:3, :3], rtol=1e-6)
    pilot_w, _ = _pilot_start(jnp.asarray(X), jnp.asarray(y), jnp.ones(n), jnp.full(3, 1e-3),
                              jnp.asarray(1e-12), ProbitConfig(thresholds="joint"), 4)
    Xs, ys, ws = _strided(jnp.asarray(X), jnp.asarray(y), jnp.ones(n), _SCALE_ROWS)
    scaled_w, _ = _scaled_start(Xs, ys, ws, jnp.full(3, 1e-3), "probit", 4)
    assert bool(jnp.allclose(pilot_w, scaled_w)) == drop_class_from_pilot


def test_prediction_reads_the_link_from_the_result():
    """A logit fit predicts with the logit: the link is part of the result, and passing a
    different one is an error rather than a silently wrong answer."""
    X, y, _ = make_ordinal_probit(300, 2, 3, seed=4, link="logit")
    res = _fit(X, y - 1, alpha=1.0, thresholds="joint", link="logit")
    assert res.config.link == "logit"
    proba = np.asarray(predict_probit(res, X[:4]).proba)
    with pytest.raises(ValueError, match="fitted with link='logit'"):
        predict_probit(res, X[:4], link="probit")
    with pytest.warns(DeprecationWarning, match="reads it from the result"):
        again = predict_probit(res, X[:4], link="logit")
    np.testing.assert_array_equal(np.asarray(again.proba), proba)
    # The logit's predictive distribution, not the probit's, at the same estimates.
    probit_twin = res._replace(config=dataclasses.replace(res.config, link="probit"))
    assert not np.allclose(np.asarray(predict_probit(probit_twin, X[:4]).proba), proba, atol=1e-3)


@pytest.mark.slow
def test_float32_evidence_search_ends_at_its_tolerance_not_after_halving_to_the_fallback():
    """A float32 fit's last L-BFGS step near the optimum can be rejected because the change
    is below the evidence's rounding.  The search then ends, at the float64 optimum, instead
    of halving the step 33 times down to the steepest-descent fallback: on these rows (a
    cross-fitting fold) 43 iterations before, 4-8 on every one of 60 such generated sets."""
    X, y, _ = make_ordinal_probit(1000, 11, 6, seed=41)
    w = np.ones(1000)
    w[np.random.default_rng(41).permutation(1000)[:200]] = 0.0
    ref = OrdinalProbit(tol=1e-12).fit(X, y, sample_weight=w)
    with jax.enable_x64(False):
        m = OrdinalProbit().fit(X, y, sample_weight=w)
    assert m.coef_.dtype == np.float32 and m.converged_
    assert m.n_iter_ <= 10
    np.testing.assert_allclose(m.log_evidence_, ref.log_evidence_, rtol=1e-6)
    np.testing.assert_allclose(m.thresholds_, ref.thresholds_, atol=2e-3)
