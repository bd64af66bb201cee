"""The bayesord command: demo, fit, predict."""

import io
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesord import RedSVM
from bayesord._compile_cache import cache_dir, compile_seconds
from bayesord.cli import _fitted_line, _warning_line, main
from bayesord.datasets import make_ordinal_probit


@pytest.mark.slow
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
    assert list(result.columns) == ["prediction", "P(y=1)", "P(y=2)", "P(y=3)"]
    np.testing.assert_allclose(result[["P(y=1)", "P(y=2)", "P(y=3)"]].sum(axis=1), 1.0, atol=1e-9)


def test_bad_target_is_reported_not_raised(tmp_path, capsys):
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0], "y": [1, 2]}).to_csv(data, index=False)
    assert main(["fit", str(data), "--target", "grade", "--out", str(tmp_path / "m.npz")]) == 2
    assert "grade" in capsys.readouterr().err


def test_text_labels_without_an_order_and_other_separators_are_explained(tmp_path, capsys):
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "y": ["low", "high", "mid"]}).to_csv(data, index=False)
    for formula in ([], ["--formula", "y ~ a"]):  # the same on both paths
        assert main(["fit", str(data), "--out", str(tmp_path / "m.npz"), "--quiet"] + formula) == 2
        err = capsys.readouterr().err
        assert ("labels in column 'y' are text (high, low, mid), which have no order of their own: "
                "list them with --classes") in err
    # A file written with semicolons reads as one column: the error says so.
    pd.DataFrame({"a": [1.0, 2.0], "y": [1, 2]}).to_csv(data, index=False, sep=";")
    assert main(["fit", str(data), "--out", str(tmp_path / "m.npz")]) == 2
    assert "the header looks semicolon-separated; CSV files here are comma-separated" in capsys.readouterr().err


@pytest.mark.slow
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
    np.testing.assert_allclose(result[["P(y=lo)", "P(y=mid)", "P(y=hi)"]], fitted.predict_proba(feats), rtol=1e-12)
    np.testing.assert_allclose(result[["sd P(y=lo)", "sd P(y=mid)", "sd P(y=hi)"]], fitted.predict_proba_std(feats),
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
    assert {"sd P(y=1)", "latent mean", "latent sd"} <= set(result.columns)
    assert np.all(result[["sd P(y=1)", "sd P(y=2)", "sd P(y=3)"]] >= 0)


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


def test_fit_with_a_text_column_points_to_the_formula(tmp_path, capsys):
    """A text feature column stops the plain fit with the way out: a formula codes it."""
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "region": ["x", "y", "x"], "grade": [1, 2, 3]}).to_csv(data, index=False)
    assert main(["fit", str(data), "--target", "grade", "--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err
    assert "['region'] are not numeric" in err and '--formula "grade ~ ."' in err


def test_a_formula_over_every_column_warns_of_a_saved_index(tmp_path, capsys):
    """'y ~ .' takes every column, a saved DataFrame index among them; a formula that names
    its columns does not, and says nothing."""
    data = tmp_path / "indexed.csv"
    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.normal(size=60), "grade": rng.integers(1, 4, 60)}).to_csv(data)
    assert main(["fit", str(data), "--formula", "grade ~ .", "--out", str(tmp_path / "m.npz"), "--quiet"]) == 0
    assert "warning: indexed.csv: column(s) ['Unnamed: 0'] have no name in the header" in capsys.readouterr().err
    assert main(["fit", str(data), "--formula", "grade ~ a", "--out", str(tmp_path / "n.npz"), "--quiet"]) == 0
    assert "Unnamed" not in capsys.readouterr().err


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
    assert "CuSumRank that was fitted without calibration, so it gives labels and scores only" in capsys.readouterr().err


@pytest.mark.slow  # the mixed model's compilation; the formula path itself is in the next test
def test_predict_takes_raw_text_columns_for_a_formula_model(tmp_path, datasets_dir):
    """A grouped model fitted from a formula in Python and saved: ``bayesord predict`` reads
    the raw CSV (text columns, the judge column) and the model codes it as in the fit."""
    from bayesord import OrdinalMixed

    wine = pd.read_csv(datasets_dir / "wine.csv.gz")
    model = OrdinalMixed.from_formula("rating ~ temp + contact + (1 | judge)", wine, link="logit")
    model.save(tmp_path / "mixed.npz")
    new = wine.head(6).assign(judge=[1, 2, 3, 77, 78, 79])  # three known judges, three new ones
    new.to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "p.csv"
    assert main(["predict", str(tmp_path / "mixed.npz"), str(tmp_path / "new.csv"), "--target", "rating",
                 "--uncertainty", "--out", str(out)]) == 0
    got = pd.read_csv(out)
    np.testing.assert_allclose(got[[f"P(y={c})" for c in model.classes_]].to_numpy(), model.predict_proba(new),
                               atol=1e-12)
    np.testing.assert_array_equal(got["prediction"], model.predict(new))
    # Fitted and calibrated by cross-fitting from the command line: sets for known and new judges.
    wine.to_csv(tmp_path / "wine.csv", index=False)
    assert main(["fit", str(tmp_path / "wine.csv"), "--formula", "rating ~ temp + contact + (1 | judge)",
                 "--link", "logit", "--calibrate", "3", "--out", str(tmp_path / "cli.npz"), "--quiet"]) == 0
    assert main(["predict", str(tmp_path / "cli.npz"), str(tmp_path / "new.csv"), "--target", "rating",
                 "--set", "0.2", "--out", str(out), "--force"]) == 0
    got = pd.read_csv(out)
    model.calibrate(wine, wine["rating"], cv=3)
    lower, upper = model.predict_set(new, 0.2)
    np.testing.assert_array_equal(got["set lower (alpha=0.2)"], lower)
    np.testing.assert_array_equal(got["set upper (alpha=0.2)"], upper)


