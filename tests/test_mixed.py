"""The random-intercept ordinal model (``OrdinalMixed``, ``fit_mixed``).

References:
* R's ``ordinal::clmm`` (ordinal 2022.11.16, R 4.2.2, Laplace method, default settings) on the
  shared ``wine`` and ``soup`` data sets: the numbers below were printed by
  ``benchmarks/mixed_bench.py``, which runs ``clmm`` through ``Rscript`` in the same run as
  bayesord; for ``wine`` with the logit link they are also the published ones (Christensen,
  "A tutorial on fitting cumulative link mixed models with clmm2 from the ordinal package":
  tempwarm 3.063, contactyes 1.835, judge sd 1.13, log-likelihood -81.57).
* An independent SciPy evaluation of the Laplace approximation (one-dimensional mode search
  and a finite-difference curvature per group), adaptive Gauss-Hermite quadrature of the
  exact marginal likelihood, and statsmodels' ``OrderedModel`` for the model without groups.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import roots_hermitenorm
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning

import jax
import jax.numpy as jnp

from bayesord import OrdinalMixed, load_model
from bayesord._mixed import MixedConfig, _laplace_loglik, fit_mixed, predict_mixed, sample_class_probs_mixed
from bayesord.estimators._formula import coding_state

# ---------------------------------------------------------------- R references
CLMM = {
    ("wine", "logit"): dict(
        coef=[3.062996626, 1.834884922], thresholds=[-1.623666924, 1.513365183, 4.228526688, 6.088772558],
        sd=1.131132578, loglik=-81.56540929,
        coef_se=[0.5953761831, 0.5125293320], thresholds_se=[0.6824410320, 0.6037533304, 0.8089660503,
                                                               0.9724536542],
        ranef=[1.69617817508, -0.56578307671, 0.96880827817, -0.05954988774, 0.23051010547, 0.47703863553,
               -1.91097339194, -0.27294385142, -0.55467575715],
        cond_sd=[0.5538459290, 0.6147648097, 0.5954434093, 0.6043070400, 0.5971655128, 0.5903791203,
                 0.5861478521, 0.5523090893, 0.5641979850]),
    ("wine", "probit"): dict(
        coef=[1.8000144112, 1.0482054671], thresholds=[-0.9264796803, 0.8894377761, 2.4675927360, 3.5366621806],
        sd=0.6631531896, loglik=-80.93060715,
        coef_se=[0.3269399821, 0.2855452285], thresholds_se=[0.3881513554, 0.3484765065, 0.4468722535,
                                                               0.5256159269]),
    ("soup", "logit"): dict(
        coef=[1.2055280084], thresholds=[-1.4767744673, -0.4546834582, -0.1174027741, 0.1473851003,
                                         0.8519253423],
        sd=0.5581583376, loglik=-2673.708489, coef_se=[0.09178040696],
        thresholds_se=[0.09382213135, 0.08259725143, 0.08180917768, 0.08186909720, 0.08457621700]),
    ("soup", "probit"): dict(
        coef=[0.70566024468], thresholds=[-0.86146884562, -0.28254337359, -0.08265635351, 0.07617038612,
                                          0.50257670921],
        sd=0.3390418015, loglik=-2676.113646, coef_se=[0.05399449392],
        thresholds_se=[0.05392501010, 0.04999179837, 0.04973382357, 0.04976793179, 0.05078986931]),
}
FORMULA = {"wine": "rating ~ temp + contact + (1 | judge)", "soup": "SURENESS ~ PROD + (1 | RESP)"}


def _grouped(datasets_dir, name):
    return pd.read_csv(datasets_dir / f"{name}.csv.gz")


def _check_against_clmm(model, ref):
    k = len(ref["coef"])
    np.testing.assert_allclose(model.coef_, ref["coef"], atol=1e-3)
    np.testing.assert_allclose(model.thresholds_, ref["thresholds"], atol=1e-3)
    assert model.group_sd_ == pytest.approx(ref["sd"], abs=1e-3)
    assert model.loglik_ == pytest.approx(ref["loglik"], abs=1e-3)
    se = np.sqrt(np.diag(model.cov_))
    np.testing.assert_allclose(se[:k], ref["coef_se"], atol=1e-3)
    np.testing.assert_allclose(se[k:-1], ref["thresholds_se"], atol=1e-3)


@pytest.fixture(scope="module")
def wine_logit(datasets_dir):
    return OrdinalMixed.from_formula(FORMULA["wine"], _grouped(datasets_dir, "wine"), link="logit")


def test_wine_logit_matches_clmm(wine_logit):
    ref = CLMM[("wine", "logit")]
    _check_against_clmm(wine_logit, ref)
    effects = wine_logit.group_effects()
    np.testing.assert_allclose(effects["mean"], ref["ranef"], atol=1e-3)
    np.testing.assert_allclose(effects["cond_sd"], ref["cond_sd"], atol=1e-3)
    # The total sd adds the uncertainty of (beta, b, tau) to clmm's conditional one.
    assert np.all(effects["sd"] > effects["cond_sd"])
    assert wine_logit.converged_


def test_formula_labels_the_summary_by_term_and_class(wine_logit):
    table = wine_logit.summary()
    assert list(table.index) == ["temp[T.warm]", "contact[T.yes]", "threshold 1|2", "threshold 2|3",
                                 "threshold 3|4", "threshold 4|5", "sd(judge)"]
    row = table.loc["temp[T.warm]"]
    assert row["z"] == pytest.approx(row["mean"] / row["sd"])
    assert row["p"] == pytest.approx(2 * norm.sf(abs(row["z"])))
    assert np.isnan(table.loc["sd(judge)", "p"])
    # The sd's 95% interval: normal on the log scale, inside (0, inf).
    sd, se = table.loc["sd(judge)", "mean"], table.loc["sd(judge)", "sd"]
    np.testing.assert_allclose(table.loc["sd(judge)", ["2.5%", "97.5%"]].to_numpy(float),
                               sd * np.exp(np.array([-1, 1]) * 1.959964 * se / sd), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name, link", [("wine", "probit"), ("soup", "logit"), ("soup", "probit")])
def test_matches_clmm(datasets_dir, name, link):
    model = OrdinalMixed.from_formula(FORMULA[name], _grouped(datasets_dir, name), link=link)
    _check_against_clmm(model, CLMM[(name, link)])


@pytest.mark.slow
def test_thresholds_and_groups_only_match_clmm(datasets_dir):
    """``rating ~ (1 | judge)``: no fixed effects (clmm: thresholds -2.7229981094,
    -0.5427634063, 1.0953367557, 2.3533567488, judge sd 0.5651198306, log-lik -102.9879971;
    ours is 1.1e-3 higher, clmm stopping a little short of the maximum)."""
    model = OrdinalMixed.from_formula("rating ~ (1 | judge)", _grouped(datasets_dir, "wine"), link="logit")
    np.testing.assert_allclose(model.thresholds_, [-2.7229981094, -0.5427634063, 1.0953367557, 2.3533567488],
                               atol=1e-3)
    assert model.group_sd_ == pytest.approx(0.5651198306, abs=1e-3)
    assert -102.9879971 <= model.loglik_ <= -102.9879971 + 2e-3
    assert model.coef_.shape == (0,)
    with pytest.raises(ValueError, match="no columns"):
        model.marginal_effects(_grouped(datasets_dir, "wine"))


def test_formula_predictions_for_known_and_new_groups(wine_logit, datasets_dir, tmp_path):
    df = _grouped(datasets_dir, "wine")
    rows = df.iloc[[0, 40]]
    known = wine_logit.predict_proba(rows)
    new = wine_logit.predict_proba(rows.assign(judge=[100, 101]))
    np.testing.assert_allclose(known.sum(axis=1), 1.0)
    # Judge 1 rates high (effect +1.7): a new judge is expected lower.
    assert known[0] @ np.arange(5) > new[0] @ np.arange(5)
    # A new group's probabilities do not depend on which unseen label it has.
    np.testing.assert_allclose(new[0], wine_logit.predict_proba(rows.iloc[:1].assign(judge=-7))[0])
    # An explicit groups= overrides the column.
    np.testing.assert_allclose(wine_logit.predict_proba(rows, groups=[100, 101]), new)
    lo, hi, sd = wine_logit.predict_proba_interval(rows)
    assert np.all((lo <= known + 1e-12) & (known <= hi + 1e-12)) and np.all(sd > 0)
    # Named as the saved model names it: the column, its unseen levels, the fitted ones.
    unseen = r"category the model was not fitted with \(column 'temp': \['hot'\]; fitted levels \['cold', 'warm'\]\)"
    with pytest.raises(ValueError, match=unseen):
        wine_logit.predict_proba(rows.assign(temp="hot"))
    with pytest.raises(TypeError, match="formula"):
        wine_logit.predict_proba(rows[["temp"]].to_numpy())
    with pytest.raises(ValueError, match="no column 'judge'"):
        wine_logit.predict_proba(rows.drop(columns="judge"))
    # Saved and loaded, the model codes DataFrames as the fitted one does.
    path = tmp_path / "wine.npz"
    wine_logit.save(path)
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.predict_proba(rows), known)
    np.testing.assert_array_equal(loaded.predict_proba(rows.assign(judge=[100, 101])), new)
    assert loaded.formula_ == wine_logit.formula_ and loaded.summary().equals(wine_logit.summary())
    with pytest.raises(ValueError, match=unseen):
        loaded.predict_proba(rows.assign(temp="hot"))


# ---------------------------------------------------------------- small synthetic problems
def _simulate(n_groups=10, per_group=10, d=2, n_classes=3, tau=0.8, seed=0, offset=0.0, link="probit"):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_groups), per_group)
    X = rng.normal(size=(g.size, d)) * np.arange(1, d + 1) + offset
    f = (X - offset) @ np.linspace(1.0, -0.5, d) + tau * rng.normal(size=n_groups)[g]
    noise = rng.normal(size=g.size) if link == "probit" else rng.logistic(size=g.size)
    cuts = np.quantile(f + noise, np.linspace(0, 1, n_classes + 1)[1:-1])
    return X, np.digitize(f + noise, cuts), g


def _reference_laplace(beta, b, tau, X, y, g):
    """The Laplace approximation (1), per group: a bounded 1-D mode search and a central
    finite-difference curvature (SciPy only)."""
    cuts = np.r_[-np.inf, b, np.inf]
    total = 0.0
    for j in np.unique(g):
        rows = g == j
        f, hi, lo = X[rows] @ beta, cuts[y[rows] + 1], cuts[y[rows]]

        def neg_h(u, f=f, hi=hi, lo=lo):  # +inf far out, where a class probability underflows
            with np.errstate(divide="ignore"):
                return -(np.sum(np.log(norm.cdf(hi - f - u) - norm.cdf(lo - f - u))) - 0.5 * u * u / tau**2)

        u = minimize_scalar(neg_h, bounds=(-20, 20), method="bounded", options={"xatol": 1e-10}).x
        step = 1e-4
        curv = (neg_h(u + step) - 2 * neg_h(u) + neg_h(u - step)) / step**2
        total += -neg_h(u) - 0.5 * np.log(tau**2 * curv)
    return total


def _gauss_hermite(beta, b, tau, X, y, g, n_nodes=40):
    """log of the exact marginal likelihood by adaptive Gauss-Hermite quadrature per group."""
    cuts = np.r_[-np.inf, b, np.inf]
    nodes, wts = roots_hermitenorm(n_nodes)
    total = 0.0
    for j in np.unique(g):
        rows = g == j
        f, hi, lo = X[rows] @ beta, cuts[y[rows] + 1], cuts[y[rows]]

        def loglik(u, f=f, hi=hi, lo=lo):
            u = np.atleast_1d(u)[:, None]
            with np.errstate(divide="ignore"):
                return np.sum(np.log(norm.cdf(hi - f - u) - norm.cdf(lo - f - u)), axis=1)

        def neg(u, loglik=loglik):
            return -loglik(u)[0] + 0.5 * u * u / tau**2

        mode = minimize_scalar(neg, bounds=(-20, 20), method="bounded", options={"xatol": 1e-10}).x
        curv = (neg(mode + 1e-3) - 2 * neg(mode) + neg(mode - 1e-3)) / 1e-6
        s = 1.0 / np.sqrt(curv)
        # int g(u) du = s int g(mode + s z) e^{z^2/2} e^{-z^2/2} dz, the last factor Hermite's weight.
        u = mode + s * nodes
        log_terms = loglik(u) + norm.logpdf(u, scale=tau) + 0.5 * nodes**2 + np.log(s)
        total += np.log(np.sum(wts * np.exp(log_terms)))
    return total


@pytest.fixture(scope="module")
def small():
    X, y, g = _simulate()
    model = OrdinalMixed(link="probit").fit(X, y, g)
    return X, y, g, model


def test_laplace_likelihood_is_maximised_and_equals_a_scipy_evaluation(small):
    X, y, g, model = small
    beta, b, tau = model.coef_, model.thresholds_, model.group_sd_
    ref = _reference_laplace(beta, b, tau, X, y, g)
    assert model.loglik_ == pytest.approx(ref, abs=1e-6)
    # A maximum: moving any parameter by 1e-2 either way lowers the SciPy value.
    params = np.concatenate([beta, b, [tau]])
    for k in range(params.size):
        for sign in (-1, 1):
            p = params.copy()
            p[k] += sign * 1e-2
            assert _reference_laplace(p[:2], p[2:4], p[4], X, y, g) < ref


def test_laplace_is_close_to_quadrature_of_the_exact_likelihood(small):
    X, y, g, model = small
    args = (model.coef_, model.thresholds_, model.group_sd_, X, y, g)
    exact = _gauss_hermite(*args)
    assert exact == pytest.approx(_gauss_hermite(*args, n_nodes=60), abs=1e-8)  # quadrature converged
    # Quadrature with one node at the mode is Laplace's method itself.
    assert _gauss_hermite(*args, n_nodes=1) == pytest.approx(model.loglik_, abs=1e-6)
    # Laplace's error is O(1/rows per group) per group: small, but not zero.
    assert 1e-5 < abs(model.loglik_ - exact) < 0.02 * len(np.unique(g))


def test_implicit_gradient_matches_finite_differences(small):
    X, y, g, model = small
    res = model.result_
    Z = (X - res.center) / res.scale
    q = len(np.unique(g))
    args = (jnp.asarray(Z), jnp.ones((len(y), 1)), jnp.asarray(y, jnp.int32), jnp.asarray(g, jnp.int32),
            jnp.ones(len(y)), jnp.zeros((q, 1)), 1e-12, MixedConfig(n_classes=3, n_groups=q))
    eta = jnp.asarray(res.eta) + jnp.array([0.2, -0.1, 0.1, 0.05, 0.3])  # away from the optimum
    grad = check_implicit_gradient(args, eta)
    assert abs(grad[-1]) > 0.1  # the group-sd component is exercised


def check_implicit_gradient(args, eta):
    """``jax.grad`` of the Laplace likelihood (1) at ``eta`` (through the implicit derivative
    of the modes) against central differences; returns the gradient."""
    value = jax.jit(lambda e: _laplace_loglik(e, *args)[0])
    grad = np.asarray(jax.grad(value)(eta))
    step = 1e-5
    fd = [(value(eta.at[k].add(step)) - value(eta.at[k].add(-step))) / (2 * step) for k in range(eta.size)]
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)
    return grad


def test_without_group_variance_it_is_the_fixed_effects_likelihood(small):
    """At tau = 0, (1) is the cumulative link model's log-likelihood (statsmodels)."""
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    X, y, g, _ = small
    q = len(np.unique(g))
    theta = np.array([-0.4, np.log(0.9)])
    beta = np.array([0.7, -0.2])
    eta = jnp.asarray(np.r_[beta, theta, 0.0])
    ours = _laplace_loglik(eta, jnp.asarray(X), jnp.ones((len(y), 1)), jnp.asarray(y, jnp.int32),
                           jnp.asarray(g, jnp.int32), jnp.ones(len(y)), jnp.zeros((q, 1)), 1e-12,
                           MixedConfig(n_classes=3, n_groups=q))[0]
    theirs = OrderedModel(y, X, distr="probit").loglike(np.r_[beta, theta])
    assert float(ours) == pytest.approx(theirs, rel=1e-12)


