"""Bayesian linear ordinal probit against statsmodels OrderedModel and mord LogisticAT.

Synthetic ordinal probit data (d = 20, K = 5, equiprobable classes), n in {1e3, 1e4, 1e5}
training rows and 10,000 test rows.  For each fit: test MAE and fit time (median of 7
calls, ours after compilation; mord timed the same way, statsmodels once), compile time
reported separately (first call minus a warm call), and speed ratios against the peers
measured in the same run.  Also ``OrdinalProbit().fit`` with its defaults (the evidence
mode through the estimator, compiled, median of 7), against mord and against the
functional evidence fit it wraps (the estimator's own overhead): in float64 like the rest,
and as a user's fresh process runs it, where JAX computes in float32 unless float64 is
turned on (a child process without ``jax_enable_x64``; mord in the same process).

    python benchmarks/probit_bench.py            # n = 1e3, 1e4, 1e5
    python benchmarks/probit_bench.py --quick    # n = 1e3, 1e4 (about a minute)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings

import jax
import numpy as np
from _common import machine, print_table, time_alternating, time_call, write_json

from bayesord import metrics
from bayesord._probit import ProbitConfig, fit_probit, predict_probit
from bayesord._shapes import bucket_rows, pad_rows
from bayesord.datasets import make_ordinal_probit

D, K, N_TEST = 20, 5, 10_000
REPEATS = 7  # timed calls per fit (median); the first few after compilation still warm up


def ours(X, y, Xt, yt, mode):
    cfg = ProbitConfig(thresholds=mode)
    alpha = 1e-6 if mode == "joint" else 1.0
    args = (X, y, np.ones(len(y)), alpha, 1e-10)
    t0 = time.perf_counter()
    jax.block_until_ready(fit_probit(*args, config=cfg, n_classes=K))
    first = time.perf_counter() - t0
    run, res = time_call(lambda: fit_probit(*args, config=cfg, n_classes=K), repeats=REPEATS)
    pred = np.argmax(np.asarray(predict_probit(res, Xt).proba), axis=1)
    return {"fit_s": run, "compile_s": max(first - run, 0.0), "mae": metrics.mae(yt, pred),
            "n_iter": int(res.n_iter), "converged": bool(res.converged)}


def estimator(X, y, Xt, yt):
    """``OrdinalProbit().fit`` with its defaults (the evidence mode), as a user calls it."""
    from bayesord import OrdinalProbit

    OrdinalProbit().fit(X, y)  # compile
    run, model = time_call(lambda: OrdinalProbit().fit(X, y), repeats=REPEATS)
    return {"fit_s": run, "mae": metrics.mae(yt, model.predict(Xt))}


def split(n):
    X, y, _ = make_ordinal_probit(n + N_TEST, D, K, seed=n)
    y = (y - 1).astype(np.int32)
    return X[:n], X[n:], y[:n], y[n:]


def default_dtype_worker(n):
    """In a process without float64 (JAX's default): the estimator, the functional evidence
    fit it wraps (float32 inputs, its tolerance 1e-5) on the user's rows and on the rows the
    estimator pads them to (the same arrays, so the difference to the estimator is its host
    work alone), called in turn so that their ratios are measured in the same moments, and
    mord, on the same split; prints one JSON line."""
    from bayesord import OrdinalProbit
    from bayesord.estimators._base import solver_tol

    X, Xt, y, yt = split(n)
    X32 = X.astype(np.float32)
    args = (X32, y, np.ones(n, np.float32), 1.0, solver_tol(None, np.float32))
    cfg = ProbitConfig()
    padded = pad_rows(bucket_rows(n), X32, y.astype(np.int32), args[2]) + args[3:]
    model = OrdinalProbit().fit(X, y)  # compile all three
    res = jax.block_until_ready(fit_probit(*args, config=cfg, n_classes=K))
    jax.block_until_ready(fit_probit(*padded, config=cfg, n_classes=K))
    est_s, run, run_padded = time_alternating([lambda: OrdinalProbit().fit(X, y),
                                               lambda: fit_probit(*args, config=cfg, n_classes=K),
                                               lambda: fit_probit(*padded, config=cfg, n_classes=K)],
                                              repeats=2 * REPEATS + 1)
    md = mord_fit(X, y, Xt, yt)
    print(json.dumps({"n": n, "dtype": str(res.coef.dtype), "estimator MAE": metrics.mae(yt, model.predict(Xt)),
                      "mord MAE": md["mae"], "estimator s": est_s, "functional evidence s": run,
                      "functional on padded rows s": run_padded, "mord s": md["fit_s"],
                      "mord/estimator": md["fit_s"] / est_s, "estimator/functional": est_s / run,
                      "estimator/functional on padded rows": est_s / run_padded}))


def default_dtype(n):
    out = subprocess.run([sys.executable, __file__, "--default-dtype-worker", str(n)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def statsmodels_fit(X, y, Xt, yt):
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return OrderedModel(y, X, distr="probit").fit(method="bfgs", disp=False, maxiter=1000)

    t0 = time.perf_counter()
    res = fit()
    fit_s = time.perf_counter() - t0
    pred = np.argmax(np.asarray(res.model.predict(res.params, exog=Xt)), axis=1)
    return {"fit_s": fit_s, "mae": metrics.mae(yt, pred), "converged": bool(res.mle_retvals["converged"])}


def mord_fit(X, y, Xt, yt):
    import mord

    fit_s, model = time_call(lambda: mord.LogisticAT(alpha=1e-6).fit(X, y), repeats=REPEATS)
    return {"fit_s": fit_s, "mae": metrics.mae(yt, model.predict(Xt))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--default-dtype-worker", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.default_dtype_worker:
        default_dtype_worker(args.default_dtype_worker)
        return
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    defaults = [default_dtype(n) for n in sizes]  # child processes, before this one's work
    jax.config.update("jax_enable_x64", True)
    rows = []
    for n in sizes:
        X, Xt, y, yt = split(n)
        joint = ours(X, y, Xt, yt, "joint")
        evid = ours(X, y, Xt, yt, "evidence")
        est = estimator(X, y, Xt, yt)
        sm = statsmodels_fit(X, y, Xt, yt)
        md = mord_fit(X, y, Xt, yt)
        rows.append({
            "n": n,
            "joint MAE": joint["mae"], "evidence MAE": evid["mae"], "statsmodels MAE": sm["mae"],
            "mord MAE": md["mae"], "estimator MAE": est["mae"],
            "joint s": joint["fit_s"], "evidence s": evid["fit_s"], "statsmodels s": sm["fit_s"],
            "mord s": md["fit_s"], "estimator s": est["fit_s"],
            "statsmodels/joint": sm["fit_s"] / joint["fit_s"], "mord/joint": md["fit_s"] / joint["fit_s"],
            "evidence/joint": evid["fit_s"] / joint["fit_s"],
            "mord/estimator": md["fit_s"] / est["fit_s"], "estimator/evidence": est["fit_s"] / evid["fit_s"],
            "joint compile s": joint["compile_s"], "evidence compile s": evid["compile_s"],
            "joint Newton iters": joint["n_iter"], "evidence L-BFGS iters": evid["n_iter"],
            "converged": joint["converged"] and evid["converged"],
        })
        print_table(rows[-1:], list(rows[-1]))
    print("\nSummary (times after compilation; ratios > 1 mean we are faster):")
    cols = ["n", "joint MAE", "evidence MAE", "statsmodels MAE", "mord MAE", "joint s", "evidence s",
            "statsmodels s", "mord s", "statsmodels/joint", "mord/joint", "evidence/joint",
            "joint compile s", "evidence compile s", "joint Newton iters", "evidence L-BFGS iters"]
    print_table(rows, cols)
    print("\nThe estimator with its defaults (evidence mode), compiled, float64:")
    print_table(rows, ["n", "estimator MAE", "mord MAE", "estimator s", "evidence s", "mord s",
                       "mord/estimator", "estimator/evidence"])
    print("\nThe same in a process with JAX's default float32 (mord in that process too):")
    print_table(defaults, list(defaults[0]))
    write_json("probit", {"machine": machine(), "d": D, "n_classes": K, "n_test": N_TEST, "rows": rows,
                          "default_dtype": defaults})


if __name__ == "__main__":
    main()
