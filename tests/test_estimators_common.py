"""Behaviour every estimator shares: a refit starts afresh, a failed fit leaves nothing, and
warnings point at the caller's line."""

import json
import re
import warnings

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from bayesord import (
    ISBOR,
    NPSVOR,
    SBOR,
    CuSumRank,
    CumulativeLinkModel,
    OrdinalProbit,
    PRank,
    RedSVM,
    OneClassWarning,
    OrdinalMixed,
    Status,
    SwappedPairsSVM,
    TransductiveOrdinalRegression,
    load_model,
)
from bayesord.datasets import make_ordinal_probit
from bayesord.estimators._base import proba_from_log, warn_if_one_class

X0, Y0, _ = make_ordinal_probit(60, 2, 3, seed=11)

# (estimator, a parameter value its fit refuses)
CASES = [
    (OrdinalProbit(), {"alpha": -1.0}),
    (CumulativeLinkModel(scale=[0]), {"alpha": -1.0}),
    (ISBOR(theta=1.0, capacity=16, max_iter=60, random_state=0), {"theta": -1.0}),
    (SBOR(theta=1.0), {"theta": -1.0}),
    (NPSVOR(random_state=0), {"C": -1.0}),
    (CuSumRank(), {"max_epochs": 0}),
    (PRank(), {"max_epochs": 0}),
    (SwappedPairsSVM(), {"C": -1.0}),
    (RedSVM(), {"C": -1.0}),
    (TransductiveOrdinalRegression(), {"C": -1.0}),
]


# SBOR is left out: its fit is ISBOR's (one estimator class), and its compilation took 20 s.
@pytest.mark.parametrize("est, bad", [(e, b) for e, b in CASES if type(e) is not SBOR],
                         ids=[type(e).__name__ for e, _ in CASES if type(e) is not SBOR])
def test_a_failed_refit_leaves_the_estimator_unfitted(est, bad):
    """Before, a refit that failed kept the old fit, for some estimators beside the new
    refit's ``classes_``, so ``predict`` went on answering with the old model.  (And every
    score but the swapped-pairs SVM's is the weighted MAE of ``predict``.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TOR without unlabeled rows, iteration caps
        est.fit(X0, Y0)
    if type(est) is not SwappedPairsSVM:  # its score is one minus the swapped-pairs rate
        w = np.linspace(0.5, 2.0, len(Y0))  # the shared score: the weighted MAE of predict
        assert est.score(X0, Y0, sample_weight=w) == pytest.approx(-np.average(np.abs(est.predict(X0) - Y0),
                                                                                 weights=w))
    est.set_params(**bad)
    with pytest.raises(ValueError):
        est.fit(X0, Y0 + 10)
    assert not [k for k in vars(est) if k.endswith("_") and not k.startswith("__")]
    with pytest.raises(NotFittedError):
        est.predict(X0[:2])


@pytest.mark.slow
def test_a_refit_drops_what_only_the_earlier_fit_had():
    m = NPSVOR(Cs=(0.1, 1.0), cv=2, random_state=0).fit(X0, Y0)
    assert hasattr(m, "cv_results_") and hasattr(m, "intercept_")
    m.set_params(Cs=None, fit_intercept=False).fit(X0, Y0)
    assert not hasattr(m, "cv_results_") and not hasattr(m, "intercept_")
    s = SwappedPairsSVM().fit(X0, Y0)
    s.set_params(kernel="rbf", gamma=0.5).fit(X0, Y0)
    assert not hasattr(s, "coef_") and hasattr(s, "dual_coef_")


def test_warnings_point_at_the_callers_line():
    with pytest.warns(UserWarning, match="no unlabeled rows") as caught:
        TransductiveOrdinalRegression().fit(X0, Y0)
    assert caught[0].filename == __file__
    with pytest.warns(ConvergenceWarning, match="iteration cap") as caught:
        ISBOR(theta=1.0, capacity=16, max_iter=2, random_state=0).fit(X0, Y0)
    assert caught[0].filename == __file__


@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_a_warning_in_a_script_without_a_file_is_a_warning(how):
    """A `python -c` or stdin script's __main__ has a loader that cannot give its source:
    the library's warnings must still be warnings there (they raised ImportError)."""
    import subprocess
    import sys

    script = ("import numpy as np, bayesord\n"
              "X = np.random.default_rng(0).normal(size=(200, 3))\n"
              "y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)\n"
              "bayesord.OrdinalProbit(max_iter=1).fit(X, y)\n"
              "print('fitted')\n")
    argv, stdin = ([sys.executable, "-c", script], None) if how == "-c" else ([sys.executable, "-"], script)
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "fitted"
    assert "ConvergenceWarning: OrdinalProbit.fit: stopped at the iteration cap" in done.stderr
    assert done.stderr.startswith(("<string>:4:", "<stdin>:4:"))


