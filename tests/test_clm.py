"""The cumulative link model with nominal and scale effects (``CumulativeLinkModel``, ``fit_clm``).

References:
* R's ``ordinal::clm`` (ordinal 2022.11.16, R 4.2.2, default settings) on the shared ``wine``
  data set: the numbers below were printed by ``coef``, ``vcov``, ``logLik``,
  ``nominal_test`` and ``scale_test`` in R (``benchmarks/clm_bench.py`` runs the same
  comparison on more data sets).  The nominal model is the example of ``?clm``.
* An independent NumPy/SciPy log-likelihood of the model (its maximum, its gradient and a
  finite-difference Hessian for the standard errors).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import Bounds, minimize
from scipy.special import expit
from scipy.stats import norm

import jax

from bayesord import CumulativeLinkModel, OrdinalMixed, OrdinalProbit, ThresholdCrossingWarning, load_model
from bayesord._clm import CLMConfig, _plugin_proba, _standardised, clm_columns, fit_clm, sample_class_probs_clm
from bayesord._validation import dependent_columns
from sklearn.exceptions import ConvergenceWarning

# ---------------------------------------------------------------- R references
# clm(rating ~ temp, nominal = ~ contact, data = wine): thresholds (Intercept), then the
# contact shifts of each threshold, then tempwarm.
NOMINAL = dict(thresholds=[-1.323043357, 1.246443545, 3.550043610, 4.660247067],
               shifts=[-1.615059212, -1.511567331, -1.674755697, -1.050622928], coef=[2.519044774],
               se=[0.5622761517, 0.4748239784, 0.6560233932, 0.8604026802, 1.1618005348, 0.5906413747,
                   0.6488373067, 0.8965108894, 0.5350469787],
               loglik=-86.2085532315)
# clm(rating ~ temp + contact, scale = ~ temp, data = wine, link = "probit").
SCALE = dict(thresholds=[-0.7787826237, 0.7452512259, 2.1434013960, 3.1420198918],
             coef=[1.5866860421, 0.9113892931], log_scale=[0.1110826630],
             se=[0.2854795194, 0.2562968151, 0.4100033154, 0.6414306083, 0.3768720470, 0.2990693301,
                 0.2638981261],
             loglik=-85.6731119729)
# nominal_test / scale_test of clm(rating ~ temp + contact, data = wine): LR of temp, contact.
# temp as a nominal effect has no maximum-likelihood estimate (no cold wine is rated 5): the
# value is the supremum, which clm reaches with a singular Hessian.
NOMINAL_LR = [3.1749770997, 0.5667402684]
SCALE_LR = [0.1049209725, 0.2733013264]


@pytest.fixture(scope="module")
def wine(datasets_dir):
    return pd.read_csv(datasets_dir / "wine.csv.gz")


def test_nominal_effects_match_clm(wine, tmp_path):
    model = CumulativeLinkModel.from_formula("rating ~ temp", wine, nominal="~ contact", link="logit")
    np.testing.assert_allclose(model.thresholds_, NOMINAL["thresholds"], atol=1e-6)
    np.testing.assert_allclose(model.nominal_coef_[0], NOMINAL["shifts"], atol=1e-6)
    np.testing.assert_allclose(model.coef_, NOMINAL["coef"], atol=1e-6)
    se = np.sqrt(np.diag(model.cov_))  # ours: coef, thresholds, shifts
    np.testing.assert_allclose(se, np.r_[NOMINAL["se"][-1], NOMINAL["se"][:-1]], atol=1e-6)
    assert model.loglik_ == pytest.approx(NOMINAL["loglik"], abs=1e-8)
    table = model.summary()
    assert list(table.index[-4:]) == [f"threshold {k}|{k + 1}: contact[T.yes]" for k in range(1, 5)]
    assert model.location_ == ["temp[T.warm]"] and model.nominal_ == ["contact[T.yes]"]
    # Saved with its formulas' coding, the loaded model takes the DataFrame.
    model.save(tmp_path / "nominal.npz")
    loaded = load_model(tmp_path / "nominal.npz")
    np.testing.assert_array_equal(loaded.predict_proba(wine), model.predict_proba(wine))
    assert loaded.nominal_formula_ == "~ contact" and loaded.summary().equals(table)


def test_scale_effects_and_the_lr_tests_match_clm(wine):
    model = CumulativeLinkModel.from_formula("rating ~ temp + contact", wine, scale="~ temp", link="probit")
    np.testing.assert_allclose(model.thresholds_, SCALE["thresholds"], atol=1e-6)
    np.testing.assert_allclose(model.coef_, SCALE["coef"], atol=1e-6)
    np.testing.assert_allclose(model.scale_coef_, SCALE["log_scale"], atol=1e-6)
    se = np.sqrt(np.diag(model.cov_))  # ours: coef, thresholds, log-scale
    np.testing.assert_allclose(se, np.r_[SCALE["se"][4:6], SCALE["se"][:4], SCALE["se"][6:]], atol=1e-6)
    assert model.loglik_ == pytest.approx(SCALE["loglik"], abs=1e-8)

    base = CumulativeLinkModel.from_formula("rating ~ temp + contact", wine, link="logit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        nominal = base.nominal_test()
    scale = base.scale_test()
    np.testing.assert_allclose(nominal["LR"].to_numpy()[1:], NOMINAL_LR, atol=1e-5)
    np.testing.assert_allclose(scale["LR"].to_numpy()[1:], SCALE_LR, atol=1e-6)
    assert list(nominal["df"].to_numpy()[1:]) == [3, 3] and list(scale["df"].to_numpy()[1:]) == [1, 1]
    assert list(nominal["converged"]) == [True, False, True]  # temp's shifts have no finite optimum


# ------------------------------------------------------- an independent likelihood
def _simulate(n=800, seed=0):
    """Raw columns (a large offset, a dummy, a wide one), a nominal dummy and a scale column."""
    rng = np.random.default_rng(seed)
    x0 = 50.0 + 10.0 * rng.normal(size=n)
    w = (rng.random(n) < 0.4).astype(float)
    s = 1e3 * rng.normal(size=n)
    A = np.c_[x0, w, s]
    b = np.array([-1.0, 0.0, 1.2])
    shifts = np.array([0.6, 0.0, -0.5])
    sigma = np.exp(0.4e-3 * s)
    latent = 0.08 * (x0 - 50.0) + sigma * rng.normal(size=n)
    thr = b[None, :] + w[:, None] * shifts[None, :]
    y = np.sum(latent[:, None] > thr, axis=1)
    return A, y


def _np_loglik(params, A, y, d, p, r, K, link, weights=None):
    """Log-likelihood of (1) in NumPy/SciPy; ``params = (coef, thresholds, shifts, log-scale)``
    with location columns ``0..d-1``, nominal ``d..d+p-1``, scale the last ``r``."""
    k1 = K - 1
    beta, b = params[:d], params[d:d + k1]
    gamma = params[d + k1:d + k1 + p * k1].reshape(p, k1)
    zeta = params[d + k1 + p * k1:]
    X, W, S = A[:, :d], A[:, d:d + p], A[:, A.shape[1] - r:]
    cdf = norm.cdf if link == "probit" else expit
    a = (b[None, :] + W @ gamma - (X @ beta)[:, None]) / np.exp(S @ zeta)[:, None]
    cum = np.c_[np.zeros(len(y)), cdf(a), np.ones(len(y))]
    prob = cum[np.arange(len(y)), y + 1] - cum[np.arange(len(y)), y]
    w = np.ones(len(y)) if weights is None else weights
    return float(np.sum(w * np.log(prob)))


@pytest.fixture(scope="module")
def simulated():
    A, y = _simulate()
    # location: x0 and s; nominal: w; scale: s (a location and a scale column at once)
    model = CumulativeLinkModel(location=[0, 2], nominal=[1], scale=[2]).fit(A, y)
    return A, y, model


def _params_and_design(A, model):
    params = np.r_[model.coef_, model.thresholds_, model.nominal_coef_.ravel(), model.scale_coef_]
    return params, np.c_[A[:, 0], A[:, 2], A[:, 1], A[:, 2]]  # location, nominal, scale order


def test_the_fit_maximises_an_independent_likelihood(simulated):
    A, y, model = simulated
    params, design = _params_and_design(A, model)

    def f(t):
        return _np_loglik(t, design, y, 2, 1, 1, 4, "probit")

    assert model.loglik_ == pytest.approx(f(params), rel=1e-12)
    # In units of each parameter's sd (the columns differ in scale by 1e5): the gradient
    # vanishes, no optimiser improves on the fit, and the standard errors are the inverse of
    # minus a finite-difference Hessian of the NumPy likelihood in the user's parameters (so
    # the delta-method map to them is checked too).
    sd = np.sqrt(np.diag(model.cov_))

    def g(u):
        return f(params + sd * u)

    m = params.size
    E = np.eye(m) * 1e-4
    grad = np.array([(g(E[i]) - g(-E[i])) / 2e-4 for i in range(m)])
    assert np.max(np.abs(grad)) < 1e-4
    better = minimize(lambda u: -g(u), np.zeros(m), method="Nelder-Mead",
                      options=dict(xatol=1e-8, fatol=1e-12, maxiter=6000))
    assert -better.fun <= f(params) + 1e-8
    E = np.eye(m) * 1e-2
    H = np.array([[(g(E[i] + E[j]) - g(E[i] - E[j]) - g(E[j] - E[i]) + g(-E[i] - E[j])) / 4e-4
                   for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(np.sqrt(np.diag(np.linalg.inv(-H))), np.ones(m), rtol=2e-3)
    # The simulated truth is recovered: 0.08 per unit of x0, shifts (0.6, 0, -0.5), 0.4e-3.
    truth = np.r_[0.08, 0.0, -1.0 + 0.08 * 50, 0.0 + 0.08 * 50, 1.2 + 0.08 * 50, 0.6, 0.0, -0.5, 0.4e-3]
    assert np.all(np.abs(params - truth) < 4 * np.sqrt(np.diag(model.cov_)))


def test_predictions_integrate_the_posterior(simulated):
    """The closed form (linearised margins) against the mean of posterior draws of the
    plug-in probabilities; the bands bracket them; rows sum to one."""
    A, y, model = simulated
    rows = A[:40]
    proba = model.predict_proba(rows)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    res = jax.tree_util.tree_map(np.asarray, model.result_)
    draws = np.asarray(sample_class_probs_clm(res, rows, jax.random.key(0), n_draws=4000))
    np.testing.assert_allclose(proba, draws.mean(axis=0), atol=5e-3)
    lo, hi, sd = model.predict_proba_interval(rows)
    assert np.all(lo <= proba + 1e-9) and np.all(proba <= hi + 1e-9) and np.all(sd > 0)


def test_arviz_draws_have_the_likelihood_of_an_independent_evaluation(simulated):
    """Each exported draw's log-likelihood of the rows equals the SciPy likelihood at that
    draw's exported coefficients, thresholds, shifts and log-scale effects; the thresholds of
    every draw are ordered (drawn as the first and log-gaps)."""
    A, y, model = simulated
    idata = model.to_inference_data(A, y, draws=100, chains=2, key=0)
    post, loglik = idata.posterior, idata.log_likelihood["y"].values
    assert post["nominal_coef"].dims == ("chain", "draw", "nominal_feature", "cut")
    assert list(post["scale_coef"].coords["scale_feature"].values) == ["x2"]
    assert np.all(np.diff(post["thresholds"].values, axis=-1) > 0)
    design = _params_and_design(A, model)[1]
    for chain, draw in ((0, 0), (1, 99)):
        params = np.r_[post["coef"].values[chain, draw], post["thresholds"].values[chain, draw],
                       post["nominal_coef"].values[chain, draw].ravel(), post["scale_coef"].values[chain, draw]]
        ref = _np_loglik(params, design, y, 2, 1, 1, 4, "probit")
        assert loglik[chain, draw].sum() == pytest.approx(ref, rel=1e-9)
    assert idata.observed_data["y"].values.tolist() == y.tolist()


@pytest.mark.slow
def test_psis_loo_ranks_the_judges_model_above_the_model_without_them(wine):
    """R's likelihood-ratio test prefers clmm with the judges to clm without them (Christensen's
    tutorial); PSIS-LOO over the two exports says the same."""
    from bayesord import diagnostics

    clm = CumulativeLinkModel.from_formula("rating ~ temp + contact", wine, link="logit")
    clmm = OrdinalMixed.from_formula("rating ~ temp + contact + (1 | judge)", wine, link="logit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # one row's Pareto k is near 0.7 for the mixed model
        table = diagnostics.compare({"clm": clm.to_inference_data(wine, wine["rating"], draws=1000),
                                     "clmm": clmm.to_inference_data(wine, wine["rating"], draws=500)})
    assert list(table.index) == ["clmm", "clm"]
    assert table.loc["clm", "elpd_diff"] > 2 * table.loc["clm", "dse"]


def test_shifted_and_rescaled_columns_change_nothing(simulated):
    A, y, model = simulated
    moved = CumulativeLinkModel(location=[0, 2], nominal=[1], scale=[2]).fit(A * [0.01, 1.0, 100.0] + [1e4, 0.0, -3.0], y)
    np.testing.assert_allclose(moved.predict_proba(A * [0.01, 1.0, 100.0] + [1e4, 0.0, -3.0]),
                               model.predict_proba(A), atol=1e-8)
    assert np.all(np.abs(moved.coef_ * [0.01, 100.0] - model.coef_) < 1e-3 * np.sqrt(np.diag(model.cov_))[:2])
    assert moved.loglik_ == pytest.approx(model.loglik_, rel=1e-10)


@pytest.mark.slow  # a compilation of several seconds
def test_marginal_effects_are_finite_differences_of_the_probabilities(simulated):
    A, y, model = simulated
    table = model.marginal_effects(A[:200])
    params, design = _params_and_design(A, model)

    def mean_proba(X):
        d = np.c_[X[:, 0], X[:, 2], X[:, 1], X[:, 2]]
        k1 = 3
        beta, b = params[:2], params[2:2 + k1]
        gamma, zeta = params[2 + k1:2 + 2 * k1], params[-1:]
        a = (b[None, :] + d[:, 2:3] * gamma[None, :] - (d[:, :2] @ beta)[:, None]) / np.exp(d[:, 3:] @ zeta)[:, None]
        cum = np.c_[np.zeros(len(X)), norm.cdf(a), np.ones(len(X))]
        return np.diff(cum, axis=1).mean(axis=0)

    X = A[:200]
    h = 1e-3 * 1e3  # the scale column is in thousands
    up, down = X.copy(), X.copy()
    up[:, 2] += h
    down[:, 2] -= h
    slope = (mean_proba(up) - mean_proba(down)) / (2 * h)
    got = table.loc["x2"]["mean"].to_numpy()[:4]
    np.testing.assert_allclose(got, slope, atol=1e-9, rtol=1e-5)
    one, zero = X.copy(), X.copy()
    one[:, 1], zero[:, 1] = 1.0, 0.0
    change = mean_proba(one) - mean_proba(zero)
    np.testing.assert_allclose(table.loc["x1"]["mean"].to_numpy()[:4], change, atol=1e-9)
    assert list(table.loc["x1"]["kind"])[0] == "change 0->1"


@pytest.mark.slow  # a compilation of several seconds
def test_without_nominal_and_scale_it_is_the_ordinary_model(simulated):
    """statsmodels' OrderedModel (maximum likelihood, probit) on the same raw columns."""
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    A, y, _ = simulated
    ours = CumulativeLinkModel().fit(A, y)
    theirs = OrderedModel(y, A, distr="probit").fit(method="bfgs", disp=False, maxiter=5000, gtol=1e-8)
    assert ours.loglik_ == pytest.approx(theirs.llf, abs=1e-4)
    np.testing.assert_allclose(ours.coef_, theirs.params[:3], rtol=1e-3, atol=1e-6)


