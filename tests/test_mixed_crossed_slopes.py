"""Random slopes with several grouping factors: ``(1 + x | subject) + (1 | item)``.

References:
* R's ``ordinal::clmm`` (ordinal 2022.11.16, R 4.2.2, Laplace method, default settings) on the
  shared ``soup`` data, ``SURENESS ~ PROD + (1 + PROD | RESP) + (1 | PRODID)``, as printed by
  ``benchmarks/mixed_bench.py`` (``clmm`` through ``Rscript``): estimates, ``VarCorr``,
  ``logLik`` and the thresholds' and coefficient's standard errors.
* An independent SciPy evaluation of the Laplace approximation on the user's scale: the joint
  mode of all the effects (each subject's intercept and slope, each item's intercept) by
  BFGS, and the Hessian there by central differences of the analytic gradient.
* Monte Carlo over the stored joint Gaussian of the parameters and a row's effects.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize
from scipy.stats import norm

import jax
import jax.numpy as jnp
from test_mixed import check_implicit_gradient

from bayesord import OrdinalMixed, load_model
from bayesord._mixed import MixedConfig, predict_mixed, sample_class_probs_mixed

SOUP = {  # clmm: thresholds, coef, VarCorr sds (RESP intercept, RESP slope, PRODID), corr, logLik, se
    "probit": dict(thresholds=[-0.8903322927948, -0.2921666176822, -0.0841929589978, 0.0816582142321,
                               0.5296817118221],
                   coef=[0.799487518935], sd=[0.313575984197, 0.554779072943, 0.163249502661],
                   corr=-0.285271122573, loglik=-2656.53648394,
                   se=[0.192246156049, 0.172014140086, 0.170569430259, 0.170469196576, 0.170477559522,
                       0.170856106318]),
    "logit": dict(thresholds=[-1.518868886183, -0.471457526003, -0.121433399299, 0.155320756114,
                              0.901042476711],
                  coef=[1.37406527843], sd=[0.522897618836, 0.907239249031, 0.275271499891],
                  corr=-0.272644899441, loglik=-2654.75192123,
                  se=[0.324480383232, 0.291174664863, 0.287199729596, 0.286922618228, 0.286949354345,
                      0.287993386049]),
}


@pytest.mark.slow
@pytest.mark.parametrize("link", ["probit", "logit"])
def test_soup_product_slopes_by_respondent_and_products_match_clmm(datasets_dir, link):
    ref = SOUP[link]
    soup = pd.read_csv(datasets_dir / "soup.csv.gz")
    model = OrdinalMixed.from_formula("SURENESS ~ PROD + (1 + PROD | RESP) + (1 | PRODID)", soup, link=link)
    assert model.converged_
    assert model.group_terms_ == {"RESP": ["(Intercept)", "PROD[T.Test]"], "PRODID": ["(Intercept)"]}
    np.testing.assert_allclose(model.coef_, ref["coef"], atol=1e-3)
    np.testing.assert_allclose(model.thresholds_, ref["thresholds"], atol=1e-3)
    np.testing.assert_allclose(model.group_sd_, ref["sd"], atol=1e-3)
    table = model.summary()
    assert table.loc["corr(RESP: (Intercept), PROD[T.Test])", "mean"] == pytest.approx(ref["corr"], abs=1e-3)
    assert list(table.index[-4:]) == ["sd(RESP: (Intercept))", "sd(RESP: PROD[T.Test])", "sd(PRODID)",
                                      "corr(RESP: (Intercept), PROD[T.Test])"]
    assert model.loglik_ == pytest.approx(ref["loglik"], abs=1e-3)
    np.testing.assert_allclose(np.sqrt(np.diag(model.cov_))[:6], ref["se"], atol=1e-3)
    effects = model.group_effects()
    assert effects.index.names == ["factor", "group", "term"] and len(effects) == 185 * 2 + 6


# ---------------------------------------------------------------- a small synthetic problem
SUBJECTS, ITEMS = 12, 6


def _simulate(seed=0):
    """12 subjects crossed with 6 items, three rows per pair, raw columns (offsets 5 and 50);
    each subject's intercept and slope on column 0 (sds 0.7 and 0.4, correlation 0.3), each
    item's intercept (sd 0.5)."""
    rng = np.random.default_rng(seed)
    subject, item = np.meshgrid(np.arange(SUBJECTS), np.arange(ITEMS), indexing="ij")
    G = np.repeat(np.column_stack([subject.ravel(), item.ravel()]), 3, axis=0)
    X = rng.normal(size=(len(G), 2)) * [2.0, 3.0] + [5.0, 50.0]
    Sigma = np.array([[0.49, 0.3 * 0.7 * 0.4], [0.3 * 0.7 * 0.4, 0.16]])
    u = rng.multivariate_normal(np.zeros(2), Sigma, size=SUBJECTS)
    x0 = X[:, 0] - 5.0
    f = x0 * 0.5 - (X[:, 1] - 50.0) * 0.2 + u[G[:, 0], 0] + u[G[:, 0], 1] * x0
    f = f + 0.5 * rng.normal(size=ITEMS)[G[:, 1]] + rng.normal(size=len(G))
    return X, np.digitize(f, np.quantile(f, [1 / 3, 2 / 3])), G


