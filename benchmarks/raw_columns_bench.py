"""Do raw CSV columns change what the Bayesian models say?  (issue: honest uncertainty on
ordinary data.)

Part 1, real data.  Every dense set of ``../shared/datasets`` (continuous targets cut into
5 equal-frequency classes; training parts over ``--max-train`` rows cut to that many), 5
random stratified 80/20 splits.  Each model is fitted twice on the same split: on the raw
columns and on columns standardised with the training part's mean and sd.  Reported per
model and set: test MAE and log-loss on raw columns, the largest |raw - standardised|
difference of each over the splits, and the relative difference of the median 95% band
width of the class probabilities.  The maximum-likelihood probit's MAE is set beside
statsmodels' ``OrderedModel(distr="probit")`` on the same raw columns (plug-in
probabilities, as a statsmodels user predicts) and beside its own plug-in MAE (the most
probable class at the estimate, without the parameter uncertainty its predictions
integrate).  Models: ``OrdinalProbit()`` (evidence), ``OrdinalProbit(thresholds="joint",
alpha=0)`` (maximum likelihood), ``ISBOR(theta=...)`` (a fixed width, ``--isbor-theta``,
in float32, the library's default precision; the rest runs in float64); ``--models``
chooses among them.

Part 2, coverage.  Data generated from the ordinal probit with column offsets of 10^3
(``make_ordinal_probit``, latent ``x^T w + N(0, 1)``), 500 test rows, 5 seeds: the share
of test rows whose latent value (centred at the training means, the scale of
``predict_latent``) lies in the 90% predictive interval ``m +- 1.645 sqrt(1 + v)`` of the
evidence fit.

Part 3, margin models through the command line.  On the same splits of the ordinal sets,
``bayesord fit --model M`` and ``bayesord predict`` on the raw CSV (the command
standardises by default) against the estimator fitted in Python on columns standardised
with the training part's mean and sd; test MAE of each for NPSVOR, RedSVM,
SwappedPairsSVM and CuSumRank with their defaults.

Run: ``python benchmarks/raw_columns_bench.py`` (``--quick``: 2 splits, 3 data sets; the
ISBOR part at ``--max-train 2000`` takes hours on 2 cores, ``--max-train 500`` minutes).
Prints the tables and writes ``benchmarks/results/raw_columns.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, print_table, rescale, write_json  # noqa: E402

jax.config.update("jax_enable_x64", True)

from bayesord import ISBOR, OrdinalProbit  # noqa: E402
from bayesord.datasets import (  # noqa: E402
    SHARED_DATASETS,
    equal_frequency_bins,
    load_shared,
    make_ordinal_probit,
    stratified_split,
)
from bayesord.metrics import mae, ordinal_log_loss  # noqa: E402


def _models(args):
    chosen = set(args.models.split(","))
    if "evidence" in chosen:
        yield "probit (evidence)", lambda: OrdinalProbit(random_state=0)
    if "ml" in chosen:
        yield "probit (ML)", lambda: OrdinalProbit(thresholds="joint", alpha=0.0, random_state=0)
    if "isbor" in chosen:
        yield f"ISBOR (theta={args.isbor_theta:g})", lambda: ISBOR(theta=args.isbor_theta, random_state=0)


def _split(y, seed, max_train):
    """A stratified 80/20 split, its training part cut to ``max_train`` rows, stratified
    again: every class keeps a training row (esl's lowest class has two rows)."""
    tr, te = stratified_split(y, int(0.8 * len(y)), seed=seed)
    if len(tr) > max_train:
        keep, _ = stratified_split(y[tr], max_train, seed=seed)
        tr = tr[keep]
    return tr, te


def _band_width(model, X):
    lo, hi, _ = model.predict_proba_interval(X)
    return float(np.median(hi - lo))


def _precision(label):
    """ISBOR runs in float32, the precision a user gets (the rest of the script runs in
    float64 for the comparison with statsmodels): its greedy selection depends on the
    last bits, and only in float32 do raw and standardised columns reach it as the same
    numbers (docs/maths.md, "Columns as they arrive")."""
    return jax.enable_x64(False) if label.startswith("ISBOR") else contextlib.nullcontext()


def _plugin_mae(model, X, y):
    """Test MAE of the most probable class at the estimate (no parameter uncertainty), as
    statsmodels predicts; probit link, thresholds at x = 0."""
    from scipy.stats import norm

    cum = norm.cdf(model.thresholds_[None, :] - (X @ model.coef_)[:, None])
    proba = np.diff(np.c_[np.zeros(len(X)), cum, np.ones(len(X))], axis=1)
    return float(np.mean(np.abs(model.classes_[proba.argmax(1)] - y)))


def _statsmodels_mae(Xtr, ytr, Xte, yte):
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    keep = Xtr.std(0) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sm = OrderedModel(ytr, Xtr[:, keep], distr="probit").fit(method="bfgs", disp=False, maxiter=5000)
        except ValueError:  # collinear with the thresholds (one-hot columns with every level)
            return None
    classes = np.unique(ytr)
    pred = classes[np.asarray(sm.model.predict(sm.params, exog=Xte[:, keep])).argmax(1)]
    return float(np.mean(np.abs(pred - yte)))


def real_data(args):
    names = [n for n, kind in SHARED_DATASETS.items() if kind in ("ordinal", "continuous")]
    if args.quick:
        names = names[:3]
    rows = []
    for name in names:
        ds = load_shared(name)
        X, y = ds.X, ds.y
        if ds.kind == "continuous":
            y = equal_frequency_bins(y, 5)
        for label, make in _models(args):
            diffs = {"mae": [], "logloss": [], "band": []}
            maes, logs, sm, plug = [], [], [], []
            t0 = time.perf_counter()
            for split in range(args.splits):
                tr, te = _split(y, split, args.max_train)
                Xs_tr, Xs_te = rescale(X[tr], X[te])
                out, fitted = {}, {}
                for kind, (A, B) in {"raw": (X[tr], X[te]), "std": (Xs_tr, Xs_te)}.items():
                    with warnings.catch_warnings(), _precision(label):
                        warnings.simplefilter("ignore")
                        model = fitted[kind] = make().fit(A, y[tr])
                        proba = model.predict_proba(B)
                        out[kind] = (mae(y[te], model.predict(B)),
                                     ordinal_log_loss(y[te], proba, classes=model.classes_),
                                     _band_width(model, B))
                maes.append(out["raw"][0])
                logs.append(out["raw"][1])
                diffs["mae"].append(abs(out["raw"][0] - out["std"][0]))
                diffs["logloss"].append(abs(out["raw"][1] - out["std"][1]))
                raw_band, std_band = out["raw"][2], out["std"][2]
                if std_band > 0:
                    diffs["band"].append(abs(raw_band - std_band) / std_band)
                else:
                    diffs["band"].append(0.0 if raw_band == 0 else np.inf)
                if label == "probit (ML)":
                    sm.append(_statsmodels_mae(X[tr], y[tr], X[te], y[te]))
                    plug.append(_plugin_mae(fitted["raw"], X[te], y[te]))
            row = {"data": name, "model": label, "MAE raw": float(np.mean(maes)),
                   "log-loss raw": float(np.mean(logs)), "max |dMAE|": max(diffs["mae"]),
                   "max |dlog-loss|": max(diffs["logloss"]), "max band rel. diff": max(diffs["band"]),
                   "seconds": time.perf_counter() - t0}
            if sm:
                known = [v for v in sm if v is not None]
                row["statsmodels MAE"] = float(np.mean(known)) if len(known) == len(sm) else None
                row["plug-in MAE"] = float(np.mean(plug))
            rows.append(row)
            print_table([row], list(row))
    return rows


def coverage(args):
    rows = []
    for seed in range(args.splits):
        X, y, truth = make_ordinal_probit(1000 + 500, 4, 5, seed=seed)
        rng = np.random.default_rng(seed)
        latent = X @ truth.w + rng.normal(size=len(y))
        y = np.digitize(latent, truth.thresholds) + 1
        # predict_latent gives the latent of the columns centred at the training means.
        latent = latent - X[:1000].mean(0) @ truth.w
        X = X + 1e3
        model = OrdinalProbit(random_state=0).fit(X[:1000], y[:1000])
        mean, var = model.predict_latent(X[1000:])
        half = 1.6448536269514722 * np.sqrt(1.0 + var)
        inside = np.abs(latent[1000:] - mean) <= half
        rows.append({"seed": seed, "coverage 90%": float(np.mean(inside))})
    return rows


CLI_MODELS = {"npsvor": "NPSVOR", "redsvm": "RedSVM", "swapped-pairs": "SwappedPairsSVM",
              "cusum": "CuSumRank"}


def command_line(args):
    import io
    import tempfile

    import pandas as pd

    from bayesord import estimators
    from bayesord.cli import main as bayesord_main

    names = [n for n, kind in SHARED_DATASETS.items() if kind == "ordinal"]
    if args.quick:
        names = names[:3]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in names:
            ds = load_shared(name)
            X, y = ds.X, ds.y
            for flag, cls in CLI_MODELS.items():
                cli_mae, py_mae = [], []
                for split in range(args.splits):
                    tr, te = _split(y, split, args.max_train)
                    frame = pd.DataFrame(X, columns=ds.feature_names)
                    frame.iloc[tr].assign(y=y[tr]).to_csv(tmp / "train.csv", index=False)
                    frame.iloc[te].to_csv(tmp / "test.csv", index=False)
                    quiet = io.StringIO()
                    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                        code = bayesord_main(["fit", str(tmp / "train.csv"), "--model", flag, "--out",
                                              str(tmp / "m.npz"), "--force", "--quiet"])
                        code = code or bayesord_main(["predict", str(tmp / "m.npz"), str(tmp / "test.csv"),
                                                      "--out", str(tmp / "p.csv"), "--force"])
                    if code:
                        raise RuntimeError(f"bayesord {flag} on {name}: {quiet.getvalue()}")
                    cli_mae.append(mae(y[te], pd.read_csv(tmp / "p.csv")["prediction"].to_numpy()))
                    Xs_tr, Xs_te = rescale(X[tr], X[te])
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        model = getattr(estimators, cls)(random_state=0).fit(Xs_tr, y[tr])
                    py_mae.append(mae(y[te], model.predict(Xs_te)))
                row = {"data": name, "model": cls, "CLI MAE (raw CSV)": float(np.mean(cli_mae)),
                       "MAE (standardised)": float(np.mean(py_mae)),
                       "max |dMAE|": float(np.max(np.abs(np.subtract(cli_mae, py_mae))))}
                rows.append(row)
                print_table([row], list(row))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--max-train", type=int, default=2000)
    p.add_argument("--isbor-theta", type=float, default=0.1)
    p.add_argument("--models", default="evidence,ml,isbor",
                   help="part 1's models, comma-separated: evidence, ml, isbor")
    p.add_argument("--parts", default="coverage,real,cli",
                   help="comma-separated parts to run: coverage, real, cli")
    args = p.parse_args(argv)
    if args.quick:
        args.splits = 2
    parts = set(args.parts.split(","))
    out = {"machine": machine(), "args": vars(args)}
    if "coverage" in parts:
        print("Part 2: latent coverage with column offsets of 1e3")
        out["coverage"] = coverage(args)
        print_table(out["coverage"], ["seed", "coverage 90%"])
        print(f"mean coverage {np.mean([r['coverage 90%'] for r in out['coverage']]):.4f}\n")
    if "real" in parts:
        print("Part 1: raw vs standardised columns")
        out["real"] = real_data(args)
    if "cli" in parts:
        print("\nPart 3: margin models, command line on the raw CSV vs standardised in Python")
        out["cli"] = command_line(args)
    write_json("raw_columns", out)


if __name__ == "__main__":
    main()
