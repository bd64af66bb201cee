"""ArviZ export and PSIS-LOO: draws, log-likelihood and predictive checked against SciPy."""

import warnings

import arviz as az
import numpy as np
import pytest
from scipy.stats import norm

from bayesord import OrdinalProbit, ProbitConfig, fit_probit
from bayesord.datasets import make_ordinal_probit
from bayesord.diagnostics import compare, laplace_posterior, loo, to_inference_data

N, D, K = 240, 3, 4


@pytest.fixture(scope="module")
def data():
    X, y, _ = make_ordinal_probit(N, D, K, seed=7, w=np.array([1.5, -1.0, 0.0]))
    return X, y


@pytest.fixture(scope="module")
def joint_result(data):
    X, y = data
    return fit_probit(X, (y - 1).astype(np.int32), np.ones(N), 1.0, 1e-10,
                      config=ProbitConfig(thresholds="joint"), n_classes=K)


@pytest.fixture(scope="module")
def model(data):
    X, y = data
    return OrdinalProbit(thresholds="joint", alpha=1.0).fit(X, y)


@pytest.fixture(scope="module")
def idata(model, data):
    X, y = data
    return to_inference_data(model, X, y, key=1)  # 4 chains of 500 draws


def test_groups_dims_and_coords(idata, model):
    assert set(idata.groups()) == {"posterior", "log_likelihood", "posterior_predictive",
                                   "observed_data", "constant_data"}
    post = idata.posterior
    assert post["coef"].dims == ("chain", "draw", "feature")
    assert post["coef"].shape == (4, 500, D)
    assert list(post["thresholds"].coords["cut"].values) == ["1|2", "2|3", "3|4"]
    assert idata.log_likelihood["y"].shape == (4, 500, N)
    assert idata.posterior_predictive["y"].shape == (4, 500, N)
    # Constants are data, not draws: no NaN r_hat or warnings from az.summary.
    assert "alpha" not in post and "sigma" not in post
    np.testing.assert_array_equal(idata.constant_data["alpha"].values, model.alpha_)
    assert idata.constant_data["alpha"].dims == ("feature",)
    np.testing.assert_array_equal(idata.constant_data["sigma"].values, [1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = az.summary(idata)
    assert np.all(np.isfinite(table["r_hat"]))


def test_draws_match_laplace_posterior(idata, model):
    """Draws reproduce the fitted Gaussian: mean and covariance of (w, b) within MC error."""
    w = idata.posterior["coef"].values.reshape(-1, D)
    b = idata.posterior["thresholds"].values.reshape(-1, K - 1)
    sd = np.sqrt(np.diag(model.coef_cov_))
    assert np.all(np.abs(w.mean(0) - model.coef_) < 4 * sd / np.sqrt(2000))
    np.testing.assert_allclose(np.cov(w.T), model.coef_cov_, rtol=0.15, atol=0.1 * sd.max() ** 2)
    # Thresholds are drawn in log-gap space: ordered always, and close to the delta method.
    assert np.all(np.diff(b, axis=1) > 0)
    np.testing.assert_allclose(b.std(0), np.sqrt(np.diag(model.thresholds_cov_)), rtol=0.12)
    np.testing.assert_allclose(np.median(b, 0), model.thresholds_, atol=0.02)


def test_log_likelihood_matches_scipy(idata, data):
    X, y = data
    w = idata.posterior["coef"].values[2, :20]
    b = idata.posterior["thresholds"].values[2, :20]
    edges = np.concatenate([np.full((20, 1), -np.inf), b, np.full((20, 1), np.inf)], axis=1)
    f = w @ X.T  # (20, N)
    hi = np.take_along_axis(edges, np.broadcast_to(y, (20, N)), axis=1)
    lo = np.take_along_axis(edges, np.broadcast_to(y - 1, (20, N)), axis=1)
    ref = np.log(norm.cdf(hi - f) - norm.cdf(lo - f))
    np.testing.assert_allclose(idata.log_likelihood["y"].values[2, :20], ref, rtol=1e-9)
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)


def test_posterior_predictive_frequencies(idata, model, data):
    X, _ = data
    pred = idata.posterior_predictive["y"].values.reshape(-1, N)
    freq = np.stack([(pred == c).mean(0) for c in model.classes_], axis=1)
    # The predictive integrates the weight posterior; draws of 2000 give ~0.011 sd per cell.
    np.testing.assert_allclose(freq, model.predict_proba(X), atol=0.06)


def test_result_and_estimator_agree(joint_result, model, data):
    X, y = data
    a = laplace_posterior(joint_result)
    b = laplace_posterior(model)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(a.cov, b.cov, rtol=1e-8, atol=1e-12)
    idata_r = to_inference_data(joint_result, X, y - 1, key=3)
    assert list(idata_r.posterior["coef"].coords["feature"].values) == ["x0", "x1", "x2"]
    np.testing.assert_array_equal(idata_r.observed_data["y"].values, y - 1)


def test_arviz_functions_run(idata):
    summary = az.summary(idata, var_names=["coef", "thresholds"])
    assert list(summary.index[:2]) == ["coef[x0]", "coef[x1]"]
    assert np.all(np.abs(summary["r_hat"] - 1) < 0.02)
    assert np.all(summary["ess_bulk"] > 1000)  # independent draws: ESS near 2000
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = az.plot_forest(idata, var_names=["coef"], combined=True)
    assert len(axes) == 1
    plt.close("all")


def test_loo_and_compare_rank_the_true_model_first(model, data):
    X, y = data
    # x2 has true weight 0; dropping x0 (weight 1.5) must cost predictive density.  A zero
    # column drops it (its weight stays at the prior) and keeps the shapes, so the
    # compiled fit is reused.
    X_red = X.copy()
    X_red[:, 0] = 0.0
    reduced = OrdinalProbit(thresholds="joint", alpha=1.0).fit(X_red, y)
    res = loo(model, X, y, key=0)
    assert np.all(np.asarray(res.pareto_k) < 0.7)
    # p_loo near the number of parameters (3 weights + 3 thresholds).
    assert 3.5 < res.p_loo < 8.5
    idatas = {"full": to_inference_data(model, X, y, key=0),
              "without x0": to_inference_data(reduced, X_red, y, key=0)}
    table = compare(idatas)
    assert table.index[0] == "full" and table.loc["without x0", "rank"] == 1
    # Brute-force check of elpd_loo for one model: exact leave-one-out refits are too slow
    # for the default run, so check the PSIS value against the plain importance-sampling
    # estimate log(1 / mean_s exp(-loglik_is)) (same draws, no smoothing).
    ll = idatas["full"].log_likelihood["y"].values.reshape(-1, N)
    plain = -np.log(np.mean(np.exp(-ll), axis=0))
    assert abs(table.loc["full", "elpd_loo"] - plain.sum()) < 1.0


def test_loo_surfaces_pareto_k():
    rng = np.random.default_rng(0)
    ll = rng.normal(-1.0, 0.1, size=(2, 200, 30))
    ll[:, :, 0] = -np.exp(rng.normal(0, 3.0, size=(2, 200)))  # one row with a heavy tail
    idata = az.from_dict(log_likelihood={"y": ll}, posterior={"mu": rng.normal(size=(2, 200))})
    with pytest.warns(UserWarning, match=r"1 of 30 rows have Pareto k > 0\.6"):
        loo(idata)


def test_models_without_posterior_raise_type_error(data):
    from sklearn.svm import LinearSVC

    X, y = data
    with pytest.raises(TypeError, match="no posterior.*OrdinalProbit.*ProbitResult"):
        to_inference_data(LinearSVC(), X, y)
    with pytest.raises(TypeError, match="no posterior"):
        compare({"a": LinearSVC(), "b": LinearSVC()}, X, y)


def test_bad_input(model, data):
    X, y = data
    with pytest.raises(ValueError, match="rows"):
        to_inference_data(model, X[:-1], y)
    with pytest.raises(ValueError, match="not among the model's classes"):
        to_inference_data(model, X, y + 10)
    with pytest.raises(ValueError, match="draws"):
        to_inference_data(model, X, y, draws=0)
    with pytest.raises(ValueError, match="X and y"):
        loo(model)


def test_string_labels_become_positions(data):
    X, y = data  # same shapes as the fixtures: the compiled fit is reused
    names = ["none", "low", "mid", "high"]
    labels = np.array(names)[y - 1]
    m = OrdinalProbit(thresholds="joint", alpha=1.0, classes=names).fit(X, labels)
    idata = to_inference_data(m, X, labels)
    np.testing.assert_array_equal(idata.observed_data["y"].values, y - 1)
    assert list(idata.posterior["thresholds"].coords["cut"].values) == [
        "none|low", "low|mid", "mid|high"]
    assert idata.attrs["classes"] == names


def test_relevance_table_and_plots():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bayesord._isbor import Action
    from bayesord.diagnostics import plot_evidence_trace, plot_relevance_vectors, relevance_table

    table = relevance_table([4, 9, 1], [2.0, 0.5, 1.0], [0.1, -3.0, 1.0], [0.2, 0.3, 0.1])
    assert list(table.index) == [9, 1, 4]
    assert table.loc[9, "alpha"] == 0.5 and table.loc[4, "weight_sd"] == 0.2
    with pytest.raises(ValueError, match="one length"):
        relevance_table([1, 2], [1.0], [1.0, 2.0])
    with pytest.raises(TypeError, match="fitted ISBOR"):
        relevance_table([1, 2])
    # Action codes are those of bayesord._isbor.Action; names work too.
    codes = [Action.ADD, Action.ADD, Action.REESTIMATE, Action.DELETE]
    ax = plot_evidence_trace([-10.0, -8.0, -7.5, -7.4], actions=[int(c) for c in codes])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "add (2)", "re-estimate (1)", "delete (1)"]
    # With the initial value first (T = actions + 1), iterations start at 0.
    ax = plot_evidence_trace([-12.0, -10.0, -9.0], actions=["add", "reestimate"])
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), [0, 1, 2])
    np.testing.assert_array_equal(ax.collections[0].get_offsets(), [[1, -10.0]])
    with pytest.raises(ValueError, match="actions must have length"):
        plot_evidence_trace([-1.0, -0.5, -0.2], actions=[1])
    with pytest.raises(ValueError, match="unknown action"):
        plot_evidence_trace([-1.0, -0.5], actions=["grow", "add"])
    X = np.random.default_rng(0).normal(size=(30, 2))
    ax = plot_relevance_vectors(X, np.arange(30) % 3, [0, 5, 7])
    assert ax.get_legend().get_texts()[-1].get_text() == "relevance vectors (3)"
    with pytest.raises(ValueError, match="2-D"):
        plot_relevance_vectors(np.zeros((5, 3)), np.zeros(5), [0])
    plt.close("all")


