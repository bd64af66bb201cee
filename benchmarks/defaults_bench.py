"""Defaults on data nobody tuned for: every estimator as constructed, against what a user
would pick instead.  (Issue: defaults that give good answers on data nobody tuned for.)

Every dense set of ``../shared/datasets`` (continuous targets cut into 5 equal-frequency
classes), ``--splits`` random stratified 80/20 splits, training parts of more than
``--max-train`` rows subsampled (stratified), columns standardised on the training part.
Each bayesord estimator is fitted with its constructor defaults; the margin models, which
have no probabilities of their own, get them from their documented probability layer
(``calibrate(X_train, y_train, cv=5)``, timed apart).  TransductiveOrdinalRegression is
given the test rows' inputs as its unlabelled rows (its purpose).  The peers, with their
defaults: mord ``LogisticAT``, statsmodels ``OrderedModel`` (probit, ``method="bfgs"``),
scikit-learn ``LogisticRegression``, ``SVC(kernel="rbf", gamma="scale",
probability=True)``, ``HistGradientBoostingClassifier`` and the majority class.

Per set and model: test MAE, accuracy, log-loss, RPS and 10-bin top-label ECE (means over
splits), the first fit's time (compilation included, split 0) and the median fit time of
the later splits, and the warnings the fits raised (counted by category).  Then:

* a win/tie/loss table of each bayesord model against the set's best peer by MAE: the
  paired difference over splits, its standard error, "win"/"loss" when the mean is more
  than two standard errors below/above zero, else "tie";
* the acceptance checks of the issue: no default worse than the majority class (MAE), every
  fit without a convergence warning, ISBOR's MAE against ``SVC`` and its log-loss against
  ``OrdinalProbit``, and the best bayesord model against the best linear peer, with the gap
  to gradient boosting.

Two settings that a default replaced can be run beside the defaults for the record, when
named in ``--models``: ``"ISBOR absolute grid"`` (``theta_grid=(0.01, 0.1, 1, 10)``) and
``"PRank unaveraged"``.  The JSON is rewritten after every data set (``"complete": false``
until the last), so a long run stopped early keeps what it measured.

Run: ``python benchmarks/defaults_bench.py`` (the same as ``bayesord bench defaults``;
``--data a,b``, ``--models A,B``, ``--splits N``; ``--quick``: 3 small sets, 2 splits).
Prints the tables and writes ``benchmarks/results/defaults.json`` (``defaults_TAG.json``
with ``--tag TAG``).  Needs ``pip install -e ".[benchmark]"``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)  # as README.md recommends for every user

from _common import RESULTS, machine, print_table, rescale, write_json  # noqa: E402

import bayesord  # noqa: E402
from bayesord.estimators._proba_layer import ProbaLayerMixin  # noqa: E402
from bayesord.datasets import SHARED_DATASETS, equal_frequency_bins, load_shared, stratified_split  # noqa: E402
from bayesord.metrics import ece, mae, ordinal_log_loss, rps  # noqa: E402

BAYESORD = ["OrdinalProbit", "CumulativeLinkModel", "ISBOR", "SBOR", "NPSVOR", "RedSVM",
            "TransductiveOrdinalRegression", "SwappedPairsSVM", "CuSumRank", "PRank"]
PEERS = ["mord LogisticAT", "statsmodels probit", "LogisticRegression", "SVC rbf", "HistGradientBoosting",
         "majority"]
LINEAR_PEERS = ["mord LogisticAT", "statsmodels probit", "LogisticRegression"]
# Not defaults, run only when named in --models: the settings a default replaced, for the record.
VARIANTS = {"ISBOR absolute grid": lambda seed: bayesord.ISBOR(theta_grid=(0.01, 0.1, 1.0, 10.0), random_state=seed),
            "PRank unaveraged": lambda seed: bayesord.PRank(averaged=False, random_state=seed),
            "ISBOR linear": lambda seed: bayesord.ISBOR(kernel="linear", random_state=seed),
            "OrdinalProbit ard": lambda seed: bayesord.OrdinalProbit(prior="ard", random_state=seed),
            "ISBOR uncalibrated": lambda seed: bayesord.ISBOR(calibrate_sigma=False, random_state=seed),
            "ISBOR probit": lambda seed: bayesord.ISBOR(link="probit", random_state=seed)}


class _Majority:
    def fit(self, X, y):
        self.classes_ = np.unique(y)
        counts = np.array([np.sum(y == c) for c in self.classes_])
        self.label_, self.share_ = self.classes_[np.argmax(counts)], counts / counts.sum()
        return self

    def predict(self, X):
        return np.full(X.shape[0], self.label_)

    def predict_proba(self, X):
        return np.tile(self.share_, (X.shape[0], 1))


class _Mord:
    """mord on class codes 0..K-1 (it needs them), labels mapped back."""

    def fit(self, X, y):
        import mord

        self.classes_ = np.unique(y)
        self.model = mord.LogisticAT().fit(X, np.searchsorted(self.classes_, y))
        return self

    def predict(self, X):
        return self.classes_[self.model.predict(X)]

    def predict_proba(self, X):
        return self.model.predict_proba(X)


class _Statsmodels:
    def fit(self, X, y):
        from statsmodels.miscmodels.ordinal_model import OrderedModel

        self.classes_ = np.unique(y)
        codes = np.searchsorted(self.classes_, y)
        self.model = OrderedModel(codes, X, distr="probit").fit(method="bfgs", disp=False, maxiter=2000)
        return self

    def predict_proba(self, X):
        return np.asarray(self.model.predict(X))

    def predict(self, X):
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


def _peer(label):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    return {"mord LogisticAT": _Mord, "statsmodels probit": _Statsmodels,
            "LogisticRegression": LogisticRegression,
            "SVC rbf": lambda: SVC(kernel="rbf", gamma="scale", probability=True, random_state=0),
            "HistGradientBoosting": lambda: HistGradientBoostingClassifier(random_state=0),
            "majority": _Majority}[label]()


def _data(name):
    ds = load_shared(name)
    y = equal_frequency_bins(ds.y, 5) if ds.kind == "continuous" else ds.y
    return ds.X, y


def _fit_one(label, Xtr, ytr, Xte, seed):
    """Fit one model; returns (model, fit seconds, calibrate seconds or None, warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        if label in BAYESORD or label in VARIANTS:
            model = VARIANTS[label](seed) if label in VARIANTS else getattr(bayesord, label)(random_state=seed)
            if label == "TransductiveOrdinalRegression":
                model.fit(Xtr, ytr, X_unlabeled=Xte)
            else:
                model.fit(Xtr, ytr)
        else:
            model = _peer(label).fit(Xtr, ytr)
        fit_s = time.perf_counter() - t0
        cal_s = None
        if isinstance(model, ProbaLayerMixin):
            t0 = time.perf_counter()
            model.calibrate(Xtr, ytr, cv=5, random_state=seed)
            cal_s = time.perf_counter() - t0
    kinds = Counter(w.category.__name__ for w in caught)
    return model, fit_s, cal_s, kinds, [str(w.message).split("\n")[0][:160] for w in caught]


def run_set(name, models, args):
    X, y = _data(name)
    classes = np.unique(y)
    per = {m: {k: [] for k in ("mae", "acc", "ll", "rps", "ece", "fit", "cal", "theta", "split_mae")}
           for m in models}
    notes = {m: Counter() for m in models}
    messages = {m: [] for m in models}
    n_train = None
    for split in range(args.splits):
        tr, te = stratified_split(y, int(0.8 * len(y)), seed=split)
        if len(tr) > args.max_train:
            tr = tr[stratified_split(y[tr], args.max_train, seed=split)[0]]
        n_train = len(tr)
        Xtr, Xte = rescale(X[tr], X[te])
        for m in models:
            try:
                model, fit_s, cal_s, kinds, msgs = _fit_one(m, Xtr, y[tr], Xte, split)
            except Exception as err:  # a failed default is a result, not a crash of the run
                notes[m]["error"] += 1
                messages[m].append(f"split {split}: {type(err).__name__}: {str(err)[:160]}")
                per[m]["split_mae"].append(None)
                continue
            notes[m].update(kinds)
            messages[m] += [s for s in msgs if s not in messages[m]]
            pred = model.predict(Xte)
            proba = np.asarray(model.predict_proba(Xte), dtype=float)
            if m in PEERS:  # some peers' rows sum to 1 only in single precision
                proba = proba / proba.sum(axis=1, keepdims=True)
            r = per[m]
            r["mae"].append(mae(y[te], pred, classes=classes))
            r["split_mae"].append(r["mae"][-1])
            r["acc"].append(float(np.mean(pred == y[te])))
            r["ll"].append(ordinal_log_loss(y[te], proba, classes=classes))
            r["rps"].append(rps(y[te], proba, classes=classes))
            r["ece"].append(ece(y[te], proba, classes=classes))
            r["fit"].append(fit_s)
            r["cal"].append(cal_s)
            r["theta"].append(getattr(model, "theta_", None))  # ISBOR/SBOR: the width chosen
        print(f"  {name} split {split}: done", file=sys.stderr, flush=True)
    jax.clear_caches()
    rows = []
    for m in models:
        r = per[m]
        if not r["mae"]:
            rows.append({"data": name, "model": m, "n_train": n_train, "errors": notes[m]["error"],
                         "messages": messages[m]})
            continue
        cal = [c for c in r["cal"] if c is not None]
        rows.append({
            "data": name, "model": m, "n_train": n_train, "MAE": float(np.mean(r["mae"])),
            "acc": float(np.mean(r["acc"])), "log-loss": float(np.mean(r["ll"])),
            "RPS": float(np.mean(r["rps"])), "ECE": float(np.mean(r["ece"])),
            "first fit s": r["fit"][0],
            "fit s": statistics.median(r["fit"][1:]) if len(r["fit"]) > 1 else None,
            "calibrate s": statistics.median(cal) if cal else None,
            "convergence warnings": notes[m]["ConvergenceWarning"],
            "other warnings": sum(v for k, v in notes[m].items() if k not in ("ConvergenceWarning", "error")),
            "errors": notes[m]["error"], "messages": messages[m],
            "mae_splits": r["split_mae"],  # by split, None where the fit failed
            "theta": r["theta"] if any(t is not None for t in r["theta"]) else None,
        })
    return rows


def _paired(a, b):
    """Mean and standard error of ``a - b`` over the splits both have, and the verdict."""
    d = np.asarray([u - v for u, v in zip(a, b) if u is not None and v is not None])
    se = float(np.std(d, ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")
    mean = float(d.mean())
    verdict = "win" if mean + 2 * se < 0 else "loss" if mean - 2 * se > 0 else "tie"
    return mean, se, verdict


def verdicts(rows):
    """Each bayesord model against the set's best peer by MAE (paired over splits)."""
    out = []
    for name in dict.fromkeys(r["data"] for r in rows):
        sel = {r["model"]: r for r in rows if r["data"] == name and "MAE" in r}
        peers = [p for p in PEERS if p in sel and p != "majority"]
        if not peers:
            continue
        best = min(peers, key=lambda p: sel[p]["MAE"])
        for m in BAYESORD + list(VARIANTS):
            if m in sel and len(sel[m]["mae_splits"]) == len(sel[best]["mae_splits"]):
                mean, se, verdict = _paired(sel[m]["mae_splits"], sel[best]["mae_splits"])
                out.append({"data": name, "model": m, "best peer": best, "MAE - peer": mean, "se": se,
                            "verdict": verdict})
    return out


def checks(rows, ordinal_sets):
    """The issue's acceptance checks, each as a count and the failing cells."""
    by = {(r["data"], r["model"]): r for r in rows if "MAE" in r}
    sets = list(dict.fromkeys(r["data"] for r in rows))
    out = {}
    worse = [f"{d}/{m}" for d in sets for m in BAYESORD
             if (d, m) in by and (d, "majority") in by and by[d, m]["MAE"] > by[d, "majority"]["MAE"]]
    out["worse than majority"] = worse
    out["fits with convergence warnings"] = [f"{d}/{m}: {by[d, m]['convergence warnings']}" for d in sets
                                              for m in BAYESORD
                                              if (d, m) in by and by[d, m]["convergence warnings"]]
    out["errors"] = [f"{r['data']}/{r['model']}" for r in rows if r.get("errors")]
    for key, peer, metric in (("ISBOR MAE <= SVC", "SVC rbf", "MAE"),
                              ("ISBOR log-loss <= OrdinalProbit", "OrdinalProbit", "log-loss")):
        both = [d for d in ordinal_sets if (d, "ISBOR") in by and (d, peer) in by]
        out[key] = f"{sum(by[d, 'ISBOR'][metric] <= by[d, peer][metric] for d in both)} of {len(both)} ordinal sets"
    gaps = []
    for d in sets:
        ours = [m for m in BAYESORD if (d, m) in by]
        lin = [m for m in LINEAR_PEERS if (d, m) in by]
        if not ours or not lin:
            continue
        best_ours = min(ours, key=lambda m: by[d, m]["MAE"])
        best_lin = min(lin, key=lambda m: by[d, m]["MAE"])
        mean, se, verdict = _paired(by[d, best_ours]["mae_splits"], by[d, best_lin]["mae_splits"])
        hgb = by.get((d, "HistGradientBoosting"))
        gaps.append({"data": d, "best bayesord": best_ours, "best linear peer": best_lin,
                     "MAE - linear": mean, "se": se, "verdict": verdict,
                     "MAE - HGB": None if hgb is None else by[d, best_ours]["MAE"] - hgb["MAE"]})
    out["best bayesord against the best linear peer"] = gaps
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--max-train", type=int, default=2000)
    p.add_argument("--models", default=",".join(BAYESORD + PEERS))
    p.add_argument("--data", help="comma-separated data set names (default: every dense set)")
    p.add_argument("--tag", help="write results/defaults_TAG.json")
    args = p.parse_args(argv)
    models = args.models.split(",")
    known = BAYESORD + PEERS + list(VARIANTS)
    unknown = [m for m in models if m not in known]
    if unknown:
        p.error(f"unknown models {unknown}; choose from {known}")
    names = args.data.split(",") if args.data else [n for n, k in SHARED_DATASETS.items()
                                                    if k in ("ordinal", "continuous")]
    if args.quick:
        names, args.splits = ["toy", "tae", "machine_cpu"], 2
    if args.splits < 2:
        p.error("--splits must be at least 2 (the verdicts are paired over splits)")
    rows = []
    t0 = time.perf_counter()
    for name in names:
        rows += run_set(name, models, args)
        report(rows, models, names, args, time.perf_counter() - t0, final=name == names[-1])


def report(rows, models, names, args, seconds, final):
    """Write the JSON of the sets done so far (a long run that stops early keeps them); print
    the tables at the end."""
    cols = ["data", "model", "n_train", "MAE", "acc", "log-loss", "RPS", "ECE", "first fit s", "fit s",
            "calibrate s", "convergence warnings", "other warnings", "errors"]
    table = verdicts(rows)
    summary = [{"model": m, **{v: sum(1 for r in table if r["model"] == m and r["verdict"] == v)
                               for v in ("win", "tie", "loss")}} for m in BAYESORD + list(VARIANTS) if m in models]
    ordinal_sets = [n for n in names if SHARED_DATASETS[n] == "ordinal"]
    acc = checks(rows, ordinal_sets)
    payload = {"machine": machine(), "splits": args.splits, "max_train": args.max_train, "data": names,
               "seconds": seconds, "complete": final, "rows": rows, "columns": cols, "verdicts": table,
               "summary": summary, "checks": acc}
    if not final:
        path = RESULTS / ("defaults.json" if args.tag is None else f"defaults_{args.tag}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=float))
        return
    print(f"\ndefaults: {args.splits} splits, training parts of at most {args.max_train} rows")
    print_table(rows, cols)
    print("\nMAE against the best peer on each set (paired over splits; win/loss beyond 2 se)")
    print_table(table, ["data", "model", "best peer", "MAE - peer", "se", "verdict"])
    print_table(summary, ["model", "win", "tie", "loss"])
    print("\nchecks")
    for key, value in acc.items():
        if key == "best bayesord against the best linear peer":
            print_table(value, ["data", "best bayesord", "best linear peer", "MAE - linear", "se", "verdict",
                                "MAE - HGB"])
        else:
            print(f"  {key}: {value if value else 'none'}")
    for r in rows:
        if r.get("messages"):
            print(f"  {r['data']}/{r['model']}: {r['messages'][:3]}", file=sys.stderr)
    write_json("defaults" if args.tag is None else f"defaults_{args.tag}", payload)


if __name__ == "__main__":
    main()
