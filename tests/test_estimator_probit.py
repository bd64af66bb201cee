"""OrdinalProbit estimator: labels, bad input, sklearn conventions, persistence."""

import warnings

import jax
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

from bayesord import OrdinalProbit, _compile_cache
from bayesord._compile_cache import QUICK_MAX_ROWS
from bayesord._probit import _predict_probit, fit_probit, predict_probit
from bayesord._shapes import LARGE_ROWS, MIN_ROWS, bucket_rows
from bayesord.datasets import make_ordinal_probit
from bayesord.estimators._base import binary_columns, solver_tol
from bayesord.estimators._probit import _fit_program, _predict_program

X0, Y0, _ = make_ordinal_probit(120, 3, 3, seed=11, w=np.array([1.5, -1.0, 0.5]))


def joint(**kw):
    return OrdinalProbit(thresholds="joint", **kw)


def test_string_labels_need_and_follow_an_explicit_order():
    names = np.array(["poor", "fair", "good"])[Y0 - 1]
    with pytest.raises(ValueError, match="classes="):
        joint().fit(X0, names)
    model = joint(classes=["poor", "fair", "good"]).fit(X0, names)
    assert list(model.classes_) == ["poor", "fair", "good"]  # not alphabetical
    assert set(model.predict(X0)) <= {"poor", "fair", "good"}
    reference = joint().fit(X0, Y0)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-10)


def test_ordered_categorical_and_dataframe_input():
    y = pd.Series(pd.Categorical(np.array(["c", "b", "a"])[Y0 - 1], categories=["c", "b", "a"], ordered=True))
    frame = pd.DataFrame(X0, columns=["u", "v", "w"])
    model = joint().fit(frame, y)
    assert list(model.classes_) == ["c", "b", "a"]
    assert list(model.feature_names_in_) == ["u", "v", "w"]
    with pytest.raises(ValueError, match=r"another order; select them in the fitted order, "
                                          r"X\[model.feature_names_in_\] \(\['u', 'v', 'w'\]\)"):
        model.predict(frame[["v", "u", "w"]])
    np.testing.assert_array_equal(model.predict(frame[["v", "u", "w"]][model.feature_names_in_]),
                                  model.predict(frame))
    # Each wrong frame is named for what is wrong with it, whatever its width.
    for wrong, what in [(frame[["u", "w"]], r"missing \['v'\]"),
                        (frame.assign(z=1.0), r"not fitted on \['z'\]"),
                        (frame.rename(columns={"u": "U"}), r"missing \['u'\]; not fitted on \['U'\]"),
                        (frame[["u", "v", "w", "u"]], r"repeated \['u'\]"),
                        (frame[["u", "u", "w"]], r"missing \['v'\]; repeated \['u'\]")]:
        with pytest.raises(ValueError, match="different feature names than the data the model was fitted on: " + what):
            model.predict(wrong)
    # NumPy rows after a frame: taken in the fitted order, with scikit-learn's warning
    with pytest.warns(UserWarning, match=r"X does not have valid feature names, but OrdinalProbit was fitted "
                                         r"with feature names; its columns are taken to be \['u', 'v', 'w'\]"):
        from_array = model.predict_proba(X0)
    np.testing.assert_array_equal(from_array, model.predict_proba(frame))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        joint().fit(X0, y).predict_proba(X0)  # fitted without names: nothing to say


@pytest.mark.slow
def test_probabilities_far_in_a_tail_survive_float32():
    # A sharp fit predicted far out: in float32 the outer classes' probabilities (about
    # 1e-70) underflow to 0, an infinite log-loss for a row of those classes.  predict_proba
    # takes them from the log-probabilities, in float64; the float64 fit is the reference.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 1))
    y = np.digitize(5 * X[:, 0] + rng.normal(size=2000), [-3, 3])
    far = np.array([[-6.0], [6.0]])
    with jax.enable_x64(False):
        model = OrdinalProbit().fit(X, y)
        p32, raw = model.predict_proba(far), model._predict_all(far)
    assert np.any(raw.proba == 0) and raw.proba.dtype == np.float32
    assert p32.dtype == np.float64 and np.all(p32 > 0)
    np.testing.assert_allclose(p32.sum(axis=1), 1.0, atol=1e-15)
    p64 = OrdinalProbit().fit(X, y).predict_proba(far)
    np.testing.assert_allclose(np.log(p32), np.log(p64), rtol=1e-3)