def test_fit_from_a_formula_on_raw_text_columns(tmp_path, datasets_dir, capsys):
    """``fit --formula`` reads text columns as they are: nominal effects through the cumulative
    link model (clm's estimates), calibration by cross-fitting on the coded columns, and
    ``predict`` on the raw rows."""
    from bayesord import CumulativeLinkModel, load_model

    wine = pd.read_csv(datasets_dir / "wine.csv.gz")
    data = tmp_path / "wine.csv"
    wine.to_csv(data, index=False)
    model_path = tmp_path / "clm.npz"
    assert main(["fit", str(data), "--formula", "rating ~ temp", "--nominal", "~ contact", "--link", "logit",
                 "--calibrate", "3", "--out", str(model_path), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "threshold 2|3: contact[T.yes]" in printed and "CumulativeLinkModel from 'rating ~ temp'" in printed
    ref = CumulativeLinkModel.from_formula("rating ~ temp", wine, nominal="~ contact", link="logit")
    out = tmp_path / "p.csv"
    assert main(["predict", str(model_path), str(data), "--set", "0.1", "--out", str(out)]) == 0
    got = pd.read_csv(out)
    np.testing.assert_array_equal(got["prediction"], ref.predict(wine))
    assert np.all(got["set lower (alpha=0.1)"] <= got["set upper (alpha=0.1)"])
    # --risk distance: the sets of predict_set(risk="distance") on the loaded model.
    assert main(["predict", str(model_path), str(data), "--set", "0.1", "--risk", "distance", "--out", str(out),
                 "--force"]) == 0
    lower, upper = load_model(model_path).predict_set(wine, 0.1, risk="distance")
    got = pd.read_csv(out)
    np.testing.assert_array_equal(got["set lower (alpha=0.1)"], lower)
    np.testing.assert_array_equal(got["set upper (alpha=0.1)"], upper)
    assert main(["predict", str(model_path), str(data), "--risk", "distance"]) == 2
    assert "--risk goes with --set" in capsys.readouterr().err
    assert main(["fit", str(data), "--nominal", "~ contact", "--out", str(tmp_path / "x.npz")]) == 2
    assert "go with --formula" in capsys.readouterr().err
    assert main(["fit", str(data), "--formula", "rating ~ temp + (1 | judge)", "--model", "npsvor",
                 "--out", str(tmp_path / "x.npz")]) == 2
    assert "belong to the probit family" in capsys.readouterr().err


def test_a_formula_fit_calibrates_on_held_out_rows_coded_as_its_own(tmp_path, capsys):
    """``fit --formula --calibrate-on CSV`` codes the held-out rows through the formula (a text
    column, raw scales): the saved model's sets and probabilities are those of the same model
    fitted and calibrated in Python, and TOR's unlabeled rows are coded the same way.  A file
    without the response is refused before fitting, and so is --unlabeled for another model."""
    from bayesord import CuSumRank, TransductiveOrdinalRegression, load_model

    X, y, _ = make_ordinal_probit(900, 2, 4, seed=3)
    frame = pd.DataFrame({"dose": X[:, 0] * 40 + 300, "age": X[:, 1] * 9 + 50,
                          "site": np.array(["north", "south", "east"])[np.arange(900) % 3], "y": y})
    paths = {}
    for name, rows in (("train", slice(0, 300)), ("cal", slice(300, 600)), ("test", slice(600, 900))):
        paths[name] = tmp_path / f"{name}.csv"
        frame[rows].to_csv(paths[name], index=False)
    model_path = tmp_path / "m.npz"
    assert main(["fit", str(paths["train"]), "--formula", "y ~ .", "--model", "cusum", "--seed", "0",
                 "--calibrate-on", str(paths["cal"]), "--out", str(model_path), "--quiet"]) == 0
    assert "on the 300 held-out rows of" in capsys.readouterr().out
    ref = CuSumRank.from_formula("y ~ .", frame[:300], random_state=0)
    ref.calibrate(frame[300:600], frame["y"][300:600], random_state=0)
    test = frame[600:]
    out = tmp_path / "p.csv"
    assert main(["predict", str(model_path), str(paths["test"]), "--set", "0.1", "--proba", "--out", str(out)]) == 0
    got = pd.read_csv(out)
    lower, upper = ref.predict_set(test, 0.1)
    np.testing.assert_array_equal(got["set lower (alpha=0.1)"], lower)
    np.testing.assert_array_equal(got["set upper (alpha=0.1)"], upper)
    np.testing.assert_allclose(got[[f"P(y={k})" for k in range(1, 5)]], ref.predict_proba(test), rtol=1e-10)
    np.testing.assert_array_equal(load_model(model_path).predict_set(test, 0.1)[0], lower)
    frame[300:600].drop(columns="y").to_csv(tmp_path / "no_y.csv", index=False)
    tor_path = tmp_path / "tor.npz"
    assert main(["fit", str(paths["train"]), "--formula", "y ~ .", "--model", "tor", "--seed", "0",
                 "--unlabeled", str(paths["test"]), "--out", str(tor_path), "--quiet"]) == 0
    tor = TransductiveOrdinalRegression.from_formula("y ~ .", frame[:300], X_unlabeled=test, random_state=0)
    np.testing.assert_array_equal(load_model(tor_path).transduction_, tor.transduction_)
    np.testing.assert_array_equal(load_model(tor_path).predict(test), tor.predict(test))
    for extra, match in ((["--calibrate-on", str(tmp_path / "no_y.csv")], "has no column 'y'"),
                         (["--model", "cusum", "--unlabeled", str(paths["test"])], "applies to --model tor")):
        assert main(["fit", str(paths["train"]), "--formula", "y ~ .", "--out", str(tmp_path / "x.npz"),
                     "--quiet", *extra]) == 2
        assert match in capsys.readouterr().err and not (tmp_path / "x.npz").exists()


def test_separated_classes_are_not_answered_with_more_iterations(tmp_path, capsys):
    """The evidence fit of separated classes warns why it has no optimum; the command's
    advice for iteration caps (more iterations) cannot help there and is left out, and the
    fix the warning names is given as the command's options, which fit without a warning."""
    x = np.linspace(-2.0, 2.0, 60) * 30.0 + 500.0
    data = tmp_path / "sep.csv"
    pd.DataFrame({"dose": x, "noise": np.cos(np.arange(60.0)), "y": np.digitize(x, [479.0, 518.0])}).to_csv(
        data, index=False)
    assert main(["fit", str(data), "--out", str(tmp_path / "m.npz"), "--quiet"]) == 0
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert "the columns separate the classes completely" in line and "try more iterations" not in line
    assert line.endswith("on the command line: --thresholds joint --alpha 1")
    assert main(["fit", str(data), "--out", str(tmp_path / "j.npz"), "--quiet", "--thresholds", "joint",
                 "--alpha", "1", "--force"]) == 0
    assert "warning" not in capsys.readouterr().err  # the fixed prior gives finite coefficients


def test_compile_seconds_counts_the_programs_made_inside_the_block():
    import jax
    import jax.numpy as jnp

    new = jax.jit(lambda x: jnp.cos(x) * 7.25 - x)  # a program no other test makes
    with compile_seconds() as made:
        new(jnp.arange(11.0)).block_until_ready()
    assert made["compiling"] > 0 and made["loading"] <= made["compiling"]
    with compile_seconds() as again:
        new(jnp.arange(11.0)).block_until_ready()  # compiled: nothing to make
    assert again == {"compiling": 0.0, "loading": 0.0}


def test_the_fit_line_says_how_much_was_compiling(monkeypatch):
    import bayesord.cli as cli

    monkeypatch.setattr(cli, "cache_dir", lambda: Path("/cache"))
    assert _fitted_line("M", 2.5, {"compiling": 2.3, "loading": 0.0}) == (
        "fit: M fitted in 2.5 s, 2.3 s of it compiling (later runs of these shapes read the programs from the cache)")
    assert _fitted_line("M", 0.6, {"compiling": 0.35, "loading": 0.31}) == (
        "fit: M fitted in 0.6 s, 0.3 s of it reading compiled programs from the cache")
    assert _fitted_line("M", 0.1, {"compiling": 0.05, "loading": 0.0}) == "fit: M fitted in 0.1 s"
    assert _fitted_line("M", 2.5, {"compiling": 2.3, "loading": 0.0}, solver_lines=True).endswith(
        "2.3 s of it compiling (the solver with its line at every iteration (verbose=2) is compiled in every run)")
    monkeypatch.setattr(cli, "cache_dir", lambda: None)
    assert _fitted_line("M", 2.5, {"compiling": 2.3, "loading": 0.0}).endswith(
        "2.3 s of it compiling (the on-disk cache is off: every run compiles)")


def test_compile_cache_location():
    home_cache = Path("~/.cache").expanduser() / "bayesord" / "jax"
    assert cache_dir({}) == home_cache
    assert cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/bayesord/jax")
    assert cache_dir({"BAYESORD_COMPILE_CACHE": "/y/c", "XDG_CACHE_HOME": "/x"}) == Path("/y/c")
    assert cache_dir({"BAYESORD_COMPILE_CACHE": "OFF"}) is None


@pytest.mark.parametrize("argv", [
    ["--help"], ["fit", "--help"], ["fit"], ["fit", "d.csv", "--model", "nope"],
    ["fit", "missing.csv", "--out", "m.npz"],
    ["fit", "d.csv", "--formula", "y ~ x", "--model", "isbor", "--out", "m.npz"],
    ["fit", "d.csv", "--out", "d.csv"],
    ["predict", "missing.npz", "d.csv"],
    ["predict", "m.npz", "missing.csv"],
    ["predict", "m.npz", "d.csv", "--risk", "fnr"],
])
def test_help_and_argument_errors_do_not_import_jax(argv, tmp_path):
    """The command answers these before importing JAX, so they take a fraction of a second:
    argument errors, and the errors found in the files named (a missing file, an output that
    would overwrite an input) before any model is made or loaded."""
    (tmp_path / "d.csv").write_text("x,y\n1.0,1\n2.0,2\n")
    (tmp_path / "m.npz").write_bytes(b"not read")
    probe = ("import sys\nfrom bayesord.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
             "except SystemExit as done:\n    code = done.code\n"
             "print('jax imported' if 'jax' in sys.modules else 'no jax', code)")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:-1] == ["no", "jax"]
    assert done.stdout.split()[-1] == ("0" if "--help" in argv else "2")


def test_a_fit_without_warnings_does_not_import_scikit_learn(tmp_path):
    """Importing scikit-learn costs 0.6-0.7 s (its ``sklearn.base`` loads ``scipy.stats``);
    the estimators keep its protocol without it and import it only for its own types (a
    warning's category, ``NotFittedError``, the tags it asks for)."""
    (tmp_path / "d.csv").write_text("a,b,y\n" + "".join(f"{i % 7},{(i * 3) % 5},{1 + i % 3}\n" for i in range(40)))
    probe = ("import sys\nfrom bayesord.cli import main\n"
             "code = main(['fit', 'd.csv', '--model', 'probit', '--thresholds', 'joint', '--alpha', '1', "
             "'--out', 'm.npz', '--quiet'])\n"
             "code += main(['predict', 'm.npz', 'd.csv', '--proba'])\n"
             "print('sklearn imported' if 'sklearn' in sys.modules else 'no sklearn', code)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == ["no", "sklearn", "0"]


def test_the_command_process_exits_with_mains_code_and_output(tmp_path):
    """``python -m bayesord.cli`` (as the installed command) ends with os._exit after main:
    the exit code and the error line still come through."""
    (tmp_path / "d.csv").write_text("x,y\n1.0,1\n2.0,2\n")
    done = subprocess.run([sys.executable, "-m", "bayesord.cli", "predict", "missing.npz", "d.csv"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("bayesord predict: error:") and "missing.npz" in done.stderr


def test_a_reader_that_leaves_early_is_not_an_error(tmp_path):
    """``bayesord fit ... | head -c 1``: the rest of the output is dropped, the model is
    saved and the command exits 0 (a user's trial: "error: [Errno 32] Broken pipe", exit 2,
    after a fit that had been saved)."""
    (tmp_path / "d.csv").write_text("a,b,y\n" + "".join(f"{i % 7},{(i * 3) % 5},{1 + i % 3}\n" for i in range(40)))
    with subprocess.Popen([sys.executable, "-m", "bayesord.cli", "fit", "d.csv", "--model", "probit",
                           "--thresholds", "joint", "--alpha", "1", "--out", "m.npz"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path) as proc:
        proc.stdout.read(1)
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        code = proc.wait(timeout=300)
    assert code == 0 and "error" not in stderr, stderr
    assert (tmp_path / "m.npz").exists()


def test_the_command_collects_garbage_again_once_its_imports_are_frozen():
    """The installed command (``run``) turns the collector off at its start; where a command
    first needs JAX the estimators are imported, their objects frozen and the collector turned
    back on.  A caller of ``main`` (these tests) keeps its collector as it was."""
    probe = ("import gc, sys\nfrom bayesord import cli\ngc.disable()\ncli._configure_jax()\n"
             "print(gc.isenabled(), gc.get_freeze_count() > 10000, 'bayesord.estimators' in sys.modules)\n"
             "gc.unfreeze()\ncli._configure_jax()\nprint(gc.isenabled(), gc.get_freeze_count())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True", "True", "0"]


@pytest.mark.slow
def test_the_library_keeps_compiled_programs_between_processes(tmp_path):
    """``bayesord.OrdinalProbit`` turns the on-disk cache on: a second process reads it."""
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["BAYESORD_COMPILE_CACHE"] = str(cache)
    script = ("import jax, numpy as np, bayesord\njax.config.update('jax_enable_x64', True)\n"
              "X, y, _ = bayesord.datasets.make_ordinal_probit(60, 2, 3, seed=1)\n"
              "print(bayesord.OrdinalProbit(thresholds='joint').fit(X, y).coef_.round(12).tolist())")
    outputs = []
    for run in range(2):
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
        if run == 0:
            written = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
            assert written
    assert outputs[0] == outputs[1]
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == written  # read, not rewritten


@pytest.mark.slow
def test_the_command_keeps_compiled_programs_between_runs(tmp_path):
    """A fit in a fresh process writes the cache; a second one reads it (same output)."""
    from bayesord import load_model

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
        # The process ends with os._exit: its output and model file are complete all the same.
        assert done.stdout.rstrip().endswith(f"saved to {tmp_path / f'm{run}.npz'}")
        np.testing.assert_array_equal(load_model(tmp_path / f"m{run}.npz").predict(X),
                                      load_model(tmp_path / "m0.npz").predict(X))
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
    """The saved file predicts exactly what the same estimator fitted in Python on the
    standardised columns predicts, and takes raw rows; --no-standardize fits the raw columns."""
    import bayesord
    from bayesord import load_model
    from bayesord._registry import COMMANDS

    X, y, _ = make_ordinal_probit(80, 2, 3, seed=7)
    frame = pd.DataFrame(X, columns=["a", "b"])
    labels = np.array(["lo", "mid", "hi"])[y - 1]
    data = tmp_path / "d.csv"
    frame.assign(y=labels).to_csv(data, index=False)
    cls = getattr(bayesord, COMMANDS[model].name)
    for standardize in (True, False):
        path = tmp_path / f"m{standardize}.npz"
        assert main(["fit", str(data), "--out", str(path), "--model", model, "--classes", "lo,mid,hi",
                     "--quiet", *extra, *([] if standardize else ["--no-standardize"])]) == 0
        text = capsys.readouterr().out
        fitted = load_model(path)
        assert type(fitted) is cls and list(fitted.classes_) == ["lo", "mid", "hi"]
        assert "training rows 80: MAE" in text and f"saved to {path}" in text
        # A perceptron runs its epochs (converged_ means an epoch without updates, when asked).
        assert ("converged" in text) is (model not in ("cusum", "prank"))
        assert ("epochs 10; " in text and "online mistakes in the last epoch" in text) is (model in ("cusum", "prank"))
        assert ("standardised the 2 feature columns" in text) is standardize
        if standardize:
            np.testing.assert_allclose(fitted.input_center_, frame.mean(), rtol=1e-12)
            np.testing.assert_allclose(fitted.input_scale_, frame.std(ddof=0), rtol=1e-12)
            seen = (frame - fitted.input_center_) / fitted.input_scale_
        else:
            assert not hasattr(fitted, "input_center_")
            seen = frame
        reference = cls(**fitted.get_params()).fit(seen, labels, classes=["lo", "mid", "hi"])
        np.testing.assert_array_equal(fitted.predict(frame), reference.predict(seen))
        assert main(["predict", str(path), str(data)]) == 0
        printed = pd.read_csv(io.StringIO(capsys.readouterr().out))["prediction"]
        np.testing.assert_array_equal(printed, reference.predict(seen))


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
    fitted = load_model(path)
    center, scale = fitted.input_center_, fitted.input_scale_  # of the labeled rows
    np.testing.assert_allclose(center, labeled[["a", "b"]].mean(), rtol=1e-12)
    reference = TransductiveOrdinalRegression(random_state=0).fit(
        (labeled[["a", "b"]] - center) / scale, y[:40], X_unlabeled=(unlabeled[["a", "b"]] - center) / scale)
    np.testing.assert_array_equal(fitted.transduction_, reference.transduction_)
    counts = ", ".join(f"{c}: {np.sum(reference.transduction_ == c)}" for c in (1, 2, 3))
    assert f"unlabeled rows 80: {counts}; {reference.n_swaps_} swaps" in text
    pd.DataFrame({"a": [1.0]}).to_csv(tmp_path / "bad.csv", index=False)
    assert main(["fit", str(tmp_path / "l.csv"), "--out", str(path), "--model", "tor", "--unlabeled",
                 str(tmp_path / "bad.csv"), "--quiet"]) == 2
    assert "lacks feature columns ['b']" in capsys.readouterr().err


# ------------------------------------------------------------------ a command that cannot lose data

def _files(folder):
    """Every file under ``folder`` with its bytes (to show that nothing was written or lost)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, argv, match):
    """The command exits 2 with one line ``bayesord <cmd>: error: ...`` holding ``match``."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"bayesord {argv[0]}: error: ") and match in lines[0], lines[0]


def _table(tmp_path, name="d.csv", n=60, seed=3, offset=(0.0, 0.0)):
    X, y, _ = make_ordinal_probit(n, 2, 3, seed=seed)
    path = tmp_path / name
    pd.DataFrame(X + offset, columns=["a", "b"]).assign(y=y).to_csv(path, index=False)
    return path


def test_fit_never_writes_over_an_input(tmp_path, capsys):
    data = _table(tmp_path)
    unlabeled = _table(tmp_path, "u.csv", seed=4)
    (tmp_path / "sub").mkdir()
    before = _files(tmp_path)
    for out in (data, tmp_path / "sub" / ".." / "d.csv"):
        for force in ([], ["--force"]):
            _refused(capsys, ["fit", str(data), "--out", str(out), "--model", "prank", "--quiet", *force],
                     f"argument --out: {out} is the DATA file; writing there would destroy it")
    _refused(capsys, ["fit", str(data), "--out", str(unlabeled), "--model", "tor", "--unlabeled", str(unlabeled),
                      "--force", "--quiet"], "is the --unlabeled file")
    assert _files(tmp_path) == before


def test_an_existing_out_is_replaced_only_with_force(tmp_path, capsys):
    data = _table(tmp_path)
    model = tmp_path / "m.npz"
    model.write_bytes(b"an older model")
    before = _files(tmp_path)
    _refused(capsys, ["fit", str(data), "--out", str(model), "--model", "prank", "--quiet"],
             f"argument --out: {model} exists; pass --force to replace it")
    assert _files(tmp_path) == before
    assert main(["fit", str(data), "--out", str(model), "--model", "prank", "--quiet", "--force"]) == 0
    assert sorted(_files(tmp_path)) == ["d.csv", "m.npz"]  # replaced, no temporary left behind
    assert oct(model.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    preds = tmp_path / "p.csv"
    preds.write_text("keep me\n")
    capsys.readouterr()
    _refused(capsys, ["predict", str(model), str(data), "--out", str(preds)], "exists; pass --force")
    _refused(capsys, ["predict", str(model), str(data), "--out", str(data), "--force"], "is the DATA file")
    _refused(capsys, ["predict", str(model), str(data), "--out", str(model), "--force"], "is the MODEL file")
    assert preds.read_text() == "keep me\n"
    assert main(["predict", str(model), str(data), "--out", str(preds), "--force"]) == 0
    assert list(pd.read_csv(preds).columns) == ["prediction"]


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("where, match", [
    ("missing/m.npz", "folder {tmp}/missing does not exist"),
    ("folder", "{tmp}/folder is a folder; give a file name"),
    ("locked/m.npz", "folder {tmp}/locked is not writable"),
])
def test_output_paths_are_checked_before_fitting(tmp_path, capsys, monkeypatch, where, match):
    import bayesord.cli

    data = _table(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "locked").mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: "locked" not in str(p) and real_access(p, mode))
    monkeypatch.setattr(bayesord.cli, "_fit_reporting", lambda *a: pytest.fail("fitted before checking --out"))
    before = _files(tmp_path)
    _refused(capsys, ["fit", str(data), "--out", str(tmp_path / where), "--quiet"],
             "argument --out: " + match.format(tmp=tmp_path))
    assert _files(tmp_path) == before


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, capsys, monkeypatch):
    import bayesord.estimators._base as base

    data = _table(tmp_path)
    model = tmp_path / "m.npz"
    model.write_bytes(b"an older model")
    before = _files(tmp_path)

    def half_written(est, path, arrays, meta):
        Path(path).write_bytes(b"PK half a model")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(base, "_write_model_file", half_written)
    _refused(capsys, ["fit", str(data), "--out", str(model), "--model", "prank", "--force", "--quiet"],
             "No space left on device")
    assert _files(tmp_path) == before


def test_a_damaged_or_edited_model_file_is_one_line_and_exit_2(tmp_path, capsys):
    """Before, n_features_in edited from 2 to 5 loaded, and predict failed inside JAX's dot_general."""
    import json

    data = _table(tmp_path)
    model = tmp_path / "m.npz"
    assert main(["fit", str(data), "--out", str(model), "--thresholds", "joint", "--quiet"]) == 0
    capsys.readouterr()
    raw = model.read_bytes()
    with np.load(model) as saved:
        entries = {k: saved[k] for k in saved.files}
    meta = json.loads(bytes(entries.pop("meta")).decode())
    for name, change in (("edited.npz", {"n_features_in": 5, "feature_names": None}),
                         ("renamed.npz", {"n_features_in": 5})):
        np.savez(tmp_path / name, meta=np.frombuffer(json.dumps(dict(meta, **change)).encode(), np.uint8),
                 **entries)
    no_meta = tmp_path / "no_meta.npz"
    np.savez(no_meta, **entries)
    cases = {
        "flipped.npz": (raw[:300] + bytes([raw[300] ^ 0xFF]) + raw[301:], "is damaged"),
        "truncated.npz": (raw[: len(raw) // 3],
                          "is not a model saved by bayesord (not an .npz archive, or one cut short)"),
        "text.npz": (b"a,b\n1,2\n", "is not a model saved by bayesord"),
    }
    for name, (content, _) in cases.items():
        (tmp_path / name).write_bytes(content)
    cases["edited.npz"] = (None, "does not hold a consistent OrdinalProbit (result.center has shape (2,), "
                                 "but the model has 5 features and 3 classes, so it must be (5,)); it was "
                                 "damaged or edited after saving")
    cases["renamed.npz"] = (None, "does not hold a consistent OrdinalProbit (2 feature names but n_features_in=5)")
    cases["no_meta.npz"] = (None, "is an .npz archive but not a model saved by bayesord (no 'meta' entry)")
    before = _files(tmp_path)
    for name, (_, match) in cases.items():
        _refused(capsys, ["predict", str(tmp_path / name), str(data), "--out", str(tmp_path / "p.csv")],
                 f"{tmp_path / name} {match}")
    assert _files(tmp_path) == before


def test_empty_csv_files_name_the_file_and_the_argument(tmp_path, capsys):
    data = _table(tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    header = tmp_path / "header.csv"
    header.write_text("a,b,y\n")
    model = tmp_path / "m.npz"
    _refused(capsys, ["fit", str(empty), "--out", str(model), "--quiet"], "argument DATA: empty.csv is empty")
    _refused(capsys, ["fit", str(header), "--out", str(model), "--quiet"],
             "argument DATA: header.csv has a header but no rows")
    _refused(capsys, ["fit", str(data), "--out", str(model), "--model", "tor", "--unlabeled", str(header),
                      "--quiet"], f"argument --unlabeled: {header} has a header but no rows")
    assert not model.exists()
    assert main(["fit", str(data), "--out", str(model), "--model", "prank", "--quiet"]) == 0
    capsys.readouterr()
    _refused(capsys, ["predict", str(model), str(empty)], f"argument DATA: {empty} is empty")
    _refused(capsys, ["predict", str(model), str(header)], f"argument DATA: {header} has a header but no rows")


def test_classes_of_the_wrong_kind_say_what_is_wrong(tmp_path, capsys):
    data = _table(tmp_path)
    _refused(capsys, ["fit", str(data), "--out", str(tmp_path / "m.npz"), "--classes", "a,b,c", "--quiet"],
             "argument --classes: 'a' is not an integer, but the labels in column 'y' are (1, 2, 3); "
             "list those labels, lowest first, e.g. --classes 1,2,3")
    assert main(["fit", str(data), "--out", str(tmp_path / "m.npz"), "--classes", "1, 2, 3", "--model", "prank",
                 "--quiet"]) == 0


# ------------------------------------------------------------------ standardised columns

def test_fit_standardises_and_predict_takes_raw_rows(tmp_path, capsys):
    """Columns far from zero (offsets 10^4, 10^6 sd): the model file keeps the transform, so
    `bayesord predict` and a model loaded in Python both take the raw rows."""
    from bayesord import NPSVOR, load_model

    data = _table(tmp_path, n=120, offset=(1e4, -3e6))
    model = tmp_path / "m.npz"
    assert main(["fit", str(data), "--out", str(model), "--model", "npsvor", "--quiet"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("standardised the 2 feature columns (mean 0, sd 1 over the 120 training rows)")
    assert out.err == ""  # no scale warning, and NPSVOR converged
    raw = pd.read_csv(data)
    fitted = load_model(model)
    np.testing.assert_allclose(fitted.input_center_, raw[["a", "b"]].mean(), rtol=1e-12)
    assert main(["predict", str(model), str(data)]) == 0
    printed = pd.read_csv(io.StringIO(capsys.readouterr().out))["prediction"]
    np.testing.assert_array_equal(printed, fitted.predict(raw[["a", "b"]]))
    assert np.mean(printed == raw["y"]) > 0.7
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # raw columns: scale and convergence warnings, tested elsewhere
        assert not hasattr(NPSVOR().fit(raw[["a", "b"]], raw["y"]), "input_center_")
        assert not hasattr(fitted.fit(raw[["a", "b"]], raw["y"]), "input_center_")  # a refit starts afresh


def test_constant_columns_are_centred_only(tmp_path, capsys):
    from bayesord import load_model

    data = tmp_path / "d.csv"
    X, y, _ = make_ordinal_probit(60, 2, 3, seed=5)
    pd.DataFrame(X, columns=["a", "b"]).assign(c=7.0, y=y).to_csv(data, index=False)
    assert main(["fit", str(data), "--out", str(tmp_path / "m.npz"), "--model", "prank", "--quiet"]) == 0
    assert "constant column(s) ['c'] only centred" in capsys.readouterr().out
    fitted = load_model(tmp_path / "m.npz")
    assert fitted.input_center_[2] == 7.0 and fitted.input_scale_[2] == 1.0


def test_raw_columns_get_one_warning_line_and_a_failed_fit_says_what_to_try(tmp_path, capsys):
    data = _table(tmp_path, n=120, offset=(0.0, 1e5))
    assert main(["fit", str(data), "--out", str(tmp_path / "m.npz"), "--model", "npsvor", "--quiet",
                 "--no-standardize", "--param", "max_iter=3"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("bayesord fit: warning: ") for line in lines)
    scale, one_class, converge = lines
    assert "NPSVOR predicts " in one_class and "training rows, whose labels hold 3 classes" in one_class
    assert "NPSVOR: columns whose mean is more than 1000 standard deviations from zero" in scale
    assert "'b'" in scale and "StandardScaler" in scale
    assert "NPSVOR: stopped at the iteration cap" in converge
    assert "sub-problems did not converge (the rank problems of classes" in converge
    assert ("try more iterations (--param max_iter=30), a smaller C (--param C=0.1), standardised "
            "columns (leave out --no-standardize)") in converge


def _calibration_files(tmp_path):
    X, y, _ = make_ordinal_probit(1400, 3, 4, seed=2)
    frame = pd.DataFrame(X * [1.0, 100.0, 0.01] + [50.0, 1e3, 3.0], columns=["a", "b", "c"]).assign(y=y)
    paths = {}
    for name, rows in (("train", slice(0, 300)), ("cal", slice(300, 700)), ("test", slice(700, 1400))):
        paths[name] = tmp_path / f"{name}.csv"
        frame[rows].to_csv(paths[name], index=False)
    return paths, frame[700:]


@pytest.mark.slow
def test_a_margin_model_calibrated_from_the_command_predicts_probabilities_and_sets(tmp_path, capsys):
    from bayesord import load_model

    paths, test = _calibration_files(tmp_path)
    model = tmp_path / "m.npz"
    assert main(["fit", str(paths["train"]), "--out", str(model), "--model", "cusum",
                 "--calibrate-on", str(paths["cal"]), "--quiet"]) == 0
    assert "calibrated prediction sets and probabilities on the 400 held-out rows" in capsys.readouterr().out
    preds = tmp_path / "p.csv"
    assert main(["predict", str(model), str(paths["test"]), "--uncertainty", "--set", "0.1,0.3",
                 "--out", str(preds)]) == 0
    result = pd.read_csv(preds)
    fitted = load_model(model)
    feats = test[["a", "b", "c"]]
    lower, upper = fitted.predict_set(feats, [0.1, 0.3])
    np.testing.assert_array_equal(result["set lower (alpha=0.1)"], lower[:, 0])
    np.testing.assert_array_equal(result["set upper (alpha=0.3)"], upper[:, 1])
    np.testing.assert_allclose(result[[f"P(y={k})" for k in range(1, 5)]], fitted.predict_proba(feats), rtol=1e-12)
    assert "latent mean" not in result.columns and "sd P(y=4)" in result.columns
    covered = (result["set lower (alpha=0.1)"] <= test["y"].to_numpy()) & (
        test["y"].to_numpy() <= result["set upper (alpha=0.1)"])
    assert covered.mean() >= 0.86


@pytest.mark.parametrize("fit_extra, predict_extra, match", [
    ([], ["--set", "0.1"], "fitted without calibration"),
    pytest.param(["--calibrate", "3"], ["--set", "1.5"], "strictly between 0 and 1", marks=pytest.mark.slow),
    pytest.param(["--calibrate", "3"], ["--set", "ten"], "expected miscoverage rates", marks=pytest.mark.slow),
])
def test_prediction_sets_from_the_command_say_what_is_missing(tmp_path, capsys, fit_extra, predict_extra, match):
    paths, _ = _calibration_files(tmp_path)
    model = tmp_path / "m.npz"
    assert main(["fit", str(paths["train"]), "--out", str(model), "--model", "cusum", "--quiet", *fit_extra]) == 0
    capsys.readouterr()
    assert main(["predict", str(model), str(paths["test"]), *predict_extra]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_calibration_options_are_checked_before_fitting(tmp_path, capsys):
    paths, _ = _calibration_files(tmp_path)
    other = tmp_path / "other.csv"
    pd.read_csv(paths["cal"]).rename(columns={"c": "d"}).to_csv(other, index=False)
    for extra, match in ((["--calibrate", "3", "--calibrate-on", str(paths["cal"])], "not both"),
                         (["--calibrate-on", str(other)], "has feature columns"),
                         (["--calibrate-on", str(paths["train"])], "that is the DATA file"),
                         (["--calibrate", "3", "--param", "calibration_cv=3"], "give one of them"),
                         (["--formula", "y ~ .", "--calibrate-on", str(paths["cal"]), "--param",
                           "calibration_cv=3"], "give one of them")):
        out = tmp_path / "m.npz"
        assert main(["fit", str(paths["train"]), "--out", str(out), "--quiet", *extra]) == 2
        assert match in capsys.readouterr().err and not out.exists()


def test_warnings_that_advise_a_parameter_say_how_to_set_it_here(capsys):
    """RED-SVM's one-class warning names loss='logistic', Python's words; the command line
    adds its own (--param loss=logistic)."""
    _warning_line("fit", f"RedSVM predicts 1 for every row. {RedSVM()._one_class_hint}")
    err = capsys.readouterr().err
    assert err.startswith("bayesord fit: warning: RedSVM predicts 1")
    assert err.rstrip().endswith("; on the command line: --param loss=logistic (or --param loss=squared_hinge)")


def test_calibration_says_how_many_folds_it_made(tmp_path, capsys):
    """A class of 3 rows makes 3 stratified folds of the 5 asked: the warning and the summary
    line say 3 (the summary said 5)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.digitize(X[:, 0], [-0.5, 0.5]) + 1
    y[np.flatnonzero(y == 3)[3:]] = 2  # class 3 keeps three rows
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "y": y}).to_csv(data, index=False)
    assert main(["fit", str(data), "--out", str(tmp_path / "m.npz"), "--model", "cusum", "--calibrate", "5"]) == 0
    out = capsys.readouterr()
    assert "3 folds, not 5" in out.err
    assert "on 3-fold cross-fitting on the 60 training rows" in out.out


def test_the_printed_summary_keeps_small_numbers():
    """A coefficient per unit of a raw column (an income: -8e-7, sd 2e-6) printed as -0.0000
    0.0000 in four decimals; it keeps four significant figures."""
    from bayesord.cli import _summary_text

    class Fitted:
        def summary(self):
            return pd.DataFrame({"mean": [-8.158e-07, -0.1075, 0.0], "sd": [2.154e-06, 0.0154, np.nan]},
                                index=["income", "affairs", "zero"])

    lines = _summary_text(Fitted()).splitlines()
    assert lines[1].split() == ["income", "-8.158e-07", "2.154e-06"]
    assert lines[2].split() == ["affairs", "-0.1075", "0.0154"]
    assert lines[3].split() == ["zero", "0.0000", "-"]


def test_a_weight_column_weighs_the_rows_and_is_no_feature(tmp_path, capsys):
    """``--weights COLUMN`` (a survey analyst's trial: ``--param sample_weight=`` was refused,
    and ``y ~ .`` fitted the weight column as a predictor)."""
    from bayesord import OrdinalProbit, load_model

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=80), "b": rng.normal(size=80), "w": rng.uniform(0.5, 2.0, 80)})
    frame["y"] = np.digitize(frame["a"] - frame["b"] + rng.normal(size=80), [-1.0, 1.0]) + 1
    frame.to_csv(tmp_path / "d.csv", index=False)
    X, y, w = frame[["a", "b"]].to_numpy(), frame["y"].to_numpy(), frame["w"].to_numpy()
    assert main(["fit", str(tmp_path / "d.csv"), "--weights", "w", "--no-standardize", "--out",
                 str(tmp_path / "m.npz")]) == 0
    fitted = load_model(tmp_path / "m.npz")
    expected = OrdinalProbit().fit(X, y, sample_weight=w)
    assert fitted.n_features_in_ == 2
    np.testing.assert_allclose(fitted.coef_, expected.coef_, rtol=1e-8)
    assert main(["fit", str(tmp_path / "d.csv"), "--formula", "y ~ .", "--weights", "w", "--out",
                 str(tmp_path / "f.npz")]) == 0
    by_formula = load_model(tmp_path / "f.npz")
    assert list(by_formula.feature_names_in_) == ["a", "b"]
    np.testing.assert_allclose(by_formula.coef_, expected.coef_, rtol=1e-8)
    capsys.readouterr()
    bad = frame.assign(w=np.where(np.arange(80) == 3, -1.0, frame["w"]), t=["x"] * 80)
    bad.to_csv(tmp_path / "bad.csv", index=False)
    for data, extra, message in [
            ("d.csv", ["--weights", "v"], "has no column 'v'"),
            ("d.csv", ["--weights", "y"], "'y' is the target column"),
            ("bad.csv", ["--weights", "y", "--formula", "y ~ a"], "'y' is the formula's response"),
            ("bad.csv", ["--weights", "w", "--formula", "y ~ a"],
             r"1 missing, infinite or negative weight\(s\) \(first rows, 0-based: \[3\]\)"),
            ("bad.csv", ["--weights", "t", "--formula", "y ~ a"], "column 't' is not numeric")]:
        assert main(["fit", str(tmp_path / data), *extra, "--out", str(tmp_path / "x.npz")]) == 2
        assert re.search(message, capsys.readouterr().err), message


def test_a_fit_that_fails_numerically_is_one_error_line(tmp_path, capsys, monkeypatch):
    """A solver's FloatingPointError (a Cholesky factorisation that failed) came out as a
    traceback and exit status 1."""
    from bayesord import OrdinalProbit

    def failing(self, *args, **kwargs):
        raise FloatingPointError("OrdinalProbit: a matrix that must be positive definite failed its Cholesky "
                                 "factorisation")

    monkeypatch.setattr(OrdinalProbit, "fit", failing)
    (tmp_path / "d.csv").write_text("a,y\n" + "".join(f"{i % 7},{1 + i % 3}\n" for i in range(30)))
    assert main(["fit", str(tmp_path / "d.csv"), "--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("bayesord fit: error: OrdinalProbit: a matrix that must be positive definite")
    assert [line for line in err if "error" in line or "Traceback" in line] == err[-1:]
