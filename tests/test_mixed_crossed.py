"""Several grouping factors in the ordinal mixed model: ``(1 | judge) + (1 | bottle)``.

References:
* R's ``ordinal::clmm`` (ordinal 2022.11.16, R 4.2.2, Laplace method, default settings) on the
  shared ``soup`` data, ``SURENESS ~ PROD + (1 | RESP) + (1 | PRODID)`` (185 respondents
  crossed with 6 products), as printed by ``benchmarks/mixed_bench.py`` (``clmm`` through
  ``Rscript``): estimates, ``VarCorr``, ``logLik`` and ``sqrt(diag(vcov))``; on ``wine``,
  ``(1 | judge) + (1 | bottle)``, where ``clmm`` puts the bottle variance at 0 (4e-6).
* An independent SciPy evaluation of the Laplace approximation: the joint mode of all the
  effects by BFGS and the Hessian there by central differences of the analytic gradient.
* Monte Carlo over the stored joint Gaussian of the parameters and a row's two effects.
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
from bayesord._mixed import predict_mixed, sample_class_probs_mixed

SOUP_CROSSED = {
    "probit": dict(coef=[0.743135383528],
                   thresholds=[-0.8666978727833, -0.2849536735944, -0.0835126599177, 0.0768287151954,
                               0.5075770165739],
                   sd=[0.345928178509, 0.150183140797], loglik=-2670.3008646,
                   se=[0.1736252074405, 0.1596897187790, 0.1583943581985, 0.1583121321485, 0.1583230495043,
                       0.1586555776168, 0.0413277422468, 0.0565520217423],
                   prodid=[-0.000332120474222, -0.166968164735160, 0.107698869260944, -0.177681787769117,
                           0.033395707012775, 0.178622996205982]),
    "logit": dict(coef=[1.27086209618],
                  thresholds=[-1.486663098887, -0.460067062222, -0.120152547653, 0.147398397466,
                              0.860761177305],
                  sd=[0.571204521745, 0.257999045901], loglik=-2667.5791208,
                  se=[0.2980604824727, 0.2747635865293, 0.2711064209871, 0.2708621826678, 0.2708786773894,
                      0.2717319554951, 0.0716629810373, 0.0964678120868],
                  prodid=[-0.000961235525263, -0.303698036562121, 0.182126897026707, -0.322329921545616,
                          0.062619502554691, 0.277120126401748]),
}


@pytest.mark.slow  # clmm's estimates on soup: 7 s a link
@pytest.mark.parametrize("link", ["probit", "logit"])
def test_soup_respondents_and_products_match_clmm(datasets_dir, link):
    ref = SOUP_CROSSED[link]
    soup = pd.read_csv(datasets_dir / "soup.csv.gz")
    model = OrdinalMixed.from_formula("SURENESS ~ PROD + (1 | RESP) + (1 | PRODID)", soup, link=link)
    assert model.converged_ and model.group_factors_ == ["RESP", "PRODID"]
    np.testing.assert_allclose(model.coef_, ref["coef"], atol=1e-3)
    np.testing.assert_allclose(model.thresholds_, ref["thresholds"], atol=1e-3)
    np.testing.assert_allclose(model.group_sd_, ref["sd"], atol=1e-3)
    assert model.loglik_ == pytest.approx(ref["loglik"], abs=1e-3)
    # clmm's ST1, ST2 are the two sds (random intercepts only), so all standard errors compare
    # (listed here in bayesord's order: coefficient, thresholds, sds).
    np.testing.assert_allclose(np.sqrt(np.diag(model.cov_)), ref["se"], atol=1e-3)
    np.testing.assert_allclose(model.group_effects_["PRODID"], ref["prodid"], atol=1e-3)
    assert list(model.summary().index[-2:]) == ["sd(RESP)", "sd(PRODID)"]
    table = model.group_effects()
    assert table.index.names == ["factor", "group"] and len(table) == 185 + 6
    np.testing.assert_allclose(table.loc["PRODID", "mean"], ref["prodid"], atol=1e-3)


@pytest.mark.slow
def test_a_factor_without_variance_adds_nothing(datasets_dir, tmp_path):
    """``wine`` with judges and bottles: the bottle sd goes to 0 (clmm: 4e-6), and then the
    fit is the judges-only fit; the sd's interval starts at 0."""
    wine = pd.read_csv(datasets_dir / "wine.csv.gz")
    with pytest.warns(UserWarning, match=r"singular fit.*: sd\(bottle\) = [0-9.e-]+\.  The data"):
        both = OrdinalMixed.from_formula("rating ~ temp + contact + (1 | judge) + (1 | bottle)", wine, link="logit")
    judges = OrdinalMixed.from_formula("rating ~ temp + contact + (1 | judge)", wine, link="logit")
    assert both.group_sd_[1] < 1e-4
    assert both.loglik_ == pytest.approx(judges.loglik_, abs=1e-6)
    np.testing.assert_allclose(both.coef_, judges.coef_, atol=1e-5)
    assert both.group_sd_[0] == pytest.approx(judges.group_sd_, abs=1e-5)
    row = both.summary().loc["sd(bottle)"]
    assert row["2.5%"] == 0.0 and 0 < row["97.5%"] < 1.0
    # Predictions read both columns; a bottle the fit has not seen adds its (zero) variance.
    rows = wine.iloc[[0, 9]]
    np.testing.assert_allclose(both.predict_proba(rows), judges.predict_proba(rows), atol=1e-5)
    np.testing.assert_allclose(both.predict_proba(rows.assign(bottle=99)), both.predict_proba(rows), atol=1e-5)
    path = tmp_path / "crossed.npz"
    both.save(path)
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.predict_proba(rows), both.predict_proba(rows))
    assert loaded.summary().equals(both.summary()) and loaded.group_factors_ == ["judge", "bottle"]


