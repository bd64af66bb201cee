"""Columns as they arrive: offsets and scales of raw CSV columns change nothing the Bayesian
models say, the maximum-likelihood probit agrees with statsmodels on raw columns, and the
logit link's predictive scale matches quadrature."""

import gzip
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import expit
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning

from bayesord import ISBOR, CumulativeLinkModel, OrdinalMixed, OrdinalProbit
from bayesord._likelihood import predictive_scale
from bayesord.datasets import make_ordinal_probit
from bayesord.estimators._base import classes_separated

X0, Y0, _ = make_ordinal_probit(240, 3, 4, seed=11, w=np.array([1.0, -0.6, 0.4]))
X_TEST = np.random.default_rng(12).normal(size=(40, 3))

affine = st.tuples(
    st.lists(st.floats(-1e4, 1e4), min_size=3, max_size=3),
    st.lists(st.sampled_from([1e-3, 0.1, 1.0, 7.0, 1e3]), min_size=3, max_size=3),
)
PROPERTY = settings(max_examples=6, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _outputs(model, X_train, X_test):
    model.fit(X_train, Y0)
    lo, hi, sd = (model.predict_proba_interval(X_test) if isinstance(model, OrdinalProbit)
                  else (None, None, model.predict_proba_std(X_test)))
    return model.predict(X_test), model.predict_proba(X_test), lo, hi, sd


def _check_invariant(make, shift_scale, atol):
    shift, scale = (np.asarray(v) for v in shift_scale)
    ref = _outputs(make(), X0, X_TEST)
    got = _outputs(make(), X0 * scale + shift, X_TEST * scale + shift)
    np.testing.assert_array_equal(got[0], ref[0])
    for a, b in zip(got[1:], ref[1:]):
        if b is not None:
            np.testing.assert_allclose(a, b, atol=atol)


@pytest.mark.parametrize("link", ["probit", pytest.param("logit", marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode", ["evidence", "joint"])
@PROPERTY
@given(shift_scale=affine)
def test_probit_outputs_do_not_depend_on_column_offsets_or_scales(mode, link, shift_scale):
    alpha = 0.0 if mode == "joint" else 1.0
    _check_invariant(lambda: OrdinalProbit(thresholds=mode, alpha=alpha, link=link, random_state=0),
                     shift_scale, atol=1e-6)


@pytest.mark.slow
@PROPERTY
@given(shift_scale=affine)
def test_isbor_linear_basis_does_not_depend_on_column_offsets_or_scales(shift_scale):
    _check_invariant(lambda: ISBOR(kernel="linear", theta=1.0, random_state=0), shift_scale, atol=1e-6)


def test_coefficients_and_thresholds_follow_the_transform_exactly():
    """Rescaling column j by c divides w_j by c; shifting columns by m moves the thresholds
    at x = 0 by m^T w, with the covariances following linearly."""
    shift, scale = np.array([1e3, -20.0, 0.5]), np.array([1e-2, 3.0, 1e2])
    a = OrdinalProbit(thresholds="joint", alpha=0.0).fit(X0, Y0)
    b = OrdinalProbit(thresholds="joint", alpha=0.0).fit(X0 * scale + shift, Y0)
    np.testing.assert_allclose(b.coef_ * scale, a.coef_, rtol=1e-7)
    np.testing.assert_allclose(b.coef_cov_ * np.outer(scale, scale), a.coef_cov_, rtol=1e-6)
    np.testing.assert_allclose(b.thresholds_ - shift @ b.coef_, a.thresholds_, rtol=1e-6, atol=1e-8)


def test_ml_fit_on_raw_columns_matches_statsmodels_on_a_large_offset_csv():
    """The reported failure: one column near 0.994 +- 0.003 (density), others of mixed scale."""
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    X, y, _ = make_ordinal_probit(1500, 3, 5, seed=4, w=np.array([1.2, -0.8, 0.5]))
    raw = X * np.array([0.003, 40.0, 1.0]) + np.array([0.994, 300.0, -7.0])
    train, test = np.arange(1200), np.arange(1200, 1500)
    model = OrdinalProbit(thresholds="joint", alpha=0.0).fit(raw[train], y[train])
    sm = OrderedModel(y[train], raw[train], distr="probit").fit(method="bfgs", disp=False,
                                                                   maxiter=5000, gtol=1e-8)
    sm_pred = np.asarray(sm.model.predict(sm.params, exog=raw[test])).argmax(1) + 1
    np.testing.assert_allclose(model.coef_, sm.params[:3], rtol=1e-3)
    mae, mae_sm = (np.mean(np.abs(p - y[test])) for p in (model.predict(raw[test]), sm_pred))
    assert abs(mae - mae_sm) <= 0.005


# Two sets in the default run; the other three (each about 10 s of compiling) with `slow`.
@pytest.mark.parametrize("name", ["esl", "toy"] + [pytest.param(n, marks=pytest.mark.slow)
                                                   for n in ("swd", "era", "winequality_red")])
def test_ml_fit_mae_equals_statsmodels_on_raw_shared_columns(datasets_dir, name):
    """Raw columns of shared data sets with n well above d, where the predictive mode and
    statsmodels' plug-in mode coincide (see docs/probit.md for the small-n sets)."""
    import warnings

    from statsmodels.miscmodels.ordinal_model import OrderedModel

    with gzip.open(datasets_dir / f"{name}.csv.gz", "rt") as fh:
        frame = pd.read_csv(fh)
    X, y = frame.drop(columns="y").to_numpy(float), frame["y"].to_numpy()
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[: int(0.8 * len(y))], order[int(0.8 * len(y)):]
    model = OrdinalProbit(thresholds="joint", alpha=0.0).fit(X[train], y[train])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = OrderedModel(y[train], X[train], distr="probit").fit(method="bfgs", disp=False, maxiter=5000)
    assert float(model.result_.loglik) >= sm.llf - 1e-6
    classes = np.unique(y[train])
    sm_pred = classes[np.asarray(sm.model.predict(sm.params, exog=X[test])).argmax(1)]
    mae, mae_sm = (np.mean(np.abs(p - y[test])) for p in (model.predict(X[test]), sm_pred))
    assert abs(mae - mae_sm) <= 0.005


@pytest.mark.parametrize("m, v", [(0.3, 0.5), (1.0, 4.0), (-2.0, 9.0), (0.5, 25.0)])
def test_logit_predictive_scale_matches_quadrature(m, v):
    """E[sigmoid(f)] over f ~ N(m, v) against sigmoid(m / s) with the probit approximation;
    sqrt(1 + v), right only for the probit, is much further off."""
    f = np.linspace(m - 12 * np.sqrt(v), m + 12 * np.sqrt(v), 40001)
    exact = np.trapezoid(expit(f) * norm.pdf(f, m, np.sqrt(v)), f)
    approx = expit(m / float(predictive_scale(jnp.asarray(v), 1.0, "logit")))
    assert abs(approx - exact) < 0.02
    assert abs(approx - exact) < abs(expit(m / np.sqrt(1 + v)) - exact)
    # The probit's scale is exact.
    probit = norm.cdf(m / float(predictive_scale(jnp.asarray(v), 1.0, "probit")))
    assert probit == pytest.approx(np.trapezoid(norm.cdf(f) * norm.pdf(f, m, np.sqrt(v)), f), abs=1e-8)


@pytest.mark.slow
def test_isbor_logit_predictive_uses_the_logit_scale():
    model = ISBOR(link="logit", kernel="linear", theta=1.0, random_state=0).fit(X0, Y0)
    res = model.result_
    from bayesord._isbor import predict_isbor

    pred = predict_isbor(res, jnp.asarray(X_TEST))
    # Rebuild the per-threshold latent variance and check the class probabilities by hand.
    Z = (X_TEST - res.center) / res.scale
    Phi = (Z @ np.asarray(res.centres).T) * np.asarray(res.mask)
    a = Phi @ np.asarray(res.cross_cov)
    var_u = np.asarray(pred.latent_var)[:, None] + np.diag(res.thresholds_cov) - 2 * a
    s = float(res.sigma) * np.sqrt(1 + np.pi * var_u / (8 * float(res.sigma) ** 2))
    cum = expit((np.asarray(res.b) - np.asarray(pred.latent_mean)[:, None]) / s)
    expected = np.diff(np.concatenate([np.zeros((40, 1)), cum, np.ones((40, 1))], axis=1), axis=1)
    np.testing.assert_allclose(pred.proba, expected, atol=1e-10)
    assert np.all(np.asarray(pred.proba) >= 0)


def test_ml_fit_names_columns_that_one_hot_coding_made_dependent():
    """One-hot columns that keep every level sum to one, which the thresholds absorb: the
    maximum-likelihood coefficients are not identified along that direction (statsmodels
    refuses such a design); the fit says which columns, and a prior silences it."""
    rng = np.random.default_rng(3)
    level = rng.integers(0, 3, size=len(Y0))
    frame = pd.DataFrame({"size": X0[:, 0] * 10 + 50, "red": level == 0, "green": level == 1,
                          "blue": level == 2, "weight": X0[:, 1]}).astype(float)
    with pytest.warns(UserWarning, match=r"\['red', 'green', 'blue'\].*alpha > 0"):
        model = OrdinalProbit(thresholds="joint", alpha=0.0).fit(frame, Y0)
    assert model.converged_
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OrdinalProbit(thresholds="joint", alpha=1.0).fit(frame, Y0)
        OrdinalProbit(thresholds="joint", alpha=0.0).fit(frame.drop(columns="blue"), Y0)


def test_ml_fit_of_separated_classes_says_the_estimate_does_not_exist():
    """Classes cut exactly at values of x: the likelihood approaches 1 as the coefficient
    grows (complete separation), so maximum likelihood has no estimate; the fit stops with
    sds of about 1e6 that it must not report silently.  A fixed prior keeps the coefficient
    finite and says nothing."""
    x = np.linspace(-2.0, 2.0, 60)[:, None] * 30.0 + 500.0
    y = np.digitize(x[:, 0], [479.0, 518.0])
    with pytest.warns(ConvergenceWarning, match="does not exist"):
        model = OrdinalProbit(thresholds="joint", alpha=0.0).fit(x, y)
    assert model.result_.loglik > -1e-3  # at the supremum, 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OrdinalProbit(thresholds="joint", alpha=1.0).fit(x, y)


@pytest.mark.parametrize("prior", ["gaussian", "ard"])
def test_evidence_fit_of_separated_classes_says_its_prior_has_no_optimum(prior):
    """The same separated classes in the default evidence mode: the evidence rises as the
    prior precision falls, so the search drifts toward alpha = 0 (to its cap here).  One
    warning says why (not the bare iteration-cap one), with the alpha where it stopped."""
    x = np.c_[np.linspace(-2.0, 2.0, 60) * 30.0 + 500.0, np.cos(np.arange(60.0))]
    y = np.digitize(x[:, 0], [479.0, 518.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = OrdinalProbit(prior=prior).fit(pd.DataFrame(x, columns=["dose", "noise"]), y)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert len(messages) == 1 and "separate the classes completely" in messages[0]
    assert f"alpha = {model.alpha_.min():.1e}" in messages[0]
    assert ("for column 'dose'" in messages[0]) == (prior == "ard")
    assert model.alpha_.min() < 0.02
    with warnings.catch_warnings():  # one row in the other class's range: no separation
        warnings.simplefilter("error")
        y_mixed = y.copy()
        y_mixed[[10, 50]] = y[[50, 10]]
        OrdinalProbit(prior=prior).fit(x, y_mixed)


@given(st.integers(0, 2**32 - 1), st.integers(2, 4), st.integers(4, 14))
@settings(max_examples=60, deadline=None, derandomize=True)
def test_separation_check_agrees_with_sorting_in_one_column(seed, n_classes, n):
    """In one column the classes are separated exactly when their values lie in disjoint
    intervals ordered by class, increasing or decreasing (classes without rows skipped; one
    class alone is separated: thresholds far enough out hold all its rows)."""
    rng = np.random.default_rng(seed)
    x = rng.choice(rng.normal(size=n), n)  # ties possible
    codes = rng.integers(0, n_classes, n)
    if rng.random() < 0.6:  # classes in the order of x (or its reverse), up to one swap
        codes[np.argsort(x * rng.choice([-1, 1]))] = np.sort(codes)
        if rng.random() < 0.3:
            i, j = rng.integers(0, n, 2)
            codes[[i, j]] = codes[[j, i]]
    sw = (rng.random(n) < 0.85).astype(float)
    kept = [x[(codes == k) & (sw > 0)] for k in range(n_classes)]
    kept = [v for v in kept if v.size]

    def ordered(parts):
        return all(a.max() < b.min() for a, b in zip(parts, parts[1:]))

    expected = len(kept) < 2 or ordered(kept) or ordered([-v for v in kept])
    assert classes_separated(x[:, None], codes, sw, n_classes) == expected


@pytest.mark.slow  # float32 programs of their own: about 15 s of compiling
def test_isbor_kernel_fit_is_the_same_on_raw_and_standardised_columns():
    # Half the rows repeat the other half up to 1% noise, so the greedy selection meets
    # near-ties.  In float32 (the default) the two versions of the data reach the fit as the
    # same numbers; standardised inside the float32 fit instead, this draw chose different
    # relevance vectors (evidence 0.44 apart).  In float64 the fits agree up to the stopping rule
    # (docs/isbor.md).
    rng = np.random.default_rng(4)
    Z = rng.normal(size=(60, 15))
    Z[30:] = Z[:30] + 0.01 * rng.normal(size=(30, 15))
    y = np.digitize(Z[:, :3].sum(1) + rng.normal(size=60), [-1.0, 0.0, 1.0])
    X = Z * rng.choice([1e-2, 1.0, 1e2], 15) + rng.choice([0.0, 1e3, -5e2], 15)
    X[:, 0] = 0.1  # a constant column: its rounded mean must not leave a column of residue
    sd = np.where(np.ptp(X, axis=0) > 0, X.std(0), 1.0)
    S = (X - X.mean(0)) / sd
    X_new = rng.normal(size=(20, 15)) * X.std(0) + X.mean(0)
    X_new[:, 0] = 0.1
    S_new = (X_new - X.mean(0)) / sd
    with jax.enable_x64(False):
        raw, std = (ISBOR(theta=0.1, random_state=0).fit(A, y) for A in (X, S))
        np.testing.assert_array_equal(raw.relevance_indices_, std.relevance_indices_)
        assert raw.log_evidence_ == std.log_evidence_
        np.testing.assert_array_equal(raw.predict(X_new), std.predict(S_new))
        np.testing.assert_allclose(raw.predict_proba(X_new), std.predict_proba(S_new), atol=1e-5)
        np.testing.assert_allclose(raw.relevance_vectors_, X[raw.relevance_indices_], rtol=1e-5, atol=1e-3)


@pytest.mark.slow  # float32 programs of their own: about 10 s of compiling
@pytest.mark.parametrize("mode", ["evidence", "joint"])
def test_float32_probit_is_the_same_on_columns_far_from_zero(mode):
    # Cast to float32 first, a column 10^5 sds from zero keeps its spread only to about
    # 6e-3 sd (before host_offsets the probabilities moved by up to 8e-3 on the wine rows).
    shift = 1e5 * X0.std(0) * np.array([1.0, -1.0, 1.0])
    rows = np.r_[X_TEST, X0[:5]]
    with jax.enable_x64(False):
        ref, far = (OrdinalProbit(thresholds=mode, alpha=1.0, random_state=0).fit(A, Y0) for A in (X0, X0 + shift))
        np.testing.assert_allclose(far.predict_proba(rows + shift), ref.predict_proba(rows), atol=1e-4)
        for a, b in zip(far.predict_proba_interval(rows + shift), ref.predict_proba_interval(rows)):
            np.testing.assert_allclose(a, b, atol=1e-4)
        np.testing.assert_allclose(far.predict_latent(rows + shift)[0], ref.predict_latent(rows)[0], atol=1e-4)
        effects = far.marginal_effects(rows + shift)["mean"], ref.marginal_effects(rows)["mean"]
        np.testing.assert_allclose(*effects, atol=1e-4)
        np.testing.assert_allclose(far.coef_, ref.coef_, rtol=1e-4)
        np.testing.assert_allclose(far.thresholds_, ref.thresholds_ + shift @ ref.coef_, rtol=1e-4)
        if mode == "joint":  # the calibration copies' batched fit
            ref.calibrate(X0, Y0, cv=3)
            far.calibrate(X0 + shift, Y0, cv=3)
            for a, b in zip(far.predict_set(rows + shift, 0.2), ref.predict_set(rows, 0.2)):
                np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # float32 programs of their own: about 10 s of compiling
def test_float32_clm_with_nominal_and_scale_effects_is_the_same_on_columns_far_from_zero():
    # Without host_offsets the probabilities moved by up to 2e-3 (1,200 raw wine rows at
    # 10^5 sds from zero).  The other coefficients at x = 0 carry the scale factor there,
    # exp(-shift . scale_coef), which float32 cannot hold at this shift.
    shift = 1e5 * X0.std(0) * np.array([1.0, -1.0, 1.0])
    rows = np.r_[X_TEST, X0[:5]]
    with jax.enable_x64(False):
        ref, far = (CumulativeLinkModel(location=[0, 1], nominal=[2], scale=[1], random_state=0).fit(A, Y0)
                    for A in (X0, X0 + shift))
        np.testing.assert_allclose(far.predict_proba(rows + shift), ref.predict_proba(rows), atol=1e-4)
        for a, b in zip(far.predict_proba_interval(rows + shift), ref.predict_proba_interval(rows)):
            np.testing.assert_allclose(a, b, atol=1e-4)
        effects = far.marginal_effects(rows + shift)["mean"], ref.marginal_effects(rows)["mean"]
        np.testing.assert_allclose(*effects, atol=1e-4)
        np.testing.assert_allclose(far.scale_coef_, ref.scale_coef_, rtol=1e-3)


def test_a_table_with_text_columns_is_told_which_and_how_to_code_them():
    """A pandas frame read from a CSV with a text and a categorical column: the error names
    them and the two ways on, and the formula way fits the same frame."""
    frame = pd.DataFrame(X0, columns=["a", "b", "c"]).assign(
        region=np.where(X0[:, 0] > 0, "north", "south"), size=pd.Categorical(np.where(X0[:, 1] > 0, "L", "S")))
    with pytest.raises(TypeError, match="column\\(s\\) 'region', 'size' hold text") as err:
        OrdinalProbit().fit(frame, Y0)
    assert "pd.get_dummies" in str(err.value) and "from_formula" in str(err.value)
    model = OrdinalProbit.from_formula("y ~ a + b + c + region + size", frame.assign(y=Y0))
    assert model.predict(frame).shape == (len(Y0),)


def test_a_date_column_is_told_apart_from_text():
    """A date column was told it held "text or categories" and to one-hot code it."""
    frame = pd.DataFrame(X0, columns=["a", "b", "c"]).assign(
        visit=pd.date_range("2024-01-01", periods=len(Y0)), region=np.where(X0[:, 0] > 0, "north", "south"))
    with pytest.raises(TypeError, match=r"'region' hold text or categories: code them.*"
                                        r"'visit' hold dates or durations: turn them into numbers"):
        OrdinalProbit().fit(frame, Y0)


@pytest.mark.slow  # float32 programs of their own: about 10 s of compiling
def test_float32_mixed_model_with_a_random_slope_is_the_same_on_columns_far_from_zero():
    # Without host_offsets the probabilities moved by up to 2e-3 (1,200 raw wine rows at
    # 10^5 sds from zero, a random intercept).  The slope's column is shifted too, so the
    # intercept's sd on the user's scale (at x = 0) is not comparable; the slope's is (here
    # near 0: the data have no random slope).
    groups = np.arange(len(Y0)) % 8
    shift = 1e5 * X0.std(0) * np.array([1.0, -1.0, 1.0])
    rows = np.r_[X_TEST, X0[:5]]
    new_groups = np.arange(len(rows)) % 8
    with jax.enable_x64(False):
        ref, far = (OrdinalMixed(random_slopes=[0], random_state=0).fit(A, Y0, groups) for A in (X0, X0 + shift))
        np.testing.assert_allclose(far.predict_proba(rows + shift, new_groups), ref.predict_proba(rows, new_groups),
                                   atol=1e-4)
        for a, b in zip(far.predict_proba_interval(rows + shift, new_groups),
                        ref.predict_proba_interval(rows, new_groups)):
            np.testing.assert_allclose(a, b, atol=1e-4)
        np.testing.assert_allclose(far.coef_, ref.coef_, rtol=1e-3)
        np.testing.assert_allclose(far.group_sd_[-1], ref.group_sd_[-1], atol=1e-4)
