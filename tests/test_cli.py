"""The bayesord command: demo, fit, predict."""

import numpy as np
import pandas as pd

from bayesord.cli import main
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