def test_column_shifts_and_scales_change_nothing_but_the_coefficients_units(small):
    X, y, g, model = small
    shift, scale = np.array([1e4, -50.0]), np.array([100.0, 0.01])
    moved = OrdinalMixed(link="probit").fit(X * scale + shift, y, g)
    assert moved.loglik_ == pytest.approx(model.loglik_, abs=1e-8)
    np.testing.assert_allclose(moved.coef_ * scale, model.coef_, rtol=1e-6)
    assert moved.group_sd_ == pytest.approx(model.group_sd_, rel=1e-6)
    np.testing.assert_allclose(moved.predict_proba(X[:20] * scale + shift, g[:20]),
                               model.predict_proba(X[:20], g[:20]), atol=1e-8)
    np.testing.assert_allclose(moved.group_effects_, model.group_effects_, atol=1e-7)


def test_sample_weight_two_equals_a_duplicate_row(small):
    X, y, g, model = small
    extra = [3, 50, 77]  # 100 -> 103 rows: the same padded size (104), so the same compiled program
    dup = OrdinalMixed(link="probit").fit(np.r_[X, X[extra]], np.r_[y, y[extra]], np.r_[g, g[extra]])
    w = np.ones(len(y))
    w[extra] = 2.0
    weighted = OrdinalMixed(link="probit").fit(X, y, g, sample_weight=w)
    assert weighted.loglik_ == pytest.approx(dup.loglik_, abs=1e-8)
    np.testing.assert_allclose(weighted.coef_, dup.coef_, atol=1e-7)
    assert weighted.group_sd_ == pytest.approx(dup.group_sd_, abs=1e-7)