def test_saving_round_trips(simulated, tmp_path):
    A, y, model = simulated
    model.save(tmp_path / "clm.npz")
    loaded = load_model(tmp_path / "clm.npz")
    np.testing.assert_array_equal(loaded.predict_proba(A[:5]), model.predict_proba(A[:5]))
    assert loaded.nominal_ == model.nominal_ and loaded.scale_ == model.scale_
    with pytest.raises(ValueError, match="training data"):
        loaded.nominal_test()


def test_the_elastic_net_fit_is_the_penalised_optimum_scipy_finds():
    """The penalty on standardised location coefficients, against SciPy's L-BFGS-B on the
    same objective over the standardised columns (the fit's own parameters), each
    coefficient split into positive and negative parts (the exact smooth form of an L1
    term): the same estimates, the same coefficients at exactly zero."""
    A, y = _simulate()
    rng = np.random.default_rng(1)
    A = np.c_[A, 3.0 + rng.normal(size=(len(y), 2)) * [1.0, 50.0]]  # two columns without effect
    alpha, l1_ratio = 0.05, 0.9
    model = CumulativeLinkModel(alpha=alpha, l1_ratio=l1_ratio, scale=[2]).fit(A, y)
    Z = (A - A.mean(axis=0)) / A.std(axis=0)
    n, d = Z.shape

    def objective(z):  # z = (beta+, beta-, thresholds, log-scale) on Z: minimised
        beta = z[:d] - z[d:2 * d]
        pen = alpha * n * (l1_ratio * np.sum(z[:2 * d]) + 0.5 * (1 - l1_ratio) * np.sum(beta ** 2))
        return -_np_loglik(np.r_[beta, z[2 * d:]], np.c_[Z, Z[:, 2]], y, d, 0, 1, 4, "probit") + pen

    start = np.r_[np.zeros(2 * d), -0.5, 0.5, 1.5, 0.0]
    lower = np.r_[np.zeros(2 * d), np.full(4, -np.inf)]
    ref = minimize(objective, start, method="L-BFGS-B", bounds=Bounds(lower, np.inf),
                   options=dict(ftol=1e-15, gtol=1e-9, maxiter=20000, maxfun=100000))
    beta_ref = ref.x[:d] - ref.x[d:2 * d]
    beta = np.asarray(model.result_.eta[:d])
    ours = np.r_[np.maximum(beta, 0), np.maximum(-beta, 0), model.result_.eta[d:d + 3].cumsum() * 0, 0.0]
    b = np.asarray(model.result_.eta[d:d + 3])
    ours[2 * d:2 * d + 3] = np.r_[b[0], b[0] + np.cumsum(np.exp(b[1:]))]
    ours[-1] = model.result_.eta[-1]
    assert objective(ours) <= ref.fun + 1e-7
    np.testing.assert_allclose(beta, beta_ref, atol=2e-4)
    zero = model.coef_ == 0
    assert 2 <= zero.sum() <= 3 and not zero[0]
    assert np.all(np.abs(beta_ref[zero]) < 1e-6) and np.all(np.abs(beta_ref[~zero]) > 1e-3)
    assert np.all(np.sqrt(np.diag(model.cov_))[:d][zero] == 0)
    with pytest.raises(ValueError, match="penalised"):
        model.nominal_test()
    with pytest.raises(ValueError, match="l1_ratio"):
        CumulativeLinkModel(alpha=0.1, l1_ratio=1.5).fit(A, y)
    with pytest.raises(ValueError, match="alpha"):
        CumulativeLinkModel(alpha=-1.0).fit(A, y)


