"""Formulas: ``.`` as every column but the response, as in R (``y ~ .``), column names that
are not Python names, and rows with missing values, which a formula model refuses instead of
dropping."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm
from sklearn.base import clone as sklearn_clone
from sklearn.model_selection import KFold, cross_val_score

from bayesord import NPSVOR, CumulativeLinkModel, OrdinalMixed, OrdinalProbit, PRank, load_model
from bayesord.cli import main
from bayesord.datasets import make_ordinal_probit
from bayesord.estimators._base import clone
from bayesord.estimators._formula import split_formula


@pytest.fixture(scope="module")
def frame():
    """Raw-looking columns (a large mean, a small scale), a text column, and the response."""
    X, y, _ = make_ordinal_probit(300, 2, 3, seed=4)
    rng = np.random.default_rng(4)
    return pd.DataFrame({"dose": 200.0 + 30.0 * X[:, 0], "ph": 7.0 + 0.01 * X[:, 1],
                         "site": rng.choice(["a", "b", "c"], 300), "y": y})


@pytest.mark.parametrize("cls", [OrdinalProbit, CumulativeLinkModel])
def test_dot_is_every_column_but_the_response(frame, cls):
    dot = cls.from_formula("y ~ .", frame)
    named = cls.from_formula("y ~ dose + ph + site", frame)
    assert "y" not in dot.feature_names_in_
    np.testing.assert_array_equal(dot.feature_names_in_, named.feature_names_in_)
    np.testing.assert_allclose(dot.coef_, named.coef_, rtol=1e-10)
    new = frame.drop(columns="y")  # new rows come without the response
    np.testing.assert_array_equal(dot.predict(new), named.predict(frame))
    np.testing.assert_allclose(dot.predict_proba(new), named.predict_proba(frame), rtol=1e-10)


def test_command_line_formula_with_dot_predicts_rows_without_the_response(frame, tmp_path):
    train, new, out, model = (tmp_path / n for n in ("train.csv", "new.csv", "p.csv", "m.npz"))
    frame.to_csv(train, index=False)
    frame.drop(columns="y").to_csv(new, index=False)
    assert main(["fit", str(train), "--formula", "y ~ .", "--out", str(model), "--quiet"]) == 0
    assert main(["predict", str(model), str(new), "--out", str(out)]) == 0
    ref = OrdinalProbit.from_formula("y ~ dose + ph + site", frame)
    np.testing.assert_array_equal(pd.read_csv(out)["prediction"], ref.predict(frame))


def _coded(frame):
    """The reference coding, by hand: site as treatment contrasts against its first level."""
    return pd.DataFrame({"dose": frame["dose"], "ph": frame["ph"],
                         "site[T.b]": (frame["site"] == "b").astype(float),
                         "site[T.c]": (frame["site"] == "c").astype(float)})


@pytest.mark.parametrize("cls", [NPSVOR, PRank])
def test_margin_models_from_a_formula_are_fits_on_the_coded_standardised_columns(frame, cls, tmp_path):
    """Any estimator takes a formula: the margin models (whose fit depends on column scales)
    standardise the coded columns and keep the transform; the reference is the same model
    fitted on columns coded and standardised by hand."""
    model = cls.from_formula("y ~ .", frame, random_state=0)
    coded = _coded(frame)
    center, scale = coded.mean().to_numpy(), coded.std(ddof=0).to_numpy()
    reference = cls(random_state=0).fit(((coded - center) / scale).to_numpy(), frame["y"])
    np.testing.assert_allclose(model.input_center_, center, rtol=1e-12)
    np.testing.assert_allclose(model.input_scale_, scale, rtol=1e-12)
    new = frame.drop(columns="y")
    np.testing.assert_array_equal(model.predict(new), reference.predict(((coded - center) / scale).to_numpy()))
    model.save(tmp_path / "m.npz")
    np.testing.assert_array_equal(load_model(tmp_path / "m.npz").predict(new), model.predict(new))
    # A plain refit drops the formula's coding (and the fit its transform): arrays again, and
    # it says so (the user may have meant the DataFrame).
    standardised = ((coded - center) / scale).to_numpy()
    with pytest.warns(UserWarning, match=r"made by from_formula\('y ~ \.'\); fitted on ndarray rather than a "
                                         r"DataFrame it becomes a model of those columns as they are"):
        model.fit(standardised, frame["y"])
    np.testing.assert_array_equal(model.predict(standardised), reference.predict(standardised))


def test_a_model_that_standardises_itself_takes_the_formula_as_coded(frame):
    model = OrdinalProbit.from_formula("y ~ .", frame)
    assert getattr(model, "input_center_", None) is None
    reference = OrdinalProbit().fit(_coded(frame), frame["y"])
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-10)


def test_command_line_formula_fits_any_model(frame, tmp_path, capsys):
    train, new, out, model = (tmp_path / n for n in ("train.csv", "new.csv", "p.csv", "m.npz"))
    frame.to_csv(train, index=False)
    frame.drop(columns="y").to_csv(new, index=False)
    assert main(["fit", str(train), "--formula", "y ~ .", "--model", "npsvor", "--out", str(model),
                 "--quiet"]) == 0
    assert main(["predict", str(model), str(new), "--out", str(out)]) == 0
    expected = NPSVOR.from_formula("y ~ .", frame, random_state=0).predict(frame.drop(columns="y"))
    np.testing.assert_array_equal(pd.read_csv(out)["prediction"], expected)
    capsys.readouterr()
    # TOR without unlabeled rows is RED-SVM, and says so (with --unlabeled: tests/test_cli.py).
    assert main(["fit", str(train), "--formula", "y ~ .", "--model", "tor", "--out", str(tmp_path / "t.npz")]) == 0
    assert "no unlabeled rows" in capsys.readouterr().err
    assert main(["fit", str(train), "--formula", "y ~ dose", "--model", "npsvor", "--nominal", "~ site",
                 "--out", str(tmp_path / "n.npz")]) == 2
    assert "belong to the probit family" in capsys.readouterr().err


FORMULA_MODELS = [
    pytest.param(lambda data: OrdinalProbit.from_formula("y ~ dose + site", data), id="OrdinalProbit",
                 marks=pytest.mark.slow),
    pytest.param(lambda data: NPSVOR.from_formula("y ~ .", data, random_state=0), id="NPSVOR"),
    pytest.param(lambda data: CumulativeLinkModel.from_formula("y ~ dose", data, nominal="~ site"),
                 id="CumulativeLinkModel", marks=pytest.mark.slow),
    pytest.param(lambda data: OrdinalMixed.from_formula("y ~ dose + ph + (1 | site)", data),
                 id="OrdinalMixed", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("make", FORMULA_MODELS)
def test_a_formula_model_and_its_clones_refit_the_formula(frame, make):
    """cross_val_score on a model from_formula made: its clones had lost the formula, and every
    fold failed with "column(s) 'site' hold text".  A refit, or a clone's fit, on a DataFrame
    is the formula fitted to it, the response taken from ``y`` when given."""
    model = make(frame)
    folds = list(KFold(3).split(frame))
    expected = [make(frame.iloc[train]).score(frame.iloc[test], frame["y"].iloc[test]) for train, test in folds]
    np.testing.assert_allclose(cross_val_score(model, frame, frame["y"], cv=folds), expected, rtol=1e-12)
    part = frame.iloc[:200]
    reference = make(part)
    for refit in (sklearn_clone(model).fit(part), clone(model).fit(part.drop(columns="y"), part["y"]),
                  make(frame).fit(part)):
        np.testing.assert_allclose(refit.coef_, reference.coef_, rtol=1e-12)
        np.testing.assert_array_equal(refit.predict(frame), reference.predict(frame))
    with pytest.raises(ValueError, match="y has 10 rows and the DataFrame 200"):
        model.fit(part, part["y"][:10])


def test_a_formula_model_refit_takes_the_formulas_rows_only(frame):
    model = OrdinalProbit.from_formula("y ~ dose + site", frame)
    with pytest.raises(TypeError, match=r"made by from_formula.*sample_weight=None\), its other arguments by name"):
        model.fit(frame, frame["y"], np.ones(len(frame)), None)
    with pytest.raises(TypeError, match="not with classes="):
        model.fit(frame, classes=[0, 1, 2])
    weighted = model.fit(frame, sample_weight=np.r_[np.ones(150), np.zeros(150)])
    np.testing.assert_allclose(weighted.coef_, OrdinalProbit.from_formula("y ~ dose + site", frame.iloc[:150]).coef_,
                               rtol=1e-6)


def test_a_formula_without_terms_says_which_model_fits_it(frame, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"'y ~ 1' has no terms to fit, and OrdinalProbit needs a column; "
                                         r"CumulativeLinkModel fits the thresholds alone"):
        OrdinalProbit.from_formula("y ~ 1", frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the thresholds alone predict one class by construction
        null = CumulativeLinkModel.from_formula("y ~ 1", frame)
    shares = np.cumsum(np.unique(frame["y"], return_counts=True)[1])[:-1] / len(frame)
    np.testing.assert_allclose(norm.cdf(null.thresholds_), shares, rtol=1e-6)  # clm(y ~ 1): the shares
    frame.to_csv(tmp_path / "d.csv", index=False)
    assert main(["fit", str(tmp_path / "d.csv"), "--formula", "y ~ dose", "--target", "site",
                 "--out", str(tmp_path / "m.npz")]) == 2
    assert "--target 'site' is not the formula's response 'y'" in capsys.readouterr().err


def test_a_bootstrap_of_a_formula_model_refits_the_coded_columns(frame):
    """bootstrap on the DataFrame a formula model was fitted from: it applied the model's
    standardisation to the raw frame ("could not convert string to float: 'c'"); it now codes
    the rows as the fit did.  With every weight 1 the refit is the fit at the refits' tolerance."""
    model = NPSVOR.from_formula("y ~ .", frame, random_state=0)
    model.bootstrap(frame, frame["y"], n_draws=3, random_state=0)
    assert "site[T.b] [1]" in model.summary().index
    (refit,) = model._weighted_refits(model._copy_rows(frame), frame["y"].to_numpy(), np.ones((1, len(frame))))
    exact = NPSVOR.from_formula("y ~ .", frame, random_state=0, **model._draw_params())
    np.testing.assert_allclose(refit.coef_, exact.coef_, atol=1e-10)