def _one_class(est, X, *groups):
    return np.full(X.shape[0], est.classes_[1])


@pytest.mark.parametrize("est", [clone(e) for e, _ in CASES if type(e) is not SBOR],
                         ids=[type(e).__name__ for e, _ in CASES if type(e) is not SBOR])
def test_a_fit_that_predicts_one_class_for_every_training_row_warns(est, monkeypatch):
    """No silent degenerate model: every estimator's ``fit`` (each with its own signature)
    checks its predictions on its training rows.  ``predict`` is replaced by one that
    answers the middle class, so the check itself is what is tested here; the real
    degenerate fits are in the next test."""
    monkeypatch.setattr(type(est), "predict", _one_class)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X0, Y0)
    one = [str(w.message) for w in caught if issubclass(w.category, OneClassWarning)]
    assert len(one) == 1, one
    assert one[0].startswith(f"{type(est).__name__} predicts {est.classes_[1]} for every one of its 60 "
                             "training rows, whose labels hold 3 classes")


@pytest.mark.parametrize("seed", range(5))
def test_rows_in_turn_takes_the_classes_in_turn(seed):
    """The one-class check's sample against a plain sort of (rank within class, position)."""
    from bayesord.estimators._base import rows_in_turn

    rng = np.random.default_rng(seed)
    n, K = int(rng.integers(1, 2000)), int(rng.integers(1, 8))
    codes = rng.choice(K, size=n, p=rng.dirichlet(np.full(K, 0.3)))
    rank = np.array([np.sum(codes[:i] == codes[i]) for i in range(n)])
    expected = np.sort(sorted(range(n), key=lambda i: (rank[i], i))[:256])
    np.testing.assert_array_equal(rows_in_turn(codes, K, 256), expected)


def test_the_one_class_check_of_a_mixed_model_predicts_with_the_groups(monkeypatch):
    monkeypatch.setattr(OrdinalMixed, "predict", _one_class)
    with pytest.warns(OneClassWarning, match="OrdinalMixed predicts 2 for every one of its 60"):
        OrdinalMixed().fit(X0, Y0, np.arange(60) % 6)


def test_the_librarys_own_refits_leave_the_one_class_check_to_the_users_fit(monkeypatch):
    """Cross-fitted copies (``calibrate(cv=...)``) and bootstrap draws are refits of a model
    the user has fitted: only that fit is checked (each check costs a prediction program)."""
    est = RedSVM()
    monkeypatch.setattr(RedSVM, "predict", _one_class)
    with pytest.warns(OneClassWarning):
        est.fit(X0, Y0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OneClassWarning)
        est.calibrate(X0, Y0, cv=3, random_state=0)
        est.bootstrap(X0, Y0, n_draws=2, random_state=0)


