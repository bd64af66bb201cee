"""Progress reporting (bayesord._progress and the solvers' ``progress`` flags).

Checked: progress on and off give identical results; the host callback fires once per loop
step plus once at the end, and the printed numbers are the ones in the result's traces;
a vmapped grid prints one line per step, not one per grid point; with progress off the
compiled program has no callback and prints nothing; the estimators' ``verbose`` levels (1:
host lines from the results, the silent fit's programs; 2: the solver's own lines too) and
the CLI's ``--quiet``.

The functional fits use exactly the configs the estimators build for the same data, so the
estimator tests reuse their compiled programs (compiling ISBOR dominates the run time).
"""

import io
import re

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from bayesord import _progress
from bayesord._isbor import ISBORConfig, fit_isbor, fit_sbor
from bayesord._npsvor import NPSVORConfig, cv_npsvor, fit_npsvor
from bayesord._sparse import to_padded_rows
from bayesord._tor import TORConfig, fit_tor
from bayesord.cli import _parser, main
from bayesord.estimators._isbor import ISBOR
from bayesord.estimators._npsvor import NPSVOR
from bayesord.estimators._tor import TransductiveOrdinalRegression

N, K = 50, 3


@pytest.fixture(autouse=True)
def every_update(monkeypatch):
    """Write every update (no throttling) so the lines can be counted."""
    monkeypatch.setattr(_progress, "MIN_INTERVAL", 0.0)


def lines(capsys):
    jax.effects_barrier()
    captured = capsys.readouterr()
    assert captured.out == ""
    return [s for s in captured.err.splitlines() if s]


def assert_same(a, b):
    """The same fit with and without progress: counts, flags and decisions exactly, floats to
    rounding (the two are different programs, so the compiler may order a sum differently;
    through an iterative solver that reaches about 1e-11 relative)."""
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        x, y = np.asarray(x), np.asarray(y)
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)
        else:
            np.testing.assert_array_equal(x, y)


def isbor_data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(N, 2))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] + rng.normal(0, 0.2, N)
    y = np.digitize(f, np.quantile(f, [1 / 3, 2 / 3])).astype(np.int32)
    return jnp.asarray(X), jnp.asarray(y)


def isbor_config(progress):
    """What ``ISBOR(capacity=12, max_iter=40)`` builds for these data."""
    return ISBORConfig(n_classes=K, capacity=12, max_iter=40, block_size=N, cache_basis=True,
                       progress=progress)


def run_isbor(progress, theta=1.0, solver=fit_isbor):
    X, y = isbor_data()
    cfg = isbor_config(progress)
    args = (X, y, jnp.ones(N), jnp.arange(N, dtype=jnp.int32), jnp.ones(N, bool))
    if solver is fit_sbor:
        return fit_sbor(*args, theta, config=cfg, min_delta=1e-2)
    return fit_isbor(*args, jax.random.PRNGKey(0), theta, config=cfg, min_delta=1e-2)


# ----------------------------------------------------------------- ISBOR / SBOR


@pytest.mark.slow
def test_isbor_progress_lines_follow_the_evidence_trace(capsys):
    quiet = run_isbor(False)
    assert lines(capsys) == []
    loud = run_isbor(True)
    out = lines(capsys)
    assert_same(quiet, loud)
    n_iter = int(loud.n_iter)
    assert n_iter >= 3
    assert len(out) == n_iter + 1  # one call per iteration, one at the end
    trace = np.asarray(loud.evidence_trace)
    for k, line in enumerate(out[:-1]):
        m = re.fullmatch(r"ISBOR theta 1 iter (\d+)/40  log-evidence (\S+)  RVs (\d+)", line)
        assert m, line
        assert int(m.group(1)) == k
        assert float(m.group(2)) == pytest.approx(trace[k], abs=0.051)
    m = re.fullmatch(r"ISBOR theta 1 done: (\d+) iterations  log-evidence (\S+)  RVs (\d+)  \((\d)/1 converged\)",
                     out[-1])
    assert m, out[-1]
    assert int(m.group(1)) == n_iter
    assert float(m.group(2)) == pytest.approx(float(loud.log_evidence), abs=0.051)
    assert int(m.group(3)) == int(loud.n_active)
    assert int(m.group(4)) == int(loud.converged)


