"""Benchmarks for RED-SVM and transductive ordinal regression (TOR).

Reproduces, at reduced or full size:

* ``synthetic``: Section V-C / Fig. 8 of the TOR paper.  Algorithm 3 data (K = 5,
  dimension 2000 (K+2), unit rows), 2,500 examples, 200 labeled, linear kernel, p in
  {0, 0.1, ..., 0.9}.  Reports zero-one and absolute error on the unlabeled rows for
  RED-SVM predictions (Eq. 3), for RED-SVM ranks cut in the labeled class ratios
  (Algorithm 2, the "RED-SVM" of Figs. 7-8) and for TOR.
* ``real``: Section V-A/B.  abalone, bank8fm, california_housing, target cut into 5
  equal-frequency classes, features standardised on all rows, labeled sizes 100/200/400,
  the rest unlabeled; C1 by 5-fold CV of RED-SVM on the labeled rows; perceptron kernel
  (Delta_p = 0) through a Nystrom map with ``--landmarks`` rows.  ``--datasets treebank``
  runs the same protocol on the Treebank sentences (train and test files together, 11,855
  unit-length sparse rows, 5 classes) with the linear kernel, the closest shared analogue
  of the paper's sentiment sets (Section V-D, Figs. 10-11).
* ``sensitivity``: Section VI-A3 / Fig. 9.  400 labeled rows, C1 fixed at each value of the
  ``--c-min`` ... ``--c-max`` grid (no CV), RED-SVM and TOR side by side on the same splits
  as ``real``; the paper finds TOR better at every C1 and less sensitive to it.  Not in the
  default parts (a TOR fit at C1 = 10 takes minutes on bank8fm).
* ``--known-ratios`` (real and sensitivity parts): TOR is run a second time with
  ``class_ratios`` set to the class proportions of all rows, which the protocol fixes by
  construction (equal-frequency classes; on abalone ties in the integer target make them
  0.20/0.14/0.32/0.12/0.23, read off all rows).  It separates the cost of estimating the
  ratios from a few labeled rows from the cost of imposing them at all.
* ``time``: california_housing, 400 labeled + 20,240 unlabeled, all annealing stages:
  wall time, retrainings, peak memory.
* ``peer``: one RED-SVM fit (hinge, no intercept) against scikit-learn's LinearSVC
  (liblinear dual coordinate descent) on the same extended binary problem; speed ratio.

Compile time (first call) and run time (later calls, ``block_until_ready``) are reported
separately for the peer comparison; elsewhere, times are for calls after a warm-up.
The machine has 2 cores shared with other jobs: timings are noisy.

Usage: ``python benchmarks/tor_bench.py --quick`` (under 2 minutes) or without
``--quick`` for the full protocol (hours).  Writes ``benchmarks/results/tor.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path

import jax
import scipy.sparse as sp

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bayesord._basis import fit_kernel_map, transform_kernel_map  # noqa: E402
from bayesord._redsvm import RedSVMConfig, fit_redsvm, predict_redsvm, threshold_prediction  # noqa: E402
from bayesord._sparse import to_padded_rows  # noqa: E402
from bayesord._tor import TORConfig, fit_tor, predict_tor  # noqa: E402
from bayesord.datasets import make_tor_synthetic  # noqa: E402
from bayesord.datasets import equal_frequency_bins, load_csv, load_shared  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets"


def errors(pred, true):
    return float(np.mean(pred != true)), float(np.mean(np.abs(pred - true)))


def run_split(Z, codes, unl, K, C1, tol, seed, max_retrains=5000, swap_rule="eq5", known_ratios=False):
    """RED-SVM (Eq. 3 and Algorithm 2 labels) and TOR on one split; returns a dict.

    ``known_ratios``: also run TOR with Algorithm 2 handing out the class proportions of all
    rows (``class_ratios``) instead of the labeled rows' (columns ``known_ratio_*`` for its
    pseudo-labels, ``tor_known_*`` for its result).
    """
    def tor(class_ratios=None):
        return fit_tor(Z, np.where(unl, 0, codes), unl, TORConfig(K, max_retrains=max_retrains, swap_rule=swap_rule),
                       C1=C1, tol=tol, key=jax.random.PRNGKey(seed), class_ratios=class_ratios)

    t0 = time.perf_counter()
    res = tor()
    jax.block_until_ready(res)
    dt = time.perf_counter() - t0
    pred_red = np.asarray(threshold_prediction(res.init_w, res.init_theta, res.init_b, Z).labels)[unl]
    true = codes[unl]
    out = {}
    out["redsvm_zo"], out["redsvm_mae"] = errors(pred_red, true)
    out["ratio_zo"], out["ratio_mae"] = errors(np.asarray(res.init_labels)[unl], true)
    out["tor_zo"], out["tor_mae"] = errors(np.asarray(res.labels)[unl], true)
    # TOR's final inductive model (Eq. 3) on the same rows, next to its transductive labels
    pred_model = np.asarray(predict_tor(res, Z).labels)[unl]
    out["tor_model_zo"], out["tor_model_mae"] = errors(pred_model, true)
    out.update(seconds=dt, retrains=int(res.n_retrains), swaps=int(res.n_swaps),
               stages=int(res.n_stages), rejected=int(res.n_rejected), status=int(res.status))
    if known_ratios:
        res_k = tor(np.bincount(codes, minlength=K) / codes.shape[0])
        out["known_ratio_zo"], out["known_ratio_mae"] = errors(np.asarray(res_k.init_labels)[unl], true)
        out["tor_known_zo"], out["tor_known_mae"] = errors(np.asarray(res_k.labels)[unl], true)
    return out


def summarise(rows):
    keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float))]
    return {k: float(np.mean([r[k] for r in rows])) for k in keys} | {"n": len(rows)}


# --------------------------------------------------------------------------- synthetic


def bench_synthetic(args):
    ps = [0.0, 0.2, 0.4, 0.6] if args.quick else [round(0.1 * i, 1) for i in range(10)]
    n_sets = args.sets or (1 if args.quick else 20)
    n = 800 if args.quick else 2500
    n_lab = 200
    table = {}
    print(f"\n== synthetic (Algorithm 3, n={n}, {n_lab} labeled, C1={args.c_synth}, {n_sets} sets) ==")
    print(f"{'p':>4} {'RED zo':>7} {'ratio zo':>8} {'TOR zo':>7} {'RED mae':>7} {'ratio mae':>9} "
          f"{'TOR mae':>7} {'swaps':>6} {'retr':>5} {'sec':>6}")
    for p in ps:
        rows = []
        for s in range(n_sets):
            X, y = make_tor_synthetic(n, p=p, random_state=1000 * s + int(10 * p))
            rng = np.random.default_rng(s)
            unl = np.ones(n, bool)
            unl[rng.choice(n, n_lab, replace=False)] = False
            rows.append(run_split(to_padded_rows(X, multiple=32), y - 1, unl, 5, args.c_synth, args.tol, s,
                                  swap_rule=args.swap_rule))
        m = summarise(rows)
        table[str(p)] = {"mean": m, "runs": rows}
        print(f"{p:>4} {m['redsvm_zo']:7.3f} {m['ratio_zo']:8.3f} {m['tor_zo']:7.3f} {m['redsvm_mae']:7.3f} "
              f"{m['ratio_mae']:9.3f} {m['tor_mae']:7.3f} {m['swaps']:6.1f} {m['retrains']:5.1f} {m['seconds']:6.1f}")
    return table


# --------------------------------------------------------------------------- real data


def load_real(name):
    X, y, _ = load_csv(DATA / f"{name}.csv.gz")
    X = np.asarray(X, np.float64)
    X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    return X, equal_frequency_bins(np.asarray(y, np.float64), 5) - 1


def load_any(name):
    """(X, codes 0..4): Treebank's two LIBSVM files stacked (sparse CSR, unit-length rows), or a
    CSV set standardised and cut into 5 classes.  FileNotFoundError when it is absent."""
    if name != "treebank":
        return load_real(name)
    d = load_shared("treebank", root=DATA)
    y = np.concatenate([d.y, d.y_test])
    return sp.vstack([d.X, d.X_test]).tocsr(), np.searchsorted(np.unique(y), y)


def features(X, landmarks, seed):
    """Sparse rows as they are (linear kernel, as the paper for its sentiment sets), or the
    perceptron-kernel Nystrom map of dense rows."""
    return to_padded_rows(X, multiple=32) if sp.issparse(X) else kernel_features(X, landmarks, seed)


def take_rows(Z, rows):
    """Rows of a dense matrix or of a PaddedRows (a pytree of per-row arrays)."""
    return jax.tree_util.tree_map(lambda a: a[rows], Z)


def kernel_features(X, landmarks, seed):
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(X.shape[0], min(landmarks, X.shape[0]), replace=False))
    kmap = fit_kernel_map(jnp.asarray(X[idx]), "perceptron")
    return transform_kernel_map(kmap, jnp.asarray(X), "perceptron")


def cv_c(Z, codes, K, grid, tol, seed):
    """5-fold CV of RED-SVM on the labeled rows (zero-one error); smallest error wins."""
    n = codes.shape[0]
    folds = np.random.default_rng(seed).permutation(n) % 5
    errs = []
    cfg = RedSVMConfig(K)
    for C in grid:
        e = 0.0
        for f in range(5):
            tr = folds != f
            r = fit_redsvm(Z, codes, np.where(tr, C, 0.0), cfg, tol=tol)
            pred = np.asarray(predict_redsvm(r, Z).labels)
            e += np.sum(pred[~tr] != codes[~tr])
        errs.append(e / n)
    return float(grid[int(np.argmin(errs))]), errs


def real_sets(args):
    """(name, X, codes) for each of --datasets that is present; a 1,500-row subsample of the
    first one in quick mode."""
    for name in args.datasets.split(",")[:1] if args.quick else args.datasets.split(","):
        try:
            X, codes = load_any(name)
        except FileNotFoundError:
            print(f"{name}: not found under {DATA}, skipped")
            continue
        if args.quick:  # a subsample keeps the quick mode short
            keep = np.random.default_rng(0).choice(X.shape[0], 1500, replace=False)
            X, codes = X[keep], codes[keep]
        yield name, X, codes


def labeled_split(n, n_lab, r):
    """Realisation r at n_lab labeled rows: the labeled indices and the unlabeled mask."""
    lab = np.random.default_rng(100 * r + n_lab).choice(n, n_lab, replace=False)
    unl = np.ones(n, bool)
    unl[lab] = False
    return lab, unl


def bench_real(args):
    sizes = [int(v) for v in args.sizes.split(",")]
    reps = args.reps or (1 if args.quick else 20)
    grid = [0.1, 1.0, 10.0] if args.quick else [10.0**k for k in range(args.c_min, args.c_max + 1)]
    out = {}
    print(f"\n== real data (5 equal-frequency classes, perceptron kernel with {args.landmarks} landmarks or "
          f"linear for treebank, {reps} realisations, C1 grid {grid}) ==")
    print(f"{'data':>18} {'lab':>4} {'C1':>7} {'RED zo':>7} {'ratio zo':>8} {'TOR zo':>7} {'model zo':>8} "
          f"{'RED mae':>7} {'TOR mae':>7} {'retr':>5} {'sec':>7}")
    for name, X, codes in real_sets(args):
        out[name] = {}
        for n_lab in sizes[:1] if args.quick else sizes:
            rows = []
            for r in range(args.first_rep, args.first_rep + reps):
                lab, unl = labeled_split(X.shape[0], n_lab, r)
                Z = features(X, args.landmarks, r)
                C1, cv_errs = cv_c(take_rows(Z, lab), codes[lab], 5, grid, args.tol, r)
                row = run_split(Z, codes, unl, 5, C1, args.tol, r, swap_rule=args.swap_rule,
                                known_ratios=args.known_ratios)
                row["C1"] = C1
                rows.append(row)
                print(f"{'':>18} {n_lab:>4} {C1:7.3g} {row['redsvm_zo']:7.3f} {row['ratio_zo']:8.3f} "
                      f"{row['tor_zo']:7.3f} {row['tor_model_zo']:8.3f} {row['redsvm_mae']:7.3f} {row['tor_mae']:7.3f} "
                      f"{row['retrains']:5d} {row['seconds']:7.1f}  realisation {r}{known_note(row)}", flush=True)
            m = summarise(rows) | paired_vs_redsvm(rows)
            out[name][str(n_lab)] = {"mean": m, "runs": rows}
            print(f"{name:>18} {n_lab:>4} {m['C1']:7.3g} {m['redsvm_zo']:7.3f} {m['ratio_zo']:8.3f} "
                  f"{m['tor_zo']:7.3f} {m['tor_model_zo']:8.3f} {m['redsvm_mae']:7.3f} {m['tor_mae']:7.3f} {m['retrains']:5.1f} "
                  f"{m['seconds']:7.1f}")
            print(f"{'':>18} TOR - RED-SVM {m['tor_minus_redsvm']:+.4f} +- {m['se']:.4f} "
                  f"({m['tor_wins']}/{len(rows)} wins){known_summary(m, len(rows))}")
    return out


def paired_vs_redsvm(rows):
    """TOR's zero-one error minus RED-SVM's over realisations: mean, standard error, wins (and the
    same for TOR with known class ratios when it was run)."""
    out = {}
    for tag, col in (("", "tor_zo"), ("_known", "tor_known_zo")):
        if col not in rows[0]:
            continue
        diff = np.array([row[col] - row["redsvm_zo"] for row in rows])
        out[f"tor{tag}_minus_redsvm"] = float(diff.mean())
        out[f"se{tag}"] = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("nan")
        out[f"tor{tag}_wins"] = int(np.sum(diff < 0))
    return out


def known_note(row):
    """The known-ratio columns of one run or of a mean, when they were computed."""
    if "tor_known_zo" not in row:
        return ""
    return f"  known ratios: labels {row['known_ratio_zo']:.3f}, TOR {row['tor_known_zo']:.3f}"


def known_summary(m, n):
    """:func:`known_note` of a mean plus TOR-with-known-ratios minus RED-SVM (s.e., wins)."""
    if "tor_known_zo" not in m:
        return ""
    return (f"{known_note(m)} ({m['tor_known_minus_redsvm']:+.4f} +- {m['se_known']:.4f}, "
            f"{m['tor_known_wins']}/{n} wins)")


def bench_sensitivity(args):
    """Fig. 9: zero-one error on the unlabeled rows at each fixed C1 (no CV)."""
    n_lab = args.sens_size
    reps = args.reps or (1 if args.quick else 20)
    grid = [0.01, 1.0] if args.quick else [10.0**k for k in range(args.c_min, args.c_max + 1)]
    out = {}
    print(f"\n== sensitivity to C1 (Fig. 9): {n_lab} labeled, {reps} realisations, C1 fixed at {grid} ==")
    print(f"{'data':>18} {'C1':>7} {'RED zo':>7} {'ratio zo':>8} {'TOR zo':>7} {'TOR-RED':>8} {'s.e.':>6} "
          f"{'TOR wins':>8} {'sec':>7}")
    for name, X, codes in real_sets(args):
        runs = {str(C): [] for C in grid}
        for r in range(args.first_rep, args.first_rep + reps):
            # the same labeled rows and kernel map as realisation r of bench_real at this size
            lab, unl = labeled_split(X.shape[0], n_lab, r)
            Z = features(X, args.landmarks, r)
            for C in grid:
                runs[str(C)].append(run_split(Z, codes, unl, 5, C, args.tol, r, swap_rule=args.swap_rule,
                                              known_ratios=args.known_ratios))
        out[name] = {}
        for C in grid:
            rows = runs[str(C)]
            m = summarise(rows) | paired_vs_redsvm(rows)
            out[name][str(C)] = {"mean": m, "runs": rows}
            print(f"{name:>18} {C:7.3g} {m['redsvm_zo']:7.3f} {m['ratio_zo']:8.3f} {m['tor_zo']:7.3f} "
                  f"{m['tor_minus_redsvm']:+8.3f} {m['se']:6.3f} {m['tor_wins']:>4d}/{len(rows):<3d} {m['seconds']:7.1f}"
                  f"{known_summary(m, len(rows))}", flush=True)
        # the best fixed C1 of each method, chosen on the unlabeled rows' own errors: an upper
        # bound on what any C1 selection rule can give either method on these splits
        best = {k: min(grid, key=lambda C: out[name][str(C)]["mean"][k]) for k in ("redsvm_zo", "tor_zo")}
        out[name]["best_fixed_C1"] = {k: {"C1": C, "zo": out[name][str(C)]["mean"][k]} for k, C in best.items()}
        print(f"{name:>18} best fixed C1 on the unlabeled rows: RED-SVM {best['redsvm_zo']:g} "
              f"({out[name][str(best['redsvm_zo'])]['mean']['redsvm_zo']:.3f}), TOR {best['tor_zo']:g} "
              f"({out[name][str(best['tor_zo'])]['mean']['tor_zo']:.3f})", flush=True)
    return out


def bench_time(args):
    """california_housing, 400 labeled, the rest unlabeled, all annealing stages."""
    if not (DATA / "california_housing.csv.gz").exists():
        return {"skipped": "california_housing not found"}
    X, codes = load_real("california_housing")
    rng = np.random.default_rng(0)
    unl = np.ones(X.shape[0], bool)
    unl[rng.choice(X.shape[0], 400, replace=False)] = False
    t0 = time.perf_counter()
    Z = kernel_features(X, args.landmarks, 0)
    jax.block_until_ready(Z)
    t_map = time.perf_counter() - t0
    row = run_split(Z, codes, unl, 5, args.c_time, args.tol, 0, swap_rule=args.swap_rule)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    row.update(kernel_map_seconds=t_map, peak_rss_gb=rss, n_unlabeled=int(unl.sum()),
               landmarks=args.landmarks, C1=args.c_time)
    print(f"\n== time: california_housing, 400 labeled + {unl.sum()} unlabeled, C1={args.c_time}, "
          f"{args.landmarks} landmarks ==")
    print(f"kernel map {t_map:.1f}s, TOR (incl. compile) {row['seconds']:.1f}s, "
          f"{row['retrains']} retrainings over {row['stages']} stages, {row['swaps']} swaps, "
          f"peak RSS {rss:.2f} GB; zero-one RED {row['redsvm_zo']:.3f} ratio {row['ratio_zo']:.3f} "
          f"TOR {row['tor_zo']:.3f}")
    return row


def bench_peer(args):
    """RED-SVM (hinge, no intercept) vs LinearSVC on the same extended problem."""
    from sklearn.svm import LinearSVC

    X, codes = load_real("abalone") if (DATA / "abalone.csv.gz").exists() else (None, None)
    if X is None:
        return {"skipped": "abalone not found"}
    X, codes = X[:1000], codes[:1000]
    n, K, C = X.shape[0], 5, 1.0
    Xe = np.vstack([np.hstack([X, -np.tile(np.eye(K - 1)[k], (n, 1))]) for k in range(K - 1)])
    ye = np.concatenate([np.where(codes > k, 1, -1) for k in range(K - 1)])
    cfg = RedSVMConfig(K, "hinge", fit_intercept=False, max_epochs=20000)
    Xj, cj = jnp.asarray(X), jnp.full(n, C)
    t0 = time.perf_counter()
    jax.block_until_ready(fit_redsvm(Xj, codes, cj, cfg, tol=1e-4))
    t_first = time.perf_counter() - t0
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        r = jax.block_until_ready(fit_redsvm(Xj, codes, cj, cfg, tol=1e-4))
        runs.append(time.perf_counter() - t0)
    t_ours = float(np.median(runs))
    peer = []
    for _ in range(3):
        t0 = time.perf_counter()
        m = LinearSVC(C=C, loss="hinge", dual=True, fit_intercept=False, tol=1e-4, max_iter=200000).fit(Xe, ye)
        peer.append(time.perf_counter() - t0)
    t_peer = float(np.median(peer))
    w = m.coef_.ravel()
    p_peer = 0.5 * w @ w + C * np.maximum(0, 1 - ye * (Xe @ w)).sum()
    out = dict(n=n, ours_compile_plus_run=t_first, ours_run=t_ours, liblinear_run=t_peer,
               ratio_ours_over_liblinear=t_ours / t_peer, ours_objective=float(r.objective),
               liblinear_objective=float(p_peer), ours_epochs=int(r.n_iter), liblinear_iter=int(m.n_iter_))
    print(f"\n== peer: RED-SVM hinge (no intercept), abalone first {n} rows, C={C} ==")
    print(f"ours: first call {t_first:.2f}s, run {t_ours:.3f}s ({int(r.n_iter)} epochs, objective "
          f"{float(r.objective):.6f}); liblinear LinearSVC: {t_peer:.3f}s ({m.n_iter_} iter, objective "
          f"{p_peer:.6f}); time ratio ours/liblinear = {t_ours / t_peer:.2f}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, under 2 minutes")
    ap.add_argument("--parts", default="peer,synthetic,real,time",
                    help="comma-separated subset of peer,synthetic,real,time,sensitivity")
    ap.add_argument("--sets", type=int, default=None, help="synthetic sets per p (default 1 quick / 20)")
    ap.add_argument("--reps", type=int, default=None, help="real-data realisations (default 1 quick / 20)")
    ap.add_argument("--first-rep", type=int, default=0,
                    help="index of the first realisation, to extend an earlier run (the JSON's "
                         "runs[i] is realisation first_rep + i; seeds follow the index)")
    ap.add_argument("--datasets", default="abalone,bank8fm,california_housing",
                    help="real datasets (comma-separated; treebank for the sparse text set)")
    ap.add_argument("--sizes", default="100,200,400", help="labeled sizes for the real-data part")
    ap.add_argument("--c-min", type=int, default=-3,
                    help="log10 of the smallest C1 in the CV grid (in the fixed grid for sensitivity)")
    ap.add_argument("--c-max", type=int, default=5,
                    help="log10 of the largest C1 in the CV grid (in the fixed grid for sensitivity)")
    ap.add_argument("--sens-size", type=int, default=400, help="labeled rows for the sensitivity part")
    ap.add_argument("--landmarks", type=int, default=300, help="Nystrom landmarks for the perceptron kernel")
    ap.add_argument("--c-synth", type=float, default=10.0, help="C1 for the synthetic benchmark")
    ap.add_argument("--c-time", type=float, default=1.0, help="C1 for the timing run")
    ap.add_argument("--swap-rule", default="eq5", choices=["eq5", "descent"],
                    help="TOR swap rule: the paper's Eq. (5) or any loss-decreasing pair")
    ap.add_argument("--known-ratios", action="store_true",
                    help="real and sensitivity parts: also run TOR with the class proportions of all rows "
                         "(class_ratios) in place of the labeled rows' (Algorithm 2)")
    ap.add_argument("--out", default=None, help="file name under benchmarks/results (default tor.json)")
    ap.add_argument("--tol", type=float, default=1e-3, help="relative duality-gap tolerance")
    args = ap.parse_args(argv)
    if args.first_rep < 0:
        ap.error(f"--first-rep must be 0 or more, got {args.first_rep}")
    parts = args.parts.split(",")
    known = {"peer", "synthetic", "real", "time", "sensitivity"}
    if set(parts) - known:
        ap.error(f"unknown --parts {sorted(set(parts) - known)}; choose from {sorted(known)}")
    if args.quick and "time" in parts and args.parts == ap.get_default("parts"):
        parts.remove("time")
    results = {"config": vars(args) | {"python": sys.version.split()[0], "jax": jax.__version__,
                                       "machine": platform.machine(), "cpus": 2,
                                       "note": "2 shared cores; timings are noisy"}}
    t0 = time.perf_counter()
    for part in parts:
        results[part] = {"peer": bench_peer, "synthetic": bench_synthetic, "real": bench_real,
                         "time": bench_time, "sensitivity": bench_sensitivity}[part](args)
    results["total_seconds"] = time.perf_counter() - t0
    out = ROOT / "benchmarks" / "results" / (args.out or "tor.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {out} ({results['total_seconds']:.0f}s)")


if __name__ == "__main__":
    main()