def test_predictive_probabilities_integrate_the_joint_gaussian(small):
    """The closed-form predictive against Monte Carlo over the stored joint Gaussian of
    (eta, u_j), drawn here with NumPy (known groups and a new group)."""
    X, y, g, model = small
    res = model.result_
    rows, groups = X[:6], np.array([0, 1, 2, 3, -1, -1])
    closed = np.asarray(predict_mixed(res, rows, groups).proba)
    rng = np.random.default_rng(1)
    m = res.eta.size
    draws = 20000
    Z = (rows - res.center) / res.scale
    for i, j in enumerate(groups):
        if j >= 0:
            mean = np.r_[res.eta, res.effects[j]]
            cov = np.block([[res.eta_cov, res.effects_cross[j].T], [res.effects_cross[j], res.effects_cov[j]]])
        else:
            mean, cov = np.r_[res.eta, 0.0], np.zeros((m + 1, m + 1))
            cov[:m, :m] = res.eta_cov
        s = rng.multivariate_normal(mean, cov, size=draws)
        beta, theta, u = s[:, :2], s[:, 2:4], s[:, 5]
        if j < 0:
            u = np.abs(res.eta[-1]) * rng.normal(size=draws)  # the group sd at its estimate
        b = np.column_stack([theta[:, 0], theta[:, 0] + np.exp(theta[:, 1])])
        cum = norm.cdf(b - (Z[i] @ beta.T + u)[:, None]).mean(axis=0)
        mc = np.diff(np.r_[0.0, cum, 1.0])
        np.testing.assert_allclose(closed[i], mc, atol=0.01)
    # The draws behind the bands average to the same probabilities.
    sampled = np.asarray(sample_class_probs_mixed(res, rows, groups, jax.random.key(0), n_draws=4000))
    np.testing.assert_allclose(sampled.mean(axis=0)[:4], closed[:4], atol=0.01)