@pytest.mark.slow
def test_sbor_progress_on_equals_off(capsys):
    quiet = run_isbor(False, solver=fit_sbor)
    loud = run_isbor(True, solver=fit_sbor)
    out = lines(capsys)
    assert_same(quiet, loud)
    assert len(out) == int(loud.n_iter) + 1
    assert out[0].startswith("SBOR iter 0/40") and out[-1].startswith("SBOR done:")


@pytest.mark.slow  # two vmapped ISBOR compilations, about a minute on 2 cores
def test_vmapped_grid_prints_one_line_per_step(capsys):
    thetas = jnp.array([0.5, 2.0])
    quiet = jax.vmap(lambda t: run_isbor(False, t))(thetas)
    assert lines(capsys) == []
    loud = jax.vmap(lambda t: run_isbor(True, t))(thetas)
    out = lines(capsys)
    assert_same(quiet, loud)
    n_iter = np.asarray(loud.n_iter)
    assert n_iter.min() != n_iter.max()
    assert len(out) == n_iter.max() + 1  # not twice as many
    assert all(s.startswith("ISBOR [2 fits] theta 0.5-2 ") for s in out)
    assert f"done: {n_iter.min()}-{n_iter.max()} iterations" in out[-1]
    assert f"({int(np.sum(loud.converged))}/2 converged)" in out[-1]


def test_progress_off_compiles_no_callback():
    X, y = isbor_data()
    args = (X, y, jnp.ones(N), jnp.arange(N, dtype=jnp.int32), jnp.ones(N, bool), jax.random.PRNGKey(0), 1.0)
    text = {p: fit_isbor.lower(*args, config=isbor_config(p)).as_text() for p in (False, True)}
    assert "callback" not in text[False]
    assert "callback" in text[True]


# ----------------------------------------------------------------- TOR


def tor_data(seed=0, n=80):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    X = np.column_stack([2.5 * y + 0.9 * rng.normal(size=n), rng.normal(size=n)])
    return X, y, np.arange(n) >= 20


def test_tor_progress_reports_every_retraining(capsys):
    X, y, unl = tor_data()
    cfg = lambda p: TORConfig(K, max_retrains=5000, progress=p)  # noqa: E731  (the estimator's)
    quiet = fit_tor(X, y, unl, cfg(False), C1=1.0, c2_init=1e-3)
    loud = fit_tor(X, y, unl, cfg(True), C1=1.0, c2_init=1e-3)
    out = lines(capsys)
    assert_same(quiet, loud)
    n_ret = int(loud.n_retrains)
    assert len(out) == n_ret + 2  # the labeled-only fit, each retraining, the end
    assert out[0].startswith("TOR initial RED-SVM")
    retr = [int(re.search(r"retrainings (\d+)", s).group(1)) for s in out[1:]]
    assert retr == list(range(n_ret + 1))
    stages = np.asarray(loud.trace_stage)[:n_ret]
    for s, st in zip(out[1:-1], stages):
        assert s.startswith(f"TOR stage {st + 1}/10 ")  # 1e-3 * 2**s < 1 for s = 0..9
    obj = np.asarray(loud.objective_trace)[n_ret - 1]
    m = re.fullmatch(r"TOR done: (\d+) stages  retrainings (\d+)  swaps (\d+)  objective (\S+)  \((.*)\)", out[-1])
    assert m, out[-1]
    assert (int(m.group(1)), int(m.group(2)), int(m.group(3))) == \
        (int(loud.n_stages), n_ret, int(loud.n_swaps))
    assert float(m.group(4)) == pytest.approx(obj, rel=1e-5)
    assert m.group(5) == ("converged" if bool(loud.converged) else "not converged")