@pytest.mark.slow  # its own compilation; the default run is at its 5-minute budget
def test_crossing_thresholds_warn_and_keep_probabilities_valid():
    """The middle class is impossible for w > 0.55 in the simulated data; the fitted linear
    shifts then cross there, and those rows get probability 0 for it at the estimate (never
    below); the predictive keeps only what the two thresholds' different uncertainties give."""
    rng = np.random.default_rng(3)
    w, latent = rng.normal(size=400), rng.normal(size=400)
    t1, t2 = -0.5 + 0.9 * w, 0.5 - 0.9 * w
    y = np.where(latent < t1, 0, np.where(latent > np.maximum(t1, t2), 2, 1))
    with pytest.warns(ThresholdCrossingWarning, match="cross at 140 training rows"):
        model = CumulativeLinkModel(nominal=[0]).fit(w[:, None], y)
    proba = model.predict_proba(np.array([[-3.0], [0.0], [3.0]]))
    assert np.all(proba >= 0) and np.allclose(proba.sum(axis=1), 1.0)
    assert 0.0 < proba[2, 1] < 1e-4 and proba[0, 1] > 0.99
    rows, res = model._device_inputs(np.array([[3.0]]))
    plugin = np.asarray(_plugin_proba(res.eta, _standardised(res, rows), res))
    assert plugin[0, 1] == 0.0 and np.isclose(plugin.sum(), 1.0)