def test_identical_rows_get_identical_bands(small):
    """One normal per draw for the rows' group terms (common random numbers): a row given
    three times got lower bounds 0.249, 0.242 and 0.284 with a normal per row."""
    X, y, g, model = small
    rows, groups = np.repeat(X[:2], 3, axis=0), np.repeat(g[:2], 3)
    lo, hi, sd = model.predict_proba_interval(rows, groups)
    for band in (lo, hi, sd):
        np.testing.assert_array_equal(band[0:3], np.broadcast_to(band[0], (3, band.shape[1])))
        np.testing.assert_array_equal(band[3:6], np.broadcast_to(band[3], (3, band.shape[1])))
    assert np.all(sd > 0) and not np.array_equal(sd[0], sd[3])


def test_save_and_load_round_trip(small, tmp_path):
    X, y, g, model = small
    path = tmp_path / "mixed.npz"
    model.save(path)
    loaded = load_model(path)
    assert isinstance(loaded, OrdinalMixed)
    np.testing.assert_array_equal(loaded.predict_proba(X[:10], g[:10]), model.predict_proba(X[:10], g[:10]))
    np.testing.assert_array_equal(loaded.group_effects_, model.group_effects_)
    assert loaded.summary().equals(model.summary())


def test_text_group_labels_and_unseen_groups(small):
    X, y, g, model = small
    names = np.array([f"site-{j}" for j in g], dtype=object)
    texts = OrdinalMixed(link="probit").fit(X, y, names)
    assert list(texts.groups_) == sorted(set(names))
    np.testing.assert_allclose(texts.predict_proba(X[:5], names[:5]), model.predict_proba(X[:5], g[:5]),
                               atol=1e-10)
    unseen = texts.predict_proba(X[:2], ["elsewhere", "nowhere"])
    np.testing.assert_allclose(unseen, model.predict_proba(X[:2], [-1, -2]), atol=1e-10)


def test_group_labels_written_as_another_type_are_the_fitted_groups(small):
    """A CSV's group column with one text label is read as text: its known groups ("3") were
    predicted as new ones (a user's trial); they are the fitted groups, with a warning."""
    from bayesord.estimators._mixed import _group_codes

    X, _, g, model = small
    as_text = np.array([str(j) for j in g[:6]], dtype=object)
    with pytest.warns(UserWarning, match=r"group label\(s\) '.*' are the fitted groups of the same value written "
                                         r"as another type"):
        np.testing.assert_array_equal(model.predict_proba(X[:6], as_text), model.predict_proba(X[:6], g[:6]))
    codes, retyped = _group_codes([1, 2, 10], ["2", "10.0", "J10", 1, 2.0])
    assert codes.tolist() == [1, 2, -1, 0, 1] and retyped == ["2", "10.0"]
    codes, retyped = _group_codes(["1", "2", "x"], [1, 2.0, 3, "x", 2.5])
    assert codes.tolist() == [0, 1, -1, 2, -1] and retyped == [1, 2.0]


# ---------------------------------------------------------------- marginal effects
def _plugin_proba_scipy(coef, thresholds, effects, X, groups, cdf):
    u = np.where(groups >= 0, effects[np.maximum(groups, 0)], 0.0)
    cum = cdf(thresholds[None, :] - (X @ coef + u)[:, None])
    return np.diff(np.c_[np.zeros(len(X)), cum, np.ones(len(X))], axis=1)


