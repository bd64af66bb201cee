"""The bayesord command: demo, fit, predict."""

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesord.cli import compile_cache_dir, main
from bayesord.datasets import make_ordinal_probit


def test_demo_prints_table_and_writes_plot(tmp_path, capsys):
    out = tmp_path / "demo.png"
    assert main(["demo", "--n-train", "300", "--n-test", "150", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "test MAE" in text and "OrdinalProbit" in text and "threshold" in text
    assert out.stat().st_size > 10_000


def test_fit_then_predict_round_trip(tmp_path, capsys):
    X, y, _ = make_ordinal_probit(150, 2, 3, seed=4)
    frame = pd.DataFrame(X, columns=["a", "b"]).assign(grade=y)
    data = tmp_path / "train.csv"
    frame.to_csv(data, index=False)
    model = tmp_path / "m.npz"
    assert main(["fit", str(data), "--target", "grade", "--out", str(model), "--thresholds", "joint"]) == 0
    preds = tmp_path / "p.csv"
    assert main(["predict", str(model), str(data), "--target", "grade", "--proba", "--out", str(preds)]) == 0
    result = pd.read_csv(preds)
    assert list(result.columns) == ["prediction", "P(1)", "P(2)", "P(3)"]
    np.testing.assert_allclose(result[["P(1)", "P(2)", "P(3)"]].sum(axis=1), 1.0, atol=1e-9)


def test_bad_target_is_reported_not_raised(tmp_path, capsys):
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0], "y": [1, 2]}).to_csv(data, index=False)
    assert main(["fit", str(data), "--target", "grade", "--out", str(tmp_path / "m.npz")]) == 2
    assert "grade" in capsys.readouterr().err


def test_isbor_fit_then_predict_with_uncertainty(tmp_path, capsys):
    from bayesord import ISBOR, load_model

    X, y, _ = make_ordinal_probit(90, 2, 3, seed=5)
    frame = pd.DataFrame(X, columns=["a", "b"]).assign(grade=np.array(["lo", "mid", "hi"])[y - 1])
    data = tmp_path / "train.csv"
    frame.to_csv(data, index=False)
    model = tmp_path / "isbor.npz"
    assert main(["fit", str(data), "--target", "grade", "--out", str(model), "--model", "isbor",
                 "--theta", "1", "--classes", "lo,mid,hi", "--quiet"]) == 0
    text = capsys.readouterr().out
    fitted = load_model(model)
    assert isinstance(fitted, ISBOR) and list(fitted.classes_) == ["lo", "mid", "hi"]
    assert f"{len(fitted.relevance_indices_)} relevance vectors of 90 rows" in text
    assert "threshold lo|mid" in text
    preds = tmp_path / "p.csv"
    assert main(["predict", str(model), str(data), "--target", "grade", "--uncertainty", "--out", str(preds)]) == 0
    result = pd.read_csv(preds)
    feats = frame[["a", "b"]]
    assert list(result["prediction"]) == list(fitted.predict(feats))
    np.testing.assert_allclose(result[["P(lo)", "P(mid)", "P(hi)"]], fitted.predict_proba(feats), rtol=1e-12)
    np.testing.assert_allclose(result[["sd P(lo)", "sd P(mid)", "sd P(hi)"]], fitted.predict_proba_std(feats),
                               rtol=1e-12)
    mean, var = fitted.predict_latent(feats)
    np.testing.assert_allclose(result["latent sd"], np.sqrt(var), rtol=1e-12)