@pytest.fixture(scope="module")
def small():
    X, y, G = _simulate()
    frame = pd.DataFrame({"subject": G[:, 0], "item": G[:, 1]})
    return X, y, G, OrdinalMixed(random_slopes={"subject": [0]}).fit(X, y, frame)


def _reference_laplace(beta, b, Sigma, item_sd, X, y, G):
    """The Laplace approximation (1) over all 12 x 2 + 6 effects jointly, on the user's scale
    (each subject's intercept at x = 0 and slope per unit of column 0; SciPy only)."""
    cuts = np.r_[-np.inf, b, np.inf]
    hi, lo, f0, x0 = cuts[y + 1], cuts[y], X @ beta, X[:, 0]
    S_inv = np.linalg.inv(Sigma)
    n_eff = 2 * SUBJECTS + ITEMS

    def split(u):
        return u[:2 * SUBJECTS].reshape(SUBJECTS, 2), u[2 * SUBJECTS:]

    def latent(u):
        s, c = split(u)
        return f0 + s[G[:, 0], 0] + s[G[:, 0], 1] * x0 + c[G[:, 1]]

    def neg(u):
        f = latent(u)
        s, c = split(u)
        prior = 0.5 * np.sum((s @ S_inv) * s) + 0.5 * np.sum(c * c) / item_sd**2
        return -np.sum(np.log(norm.cdf(hi - f) - norm.cdf(lo - f))) + prior

    def grad(u):
        f = latent(u)
        s, c = split(u)
        g_f = (norm.pdf(hi - f) - norm.pdf(lo - f)) / (norm.cdf(hi - f) - norm.cdf(lo - f))  # -dlogP/df
        g_s = np.column_stack([np.bincount(G[:, 0], g_f, SUBJECTS), np.bincount(G[:, 0], g_f * x0, SUBJECTS)])
        return np.r_[(g_s + s @ S_inv).ravel(), np.bincount(G[:, 1], g_f, ITEMS) + c / item_sd**2]

    u = minimize(neg, np.zeros(n_eff), jac=grad, method="BFGS", options={"gtol": 1e-10}).x
    h = 1e-5
    H = np.array([(grad(u + h * e) - grad(u - h * e)) / (2 * h) for e in np.eye(n_eff)])
    log_prior_norm = -0.5 * (SUBJECTS * np.linalg.slogdet(Sigma)[1] + ITEMS * np.log(item_sd**2))
    return -neg(u) + log_prior_norm - 0.5 * np.linalg.slogdet(0.5 * (H + H.T))[1]


@pytest.mark.slow  # the module's fixture: crossed factors with slopes, 10 s of compiling
def test_laplace_equals_a_scipy_evaluation_and_is_maximised(small):
    X, y, G, model = small
    assert model.converged_ and model.group_factors_ == ["subject", "item"]
    assert model.group_terms_ == {"subject": ["(Intercept)", "x0"], "item": ["(Intercept)"]}
    Sigma, item_sd = model.group_cov_[:2, :2], model.group_sd_[2]
    np.testing.assert_array_equal(model.group_cov_[2, :2], 0.0)  # the factors are independent
    ref = _reference_laplace(model.coef_, model.thresholds_, Sigma, item_sd, X, y, G)
    assert model.loglik_ == pytest.approx(ref, abs=1e-6)
    # A maximum: moving any Cholesky entry of Sigma, or the item sd, by 2e-2 lowers the value.
    C = np.linalg.cholesky(Sigma)
    for a, c in [(0, 0), (1, 0), (1, 1)]:
        for sign in (-1, 1):
            moved = C.copy()
            moved[a, c] += sign * 2e-2
            assert _reference_laplace(model.coef_, model.thresholds_, moved @ moved.T, item_sd, X, y, G) < ref
    for sign in (-1, 1):
        assert _reference_laplace(model.coef_, model.thresholds_, Sigma, item_sd + sign * 2e-2, X, y, G) < ref