@pytest.mark.parametrize("slope", [0.3, 0.0])
def test_the_one_class_warning_says_whether_the_probabilities_move(slope):
    """An imbalanced outcome with a real effect (a user's trial: the top class holds 56% of
    the rows, the slope is 12 sds from zero) is most probable everywhere: the warning says
    that the probabilities move, and only a fit without signal is said to have found none."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, size=(2000, 1))
    y = np.digitize(slope * x[:, 0] + rng.normal(size=2000), [-1.5, -0.8, -0.2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        OrdinalProbit().fit(x, y)
    one = [str(w.message) for w in caught if issubclass(w.category, OneClassWarning)]
    assert len(one) == 1 and one[0].startswith("OrdinalProbit predicts 3 for every one of its 2000"), one
    if slope:
        assert re.search(r"though its probabilities move with the columns \(P\(3\) from 0\.3\d to 0\.7\d", one[0])
        assert "no ordinal signal" not in one[0]
    else:
        assert "at these settings it found no ordinal signal" in one[0]


@pytest.mark.parametrize("scale, warns", [(1000.0, True), (1e-3, True), (1.0, False)])
def test_fractional_weights_far_from_the_row_count_warn(scale, warns):
    """Survey weights summed to a population size make a posterior as sure as that many rows
    (a user's trial); fractional weights far from the row count say so, counts never do."""
    w = np.linspace(0.5, 1.5, X0.shape[0]) * scale
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        OrdinalProbit().fit(X0, Y0, sample_weight=w)
        OrdinalProbit().fit(X0, Y0, sample_weight=np.full(X0.shape[0], 500))  # cell counts
    said = [str(c.message) for c in caught if "sample_weight sums to" in str(c.message)]
    assert len(said) == warns, said
    if warns:
        assert said[0].startswith(f"OrdinalProbit: sample_weight sums to {w.sum():.4g} over 60 rows")
        assert "w * n / w.sum()" in said[0]


class _Stub:
    classes_ = np.array([0, 1, 2])
    _one_class_hint = "hint"

    def predict(self, X):
        X = X.toarray() if sp.issparse(X) else np.asarray(X)
        return np.where(X[:, 0] > 0, 2, 1)


class _CountingStub(_Stub):
    """Predicts as :class:`_Stub` and records how many rows each call asked for."""

    def __init__(self):
        self.asked = []

    def predict(self, X):
        self.asked.append(np.asarray(X).shape[0])
        return super().predict(X)


@pytest.mark.parametrize("positive, asked, warns", [
    (np.arange(0, 1000, 4), [256], False),   # spaced rows see both classes: one look, no labels
    ([1], [256, 256], False),                 # only the classes-in-turn look finds row 1's class
    ([], [256, 256, 1000], True),             # one class everywhere: every row predicted
])
def test_the_one_class_check_on_many_rows_looks_at_spaced_rows_first(positive, asked, warns):
    X = -np.ones((1000, 1))
    X[positive, 0] = 1.0
    y = np.zeros(1000, dtype=int)
    y[1] = 2
    y[500:] = 1
    stub = _CountingStub()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_one_class(stub, {"X": X, "y": y})
    assert stub.asked == asked
    assert [issubclass(w.category, OneClassWarning) for w in caught] == ([True] if warns else [])


@pytest.mark.parametrize("args, warns", [
    ({"y": [1, 1, 2, 0]}, False),                                   # two classes predicted
    ({"y": [1, 1, 2, 0], "sample_weight": [1, 1, 0, 1]}, True),     # the 2 has no weight
    ({"y": [1, 1, 2, 0], "unlabeled_mask": [0, 0, 1, 0]}, True),    # the 2 is unlabelled
    ({"y": [1, 1, 2, 1], "sample_weight": [1, 1, 0, 1]}, False),    # one class left: nothing to say
])
def test_the_one_class_check_counts_labelled_rows_of_positive_weight(args, warns):
    X = np.array([[-1.0], [-2.0], [3.0], [-1.0]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_one_class(_Stub(), {"X": X, **args})
    assert [issubclass(w.category, OneClassWarning) for w in caught] == ([True] if warns else [])


@pytest.mark.parametrize("last", [0.0, 1.0])
def test_the_one_class_check_predicts_every_row_before_it_warns(last):
    """Its first look is 256 rows; a row beyond them in another class means no warning."""
    X, y = np.zeros((300, 1)), np.arange(300) % 3
    X[299, 0] = last
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_one_class(_Stub(), {"X": X, "y": y})
    messages = [str(w.message) for w in caught if issubclass(w.category, OneClassWarning)]
    assert len(messages) == (last == 0.0) and all("every one of its 300 training rows" in m for m in messages)


@pytest.mark.parametrize("form", [list, sp.dia_matrix, sp.coo_array])
def test_the_one_class_check_takes_rows_in_every_form_fit_takes(form):
    """Lists and every sparse format (scikit-learn's checks pass DIA and COO), as fit does."""
    X = np.array([[-1.0], [-2.0], [-3.0], [-1.0]])
    with pytest.warns(OneClassWarning, match="predicts 1 for every one of its 4 training rows"):
        warn_if_one_class(_Stub(), {"X": form(X.tolist()) if form is list else form(X), "y": [1, 1, 2, 0]})


def test_a_margin_model_that_finds_no_signal_says_so():
    """A real degenerate fit: labels unrelated to the columns and C = 1e-4, so the margin term
    of RED-SVM outweighs the loss and the fit puts every training row in one class (not
    even the commonest).  On informative columns the default fit does not warn."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(80, 2)), rng.integers(0, 3, 80)
    y[:40] = 1
    with pytest.warns(OneClassWarning, match="RedSVM predicts 2 .* 3 classes.* larger C"):
        RedSVM(C=1e-4).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OneClassWarning)
        RedSVM().fit(X0, Y0)


@pytest.mark.parametrize("make", [lambda: RedSVM(kernel="rbf"), lambda: CuSumRank(kernel="rbf", random_state=0),
                                  lambda: SwappedPairsSVM(kernel="rbf")],
                         ids=["RedSVM", "CuSumRank", "SwappedPairsSVM"])
def test_the_default_kernel_width_follows_the_units_of_the_columns(make):
    """``gamma="scale"``, the default of every RBF margin model: the same columns in units
    1000 times smaller give the same model (the width scales by 1e-6).  An absolute width
    (1/d or 1, the earlier defaults) makes such columns' kernel matrix the identity."""
    a, b = make().fit(X0, Y0), make().fit(X0 * 1000, Y0)
    np.testing.assert_array_equal(a.predict(X0), b.predict(X0 * 1000))
    np.testing.assert_allclose(a.decision_function(X0), b.decision_function(X0 * 1000), rtol=1e-6, atol=1e-8)


# Every estimator, the Bayesian ones (several seconds to 50 s of fits and compilation each in
# the tests below) marked to run with the slow suite.
SLOW_BAYES_CASES = [
    pytest.param(clone(e), id=type(e).__name__,
                 marks=[pytest.mark.slow] if isinstance(e, (OrdinalProbit, CumulativeLinkModel, ISBOR, SBOR)) else [])
    for e, _ in CASES
]


@pytest.mark.parametrize("est", SLOW_BAYES_CASES)
def test_float32_fit_is_as_good_as_float64(est):
    """JAX computes in float32 unless x64 is switched on, and the library never switches it.
    Before, every SwappedPairsSVM fit at its default C ended NONFINITE in float32."""
    X, y = X0, Y0
    est = clone(est)
    if "random_state" in est.get_params():
        est.set_params(random_state=0)  # the same shuffles in both precisions
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TOR without unlabeled rows
        warnings.simplefilter("error", ConvergenceWarning)
        errors64 = np.sum(np.abs(clone(est).fit(X, y).predict(X) - y))
        with jax.enable_x64(False):
            errors32 = np.sum(np.abs(clone(est).fit(X, y).predict(X) - y))
    # Within 0.05 in MAE: 3 class steps over the 60 rows (counted, so that 3/60 is not
    # rounded above 0.05: ISBOR's logit fit, 11 against 14 steps, failed that way)
    assert abs(errors32 - errors64) <= 0.05 * len(y)


# (estimator, fit keyword arguments): every estimator, kernels and CV included.
SAVE_CASES = [
    (NPSVOR(random_state=0), {}),
    (NPSVOR(Cs=(0.1, 1.0), cv=2, random_state=0), {}),
    (CuSumRank(random_state=0), {}),
    (CuSumRank(kernel="rbf", random_state=0), {}),
    (PRank(random_state=0), {}),
    (SwappedPairsSVM(), {}),
    (SwappedPairsSVM(kernel="rbf", gamma=0.5), {}),
    (RedSVM(), {}),
    (RedSVM(kernel="perceptron", n_components=20, random_state=0), {}),
    (TransductiveOrdinalRegression(), {"X_unlabeled": X0[:20] + 0.1}),
]


@pytest.mark.parametrize("est, kw", SAVE_CASES, ids=[f"{type(e).__name__}-{i}" for i, (e, _) in enumerate(SAVE_CASES)])
def test_save_and_load_model_restore_the_fit_exactly(est, kw, tmp_path):
    labels = np.array(["low", "mid", "high"])[Y0 - 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = clone(est).fit(X0, labels, classes=["low", "mid", "high"], **kw)
    path = tmp_path / "model.npz"
    est.save(path)
    back = load_model(path)
    assert type(back) is type(est) and back.get_params() == est.get_params()
    assert list(back.classes_) == ["low", "mid", "high"]
    np.testing.assert_array_equal(back.predict(X0), est.predict(X0))
    np.testing.assert_array_equal(back.decision_function(X0), est.decision_function(X0))
    arrays, meta = est._saved_state()
    arrays_back, meta_back = back._saved_state()
    assert meta_back == meta and arrays_back.keys() == arrays.keys()
    for k in arrays:
        np.testing.assert_array_equal(arrays_back[k], arrays[k])
        assert arrays_back[k].dtype == arrays[k].dtype
    assert type(est).load(path).get_params() == est.get_params()


def test_a_loaded_perceptron_goes_on_learning_from_the_stream(tmp_path):
    first, second = slice(0, 30), slice(30, 60)
    live = CuSumRank(random_state=0).partial_fit(X0[first], Y0[first], classes=[1, 2, 3])
    live.save(tmp_path / "stream.npz")
    back = load_model(tmp_path / "stream.npz")
    live.partial_fit(X0[second], Y0[second])
    back.partial_fit(X0[second], Y0[second])
    np.testing.assert_array_equal(back.decision_function(X0), live.decision_function(X0))
    assert back.n_steps_ == live.n_steps_ == 60


def test_a_model_file_is_read_only_by_its_class_and_never_by_pickle(tmp_path):
    est = RedSVM().fit(X0, Y0)
    est.save(tmp_path / "m.npz")
    with pytest.raises(ValueError, match="bayesord.RedSVM/2"):
        CuSumRank.load(tmp_path / "m.npz")
    # A file of the same class written by another version says so.
    with np.load(tmp_path / "m.npz") as data:
        arrays = dict(data)
    meta = json.loads(bytes(arrays["meta"]).decode())
    meta["format"] = "bayesord.RedSVM/1"
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(tmp_path / "old.npz", **arrays)
    with pytest.raises(ValueError, match="another version of bayesord.*fit the model again"):
        RedSVM.load(tmp_path / "old.npz")
    est.extra_ = object()
    with pytest.raises(TypeError, match="extra_"):
        est.save(tmp_path / "other.npz")


@pytest.mark.parametrize("est", SLOW_BAYES_CASES)
def test_the_label_order_goes_to_the_constructor_or_to_fit(est):
    """Every estimator takes ``classes`` in the constructor (so that string labels work in
    scikit-learn's cross-validation, which clones and passes no fit arguments) and in
    ``fit``; both give the same model, and two that disagree are refused."""
    order = ["low", "mid", "high"]
    labels = np.array(order)[Y0 - 1]
    est = clone(est)
    if "random_state" in est.get_params():
        est.set_params(random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TOR without unlabeled rows
        by_fit = clone(est).fit(X0, labels, classes=order)
        by_constructor = clone(est).set_params(classes=order).fit(X0, labels)
        assert list(by_constructor.classes_) == order
        np.testing.assert_array_equal(by_constructor.predict(X0), by_fit.predict(X0))
        with pytest.raises(ValueError, match="passed to fit differs"):
            clone(est).set_params(classes=order[::-1]).fit(X0, labels, classes=order)
        with pytest.raises(ValueError, match="order"):
            clone(est).fit(X0, labels)  # strings are never sorted alphabetically


def test_string_labels_cross_validate_with_the_order_in_the_constructor():
    from sklearn.model_selection import cross_val_score

    labels = np.array(["low", "mid", "high"])[Y0 - 1]
    scores = cross_val_score(PRank(classes=["low", "mid", "high"], random_state=0), X0, labels, cv=3)
    assert scores.shape == (3,) and np.all(scores <= 0)  # score is minus the MAE


@pytest.mark.parametrize("est", [e for e, _ in CASES] + [OrdinalMixed()], ids=lambda e: type(e).__name__)
def test_scikit_learn_sees_every_estimator_as_a_classifier(est):
    from sklearn.base import is_classifier

    assert is_classifier(est)


def test_the_estimator_protocol_without_scikit_learns_base_class():
    """The estimators keep scikit-learn's protocol themselves (ParamsMixin); what its
    pipelines and searches use of it, checked against scikit-learn's own functions here
    (its full estimator checks are in test_sklearn_checks.py, slow)."""
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = OrdinalProbit(alpha=2.0, thresholds="joint")
    assert repr(model) == "OrdinalProbit(alpha=2.0, thresholds='joint')" and repr(OrdinalProbit()) == "OrdinalProbit()"
    copy = clone(model)
    assert copy is not model and copy.get_params() == model.get_params()
    pipe = make_pipeline(StandardScaler(), model)
    assert pipe.get_params()["ordinalprobit__alpha"] == 2.0
    pipe.set_params(ordinalprobit__alpha=0.5)
    assert model.alpha == 0.5
    with pytest.raises(ValueError, match="Invalid parameter 'bogus' for estimator OrdinalProbit"):
        model.set_params(bogus=1)
    search = GridSearchCV(pipe, {"ordinalprobit__alpha": [0.5, 4.0]}, cv=3).fit(X0, Y0)
    assert search.best_estimator_[-1].alpha in (0.5, 4.0) and search.predict(X0).shape == Y0.shape
    with pytest.raises(NotFittedError, match="not fitted yet"):
        OrdinalProbit().predict(X0)
    with pytest.warns(ConvergenceWarning):
        NPSVOR(max_iter=1).fit(X0, Y0)


def test_metadata_routing_passes_the_weights_a_model_asks_for():
    """scikit-learn's opt-in metadata routing: ``set_fit_request(sample_weight=True)`` makes
    a grid search pass the weights to every fit (the refit equals a weighted fit, not the
    unweighted one); without the request the search refuses them; clones keep requests."""
    import sklearn
    from sklearn.model_selection import GridSearchCV

    weights = np.where(np.arange(len(Y0)) % 3 == 0, 0.0, 1.0)
    with sklearn.config_context(enable_metadata_routing=True):
        model = (OrdinalProbit(thresholds="joint").set_fit_request(sample_weight=True, classes=False)
                 .set_score_request(sample_weight=False))
        assert clone(model).get_metadata_routing().fit.requests == {"sample_weight": True, "classes": False}
        search = GridSearchCV(model, {"alpha": [0.5, 2.0]}, cv=3).fit(X0, Y0, sample_weight=weights)
        alpha = search.best_params_["alpha"]
        weighted = OrdinalProbit(thresholds="joint", alpha=alpha).fit(X0, Y0, sample_weight=weights)
        plain = OrdinalProbit(thresholds="joint", alpha=alpha).fit(X0, Y0)
        np.testing.assert_allclose(search.best_estimator_.coef_, weighted.coef_, rtol=1e-8)
        assert not np.allclose(search.best_estimator_.coef_, plain.coef_, rtol=1e-3)
        with pytest.raises(Exception, match="sample_weight.*not explicitly set as requested"):
            GridSearchCV(OrdinalProbit(), {"alpha": [0.5, 2.0]}, cv=3).fit(X0, Y0, sample_weight=weights)
        with pytest.raises(TypeError, match="Unexpected args: \\['bogus'\\] in fit"):
            OrdinalProbit().set_fit_request(bogus=True)
    assert not hasattr(OrdinalProbit(), "set_partial_fit_request") and hasattr(CuSumRank(), "set_partial_fit_request")


def test_cross_validation_of_rows_sorted_by_label_splits_by_class():
    """A file sorted by its label, as many are: scikit-learn's plain KFold, used for an
    estimator it did not see as a classifier, tested each fold on classes its training part
    lacked (OrdinalProbit's 3-fold MAE on winequality_red sorted by quality: 0.91, 0.45,
    0.93).  As a classifier the folds are stratified, as LogisticRegression's are."""
    from sklearn.model_selection import cross_val_score

    X, y, _ = make_ordinal_probit(300, 3, 4, seed=3)
    order = np.argsort(y, kind="stable")
    est = OrdinalProbit(thresholds="joint", alpha=1.0)
    sorted_scores = cross_val_score(est, X[order], y[order], cv=3)
    shuffled_scores = cross_val_score(est, X, y, cv=3)
    assert abs(sorted_scores.mean() - shuffled_scores.mean()) < 0.1, (sorted_scores, shuffled_scores)


def test_a_continuous_target_is_fitted_with_a_warning_that_says_how_to_cut_it():
    """A regression target passed as labels: 60 raw values made a 60-class model silently."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = X @ [1.0, 2.0] + rng.normal(size=60)
    with pytest.warns(UserWarning, match=r"y has 60 classes among 60 rows, 60 of them with a single row: "
                                         r"is it a continuous target\?.*equal_frequency_bins"):
        OrdinalProbit(thresholds="joint", alpha=1.0).fit(X, y)
    many = np.repeat(np.arange(40), 3)  # 40 ordered classes, three rows each: an ordinal scale
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OrdinalProbit(thresholds="joint", alpha=1.0).fit(rng.normal(size=(120, 2)) + many[:, None] / 10, many)
        # nor does a stream's first batch, which holds few rows of many declared classes
        CuSumRank(random_state=0).partial_fit(X[:40], many[:40], classes=np.arange(40))
        # nor the ranking SVM, whose use is ranking a continuous target by its order relations
        SwappedPairsSVM(random_state=0).fit(X, y)


def test_a_perceptron_stream_can_take_its_classes_from_the_constructor():
    stream = CuSumRank(classes=[1, 2, 3], random_state=0).partial_fit(X0[:30], Y0[:30])
    reference = CuSumRank(random_state=0).partial_fit(X0[:30], Y0[:30], classes=[1, 2, 3])
    np.testing.assert_array_equal(stream.decision_function(X0), reference.decision_function(X0))
    with pytest.raises(ValueError, match="first call to partial_fit needs classes"):
        CuSumRank().partial_fit(X0[:30], Y0[:30])


@pytest.mark.parametrize("est", [clone(e) for e, _ in CASES], ids=[type(e).__name__ for e, _ in CASES])
def test_fit_refuses_a_declared_class_without_training_rows(est):
    """One rule for every estimator (before, PRank, CuSumRank and SwappedPairsSVM accepted it
    silently): a model cannot place a class it has never seen; only partial_fit may declare
    classes the stream has not shown yet."""
    with pytest.raises(ValueError, match=r"classes \[4\] have no training samples"):
        est.fit(X0, Y0, classes=[1, 2, 3, 4])
    with pytest.raises(ValueError, match=r"classes \['top'\] have no training samples"):
        clone(est).set_params(classes=["low", "mid", "high", "top"]).fit(
            X0, np.array(["low", "mid", "high"])[Y0 - 1])


def _saved(tmp_path, est):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TOR without unlabeled rows
        est.fit(X0, Y0)
    path = tmp_path / "m.npz"
    est.save(path)
    return path


def _rewrite(path, arrays=None, **meta_changes):
    """Save ``path`` again with ``meta_changes`` in its metadata and ``arrays`` replaced."""
    import json

    with np.load(path) as data:
        entries = {k: data[k] for k in data.files}
    meta = json.loads(bytes(entries.pop("meta")).decode())
    meta.update(meta_changes)
    entries.update(arrays or {})
    np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **entries)


# SBOR shares ISBOR's code paths here and its fit is long, so its cases run with `slow`.
@pytest.mark.parametrize("est", [pytest.param(clone(e), marks=pytest.mark.slow) if type(e) is SBOR else clone(e)
                                 for e, _ in CASES], ids=[type(e).__name__ for e, _ in CASES])
def test_a_model_file_whose_metadata_disagrees_with_its_arrays_is_refused(tmp_path, est):
    """Before, n_features_in edited from 2 to 5 loaded, and predict failed inside JAX."""
    path = _saved(tmp_path, est)
    load_model(path)
    _rewrite(path, n_features_in=5)
    with pytest.raises(ValueError, match=r"m\.npz does not hold a consistent .*5 features"):
        load_model(path)
    path = _saved(tmp_path, clone(est))
    _rewrite(path, classes=[1, 2, 3, 4])
    with pytest.raises(ValueError, match="4 classes"):
        load_model(path)


@pytest.mark.parametrize("est, array", [(OrdinalProbit(), "result.center"),
                                        (ISBOR(theta=1.0, capacity=16, max_iter=60, random_state=0),
                                         "result.thresholds_cov")],
                         ids=["OrdinalProbit", "ISBOR"])
def test_a_bayesian_model_file_with_a_posterior_array_of_the_wrong_shape_is_refused(tmp_path, est, array):
    path = _saved(tmp_path, est)
    with np.load(path) as data:
        wrong = np.concatenate([data[array], data[array][:1]])
    _rewrite(path, arrays={array: wrong})
    with pytest.raises(ValueError, match=rf"m\.npz does not hold a consistent .*{array}"):
        load_model(path)


def test_a_damaged_model_file_is_one_value_error_naming_it(tmp_path):
    path = _saved(tmp_path, PRank(random_state=0))
    raw = path.read_bytes()
    damaged = {
        "flipped": raw[:200] + bytes([raw[200] ^ 0xFF]) + raw[201:],
        "truncated": raw[: len(raw) // 2],
        "text": b"grade,a\n1,2\n",
        "empty": b"",
    }
    for kind, content in damaged.items():
        path.write_bytes(content)
        with pytest.raises(ValueError, match=r"m\.npz (is damaged|is not a model)") as err:
            load_model(path)
        assert "\n" not in str(err.value), kind
    np.savez(path, a=np.zeros(2))
    with pytest.raises(ValueError, match="no 'meta' entry"):
        load_model(path)
    path = _saved(tmp_path, PRank(random_state=0))
    _rewrite(path, arrays={"state.coef_": np.zeros(3)})  # a 1-D weight of the wrong length
    with pytest.raises(ValueError, match="coef_ has shape"):
        load_model(path)


# The estimators whose fit draws random numbers (orders, shuffles, landmarks, subsets).
RANDOM_FITS = [NPSVOR(), CuSumRank(max_epochs=3), RedSVM(),
               SwappedPairsSVM(kernel="rbf", kernel_approx="nystroem", n_components=20)]


@pytest.mark.parametrize("est", RANDOM_FITS, ids=[type(e).__name__ for e in RANDOM_FITS])
def test_random_state_has_one_meaning(est):
    """None is the seed 0 and an int a seed, for every estimator: two fits with None agree
    with each other and with random_state=0; a Generator is accepted; anything else is a
    ValueError naming random_state.  (Before, None meant seed 0 for RED-SVM, a fresh seed for
    the perceptrons and NumPy's global generator for NPSVOR and the swapped-pairs SVM.)"""
    scores = [np.asarray(clone(est).set_params(random_state=rs).fit(X0, Y0).decision_function(X0))
              for rs in (None, None, 0)]
    np.testing.assert_array_equal(scores[0], scores[1])
    np.testing.assert_array_equal(scores[0], scores[2])
    clone(est).set_params(random_state=np.random.default_rng(1)).fit(X0, Y0)
    with pytest.raises(ValueError, match="random_state"):
        clone(est).set_params(random_state="zero").fit(X0, Y0)


@pytest.mark.parametrize("est", [clone(e) for e, _ in CASES if type(e) is not SBOR],
                         ids=[type(e).__name__ for e, _ in CASES if type(e) is not SBOR])
def test_every_estimator_reports_status_and_keeps_its_result(est, tmp_path):
    """``status_`` (and ``noise_``, where the model has a noise scale) come from the one
    estimator base, read from the functional result every estimator keeps as ``result_``,
    also after saving and loading."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TOR without unlabeled rows, iteration caps
        est.fit(X0, Y0)
    est.save(tmp_path / "m.npz")
    np.testing.assert_array_equal(load_model(tmp_path / "m.npz").status_, est.status_)
    status = np.asarray(est.status_)
    assert np.array_equal(status, np.asarray(est.result_.status))
    assert status.dtype.kind == "i" and set(np.ravel(status)) <= {int(s) for s in Status}
    has_noise = hasattr(est.result_, "sigma")
    assert hasattr(est, "noise_") == has_noise
    if has_noise:
        assert est.noise_ == float(np.asarray(est.result_.sigma)) > 0


def test_probabilities_from_float32_logs_keep_their_tails():
    # Rows of float32 log-probabilities, one of them far below float32's smallest number
    # once exponentiated: float64 probabilities, each row summing to 1 to float64 rounding,
    # every class positive, each probability its log's exp to float32 accuracy.
    p = np.array([[0.5, 0.5 - 1e-60, 1e-60], [1e-3, 0.998, 1e-3], [1 / 3, 1 / 3, 1 / 3]])
    log_p = np.log(p).astype(np.float32)
    assert np.exp(log_p)[0, 2] == 0
    out = proba_from_log(log_p)
    assert out.dtype == np.float64 and np.all(out > 0)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-15)
    np.testing.assert_allclose(out, p, rtol=1e-5)
