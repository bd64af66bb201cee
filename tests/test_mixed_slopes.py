"""Random slopes in the ordinal mixed model: ``(1 + x | group)``.

References:
* R's ``ordinal::clmm`` (ordinal 2022.11.16, R 4.2.2, Laplace method, default settings,
  probit link) on the shared ``wine`` and ``soup`` data sets, as printed by
  ``benchmarks/mixed_bench.py`` (which runs ``clmm`` through ``Rscript``): estimates,
  ``VarCorr`` and ``logLik``; the fixed effects' standard errors from ``sqrt(diag(vcov))``.
* An independent SciPy evaluation of the Laplace approximation on the user's scale: a
  two-dimensional mode search per group (BFGS) and a finite-difference Hessian there.
* Monte Carlo over the stored joint Gaussian of the parameters and a group's effects, drawn
  with NumPy, for the predictive probabilities.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize
from scipy.stats import norm

import jax
import jax.numpy as jnp
from test_mixed import check_implicit_gradient

from bayesord import OrdinalMixed, load_model
from bayesord._mixed import predict_mixed, sample_class_probs_mixed

CLMM_SLOPES = {
    "wine": dict(
        formula="rating ~ temp + contact + (1 + temp | judge)",
        coef=[1.813629118588, 1.056877151285],
        thresholds=[-0.922927531766, 0.889659341491, 2.480881143038, 3.576114082108],
        sd=[0.653171719038, 0.246462521000], corr=0.0365342559257, loglik=-80.902483158,
        coef_se=[0.347893042348, 0.290104008744],
        thresholds_se=[0.394913585175, 0.352409193549, 0.458689308914, 0.560347473483],
        ranef=[[0.92456689866015, 0.10611899186045], [-0.40611099104444, 0.05825065485945],
               [0.57769324612414, 0.13664222750006], [0.00405456413163, -0.06205935106330],
               [0.22007962093144, -0.14226185068177], [0.23510507386789, 0.01792163385283],
               [-1.06993507176548, -0.07991483164024], [-0.14533730534803, -0.02911148821592],
               [-0.33878775804539, -0.00834551047497]]),
    "soup": dict(
        formula="SURENESS ~ PROD + (1 + PROD | RESP)",
        coef=[0.7558174907817],
        thresholds=[-0.8830203311873, -0.2889997716768, -0.0831231780040, 0.0807506194255, 0.5230731909495],
        sd=[0.303396774937, 0.535946938700], corr=-0.272831769402, loglik=-2663.37800603,
        coef_se=[0.0682847641951],
        thresholds_se=[0.0537244267908, 0.0489635757609, 0.0486198956489, 0.0486486164624, 0.0499173939326]),
}


def _check_against_clmm(model, ref):
    d = len(ref["coef"])
    np.testing.assert_allclose(model.coef_, ref["coef"], atol=1e-3)
    np.testing.assert_allclose(model.thresholds_, ref["thresholds"], atol=1e-3)
    np.testing.assert_allclose(model.group_sd_, ref["sd"], atol=1e-3)
    corr = model.group_cov_[1, 0] / np.prod(model.group_sd_)
    assert corr == pytest.approx(ref["corr"], abs=1e-3)
    # clmm stops a little short of the maximum: ours is as high or up to 1e-4 higher.
    assert ref["loglik"] - 1e-6 <= model.loglik_ <= ref["loglik"] + 1e-4
    se = np.sqrt(np.diag(model.cov_))
    np.testing.assert_allclose(se[:d], ref["coef_se"], atol=1e-3)
    np.testing.assert_allclose(se[d:d + len(ref["thresholds"])], ref["thresholds_se"], atol=1e-3)
    assert model.converged_


@pytest.fixture(scope="module")
def wine_slopes(datasets_dir):
    wine = pd.read_csv(datasets_dir / "wine.csv.gz")
    return OrdinalMixed.from_formula(CLMM_SLOPES["wine"]["formula"], wine), wine


def test_wine_random_slope_matches_clmm(wine_slopes):
    model, _ = wine_slopes
    ref = CLMM_SLOPES["wine"]
    _check_against_clmm(model, ref)
    assert model.group_terms_ == ["(Intercept)", "temp[T.warm]"]
    # The group effects on the user's scale (the intercept at temp = cold), as clmm's ranef.
    np.testing.assert_allclose(model.group_effects_, ref["ranef"], atol=2e-3)
    table = model.group_effects()
    assert table.index.names == ["group", "term"] and len(table) == 18
    np.testing.assert_allclose(table["mean"].to_numpy().reshape(9, 2), model.group_effects_)
    assert np.all(table["sd"] > table["cond_sd"])


def test_summary_names_every_variance_term(wine_slopes):
    model, _ = wine_slopes
    table = model.summary()
    assert list(table.index[-3:]) == ["sd(judge: (Intercept))", "sd(judge: temp[T.warm])",
                                      "corr(judge: (Intercept), temp[T.warm])"]
    assert table.iloc[-3:]["p"].isna().all()
    corr = table.iloc[-1]
    assert -1 < corr["2.5%"] < corr["mean"] < corr["97.5%"] < 1
    sd = table.loc["sd(judge: temp[T.warm])"]
    assert 0 < sd["2.5%"] < sd["mean"] < sd["97.5%"]
    assert model.cov_.shape == (9, 9)


def test_formula_model_with_slopes_saves_and_loads(wine_slopes, tmp_path):
    model, wine = wine_slopes
    rows = wine.iloc[[0, 5, 40]]
    path = tmp_path / "slopes.npz"
    model.save(path)
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.predict_proba(rows), model.predict_proba(rows))
    np.testing.assert_array_equal(loaded.group_effects_, model.group_effects_)
    assert loaded.group_terms_ == model.group_terms_ and loaded.summary().equals(model.summary())


@pytest.mark.slow
def test_soup_random_slope_matches_clmm(datasets_dir):
    ref = CLMM_SLOPES["soup"]
    model = OrdinalMixed.from_formula(ref["formula"], pd.read_csv(datasets_dir / "soup.csv.gz"))
    _check_against_clmm(model, ref)


# ---------------------------------------------------------------- a small synthetic problem
def _simulate(n_groups=12, per_group=12, seed=0, offset=(0.0, 0.0), scale=(1.0, 1.0)):
    """Two columns (raw: ``offset + scale * z``), a random intercept and a random slope on
    the first column (sds 0.8 and 0.5, correlation 0.3)."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_groups), per_group)
    Z = rng.normal(size=(g.size, 2))
    L = np.array([[0.8, 0.0], [0.15, 0.5 * np.sqrt(1 - 0.3**2)]])
    u = rng.normal(size=(n_groups, 2)) @ L.T
    f = Z @ np.array([1.0, -0.5]) + u[g, 0] + u[g, 1] * Z[:, 0] + rng.normal(size=g.size)
    y = np.digitize(f, np.quantile(f, [1 / 3, 2 / 3]))
    return np.asarray(offset) + np.asarray(scale) * Z, y, g