# ---------------------------------------------------------------- a small synthetic problem
def _simulate(seed=0):
    """12 subjects crossed with 6 items, two rows per pair; sds 0.8 and 0.5."""
    rng = np.random.default_rng(seed)
    subject, item = np.meshgrid(np.arange(12), np.arange(6), indexing="ij")
    G = np.repeat(np.column_stack([subject.ravel(), item.ravel()]), 2, axis=0)
    X = rng.normal(size=(len(G), 2)) * [1.0, 3.0] + [0.0, 50.0]
    f = (X - [0.0, 50.0]) @ [1.0, -0.2] + 0.8 * rng.normal(size=12)[G[:, 0]] + 0.5 * rng.normal(size=6)[G[:, 1]]
    f = f + rng.normal(size=len(G))
    return X, np.digitize(f, np.quantile(f, [1 / 3, 2 / 3])), G


@pytest.fixture(scope="module")
def small():
    X, y, G = _simulate()
    return X, y, G, OrdinalMixed().fit(X, y, G)


def _reference_laplace(beta, b, sds, X, y, G):
    """The Laplace approximation (1) over all 18 effects jointly (SciPy only)."""
    cuts = np.r_[-np.inf, b, np.inf]
    hi, lo, f0 = cuts[y + 1], cuts[y], X @ beta
    q = [12, 6]
    prior = np.r_[np.full(q[0], 1 / sds[0] ** 2), np.full(q[1], 1 / sds[1] ** 2)]
    cols = np.column_stack([G[:, 0], q[0] + G[:, 1]])

    def latent(u):
        return f0 + u[cols[:, 0]] + u[cols[:, 1]]

    def neg(u):
        f = latent(u)
        return -np.sum(np.log(norm.cdf(hi - f) - norm.cdf(lo - f))) + 0.5 * np.sum(prior * u * u)

    def grad(u):
        f = latent(u)
        dens = norm.cdf(hi - f) - norm.cdf(lo - f)
        g_f = (norm.pdf(hi - f) - norm.pdf(lo - f)) / dens  # minus d log P / d f
        return np.bincount(cols[:, 0], g_f, 18) + np.bincount(cols[:, 1], g_f, 18) + prior * u

    u = minimize(neg, np.zeros(18), jac=grad, method="BFGS", options={"gtol": 1e-10}).x
    h = 1e-5
    H = np.array([(grad(u + h * e) - grad(u - h * e)) / (2 * h) for e in np.eye(18)])
    log_prior_norm = -0.5 * (q[0] * np.log(sds[0] ** 2) + q[1] * np.log(sds[1] ** 2))
    return -neg(u) + log_prior_norm - 0.5 * np.linalg.slogdet(0.5 * (H + H.T))[1]