# ---------------------------------------------------------------- wired to fitted ISBOR
# Same data, shapes and settings as tests/test_isbor_estimator.py, so the compiled solver
# is shared when both files run in one session.


@pytest.fixture(scope="module")
def isbor_fit():
    from test_isbor import tiny_data  # tests/ is on sys.path (pytest prepend import mode)

    from bayesord import ISBOR

    X, y = tiny_data()
    return ISBOR(theta=1.0, capacity=16, max_iter=60, random_state=0).fit(X, y), X, y


def test_relevance_helpers_accept_a_fitted_isbor(isbor_fit):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bayesord.diagnostics import plot_evidence_trace, plot_relevance_vectors, relevance_table

    model, X, y = isbor_fit
    table = relevance_table(model)
    ref = relevance_table(model.relevance_indices_, model.alpha_, model.coef_,
                          np.sqrt(np.diag(model.coef_cov_)))
    assert len(table) == len(model.relevance_indices_)
    np.testing.assert_allclose(table.to_numpy(), ref.to_numpy(), rtol=1e-10)
    assert list(table.index) == list(ref.index)
    # The functional result gives the same table.
    np.testing.assert_allclose(relevance_table(model.result_).to_numpy(), ref.to_numpy(), rtol=1e-10)
    with pytest.raises(TypeError, match="not both"):
        relevance_table(model, [1.0])

    ax = plot_evidence_trace(model)
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), np.arange(model.n_iter_ + 1))
    np.testing.assert_allclose(ax.lines[0].get_ydata(), model.evidence_trace_)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"add ({model.actions_.count('add')})" in labels
    assert sum(int(s.split("(")[1][:-1]) for s in labels) == model.n_iter_

    ax = plot_relevance_vectors(X, y, model)
    circled = ax.collections[-1].get_offsets()
    np.testing.assert_allclose(circled, X[model.relevance_indices_])
    assert len(ax.collections) > 4  # the predicted-class shading is drawn under the points
    plt.close("all")


