"""Fits on an accelerator against the same machine's CPU, in one process and one run.

Per-device throughput (docs/scaleout.md): each task runs on the accelerator (JAX's default
device, when it is not a CPU) and on the host's CPU (``jax.devices("cpu")[0]``, the
library's CPU programs: serial, as every fit compiles there), with the same inputs, and
reports compile time, run time after compilation (the median of five calls when one takes
under a second, else one call), iterations, throughput and the largest difference from the
CPU's answer.  ``cpu/acc`` is the CPU's run time over the accelerator's at that size.
Without an accelerator only the CPU rows are printed.

* **probit**: ``fit_probit`` in evidence mode (the estimator's default), float64, raw
  columns (offsets of 100, scales 0.1 to 10), 20 features, 5 classes; rows 10^5, 10^6,
  10^7 on the accelerator (and 10^7 in float32), on the CPU up to ``--cpu-rows``.
  Throughput: rows x Newton steps per second.
* **ISBOR**: ``fit_isbor``, 11 features, every row a candidate at 2,000 and 10,000 rows
  (the CPU at ``--cpu-isbor-rows``), and 2 x 10^5 rows with 2,000 random candidates
  (accelerator only).
* **NPSVOR grid**: Treebank, 11 values of C x 5 folds in one call (``--data``; skipped
  without it).
* **first fit**: ``OrdinalProbit().fit`` on 4,000 raw rows in a fresh process (import,
  compile, fit; the library's defaults, so float32), with the compile cache off and then
  warm, on each platform.

Run: ``python benchmarks/device_bench.py`` (``--quick``: the smallest size of each task).
Prints a table and writes ``benchmarks/results/device.json`` after every task.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import machine, print_table, write_json  # noqa: E402

from bayesord._isbor import ISBORConfig, fit_isbor  # noqa: E402
from bayesord._npsvor import NPSVORConfig, fit_npsvor  # noqa: E402
from bayesord._probit import ProbitConfig, fit_probit  # noqa: E402
from bayesord._sparse import to_padded_rows  # noqa: E402
from bayesord.datasets import kfold_masks, load_libsvm, make_ordinal_probit  # noqa: E402

COLUMNS = ["task", "device", "dtype", "compile_s", "run_s", "n_iter", "throughput", "max_rel_diff", "cpu/acc"]

FIRST_FIT = """
import time
t = time.perf_counter()
import numpy as np
import bayesord
rng = np.random.default_rng(0)
Z = rng.normal(size=(4000, 8))
y = np.digitize(Z.sum(axis=1) + rng.normal(size=4000) * 2, [-3, -1, 1, 3])
X = Z * np.geomspace(0.1, 100, 8) + 1000.0
bayesord.OrdinalProbit().fit(X, y)
print(time.perf_counter() - t)
"""


def _run(fn):
    """Run time of ``fn`` (already compiled): one call, or the median of five when it is short."""
    times = []
    out = None
    for _ in range(5):
        t = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
        if times[0] >= 1.0:
            break
    return out, statistics.median(times)


def _compiled(fn, args, kwargs):
    t = time.perf_counter()
    compiled = fn.lower(*args, **kwargs).compile()
    return compiled, time.perf_counter() - t


def _row(task, device, dtype, compile_s, run_s, n_iter, throughput, diff=None, ratio=None):
    return {"task": task, "device": device.platform, "dtype": dtype, "compile_s": compile_s, "run_s": run_s,
            "n_iter": n_iter, "throughput": throughput, "max_rel_diff": diff, "cpu/acc": ratio}


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def probit(targets, sizes, cpu_rows, rows):
    d = 20
    for n in sizes:
        runs = [(dev, np.float64) for dev in targets if dev.platform != "cpu" or n <= cpu_rows]
        if any(dev.platform != "cpu" for dev in targets) and n == max(sizes):
            runs.append((targets[0], np.float32))
        if not runs:
            continue
        X, y, _ = make_ordinal_probit(n, d, 5, seed=0)
        X = X * np.geomspace(0.1, 10, d) + 100.0
        y = y.astype(np.int32)
        found = {}
        for dev, dtype in runs:
            args = [jax.device_put(a, dev) for a in (X.astype(dtype), y, np.ones(n, dtype))]
            tol = 1e-10 if dtype == np.float64 else 1e-5
            compiled, compile_s = _compiled(fit_probit, (*args, 1.0, tol), {"config": ProbitConfig(), "n_classes": 5})
            res, run_s = _run(lambda: compiled(*args, 1.0, tol))
            if int(res.status) != 0:
                print(f"probit {n} on {dev.platform} ({np.dtype(dtype).name}): status {int(res.status)}")
            found[(dev.platform, dtype)] = (np.asarray(res.coef), run_s)
            rows.append(_row(f"probit {n}x{d}", dev, np.dtype(dtype).name, compile_s, run_s, int(res.n_iter),
                             n * int(res.n_iter) / run_s))
        _compare(found, rows, len(runs))


def _compare(found, rows, count):
    """Differences from the CPU's float64 answer and the time ratio, where the CPU ran."""
    ref = found.get(("cpu", np.float64))
    for row in rows[len(rows) - count:]:
        if ref is not None:
            coef, run_s = found[(row["device"], np.float32 if row["dtype"] == "float32" else np.float64)]
            row["max_rel_diff"] = _rel(coef, ref[0])
            row["cpu/acc"] = ref[1] / run_s
        print_table([row], COLUMNS)