# ----------------------------------------------------------------- NPSVOR


def npsvor_data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.digitize(X @ [1.0, -1.0, 0.5], [-1, 1])


def test_npsvor_progress_on_equals_off(capsys):
    X, y = npsvor_data()
    E = to_padded_rows(X, bias=1.0)
    args = (E, y, K, 1.0, 1.0, 0.1, 0.1, jax.random.key(0))
    quiet = fit_npsvor(*args, NPSVORConfig(n_features=4, block_size=64))  # the estimator's
    loud = fit_npsvor(*args, NPSVORConfig(n_features=4, block_size=64, progress=True))
    out = lines(capsys)
    assert_same(quiet, loud)
    passes = np.asarray(loud.n_iter)
    assert len(out) == passes.max() + 1
    assert out[0] == f"NPSVOR pass 0/1000  converged 0/{K} problems"
    assert out[-1] == f"NPSVOR done: {passes.max()} passes  converged {int(np.sum(loud.converged))}/{K} problems"


@pytest.mark.slow
def test_npsvor_cv_per_value_loop_labels_each_value(capsys):
    X, y = npsvor_data()
    E = to_padded_rows(X, bias=1.0)
    args = (E, y, K, [0.1, 1.0], 3, 0.1, 0.1, jax.random.key(0))
    quiet = cv_npsvor(*args, NPSVORConfig(n_features=4))
    loud = cv_npsvor(*args, NPSVORConfig(n_features=4, progress=True))
    out = lines(capsys)
    np.testing.assert_array_equal(quiet.fold_mae, loud.fold_mae)
    done = [s for s in out if "done:" in s]
    assert len(done) == 2
    assert done[0].startswith("CV C=0.1 (1/2)  NPSVOR done:") and done[1].startswith("CV C=1 (2/2)  NPSVOR")


# ----------------------------------------------------------------- estimators


@pytest.mark.slow
def test_isbor_estimator_verbose_levels(capsys):
    X, y = isbor_data()
    X, y = np.asarray(X), np.asarray(y)
    kw = dict(theta="auto", theta_grid=(0.5, 2.0), theta_selection="evidence", capacity=12, max_iter=40,
              random_state=0)
    quiet = ISBOR(**kw).fit(X, y)
    assert lines(capsys) == []
    # Level 1: the programs of a silent fit (results identical), and a line per fit written
    # from its result: one per width of the evidence grid, then the final fit's.
    host = ISBOR(verbose=1, **kw).fit(X, y)
    out = lines(capsys)
    np.testing.assert_array_equal(quiet.coef_, host.coef_)
    np.testing.assert_array_equal(quiet.theta_grid_scores_, host.theta_grid_scores_)
    assert len(out) == 3 and all(" done: " in s for s in out)
    for t, score in zip((0.5, 2.0), host.theta_grid_scores_):
        line = [s for s in out if s.startswith(f"theta grid by evidence (2 widths)  ISBOR theta {t:g} done:")]
        assert len(line) == 1 and f"log-evidence {score:.1f}" in line[0]
    assert out[-1] == (f"ISBOR theta {host.theta_:g} done: {host.n_iter_} iterations  log-evidence "
                       f"{host.log_evidence_:.1f}  RVs {host.relevance_indices_.size}  (1/1 converged)")
    # Level 2: the solver's own line at every iteration as well, from inside its loop.
    loud = ISBOR(verbose=2, **kw).fit(X, y)
    out2 = lines(capsys)
    np.testing.assert_array_equal(quiet.coef_, loud.coef_)
    # Two programs (with and without the progress callbacks): equal to rounding (one ulp seen).
    np.testing.assert_allclose(quiet.theta_grid_scores_, loud.theta_grid_scores_, rtol=1e-12)
    # The widths are fitted one after the other, each line naming its width.
    for t in (0.5, 2.0):
        done = [s for s in out2 if s.startswith(f"theta grid by evidence (2 widths)  ISBOR theta {t:g} done:")]
        assert len(done) == 1
    final = [s for s in out2 if s.startswith("ISBOR ")]
    assert len(final) == loud.n_iter_ + 1 and final[-1] == out[-1]
    with pytest.raises(ValueError, match="verbose"):
        ISBOR(verbose=-1, theta=1.0).fit(X, y)