@pytest.mark.slow  # the module's fixture: crossed factors with slopes, 10 s of compiling
def test_implicit_gradient_matches_finite_differences(small):
    X, y, G, model = small
    res = model.result_
    Z = (X - res.center) / res.scale
    n = len(y)
    R = np.stack([np.column_stack([np.ones(n), Z[:, 0]]), np.column_stack([np.ones(n), np.zeros(n)])], axis=1)
    args = (jnp.asarray(Z), jnp.asarray(R), jnp.asarray(y, jnp.int32), jnp.asarray(G, jnp.int32),
            jnp.ones(n), jnp.zeros((SUBJECTS + ITEMS, 2)), 1e-12, res.config)
    eta = jnp.asarray(res.eta) + 0.1 * jnp.cos(jnp.arange(res.eta.size) + 1.0)  # away from the optimum
    grad = check_implicit_gradient(args, eta)
    assert np.all(np.abs(grad[-4:]) > 1e-2)  # every covariance component is exercised


@pytest.mark.slow  # the module's fixture: crossed factors with slopes, 10 s of compiling
def test_predictions_integrate_the_joint_gaussian(small):
    """Rows with both levels known (the subject's two effects and the item's correlated through
    the shared rows), with the item new, and with the subject new, against NumPy Monte Carlo."""
    X, y, G, model = small
    res = model.result_
    rows = X[[0, 40, 90]]
    codes = np.array([[0, 0], [3, -1], [-1, 2]])
    closed = np.asarray(predict_mixed(res, rows, codes).proba)
    rng = np.random.default_rng(3)
    m, draws = res.eta.size, 40000
    Z = (rows - res.center) / res.scale
    lam = res.eta[-4:]  # the subject's Lambda row by row (3 entries), then the item's
    Lam_s = np.array([[lam[0], 0.0], [lam[1], lam[2]]])
    tiles = np.asarray(res.factor_cross_cov).reshape(SUBJECTS, 2, ITEMS, 2)  # subjects have the most levels
    for i, (a, c) in enumerate(codes):
        r = np.array([1.0, Z[i, 0]])
        # The row's effects: the subject's two (effects are listed factor by factor), the item's one.
        blocks = ([(a, 2)] if a >= 0 else []) + ([(SUBJECTS + c, 1)] if c >= 0 else [])
        k = m + sum(p for _, p in blocks)
        cov, mean = np.zeros((k, k)), list(res.eta)
        cov[:m, :m] = res.eta_cov
        at = m
        for e, p in blocks:
            cov[at:at + p, :m] = res.effects_cross[e, :p]
            cov[:m, at:at + p] = res.effects_cross[e, :p].T
            cov[at:at + p, at:at + p] = res.effects_cov[e, :p, :p]
            mean += list(res.effects[e, :p])
            at += p
        if a >= 0 and c >= 0:
            cov[m:m + 2, m + 2] = cov[m + 2, m:m + 2] = tiles[a, :, c, 0]
        s = rng.multivariate_normal(mean, cov, size=draws)
        u = np.zeros(draws)
        at = m
        for e, p in blocks:
            u += s[:, at:at + p] @ r[:p]
            at += p
        if a < 0:  # a new subject: r^T u ~ N(0, r^T Sigma r) at the estimate
            u += np.sqrt(r @ Lam_s @ Lam_s.T @ r) * rng.normal(size=draws)
        if c < 0:  # a new item
            u += abs(lam[3]) * rng.normal(size=draws)
        b = np.column_stack([s[:, 2], s[:, 2] + np.exp(s[:, 3])])
        cum = norm.cdf(b - (Z[i] @ s[:, :2].T + u)[:, None]).mean(axis=0)
        np.testing.assert_allclose(closed[i], np.diff(np.r_[0.0, cum, 1.0]), atol=0.01)
    sampled = np.asarray(sample_class_probs_mixed(res, rows, codes, jax.random.key(0), n_draws=4000))
    np.testing.assert_allclose(sampled.mean(axis=0), closed, atol=0.01)
    assert np.abs(tiles[0, :, 0, 0]).max() > 1e-4  # the levels' covariance is exercised