def test_crossed_laplace_equals_a_scipy_evaluation_and_is_maximised(small):
    X, y, G, model = small
    assert model.converged_ and model.group_factors_ == ["group0", "group1"]
    ref = _reference_laplace(model.coef_, model.thresholds_, model.group_sd_, X, y, G)
    assert model.loglik_ == pytest.approx(ref, abs=1e-6)
    for k in range(2):
        for sign in (-1, 1):
            sds = model.group_sd_.copy()
            sds[k] += sign * 2e-2
            assert _reference_laplace(model.coef_, model.thresholds_, sds, X, y, G) < ref


def test_crossed_implicit_gradient_matches_finite_differences(small):
    X, y, G, model = small
    res = model.result_
    Z = (X - res.center) / res.scale
    args = (jnp.asarray(Z), jnp.ones((len(y), 2, 1)), jnp.asarray(y, jnp.int32), jnp.asarray(G, jnp.int32),
            jnp.ones(len(y)), jnp.zeros((18, 1)), 1e-12, res.config)
    eta = jnp.asarray(res.eta) + 0.1 * jnp.cos(jnp.arange(res.eta.size) + 1.0)  # away from the optimum
    grad = check_implicit_gradient(args, eta)
    assert np.all(np.abs(grad[-2:]) > 1e-2)  # both sds are exercised


def test_crossed_predictions_integrate_the_joint_gaussian(small):
    """Rows with both levels known (their effects correlated through the shared rows), and
    with the second factor's level new, against NumPy Monte Carlo."""
    X, y, G, model = small
    res = model.result_
    rows = X[[0, 40, 90]]
    codes = np.array([[0, 0], [3, 2], [7, -1]])
    closed = np.asarray(predict_mixed(res, rows, codes).proba)
    rng = np.random.default_rng(2)
    m, draws = res.eta.size, 40000
    Z = (rows - res.center) / res.scale
    for i, (a, c) in enumerate(codes):
        effects = [a] + ([12 + c] if c >= 0 else [])  # effects are listed factor by factor
        k = m + len(effects)
        cov = np.zeros((k, k))
        cov[:m, :m] = res.eta_cov
        for j, e in enumerate(effects):
            cov[m + j, :m] = cov[:m, m + j] = res.effects_cross[e, 0]
            cov[m + j, m + j] = res.effects_cov[e, 0, 0]
        if c >= 0:  # the first factor has the most levels: its covariance with the second's
            cov[m, m + 1] = cov[m + 1, m] = res.factor_cross_cov[a, c]
        s = rng.multivariate_normal(np.r_[res.eta, res.effects[effects, 0]], cov, size=draws)
        u = s[:, m:].sum(axis=1)
        if c < 0:
            u = u + abs(res.eta[-1]) * rng.normal(size=draws)  # a new item: N(0, sd^2)
        b = np.column_stack([s[:, 2], s[:, 2] + np.exp(s[:, 3])])
        cum = norm.cdf(b - (Z[i] @ s[:, :2].T + u)[:, None]).mean(axis=0)
        np.testing.assert_allclose(closed[i], np.diff(np.r_[0.0, cum, 1.0]), atol=0.01)
    sampled = np.asarray(sample_class_probs_mixed(res, rows, codes, jax.random.key(0), n_draws=4000))
    np.testing.assert_allclose(sampled.mean(axis=0), closed, atol=0.01)
    assert abs(res.factor_cross_cov[3, 2]) > 1e-4  # the levels' covariance is exercised