def test_probit_predict_with_uncertainty(tmp_path, capsys):
    X, y, _ = make_ordinal_probit(150, 2, 3, seed=4)
    data = tmp_path / "train.csv"
    pd.DataFrame(X, columns=["a", "b"]).assign(y=y).to_csv(data, index=False)
    model = tmp_path / "m.npz"
    assert main(["fit", str(data), "--out", str(model), "--thresholds", "joint", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["predict", str(model), str(data), "--uncertainty"]) == 0
    result = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert {"sd P(1)", "latent mean", "latent sd"} <= set(result.columns)
    assert np.all(result[["sd P(1)", "sd P(2)", "sd P(3)"]] >= 0)


@pytest.mark.parametrize("args, match", [
    (["--model", "isbor", "--prior", "ard"], "--prior does not apply to --model isbor (ISBOR has no parameter 'prior')"),
    (["--theta", "1"], "--theta does not apply to --model probit"),
    (["--model", "sbor", "--theta", "wide"], "--theta must be a positive number or 'auto'"),
    (["--model", "prank", "--kernel", "rbf"], "--kernel does not apply to --model prank"),
    (["--model", "npsvor", "--param", "gamma=1"], "NPSVOR has no parameter 'gamma'; its parameters are C, C1,"),
    (["--model", "npsvor", "--param", "C"], "--param expects NAME=VALUE, got 'C'"),
    (["--model", "cusum", "--seed", "1", "--param", "random_state=2"], "--param random_state is given twice"),
    (["--model", "redsvm", "--unlabeled", "u.csv"], "--unlabeled applies to --model tor, not redsvm"),
    (["--model", "redsvm", "--param", "C=-1"], "C must be a positive finite number, got -1"),
])
def test_fit_options_of_the_other_model_are_refused(tmp_path, capsys, args, match):
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "y": [1, 2, 3]}).to_csv(data, index=False)
    assert main(["fit", str(data), "--out", str(tmp_path / "m.npz"), *args]) == 2
    assert match in capsys.readouterr().err


def test_predict_refuses_a_file_that_is_not_a_model(tmp_path, capsys):
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0], "y": [1]}).to_csv(data, index=False)
    np.savez(tmp_path / "other.npz", a=np.zeros(2))
    assert main(["predict", str(data), str(data)]) == 2
    assert "not an .npz archive" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "other.npz"), str(data)]) == 2
    assert "not a model saved by bayesord" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "missing.npz"), str(data)]) == 2
    assert "no model file" in capsys.readouterr().err


def test_predict_reads_a_model_saved_in_python(tmp_path, capsys):
    from bayesord import CuSumRank

    X, y, _ = make_ordinal_probit(60, 2, 3, seed=6)
    frame = pd.DataFrame(X, columns=["a", "b"])
    data = tmp_path / "d.csv"
    frame.to_csv(data, index=False)
    model = CuSumRank(random_state=0).fit(frame, y)
    model.save(tmp_path / "cusum.npz")
    preds = tmp_path / "p.csv"
    assert main(["predict", str(tmp_path / "cusum.npz"), str(data), "--out", str(preds)]) == 0
    np.testing.assert_array_equal(pd.read_csv(preds)["prediction"], model.predict(frame))
    assert main(["predict", str(tmp_path / "cusum.npz"), str(data), "--proba"]) == 2
    assert "CuSumRank, which gives labels and scores, not probabilities" in capsys.readouterr().err


def test_compile_cache_location():
    home_cache = Path("~/.cache").expanduser() / "bayesord" / "jax"
    assert compile_cache_dir({}) == home_cache
    assert compile_cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/bayesord/jax")
    assert compile_cache_dir({"BAYESORD_COMPILE_CACHE": "/y/c", "XDG_CACHE_HOME": "/x"}) == Path("/y/c")
    assert compile_cache_dir({"BAYESORD_COMPILE_CACHE": "OFF"}) is None