@pytest.mark.slow
def test_isbor_cv_selection_labels_each_width(capsys):
    X, y = isbor_data()
    X, y = np.asarray(X), np.asarray(y)
    kw = dict(theta="auto", theta_grid=(0.5, 2.0), capacity=12, max_iter=40, random_state=0)
    cv = ISBOR(verbose=True, theta_selection="cv", cv=2, **kw).fit(X, y)
    out = lines(capsys)
    for i, t in enumerate((0.5, 2.0)):
        head = f"theta {t:g} ({i + 1}/2), 2-fold CV  ISBOR theta {t:g} done:"
        assert sum(s.startswith(head) for s in out) == 2  # one per fold
    # Each width's CV score, as theta_grid_scores_ holds it, then the width chosen.
    for i, t in enumerate((0.5, 2.0)):
        score = [s for s in out if s.startswith(f"theta {t:g} ({i + 1}/2): 2-fold CV log-loss ")]
        assert len(score) == 1
        assert float(score[0].split()[-1]) == pytest.approx(-cv.theta_grid_scores_[i], abs=1e-4)
    # The chosen width, and the factor on sigma that the fold fits chose for predictions,
    # then the final fit's line.
    chosen = out.index(f"width search: theta {cv.theta_:g} chosen"
                       + (f"; sigma x {cv.sigma_factor_:g} in predictions" if cv.sigma_factor_ != 1 else ""))
    assert len(out[chosen + 1:]) == 1 and out[-1].startswith(f"ISBOR theta {cv.theta_:g} done:")
    # At level 2 the fold fits and the final fit report their iterations too.
    loud = ISBOR(verbose=2, theta_selection="cv", cv=2, **kw).fit(X, y)
    out2 = lines(capsys)
    assert loud.theta_ == cv.theta_
    assert [s for s in out2 if " iter " not in s] == out
    final = [s for s in out2[out2.index(out[chosen]) + 1:]]
    assert len(final) == loud.n_iter_ + 1 and all(s.startswith(f"ISBOR theta {cv.theta_:g} ") for s in final)


@pytest.mark.slow
def test_cross_fitted_copies_of_a_verbose_model_name_their_fold(capsys):
    X, y = isbor_data()
    X, y = np.asarray(X), np.asarray(y)
    model = ISBOR(verbose=1, theta=1.0, capacity=12, max_iter=40, random_state=0).fit(X, y)
    lines(capsys)
    model.calibrate(X, y, cv=2)
    out = lines(capsys)
    assert [s.split("  ISBOR theta 1 done:")[0] for s in out] == ["calibration fold 1/2", "calibration fold 2/2"]