def test_groups_by_column_name_and_bad_ones(small):
    X, y, G, model = small
    frame = pd.DataFrame({"subject": G[:, 0], "item": [f"i{j}" for j in G[:, 1]]})
    named = OrdinalMixed().fit(X, y, frame)
    assert named.group_factors_ == ["subject", "item"] and named.loglik_ == pytest.approx(model.loglik_, abs=1e-9)
    # Prediction reads the factors by name, in any column order.
    np.testing.assert_allclose(named.predict_proba(X[:5], frame[["item", "subject"]][:5]),
                               model.predict_proba(X[:5], G[:5]), atol=1e-12)
    with pytest.raises(ValueError, match="one column per grouping factor"):
        named.predict_proba(X[:5], G[:5, 0])
    with pytest.raises(ValueError, match="missing values at rows \\[3\\]"):
        OrdinalMixed().fit(X, y, frame.assign(item=frame["item"].where(frame.index != 3)))
    with pytest.raises(ValueError, match="groups column 'item' has 1 level"):
        OrdinalMixed().fit(X, y, frame.assign(item="same"))
    with pytest.raises(ValueError, match="must say whose slopes they are"):
        OrdinalMixed(random_slopes=[0]).fit(X, y, frame)
    with pytest.raises(ValueError, match="names grouping factor 'bottle'"):
        OrdinalMixed(random_slopes={"bottle": [0]}).fit(X, y, frame)
    data = frame.assign(y=y, x0=X[:, 0])
    with pytest.raises(ValueError, match="names a group twice"):
        OrdinalMixed.from_formula("y ~ x0 + (1 | subject) + (1 | subject)", data)
    with pytest.raises(ValueError, match="1-D .* or 2-D"):
        OrdinalMixed().fit(X, y, G[:, :, None])


@pytest.mark.slow
def test_nested_factors_from_a_formula():
    """``(1 | school/class)`` is ``(1 | school) + (1 | school:class)``: class labels that
    repeat in every school are told apart by their school, as explicit unique labels are."""
    rng = np.random.default_rng(4)
    school = np.repeat(np.arange(8), 30)
    klass = np.tile(np.repeat(["A", "B", "C"], 10), 8)
    x = rng.normal(size=240)
    u_school, u_class = 0.7 * rng.normal(size=8), 0.5 * rng.normal(size=24)
    f = x + u_school[school] + u_class[school * 3 + np.searchsorted(["A", "B", "C"], klass)] + rng.normal(size=240)
    data = pd.DataFrame({"y": np.digitize(f, [-1.0, 0.5, 1.5]), "x": x, "school": school, "class": klass})
    nested = OrdinalMixed.from_formula("y ~ x + (1 | school/class)", data)
    explicit = OrdinalMixed.from_formula("y ~ x + (1 | school) + (1 | unit)",
                                         data.assign(unit=[f"{s}:{c}" for s, c in zip(school, klass)]))
    assert nested.group_factors_ == ["school", "school:class"] and len(nested.groups_[1]) == 24
    assert nested.loglik_ == pytest.approx(explicit.loglik_, abs=1e-9)
    np.testing.assert_allclose(nested.group_sd_, explicit.group_sd_, rtol=1e-7)
    rows = data.iloc[[0, 100]]
    np.testing.assert_allclose(nested.predict_proba(rows),
                               explicit.predict_proba(rows.assign(unit=["0:A", "3:B"])), atol=1e-10)
    # A class label in a school that never had it is a new level of school:class only.
    new = nested.predict_proba(rows.assign(**{"class": ["Z", "Z"]}))
    assert np.all(np.isfinite(new)) and not np.allclose(new, nested.predict_proba(rows))
    with pytest.raises(ValueError, match="no column 'class'"):
        nested.predict_proba(rows.drop(columns="class"))
    # lme4's (1 + x | a/b) gives each nested factor the slopes.
    with pytest.warns(UserWarning, match=r"singular fit.*school:class: x moves with school:class: \(Intercept\)"):
        sloped = OrdinalMixed.from_formula("y ~ x + (1 + x | school/class)", data)
    with pytest.warns(UserWarning, match=r"singular fit.*unit: x moves with unit: \(Intercept\)"):
        sloped_explicit = OrdinalMixed.from_formula("y ~ x + (1 + x | school) + (1 + x | unit)",
                                                    data.assign(unit=[f"{s}:{c}" for s, c in zip(school, klass)]))
    assert sloped.group_terms_ == {"school": ["(Intercept)", "x"], "school:class": ["(Intercept)", "x"]}
    assert sloped.loglik_ == pytest.approx(sloped_explicit.loglik_, abs=1e-9)