def test_marginal_slopes_match_finite_differences_and_posterior_draws(small):
    X, _, g, model = small
    table = model.marginal_effects(X, g)
    assert list(table["kind"].unique()) == ["slope"]
    effects = model.group_effects_
    step = 1e-6
    draws = np.random.default_rng(2).multivariate_normal(model.result_.eta, model.result_.eta_cov, size=2000)
    res = model.result_
    for j, name in enumerate(["x0", "x1"]):
        def avg(coef, thresholds, shift):
            Xs = X.copy()
            Xs[:, j] += shift
            p = _plugin_proba_scipy(coef, thresholds, effects, Xs, g, norm.cdf).mean(axis=0)
            return np.r_[p, p @ np.arange(3)]

        fd = (avg(model.coef_, model.thresholds_, step) - avg(model.coef_, model.thresholds_, -step)) / (2 * step)
        np.testing.assert_allclose(table.loc[name, "mean"].to_numpy(), fd, atol=1e-7)
        # The delta method's sds against the spread over draws of (beta, b) from the posterior.
        per_draw = []
        for e in draws[:400]:
            coef = e[:2] / res.scale
            b = np.r_[e[2], e[2] + np.exp(e[3])] + res.center @ coef
            per_draw.append((avg(coef, b, step) - avg(coef, b, -step)) / (2 * step))
        np.testing.assert_allclose(table.loc[name, "sd"].to_numpy(), np.std(per_draw, axis=0), rtol=0.15)


def test_marginal_changes_of_dummies(wine_logit, datasets_dir):
    df = _grouped(datasets_dir, "wine")
    table = wine_logit.marginal_effects(df)
    assert set(table["kind"]) == {"change 0->1"}
    X = np.c_[(df.temp == "warm"), (df.contact == "yes")].astype(float)
    g = df.judge.to_numpy() - 1
    logistic = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    args = (wine_logit.coef_, wine_logit.thresholds_, wine_logit.group_effects_)
    hi = _plugin_proba_scipy(*args, np.c_[np.ones(len(X)), X[:, 1]], g, logistic).mean(axis=0)
    lo = _plugin_proba_scipy(*args, np.c_[np.zeros(len(X)), X[:, 1]], g, logistic).mean(axis=0)
    np.testing.assert_allclose(table.loc["temp[T.warm]", "mean"].to_numpy(),
                               np.r_[hi - lo, (hi - lo) @ np.arange(5)], atol=1e-10)
    # At one row: the effect at those values.
    one = wine_logit.marginal_effects(df.iloc[[0]])
    assert one.shape == table.shape


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("formula, message", [
    ("rating ~ temp + contact", "needs a group term"),
    ("rating ~ temp + (1 + contact | judge)", "need the same terms among the fixed effects"),
    ("rating ~ temp + (0 + temp | judge)", "must keep its intercept"),
    ("rating ~ temp + (1 | judge + bottle)", "one column name"),
    ("rating temp (1 | judge)", "one '~'"),
    ("rating ~ temp + (1 | referee)", "'referee', which the data do not have"),
    ("score ~ temp + (1 | judge)", "'score', which the data do not have"),
    ("rating ~ temperature + (1 | judge)", "does not have"),
    ("rating ~ temp - 1 + (1 | judge)", "keep the intercept"),
])
def test_bad_formulas_are_named(datasets_dir, formula, message):
    with pytest.raises(ValueError, match=message):
        OrdinalMixed.from_formula(formula, _grouped(datasets_dir, "wine"))


def test_bad_groups_are_refused():
    X, y, g = _simulate(n_groups=4, per_group=5)
    with pytest.raises(ValueError, match="at least two groups"):
        OrdinalMixed().fit(X, y, np.zeros(len(y)))
    with pytest.raises(ValueError, match=r"as many levels as rows \(20\): one row per group"):
        OrdinalMixed().fit(X, y, np.arange(len(y)))
    with pytest.raises(ValueError, match="missing values at rows \\[2\\]"):
        OrdinalMixed().fit(X, y, np.r_[g[:2], np.nan, g[3:]])
    with pytest.raises(ValueError, match="different lengths"):
        OrdinalMixed().fit(X, y, g[:-1])
    with pytest.raises(ValueError, match="1-D"):
        OrdinalMixed().fit(X, y, g[:, None, None])
    with pytest.raises(TypeError, match="cannot be ordered"):
        OrdinalMixed().fit(X, y, np.array([1, "a"] * 10, dtype=object))
    with pytest.raises(ValueError, match="link"):
        OrdinalMixed(link="gompertz").fit(X, y, g)
    with pytest.raises(TypeError, match="DataFrame"):
        OrdinalMixed.from_formula("y ~ x + (1 | g)", {"y": y})


def test_predictions_need_groups(small):
    X, _, g, model = small
    with pytest.raises(TypeError, match="groups="):
        model.predict_proba(X[:3])
    with pytest.raises(ValueError, match="different lengths"):
        model.predict_proba(X[:3], g[:2])


def test_functional_config_is_checked():
    with pytest.raises(ValueError, match="n_groups"):
        MixedConfig(n_classes=3, n_groups=0)
    with pytest.raises(ValueError, match="link"):
        MixedConfig(n_classes=3, n_groups=2, link="identity")
    X, y, g = _simulate(n_groups=4, per_group=5)
    res = fit_mixed(X, y, g, np.ones(len(y)), 1e-8, config=MixedConfig(n_classes=3, n_groups=4))
    assert bool(res.converged) and res.effects.shape == (4, 1)