def test_a_determined_fit_does_not_warn(simulated):
    A, y, _ = simulated
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CumulativeLinkModel().fit(A, y)


def test_dependent_columns_warn_by_name_and_leave_predictions_unchanged():
    """A column copied (and rescaled) makes the Hessian singular in the direction of the
    difference; R's clm warns "Hessian is numerically singular".  The reference is the fit
    without the copy, whose predictions the aliased fit must reproduce."""
    A, y = _simulate(400, seed=1)
    X = pd.DataFrame({"x0": A[:, 0], "s": A[:, 2]})
    plain = CumulativeLinkModel().fit(X, y)
    with pytest.warns(ConvergenceWarning, match=r"linearly dependent.*\['x0', 'copy'\].*not determined"):
        aliased = CumulativeLinkModel().fit(X.assign(copy=3.0 * X["x0"] + 1.0), y)
    # The plug-in fit is the same; the integrated probabilities differ by the rounding
    # error of the undetermined direction's variance (here 2e-4).
    X_aliased = X.assign(copy=3.0 * X["x0"] + 1.0)
    np.testing.assert_array_equal(aliased.predict(X_aliased), plain.predict(X))
    np.testing.assert_allclose(aliased.predict_proba(X_aliased), plain.predict_proba(X), atol=1e-3)


