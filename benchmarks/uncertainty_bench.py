"""Uncertainty from every model: conformal prediction sets, calibrated margin-model
probabilities, and what conformalising costs.  (Issue: uncertainty from every model.)

Part ``sets``.  Every dense set of ``../shared/datasets`` (continuous targets cut into 5
equal-frequency classes), ``--splits`` random stratified splits into training (50%, at
most ``--max-train`` rows), calibration (25%, at most 1,000) and test (the rest, at most
2,000) parts, columns standardised on the training part.  Each of the nine estimators is
fitted on the training part and calibrated on the calibration part (split conformal,
ordinal APS score); for alpha in 0.05, 0.1, 0.2 the table gives the test coverage and
mean size (classes) of its contiguous sets, and beside them MAPIE's ``lac`` and ``aps``
sets (``SplitConformalClassifier``, prefit, its defaults) computed from the *same*
calibrated probabilities on the same rows, with the share of MAPIE sets that are not an
interval of classes.  An alpha that needs more calibration rows than a set has
(n_cal < 1/alpha - 1) is left out for that set.

Part ``proba``.  The ordinal sets, ``--splits`` random 80/20 splits: the six margin
models calibrated by 5-fold cross-fitting on the training rows (``calibrate(X, y,
cv=5)``) against mord's ``LogisticAT`` (its defaults) fitted on the same rows: top-label
and cumulative 10-bin ECE on the test rows, and beside them two proper scores, the
log-loss and the ranked probability score (ECE is not one: a model can lower it without
predicting better).

Part ``cost``.  On ``winequality_red`` (1,000 training rows): each estimator's fit and
its 5-fold cross-conformal calibration, both timed after a first call has compiled them
(median of 3), and their ratio.

ISBOR and SBOR run with a fixed width (``theta=0.3``) and at most 500 training rows:
their default width search takes minutes per fit on 2 cores.

Run: ``python benchmarks/uncertainty_bench.py`` (``--parts sets,proba,cost``; ``--quick``:
3 data sets, 2 splits).  Prints the tables and writes
``benchmarks/results/uncertainty.json`` (``uncertainty_TAG.json`` with ``--tag TAG``).  Needs ``pip install -e ".[benchmark]"``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.base import BaseEstimator, ClassifierMixin  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, print_table, rescale, time_call, write_json  # noqa: E402

jax.config.update("jax_enable_x64", True)

from bayesord import (  # noqa: E402
    ISBOR,
    NPSVOR,
    SBOR,
    CuSumRank,
    OrdinalProbit,
    PRank,
    RedSVM,
    SwappedPairsSVM,
    TransductiveOrdinalRegression,
)
from bayesord.datasets import SHARED_DATASETS, equal_frequency_bins, load_shared, stratified_split  # noqa: E402
from bayesord.metrics import ece, ordinal_log_loss, rps  # noqa: E402

ALPHAS = (0.05, 0.1, 0.2)
KERNEL_BAYES_MAX_TRAIN = 500
MODELS = {
    "OrdinalProbit": lambda: OrdinalProbit(random_state=0),
    "ISBOR": lambda: ISBOR(theta=0.3, random_state=0),
    "SBOR": lambda: SBOR(theta=0.3, random_state=0),
    "NPSVOR": lambda: NPSVOR(random_state=0),
    "RedSVM": lambda: RedSVM(random_state=0),
    "TOR": lambda: TransductiveOrdinalRegression(random_state=0),
    "SwappedPairsSVM": lambda: SwappedPairsSVM(),
    "CuSumRank": lambda: CuSumRank(random_state=0),
    "PRank": lambda: PRank(random_state=0),
}
MARGIN = ("NPSVOR", "RedSVM", "TOR", "SwappedPairsSVM", "CuSumRank", "PRank")


class _Calibrated(ClassifierMixin, BaseEstimator):
    """A fitted, calibrated bayesord estimator as the prefit classifier MAPIE expects."""

    def __init__(self, model=None):
        self.model = model

    def fit(self, X, y):
        return self

    def predict_proba(self, X):
        return self.model.predict_proba(X)

    def predict(self, X):
        return self.model.classes_[np.argmax(self.predict_proba(X), axis=1)]

    @property
    def classes_(self):
        return self.model.classes_


def _quiet_fit(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X, y)


def _data(name):
    ds = load_shared(name)
    y = equal_frequency_bins(ds.y, 5) if ds.kind == "continuous" else ds.y
    return ds.X, y, ds.kind


def _three_way(y, seed, max_train):
    """Stratified training / calibration / test rows (50 / 25 / 25, capped)."""
    tr, rest = stratified_split(y, len(y) // 2, seed=seed)
    cal, te = stratified_split(y[rest], len(rest) // 2, seed=seed + 1000)
    cal, te = rest[cal], rest[te]
    if len(tr) > max_train:
        tr = tr[stratified_split(y[tr], max_train, seed=seed)[0]]
    if len(cal) > 1000:
        cal = cal[stratified_split(y[cal], 1000, seed=seed)[0]]
    return tr, cal, te[:2000]


def _mapie_sets(model, Xc, yc, Xt, alphas, score):
    from mapie.classification import SplitConformalClassifier

    mapie = SplitConformalClassifier(_Calibrated(model), confidence_level=[1 - a for a in alphas],
                                     conformity_score=score, prefit=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mapie.conformalize(Xc, yc)
        _, sets = mapie.predict_set(Xt)
    return sets  # (n, K, m) booleans


def _gappy(sets):
    """Share of sets (n, K) that are not an interval of classes."""
    idx = np.arange(sets.shape[1])
    lo = np.where(sets, idx, sets.shape[1]).min(axis=1)
    hi = np.where(sets, idx, -1).max(axis=1)
    return float(np.mean((hi >= lo) & (sets.sum(axis=1) < hi - lo + 1)))


def part_sets(args, names):
    rows, records = [], []
    for name in names:
        X, y, _ = _data(name)
        for label, make in MODELS.items():
            if label not in args.models:
                continue
            acc = {a: {k: [] for k in ("cov", "size", "lac_cov", "lac_size", "aps_cov", "aps_size",
                                       "aps_gappy", "lac_gappy")} for a in ALPHAS}
            t0 = time.perf_counter()
            skipped = 0
            for split in range(args.splits):
                cap = KERNEL_BAYES_MAX_TRAIN if label in ("ISBOR", "SBOR") else args.max_train
                tr, cal, te = _three_way(y, split, cap)
                Xtr, Xrest = rescale(X[tr], X)
                alphas = [a for a in ALPHAS if len(cal) >= np.ceil(1 / a - 1)]
                if not alphas:
                    continue
                model = _quiet_fit(make(), Xtr, y[tr])
                try:
                    model.calibrate(Xrest[cal], y[cal])
                except ValueError as err:  # e.g. a margin model's layer without a row of a class
                    print(f"  {name} {label} split {split}: {err}", file=sys.stderr)
                    skipped += 1
                    continue
                lower, upper = model.predict_set(Xrest[te], alphas)
                yt = y[te][:, None]
                pos = {c: k for k, c in enumerate(model.classes_)}
                lo_k = np.vectorize(pos.get)(lower)
                hi_k = np.vectorize(pos.get)(upper)
                for score in ("lac", "aps"):
                    for j, a in enumerate(alphas):
                        try:  # MAPIE needs n_cal > 1/alpha, one row more than the guarantee does
                            s = _mapie_sets(model, Xrest[cal], y[cal], Xrest[te], [a], score)[:, :, 0]
                        except ValueError:
                            s = None
                        acc[a][f"{score}_cov"].append(np.nan if s is None else float(
                            np.mean(s[np.arange(len(te)), [pos[v] for v in y[te]]])))
                        acc[a][f"{score}_size"].append(np.nan if s is None else float(s.sum(axis=1).mean()))
                        acc[a][f"{score}_gappy"].append(np.nan if s is None else _gappy(s))
                for j, a in enumerate(alphas):
                    acc[a]["cov"].append(float(np.mean((lower[:, j] <= yt[:, 0]) & (yt[:, 0] <= upper[:, j]))))
                    acc[a]["size"].append(float(np.mean(hi_k[:, j] - lo_k[:, j] + 1)))
            seconds = time.perf_counter() - t0
            for a in ALPHAS:
                if not acc[a]["cov"]:
                    continue
                row = {"data": name, "model": label, "alpha": a,
                       **{k: float(np.mean(v)) if not np.all(np.isnan(v)) else None for k, v in acc[a].items()},
                       "splits": len(acc[a]["cov"]),
                       "skipped": skipped}
                records.append(row)
                rows.append(row)
            print(f"  {name} {label}: {seconds:.1f} s", file=sys.stderr)
        # Hundreds of compiled programs in one process exhaust XLA:CPU's code memory (LLVM
        # "Cannot allocate memory"); nothing compiled is worth keeping across data sets.
        jax.clear_caches()
        write_json(_json_name(args), {"partial": True, "sets": {"rows": records}})
    print("\nsets: coverage and mean size of bayesord's contiguous sets and MAPIE's (same probabilities)")
    print_table(rows, ["data", "model", "alpha", "cov", "size", "lac_cov", "lac_size", "aps_cov",
                       "aps_size", "aps_gappy", "lac_gappy"])
    summary = []
    for label in MODELS:
        for a in ALPHAS:
            sel = [r for r in records if r["model"] == label and r["alpha"] == a]
            if not sel:
                continue
            summary.append({"model": label, "alpha": a, "sets": len(sel),
                            "mean cov": float(np.mean([r["cov"] for r in sel])),
                            "min cov": float(np.min([r["cov"] for r in sel])),
                            "cov in band": sum(1 - a - 0.005 <= r["cov"] <= 1 - a + 0.03 for r in sel),
                            "size": float(np.mean([r["size"] for r in sel])),
                            "aps size": _mean_of(sel, "aps_size"), "lac size": _mean_of(sel, "lac_size"),
                            "aps cov": _mean_of(sel, "aps_cov"), "lac cov": _mean_of(sel, "lac_cov"),
                            "not larger than aps": sum(r["aps_size"] is not None and r["size"] <= r["aps_size"] + 1e-12
                                                       for r in sel),
                            "with aps": sum(r["aps_size"] is not None for r in sel),
                            "aps gappy": _mean_of(sel, "aps_gappy"), "lac gappy": _mean_of(sel, "lac_gappy")})
    print("\nsets: summary over the data sets (coverage band [1 - alpha - 0.005, 1 - alpha + 0.03])")
    print_table(summary, ["model", "alpha", "sets", "mean cov", "min cov", "cov in band", "size",
                          "aps cov", "aps size", "lac cov", "lac size", "not larger than aps", "with aps",
                          "aps gappy", "lac gappy"])
    return {"rows": records, "summary": summary}


def _mean_of(rows, key):
    """Mean of ``key`` over the rows that have it (MAPIE refuses the smallest calibration parts)."""
    vals = [r[key] for r in rows if r[key] is not None]
    return float(np.mean(vals)) if vals else None


def part_proba(args, names):
    import mord

    ordinal = [n for n in names if SHARED_DATASETS[n] == "ordinal"]
    rows = []
    for name in ordinal:
        X, y, _ = _data(name)
        res = {m: {"top": [], "cum": [], "ll": [], "rps": []} for m in [*MARGIN, "mord LogisticAT"] if m in args.models or m == "mord LogisticAT"}
        for split in range(args.splits):
            tr, te = stratified_split(y, int(0.8 * len(y)), seed=split)
            if len(tr) > args.max_train:
                tr = tr[stratified_split(y[tr], args.max_train, seed=split)[0]]
            Xtr, Xte = rescale(X[tr], X[te])
            classes = np.unique(y)
            for label in res:
                if label == "mord LogisticAT":
                    codes = np.searchsorted(classes, y[tr])
                    P = _quiet_fit(mord.LogisticAT(), Xtr, codes).predict_proba(Xte)
                else:
                    model = _quiet_fit(MODELS[label](), Xtr, y[tr])
                    try:
                        model.calibrate(Xtr, y[tr], cv=5, random_state=split)
                    except ValueError as err:  # a class with a single training row
                        print(f"  {name} {label}: {err}", file=sys.stderr)
                        continue
                    P = model.predict_proba(Xte)
                res[label]["top"].append(ece(y[te], P, classes=classes))
                res[label]["cum"].append(ece(y[te], P, cumulative=True, classes=classes))
                res[label]["ll"].append(ordinal_log_loss(y[te], P, classes=classes))
                res[label]["rps"].append(rps(y[te], P, classes=classes))
        ref = res["mord LogisticAT"]
        for label, r in res.items():
            if not r["top"]:
                continue
            rows.append({"data": name, "model": label, "top ECE": float(np.mean(r["top"])),
                         "cum ECE": float(np.mean(r["cum"])),
                         "mord top": float(np.mean(ref["top"])), "mord cum": float(np.mean(ref["cum"])),
                         "log-loss": float(np.mean(r["ll"])), "mord log-loss": float(np.mean(ref["ll"])),
                         "RPS": float(np.mean(r["rps"])), "mord RPS": float(np.mean(ref["rps"]))})
        print(f"  {name}: done", file=sys.stderr)
        jax.clear_caches()
    print("\nproba: calibrated margin-model probabilities (cv=5) against mord LogisticAT, test ECE")
    print_table(rows, ["data", "model", "top ECE", "cum ECE", "mord top", "mord cum", "log-loss", "mord log-loss",
                       "RPS", "mord RPS"])
    wins = []
    for label in MARGIN:
        sel = [r for r in rows if r["model"] == label]
        if sel:
            wins.append({"model": label, "sets": len(sel),
                         "top no worse": sum(r["top ECE"] <= r["mord top"] for r in sel),
                         "cum no worse": sum(r["cum ECE"] <= r["mord cum"] for r in sel),
                         "both no worse": sum(r["top ECE"] <= r["mord top"] and r["cum ECE"] <= r["mord cum"]
                                              for r in sel),
                         "log-loss no worse": sum(r["log-loss"] <= r["mord log-loss"] for r in sel),
                         "RPS no worse": sum(r["RPS"] <= r["mord RPS"] for r in sel)})
    print_table(wins, ["model", "sets", "top no worse", "cum no worse", "both no worse", "log-loss no worse",
                       "RPS no worse"])
    return {"rows": rows, "wins": wins}


def part_cost(args):
    X, y, _ = _data("winequality_red")
    tr, _ = stratified_split(y, 1000, seed=0)
    Xtr, _ = rescale(X[tr], X[tr])
    rows = []
    for label, make in MODELS.items():
        if label not in args.models:
            continue
        rows_tr = tr[:KERNEL_BAYES_MAX_TRAIN] if label in ("ISBOR", "SBOR") else tr
        A, b = Xtr[: len(rows_tr)], y[rows_tr]
        _quiet_fit(make(), A, b)
        fit_s, model = time_call(lambda: _quiet_fit(make(), A, b))
        model.calibrate(A, b, cv=5, random_state=0)
        cal_s, _ = time_call(lambda: model.calibrate(A, b, cv=5, random_state=0))
        rows.append({"model": label, "rows": len(b), "fit s": fit_s, "cv=5 calibrate s": cal_s,
                     "ratio": cal_s / fit_s})
    print("\ncost: 5-fold cross-conformal calibration against the plain fit (compiled, median of 3)")
    print_table(rows, ["model", "rows", "fit s", "cv=5 calibrate s", "ratio"])
    return {"rows": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--max-train", type=int, default=1000)
    p.add_argument("--parts", default="sets,proba,cost")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--data", help="comma-separated data set names (default: every dense set)")
    p.add_argument("--tag", help="write results/uncertainty_TAG.json (parts run separately)")
    args = p.parse_args(argv)
    args.models = args.models.split(",")
    names = args.data.split(",") if args.data else [n for n, k in SHARED_DATASETS.items()
                                                    if k in ("ordinal", "continuous")]
    if args.quick:
        names, args.splits = names[:3], 2
    parts = args.parts.split(",")
    out = {"machine": machine(), "splits": args.splits, "max_train": args.max_train, "data": names}
    if "sets" in parts:
        out["sets"] = part_sets(args, names)
    if "proba" in parts:
        out["proba"] = part_proba(args, names)
    if "cost" in parts:
        out["cost"] = part_cost(args)
    write_json(_json_name(args), out)


def _json_name(args):
    return "uncertainty" if args.tag is None else f"uncertainty_{args.tag}"


if __name__ == "__main__":
    main()