def test_integer_labels_with_gaps_and_probability_rows():
    y = np.array([2, 5, 11])[Y0 - 1]
    model = joint().fit(X0, y)
    assert list(model.classes_) == [2, 5, 11]
    p = model.predict_proba(X0)
    assert p.shape == (120, 3) and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    cum = model.predict_cumproba(X0)
    np.testing.assert_allclose(cum, np.cumsum(p, axis=1)[:, :-1], atol=1e-12)
    assert set(model.predict(X0, rule="median")) <= {2, 5, 11}
    e = model.predict_expected(X0)
    assert np.all((e >= 2) & (e <= 11))
    assert model.score(X0, y) <= 0


@pytest.mark.parametrize(
    "X, y, match",
    [
        (np.where(np.arange(360).reshape(120, 3) == 5, np.nan, X0), Y0, "NaN or infinite"),
        (np.where(np.arange(360).reshape(120, 3) == 5, np.inf, X0), Y0, "NaN or infinite"),
        (np.where(np.arange(360).reshape(120, 3) == 5, -1e160, X0), Y0,
         r"1 huge \(\|x\| > 1e\+150\) value\(s\), in column\(s\) \[2\] .* overflows float64"),
        (X0, Y0.astype(float) * np.where(np.arange(120) == 3, np.nan, 1.0), "NaN"),
        (X0[:100], Y0, "different lengths"),
        (np.empty((0, 3)), np.empty(0), r"0 sample\(s\)"),
        (X0, np.ones(120), "at least 2"),
        (X0[:, 0], Y0, "2-D"),
        (X0[None], Y0, "2-D"),
    ],
)
def test_bad_input_raises_a_clear_error_and_leaves_no_fitted_state(X, y, match):
    model = joint()
    with pytest.raises(ValueError, match=match):
        model.fit(X, y)
    assert not hasattr(model, "coef_") and not hasattr(model, "classes_")


def test_a_huge_value_at_prediction_is_refused_not_misread():
    """A user's value of 1e160 gave predict_proba [0.5, 0, 0, 0.5], class 0 against a
    positive coefficient, and NaN bands: its square overflows float64."""
    model = joint().fit(X0, Y0)
    rows = X0[:3].copy()
    rows[1, 0] = 1e160
    with pytest.raises(ValueError, match=r"X contains 1 huge .* column\(s\) \[0\] \(first rows, 0-based: \[1\]\)"):
        model.predict_proba(rows)
    rows[1, 0] = 1e150  # the bound itself is taken
    assert np.all(np.isfinite(model.predict_proba(rows)))


def test_missing_cells_of_a_frame_are_named_by_column_and_row():
    """pandas' nullable columns hold pd.NA, which made the message 'X must be numeric;
    column(s)  hold text or categories' (no column: they are numeric)."""
    frame = pd.DataFrame({"dose": pd.array(np.arange(120) % 7, dtype="Int64"), "ph": X0[:, 1],
                          "flag": pd.array(X0[:, 2] > 0, dtype="boolean")})
    holes = frame.copy()
    holes.loc[[4, 9], "dose"] = pd.NA
    with pytest.raises(ValueError, match=r"X contains 2 missing value\(s\), in column\(s\) \['dose'\] "
                                         r"\(first rows, 0-based: \[4, 9\]\)"):
        joint().fit(holes, Y0)
    nan = frame.astype({"dose": float})
    nan.loc[[2], "ph"] = np.nan
    nan.loc[[7], "dose"] = np.inf
    with pytest.raises(ValueError, match=r"X contains 2 NaN or infinite value\(s\), in column\(s\) "
                                         r"\['dose', 'ph'\] \(first rows, 0-based: \[2, 7\]\)"):
        joint().fit(nan, Y0)
    assert joint().fit(frame, Y0).coef_.shape == (3,)  # the nullable dtypes themselves are fine