@pytest.mark.parametrize("value", [0.0, 1.0, 5.0, 1e4])
def test_a_constant_column_is_named_whatever_its_value(value):
    """Centred, a constant column is rounding residue (not 0 unless the column is); scaled
    by its residue sd it passed for a column of its own, and the warning said the classes
    were separated instead of naming it (a user's column of 5.0)."""
    X = np.column_stack([np.random.default_rng(0).normal(size=(500, 2)), np.full(500, value)])
    found = dependent_columns(X, np.random.default_rng(1).uniform(0.5, 2.0, 500), ["a", "b", "k"])
    assert found is not None and found.endswith("['k']")
    assert dependent_columns(X[:, :2], np.ones(500), ["a", "b"]) is None


def test_separated_classes_warn_that_the_estimate_does_not_exist():
    """Classes cut exactly at values of x: the likelihood approaches 1 as the coefficient
    grows, so the maximum does not exist (complete separation)."""
    x = np.linspace(-2.0, 2.0, 60)
    y = np.digitize(x, [-0.7, 0.6])
    with pytest.warns(ConvergenceWarning, match="does not exist"):
        model = CumulativeLinkModel().fit(x[:, None], y)
    assert model.loglik_ > -1e-3  # the fit sits near the supremum, 0


def _separated_rows(n=300, seed=0):
    """Raw columns (x1 about 100 +- 15, a text column) and classes cut exactly at values of
    x1, in groups: complete separation (on 300 rows the ML fits reach their caps)."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n) * 15 + 100
    return pd.DataFrame({"y": np.digitize(x1, [90, 100, 110]) + 1, "x1": x1, "x2": rng.choice(["a", "b"], n),
                         "g": [f"judge {i}" for i in rng.integers(0, 20, n)]})


@pytest.mark.parametrize("kind", ["clm", pytest.param("mixed", marks=pytest.mark.slow), "probit"])
@pytest.mark.parametrize("n", [30, 300])
def test_a_fit_of_separated_classes_says_the_estimate_does_not_exist(kind, n):
    """Before their Hessian is singular to warn_if_undetermined's check, maximum-likelihood
    fits of separated classes stopped at their iteration cap (300 rows), saying only that,
    or converged without a word (30 rows).  The separation is now found exactly (a linear
    program) and named, in one warning; with one row moved into the top class the fits say
    nothing."""
    df = _separated_rows(n)

    def fit(data):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if kind == "clm":
                CumulativeLinkModel.from_formula("y ~ x1 + x2", data)
            elif kind == "mixed":
                OrdinalMixed.from_formula("y ~ x1 + x2 + (1 | g)", data)
            else:
                OrdinalProbit.from_formula("y ~ x1 + x2", data, thresholds="joint", alpha=0.0)
        return [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]

    (message,) = fit(df)
    assert "the columns separate the classes completely" in message
    assert "estimate does not exist" in message
    if n == 300 and kind != "probit":
        assert "stopped at the iteration cap (status MAX_ITER) because" in message
    mixed = df.copy()
    mixed.loc[mixed.x1.idxmin(), "y"] = 4  # the lowest x1 in the top class
    assert fit(mixed) == []


def test_bad_input(wine):
    A, y = _simulate(200)
    with pytest.raises(ValueError, match="both location and nominal"):
        CumulativeLinkModel(location=[0, 1], nominal=[1]).fit(A[:, :2], y)
    with pytest.raises(ValueError, match="in none of location, nominal and scale"):
        CumulativeLinkModel(location=[0]).fit(A, y)
    with pytest.raises(ValueError, match="X has 3 columns"):
        CumulativeLinkModel(nominal=[3]).fit(A, y)
    with pytest.raises(ValueError, match="X does not have"):
        CumulativeLinkModel(nominal=["w"]).fit(A, y)
    with pytest.raises(TypeError, match="list of columns"):
        CumulativeLinkModel(nominal="contact").fit(A, y)
    with pytest.raises(ValueError, match="lists a column twice"):
        CumulativeLinkModel(scale=[2, 2]).fit(A, y)
    with pytest.raises(ValueError, match="one-sided formula"):
        CumulativeLinkModel.from_formula("rating ~ temp", wine, nominal="contact")
    with pytest.raises(ValueError, match="in the formula and in nominal"):
        CumulativeLinkModel.from_formula("rating ~ temp + contact", wine, nominal="~ contact")
    with pytest.raises(ValueError, match="does not have|names something"):
        CumulativeLinkModel.from_formula("rating ~ temp", wine, scale="~ colour")
    with pytest.raises(TypeError, match="do not pass location"):
        CumulativeLinkModel.from_formula("rating ~ temp", wine, nominal=None, **{"location": ["x"]})
    with pytest.raises(TypeError, match="non-negative column indices"):
        clm_columns(nominal=[-1])
    with pytest.warns(ConvergenceWarning, match="does not exist"):
        CumulativeLinkModel.from_formula("rating ~ contact", wine, nominal="~ temp", link="logit")


def test_the_functional_fit_ignores_zero_weight_rows():
    """Rows at weight zero (the estimator's padding among them) change nothing, whatever they
    hold: here they are replaced by extreme values and the top class."""
    A, y = _simulate(300, seed=5)
    config, columns = CLMConfig(n_classes=4), clm_columns(location=[0, 2], nominal=[1], scale=[2])
    w = np.ones(len(y))
    w[::3] = 0.0
    full = fit_clm(A, y, w, 1e-10, columns, config=config)
    junk_A, junk_y = A.copy(), y.copy()
    junk_A[w == 0] = [1e6, 1.0, -1e8]
    junk_y[w == 0] = 3
    junk = fit_clm(junk_A, junk_y, w, 1e-10, columns, config=config)
    params = np.r_[full.coef, full.thresholds, np.ravel(full.nominal_coef), full.scale_coef]
    np.testing.assert_allclose(np.r_[junk.coef, junk.thresholds, np.ravel(junk.nominal_coef), junk.scale_coef],
                               params, rtol=1e-6, atol=1e-9)
    design = np.c_[A[:, 0], A[:, 2], A[:, 1], A[:, 2]]
    kept = w > 0
    assert float(full.loglik) == pytest.approx(_np_loglik(params, design[kept], y[kept], 2, 1, 1, 4, "probit"),
                                               rel=1e-12)