# ---------------------------------------------------------------- recovery (slow)
@pytest.mark.slow
@pytest.mark.parametrize("link", ["probit", "logit"])
def test_recovers_the_generating_model(link):
    """400 groups x 10 rows from the model: estimates within 3.5 sds of the truth, and the
    95% bands of the group effects cover 95% of the true effects (within 3 binomial sds,
    0.917-0.983)."""
    rng = np.random.default_rng(3)
    q, per, tau = 400, 10, 0.9
    g = np.repeat(np.arange(q), per)
    X = rng.normal(size=(g.size, 3)) * [1.0, 10.0, 0.1] + [0.0, 500.0, -3.0]
    beta = np.array([0.8, -0.05, 4.0])
    u = tau * rng.normal(size=q)
    noise = rng.normal(size=g.size) if link == "probit" else rng.logistic(size=g.size)
    cuts = np.array([-1.0, 0.0, 1.5])
    y = np.digitize(X @ beta - (np.array([0.0, 500.0, -3.0]) @ beta) + u[g] + noise, cuts)
    model = OrdinalMixed(link=link).fit(X, y, g)
    se = np.sqrt(np.diag(model.cov_))
    truth = np.r_[beta, cuts + np.array([0.0, 500.0, -3.0]) @ beta, tau]
    est = np.r_[model.coef_, model.thresholds_, model.group_sd_]
    assert np.all(np.abs(est - truth) < 3.5 * se)
    table = model.group_effects()
    covered = np.mean((table["2.5%"] <= u) & (u <= table["97.5%"]))
    assert 0.917 <= covered <= 0.983


# ---------------------------------------------------------------- formulas for OrdinalProbit
def test_probit_from_formula_matches_statsmodels(datasets_dir, tmp_path):
    """The fixed-effects model from a formula: statsmodels' OrderedModel.from_formula with the
    same terms (maximum likelihood, logit)."""
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    from bayesord import OrdinalProbit

    wine = _grouped(datasets_dir, "wine")
    model = OrdinalProbit.from_formula("rating ~ temp + contact", wine, thresholds="joint", alpha=0.0,
                                       link="logit")
    ref = OrderedModel.from_formula("rating ~ temp + contact", wine, distr="logit").fit(method="bfgs", disp=False)
    np.testing.assert_allclose(model.coef_, ref.params[["temp[T.warm]", "contact[T.yes]"]], atol=1e-4)
    X = np.c_[(wine.temp == "warm"), (wine.contact == "yes")].astype(float)
    logistic = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    plug_in = _plugin_proba_scipy(model.coef_, model.thresholds_, np.zeros(1), X, -np.ones(len(X), int), logistic)
    np.testing.assert_allclose(plug_in, ref.predict(), atol=1e-4)
    # Data frames go through the formula's coding: the same as the coded arrays.
    arrays = OrdinalProbit(thresholds="joint", alpha=0.0, link="logit").fit(X, wine.rating)
    np.testing.assert_allclose(model.predict_proba(wine.iloc[:5]), arrays.predict_proba(X[:5]), atol=1e-8)
    assert list(model.summary().index[:2]) == ["temp[T.warm]", "contact[T.yes]"]
    with pytest.raises(ValueError, match="category the model was not fitted with"):
        model.predict(wine.iloc[:2].assign(contact="maybe"))
    with pytest.raises(TypeError, match="formula"):
        model.predict(np.ones((2, 2)))
    path = tmp_path / "probit.npz"
    model.save(path)
    np.testing.assert_array_equal(load_model(path).predict_proba(wine.iloc[:5]), model.predict_proba(wine.iloc[:5]))
    from formulaic import model_matrix

    with pytest.raises(ValueError, match="stateful transforms"):  # what save refuses, without a fit
        coding_state(model_matrix("temp + center(bottle)", wine).model_spec)
    with pytest.raises(ValueError, match="OrdinalMixed"):
        OrdinalProbit.from_formula("rating ~ temp + (1 | judge)", wine)
    # A refit with arrays forgets the formula's coding.
    model.fit(X, wine.rating)
    assert model.predict(X[:2]).shape == (2,)


def _grouped_parts():
    X, y, g = _simulate(n_groups=8, per_group=30, seed=3)
    slot = np.tile(np.arange(30), 8)
    return X, y, g, slot < 18, (slot >= 18) & (slot < 26), slot >= 26


@pytest.mark.slow  # a fit of its own shape (9 s); the default run measured 4:52 here
def test_prediction_sets_for_known_and_new_groups():
    """Split conformal sets with groups: the calibration scores are the fitted model's,
    computed here from its probabilities; sets hold the prediction, for known and new groups."""
    from bayesord.uncertainty import conformity_scores

    X, y, g, train, cal, test = _grouped_parts()
    model = OrdinalMixed().fit(X[train], y[train], g[train])
    model.calibrate(X[cal], y[cal], g[cal])
    proba = model.predict_proba(X[cal], g[cal])
    ref = conformity_scores(proba, model.predict(X[cal], g[cal]), "aps")[np.arange(cal.sum()), y[cal]]
    np.testing.assert_allclose(model.conformal_.scores, ref, atol=1e-12)
    new_groups = np.where(np.arange(test.sum()) % 2 == 0, g[test], 100 + g[test])  # half unseen
    lower, upper = model.predict_set(X[test], 0.2, new_groups)
    point = model.predict(X[test], new_groups)
    assert np.all((lower <= point) & (point <= upper))
    # Risk control takes the groups the same way (the sets may only be narrower).
    near = model.predict_set(X[test], 0.2, new_groups, risk="distance")
    assert np.all((lower <= near[0]) & (near[1] <= upper) & (near[0] <= point) & (point <= near[1]))
    with pytest.raises(TypeError, match="need each row's group"):
        model.calibrate(X[cal], y[cal])


