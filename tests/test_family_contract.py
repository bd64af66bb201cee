"""The contract every model family keeps (docs/architecture.md): a result that carries its
static config, a public ``predict_<family>(result, X)`` that needs no setting passed again,
one shared prediction interface (``labels``, ``scores``, ``proba``), and results that
survive ``save_result`` / ``load_result`` bit for bit.

Each family's labels are checked against the rule written out in NumPy from the result's
own arrays (an independent reference), and the loaded result must predict the same labels
and scores as the fitted one.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import bayesord
from bayesord._sparse import to_padded_rows
from bayesord._status import Status, check_status

RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 3))
Y = np.digitize(X @ np.array([1.0, -0.7, 0.4]) + 0.3 * RNG.normal(size=60), [-0.8, 0.8]).astype(np.int32)
XT = RNG.normal(size=(9, 3))


def _npsvor(y=Y):
    res = bayesord.fit_npsvor(to_padded_rows(X, bias=1.0), y, 3, 1.0, 1.0, 0.1, 0.1, jax.random.key(0),
                              bayesord.NPSVORConfig(n_features=4, predictor="old"))
    F = np.c_[XT, np.ones(len(XT))] @ np.asarray(res.coef).T
    return res, to_padded_rows(XT, bias=1.0), np.argmin(np.abs(F), axis=1), F  # r_old, Eq. (5)


def _perceptron(y=Y):
    cfg = bayesord.PerceptronConfig(n_classes=3, n_epochs=5, shuffle=False)
    res = bayesord.fit_perceptron(X, y, cfg)
    inc = XT @ np.asarray(res.coef).T - np.asarray(res.thresholds)
    inc[:, 0] = 0.0
    S = np.cumsum(inc, axis=1)
    return res, XT, S.shape[1] - 1 - np.argmax(S[:, ::-1], axis=1), S  # ties to the higher rank


def _kernel_perceptron(y=Y):
    cfg = bayesord.PerceptronConfig(n_classes=3, n_epochs=3, shuffle=False, kernel="poly")
    res = bayesord.fit_kernel_perceptron(X, y, cfg, hyper=bayesord.make_hyper(gamma=0.5, coef0=2.0, degree=2.0))
    K = (0.5 * XT @ X.T + 2.0) ** 2
    inc = K @ np.asarray(res.dual_coef) - np.asarray(res.thresholds)
    inc[:, 0] = 0.0
    S = np.cumsum(inc, axis=1)
    return res, XT, S.shape[1] - 1 - np.argmax(S[:, ::-1], axis=1), S


def _rankpairs_linear(y=Y):
    res = bayesord.fit_rankpairs_linear(jnp.asarray(X), y, jnp.ones(60), 1.0, 1e-3,
                                        bayesord.RankPairsConfig(n_ranks=3))
    f = XT @ np.asarray(res.coef)
    return res, XT, np.searchsorted(np.asarray(res.thresholds), f, side="right"), f


def _rankpairs_kernel(y=Y):
    res = bayesord.fit_rankpairs_kernel(jnp.asarray(X), y, jnp.ones(60), 1.0, 0.3, 1e-3,
                                        bayesord.RankPairsConfig(n_ranks=3))
    f = np.exp(-0.3 * ((XT[:, None] - X[None]) ** 2).sum(-1)) @ np.asarray(res.coef)
    return res, XT, np.searchsorted(np.asarray(res.thresholds), f, side="right"), f


def _redsvm(y=Y):
    res = bayesord.fit_redsvm(X, y, np.ones(60), bayesord.RedSVMConfig(n_classes=3, loss="squared_hinge"))
    h = XT @ np.asarray(res.w)
    return res, XT, (h[:, None] > np.asarray(res.theta) + float(res.b)).sum(1), h  # Eq. (3)


def _tor(y=Y):
    unl = np.arange(60) >= 40
    res = bayesord.fit_tor(X, y, unl, bayesord.TORConfig(n_classes=3), C1=1.0, c2_init=0.1)
    h = XT @ np.asarray(res.w)
    return res, XT, (h[:, None] > np.asarray(res.theta) + float(res.b)).sum(1), h


MARGIN = {"npsvor": _npsvor, "perceptron": _perceptron, "kernel_perceptron": _kernel_perceptron,
          "rankpairs_linear": _rankpairs_linear, "rankpairs_kernel": _rankpairs_kernel,
          "redsvm": _redsvm, "tor": _tor}
PREDICT = {"npsvor": "predict_npsvor", "perceptron": "predict_perceptron",
           "kernel_perceptron": "predict_perceptron", "rankpairs_linear": "predict_rankpairs",
           "rankpairs_kernel": "predict_rankpairs", "redsvm": "predict_redsvm", "tor": "predict_tor"}


@pytest.mark.parametrize("family", sorted(MARGIN))
def test_margin_family_predicts_from_the_result_alone_and_round_trips(family, tmp_path):
    res, Xt, labels, scores = MARGIN[family]()
    predict = getattr(bayesord, PREDICT[family])
    assert dataclasses.is_dataclass(res.config) and res.config.n_classes == 3
    pred = predict(res, Xt)
    assert isinstance(pred, bayesord.Prediction) and pred.proba is None
    assert pred.labels.dtype == jnp.int32
    np.testing.assert_array_equal(pred.labels, labels)
    np.testing.assert_allclose(pred.scores, scores, rtol=1e-5, atol=1e-5)

    path = tmp_path / "fit.npz"
    bayesord.save_result(path, res)
    loaded = bayesord.load_result(path)
    assert type(loaded) is type(res) and loaded.config == res.config
    for name in res._fields:
        a, b = getattr(res, name), getattr(loaded, name)
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
            np.testing.assert_array_equal(np.asarray(x), y)
    again = predict(loaded, Xt)
    np.testing.assert_array_equal(again.labels, pred.labels)
    np.testing.assert_array_equal(again.scores, pred.scores)


def _probit(y=Y):
    res = bayesord.fit_probit(X, y, np.ones(60), 1.0, 1e-6, config=bayesord.ProbitConfig(link="logit"),
                              n_classes=3)
    return res, lambda r: bayesord.predict_probit(r, XT)


def _isbor(y=Y):
    cfg = bayesord.ISBORConfig(n_classes=3, capacity=10, max_iter=30)
    res = bayesord.fit_isbor(X, y, np.ones(60), np.arange(60), np.ones(60, bool), jax.random.PRNGKey(0), 0.5,
                             config=cfg)
    return res, lambda r: bayesord.predict_isbor(r, XT)


def _mixed(y=Y):
    g = np.arange(60) % 6
    res = bayesord.fit_mixed(X, y, g, np.ones(60), 1e-8, config=bayesord.MixedConfig(n_classes=3, n_groups=6))
    return res, lambda r: bayesord.predict_mixed(r, XT, np.arange(9) % 6)


def _clm(y=Y):
    res = bayesord.fit_clm(X, y, np.ones(60), 1e-8, bayesord.clm_columns(location=[0, 1, 2], scale=[2]),
                           config=bayesord.CLMConfig(n_classes=3, link="cloglog"))
    return res, lambda r: bayesord.predict_clm(r, XT)


BAYES = {"probit": _probit, "isbor": _isbor, "mixed": _mixed, "clm": _clm}


@pytest.mark.parametrize("family", sorted(BAYES))
def test_bayesian_family_shares_the_prediction_interface_and_round_trips(family, tmp_path):
    res, predict = BAYES[family]()
    pred = predict(res)
    proba = np.asarray(pred.proba)
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(pred.labels, proba.argmax(1))
    assert np.asarray(pred.scores).shape[0] == len(XT)

    path = tmp_path / "fit.npz"
    bayesord.save_result(path, res)
    loaded = bayesord.load_result(path)
    assert type(loaded) is type(res) and loaded.config == res.config
    again = predict(loaded)
    np.testing.assert_array_equal(np.asarray(again.proba), proba)
    np.testing.assert_array_equal(again.labels, pred.labels)


def test_score_thresholds_match_a_numpy_reference():
    """The swapped-pairs cut-points (in the jitted fit) against the rule written in NumPy,
    with unequal and zero weights and tied scores."""
    from bayesord._rankpairs import score_thresholds

    rng = np.random.default_rng(3)
    scores = np.round(rng.normal(size=80), 1)
    codes = rng.integers(0, 4, size=80)
    weights = rng.choice([0.0, 0.5, 1.0, 2.0], size=80)

    keep = weights > 0
    order = np.argsort(scores[keep], kind="stable")
    s, w = scores[keep][order], weights[keep][order]
    cum = np.cumsum(w) / w.sum()
    share = np.cumsum(np.bincount(codes[keep], weights=weights[keep], minlength=4))[:-1] / w.sum()
    idx = np.clip(np.searchsorted(cum, share - 1e-12), 0, len(s) - 1)
    ref = 0.5 * (s[idx] + s[np.minimum(idx + 1, len(s) - 1)])

    got = score_thresholds(jnp.asarray(scores), jnp.asarray(codes), jnp.asarray(weights), 4)
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_predict_checks_the_rows_against_the_fit():
    res, *_ = _redsvm()
    with pytest.raises(ValueError, match="columns"):
        bayesord.predict_redsvm(res, XT[:, :2])
    res, *_ = _npsvor()
    with pytest.raises(ValueError, match="bias column"):
        bayesord.predict_npsvor(res, to_padded_rows(XT))  # built without the fit's bias column
    res, *_ = _rankpairs_linear()
    with pytest.raises(ValueError, match="columns"):
        bayesord.predict_rankpairs(res, XT[:, :1])


def test_sparse_rows_predict_as_dense_rows():
    res, _, labels, scores = _redsvm()
    pred = bayesord.predict_redsvm(res, to_padded_rows(sp.csr_matrix(XT)))
    np.testing.assert_array_equal(pred.labels, labels)
    np.testing.assert_allclose(pred.scores, scores, rtol=1e-5, atol=1e-5)


def test_a_config_with_numpy_numbers_round_trips(tmp_path):
    """Settings given as NumPy scalars (as code that reads them from arrays does) are saved
    as plain numbers, and the loaded config equals the fitted one."""
    cfg = bayesord.RedSVMConfig(n_classes=np.int64(3), max_epochs=np.int32(50))
    res = bayesord.fit_redsvm(X, Y, np.ones(60), cfg)
    bayesord.save_result(tmp_path / "fit.npz", res)
    assert bayesord.load_result(tmp_path / "fit.npz").config == cfg


def test_save_result_refuses_what_is_not_a_result(tmp_path):
    with pytest.raises(TypeError, match="fit_<family>"):
        bayesord.save_result(tmp_path / "x.npz", {"coef": np.ones(3)})
    np.savez(tmp_path / "other.npz", a=np.ones(2))
    with pytest.raises(ValueError, match="not a saved result"):
        bayesord.load_result(tmp_path / "other.npz")
    with pytest.raises(FileNotFoundError):
        bayesord.load_result(tmp_path / "missing.npz")


def test_estimators_predict_through_the_family_functions(tmp_path):
    """An estimator's ``result_`` is the functional result: ``predict_<family>`` on it (with
    the rows as the estimator builds them) gives the estimator's own codes, also after the
    estimator is saved and loaded."""
    est = bayesord.NPSVOR(random_state=0, fit_intercept=True).fit(X, Y)
    path = tmp_path / "m.npz"
    est.save(path)
    loaded = bayesord.load_model(path)
    rows = loaded._ell(loaded._validate_predict(XT))
    np.testing.assert_array_equal(np.asarray(bayesord.predict_npsvor(loaded.result_, rows).labels),
                                  np.searchsorted(est.classes_, est.predict(XT)))
    np.testing.assert_array_equal(loaded.dual_coef_, est.dual_coef_)


@pytest.mark.slow  # a fit of every family: 17 s of compiling
def test_every_result_names_its_iterations_status_coefficients_and_thresholds_alike():
    """``n_iter``, ``converged``, ``status`` and ``coef`` on every family's result, and
    ``thresholds`` wherever the model has thresholds (ISBOR's are its ``b``, RED-SVM's and
    TOR's the effective ``theta + b``)."""
    results = {name: make()[0] for name, make in {**MARGIN, **BAYES}.items()}
    for name, res in results.items():
        for field in ("n_iter", "converged", "status"):
            assert field in res._fields, (name, field)
        if name != "kernel_perceptron":  # its coefficients are dual (dual_coef)
            assert np.asarray(res.coef).ndim >= 1, name
        if name != "npsvor":  # p hyperplanes, no thresholds
            # K - 1 = 2 cut-points; the perceptrons keep r = 3, the first the sentinel b_1 = 0.
            expected = 3 if "perceptron" in name else 2
            assert np.asarray(res.thresholds).shape[-1] == expected, name
    np.testing.assert_array_equal(results["isbor"].thresholds, results["isbor"].b)
    red = results["redsvm"]
    np.testing.assert_allclose(red.thresholds, np.asarray(red.theta) + float(red.b))


def test_final_status_orders_the_outcomes_by_severity():
    """The one final-status helper every solver ends with, over every combination (arrays,
    as a batch of fits gives): a non-finite value first, then a failure code, then the
    convergence flag."""
    from itertools import product

    from bayesord._status import Status, final_status

    cases = list(product([True, False], [True, False], [Status.SUCCESS, Status.NOT_POSITIVE_DEFINITE,
                                                         Status.CAPACITY_REACHED]))
    conv, finite, failure = (np.array(v) for v in zip(*cases))
    got = np.asarray(final_status(conv, finite=finite, failure=failure))
    for (c, f, fail), g in zip(cases, got):
        expected = Status.NONFINITE if not f else fail if fail != Status.SUCCESS else (
            Status.SUCCESS if c else Status.MAX_ITER)
        assert g == expected, (c, f, fail)
    assert got.dtype == np.int32
    assert int(final_status(False)) == Status.MAX_ITER


FAMILIES = {**MARGIN, **BAYES}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_fit_given_labels_for_codes_says_so(family):
    """The functional fits take codes 0..K-1; labels 1..K passed for them (one class past
    the end, which JAX's scatters drop without a word) end with INVALID_CODES, unconverged,
    and the host check turns that into a ValueError."""
    assert Status.INVALID_CODES not in np.ravel(FAMILIES[family]()[0].status)
    res = FAMILIES[family](Y + 1)[0]
    assert set(np.ravel(res.status)) == {Status.INVALID_CODES}
    assert not np.any(res.converged)
    with pytest.raises(ValueError, match="codes, not labels"):
        check_status(res.status, family)


@pytest.mark.parametrize("family", ["probit", "npsvor"])
def test_a_fit_given_fractional_or_negative_codes_says_so(family):
    for y in (Y + 0.5, Y - 1):
        assert set(np.ravel(FAMILIES[family](y)[0].status)) == {Status.INVALID_CODES}


def test_transductive_codes_of_unlabeled_rows_are_ignored():
    unl = np.arange(60) >= 40
    res, *_ = _tor(np.where(unl, -1, Y))
    assert int(res.status) != Status.INVALID_CODES


def test_fits_refuse_weights_labels_and_widths_that_do_not_match_the_rows():
    cfg = bayesord.PerceptronConfig(n_classes=3, n_epochs=2, shuffle=False)
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(60,\)"):
        bayesord.fit_perceptron(X, Y, cfg, sample_weight=np.ones(59))
    with pytest.raises(ValueError, match=r"y must have shape \(60,\)"):
        bayesord.fit_perceptron(X, Y[:50], cfg)
    with pytest.raises(ValueError, match=r"y must have shape \(60,\)"):
        bayesord.fit_kernel_perceptron(X, Y[:50], dataclasses.replace(cfg, kernel="rbf"))
    rows = to_padded_rows(X, bias=1.0)
    with pytest.raises(ValueError, match="config.n_features=3 but X has 4 columns"):
        bayesord.fit_npsvor(rows, Y, 3, 1.0, 1.0, 0.1, 0.1, jax.random.key(0), bayesord.NPSVORConfig(n_features=3))
    with pytest.raises(ValueError, match=r"codes must have shape \(60,\)"):
        bayesord.fit_npsvor(rows, Y[:5], 3, 1.0, 1.0, 0.1, 0.1, jax.random.key(0), bayesord.NPSVORConfig(n_features=4))
