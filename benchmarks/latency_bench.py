"""Time to the first answer: a fresh process fitting the default OrdinalProbit, against
statsmodels' ``OrderedModel(distr="probit")`` on the same rows.

Data: the first 4,000 rows of ``cpu_small`` (12 raw columns of mixed scales; target cut
into 5 equal-frequency classes), written to a CSV in a temporary folder, or, without the
shared data, 4,000 synthetic ordinal-probit rows with 11 columns offset by 10^3.

Every figure comes from a new Python process (``--repeats`` of them, median), all with
``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` (the command's setting), so the library and
the command compile the same programs:

* Python, ``OrdinalProbit().fit(X, y)`` after ``import bayesord`` (import excluded, CSV read
  excluded): with the on-disk compilation cache off, with an empty cache (cold) and with the
  cache the cold run filled (warm); then a second fit in the same process (compiled), a fit
  on 100 fewer rows (a new row count) and ``predict_proba``.
* statsmodels in the same way: import, then ``OrderedModel(y, X, distr="probit")
  .fit(method="bfgs")``.
* Whole scripts, wall time from the parent: ``bayesord fit train.csv`` cold and warm,
  statsmodels' script (import, read, fit), and ``bayesord --help``.
* With ``--isbor``, also ``ISBOR().fit(X, y)`` with its defaults (kernel width by 5-fold CV,
  float32: JAX's default precision) with the cache off, cold and warm, and its second fit.

Run: ``python benchmarks/latency_bench.py`` (``--quick``: one repeat).  Prints the table
and the ratios against statsmodels, and writes ``benchmarks/results/latency.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false"


def _worker(kind, csv):
    """Runs in a fresh process; prints one JSON line of seconds."""
    t0 = time.perf_counter()
    import numpy as np
    import pandas as pd

    if kind == "bayesord":
        import jax

        jax.config.update("jax_enable_x64", True)
        import bayesord

        model_cls = bayesord.OrdinalProbit
    elif kind == "isbor":
        import bayesord

        model_cls = bayesord.ISBOR
    else:
        from statsmodels.miscmodels.ordinal_model import OrderedModel
    out = {"import_s": time.perf_counter() - t0}
    frame = pd.read_csv(csv)
    X, y = frame.drop(columns="y").to_numpy(float), frame["y"].to_numpy()
    if kind == "statsmodels":
        import warnings

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = OrderedModel(y, X, distr="probit").fit(method="bfgs", disp=False, maxiter=1000)
        out["fit_s"] = time.perf_counter() - t0
        out["converged"] = bool(res.mle_retvals["converged"])
        proba = np.asarray(res.model.predict(res.params, exog=X))
        out["train_mae"] = float(np.mean(np.abs(np.argmax(proba, axis=1) + 1 - y)))
        print(json.dumps(out))
        return
    t0 = time.perf_counter()
    model = model_cls().fit(X, y)
    out["fit_s"] = time.perf_counter() - t0
    out["converged"] = bool(model.converged_)
    t0 = time.perf_counter()
    model_cls().fit(X, y)
    out["second_fit_s"] = time.perf_counter() - t0
    if kind == "bayesord":
        t0 = time.perf_counter()
        model_cls().fit(X[:-100], y[:-100])
        out["new_n_fit_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    proba = model.predict_proba(X)
    out["predict_proba_s"] = time.perf_counter() - t0
    out["train_mae"] = float(np.mean(np.abs(model.classes_[np.argmax(proba, axis=1)] - y)))
    print(json.dumps(out))


def _data(folder):
    """The CSV of 4,000 raw rows, and a one-line description of it."""
    import numpy as np
    import pandas as pd

    sys.path.insert(0, str(ROOT))
    from bayesord.datasets import equal_frequency_bins, load_shared, make_ordinal_probit

    try:
        data = load_shared("cpu_small")
        X, y, names = data.X[:4000], equal_frequency_bins(data.y[:4000], 5), data.feature_names
        what = "cpu_small, first 4,000 rows, 12 raw columns, K = 5 (equal-frequency bins)"
    except (FileNotFoundError, OSError):
        X, y, _ = make_ordinal_probit(4000, 11, 5, seed=0)
        X = X * np.logspace(-2, 2, 11) + 1e3
        names = [f"x{j}" for j in range(11)]
        what = "synthetic ordinal probit, 4,000 rows, 11 columns offset by 10^3, K = 5"
    path = Path(folder) / "train.csv"
    pd.DataFrame(X, columns=names).assign(y=y).to_csv(path, index=False)
    return path, what


def _run(args, env, timeout=900):
    t0 = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed:\n{done.stderr[-2000:]}")
    return wall, done.stdout


def _env(cache):
    env = dict(os.environ, XLA_FLAGS=XLA_FLAGS, BAYESORD_COMPILE_CACHE=str(cache))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _folder_mib(folder):
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per figure (median)")
    parser.add_argument("--isbor", action="store_true", help="also time ISBOR() with its defaults")
    parser.add_argument("--worker", choices=["bayesord", "isbor", "statsmodels"], help=argparse.SUPPRESS)
    parser.add_argument("--csv", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.csv)
        return
    repeats = 1 if args.quick else args.repeats
    sys.path.insert(0, str(HERE))
    from _common import machine, print_table, write_json

    me = [sys.executable, str(Path(__file__).resolve())]
    cli = [sys.executable, "-m", "bayesord.cli"]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        csv, what = _data(tmp)
        print(f"data: {what}; {repeats} fresh process(es) per figure\n")
        for r in range(repeats):
            py_cache, cli_cache = Path(tmp) / f"py{r}", Path(tmp) / f"cli{r}"
            steps = [
                ("python, cache off", me + ["--worker", "bayesord", "--csv", csv], "off"),
                ("python, cold cache", me + ["--worker", "bayesord", "--csv", csv], py_cache),
                ("python, warm cache", me + ["--worker", "bayesord", "--csv", csv], py_cache),
                ("statsmodels", me + ["--worker", "statsmodels", "--csv", csv], "off"),
                ("bayesord fit, cold cache", cli + ["fit", csv, "--out", Path(tmp) / f"m{r}.npz", "--quiet",
                                                    "--force"], cli_cache),
                ("bayesord fit, warm cache", cli + ["fit", csv, "--out", Path(tmp) / f"m{r}.npz", "--quiet",
                                                    "--force"], cli_cache),
                ("bayesord --help", cli + ["--help"], "off"),
            ]
            if args.isbor:
                isbor_cache = Path(tmp) / f"isbor{r}"
                worker = me + ["--worker", "isbor", "--csv", csv]
                steps += [("ISBOR, cache off", worker, "off"), ("ISBOR, cold cache", worker, isbor_cache),
                          ("ISBOR, warm cache", worker, isbor_cache)]
            for name, command, cache in steps:
                wall, stdout = _run(command, _env(cache))
                record = {"wall_s": wall}
                if "--worker" in command:
                    record.update(json.loads(stdout.strip().splitlines()[-1]))
                runs.setdefault(name, []).append(record)
                print(f"  repeat {r + 1}: {name}: {wall:.2f} s wall", flush=True)
            runs.setdefault("cache size (MiB)", []).append({"python": _folder_mib(py_cache),
                                                            "command": _folder_mib(cli_cache)})

    def median(name, key):
        values = [rec[key] for rec in runs[name] if key in rec]
        return statistics.median(values) if values else None

    columns = ["what", "import s", "fit s", "second fit s", "new-n fit s", "predict_proba s", "wall s",
               "converged", "train MAE"]
    rows = []
    for name in runs:
        if name.startswith("cache size"):
            continue
        rows.append({"what": name, "import s": median(name, "import_s"), "fit s": median(name, "fit_s"),
                     "second fit s": median(name, "second_fit_s"), "new-n fit s": median(name, "new_n_fit_s"),
                     "predict_proba s": median(name, "predict_proba_s"), "wall s": median(name, "wall_s"),
                     "converged": runs[name][-1].get("converged"), "train MAE": median(name, "train_mae")})
    print()
    print_table(rows, columns)
    sm_fit, sm_wall = median("statsmodels", "fit_s"), median("statsmodels", "wall_s")
    ratios = {
        "first fit, cache off / statsmodels fit": median("python, cache off", "fit_s") / sm_fit,
        "first fit, cold cache / statsmodels fit": median("python, cold cache", "fit_s") / sm_fit,
        "first fit, warm cache / statsmodels fit": median("python, warm cache", "fit_s") / sm_fit,
        "compiled fit / statsmodels fit": median("python, warm cache", "second_fit_s") / sm_fit,
        "bayesord fit cold / statsmodels script": median("bayesord fit, cold cache", "wall_s") / sm_wall,
        "bayesord fit warm / statsmodels script": median("bayesord fit, warm cache", "wall_s") / sm_wall,
        "bayesord fit warm / statsmodels fit": median("bayesord fit, warm cache", "wall_s") / sm_fit,
        "bayesord --help (s)": median("bayesord --help", "wall_s"),
    }
    if args.isbor:
        ratios.update({f"ISBOR first fit, {c} (s)": median(f"ISBOR, {c}", "fit_s")
                       for c in ("cache off", "cold cache", "warm cache")})
        ratios["ISBOR compiled fit (s)"] = median("ISBOR, warm cache", "second_fit_s")
    sizes = runs["cache size (MiB)"][-1]
    print("\nratios (bayesord / statsmodels, measured in this run) and ISBOR's seconds:")
    for k, v in ratios.items():
        print(f"  {k}: {v:.3g}")
    print(f"\ncache after one cold and one warm run: Python {sizes['python']:.1f} MiB, "
          f"command {sizes['command']:.1f} MiB")
    write_json("latency", {"data": what, "repeats": repeats, "columns": columns, "rows": rows,
                           "ratios": ratios, "cache_mib": sizes, "runs": runs, "machine": machine()})


if __name__ == "__main__":
    main()