@pytest.mark.slow  # the module's fixture: crossed factors with slopes, 10 s of compiling
def test_raw_columns_give_the_same_fit_in_their_own_units(small):
    X, y, G, model = small
    shift, scale = np.array([1e3, -20.0]), np.array([100.0, 0.01])
    frame = pd.DataFrame({"subject": G[:, 0], "item": G[:, 1]})
    moved = OrdinalMixed(random_slopes={"subject": [0]}).fit(X * scale + shift, y, frame)
    assert moved.loglik_ == pytest.approx(model.loglik_, abs=1e-7)
    np.testing.assert_allclose(moved.coef_ * scale, model.coef_, rtol=1e-6)
    # The slope's sd is per unit of its column; the intercept's is at x = 0, which moved.
    assert moved.group_sd_[1] * scale[0] == pytest.approx(model.group_sd_[1], rel=1e-5)
    assert moved.group_sd_[2] == pytest.approx(model.group_sd_[2], rel=1e-5)
    np.testing.assert_allclose(moved.predict_proba(X[:20] * scale + shift, frame[:20]),
                               model.predict_proba(X[:20], frame[:20]), atol=1e-7)


@pytest.mark.slow  # the module's fixture: crossed factors with slopes, 10 s of compiling
def test_attributes_summary_and_a_saved_model(small, tmp_path):
    X, y, G, model = small
    assert model.group_effects_["subject"].shape == (SUBJECTS, 2)
    assert model.group_effects_["item"].shape == (ITEMS,)
    table = model.summary()
    assert list(table.index[-4:]) == ["sd(subject: (Intercept))", "sd(subject: x0)", "sd(item)",
                                      "corr(subject: (Intercept), x0)"]
    effects = model.group_effects()
    assert effects.index.names == ["factor", "group", "term"] and len(effects) == 2 * SUBJECTS + ITEMS
    mean = effects["mean"].to_numpy()  # subject by subject (intercept, slope), then the items
    np.testing.assert_allclose(mean[:2 * SUBJECTS].reshape(SUBJECTS, 2), model.group_effects_["subject"])
    np.testing.assert_allclose(mean[2 * SUBJECTS:], model.group_effects_["item"])
    path = tmp_path / "crossed_slopes.npz"
    model.save(path)
    loaded = load_model(path)
    rows, codes = X[:6], G[:6]
    np.testing.assert_array_equal(loaded.predict_proba(rows, codes), model.predict_proba(rows, codes))
    assert loaded.summary().equals(table) and loaded.group_terms_ == model.group_terms_


def test_slopes_per_factor_are_checked():
    with pytest.raises(ValueError, match="one tuple of columns per factor"):
        MixedConfig(n_classes=3, n_groups=(4, 5), slopes=((0,),))
    with pytest.raises(ValueError, match="slopes of factor 1 names a column twice"):
        MixedConfig(n_classes=3, n_groups=(4, 5), slopes=((), (1, 1)))
    X, y, G = _simulate()
    frame = pd.DataFrame({"subject": G[:, 0], "item": G[:, 1]})
    with pytest.raises(ValueError, match=r"random_slopes\['item'\] names column 7"):
        OrdinalMixed(random_slopes={"item": [7]}).fit(X, y, frame)


@pytest.mark.slow  # the module's fixture: crossed factors with slopes, 10 s of compiling
def test_cross_conformal_sets_refit_with_the_named_factors(small):
    """The fold copies get the factors' names, which ``random_slopes`` uses."""
    X, y, G, model = small
    frame = pd.DataFrame({"subject": G[:, 0], "item": G[:, 1]})
    model = OrdinalMixed(random_slopes={"subject": [0]}).fit(X, y, frame).calibrate(X, y, frame, cv=3)
    lower, upper = model.predict_set(X[:40], 0.2, groups=frame[:40])
    assert np.all(lower <= upper)
    assert np.mean((lower <= y[:40]) & (y[:40] <= upper)) >= 0.6
