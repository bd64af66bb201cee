"""TOR (bayesord._tor, TransductiveOrdinalRegression): Algorithms 1-3, Proposition 2, bad input."""

import jax
import numpy as np
import jax.numpy as jnp
import pytest
import scipy.sparse as sp

from bayesord._sparse import to_padded_rows
from bayesord._status import Status
from bayesord._tor import TORConfig, _swap_round, fit_tor, init_pseudo_labels
from bayesord.datasets import make_tor_synthetic
from bayesord.estimators._tor import RedSVM, TransductiveOrdinalRegression


def np_loss(m, loss):
    return {"hinge": np.maximum(0, 1 - m), "squared_hinge": np.maximum(0, 1 - m) ** 2,
            "logistic": np.logaddexp(0, -m), "square": (1 - m) ** 2, "laplacian": np.abs(1 - m)}[loss]


def np_objective(X, labels, c, w, theta, b, loss):
    """Eq. (10) written independently in NumPy."""
    K = len(theta) + 1
    S = np.where(labels[:, None] > np.arange(K - 1)[None, :], 1.0, -1.0)
    g = (X @ w)[:, None] - theta[None, :] - b
    return 0.5 * w @ w + 0.5 * theta @ theta + np.sum(c[:, None] * np_loss(S * g, loss))