@pytest.fixture(scope="module")
def small():
    X, y, g = _simulate()
    return X, y, g, OrdinalMixed(random_slopes=[0]).fit(X, y, g)


def _reference_laplace(beta, b, Sigma, X, y, g):
    """The Laplace approximation (1) on the user's scale: per group, the mode of
    ``log p(y | u) + log N(u; 0, Sigma)`` over ``u = (intercept, slope of column 0)`` by BFGS,
    and ``log p(y | u*) + log N(u*; 0, Sigma) + log(2 pi) - 1/2 log|H|`` with ``H`` minus the
    Hessian there by central differences (SciPy only)."""
    cuts = np.r_[-np.inf, b, np.inf]
    Sinv = np.linalg.inv(Sigma)
    _, logdet_S = np.linalg.slogdet(Sigma)
    total = 0.0
    for j in np.unique(g):
        rows = g == j
        f, R = X[rows] @ beta, np.column_stack([np.ones(rows.sum()), X[rows, 0]])
        hi, lo = cuts[y[rows] + 1], cuts[y[rows]]

        def neg(u, f=f, R=R, hi=hi, lo=lo):
            eta = f + R @ u
            with np.errstate(divide="ignore"):
                loglik = np.sum(np.log(norm.cdf(hi - eta) - norm.cdf(lo - eta)))
            return -loglik + 0.5 * u @ Sinv @ u + 0.5 * logdet_S + np.log(2 * np.pi)

        u = minimize(neg, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x
        h = 1e-4
        E = np.eye(2) * h
        H = np.array([[(neg(u + E[a] + E[c]) - neg(u + E[a] - E[c]) - neg(u - E[a] + E[c])
                        + neg(u - E[a] - E[c])) / (4 * h * h) for c in range(2)] for a in range(2)])
        total += -neg(u) + np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(H)[1]
    return total


def test_laplace_likelihood_with_a_slope_equals_a_scipy_evaluation_and_is_maximised(small):
    X, y, g, model = small
    assert model.converged_ and model.group_terms_ == ["(Intercept)", "x0"]
    ref = _reference_laplace(model.coef_, model.thresholds_, model.group_cov_, X, y, g)
    assert model.loglik_ == pytest.approx(ref, abs=1e-5)
    # A maximum: moving the covariance's Cholesky entries by 2e-2 either way lowers the value.
    C = np.linalg.cholesky(model.group_cov_)
    for a, c in [(0, 0), (1, 0), (1, 1)]:
        for sign in (-1, 1):
            moved = C.copy()
            moved[a, c] += sign * 2e-2
            assert _reference_laplace(model.coef_, model.thresholds_, moved @ moved.T, X, y, g) < ref


def test_implicit_gradient_with_a_slope_matches_finite_differences(small):
    X, y, g, model = small
    res = model.result_
    Z = (X - res.center) / res.scale
    R = np.column_stack([np.ones(len(y)), Z[:, 0]])
    args = (jnp.asarray(Z), jnp.asarray(R), jnp.asarray(y, jnp.int32), jnp.asarray(g, jnp.int32),
            jnp.ones(len(y)), jnp.zeros((res.config.n_groups, 2)), 1e-12, res.config)
    eta = jnp.asarray(res.eta) + 0.1 * jnp.sin(jnp.arange(res.eta.size) + 1.0)  # away from the optimum
    grad = check_implicit_gradient(args, eta)
    assert np.all(np.abs(grad[-3:]) > 1e-2)  # the covariance components are exercised


def test_predictions_with_a_slope_integrate_the_joint_gaussian(small):
    """The closed form against Monte Carlo over (eta, u_j) drawn with NumPy from the stored
    joint Gaussian, for rows of known groups and of a new group (u ~ N(0, Sigma))."""
    X, y, g, model = small
    res = model.result_
    rows, groups = X[[0, 30, 70, 100]], np.array([0, 2, 5, -1])
    closed = np.asarray(predict_mixed(res, rows, groups).proba)
    rng = np.random.default_rng(1)
    m, draws = res.eta.size, 40000
    Z = (rows - res.center) / res.scale
    for i, j in enumerate(groups):
        if j >= 0:
            mean = np.r_[res.eta, res.effects[j]]
            cov = np.block([[res.eta_cov, res.effects_cross[j].T], [res.effects_cross[j], res.effects_cov[j]]])
            s = rng.multivariate_normal(mean, cov, size=draws)
            u = s[:, m:]
        else:
            s = rng.multivariate_normal(res.eta, res.eta_cov, size=draws)
            lam = res.eta[-3:]
            Lam = np.array([[lam[0], 0.0], [lam[1], lam[2]]])
            u = rng.normal(size=(draws, 2)) @ Lam.T  # the group covariance at its estimate
        beta, theta = s[:, :2], s[:, 2:4]
        b = np.column_stack([theta[:, 0], theta[:, 0] + np.exp(theta[:, 1])])
        latent = Z[i] @ beta.T + u[:, 0] + u[:, 1] * Z[i, 0]
        cum = norm.cdf(b - latent[:, None]).mean(axis=0)
        np.testing.assert_allclose(closed[i], np.diff(np.r_[0.0, cum, 1.0]), atol=0.01)
    sampled = np.asarray(sample_class_probs_mixed(res, rows, groups, jax.random.key(0), n_draws=4000))
    np.testing.assert_allclose(sampled.mean(axis=0), closed, atol=0.01)


def test_raw_columns_give_the_same_fit_in_their_own_units(small):
    """Columns with offsets of 10^3 and scales of 10^-2 and 10^2: the same likelihood and
    predictions; the slope's sd and effects in the new units, the intercept's at the new x = 0."""
    X, y, g, model = small
    offset, scale = np.array([1e3, -40.0]), np.array([1e-2, 1e2])
    moved = OrdinalMixed(random_slopes=[0]).fit(X * scale + offset, y, g)
    assert moved.loglik_ == pytest.approx(model.loglik_, abs=1e-8)
    np.testing.assert_allclose(moved.predict_proba(X[:20] * scale + offset, g[:20]),
                               model.predict_proba(X[:20], g[:20]), atol=1e-8)
    np.testing.assert_allclose(moved.group_effects_[:, 1] * scale[0], model.group_effects_[:, 1], rtol=1e-6)
    # u_user(x=0 moved) = u_int - u_slope * offset / scale in the original units.
    np.testing.assert_allclose(moved.group_effects_[:, 0],
                               model.group_effects_[:, 0] - model.group_effects_[:, 1] * offset[0] / scale[0],
                               rtol=1e-6, atol=1e-6)
    assert moved.group_sd_[1] * scale[0] == pytest.approx(model.group_sd_[1], rel=1e-6)


def test_random_slopes_by_name_and_bad_ones(small):
    X, y, g, model = small
    frame = pd.DataFrame(X, columns=["dose", "age"])
    named = OrdinalMixed(random_slopes=["dose"]).fit(frame, y, g)
    assert named.group_terms_ == ["(Intercept)", "dose"]
    assert named.loglik_ == pytest.approx(model.loglik_, abs=1e-8)
    for slopes, error, message in [
        (["weight"], ValueError, "which X does not have"),
        ([2], ValueError, "X has 2 columns"),
        ([0, 0], ValueError, "twice"),
        ("dose", TypeError, "list of columns"),
        ([1.5], TypeError, "names or positions"),
    ]:
        with pytest.raises(error, match=message):
            OrdinalMixed(random_slopes=slopes).fit(frame, y, g)
    with pytest.raises(ValueError, match="no column names"):
        OrdinalMixed(random_slopes=["dose"]).fit(X, y, g)
    with pytest.raises(TypeError, match="from the formula"):
        OrdinalMixed.from_formula("y ~ dose + (1 | g)", frame.assign(y=y, g=g), random_slopes=[0])


@pytest.mark.slow  # three mixed fits, two programs: 10 s
def test_a_singular_fit_says_which_group_effects_sit_at_the_boundary():
    """statsmodels' `fair` data with `(1 + age | occupation)` gave a correlation of -1.000 and a
    slope sd of 3e-8 with no word of it.  Simulated here: groups that shift the intercept
    only, and ratings with no group effect at all; lme4's criterion (a diagonal entry of
    Lambda below 1e-4) names the slope, then the sd, and not a group effect that is there."""
    rng = np.random.default_rng(0)
    g, x = rng.integers(0, 20, 400), rng.normal(size=400)
    shifts = 0.8 * rng.normal(size=20)
    data = pd.DataFrame({"x": x, "g": g, "y": np.digitize(x + shifts[g] + rng.normal(size=400), [-1, 0, 1]),
                         "flat": np.digitize(x + rng.normal(size=400), [-1, 0, 1])})
    with pytest.warns(UserWarning, match=r"singular fit.*: g: x moves with g: \(Intercept\) \(correlation "
                                         r"[+-]1\.0000\)\.  The data"):
        sloped = OrdinalMixed.from_formula("y ~ x + (1 + x | g)", data)
    assert abs(sloped.summary().loc["corr(g: (Intercept), x)", "mean"]) > 0.999
    with pytest.warns(UserWarning, match=r"singular fit.*: sd\(g\) = [0-9.e-]+\.  The data"):
        flat = OrdinalMixed.from_formula("flat ~ x + (1 | g)", data)
    assert flat.group_sd_ < 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        intercepts = OrdinalMixed.from_formula("y ~ x + (1 | g)", data)
    assert intercepts.group_sd_ == pytest.approx(0.79, abs=0.2)
    assert intercepts.loglik_ == pytest.approx(sloped.loglik_, abs=0.01)