def test_the_command_keeps_compiled_programs_between_runs(tmp_path):
    """A fit in a fresh process writes the cache; a second one reads it (same output)."""
    X, y, _ = make_ordinal_probit(80, 2, 3, seed=6)
    data = tmp_path / "d.csv"
    pd.DataFrame(X, columns=["a", "b"]).assign(y=y).to_csv(data, index=False)
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["BAYESORD_COMPILE_CACHE"] = str(cache)
    outputs = []
    for run in range(2):
        done = subprocess.run([sys.executable, "-m", "bayesord.cli", "fit", str(data), "--out",
                               str(tmp_path / f"m{run}.npz"), "--quiet"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.replace(f"m{run}.npz", ""))
        if run == 0:
            written = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
            assert written
    assert outputs[0] == outputs[1]
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == written  # read, not rewritten


def test_isbor_from_the_command_has_the_estimators_defaults():
    from bayesord import ISBOR
    from bayesord.cli import _make_model, _parser

    args = _parser().parse_args(["fit", "d.csv", "--out", "m.npz", "--model", "isbor", "--quiet"])
    made = _make_model(args).get_params()
    expected = ISBOR(random_state=0).get_params()
    assert made == expected


def test_param_values_are_read_as_literals_else_as_text():
    from bayesord.cli import _make_model, _parser

    args = _parser().parse_args(["fit", "d.csv", "--out", "m.npz", "--model", "npsvor", "--param",
                                 "Cs=(0.1, 1)", "--param", "predictor=r_old", "--param", "C=10",
                                 "--param", "cv=None"])
    made = _make_model(args).get_params()
    assert made["Cs"] == (0.1, 1) and made["predictor"] == "r_old" and made["C"] == 10
    assert made["cv"] is None and made["random_state"] == 0


@pytest.mark.parametrize("model, extra", [
    ("npsvor", ["--param", "C=10"]),
    ("cusum", ["--kernel", "rbf", "--param", "gamma=0.5"]),
    ("prank", []),
    ("swapped-pairs", ["--param", "C=10"]),
    ("redsvm", ["--kernel", "perceptron", "--param", "loss=squared_hinge"]),
])
def test_every_model_fits_from_the_command_as_in_python(tmp_path, capsys, model, extra):
    """The saved file predicts exactly what the same estimator fitted in Python predicts."""
    import bayesord
    from bayesord import load_model
    from bayesord.cli import _MODELS

    X, y, _ = make_ordinal_probit(80, 2, 3, seed=7)
    frame = pd.DataFrame(X, columns=["a", "b"])
    data = tmp_path / "d.csv"
    frame.assign(y=np.array(["lo", "mid", "hi"])[y - 1]).to_csv(data, index=False)
    path = tmp_path / "m.npz"
    assert main(["fit", str(data), "--out", str(path), "--model", model, "--classes", "lo,mid,hi",
                 "--quiet", *extra]) == 0
    text = capsys.readouterr().out
    fitted = load_model(path)
    cls = getattr(bayesord, _MODELS[model])
    assert type(fitted) is cls and list(fitted.classes_) == ["lo", "mid", "hi"]
    assert "training rows 80: MAE" in text and f"saved to {path}" in text
    params = fitted.get_params()
    reference = cls(**params).fit(frame, np.array(["lo", "mid", "hi"])[y - 1], classes=["lo", "mid", "hi"])
    np.testing.assert_array_equal(fitted.predict(frame), reference.predict(frame))
    assert main(["predict", str(path), str(data)]) == 0
    printed = pd.read_csv(io.StringIO(capsys.readouterr().out))["prediction"]
    np.testing.assert_array_equal(printed, reference.predict(frame))


def test_tor_fits_from_the_command_with_a_file_of_unlabeled_rows(tmp_path, capsys):
    from bayesord import TransductiveOrdinalRegression, load_model

    X, y, _ = make_ordinal_probit(120, 2, 3, seed=8)
    labeled = pd.DataFrame(X[:40], columns=["a", "b"]).assign(y=y[:40])
    unlabeled = pd.DataFrame(X[40:, ::-1], columns=["b", "a"])  # columns are matched by name
    labeled.to_csv(tmp_path / "l.csv", index=False)
    unlabeled.to_csv(tmp_path / "u.csv", index=False)
    path = tmp_path / "tor.npz"
    assert main(["fit", str(tmp_path / "l.csv"), "--out", str(path), "--model", "tor", "--unlabeled",
                 str(tmp_path / "u.csv"), "--quiet"]) == 0
    text = capsys.readouterr().out
    reference = TransductiveOrdinalRegression(random_state=0).fit(labeled[["a", "b"]], y[:40],
                                                                  X_unlabeled=unlabeled[["a", "b"]])
    np.testing.assert_array_equal(load_model(path).transduction_, reference.transduction_)
    counts = ", ".join(f"{c}: {np.sum(reference.transduction_ == c)}" for c in (1, 2, 3))
    assert f"unlabeled rows 80: {counts}; {reference.n_swaps_} swaps" in text
    pd.DataFrame({"a": [1.0]}).to_csv(tmp_path / "bad.csv", index=False)
    assert main(["fit", str(tmp_path / "l.csv"), "--out", str(path), "--model", "tor", "--unlabeled",
                 str(tmp_path / "bad.csv"), "--quiet"]) == 2
    assert "lacks feature columns ['b']" in capsys.readouterr().err
