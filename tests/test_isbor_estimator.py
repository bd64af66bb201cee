"""ISBOR/SBOR estimators: labels, outputs, bad input, status warnings.

The default-run fits reuse the shapes and configuration of tests/test_isbor.py (N=60,
K=3, capacity 16) so the compiled solver is shared.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning

from bayesord.estimators._isbor import ISBOR, SBOR, selection_rows

from test_isbor import N, tiny_data  # tests/ is on sys.path (pytest prepend import mode)


def small_model(**kw):
    params = dict(theta=1.0, capacity=16, max_iter=60, link="probit", random_state=0)
    params.update(kw)
    return ISBOR(**params)


@pytest.fixture(scope="module")
def data():
    return tiny_data()


@pytest.fixture(scope="module")
def model(data):
    X, y = data
    labels = np.array(["low", "mid", "high"])[y]
    return small_model().fit(X, labels, classes=["low", "mid", "high"])


def test_labels_outputs_and_attributes(model, data):
    X, y = data
    pred = model.predict(X)
    assert set(pred) <= {"low", "mid", "high"}
    order = {"low": 0, "mid": 1, "high": 2}
    assert np.mean([order[p] for p in pred] == y) > 0.8
    proba = model.predict_proba(X)
    assert proba.shape == (N, 3) and np.all(proba >= 0) and np.allclose(proba.sum(1), 1)
    assert model.predict_proba_std(X).shape == (N, 3)
    mean, var = model.predict_latent(X)
    assert np.all(var > 0) and np.allclose(model.decision_function(X), mean)
    m = len(model.relevance_indices_)
    assert model.coef_.shape == (m,) and model.coef_cov_.shape == (m, m) and model.alpha_.shape == (m,)
    np.testing.assert_allclose(model.coef_cov_, model.coef_cov_.T)
    assert np.all(np.linalg.eigvalsh(model.coef_cov_) > 0)
    np.testing.assert_allclose(model.relevance_vectors_, X[model.relevance_indices_], rtol=1e-14)
    assert np.all(np.diff(model.thresholds_) > 0) and model.sigma_ > 0
    assert model.converged_ and model.n_iter_ == len(model.actions_) == len(model.evidence_trace_) - 1
    assert "add" in model.actions_
    assert model.score(X, np.array(["low", "mid", "high"])[y]) == pytest.approx(
        -np.mean(np.abs(np.array([order[p] for p in pred]) - y)))


def test_predict_proba_is_float64_from_the_log_probabilities(model, data, monkeypatch):
    X, _ = data
    raw = model._predict_raw(X)
    proba = model.predict_proba(X)
    assert proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-14)
    np.testing.assert_allclose(proba, np.asarray(raw.proba), rtol=1e-5, atol=1e-7)
    # A class whose float32 log-probability is -115 keeps its probability (e^-115, about
    # 1e-50), where float32 exponentiation underflows to 0 (an infinite log-loss).
    log_p = np.log(np.array([[1.0, 1e-50, 1e-50]]))
    fake = raw._replace(log_proba=np.asarray(log_p, np.float32), proba=np.exp(np.asarray(log_p, np.float32)))
    monkeypatch.setattr(model, "_predict_raw", lambda X: fake)
    assert fake.proba[0, 1] == 0.0
    np.testing.assert_allclose(model.predict_proba(X[:1]), [[1.0, 1e-50, 1e-50]], rtol=1e-4)  # float32 logs


@pytest.mark.slow
def test_joint_reestimate_is_a_choice(data):
    """The default also tries every re-estimate at once; joint_reestimate=False is the
    published loop, one action per iteration, whose evidence trace never holds that step."""
    X, y = data
    joint = small_model(theta=0.3, max_iter=200).fit(X, y)
    single = small_model(theta=0.3, max_iter=200, joint_reestimate=False).fit(X, y)
    assert "reestimate_all" in joint.actions_ and "reestimate_all" not in single.actions_
    assert joint.converged_ and single.converged_
    assert np.all(np.diff(joint.evidence_trace_) >= -1e-9 * (1 + np.abs(joint.evidence_trace_[1:])))


def test_monotone_relabelling_gives_same_fit(model, data):
    X, y = data
    other = small_model().fit(X, 10 * y + 5)
    np.testing.assert_allclose(other.log_evidence_, model.log_evidence_, rtol=1e-10)
    order = {"low": 0, "mid": 1, "high": 2}
    np.testing.assert_array_equal(other.predict(X), [10 * order[p] + 5 for p in model.predict(X)])


@pytest.mark.parametrize("kw, match", [
    (dict(theta=0.0), "positive finite"),
    (dict(theta=-1.0), "positive finite"),
    (dict(theta=float("nan")), "positive finite"),
    (dict(theta=float("inf")), "positive finite"),
    (dict(theta="wide"), "'auto'"),
    (dict(theta="auto", theta_grid=(1.0, -2.0)), "theta_grid"),
    (dict(capacity=2), "capacity"),
    (dict(kernel="laplace"), "kernel"),
    (dict(max_iter=0), "max_iter"),
    (dict(kernel="poly", degree=2.5), r"degree must be a positive integer, got 2\.5"),
    (dict(n_centres=2), "n_centres"),
    (dict(n_centres="many"), "n_centres must be 'auto'"),
    (dict(theta_selection="waic"), "theta_selection"),
    (dict(cv_scoring="brier"), "cv_scoring"),
])
def test_bad_parameters_raise(data, kw, match):
    X, y = data
    with pytest.raises(ValueError, match=match):
        small_model(**kw).fit(X, y)


def test_auto_centres_are_every_row_until_their_basis_outgrows_the_cache(data):
    X, y = data
    assert small_model()._centre_count(N, np.float64) == N
    assert small_model()._centre_count(20_000, np.float64) == 2**30 // (20_000 * 8)  # 6,710 rows
    assert small_model()._centre_count(16_384, np.float32) == 16_384
    assert small_model(cache_bytes=N * 20 * 8, block_size=16)._centre_count(N, np.float64) == 20
    assert small_model(cache_bytes=8, block_size=16)._centre_count(N, np.float64) == 16  # one block
    # With a cache too small for all rows, "auto" is the random subset of the size that fits.
    auto = small_model(cache_bytes=N * 20 * 8, block_size=16).fit(X, y)
    explicit = small_model(cache_bytes=N * 20 * 8, block_size=16, n_centres=20).fit(X, y)
    np.testing.assert_array_equal(auto.relevance_indices_, explicit.relevance_indices_)
    np.testing.assert_array_equal(auto.predict_proba(X), explicit.predict_proba(X))


def test_bad_data_raise(data):
    X, y = data
    with pytest.raises(ValueError, match="square"):
        small_model(kernel="precomputed").fit(np.ones((N, N - 1)), y)
    Xb = np.ones((N, N))
    Xb[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        small_model(kernel="precomputed").fit(Xb, y)
    with pytest.raises(ValueError):
        small_model().fit(X[:2], [0, 1], classes=[0, 1, 2])
    with pytest.raises(ValueError, match="NaN"):
        small_model().fit(np.where(np.arange(N)[:, None] == 5, np.nan, X), y)
    with pytest.raises(ValueError, match="different lengths"):
        small_model().fit(X, y[:-1])


def test_a_user_fit_in_float32_says_that_x64_does_better(data):
    """ISBOR's defaults in float32 ended 3-28 nats lower in evidence on 11 of 12 fits of six
    data sets (docs/isbor.md, "Precision"): its fit says so, before it starts; in float64, or
    for a model without the greedy evidence search, nothing is said."""
    from bayesord import OrdinalProbit
    from bayesord.estimators._base import internal_fits

    X, y = data
    with jax.enable_x64(False):
        for est in (ISBOR(), SBOR()):
            with pytest.warns(UserWarning, match=rf"{type(est).__name__} fits in float32, JAX's default: the greedy "
                                                 r"evidence search .*jax_enable_x64"):
                est._validate_fit(X, y)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            OrdinalProbit()._validate_fit(X, y)
            with internal_fits():  # the library's own copies leave it to the user's fit
                ISBOR()._validate_fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ISBOR()._validate_fit(X, y)


def test_predict_rejects_wrong_features(model, data):
    X, _ = data
    with pytest.raises(ValueError):
        model.predict(X[:, :1])


@pytest.mark.slow
def test_capacity_hit_warns(data):
    X, y = data
    with pytest.warns(ConvergenceWarning, match=r"full .*capacity=3 relevance vectors.*ISBOR\(capacity=6\)"):
        m = small_model(capacity=3).fit(X, y)
    assert len(m.relevance_indices_) == 3 and not m.converged_


@pytest.mark.slow
def test_theta_auto_by_evidence_and_cv(data):
    X, y = data
    ev = small_model(theta="auto", theta_grid=(0.1, 1.0, 10.0), theta_selection="evidence").fit(X, y)
    assert ev.theta_ in (0.1, 1.0, 10.0) and ev.theta_grid_scores_.shape == (3,)
    assert ev.theta_ == (0.1, 1.0, 10.0)[int(np.argmax(ev.theta_grid_scores_))]
    # The grid is one sequential call (lax.map); its scores are the evidences of separate fits.
    Xj, yj, sw = jnp.asarray(X), jnp.asarray(y, jnp.int32), jnp.ones(len(y))
    key = jax.random.PRNGKey(3)
    _, scores, factor, integrate = ev._select_theta(Xj, yj, sw, 3, key, np.random.RandomState(0))
    assert factor == 1.0 and integrate  # the predictive's spread is chosen only by CV
    cand = jnp.arange(len(y), dtype=jnp.int32)
    config = ev._config(len(y), len(y), 3, Xj.dtype)
    separate = [float(ev._solver(Xj, yj, sw, cand, key, t, ev.min_delta, config=config).log_evidence)
                for t in (0.1, 1.0, 10.0)]
    np.testing.assert_allclose(scores, separate, rtol=1e-6)  # one program vs three: rounding
    cv = small_model(theta="auto", theta_grid=(0.1, 1.0), theta_selection="cv", cv=3).fit(X, y)
    assert cv.theta_ in (0.1, 1.0) and np.all(cv.theta_grid_scores_ <= 0)


def test_the_default_width_grid_is_relative_to_the_standardised_columns(data):
    """``theta_grid="scale"``: ``(0.1, 0.3, 1, 3) / d'``, d' the non-constant columns, the
    same for the columns in other units and offsets and with a constant column added
    (which the fit's standardisation maps to zero)."""
    X, y = data
    raw = np.column_stack([X * [1000.0, 0.01] + [5e3, -2.0], np.full(len(y), 7.0)])
    for cols in (X, raw):
        grid = ISBOR()._width_grid(jnp.asarray(cols), jnp.ones(len(y)))
        np.testing.assert_allclose(grid, np.array([0.1, 0.3, 1.0, 3.0]) / 2, rtol=1e-12)


@pytest.mark.slow
def test_the_default_width_selection_does_not_depend_on_the_units(data, tmp_path):
    X, y = data
    raw = np.column_stack([X * [1000.0, 0.01] + [5e3, -2.0], np.full(len(y), 7.0)])
    kw = dict(theta="auto", theta_selection="evidence")
    a, b = small_model(**kw).fit(X, y), small_model(**kw).fit(raw, y)
    np.testing.assert_allclose(a.theta_grid_values_, [0.05, 0.15, 0.5, 1.5], rtol=1e-12)
    assert a.theta_ == b.theta_ and a.theta_ == a.theta_grid_values_[np.argmax(a.theta_grid_scores_)]
    np.testing.assert_allclose(a.theta_grid_scores_, b.theta_grid_scores_, rtol=1e-8)
    np.testing.assert_array_equal(a.predict(X), b.predict(raw))
    b.save(tmp_path / "m.npz")
    np.testing.assert_array_equal(ISBOR.load(tmp_path / "m.npz").theta_grid_values_, b.theta_grid_values_)


@pytest.mark.parametrize("scoring", ["mae", "log_loss"])
@pytest.mark.slow
def test_theta_auto_by_cv_equals_separate_fold_fits(data, scoring):
    """CV scores are the pooled held-out MAE / log probability of one fit per fold (the
    fold's rows at weight 0), recomputed here from separate fits with NumPy; the factor on
    sigma is the one of SIGMA_FACTORS with the lowest pooled held-out log-loss of the chosen
    width's fold fits, their sigma times the factor."""
    from bayesord._isbor import predict_isbor
    from bayesord.estimators._isbor import SIGMA_FACTORS

    X, y = data
    grid = (0.1, 1.0)
    est = small_model(theta="auto", theta_grid=grid, theta_selection="cv", cv=3, cv_scoring=scoring)
    Xj, yj, sw = jnp.asarray(X), jnp.asarray(y, jnp.int32), jnp.ones(len(y))
    key = jax.random.PRNGKey(5)
    theta, scores, factor, integrate = est._select_theta(Xj, yj, sw, 3, key, np.random.RandomState(1))
    assert theta == grid[int(np.argmax(scores))]
    folds = np.random.RandomState(1).permutation(len(y)) % 3
    cand = jnp.arange(len(y), dtype=jnp.int32)
    config = est._config(len(y), len(y), 3, Xj.dtype)
    for t, score in zip(grid, scores):
        loss, fits = np.zeros(len(y)), []
        for k in range(3):
            # The fold fits' documented tolerance: min_delta or 1e-3 nats per row, the looser.
            fits.append(est._solver(Xj, yj, jnp.asarray(folds != k, float), cand, key, t,
                                    max(est.min_delta, 1e-3 * len(y)), config=config))
            pred = predict_isbor(fits[-1], Xj[folds == k])
            if scoring == "mae":
                loss[folds == k] = np.abs(np.asarray(pred.labels) - y[folds == k])
            else:
                loss[folds == k] = -np.log(np.asarray(pred.proba)[np.arange((folds == k).sum()), y[folds == k]])
        np.testing.assert_allclose(score, -loss.mean(), rtol=1e-6)
        if t == theta:
            chosen_fits = fits
    # Each way of predicting (thresholds integrated, or at their estimate: the probit with
    # the weights' conditional variance alone, computed here with SciPy) takes its factor of
    # lowest held-out log-loss; the estimate wins only by more than twice the standard
    # error of the per-row difference.
    best = {}
    for integrate_b in (True, False):
        for f in SIGMA_FACTORS:
            loss = np.zeros(len(y))
            for k, res in enumerate(chosen_fits):
                held = folds == k
                pred = predict_isbor(res._replace(sigma=res.sigma * f), Xj[held])
                if integrate_b:
                    proba = np.asarray(pred.proba)
                else:
                    s = np.sqrt((float(res.sigma) * f) ** 2 + np.asarray(pred.weight_var))
                    cum = norm.cdf((np.asarray(res.b)[None, :] - np.asarray(pred.latent_mean)[:, None]) / s[:, None])
                    proba = np.diff(np.c_[np.zeros(held.sum()), cum, np.ones(held.sum())], axis=1)
                loss[held] = -np.log(proba[np.arange(held.sum()), y[held]])
            if integrate_b not in best or loss.mean() < best[integrate_b][0]:
                best[integrate_b] = (loss.mean(), f, loss)
    diff = best[False][2] - best[True][2]
    expected = not (diff.mean() + 2 * diff.std() / np.sqrt(len(diff)) < 0)
    assert integrate == expected and factor == best[expected][1]


def noisy_data(seed, n=N, noise=0.5):
    """tiny_data's signal with more noise, cut at fixed values: on 60 rows the
    evidence-fitted model is over-confident."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] + rng.normal(0, noise, n)
    return X, np.digitize(f, [-0.5, 0.5]).astype(np.int32)


def test_calibrate_sigma_widens_the_predictive_probabilities_and_nothing_else(tmp_path):
    from bayesord._isbor import predict_isbor
    from bayesord.estimators._isbor import SIGMA_FACTORS

    X, y = noisy_data(2)
    on = small_model(theta="auto", theta_grid=(0.1, 1.0)).fit(X, y)
    off = small_model(theta="auto", theta_grid=(0.1, 1.0), calibrate_sigma=False).fit(X, y)
    assert on.sigma_factor_ in SIGMA_FACTORS and on.sigma_factor_ > 1 and off.sigma_factor_ == 1.0
    assert small_model().fit(X, y).sigma_factor_ == 1.0  # a fixed width: no fold fits
    for name in ("theta_", "sigma_", "coef_", "thresholds_", "relevance_indices_"):
        np.testing.assert_array_equal(getattr(on, name), getattr(off, name), err_msg=name)
    np.testing.assert_array_equal(on.predict(X), off.predict(X))
    wider = on.result_._replace(sigma=on.result_.sigma * on.sigma_factor_)
    np.testing.assert_allclose(on.predict_proba(X), predict_isbor(wider, X).proba, rtol=1e-9, atol=1e-12)
    assert np.max(on.predict_proba(X), axis=1).mean() < np.max(off.predict_proba(X), axis=1).mean()
    on.save(tmp_path / "on.npz")
    loaded = ISBOR.load(tmp_path / "on.npz")
    assert loaded.sigma_factor_ == on.sigma_factor_
    np.testing.assert_array_equal(loaded.predict_proba(X), on.predict_proba(X))
    with pytest.raises(TypeError, match="calibrate_sigma"):
        small_model(calibrate_sigma="yes").fit(X, y)


@pytest.mark.slow
def test_a_deterministic_rule_predicts_with_the_thresholds_at_their_estimate(tmp_path):
    """Classes cut from x1 + x2 without noise: the fold fits' held-out rows favour the
    thresholds at their estimate (the weights' conditional posterior, computed here with
    SciPy) significantly, and the predictions then use it; saved and loaded alike."""
    from bayesord._isbor import predict_isbor

    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, size=(120, 2))
    y = np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])
    model = small_model(theta="auto", theta_grid=(0.3, 1.0)).fit(X, y)
    assert not model.integrate_thresholds_
    pred = predict_isbor(model.result_._replace(sigma=model.result_.sigma * model.sigma_factor_), X)
    s = np.sqrt(float(model.sigma_ * model.sigma_factor_) ** 2 + np.asarray(pred.weight_var, np.float64))
    cum = norm.cdf((np.asarray(model.result_.b, np.float64)[None, :] - np.asarray(pred.latent_mean)[:, None])
                   / s[:, None])
    expected = np.diff(np.c_[np.zeros(len(y)), cum, np.ones(len(y))], axis=1)
    np.testing.assert_allclose(model.predict_proba(X), expected, rtol=1e-4, atol=1e-7)
    lower, upper, sd = model.predict_proba_interval(X)
    assert np.all(np.isfinite(sd)) and np.all(lower <= upper)
    model.save(tmp_path / "m.npz")
    assert not ISBOR.load(tmp_path / "m.npz").integrate_thresholds_
    assert small_model(theta="auto", theta_grid=(0.3, 1.0), calibrate_sigma=False).fit(X, y).integrate_thresholds_


@pytest.mark.slow
def test_calibrate_sigma_lowers_the_log_loss_on_new_rows_after_sixty():
    """Four data sets of 60 training rows, each scored on 2,000 new rows from its generator."""
    from bayesord.metrics import ordinal_log_loss

    losses = {True: [], False: []}
    for seed in range(4):
        X, y = noisy_data(seed)
        X_new, y_new = noisy_data(100 + seed, n=2000)
        for calibrate in (True, False):
            model = small_model(theta="auto", theta_grid=(0.1, 1.0), calibrate_sigma=calibrate).fit(X, y)
            losses[calibrate].append(ordinal_log_loss(y_new, model.predict_proba(X_new)))
    assert np.mean(losses[True]) < np.mean(losses[False]) - 0.01


def test_cv_width_search_stops_after_two_widths_in_a_row_score_below_the_best(data, monkeypatch):
    """The search order and the stopping rule, with the fold fits replaced by predictions
    whose held-out quality peaks at the widest kernel (theta 1) and falls after it."""
    import bayesord.estimators._isbor as est

    X, y = data
    tried, tolerances = [], []

    def fake_folds(theta, weights, X, y, cand, key, min_delta, *, solver, config):
        theta = float(theta)
        tried.append(theta)
        tolerances.append(min_delta)
        q = 0.9 / theta  # the true class's probability falls as the kernel narrows
        proba = np.full((weights.shape[0], len(y), 3), (1 - q) / 2)
        proba[:, np.arange(len(y)), np.asarray(y)] = q
        return np.tile(np.asarray(y), (weights.shape[0], 1)), proba, None

    monkeypatch.setattr(est, "_fold_predictions", fake_folds)
    # No fold fits to widen sigma on (calibrate_sigma=False).
    model = small_model(theta="auto", theta_grid=(3.0, 1.0, 5.0, 2.0, 4.0), cv=3, calibrate_sigma=False).fit(X, y)
    assert tried == [1.0, 2.0, 3.0]  # widest first; 2 and 3 fall behind, so 4 and 5 are skipped
    assert model.theta_ == 1.0
    np.testing.assert_array_equal(np.isnan(model.theta_grid_scores_), [False, False, True, False, True])
    assert np.nanargmax(model.theta_grid_scores_) == 1
    # The fold fits stop at min_delta or at 1e-3 nats per selection row, the looser.
    assert tolerances == [pytest.approx(1e-3 * len(y))] * 3
    tolerances.clear()
    small_model(theta="auto", theta_grid=(1.0,), cv=3, min_delta=0.5, calibrate_sigma=False).fit(X, y)
    assert tolerances == [0.5]



def test_the_linear_kernel_has_no_width_to_search(data, monkeypatch):
    """Its fits do not depend on theta, so the CV fits its folds once (they used to be
    fitted again for every width of the grid, to the same result)."""
    import bayesord.estimators._isbor as est

    X, y = data
    tried = []

    def fake_folds(theta, weights, X, y, cand, key, min_delta, *, solver, config):
        tried.append(float(theta))
        proba = np.full((weights.shape[0], len(y), 3), 1 / 3)
        return np.tile(np.asarray(y), (weights.shape[0], 1)), proba, None

    monkeypatch.setattr(est, "_fold_predictions", fake_folds)
    model = small_model(kernel="linear", theta="auto", theta_grid=(3.0, 1.0, 5.0), cv=3,
                        calibrate_sigma=False).fit(X, y)
    assert tried == [1.0]
    assert model.theta_ == 1.0 and model.theta_grid_values_.tolist() == [1.0]

@pytest.mark.slow
def test_theta_auto_by_cv_accepts_splitters_and_index_splits(data):
    """cv as a scikit-learn splitter or as (train, test) index pairs: the same partition
    scores as the integer rule; splits that overlap, or leave rows out of both parts, are
    scored on their test rows from fits on their train rows only (separate fits here)."""
    from sklearn.model_selection import KFold

    from bayesord._isbor import predict_isbor

    X, y = data
    n, grid = len(y), (0.1, 1.0)
    Xj, yj, sw = jnp.asarray(X), jnp.asarray(y, jnp.int32), jnp.ones(n)
    key = jax.random.PRNGKey(5)
    args = (Xj, yj, sw, 3, key)
    folds = np.random.RandomState(1).permutation(n) % 3
    partition = [(np.flatnonzero(folds != k), np.flatnonzero(folds == k)) for k in range(3)]
    _, by_int, _, _ = small_model(theta="auto", theta_grid=grid, theta_selection="cv", cv=3)._select_theta(
        *args, np.random.RandomState(1))
    _, by_pairs, _, _ = small_model(theta="auto", theta_grid=grid, theta_selection="cv",
                              cv=partition)._select_theta(*args, np.random.RandomState(7))
    np.testing.assert_allclose(by_pairs, by_int, rtol=1e-12)
    kf = KFold(3, shuffle=True, random_state=0)
    _, by_splitter, _, _ = small_model(theta="auto", theta_grid=grid, theta_selection="cv",
                                 cv=kf)._select_theta(*args, np.random.RandomState(7))
    _, by_its_pairs, _, _ = small_model(theta="auto", theta_grid=grid, theta_selection="cv",
                                  cv=list(kf.split(X)))._select_theta(*args, np.random.RandomState(7))
    np.testing.assert_allclose(by_splitter, by_its_pairs, rtol=1e-12)

    rows = np.random.RandomState(2).permutation(n)
    odd = [(rows[:30], rows[30:50]), (rows[20:60], rows[:25])]  # rows 50..59 of rows: train only
    est = small_model(theta="auto", theta_grid=grid, theta_selection="cv", cv=odd, cv_scoring="mae")
    _, scores, _, _ = est._select_theta(*args, np.random.RandomState(0))
    cand = jnp.arange(n, dtype=jnp.int32)
    config = est._config(n, n, 3, Xj.dtype)
    for t, score in zip(grid, scores):
        errors = []
        for train, test in odd:
            res = est._solver(Xj, yj, jnp.zeros(n).at[train].set(1.0), cand, key, t,
                              max(est.min_delta, 1e-3 * n), config=config)  # the fold fits' tolerance
            errors.append(np.abs(np.asarray(predict_isbor(res, Xj[test]).labels) - y[test]))
        np.testing.assert_allclose(score, -np.concatenate(errors).mean(), rtol=1e-6)


@pytest.mark.parametrize("cv", [1, True, "5", 2.5, [(np.arange(30), np.arange(30, 60))],
                                [(np.arange(30), np.arange(30, 61)), (np.arange(30), np.arange(5))],
                                [(np.arange(30), np.array([], int)), (np.arange(30), np.arange(5))]])
def test_bad_cv_is_refused(data, cv):
    X, y = data
    with pytest.raises(ValueError, match="cv"):
        small_model(theta="auto", theta_grid=(0.1, 1.0), theta_selection="cv", cv=cv).fit(X, y)


@pytest.mark.slow
def test_theta_auto_by_loo_equals_psis_loo_of_separate_fits(data):
    """The LOO scores are ArviZ PSIS-LOO of each width's own fit (same draws), and the
    chosen width is their argmax; sample weights are refused."""
    from bayesord.diagnostics import loo

    X, y = data
    grid = (0.1, 1.0, 10.0)
    est = small_model(theta="auto", theta_grid=grid, theta_selection="loo")
    Xj, yj, sw = jnp.asarray(X), jnp.asarray(y, jnp.int32), jnp.ones(len(y))
    key = jax.random.PRNGKey(3)
    with pytest.warns(UserWarning, match="theta="):  # narrow widths: Pareto k warnings, named
        theta, scores, factor, integrate = est._select_theta(Xj, yj, sw, 3, key, np.random.RandomState(0))
    assert theta == grid[int(np.argmax(scores))] and factor == 1.0 and integrate
    cand = jnp.arange(len(y), dtype=jnp.int32)
    config = est._config(len(y), len(y), 3, Xj.dtype)
    for t, score in zip(grid, scores):
        res = est._solver(Xj, yj, sw, cand, key, t, est.min_delta, config=config)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            ref = float(loo(res, X, y, draws=250, chains=4,
                            key=jax.random.fold_in(key, 1)).elpd_loo)
        np.testing.assert_allclose(score, ref, rtol=1e-6)
    with pytest.warns(UserWarning, match="theta="):
        fitted = est.fit(X, y)
    assert fitted.theta_ in grid and fitted.theta_grid_scores_.shape == (3,)
    with pytest.raises(ValueError, match="unit sample"):
        est.fit(X, y, sample_weight=np.full(len(y), 2.0))


@pytest.mark.slow
def test_sbor_estimator_and_precomputed_basis(data):
    X, y = data
    sb = SBOR(theta=1.0).fit(X, y)
    assert 3 <= len(sb.relevance_indices_) < N
    assert sb.score(X, y) > -0.3
    from bayesord._basis import kernel_matrix

    B = np.asarray(kernel_matrix(X, X, 1.0))
    pre = small_model(kernel="precomputed").fit(B, y)
    ref = small_model().fit(X, y)
    np.testing.assert_allclose(pre.log_evidence_, ref.log_evidence_, rtol=1e-8)
    np.testing.assert_array_equal(pre.relevance_indices_, ref.relevance_indices_)
    # A given basis has no width to choose: the default theta="auto" fits it as given (it
    # asked for a number that the fit never reads).
    auto = small_model(kernel="precomputed", theta="auto").fit(B, y)
    np.testing.assert_array_equal(auto.relevance_indices_, pre.relevance_indices_)
    np.testing.assert_array_equal(auto.predict_proba(B[:5]), pre.predict_proba(B[:5]))


def test_to_inference_data_for_isbor(model, data):
    """Posterior draws over the relevance-vector weights and the thresholds; log-likelihood
    vs NumPy/SciPy."""
    import arviz as az

    from bayesord.diagnostics import to_inference_data

    X, y = data
    labels = np.array(["low", "mid", "high"])[y]
    idata = to_inference_data(model, X, labels, draws=200, chains=2)
    w = idata.posterior["weights"].values.reshape(-1, len(model.coef_))
    assert list(idata.posterior["weights"].dims[2:]) == ["relevance_vector"]
    np.testing.assert_allclose(w.mean(axis=0), model.coef_, atol=4 * np.sqrt(np.diag(model.coef_cov_).max() / 400))
    thr = idata.posterior["thresholds"].values.reshape(-1, 2)
    assert np.all(np.diff(thr, axis=1) > 0) and "thresholds" not in idata.constant_data
    np.testing.assert_allclose(thr.mean(axis=0), model.thresholds_,
                               atol=4 * np.sqrt(np.diag(model.thresholds_cov_).max() / 400))
    np.testing.assert_allclose(np.cov(thr.T), model.thresholds_cov_, rtol=0.3)
    # Independent pointwise log-likelihood for the first draw.
    d2 = ((X[:, None, :] - model.relevance_vectors_[None, :, :]) ** 2).sum(-1)
    f = np.exp(-model.theta_ * d2) @ w[0]
    b = np.concatenate([[-np.inf], thr[0], [np.inf]])
    ref = np.log(norm.cdf((b[y + 1] - f) / model.sigma_) - norm.cdf((b[y] - f) / model.sigma_))
    got = idata.log_likelihood["y"].values.reshape(-1, len(y))[0]
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-10)
    assert np.isfinite(az.loo(idata).elpd_loo)


def test_save_load_round_trip(model, data, tmp_path):
    """A saved ISBOR loads back bit for bit, without the training data."""
    from bayesord import load_model

    X, _ = data
    path = tmp_path / "isbor.npz"
    model.save(path)
    loaded = load_model(path)
    assert type(loaded) is ISBOR and loaded.get_params() == model.get_params()
    for name in ("predict", "predict_proba", "predict_proba_std", "predict_latent"):
        np.testing.assert_array_equal(getattr(loaded, name)(X), getattr(model, name)(X))
    for name in ("classes_", "relevance_indices_", "relevance_vectors_", "coef_", "coef_cov_", "alpha_",
                 "thresholds_", "evidence_trace_", "actions_", "sigma_", "sigma_factor_", "theta_", "log_evidence_",
                 "n_iter_", "converged_", "status_", "n_pruned_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name), err_msg=name)
    table = loaded.summary()
    assert list(table.index) == [f"rv {i}" for i in model.relevance_indices_] + [
        "threshold low|mid", "threshold mid|high"]
    np.testing.assert_allclose(table["97.5%"] - table["2.5%"],
                               2 * 1.959964 * np.sqrt(np.r_[np.diag(model.coef_cov_), np.diag(model.thresholds_cov_)]),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="bayesord.ISBOR/2"):
        SBOR.load(path)


def test_saving_an_unstorable_parameter_warns_on_load(data, tmp_path):
    from sklearn.model_selection import KFold

    X, y = data
    m = small_model().fit(X, y)
    m.set_params(cv=KFold(3))  # a splitter cannot be stored without pickle
    m.save(tmp_path / "m.npz")
    with pytest.warns(UserWarning, match="cv=KFold"):
        loaded = ISBOR.load(tmp_path / "m.npz")
    assert loaded.cv == 5
    np.testing.assert_array_equal(loaded.predict_proba(X), m.predict_proba(X))


def test_predictions_on_nearby_row_counts_share_one_program(model, data):
    """Predictions pad their rows to a bucket size: 100 and 104 rows (both 104) compile once,
    and padding changes no prediction (each equals the functional prediction on its rows)."""
    from bayesord._isbor import _predict_isbor, predict_isbor

    X, _ = data
    rows = np.random.default_rng(0).normal(size=(104, X.shape[1]))
    model.predict_proba(rows[:100])
    size = _predict_isbor._cache_size()
    proba = model.predict_proba(rows[:104])
    assert _predict_isbor._cache_size() == size
    res, standardised = model._inputs(rows)
    np.testing.assert_allclose(proba, np.asarray(predict_isbor(res, jnp.asarray(standardised)).proba), atol=1e-12)
    mean, var = model.predict_latent(rows[:100])
    assert mean.shape == var.shape == (100,)
    np.testing.assert_allclose(mean, np.asarray(predict_isbor(res, jnp.asarray(standardised[:100])).latent_mean),
                               atol=1e-10)


@pytest.mark.slow
def test_sbor_default_cap_lets_the_last_prunings_finish(datasets_dir):
    """On this split of pyrim10 the default SBOR fit (width by CV) is still pruning at 300
    iterations, the cap before, and converges a little later within the default 1,000."""
    from bayesord.datasets import load_shared, stratified_split

    ds = load_shared("pyrim10", root=datasets_dir)
    train, _ = stratified_split(ds.y, int(0.8 * len(ds.y)), seed=3)
    X = ds.X[train]
    X = (X - X.mean(0)) / np.where(np.ptp(X, axis=0) > 0, X.std(0), 1.0)  # as defaults_bench.py
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = SBOR(random_state=3).fit(X, ds.y[train])
    assert model.converged_ and 300 < model.n_iter_ < 1000


def test_width_selection_subsamples_only_above_one_and_a_half_times_its_rows():
    """Up to 1.5 x selection_max_samples rows ISBOR's selection uses them all (one program
    with the final fit; SBOR up to 1 x); above, a sorted random subset of exactly
    selection_max_samples rows."""
    rng = np.random.default_rng(0)
    above = ISBOR._subsample_above
    assert above == 1.5 and SBOR._subsample_above == 1.0
    assert selection_rows(1000, 1000, rng, above) is None
    assert selection_rows(1500, 1000, rng, above) is None
    rows = selection_rows(1501, 1000, rng, above)
    assert rows.size == 1000 and np.all(np.diff(rows) > 0) and rows.max() < 1501
    assert selection_rows(1001, 1000, rng, SBOR._subsample_above).size == 1000
    X, y = tiny_data()
    with pytest.raises(ValueError, match="needs the selection to use every row"):
        ISBOR(selection_max_samples=10, cv=[(np.arange(20), np.arange(20, 40))]).fit(X[:40], y[:40])


def test_cross_fitted_copies_use_the_models_width_and_spread(data, monkeypatch):
    """calibrate(cv=k) copies of a model whose width was chosen fit at that width and predict
    with its spread: a width search per copy chose other widths on a user's data (CV scores
    nearly flat over the grid), two of them filling their capacity."""
    X, y = data
    model = small_model(theta="auto", theta_grid=(0.1, 1.0), capacity=32).fit(X, y)
    made = []
    original = ISBOR._fit_copy

    def recording(self, *args):
        copy = original(self, *args)
        made.append((copy.theta, copy.theta_, copy.sigma_factor_, copy.integrate_thresholds_))
        return copy

    monkeypatch.setattr(ISBOR, "_fit_copy", recording)
    model.calibrate(X, y, cv=3, random_state=0)
    expected = (model.theta_, model.theta_, model.sigma_factor_, model.integrate_thresholds_)
    assert made == [expected] * 3