def blobs(seed=0, n=90, K=3, d=2):
    """Well separated ordinal clusters along one direction (the cluster assumption holds)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    X = np.column_stack([2.5 * y + 0.6 * rng.normal(size=n), rng.normal(size=(n, d - 1))])
    return X, y


# ----------------------------------------------------------------- Algorithm 2


@pytest.mark.parametrize("given", [None, (0.1, 0.0, 0.55, 0.35)])
def test_pseudo_labels_follow_ratios_and_order(given):
    rng = np.random.default_rng(0)
    n, K = 57, 4
    unl = rng.random(n) < 0.7
    codes = rng.integers(0, K, n)
    h = rng.normal(size=n)
    out = np.asarray(init_pseudo_labels(jnp.asarray(h), jnp.asarray(unl), jnp.asarray(codes), K,
                                        None if given is None else jnp.asarray(given)))
    np.testing.assert_array_equal(out[~unl], codes[~unl])
    # brute-force reference: walk the unlabeled rows in ascending h and fill classes in turn
    ratio = np.bincount(codes[~unl], minlength=K) / np.sum(~unl) if given is None else np.array(given)
    u = unl.sum()
    bounds = np.round(np.cumsum(ratio)[:-1] * u).astype(int)
    ref = np.empty(u, int)
    for rank, idx in enumerate(np.argsort(h[unl], kind="stable")):
        ref[idx] = np.searchsorted(bounds, rank, side="right")
    np.testing.assert_array_equal(out[unl], ref)


# ----------------------------------------------------------------- swap rule (Eq. 5)


@pytest.mark.parametrize("loss,rule", [("hinge", "eq5"), ("logistic", "eq5"), ("hinge", "descent"),
                                       ("squared_hinge", "descent")])
def test_swap_round_picks_best_pair_by_enumeration(loss, rule):
    rng = np.random.default_rng(1)
    n, K = 40, 4
    X = rng.normal(size=(n, 2))
    w, theta, b = np.array([1.0, 0.3]), np.array([-1.0, 0.0, 1.0]), 0.2
    h = X @ w
    labels = rng.integers(0, K, n)
    unl = rng.random(n) < 0.8
    c = np.where(unl, 0.7, 2.0)
    new, n_sw = jax.jit(_swap_round, static_argnums=(6, 7, 8))(jnp.asarray(h), jnp.asarray(theta), b, jnp.asarray(labels), jnp.asarray(unl),
                            jnp.asarray(c), loss, K, rule)
    # reference: for each k in turn, enumerate every admissible pair and take the best decrease
    f = np.sum(h[:, None] - theta[None, :] - b > 0, axis=1)
    lab = labels.copy()
    count = 0
    for k in range(K - 1):
        best, best_pair = 0.0, None
        eq5 = rule == "eq5"
        for i in np.flatnonzero(unl & (lab == k) & ((f > k) | (not eq5))):
            for j in np.flatnonzero(unl & (lab == k + 1) & ((f < k + 1) | (not eq5))):
                trial = lab.copy()
                trial[i], trial[j] = k + 1, k
                dec = np_objective(X, lab, c, w, theta, b, loss) - np_objective(X, trial, c, w, theta, b, loss)
                assert dec > 0 or not eq5  # Proposition 2 for every pair admitted by Eq. (5)
                if dec > best:
                    best, best_pair = dec, (i, j)
        if best_pair is not None:
            lab[best_pair[0]], lab[best_pair[1]] = k + 1, k
            count += 1
    np.testing.assert_array_equal(np.asarray(new), lab)
    assert int(n_sw) == count > 0


# ----------------------------------------------------------------- Algorithm 1 / Proposition 2


def swap_problem():
    """Sparse Algorithm 3 data (K = 4) on which the swap rule fires several times."""
    X, y = make_tor_synthetic(300, p=0.2, n_classes=4, block=100, density=0.03, random_state=1)
    return X, y - 1, np.arange(300) >= 20


@pytest.mark.parametrize("loss", ["hinge", pytest.param("squared_hinge", marks=pytest.mark.slow),
                                  pytest.param("laplacian", marks=pytest.mark.slow)])
def test_objective_strictly_decreases_with_every_swap(loss):
    X, y, unl = swap_problem()
    C1 = 10.0
    # the config equals the estimator's defaults, so the estimator test below reuses the compile
    res = fit_tor(to_padded_rows(X), np.where(unl, 0, y), unl, TORConfig(4, loss, max_retrains=5000),
                  C1=C1, c2_init=1e-2, tol=1e-6)
    n = int(res.n_retrains)
    assert bool(res.converged) and int(res.n_swaps) >= 3
    assert int(res.n_rejected) == 0  # every retraining beat the post-swap model on its own
    obj = np.asarray(res.objective_trace)[:n]
    swp = np.asarray(res.swapped_trace)[:n]
    stage = np.asarray(res.trace_stage)[:n]
    nsw = np.asarray(res.trace_swaps)[:n]
    assert np.all(np.isnan(np.asarray(res.objective_trace)[n:]))
    for t in range(n):
        if nsw[t] > 0:
            assert swp[t] < obj[t]  # the swaps themselves, model fixed (Proposition 2)
            assert stage[t + 1] == stage[t] and obj[t + 1] <= swp[t]  # then the retraining
            assert obj[t + 1] < obj[t]
        else:  # a stage ends exactly when no pair qualifies
            assert t == n - 1 or stage[t + 1] == stage[t] + 1
    # the final model and labels reproduce the last recorded objective (NumPy Eq. 10)
    c2_last = np.asarray(res.trace_c2)[n - 1]
    c = np.where(unl, c2_last, C1)
    ref = np_objective(X.toarray(), np.asarray(res.labels), c, np.asarray(res.w), np.asarray(res.theta),
                       float(res.b), loss)
    assert ref == pytest.approx(obj[-1], rel=1e-10)
    # C2 doubles from c2_init while it is below C1 (Algorithm 1 lines 5, 6, 17)
    stages_c2 = np.unique(np.asarray(res.trace_c2)[:n])
    np.testing.assert_allclose(stages_c2, 1e-2 * 2.0 ** np.arange(len(stages_c2)))
    assert stages_c2[-1] < C1 <= 2 * stages_c2[-1]
    assert int(res.n_stages) == len(stages_c2)
    # labeled rows keep their labels; the class counts of the unlabeled rows never change
    np.testing.assert_array_equal(np.asarray(res.labels)[~unl], y[~unl])
    np.testing.assert_array_equal(np.bincount(np.asarray(res.labels)[unl], minlength=4),
                                  np.bincount(np.asarray(res.init_labels)[unl], minlength=4))


@pytest.mark.slow
def test_transduction_does_not_hurt_on_clustered_synthetic():
    X, y = make_tor_synthetic(2500, p=0.1, random_state=0)
    unl = np.ones(2500, bool)
    unl[np.random.default_rng(1).choice(2500, 200, replace=False)] = False
    res = fit_tor(to_padded_rows(X), np.where(unl, 0, y - 1), unl, TORConfig(5), C1=10.0, tol=1e-4)
    err_tor = np.mean(np.asarray(res.labels)[unl] != y[unl] - 1)
    err_init = np.mean(np.asarray(res.init_labels)[unl] != y[unl] - 1)
    assert int(res.n_swaps) > 0 and err_tor <= err_init


def test_a_first_solve_stopped_at_its_cap_ends_the_fit_with_its_model():
    """Every retraining from a start that did not converge ran to the cap too (minutes on
    raw columns far apart in scale): the fit stops after Algorithm 2's solve instead."""
    X, y = blobs(3)
    unl = np.arange(90) >= 30
    codes = np.where(unl, 0, y)
    capped = fit_tor(jnp.asarray(X), codes, unl, TORConfig(3, max_epochs=1), C1=10.0, tol=1e-12)
    assert int(capped.n_retrains) == 0 and int(capped.status) == int(Status.MAX_ITER)
    assert not bool(capped.converged)
    np.testing.assert_array_equal(capped.labels, capped.init_labels)
    np.testing.assert_array_equal(capped.w, capped.init_w)
    full = fit_tor(jnp.asarray(X), codes, unl, TORConfig(3), C1=10.0, tol=1e-4)
    assert int(full.n_retrains) > 0 and int(full.status) == int(Status.SUCCESS)