@pytest.mark.slow
def test_tor_and_npsvor_estimators_verbose(capsys):
    X, y, unl = tor_data()
    kw = dict(C=1.0, c2_init=1e-3, random_state=0)
    quiet = TransductiveOrdinalRegression(**kw).fit(X[~unl], y[~unl], X_unlabeled=X[unl])
    host = TransductiveOrdinalRegression(verbose=1, **kw).fit(X[~unl], y[~unl], X_unlabeled=X[unl])
    out = lines(capsys)
    np.testing.assert_array_equal(quiet.w_, host.w_)  # the same program
    assert out == [f"TOR done: {host.result_.n_stages} stages  retrainings {host.n_retrains_}  swaps "
                   f"{host.n_swaps_}  objective {host.objective_trace_[-1]:.6g}  (converged)"]
    loud = TransductiveOrdinalRegression(verbose=2, **kw).fit(X[~unl], y[~unl], X_unlabeled=X[unl])
    out = lines(capsys)
    np.testing.assert_array_equal(quiet.transduction_, loud.transduction_)
    np.testing.assert_allclose(quiet.w_, loud.w_, rtol=1e-12, atol=1e-14)  # programs differ
    assert len(out) == loud.n_retrains_ + 2 and out[-1].startswith("TOR done:")
    with pytest.raises(ValueError, match="verbose"):
        TransductiveOrdinalRegression(verbose="yes").fit(X[~unl], y[~unl], X_unlabeled=X[unl])

    X, y = npsvor_data()
    quiet = NPSVOR(Cs=[0.1, 1.0], cv=2, random_state=0).fit(X, y)
    host = NPSVOR(Cs=[0.1, 1.0], cv=2, random_state=0, verbose=1).fit(X, y)
    out = lines(capsys)
    np.testing.assert_array_equal(quiet.coef_, host.coef_)
    assert len(out) == 3
    for i, c in enumerate(("0.1", "1")):  # one line per C value: its CV MAE and its solve
        mae = host.cv_results_["mean_mae"][i]
        assert out[i].startswith(f"2-fold CV C={c} ({i + 1}/2): MAE {mae:.4f}  NPSVOR done:")
        assert out[i].endswith(f"/{2 * K} problems")
    assert out[-1] == (f"NPSVOR done: {host.n_iter_.max()} passes  converged {host.converged_.sum()}/{K} "
                       "problems")
    loud = NPSVOR(Cs=[0.1, 1.0], cv=2, random_state=0, verbose=2).fit(X, y)
    out = lines(capsys)
    np.testing.assert_array_equal(quiet.coef_, loud.coef_)
    for i, c in enumerate(("0.1", "1")):  # one solve per C value, each with its folds
        assert any(s.startswith(f"2-fold  CV C={c} ({i + 1}/2)  NPSVOR done:") and
                   s.endswith(f"/{2 * K} problems") for s in out)
    assert out[-1].startswith("NPSVOR done:")  # the refit on all rows, without the CV label


# ----------------------------------------------------------------- display and CLI


def test_terminal_line_is_rewritten_in_place(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    monkeypatch.setattr("sys.stderr", stream)
    _progress.show("step 1 of many")
    _progress.show("step 2")
    with _progress.prefix("outer"):
        _progress.show("done", final=True)
    assert stream.getvalue() == "\rstep 1 of many\rstep 2        \router  done\n"
    _progress.show("again")
    _progress.finish()
    assert stream.getvalue().endswith("\ragain\n")


@pytest.mark.slow
def test_updates_are_throttled_but_final_lines_are_not(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "MIN_INTERVAL", 3600.0)
    monkeypatch.setitem(_progress._state, "last", -np.inf)  # no update shown yet
    run_isbor(True)
    out = lines(capsys)
    assert len(out) == 2  # the first update and the final one
    assert out[0].startswith("ISBOR theta 1 iter 0/40") and out[1].startswith("ISBOR theta 1 done:")


def test_cli_flags():
    assert _parser().parse_args(["demo"]).progress
    assert not _parser().parse_args(["demo", "--no-progress"]).progress
    assert not _parser().parse_args(["fit", "d.csv", "--out", "m.npz", "--quiet"]).progress


@pytest.mark.slow
def test_cli_progress_on_by_default_and_quiet(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    # Noisy labels: separable ones send the evidence fit to its iteration cap, whose warning
    # the command prints even with --quiet (which silences progress only).
    latent = X[:, 0] + rng.normal(size=60)
    frame = pd.DataFrame(X, columns=["a", "b"]).assign(y=np.digitize(latent, [-0.5, 0.5]) + 1)
    frame.to_csv(tmp_path / "d.csv", index=False)
    assert main(["fit", str(tmp_path / "d.csv"), "--out", str(tmp_path / "m.npz")]) == 0
    err = capsys.readouterr().err
    assert "fit: OrdinalProbit on 60 rows x 2 features" in err and "fitted in" in err
    assert main(["fit", str(tmp_path / "d.csv"), "--out", str(tmp_path / "m2.npz"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