def test_more_than_1000_distinct_labels_need_classes():
    X = np.random.default_rng(0).normal(size=(1200, 2))
    with pytest.raises(ValueError, match="1000"):
        joint().fit(X, np.arange(1200))


def test_unknown_labels_at_scoring_and_wrong_feature_count_at_predict():
    model = joint(classes=[1, 2, 3]).fit(X0, Y0)
    with pytest.raises(ValueError, match="not in classes"):
        model.score(X0, np.where(Y0 == 3, 7, Y0))
    with pytest.raises(ValueError, match="features"):
        model.predict(X0[:, :2])
    with pytest.raises(ValueError, match="not in classes"):
        joint(classes=[1, 2]).fit(X0, Y0)


@pytest.mark.parametrize("sw, match", [(-np.ones(120), "negative"), (np.full(120, np.nan), "NaN"),
                                       (np.ones(7), "shape"), (np.zeros(120), "zero")])
def test_bad_sample_weights(sw, match):
    with pytest.raises(ValueError, match=match):
        joint().fit(X0, Y0, sample_weight=sw)


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="thresholds"):
        OrdinalProbit(thresholds="both").fit(X0, Y0)
    with pytest.raises(ValueError, match="positive"):
        OrdinalProbit(alpha=0.0).fit(X0, Y0)
    with pytest.raises(ValueError, match="non-negative"):
        joint(alpha=-1.0).fit(X0, Y0)
    with pytest.raises(ValueError, match="max_iter"):
        joint(max_iter=0).fit(X0, Y0)
    with pytest.raises(ValueError, match="link"):
        joint(link="gompertz").fit(X0, Y0)


def test_constant_feature_column_works():
    X = np.column_stack([X0, np.ones(120)])
    model = joint(alpha=1.0).fit(X, Y0)
    assert model.converged_
    assert np.all(np.isfinite(model.coef_)) and np.all(np.isfinite(model.coef_cov_))


def test_iteration_cap_warns():
    with pytest.warns(ConvergenceWarning):
        joint(max_newton=1).fit(X0, Y0)
    # The evidence search says what to change (a user's ARD fit stopped at 200 and met the
    # tolerance at 5000, its probabilities within 0.007).
    with pytest.warns(ConvergenceWarning, match=r"the evidence search stopped at max_iter=1: give a larger one "
                                                r"\(e.g. max_iter=10\), as ARD's one prior precision per column"):
        OrdinalProbit(prior="ard", max_iter=1).fit(X0, Y0)


def test_sample_weight_two_equals_duplicate_in_the_estimator():
    w = np.ones(120)
    w[:10] = 2
    a = joint().fit(X0, Y0, sample_weight=w)
    b = joint().fit(np.vstack([X0, X0[:10]]), np.concatenate([Y0, Y0[:10]]))
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-7)  # solver tolerance 1e-10 on the objective


def test_summary_bands_and_save_load_round_trip(tmp_path):
    model = OrdinalProbit(random_state=3).fit(pd.DataFrame(X0, columns=["a", "b", "c"]), Y0)
    table = model.summary()
    assert list(table.index[:3]) == ["a", "b", "c"] and len(table) == 5
    assert np.all(table["sd"] > 0) and np.all(table["2.5%"] < table["97.5%"])
    frame = pd.DataFrame(X0[:7], columns=["a", "b", "c"])
    lo, hi, sd = model.predict_proba_interval(frame)
    p = model.predict_proba(frame)
    assert np.all((0 <= lo) & (lo <= hi) & (hi <= 1)) and np.all(sd >= 0)
    assert np.mean((lo <= p) & (p <= hi)) > 0.9
    path = tmp_path / "m.npz"
    model.save(path)
    loaded = OrdinalProbit.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(frame), p)
    np.testing.assert_array_equal(loaded.coef_, model.coef_)
    assert loaded.get_params() == model.get_params()