def test_relevance_vectors_of_a_frame_are_named_by_its_index(isbor_fit, tmp_path):
    """A DataFrame's rows keep their index labels in the summary, the relevance table and
    the model file; the positions stay ``relevance_indices_``."""
    import pandas as pd

    from bayesord import ISBOR, load_model
    from bayesord.diagnostics import relevance_table

    model, X, y = isbor_fit
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])],
                         index=[f"case {i}" for i in range(100, 100 + len(X))])
    named = ISBOR(theta=1.0, capacity=16, max_iter=60, random_state=0).fit(frame, y)
    np.testing.assert_array_equal(named.relevance_indices_, model.relevance_indices_)
    np.testing.assert_array_equal(model.relevance_labels_, model.relevance_indices_)
    expected = frame.index[named.relevance_indices_].to_numpy()
    np.testing.assert_array_equal(named.relevance_labels_, expected)
    assert list(named.summary().index[: len(expected)]) == [f"rv {c}" for c in expected]
    table = relevance_table(named)
    assert set(table["label"]) == set(expected) and "label" not in relevance_table(model).columns
    np.testing.assert_array_equal(table["label"], frame.index[table.index.to_numpy()])
    named.save(tmp_path / "named.npz")
    np.testing.assert_array_equal(load_model(tmp_path / "named.npz").relevance_labels_, expected)