def test_missing_values_in_a_coded_column_are_refused_not_dropped(frame, tmp_path):
    """formulaic drops rows with missing values by default: the fit then failed with "X and y
    have different lengths", and predict returned fewer predictions than rows, unaligned."""
    holes = frame.copy()
    holes.loc[[7, 20], "dose"] = np.nan
    holes["note"] = np.where(np.arange(len(frame)) % 2, "x", None)  # not in the formula
    with pytest.raises(ValueError, match=r"the data contains 2 missing value\(s\), in column\(s\) \['dose'\] "
                                         r"\(first rows, 0-based: \[7, 20\]\).*drops none"):
        OrdinalProbit.from_formula("y ~ dose + site", holes)
    with pytest.raises(ValueError, match=r"in column\(s\) \['dose'\] \(first rows, 0-based: \[7, 20\]\)"):
        OrdinalProbit.from_formula("y ~ np.log(dose) + site", holes)
    # Every column the formula reads is named, in the data's order (formulaic names the first
    # term it evaluates, which changed from run to run with the hash seed).
    more = holes.assign(site=holes["site"].where(np.arange(len(frame)) != 3))
    with pytest.raises(ValueError, match=r"the data contains 3 missing value\(s\), in column\(s\) \['dose', 'site'\] "
                                         r"\(first rows, 0-based: \[3, 7, 20\]\)"):
        OrdinalProbit.from_formula("y ~ site + dose", more)
    # A term that makes missing values of complete columns is named itself.
    negative = frame.assign(dose=frame["dose"].where(np.arange(len(frame)) != 4, -1.0))
    with pytest.raises(ValueError, match=r"the formula's term 'np.log\(dose\)' has missing values"), \
            np.errstate(invalid="ignore"):
        OrdinalProbit.from_formula("y ~ np.log(dose) + site", negative)
    model = OrdinalProbit.from_formula("y ~ dose + ph + site", holes.drop(index=[7, 20]))
    assert model.n_features_in_ == 4  # the column outside the formula is not read
    model.save(tmp_path / "m.npz")
    for fitted in (model, load_model(tmp_path / "m.npz")):
        with pytest.raises(ValueError, match=r"in column\(s\) \['dose'\] \(first rows, 0-based: \[2\]\)"):
            fitted.predict(holes.iloc[5:10])
        assert fitted.predict(holes.iloc[8:12]).shape == (4,)


