"""Linear NPSVOR on Treebank (and a large synthetic sparse problem) against LIBLINEAR.

Peer: liblinear-official, L2-regularised L2-loss SVC dual (``-s 1``), one-vs-rest, the
same C, tolerance (``-e 0.1``) and data, timed in the same run.  Our times separate the
first call (compile + run) from later calls (median, ``block_until_ready``).

The machine has 2 cores shared with other jobs: timings are noisy (repeat and compare
ratios, not absolute seconds).

Usage::

    python benchmarks/npsvor_bench.py --quick     # < 2 minutes
    python benchmarks/npsvor_bench.py             # full: all solvers, CV grid, n=200k scale

Writes ``benchmarks/results/npsvor.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import scipy.sparse as sp

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bayesord.datasets import kfold_masks, load_libsvm  # noqa: E402
from bayesord._npsvor import (  # noqa: E402
    NPSVORConfig,
    cv_npsvor,
    decision_values,
    fit_npsvor,
    predict_r_new,
    predict_r_old,
)
from bayesord._sparse import to_padded_rows  # noqa: E402

DATA = ROOT.parent / "shared" / "datasets" / "treebank"
EPS, TOL = 0.1, 0.1
CS = 2.0 ** np.arange(-5, 6)


def load_treebank():
    Xtr, ytr = load_libsvm(DATA / "treebank.train", n_features=8569)
    Xte, yte = load_libsvm(DATA / "treebank.test", n_features=8569)
    return Xtr, ytr.astype(int) - 1, Xte, yte.astype(int) - 1


def liblinear_time(X, y, C, bias, repeats):
    from liblinear import liblinearutil as L

    prob = L.problem(y + 1.0, X)
    opts = f"-s 1 -c {C} -e {TOL} -q" + (" -B 1" if bias else "")
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        L.train(prob, L.parameter(opts))
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def timed(fn, repeats):
    t = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t)
    return out, first, float(np.median(times)) if times else first


def solvers(quick):
    if quick:
        return [("dcd2", 1), ("block", 64)]
    return [("dcd1", 1), ("dcd2", 1), ("block", 64)]


def cv_variants(quick, bias):
    """(solver, block_size, one_call) for the CV grid.

    The block solver needs many passes at large C with a bias (over 12 minutes for the
    grid in a trial run), so it is left out of the grid with a bias.
    """
    if quick or bias:
        return [("dcd2", 1, False)]
    return [("dcd2", 1, False), ("dcd2", 1, True), ("dcd1", 1, False), ("block", 64, False)]


def single_fits(Xtr, ytr, Xte, yte, quick, rows):
    repeats = 2 if quick else 5
    for bias in ((False,) if quick else (False, True)):
        ll = liblinear_time(Xtr, ytr, 1.0, bias, repeats)
        E = to_padded_rows(Xtr, bias=1.0 if bias else None)
        Et = to_padded_rows(Xte, bias=1.0 if bias else None)
        for solver, bs in solvers(quick):
            cfg = NPSVORConfig(n_features=Xtr.shape[1] + bias, solver=solver, block_size=bs)
            res, first, run = timed(
                lambda: fit_npsvor(E, ytr, 5, 1.0, 1.0, EPS, TOL, jax.random.key(0), cfg), repeats)
            F = decision_values(res.coef, Et)
            pn, po = np.asarray(predict_r_new(F)), np.asarray(predict_r_old(F))
            rows.append(dict(
                task="fit C=1", bias=bias, solver=f"{solver}" + (f"(b={bs})" if solver == "block" else ""),
                compile_s=first - run, run_s=run, liblinear_s=ll, ratio=run / ll,
                mae_new=float(np.mean(np.abs(pn - yte))), mae_old=float(np.mean(np.abs(po - yte))),
                mse_new=float(np.mean((pn - yte) ** 2)), passes=int(np.max(res.n_iter)),
                updates=int(np.sum(res.n_updates)), max_rel_gap=float(np.max(res.gap / res.primal)),
                converged=bool(np.all(res.converged))))
            print_row(rows[-1])


def cv_grid(Xtr, ytr, Xte, yte, quick, rows):
    """5-fold CV over the C grid: the first call (compile + run) and a second call (run)."""
    folds = np.argmin(kfold_masks(ytr, 5, seed=0), axis=0)
    grid = CS[4:7] if quick else CS
    for bias in ((False,) if quick else (False, True)):
        from liblinear import liblinearutil as L

        t = time.perf_counter()
        for f in range(5):
            tr = folds != f
            prob = L.problem(ytr[tr] + 1.0, Xtr[tr])
            for C in grid:
                L.train(prob, L.parameter(f"-s 1 -c {C} -e {TOL} -q" + (" -B 1" if bias else "")))
        ll = time.perf_counter() - t
        E = to_padded_rows(Xtr, bias=1.0 if bias else None)
        Et = to_padded_rows(Xte, bias=1.0 if bias else None)
        for solver, bs, one_call in cv_variants(quick, bias):
            cfg = NPSVORConfig(n_features=Xtr.shape[1] + bias, solver=solver, block_size=bs)
            cv, first, run = timed(
                lambda: cv_npsvor(E, ytr, 5, grid, 5, EPS, TOL, jax.random.key(0), cfg,
                                  folds=folds, one_call=one_call), 1)
            res = fit_npsvor(E, ytr, 5, cv.best_C, cv.best_C, EPS, TOL, jax.random.key(0), cfg)
            F = decision_values(res.coef, Et)
            pn, po = np.asarray(predict_r_new(F)), np.asarray(predict_r_old(F))
            rows.append(dict(
                task=f"5-fold x {grid.size} C, " + ("one call" if one_call else "one call per C"),
                bias=bias,
                solver=f"{solver}" + (f"(b={bs})" if solver == "block" else ""),
                compile_s=first - run, run_s=run, first_call_s=first,
                liblinear_s=ll, ratio=run / ll, best_C=cv.best_C,
                mae_new=float(np.mean(np.abs(pn - yte))), mae_old=float(np.mean(np.abs(po - yte))),
                mse_new=float(np.mean((pn - yte) ** 2)),
                passes=int(np.max(cv.fits.n_iter)), converged=bool(np.all(cv.fits.converged))))
            print_row(rows[-1])


def synthetic(n, d, nnz, seed=0):
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, d, size=(n, nnz))
    vals = rng.exponential(size=(n, nnz))
    vals /= np.linalg.norm(vals, axis=1, keepdims=True)
    X = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, n * nnz + 1, nnz)), shape=(n, d))
    X.sum_duplicates()
    w = rng.normal(size=d)
    score = X @ w + 0.3 * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, [0.2, 0.4, 0.6, 0.8]))
    return X, y


def scale(n, d, nnz, solver, bs):
    """Run in a fresh process so that its peak RSS is its own."""
    X, y = synthetic(n, d, nnz)
    ll = liblinear_time(X, y, 1.0, False, 1)
    E = to_padded_rows(X)
    ell_mb = (E.indices.nbytes + E.values.nbytes) / 2**20
    cfg = NPSVORConfig(n_features=d, solver=solver, block_size=bs)
    res, first, run = timed(
        lambda: fit_npsvor(E, y, 5, 1.0, 1.0, EPS, TOL, jax.random.key(0), cfg), 0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    pred = np.asarray(predict_r_new(decision_values(res.coef, E)))
    return dict(task=f"scale n={n} d={d} nnz/row~{nnz}", bias=False,
                solver=solver + (f"(b={bs})" if solver == "block" else ""),
                compile_s=first - run, run_s=run, first_call_s=first, liblinear_s=ll, ratio=first / ll,
                train_mae=float(np.mean(np.abs(pred - y))), peak_rss_mb=peak, ell_mb=ell_mb,
                passes=int(np.max(res.n_iter)), converged=bool(np.all(res.converged)))


def print_row(r):
    keys = ["task", "bias", "solver", "compile_s", "run_s", "liblinear_s", "ratio", "mae_new",
            "mae_old", "mse_new", "best_C", "passes", "converged", "peak_rss_mb", "train_mae"]
    print("  ".join(f"{k}={r[k]:.4g}" if isinstance(r.get(k), float) else f"{k}={r[k]}"
                    for k in keys if k in r), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scale-only", nargs=5, metavar=("N", "D", "NNZ", "SOLVER", "BS"))
    args = ap.parse_args()
    if args.scale_only:
        n, d, nnz, solver, bs = args.scale_only
        print(json.dumps(scale(int(n), int(d), int(nnz), solver, int(bs))))
        return
    rows = []
    Xtr, ytr, Xte, yte = load_treebank()
    print("== Treebank, C = 1 (first call = compile + run; run = median of later calls)")
    single_fits(Xtr, ytr, Xte, yte, args.quick, rows)
    print("== Treebank, 5-fold CV over C (compile apart) vs the same "
          "LIBLINEAR fits one after another")
    cv_grid(Xtr, ytr, Xte, yte, args.quick, rows)
    print("== synthetic sparse scale problem (fresh process each)")
    size = ("20000", "100000", "50") if args.quick else ("200000", "1000000", "50")
    full = (("dcd2", "1"), ("dcd1", "1"), ("block", "256"))
    for solver, bs in (("dcd2", "1"),) if args.quick else full:
        out = subprocess.run([sys.executable, __file__, "--scale-only", *size, solver, bs],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print_row(rows[-1])
    out_dir = ROOT / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = dict(quick=args.quick, jax=jax.__version__, cores=2,
                note="2 shared cores; timings noisy. liblinear-official -s 1 one-vs-rest.")
    (out_dir / "npsvor.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    print(f"wrote {out_dir / 'npsvor.json'}")


if __name__ == "__main__":
    main()