def test_isbor_result_exports_like_the_estimator(isbor_fit):
    model, X, y = isbor_fit
    a = to_inference_data(model, X, y, draws=50, chains=2, key=5)
    b = to_inference_data(model.result_, X, y, draws=50, chains=2, key=5)
    np.testing.assert_allclose(a.log_likelihood["y"].values, b.log_likelihood["y"].values, rtol=1e-12)
    np.testing.assert_array_equal(a.posterior["weights"].coords["relevance_vector"].values,
                                  model.relevance_indices_)
    # Held values are constants; each relevance vector is located in the user's feature units.
    assert set(a.posterior.data_vars) == {"weights", "thresholds"}
    assert set(a.constant_data.data_vars) == {"sigma", "alpha", "location"}
    loc = a.constant_data["location"]
    assert loc.dims == ("relevance_vector", "feature")
    np.testing.assert_allclose(loc.values, X[model.relevance_indices_], rtol=1e-12, atol=1e-12)


def test_loo_handles_rows_with_flat_log_likelihood():
    """Rows every draw predicts with probability ~1 break ArviZ's Pareto fit; loo() gives
    them the plain importance-sampling value, checked against ArviZ on the other rows."""
    rng = np.random.default_rng(1)
    ll = rng.normal(-1.0, 0.3, size=(2, 300, 12))
    ll[:, :, :4] = -np.abs(rng.normal(0, 1e-9, size=(2, 300, 4)))  # p(y_i) ~ 1 in every draw
    post = {"mu": rng.normal(size=(2, 300))}
    res = loo(az.from_dict(log_likelihood={"y": ll}, posterior=post))
    rest = az.loo(az.from_dict(log_likelihood={"y": ll[:, :, 4:]}, posterior=post), pointwise=True)
    flat = ll[:, :, :4].reshape(600, 4)
    plain = -np.log1p(np.mean(np.expm1(-flat), axis=0))  # -log mean exp(-loglik), no cancellation
    np.testing.assert_allclose(np.asarray(res.loo_i)[:4], plain, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(res.loo_i)[4:], np.asarray(rest.loo_i), rtol=1e-12)
    assert res.elpd_loo == pytest.approx(rest.elpd_loo + plain.sum(), rel=1e-12)
    lppd = np.sum(np.log(np.mean(np.exp(ll.reshape(600, 12)), axis=0)))
    assert res.p_loo == pytest.approx(lppd - res.elpd_loo, rel=1e-10)
    np.testing.assert_array_equal(np.asarray(res.pareto_k)[:4], 0.0)
    assert np.isfinite(res.se)


def test_loo_handles_tied_largest_ratios():
    """Half the draws give log-likelihood exactly 0, the rest spread over [-0.05, 0]: the
    largest importance ratios are tied and bounded, so plain importance sampling is the
    reference (PSIS smoothing, or the truncated-IS repair when ArviZ's fit breaks, moves
    it by O(1e-4) at most)."""
    rng = np.random.default_rng(2)
    ll = rng.normal(-1.0, 0.3, size=(2, 300, 6))
    row = -rng.uniform(0, 0.05, size=(2, 300))
    row[:, ::2] = 0.0
    ll[:, :, 0] = row
    res = loo(az.from_dict(log_likelihood={"y": ll}, posterior={"mu": rng.normal(size=(2, 300))}))
    plain = -np.log(np.mean(np.exp(-row)))
    assert np.asarray(res.loo_i)[0] == pytest.approx(plain, rel=1e-3)
    assert np.asarray(res.pareto_k)[0] < 0.5 and np.isfinite(res.elpd_loo)


def test_compare_names_the_model_with_high_pareto_k():
    rng = np.random.default_rng(0)
    post = {"mu": rng.normal(size=(2, 200))}
    good = rng.normal(-1.0, 0.1, size=(2, 200, 30))
    bad = good.copy()
    bad[:, :, 0] = -np.exp(rng.normal(0, 3.0, size=(2, 200)))
    idatas = {"good": az.from_dict(log_likelihood={"y": good}, posterior=post),
              "heavy": az.from_dict(log_likelihood={"y": bad}, posterior=post)}
    with pytest.warns(UserWarning, match=r"heavy: PSIS-LOO: 1 of 30 rows"):
        table = compare(idatas)
    assert table.loc["heavy", "warning"] and not table.loc["good", "warning"]
    assert table.index[0] == "good"
