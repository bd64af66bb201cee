"""ISBOR's kernel width chosen by PSIS-LOO (Laplace posterior) versus 5-fold CV on MAE.

For each dataset one training/test partition is drawn (ISBOR paper protocol: inputs
standardised with training statistics, continuous targets cut into 5 equal-frequency
classes, the remaining rows are the test set).  On the training part, over one grid of
kernel widths theta:

* LOO: ISBOR is fitted once per theta on all training rows; the PSIS-LOO expected log
  predictive density is computed from draws of its Laplace posterior
  (:func:`bayesord.diagnostics.loo`); the theta with the highest elpd_loo wins.
* CV: for each theta the 5 fold fits run as one vmapped call (held-out rows get weight
  0, as ``ISBOR(theta_selection="cv")`` does); the theta with the lowest mean held-out
  MAE wins.

Reported per dataset: the theta each criterion chooses, whether they agree (same grid
point, or neighbouring), the test MAE of ISBOR fitted on all training rows at each chosen
theta (and the best test MAE over the grid, for reference), the run time of each
selection after compilation, the compile times (the solver, compiled ahead of time with
``lower().compile()`` and shared by both selections; the pointwise log-likelihood of the
LOO evaluation, as the first LOO pass minus the second), and the number of training rows
whose Pareto k exceeds ArviZ's threshold at the LOO-chosen theta.

Training sizes are below the paper's Table 2 for the large sets (time: every selection
fits 6 x the grid size ISBOR models on a shared 2-core machine); they are printed.  One
partition per dataset.  Timings are noisy (2 cores shared with other jobs).

    python benchmarks/loo_bench.py --quick    # 4 continuous sets, 150 training rows, 3 widths
    python benchmarks/loo_bench.py            # BS, SWD, Bank, Computer
    python benchmarks/loo_bench.py --data balance_scale swd --grid 0.03 0.3 3
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import machine, print_table, write_json  # noqa: E402

from bayesord._isbor import ISBORConfig, fit_isbor, predict_isbor  # noqa: E402
from bayesord.datasets import equal_frequency_bins, load_shared  # noqa: E402
from bayesord.diagnostics import loo  # noqa: E402

# name -> (label, training rows in full mode, paper Table 2 training rows)
FULL = {
    "balance_scale": ("BS", 468, 468),
    "swd": ("SWD", 750, 750),
    "bank8fm": ("Bank", 750, 8000),
    "cpu_small": ("Computer", 750, 8092),
}
QUICK = {
    "bank8fm": ("Bank", 150, 8000),
    "cpu_small": ("Computer", 150, 8092),
    "boston_housing": ("Boston", 150, None),
    "machine_cpu": ("MachineCPU", 150, None),
}
FOLDS = 5


def load(name):
    ds = load_shared(name)
    y = ds.y if ds.kind == "ordinal" else equal_frequency_bins(ds.y, 5)
    codes = np.searchsorted(np.unique(y), y).astype(np.int32)
    return np.asarray(ds.X, dtype=np.float64), codes


def partition(X, y, n_train, d_pad, seed):
    perm = np.random.default_rng(seed).permutation(len(y))
    tr, te = perm[:n_train], perm[n_train:]
    mu, sd = X[tr].mean(0), X[tr].std(0)
    Z = (X - mu) / np.where(sd > 0, sd, 1.0)
    # Zero columns leave RBF distances unchanged; padding every set to one width lets
    # sets with equal training size and class count share the compiled solvers.
    Z = np.pad(Z, ((0, 0), (0, d_pad - Z.shape[1])))
    return Z[tr], y[tr], Z[te], y[te]


_COMPILED = {}


def compiled_fit(X, config, min_delta):
    """The ISBOR solver compiled ahead of time for these shapes: (function, compile seconds
    spent now; 0 when an earlier dataset of the same shapes compiled it)."""
    key = (X.shape, config)
    if key in _COMPILED:
        return _COMPILED[key], 0.0
    n = X.shape[0]
    cand, valid = jnp.arange(n, dtype=jnp.int32), jnp.ones(n, bool)

    def fit(X, y, w, key, theta):
        return fit_isbor(X, y, w, cand, valid, key, theta, config=config, min_delta=min_delta)

    t0 = time.perf_counter()
    fn = jax.jit(fit).lower(X, jnp.zeros(n, jnp.int32), jnp.ones(n), jax.random.PRNGKey(0), 1.0).compile()
    _COMPILED[key] = fn
    return fn, time.perf_counter() - t0


def select_by_loo(fit, X, y, grid, draws, chains):
    rng = jax.random.PRNGKey(0)
    t0 = time.perf_counter()
    fits = [jax.block_until_ready(fit(X, y, jnp.ones(len(y)), rng, t)) for t in grid]
    fit_s = time.perf_counter() - t0

    def loo_pass():
        out = []
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for res in fits:
                out.append(loo(res, X, y, draws=draws, chains=chains, key=0))
        return out, time.perf_counter() - t, caught

    elpds, first_s, caught = loo_pass()  # compiles the pointwise log-likelihood per shape
    elpds, loo_s, _ = loo_pass()
    for w in caught:
        print(f"    warning: {w.message}")
    scores = np.array([float(e.elpd_loo) for e in elpds])
    i = int(np.nanargmax(scores))
    k = [np.asarray(e.pareto_k) for e in elpds]
    good = [float(e.good_k) for e in elpds]
    return dict(index=i, scores=scores, fits=fits, loo_compile_s=max(first_s - loo_s, 0.0),
                run_s=fit_s + loo_s, fit_s=fit_s, loo_s=loo_s,
                high_k=[int(np.sum(kk > g)) for kk, g in zip(k, good)], good_k=good[i],
                status=[int(r.status) for r in fits], n_rv=[int(r.n_active) for r in fits],
                n_iter=[int(r.n_iter) for r in fits])


def select_by_cv(fit, X, y, grid, seed):
    """5-fold CV on MAE: held-out rows get weight 0 (ISBOR never picks their centres).

    The folds run one after another through the same compiled solver, as in
    ``ISBOR(theta_selection="cv")``.  (Under ``vmap``, the solver's ``lax.switch`` over
    active-set tiers becomes a select that runs every tier and the folds iterate in
    lockstep; a first version of this benchmark that did so had not finished the CV of
    one quick dataset after several minutes, so it was not timed further.)"""
    folds = np.random.default_rng(seed).permutation(len(y)) % FOLDS
    yn = np.asarray(y)
    rng = jax.random.PRNGKey(0)
    mae, status = [], []
    t0 = time.perf_counter()
    for t in grid:
        errs = []
        for f in range(FOLDS):
            res = fit(X, y, jnp.asarray((folds != f).astype(np.float64)), rng, t)
            pred = np.asarray(predict_isbor(res, X).labels)
            errs.append(np.mean(np.abs(pred[folds == f] - yn[folds == f])))
            status.append(int(res.status))
        mae.append(np.mean(errs))
    run_s = time.perf_counter() - t0
    mae = np.array(mae)
    return dict(index=int(np.argmin(mae)), scores=mae, run_s=run_s, status=status)


def test_mae(res, X, y):
    pred = np.asarray(predict_isbor(res, X).labels)
    return float(np.mean(np.abs(pred - y)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--grid", type=float, nargs="+", default=None,
                    help="kernel widths (default 0.01 0.03 0.1 0.3 1; quick: 0.03 0.3 3)")
    ap.add_argument("--draws", type=int, default=None, help="posterior draws per chain (4 chains)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", nargs="+", choices=sorted({**FULL, **QUICK}), default=None,
                    help="datasets to run (default: the quick or the full set)")
    args = ap.parse_args(argv)
    sets = QUICK if args.quick else FULL
    if args.data:
        sizes = {**FULL, **QUICK} if args.quick else {**QUICK, **FULL}  # the mode's sizes win
        sets = {n: sizes[n] for n in args.data}
    grid = args.grid or ([0.03, 0.3, 3.0] if args.quick else [0.01, 0.03, 0.1, 0.3, 1.0])
    draws = args.draws or (100 if args.quick else 250)
    chains, min_delta = 4, 1e-2
    d_pad = max(load(n)[0].shape[1] for n in sets)
    rows, detail = [], []
    for name, (label, n_train, paper_n) in sets.items():
        X, y = load(name)
        Xtr, ytr, Xte, yte = partition(X, y, n_train, d_pad, args.seed)
        K = int(y.max()) + 1
        config = ISBORConfig(n_classes=K, capacity=128, max_iter=500, cache_basis=True)
        Xtr, ytr = jnp.asarray(Xtr), jnp.asarray(ytr)
        print(f"{label}: {n_train} training rows (paper {paper_n or '-'}), {len(yte)} test rows, "
              f"d={X.shape[1]}, K={K}", flush=True)
        fit, compile_s = compiled_fit(Xtr, config, min_delta)
        lo = select_by_loo(fit, Xtr, ytr, grid, draws, chains)
        cv = select_by_cv(fit, Xtr, ytr, grid, args.seed)
        test_mae(lo["fits"][0], Xte, yte)  # compile the prediction before timing it
        test = [test_mae(r, Xte, yte) for r in lo["fits"]]
        i, j = lo["index"], cv["index"]
        agree = "same" if i == j else ("neighbour" if abs(i - j) == 1 else "no")
        rows.append({
            "data": label, "n train": n_train, "theta LOO": grid[i], "theta CV": grid[j],
            "agree": agree, "test MAE LOO": test[i], "test MAE CV": test[j],
            "best test MAE": min(test), "LOO run s": lo["run_s"], "CV run s": cv["run_s"],
            "CV/LOO run": cv["run_s"] / lo["run_s"], "solver compile s": compile_s,
            "LOO eval compile s": lo["loo_compile_s"], "high k": lo["high_k"][i],
            "k threshold": round(lo["good_k"], 2),
        })
        detail.append({"data": label, "name": name, "n_train": n_train, "paper_n_train": paper_n,
                       "n_test": int(len(yte)), "grid": grid, "elpd_loo": lo["scores"].tolist(),
                       "cv_mae": cv["scores"].tolist(), "test_mae": test, "high_k": lo["high_k"],
                       "n_rv": lo["n_rv"], "n_iter": lo["n_iter"], "fit_status": lo["status"],
                       "cv_status": cv["status"],
                       "loo_fit_s": lo["fit_s"], "loo_eval_s": lo["loo_s"]})
        print(f"  elpd_loo {np.round(lo['scores'], 1).tolist()}  CV MAE {np.round(cv['scores'], 3).tolist()}  "
              f"test MAE {np.round(test, 3).tolist()}  high-k rows {lo['high_k']}  RVs {lo['n_rv']}", flush=True)
    cols = list(rows[0])
    print("\nTheta by PSIS-LOO vs 5-fold CV (times in s; CV/LOO > 1 means LOO is faster):")
    print_table(rows, cols)
    write_json("loo", {"machine": machine(), "quick": args.quick, "grid": grid, "draws": draws * chains,
                       "folds": FOLDS, "columns": cols, "rows": rows, "detail": detail})


if __name__ == "__main__":
    main()