@pytest.mark.slow
def test_cross_conformal_sets_refit_with_groups_and_formulas(tmp_path):
    """Cross-conformal calibration: each fold's rows scored by a model fitted on the other
    folds (refitted here on those rows alone, not at weight zero); a formula model reads its
    group column and saves its calibration."""
    from bayesord.uncertainty import conformity_scores
    from bayesord.estimators._uncertainty import fold_indices

    X, y, g, rows, _, test = _grouped_parts()
    model = OrdinalMixed().fit(X[rows], y[rows], g[rows])
    model.calibrate(X[rows], y[rows], g[rows], cv=3, random_state=0)
    expected = np.empty(rows.sum())
    for fit_rows, held in fold_indices(y[rows], 3, 0):
        fold = OrdinalMixed().fit(X[rows][fit_rows], y[rows][fit_rows], g[rows][fit_rows])
        p = fold.predict_proba(X[rows][held], g[rows][held])
        expected[held] = conformity_scores(p, fold.predict(X[rows][held], g[rows][held]), "aps")[
            np.arange(held.size), y[rows][held]]
    np.testing.assert_allclose(model.conformal_.scores, expected, atol=1e-6)

    # The same from a formula: the group column of the DataFrame, and a saved calibration.
    frame = pd.DataFrame(X, columns=["a", "b"]).assign(y=y, g=g)
    formula = OrdinalMixed.from_formula("y ~ a + b + (1 | g)", frame[rows])
    formula.calibrate(frame[rows], y[rows], cv=3, random_state=0)
    np.testing.assert_allclose(formula.conformal_.scores, model.conformal_.scores, atol=1e-9)
    formula.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    for a, b in zip(loaded.predict_set(frame[test], [0.1, 0.3]), formula.predict_set(frame[test], [0.1, 0.3])):
        np.testing.assert_array_equal(a, b)


def test_arviz_draws_are_the_laplace_posterior_of_the_parameters_and_the_group_effects(wine_logit):
    """The coefficients and the group effects are linear in the Gaussian draws, so their
    draws must have the means and sds that summary() and group_effects() compute from the
    covariances; the judge sd is |lambda| (the intercept's Lambda) with lambda Gaussian, whose
    distribution is known in closed form (a folded normal: checked by Kolmogorov-Smirnov)."""
    from scipy.stats import kstest

    idata = wine_logit.to_inference_data(draws=1000, chains=4, random_state=1)
    post = idata.posterior
    n = 4000
    coef = post["coef"].values.reshape(n, -1)
    table = wine_logit.summary()
    sd = table["sd"].to_numpy()[:2]
    np.testing.assert_allclose(coef.mean(axis=0), wine_logit.coef_, atol=4 * sd.max() / np.sqrt(n))
    np.testing.assert_allclose(coef.std(axis=0), sd, rtol=0.05)
    effects = post["effects_judge"].values.reshape(n, -1)
    ref = wine_logit.group_effects()
    np.testing.assert_allclose(effects.mean(axis=0), ref["mean"], atol=4 * ref["sd"].max() / np.sqrt(n))
    np.testing.assert_allclose(effects.std(axis=0), ref["sd"], rtol=0.05)
    assert list(post["effects_judge"].coords["judge"].values) == list(range(1, 10))
    res = wine_logit.result_
    lam, s = float(res.eta[-1]), float(np.sqrt(res.eta_cov[-1, -1]))
    folded = lambda t: norm.cdf((t - lam) / s) - norm.cdf((-t - lam) / s)
    assert kstest(post["sd"].values.ravel(), folded).pvalue > 0.001
    assert list(post["sd"].coords["group_sd"].values) == ["judge"]
    assert list(post["thresholds"].coords["cut"].values) == list(table.index[2:6])


def test_arviz_log_likelihood_is_each_rows_at_its_judges_drawn_effect(wine_logit, datasets_dir):
    """Against SciPy's logistic CDF at the exported draws of the coefficients, thresholds and
    the row's judge effect."""
    from scipy.stats import logistic

    wine = _grouped(datasets_dir, "wine")
    idata = wine_logit.to_inference_data(wine, wine["rating"], draws=250, chains=2, random_state=0)
    post, loglik = idata.posterior, idata.log_likelihood["y"].values
    X = np.column_stack([wine["temp"] == "warm", wine["contact"] == "yes"]).astype(float)
    judge = np.searchsorted(wine_logit.groups_, wine["judge"].to_numpy())
    k = wine["rating"].to_numpy() - 1
    for chain, draw in ((0, 0), (1, 249)):
        f = X @ post["coef"].values[chain, draw] + post["effects_judge"].values[chain, draw][judge]
        cuts = np.concatenate([[-np.inf], post["thresholds"].values[chain, draw], [np.inf]])
        np.testing.assert_allclose(loglik[chain, draw], np.log(logistic.cdf(cuts[k + 1] - f) - logistic.cdf(cuts[k] - f)),
                                   rtol=1e-10)
    assert set(np.unique(idata.posterior_predictive["y"].values)) <= set(wine_logit.classes_)
    assert idata.observed_data["y"].values.tolist() == wine["rating"].tolist()
    with pytest.raises(ValueError, match=r"every row must be in a group the model was fitted on, and 2 row\(s\) "
                                         r"are not \(first rows, 0-based: \[3, 40\]\)"):
        wine_logit.to_inference_data(wine.assign(judge=np.where(np.isin(np.arange(len(wine)), [3, 40]), 99,
                                                                wine["judge"])), wine["rating"], draws=10, chains=1)
    with pytest.raises(ValueError, match="pass X and y together"):
        wine_logit.to_inference_data(wine, draws=10, chains=1)



def _logit_row_curvature(f, y, thresholds):
    """``-d^2/df^2 log P(y | f)`` of the cumulative logit, per row (closed form)."""
    from scipy.special import expit

    cuts = np.concatenate([[-np.inf], thresholds, [np.inf]])

    def cdf_and_derivatives(z):
        F = expit(z)
        f1 = np.where(np.isfinite(z), F * (1 - F), 0.0)
        return F, f1, np.where(np.isfinite(z), f1 * (1 - 2 * F), 0.0)

    Fa, fa, ga = cdf_and_derivatives(cuts[y + 1] - f)
    Fc, fc, gc = cdf_and_derivatives(cuts[y] - f)
    P = Fa - Fc
    return ((fa - fc) / P) ** 2 - (ga - gc) / P