# ----------------------------------------------------------------- estimator


def test_no_unlabeled_equals_redsvm_with_warning():
    X, y = blobs(6)
    with pytest.warns(UserWarning, match="reduces to RedSVM"):
        t = TransductiveOrdinalRegression(C=2.0, tol=1e-10).fit(X, y)
    r = RedSVM(C=2.0, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(t.coef_, r.coef_, atol=1e-10)
    np.testing.assert_allclose(t.thresholds_, r.thresholds_, atol=1e-10)
    np.testing.assert_array_equal(t.predict(X), r.predict(X))
    assert t.transduction_.shape == (0,)


def test_mask_and_separate_unlabeled_agree_and_labels_map_back():
    X, y = blobs(7)
    names = np.array(["bad", "ok", "good"])
    unl = np.arange(90) >= 20
    y_masked = names[y].astype(object)
    y_masked[unl] = None  # anything may sit at masked rows: it is never read
    est = dict(C=1.0, c2_init=1e-2, tol=1e-4, random_state=0)
    a = TransductiveOrdinalRegression(**est).fit(X, y_masked, unlabeled_mask=unl, classes=list(names))
    b = TransductiveOrdinalRegression(**est).fit(X[~unl], names[y[~unl]], X_unlabeled=X[unl],
                                                 classes=list(names))
    np.testing.assert_array_equal(a.transduction_, b.transduction_)
    assert set(a.transduction_) <= set(names)
    np.testing.assert_array_equal(a.predict(X[:5]), b.predict(X[:5]))
    assert a.n_retrains_ == len(a.objective_trace_) == a.retrains_per_stage_.sum()
    assert a.n_swaps_ == a.swaps_per_stage_.sum()


def test_column_offsets_move_only_the_intercepts():
    """The same transduction, weights and epochs on columns moved away from zero.  Before
    the fit ran on centred columns, each retraining's warm start carried w.c in its
    intercept, which moved with w after a swap round: here 1,607 epochs against 1,207 and
    weights 5e-3 apart (on raw survey columns, 18x the epochs in float32)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 120)
    X = np.column_stack([y + 0.8 * rng.normal(size=120), rng.normal(size=120)])
    shift = np.array([30.0, -20.0])
    est = dict(C=1.0, c2_init=1e-2, random_state=0)
    a = TransductiveOrdinalRegression(**est).fit(X[:30], y[:30], X_unlabeled=X[30:])
    b = TransductiveOrdinalRegression(**est).fit(X[:30] + shift, y[:30], X_unlabeled=X[30:] + shift)
    assert a.n_swaps_ > 0 and b.n_iter_ == a.n_iter_ and b.n_swaps_ == a.n_swaps_
    np.testing.assert_array_equal(b.transduction_, a.transduction_)
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b.thresholds_, a.thresholds_ + shift @ a.coef_, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(b.result_.init_b),
                               np.asarray(a.result_.init_b) + shift @ np.asarray(a.result_.init_w), rtol=1e-9)
    np.testing.assert_array_equal(b.predict(X + shift), a.predict(X))


@pytest.mark.slow
def test_class_ratios_set_the_transduced_class_counts():
    X, y = blobs(9, n=120)
    unl = np.arange(120) >= 30
    est = dict(C=1.0, c2_init=1e-2, tol=1e-4, random_state=0)
    # labeled proportions given explicitly: the same fit as the default (Algorithm 2)
    lab_ratio = np.bincount(y[~unl], minlength=3) / np.sum(~unl)
    a = TransductiveOrdinalRegression(**est).fit(X[~unl], y[~unl], X_unlabeled=X[unl])
    b = TransductiveOrdinalRegression(class_ratios=lab_ratio, **est).fit(X[~unl], y[~unl], X_unlabeled=X[unl])
    np.testing.assert_array_equal(a.transduction_, b.transduction_)
    # other proportions: Algorithm 2 hands them out (90 rows: 18, 27, 45) and swaps keep them
    c = TransductiveOrdinalRegression(class_ratios=[0.2, 0.3, 0.5], **est).fit(
        X[~unl], y[~unl], X_unlabeled=X[unl])
    np.testing.assert_array_equal(np.bincount(c.init_transduction_, minlength=3), [18, 27, 45])
    np.testing.assert_array_equal(np.bincount(c.transduction_, minlength=3), [18, 27, 45])
    # the pseudo-labels are the labeled-only model's score order cut at those counts
    h0 = RedSVM(C=1.0, tol=1e-4, random_state=0).fit(X[~unl], y[~unl]).decision_function(X[unl])
    order = np.argsort(h0, kind="stable")
    np.testing.assert_array_equal(c.init_transduction_[order], np.repeat([0, 1, 2], [18, 27, 45]))


def test_sparse_input_and_synthetic_generator():
    X, y = make_tor_synthetic(300, p=0.0, n_classes=3, block=200, density=0.05, random_state=0)
    assert X.shape == (300, 200 * 5) and sp.isspmatrix_csr(X)
    np.testing.assert_allclose(np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel()), 1.0)
    # p = 0: every nonzero lies in the class's block [block (y-1), block (y+2)] (1-based)
    rows, cols = X.nonzero()
    d1 = cols + 1
    assert np.all((d1 >= 200 * (y[rows] - 1)) & (d1 <= 200 * (y[rows] + 2)))
    X9, y9 = make_tor_synthetic(300, p=0.9, n_classes=3, block=200, density=0.05, random_state=0)
    r9, c9 = X9.nonzero()
    outside = ~((c9 + 1 >= 200 * (y9[r9] - 1)) & (c9 + 1 <= 200 * (y9[r9] + 2)))
    # expected share outside the block: 0.045 * 399 / (0.05 * 601 + 0.045 * 399)
    assert abs(outside.mean() - 17.955 / (30.05 + 17.955)) < 0.03
    # sparse input through the estimator (rows 0..19 labeled, as in swap_problem)
    Xs, ys, unl = swap_problem()
    t = TransductiveOrdinalRegression(C=10.0, c2_init=1e-2, random_state=0).fit(
        Xs[~unl], ys[~unl], X_unlabeled=Xs[unl])
    assert t.transduction_.shape == (280,) and t.n_swaps_ >= 1 and t.converged_
    assert t.predict(Xs[:7]).shape == (7,)


def test_bad_input():
    X, y = blobs(8)
    T = TransductiveOrdinalRegression
    with pytest.raises(ValueError, match="Algorithm 2"):
        T().fit(X[y < 2], y[y < 2], X_unlabeled=X[y == 2], classes=[0, 1, 2])
    with pytest.raises(ValueError, match="X_unlabeled has 3 features"):
        T().fit(X, y, X_unlabeled=np.ones((5, 3)))
    with pytest.raises(ValueError, match="c2_init"):
        T(C=1.0, c2_init=2.0).fit(X, y, X_unlabeled=X)
    with pytest.raises(ValueError, match="c2_init"):
        T(c2_init=0.0).fit(X, y, X_unlabeled=X)
    with pytest.raises(ValueError, match="c2_growth"):
        T(c2_growth=1.0).fit(X, y, X_unlabeled=X)
    with pytest.raises(ValueError, match="swap_rule"):
        T(swap_rule="all").fit(X, y, X_unlabeled=X)
    with pytest.raises(ValueError, match="one entry per class"):
        T(class_ratios=[0.5, 0.5]).fit(X, y, X_unlabeled=X)
    with pytest.raises(ValueError, match="sum to 1"):
        T(class_ratios=[0.5, 0.5, 0.5]).fit(X, y, X_unlabeled=X)
    with pytest.raises(ValueError, match="non-negative"):
        T(class_ratios=[1.2, -0.2, 0.0]).fit(X, y, X_unlabeled=X)
    with pytest.raises(ValueError, match="non-negative"):
        T(class_ratios=[np.nan, 0.5, 0.5]).fit(X, y, X_unlabeled=X)
    with pytest.raises(TypeError, match="sequence of numbers"):
        T(class_ratios=["a", "b", "c"]).fit(X, y, X_unlabeled=X)
    with pytest.raises(ValueError, match="not both"):
        T().fit(X, y, X_unlabeled=X, unlabeled_mask=np.zeros(90, bool))
    with pytest.raises(TypeError, match="boolean"):
        T().fit(X, y, unlabeled_mask=np.zeros(90, int))
    with pytest.raises(ValueError, match="every row"):
        T().fit(X, y, unlabeled_mask=np.ones(90, bool))
    with pytest.raises(ValueError, match="NaN"):
        T().fit(X, y, X_unlabeled=np.full((4, 2), np.nan))
    with pytest.raises(ValueError, match="NaN"):
        T().fit(X, np.where(np.arange(90) == 3, np.nan, y))
