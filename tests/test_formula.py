"""Formulas with ``.``: every column but the response, as in R (``y ~ .``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesord import CumulativeLinkModel, OrdinalProbit
from bayesord.cli import main
from bayesord.datasets import make_ordinal_probit


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