@pytest.mark.slow
def test_arviz_draws_of_crossed_factors_are_jointly_the_laplace_posterior(datasets_dir):
    """Given the parameters, the effects of two crossed factors are one Gaussian whose
    precision is ``Z^T W Z + Sigma^{-1}`` (W the likelihood's curvature at the modes), not a
    Gaussian per level: built here in NumPy from the fitted parameters, plus the part the
    parameters' uncertainty adds.  Drawing the levels independently given the parameters
    made the sd of the sum of the RESP effects 20% too small."""
    soup = _grouped(datasets_dir, "soup")
    model = OrdinalMixed.from_formula("SURENESS ~ PROD + (1 | RESP) + (1 | PRODID)", soup, link="logit")
    res = model.result_
    n = 8000
    post = model.to_inference_data(draws=4000, chains=2, random_state=3).posterior
    draws = np.concatenate([post["effects_RESP"].values.reshape(n, -1), post["effects_PRODID"].values.reshape(n, -1)],
                           axis=1)
    resp = np.searchsorted(model.groups_[0], soup["RESP"].to_numpy())
    prod = np.searchsorted(model.groups_[1], soup["PRODID"].to_numpy())
    q1, Q = len(model.groups_[0]), draws.shape[1]
    modes = np.asarray(res.effects)[:, 0]
    f = (soup["PROD"] == "Test").to_numpy() * model.coef_[0] + modes[resp] + modes[q1 + prod]
    w = _logit_row_curvature(f, np.searchsorted(model.classes_, soup["SURENESS"].to_numpy()), model.thresholds_)
    Z = np.zeros((len(soup), Q))
    Z[np.arange(len(soup)), resp] = Z[np.arange(len(soup)), q1 + prod] = 1.0
    prior = np.r_[np.full(q1, res.group_sd[0] ** -2), np.full(Q - q1, res.group_sd[1] ** -2)]
    cond = np.linalg.inv(Z.T @ (w[:, None] * Z) + np.diag(prior))
    gain = np.linalg.solve(res.eta_cov, np.asarray(res.effects_cross)[:, 0].T).T  # du*/deta
    ref = cond + gain @ res.eta_cov @ gain.T
    sd = np.sqrt(np.diag(ref))
    np.testing.assert_allclose(draws.mean(axis=0), modes, atol=5 * sd.max() / np.sqrt(n))
    corr_err = (np.cov(draws.T) - ref) / np.outer(sd, sd)
    assert np.abs(corr_err).max() < 0.06  # the largest of 18,336 correlations, each of Monte Carlo sd 0.011
    for a in (np.r_[np.ones(q1), np.zeros(Q - q1)], np.r_[np.zeros(q1), np.ones(Q - q1)], np.ones(Q),
              np.r_[np.full(q1, 1 / q1), np.full(Q - q1, -1 / (Q - q1))]):
        assert (draws @ a).std() == pytest.approx(np.sqrt(a @ ref @ a), rel=0.04)


@pytest.mark.slow
def test_arviz_draws_of_a_factor_whose_sd_is_fitted_at_zero_stay_at_zero(datasets_dir):
    """wine's bottle sd is fitted at 0 (its conditional covariances are rounding): the
    bottles' draws are 0 and the judges' keep group_effects()' means and sds."""
    wine = _grouped(datasets_dir, "wine")
    with pytest.warns(UserWarning, match=r"singular fit.*sd\(bottle\)"):
        model = OrdinalMixed.from_formula("rating ~ temp + contact + (1 | judge) + (1 | bottle)", wine, link="logit")
    assert model.result_.group_sd[1] < 1e-6
    post = model.to_inference_data(draws=2000, chains=2, random_state=0).posterior
    assert np.abs(post["effects_bottle"].values).max() < 1e-6
    judges = post["effects_judge"].values.reshape(4000, -1)
    ref = model.group_effects().iloc[:9]
    np.testing.assert_allclose(judges.mean(axis=0), ref["mean"], atol=5 * ref["sd"].max() / np.sqrt(4000))
    np.testing.assert_allclose(judges.std(axis=0), ref["sd"], rtol=0.06)

@pytest.mark.slow
def test_arviz_export_of_slopes_and_crossed_factors_names_every_term(datasets_dir):
    wine = _grouped(datasets_dir, "wine")
    with pytest.warns(UserWarning, match=r"singular fit.*sd\(bottle\)"):
        model = OrdinalMixed.from_formula("rating ~ temp + contact + (1 + temp | judge) + (1 | bottle)", wine)
    post = model.to_inference_data(draws=50, chains=2).posterior
    assert post["effects_judge"].dims == ("chain", "draw", "judge", "judge_term")
    assert list(post["effects_judge"].coords["judge_term"].values) == ["(Intercept)", "temp[T.warm]"]
    assert post["effects_bottle"].dims == ("chain", "draw", "bottle")
    assert list(post["sd"].coords["group_sd"].values) == ["judge: (Intercept)", "judge: temp[T.warm]", "bottle"]
    assert list(post["corr"].coords["group_corr"].values) == ["judge: (Intercept), temp[T.warm]"]
    assert np.all(post["sd"].values >= 0) and np.all(np.abs(post["corr"].values) <= 1)
    with pytest.raises(ValueError, match="draws must be a positive integer"):
        model.to_inference_data(draws=0)


def test_fixed_effects_the_data_do_not_determine_are_named(datasets_dir):
    """A copy of a column (here what 'y ~ .' would bring in) gave coefficient sds of 1e6
    with converged_ True and no word; the warning names the columns, as CumulativeLinkModel's."""
    wine = _grouped(datasets_dir, "wine").assign(temp_again=lambda d: d["temp"])
    with pytest.warns(ConvergenceWarning, match=r"OrdinalMixed.fit: columns that are linearly dependent.*"
                                                r"temp_again.*Drop one column of each group, or fit fewer"):
        OrdinalMixed.from_formula("rating ~ temp + temp_again + contact + (1 | judge)", wine, link="logit")