def test_column_names_with_spaces_fit_save_load_and_predict(frame, tmp_path):
    """A CSV's header ("fixed acidity") makes column names with spaces.  The saved coding was
    formulaic's rendering of the terms, ``1 + fixed acidity``, which does not parse back, so
    the loaded model could not predict (a raw traceback from the command line)."""
    spaced = frame.rename(columns={"dose": "dose mg", "site": "site name"})
    new = spaced.drop(columns="y").iloc[:40]
    for formula in ("y ~ .", "y ~ `dose mg` + np.log(`dose mg`) + `dose mg`:ph + `site name`"):
        model = OrdinalProbit.from_formula(formula, spaced)
        model.save(tmp_path / "m.npz")
        loaded = load_model(tmp_path / "m.npz")
        np.testing.assert_array_equal(loaded.predict(new), model.predict(new))
        np.testing.assert_allclose(loaded.predict_proba(new), model.predict_proba(new), rtol=1e-12)
    assert "site name[T.b]" in list(loaded.feature_names_in_)
    with pytest.raises(ValueError, match=r"the formula's terms 'dose mg' do not parse: .* in backticks"):
        OrdinalProbit.from_formula("y ~ dose mg", spaced)


@pytest.mark.parametrize("formula, parts", [
    ("`wine score` ~ temp + (1 | `wine region`)", ("wine score", "temp", "wine region", None)),
    ("y ~ temp + (1 + temp | `wine region`/shelf)",
     ("y", "temp", ("wine region", "wine region:shelf"), ("temp", "temp"))),
    ("y ~ temp + (1 | `wine region`:shelf)", ("y", "temp", "wine region:shelf", None)),
])
def test_group_terms_and_responses_take_names_in_backticks(formula, parts):
    assert split_formula(formula) == parts


