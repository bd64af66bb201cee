"""Is the uncertainty right?  Calibration of the ordinal probit against statsmodels and mord.

Models: bayesord's ordinal probit (evidence-tuned thresholds and prior precision, the
weight posterior integrated into the predictive probabilities), statsmodels'
``OrderedModel`` probit (maximum likelihood, plug-in probabilities: the frequentist
baseline) and mord's ``LogisticAT`` (all-threshold logistic, ``alpha=1``).  ISBOR joins
when it lands.

Metrics on held-out rows: cumulative ECE (mean over the events y <= k, 10 equal-width
bins), top-class ECE, coverage of the central 90% predictive interval of the latent score
computed from the observed class (:func:`bayesord.calibration.latent_interval_coverage`),
and, on synthetic data whose latent scores are known, the coverage of the 90% Gaussian
interval ``m ± 1.645 s`` of the true latent value (``s = sqrt(1 + v)`` for us, ``1`` for
the plug-in statsmodels fit).  Also MAE and log-loss.

Data: synthetic ordinal probit data generated from the model (d = 5, K = 5, 400 training
rows, 4,000 test rows, several seeds, results averaged), and shared datasets (features
standardised on the training part, stratified 70/30 split).

Targets (issue 8): on data from the model, nominal 90% intervals cover 88-92%; ECE no
worse than the frequentist baseline on every dataset.

    python benchmarks/calibration_bench.py --quick   # 3 seeds, swd and esl
    python benchmarks/calibration_bench.py           # 10 seeds, 5 shared datasets
    python benchmarks/calibration_bench.py --data-dir PATH

The machine is shared and loaded: times are not reported here (see probit_bench.py).
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from _common import RESULTS, machine, print_table, write_json  # noqa: E402

from bayesord import calibration, metrics  # noqa: E402
from bayesord._probit import ProbitConfig, fit_probit, predict_probit  # noqa: E402
from bayesord.datasets import load_shared, stratified_split  # noqa: E402

LEVEL = 0.9
D, K, N_TRAIN, N_TEST = 5, 5, 400, 4000
QUICK_SETS = ["swd", "esl"]
FULL_SETS = ["swd", "esl", "era", "balance_scale", "winequality_red"]


def _codes(y):
    classes = np.unique(y)
    return np.searchsorted(classes, y).astype(np.int32), len(classes)


def fit_ours(X, y, Xt, n_classes):
    res = fit_probit(X, y, np.ones(len(y)), 1.0, 1e-10, config=ProbitConfig(), n_classes=n_classes)
    pred = predict_probit(res, Xt)
    return np.asarray(pred.proba), np.asarray(pred.mean), np.sqrt(1.0 + np.asarray(pred.var)), \
        bool(res.converged)


def fit_statsmodels(X, y, Xt):
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = OrderedModel(y, X, distr="probit").fit(method="bfgs", disp=False, maxiter=2000)
    proba = np.asarray(res.model.predict(res.params, exog=Xt))
    beta = np.asarray(res.params)[: X.shape[1]]
    return proba, Xt @ beta, np.ones(len(Xt)), bool(res.mle_retvals["converged"])


def fit_mord(X, y, Xt):
    import mord

    proba = mord.LogisticAT(alpha=1.0).fit(X, y).predict_proba(Xt)
    # mord forms the class probabilities by subtraction; clip round-off and renormalise.
    proba = np.clip(proba, 0.0, None)
    return proba / proba.sum(axis=1, keepdims=True), None, None, True


MODELS = {"bayesord probit": fit_ours, "statsmodels probit": fit_statsmodels,
          "mord LogisticAT": fit_mord}


def _scores(yt, proba, mean, sd, latent):
    row = {
        "cum ECE": calibration.calibration_error(yt, proba, 10, kind="cumulative"),
        "top ECE": calibration.calibration_error(yt, proba, 10, kind="top"),
        "90% cover": calibration.latent_interval_coverage(yt, proba, LEVEL),
        "MAE": metrics.mae(yt, np.argmax(proba, axis=1)),
        "log-loss": metrics.ordinal_log_loss(yt, proba),
    }
    if latent is not None and mean is not None:
        row["90% cover (true latent)"] = calibration.interval_coverage(latent, mean, sd, LEVEL)
    return row


def _run_models(X, y, Xt, yt, n_classes, latent=None):
    out, probas = {}, {}
    for name, fit in MODELS.items():
        args = (X, y, Xt, n_classes) if name == "bayesord probit" else (X, y, Xt)
        proba, mean, sd, ok = fit(*args)
        out[name] = _scores(yt, proba, mean, sd, latent) | {"converged": ok}
        probas[name] = proba
    return out, probas


def _ece_gap_interval(yt, p_ours, p_base, n_boot=300, seed=0):
    """Paired bootstrap 90% interval of cum ECE(ours) - cum ECE(baseline) over test rows."""
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(n_boot):
        i = rng.integers(0, len(yt), len(yt))
        diffs.append(calibration.calibration_error(yt[i], p_ours[i], 10, kind="cumulative")
                     - calibration.calibration_error(yt[i], p_base[i], 10, kind="cumulative"))
    return tuple(np.quantile(diffs, [0.05, 0.95]))


def synthetic(seed):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=D)
    thresholds = np.sqrt(w @ w + 1.0) * np.array([-0.84, -0.25, 0.25, 0.84])
    X = rng.normal(size=(N_TRAIN + N_TEST, D))
    latent = X @ w + rng.normal(size=len(X))
    y = np.searchsorted(thresholds, latent).astype(np.int32)
    return X[:N_TRAIN], y[:N_TRAIN], X[N_TRAIN:], y[N_TRAIN:], latent[N_TRAIN:]


def shared(name, root):
    ds = load_shared(name, root=root)
    y, n_classes = _codes(ds.y)
    train, test = stratified_split(y, int(0.7 * len(y)), seed=0)
    mu, sd = ds.X[train].mean(0), ds.X[train].std(0)
    sd = np.where(sd > 0, sd, 1.0)
    X = (ds.X - mu) / sd
    return X[train], y[train], X[test], y[test], n_classes


def _rows(dataset, results):
    return [{"dataset": dataset, "model": m} | r for m, r in results.items()]


def _plot(per_dataset, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(per_dataset)
    models = list(MODELS)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / len(models)
    for j, m in enumerate(models):
        x = np.arange(len(names)) + j * width
        axes[0].bar(x, [per_dataset[d][m]["cum ECE"] for d in names], width, label=m)
        axes[1].bar(x, [per_dataset[d][m]["90% cover"] for d in names], width, label=m)
    for ax, title in zip(axes, ["cumulative ECE (lower is better)", "90% latent-interval coverage"]):
        ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, rotation=20, fontsize=8)
        ax.set_title(title, fontsize=10)
    axes[1].axhline(LEVEL, color="k", linestyle="--", linewidth=1)
    axes[1].set_ylim(0.7, 1.0)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--data-dir", default=os.environ.get("BAYESORD_DATASETS"),
                        help="shared datasets folder (default ../shared/datasets when present)")
    args = parser.parse_args()
    seeds = range(3) if args.quick else range(10)
    rows, per_dataset, gaps = [], {}, {}

    synth = []
    for seed in seeds:
        X, y, Xt, yt, latent = synthetic(seed)
        synth.append(_run_models(X, y, Xt, yt, K, latent)[0])
    label = f"synthetic probit ({len(seeds)} seeds)"
    per_dataset[label] = {m: {k: (all(s[m][k] for s in synth) if k == "converged"
                                  else float(np.mean([s[m][k] for s in synth])))
                              for k in synth[0][m]} for m in MODELS}
    rows += _rows(label, per_dataset[label])
    print_table(rows[-3:], list(rows[-3]))

    sets = QUICK_SETS if args.quick else FULL_SETS
    root = Path(args.data_dir) if args.data_dir else None
    for name in sets:
        try:
            X, y, Xt, yt, n_classes = shared(name, root)
        except FileNotFoundError as err:
            print(f"skipping {name}: {err}")
            continue
        per_dataset[name], probas = _run_models(X, y, Xt, yt, n_classes)
        gaps[name] = _ece_gap_interval(yt, probas["bayesord probit"], probas["statsmodels probit"])
        rows += _rows(name, per_dataset[name])
        print_table(rows[-3:], list(rows[-3]))

    cover = per_dataset[label]["bayesord probit"]["90% cover (true latent)"]
    checks = {
        "synthetic 90% interval coverage in [0.88, 0.92] (true latent)": bool(0.88 <= cover <= 0.92),
        "synthetic 90% latent-interval coverage in [0.88, 0.92] (from classes)":
            bool(0.88 <= per_dataset[label]["bayesord probit"]["90% cover"] <= 0.92),
    }
    for name, res in per_dataset.items():
        diff = res["bayesord probit"]["cum ECE"] - res["statsmodels probit"]["cum ECE"]
        noise = (f"; 90% paired bootstrap interval [{gaps[name][0]:+.4f}, {gaps[name][1]:+.4f}]"
                 if name in gaps else "")
        checks[f"{name}: cum ECE <= statsmodels (difference {diff:+.4f}{noise})"] = bool(diff <= 0)
    cols = ["dataset", "model", "cum ECE", "top ECE", "90% cover", "90% cover (true latent)",
            "MAE", "log-loss", "converged"]
    print("\nSummary (held-out rows; synthetic rows are means over seeds):")
    print_table(rows, cols)
    print("\nTargets:")
    for k, v in checks.items():
        print(f"  {'PASS' if v else 'FAIL'}  {k}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    _plot(per_dataset, RESULTS / "calibration.png")
    write_json("calibration", {"machine": machine(), "level": LEVEL, "quick": args.quick,
                               "columns": cols, "rows": rows, "checks": checks})


if __name__ == "__main__":
    main()