def test_sklearn_clone_and_get_params():
    from sklearn.base import clone

    model = OrdinalProbit(alpha=2.0, prior="ard")
    copy = clone(model)
    assert copy.get_params() == model.get_params()


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(8, 40), d=st.integers(1, 3), k=st.integers(2, 4), seed=st.integers(0, 10_000),
       scale=st.floats(0.01, 100.0))
def test_property_random_shapes_give_valid_probabilities(n, d, k, seed, scale):
    rng = np.random.default_rng(seed)
    X = rng.normal(scale=scale, size=(n, d))
    y = np.concatenate([np.arange(k), rng.integers(0, k, size=n - k)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = joint(alpha=1.0).fit(X, y)
    p = model.predict_proba(X)
    assert np.all(np.isfinite(p)) and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-10)
    assert np.all(np.diff(model.thresholds_) > 0)


@given(st.integers(1, 10**7))
def test_row_buckets_are_few_and_pad_at_most_an_eighth(n):
    size = bucket_rows(n)
    assert size >= max(n, MIN_ROWS)
    if n > MIN_ROWS:
        # Eight sizes per doubling, 32 above LARGE_ROWS (at most 1/32 more rows there).
        steps = 8 if n <= LARGE_ROWS else 32
        assert size <= (1 + 1 / steps) * n
        base = 1 << ((n - 1).bit_length() - 1)
        assert base < n <= size <= 2 * base and (size - base) % (base // steps) == 0
        assert size - base // steps < n  # the smallest such size
    assert bucket_rows(size) == size


def test_small_fits_use_the_quick_compiling_programs_and_large_ones_the_optimised():
    """Up to QUICK_MAX_ROWS rows the model compiles for speed of compilation; a JAX whose
    XLA:CPU no longer takes the options fails here instead of silently compiling slowly."""
    if jax.default_backend() != "cpu":
        pytest.skip("the quick-compiling options are XLA:CPU's")
    assert _compile_cache._options_accepted(tuple(_compile_cache.QUICK_OPTIONS.items()))
    small, large = bucket_rows(100), bucket_rows(QUICK_MAX_ROWS + 1)
    assert _fit_program(small).options == tuple(_compile_cache.QUICK_OPTIONS.items())
    assert _predict_program(small).options == tuple(_compile_cache.QUICK_OPTIONS.items())
    assert _fit_program(large).options is None and _fit_program(large).fallback is fit_probit
    assert _predict_program(large).options is None and _predict_program(large).fallback is _predict_probit
    assert _fit_program(small) is _fit_program(bucket_rows(QUICK_MAX_ROWS))  # one program object


def test_the_batched_layer_fits_compile_light_at_every_size_and_modes_are_checked():
    """The probability layer's side-by-side fits take LIGHT_OPTIONS whatever the row count;
    an unknown compile mode is a ValueError naming the modes."""
    if jax.default_backend() != "cpu":
        pytest.skip("the compile options are XLA:CPU's")
    from bayesord._probit import ProbitResult, fit_probit_weights

    light = tuple(_compile_cache.LIGHT_OPTIONS.items())
    for rows in (bucket_rows(100), bucket_rows(QUICK_MAX_ROWS + 1)):
        program = _compile_cache.stored_fit_program(fit_probit_weights, rows, ("config", "n_classes"),
                                                    ProbitResult, compile="light")
        assert program.options == light and program.fallback is not fit_probit_weights
    with pytest.raises(ValueError, match="'quick', 'light', 'optimised'"):
        _compile_cache.stored_fit_program(fit_probit, 100, ("config", "n_classes"), ProbitResult, compile="fast")


@pytest.mark.parametrize("mode", ["joint", pytest.param("evidence", marks=pytest.mark.slow)])
def test_nearby_row_counts_share_one_program_and_padding_changes_nothing(mode):
    """Fits on 100 and 104 rows (both padded to 104) compile once, and each equals the
    functional fit on its unpadded rows."""
    X, y, _ = make_ordinal_probit(104, 3, 4, seed=3, w=np.array([1.0, -0.5, 0.25]))
    X = X * [1.0, 100.0, 0.01] + [5.0, -300.0, 2.0]
    program = _fit_program(104)
    models, sizes = {}, []
    for n in (100, 104):
        models[n] = OrdinalProbit(thresholds=mode).fit(X[:n], y[:n])
        sizes.append(program._cache_size())
    assert sizes[0] >= 1 and sizes[1] == sizes[0]
    for n, model in models.items():
        ref = fit_probit(X[:n], y[:n] - 1, np.ones(n), 1.0, solver_tol(model.tol, np.float64),
                         config=model._config(), n_classes=4)
        np.testing.assert_allclose(model.coef_, ref.coef, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(model.latent_thresholds_, ref.thresholds, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(model.coef_cov_, ref.coef_cov, rtol=1e-6)
        direct = np.asarray(predict_probit(ref, X[:7]).proba)
        np.testing.assert_allclose(model.predict_proba(X[:7]), direct, atol=1e-8)


def _raw_design(n=400, seed=11):
    """A 0/1 column and a raw continuous one (mean 500, sd 20), and labels from a logit model."""
    rng = np.random.default_rng(seed)
    dummy = (rng.random(n) < 0.4).astype(float)
    level = 500.0 + 20.0 * rng.normal(size=n)
    f = 1.2 * dummy + 0.05 * (level - 500.0) + rng.logistic(size=n)
    return np.c_[dummy, level], np.digitize(f, [-1.0, 0.5, 2.0])


def _reference_effects(res, X, link_cdf):
    """AMEs and delta-method sds in NumPy: probabilities from the result's arrays, central
    differences for the slope and the Jacobian, the 0 -> 1 change for the dummy."""
    w, b = np.asarray(res.coef), np.asarray(res.thresholds)
    center, d = np.asarray(res.center), w.size
    cov = np.block([[res.coef_cov, res.cross_cov], [np.asarray(res.cross_cov).T, res.thresholds_cov]])

    def proba(theta, Xs):
        cum = link_cdf(theta[d:][None, :] - ((Xs - center) @ theta[:d])[:, None])
        cum = np.c_[np.zeros(len(Xs)), cum, np.ones(len(Xs))]
        return np.diff(cum, axis=1)

    def effects(theta):
        out = []
        for j, discrete in enumerate([True, False]):
            if discrete:
                hi, lo = X.copy(), X.copy()
                hi[:, j], lo[:, j] = 1.0, 0.0
                dp = proba(theta, hi) - proba(theta, lo)
            else:
                h = 1e-4 * np.std(X[:, j])
                up, dn = X.copy(), X.copy()
                up[:, j] += h
                dn[:, j] -= h
                dp = (proba(theta, up) - proba(theta, dn)) / (2 * h)
            out.append(np.r_[dp.mean(0), (dp @ np.arange(dp.shape[1])).mean()])
        return np.array(out)

    theta = np.r_[w, b]
    value = effects(theta)
    J = np.stack([(effects(theta + 1e-6 * e) - effects(theta - 1e-6 * e)) / 2e-6 for e in np.eye(theta.size)], -1)
    return value, np.sqrt(np.einsum("jkm,ml,jkl->jk", J, cov, J))


@given(st.integers(0, 80), st.integers(0, 79), st.sampled_from([2.0, 0.5, -1.0, np.nan]))
@settings(max_examples=60, deadline=None)
def test_binary_columns_reads_every_row(n, where, odd):
    # A 0/1 column with one other value anywhere (also past the rows looked at first),
    # a constant 0 and a constant 1 column, a continuous one: the full elementwise check.
    rng = np.random.default_rng(n)
    X = np.c_[rng.integers(0, 2, (n, 2)), np.zeros(n), np.ones(n), rng.normal(size=n)]
    if n:
        X[where % n, 1] = odd
    expected = np.all((X == 0) | (X == 1), axis=0)
    np.testing.assert_array_equal(binary_columns(X), expected)


def test_marginal_effects_match_a_numpy_reference_and_follow_the_columns_units():
    from scipy.special import expit

    X, y = _raw_design()
    model = OrdinalProbit(thresholds="joint", alpha=0.0, link="logit").fit(X, y)
    table = model.marginal_effects(X)
    assert list(table["kind"].unique()) == ["change 0->1", "slope"]
    value, sd = _reference_effects(model.result_, X, expit)
    np.testing.assert_allclose(table["mean"].to_numpy().reshape(value.shape), value, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(table["sd"].to_numpy().reshape(sd.shape), sd, rtol=1e-4, atol=1e-9)
    # Class-probability effects sum to zero over the classes.
    probs = table["mean"].to_numpy().reshape(2, -1)[:, :-1]
    np.testing.assert_allclose(probs.sum(axis=1), 0.0, atol=1e-12)
    # Effects are per unit of the user's column: shifting it changes nothing, scaling it by 10
    # divides its slope (and its sd) by 10.
    shifted = OrdinalProbit(thresholds="joint", alpha=0.0, link="logit").fit(X * [1.0, 10.0] + [0.0, -3e3], y)
    moved = shifted.marginal_effects(X * [1.0, 10.0] + [0.0, -3e3])
    slope = table.xs("x1", level="term")
    np.testing.assert_allclose(moved.xs("x1", level="term")[["mean", "sd"]].to_numpy(),
                               slope[["mean", "sd"]].to_numpy() / 10.0, rtol=1e-5, atol=1e-10)
    np.testing.assert_allclose(moved.xs("x0", level="term")["mean"], table.xs("x0", level="term")["mean"],
                               rtol=1e-6, atol=1e-10)


def test_the_expected_class_effect_counts_the_label_values():
    """Labels 1, 5, 10, 30: the effect on E[class] is the effects on the class probabilities
    weighted by the label values, as predict_expected weighs the probabilities (it was by
    positions 0..K-1, which agree only for consecutive numbers)."""
    X, y = _raw_design()
    values = np.array([1.0, 5.0, 10.0, 30.0])
    model = OrdinalProbit(thresholds="joint", alpha=0.0).fit(X, values[y].astype(int))
    table = model.marginal_effects(X)["mean"].unstack()
    np.testing.assert_allclose(table["E[class]"], table[[f"P(y={c})" for c in (1, 5, 10, 30)]] @ values,
                               rtol=1e-10)


def test_marginal_effects_at_one_row_and_after_save_load(tmp_path):
    X, y = _raw_design(200, seed=3)
    model = OrdinalProbit(thresholds="joint").fit(X, y)
    at = model.marginal_effects(X[:1])
    path = tmp_path / "m.npz"
    model.save(path)
    again = OrdinalProbit.load(path).marginal_effects(X[:1])
    pd.testing.assert_frame_equal(at, again)
    assert at.loc[("x0", "E[class]"), "kind"] == "change 0->1"
    with pytest.raises(ValueError, match="features"):
        model.marginal_effects(X[:, :1])


def test_class_weight_balanced_equals_the_matching_sample_weights(tmp_path):
    """``class_weight="balanced"`` is sample weights ``W / (K W_k)``; a dict multiplies the
    named classes; both multiply ``sample_weight``."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 2))
    y = np.digitize(X @ [1.0, -0.5] + rng.logistic(size=300), [-2.5, 1.5])  # rare outer classes
    sw = rng.uniform(0.5, 2.0, size=300)
    totals = np.bincount(y, weights=sw)
    joint = dict(thresholds="joint")
    balanced = OrdinalProbit(class_weight="balanced", **joint).fit(X, y, sample_weight=sw)
    manual = OrdinalProbit(**joint).fit(X, y, sample_weight=sw * (sw.sum() / (3 * totals))[y])
    np.testing.assert_allclose(balanced.coef_, manual.coef_, rtol=1e-9)
    np.testing.assert_allclose(balanced.predict_proba(X[:5]), manual.predict_proba(X[:5]), rtol=1e-9)
    # The rare classes gain probability.
    plain = OrdinalProbit(**joint).fit(X, y, sample_weight=sw)
    assert balanced.predict_proba(X)[:, 0].mean() > plain.predict_proba(X)[:, 0].mean()
    dicted = OrdinalProbit(class_weight={0: 3.0, 2: 0.5}, **joint).fit(X, y)
    by_hand = OrdinalProbit(**joint).fit(X, y, sample_weight=np.array([3.0, 1.0, 0.5])[y])
    np.testing.assert_allclose(dicted.coef_, by_hand.coef_, rtol=1e-9)
    # A dict whose keys JSON would turn into text is not saved silently changed.
    path = tmp_path / "m.npz"
    dicted.save(path)
    with pytest.warns(UserWarning, match="class_weight"):
        assert OrdinalProbit.load(path).class_weight is None


@pytest.mark.parametrize("class_weight, error, match", [
    ("equal", ValueError, "'balanced'"),
    ({5: 1.0}, ValueError, r"names \[5\], which are not classes"),
    ({0: -1.0}, ValueError, "finite number >= 0"),
    ({0: float("nan")}, ValueError, "finite number >= 0"),
    ({0: 0.0, 1: 0.0, 2: 0.0}, ValueError, "every row at weight zero"),
    ([1.0, 2.0, 3.0], TypeError, "dict"),
])
def test_bad_class_weight(class_weight, error, match):
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = np.arange(30) % 3
    with pytest.raises(error, match=match):
        OrdinalProbit(class_weight=class_weight).fit(X, y)


def test_a_class_weight_typo_lists_the_classes_as_labels():
    """The classes were shown as np.str_('very poor') reprs."""
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = np.array(["low", "mid", "high"] * 10)
    with pytest.raises(ValueError, match=r"names \['hgh'\], which are not classes; the classes are "
                                         r"\['low', 'mid', 'high'\]$"):
        OrdinalProbit(classes=["low", "mid", "high"], class_weight={"hgh": 2.0}).fit(X, y)


def test_probabilities_at_the_estimate_are_statsmodels_fitted_probabilities():
    """``at_estimate=True``: the maximum-likelihood fit's plug-in probabilities, which a user
    checking against statsmodels (or R's clm) expects; the predictive ones integrate the
    posterior and differ by about 0.02 on these 200 rows."""
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    X, y, _ = make_ordinal_probit(200, 3, 4, seed=3)
    model = OrdinalProbit(thresholds="joint", alpha=0.0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = OrderedModel(y, X, distr="probit").fit(method="bfgs", disp=False, maxiter=5000, gtol=1e-10)
    expected = ref.model.predict(ref.params, exog=X)
    np.testing.assert_allclose(model.predict_proba(X, at_estimate=True), expected, atol=1e-7)
    np.testing.assert_allclose(model.predict_cumproba(X, at_estimate=True), np.cumsum(expected, axis=1)[:, :-1],
                               atol=1e-7)
    assert np.abs(model.predict_proba(X) - expected).max() > 5e-3
    np.testing.assert_array_equal(model.predict(X, at_estimate=True), model.classes_[np.argmax(expected, axis=1)])