@pytest.mark.parametrize("group, spaces", [("wine region", True), ("`wine region`:shelf/x", False),
                                           ("`a:b`", False)])
def test_a_group_that_is_not_column_names_is_refused(group, spaces):
    with pytest.raises(ValueError, match="must be one column name") as caught:
        split_formula(f"y ~ temp + (1 | {group})")
    assert ("in backticks" in str(caught.value)) == spaces


def test_a_mixed_model_with_a_spaced_group_name_saves_loads_and_predicts(frame, tmp_path):
    spaced = frame.rename(columns={"site": "site name", "y": "wine score"})
    model = OrdinalMixed.from_formula("`wine score` ~ dose + ph + (1 | `site name`)", spaced)
    model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    new = spaced.drop(columns="wine score").iloc[:30]
    np.testing.assert_allclose(loaded.predict_proba(new), model.predict_proba(new), rtol=1e-12)


def test_command_line_reads_the_classes_of_a_response_in_backticks(frame, tmp_path):
    """The command line took the response as the text before '~', backticks and all, so it
    found no such column and dropped --classes without a word."""
    named = frame.assign(y=np.array(["lo", "mid", "hi"])[frame["y"].to_numpy() - 1]).rename(
        columns={"y": "wine score"})
    train, model = tmp_path / "train.csv", tmp_path / "m.npz"
    named.to_csv(train, index=False)
    formula = "`wine score` ~ dose + ph"
    assert main(["fit", str(train), "--formula", formula, "--classes", "lo,mid,hi", "--out", str(model),
                 "--quiet"]) == 0
    assert list(load_model(model).classes_) == ["lo", "mid", "hi"]
    assert main(["fit", str(train), "--formula", formula, "--out", str(model), "--force", "--quiet"]) == 2