def isbor(targets, sizes, cpu_rows, rows):
    d = 11
    for n, n_cand in sizes:
        runs = [dev for dev in targets if dev.platform != "cpu" or n <= cpu_rows]
        if not runs:
            continue
        X, y, _ = make_ordinal_probit(n, d, 5, seed=1)
        cand = np.sort(np.random.default_rng(0).choice(n, n_cand, replace=False)).astype(np.int32)
        found, relevance = {}, {}
        for dev in runs:
            args = [jax.device_put(a, dev) for a in (X, y.astype(np.int32), np.ones(n), cand, np.ones(n_cand, bool))]
            args += [jax.random.key(0), 1.0 / d]
            compiled, compile_s = _compiled(fit_isbor, args, {"config": ISBORConfig(n_classes=5)})
            res, run_s = _run(lambda: compiled(*args))
            found[(dev.platform, np.float64)] = (np.asarray(res.w), run_s)
            relevance[dev.platform] = np.asarray(res.relevance_index)
            rows.append(_row(f"ISBOR {n}x{d}, {n_cand} candidates", dev, "float64", compile_s, run_s,
                             int(res.n_iter), n * n_cand * int(res.n_iter) / run_s))
        if len(relevance) == 2 and not np.array_equal(*relevance.values()):
            print(f"ISBOR {n}: the relevance sets differ between {' and '.join(relevance)}")
        _compare(found, rows, len(runs))


def npsvor_grid(targets, data, rows):
    treebank = data / "treebank"
    if not treebank.is_dir():
        print(f"NPSVOR grid skipped: no Treebank at {treebank}")
        return
    Xtr, ytr = load_libsvm(treebank / "treebank.train", n_features=8569)
    ytr = ytr.astype(np.int32) - 1
    cs = 2.0 ** np.arange(-5, 6)
    C = np.repeat(cs, 5)
    W = np.tile(kfold_masks(ytr, 5, seed=0).astype(np.float64), (len(cs), 1))
    cfg = NPSVORConfig(n_features=Xtr.shape[1])
    found = {}
    for dev in targets:
        E = jax.device_put(to_padded_rows(Xtr), dev)
        args = [jax.device_put(a, dev) for a in (ytr, C, W)]
        grid = jax.jit(lambda E, codes, c, w: fit_npsvor(E, codes, 5, c, c, 0.1, 0.1, jax.random.key(0), cfg,
                                                           sample_weight=w))
        compiled, compile_s = _compiled(grid, (E, *args), {})
        res, run_s = _run(lambda: compiled(E, *args))
        found[(dev.platform, np.float64)] = (np.asarray(res.coef), run_s)
        rows.append(_row(f"NPSVOR {len(cs)} C x 5 folds", dev, "float64", compile_s, run_s, None,
                         len(C) / run_s))
    _compare(found, rows, len(targets))


def first_fit(accelerator, rows):
    """A fresh process's first fit on each platform: the CPU (``JAX_PLATFORMS=cpu``) and,
    when there is one, the accelerator (JAX's own choice)."""
    cache = tempfile.mkdtemp(prefix="bayesord-device-bench-")
    platforms = {"cpu": "cpu"} if accelerator.platform == "cpu" else {accelerator.platform: None, "cpu": "cpu"}
    for platform, choice in platforms.items():
        env = {key: value for key, value in os.environ.items() if key != "JAX_PLATFORMS"}
        if choice is not None:
            env["JAX_PLATFORMS"] = choice
        for cache_state, folder in (("off", "off"), ("cold", cache), ("warm", cache)):
            env["BAYESORD_COMPILE_CACHE"] = folder
            out = subprocess.run([sys.executable, "-c", FIRST_FIT], env=env, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"first fit on {platform} failed:\n{out.stderr[-2000:]}")
                continue
            rows.append({"task": f"first fit, cache {cache_state}", "device": platform, "dtype": "float32",
                         "run_s": float(out.stdout.split()[-1])})
            print_table(rows[-1:], COLUMNS)
        cache = tempfile.mkdtemp(prefix="bayesord-device-bench-")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cpu-rows", type=int, default=1_000_000, help="largest probit run on the CPU")
    parser.add_argument("--cpu-isbor-rows", type=int, default=2_000, help="largest ISBOR run on the CPU")
    parser.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "datasets")
    parser.add_argument("--only", default="first,probit,isbor,npsvor", help="comma-separated parts to run")
    args = parser.parse_args()
    acc = jax.devices()[0]
    cpu = jax.devices("cpu")[0]
    targets = [cpu] if acc.platform == "cpu" else [acc, cpu]
    print(f"jax {jax.__version__}; accelerator: {acc.device_kind if acc.platform != 'cpu' else 'none'}")
    parts = set(args.only.split(","))
    rows = []
    payload = {"machine": machine(), "jax": jax.__version__, "accelerator": acc.device_kind, "columns": COLUMNS,
               "rows": rows}
    steps = [("first", lambda: first_fit(acc, rows)),
             ("probit", lambda: probit(targets, [10**5] if args.quick else [10**5, 10**6, 10**7], args.cpu_rows, rows)),
             ("isbor", lambda: isbor(targets, [(2_000, 2_000)] if args.quick
                                     else [(2_000, 2_000), (10_000, 10_000), (200_000, 2_000)],
                                     args.cpu_isbor_rows, rows)),
             ("npsvor", lambda: npsvor_grid(targets, args.data, rows))]
    for name, step in steps:
        if name in parts:
            step()
            write_json("device", payload)
    print()
    print_table(rows, COLUMNS)


if __name__ == "__main__":
    main()
