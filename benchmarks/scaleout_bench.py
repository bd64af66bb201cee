"""Fits over 1, 2, 4 and 8 devices: agreement with one device, bytes per device, collectives.

Forced CPU devices in one process (``JAX_NUM_CPU_DEVICES=8``; the script starts itself
again with it when it is not set).  On a 2-core machine eight devices share two cores, so
the times here measure compilation and overhead, not speed-up: no scaling is claimed.

* **Probit, rows sharded** (``--rows``, default 10^6 x 20, evidence mode, the estimator's
  default): the fit's largest difference from the one-device coefficients (relative to
  their largest entry), input bytes per device and temporary bytes per device
  (``memory_analysis``), the all-reduces in the compiled program (count, bytes of each op
  once, the largest), compile time, and the run time after compilation.
* **ISBOR, rows sharded** (``--isbor-rows``, default 2 x 10^5 x 11, every row a candidate,
  the candidate arrays replicated): compiled at that size for bytes per device and
  collectives, and run at 2,000 rows for agreement with one device (relevance set and
  weights).
* **Swapped-pairs SVM, rows sharded** (``--rankpairs-rows``, default 10^5 x 50, linear,
  C = 1): difference from the one-device coefficients, bytes per device and collectives
  (the most-violated-constraint search gathers the 2n shifted scores in every iteration:
  O(n) numbers, not the n x d rows), compile and run time.
* **NPSVOR grid, problems sharded** (Treebank, 11 values of C x 5 folds as 0/1 weights,
  :func:`bayesord.distributed.map_sharded` with ``vmap=False``): difference from the same
  grid solved in one batched call without a mesh, its collectives, compile and run time
  (and the unsharded call's run time).  Skipped without the shared data.

Collectives are read from the compiled program (:func:`bayesord.distributed.collectives`):
``loop_bytes`` sums the ops in loop bodies, each once (one pass of every loop),
``once_bytes`` the others.

Run: ``python benchmarks/scaleout_bench.py`` (``--quick``: 2 x 10^5 probit rows, 5 x 10^4
ISBOR rows, 2 x 10^4 swapped-pairs rows, the grid's first 3 values of C; ``--only
probit,isbor,rankpairs,npsvor`` picks parts).  Prints a table and writes ``benchmarks/results/scaleout.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEVICE_COUNTS = (1, 2, 4, 8)

if __name__ == "__main__" and os.environ.get("JAX_NUM_CPU_DEVICES") != str(max(DEVICE_COUNTS)):
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": str(max(DEVICE_COUNTS))}
    sys.exit(subprocess.call([sys.executable, __file__, *sys.argv[1:]], env=env))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(HERE))

from _common import machine, print_table, write_json  # noqa: E402

from bayesord import distributed  # noqa: E402
from bayesord._isbor import ISBORConfig, fit_isbor  # noqa: E402
from bayesord._npsvor import NPSVORConfig, fit_npsvor  # noqa: E402
from bayesord._probit import ProbitConfig, fit_probit  # noqa: E402
from bayesord._rankpairs import RankPairsConfig, fit_rankpairs_linear  # noqa: E402
from bayesord._sparse import to_padded_rows  # noqa: E402
from bayesord.datasets import kfold_masks, load_libsvm, make_ordinal_probit  # noqa: E402

TREEBANK = HERE.parent.parent / "shared" / "datasets" / "treebank"


def _timed(fn):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t


def _comms(compiled):
    """Collectives of a compiled program: kinds, count, bytes of the ops in loop bodies
    (each once: what one pass of every loop exchanges) and of the others (once per call)."""
    found = distributed.collectives(compiled)
    return {"collectives": sorted({op for op, _, _ in found}), "n_collectives": len(found),
            "loop_bytes": sum(b for _, b, loop in found if loop),
            "once_bytes": sum(b for _, b, loop in found if not loop),
            "largest_loop_bytes": max((b for _, b, loop in found if loop), default=0)}


def _rows_over_devices(task, arrays, lower, numbers, rows):
    """A fit of ``arrays`` with their rows sharded over each device count: ``lower(*placed,
    *numbers)`` lowers it, the compiled program runs on the same arguments; a table row per
    count, its coefficients against one device's."""
    base = None
    for k in DEVICE_COUNTS:
        mesh = distributed.row_mesh(jax.devices()[:k])
        placed = [jax.device_put(a, NamedSharding(mesh, PartitionSpec("rows", *([None] * (a.ndim - 1)))))
                  for a in arrays]
        t = time.perf_counter()
        compiled = lower(*placed, *numbers).compile()
        compile_s = time.perf_counter() - t
        res, run_s = _timed(lambda: compiled(*placed, *numbers))
        coef = np.asarray(res.coef)
        base = coef if base is None else base
        mem = compiled.memory_analysis()
        rows.append({"task": task, "devices": k, "max_rel_diff": float(np.max(np.abs(coef - base)) / np.max(np.abs(base))),
                     "n_iter": int(res.n_iter), "status": int(res.status),
                     "arg_MB_per_device": mem.argument_size_in_bytes / 1e6,
                     "temp_MB_per_device": mem.temp_size_in_bytes / 1e6,
                     **_comms(compiled), "compile_s": compile_s, "run_s": run_s})
        print_table(rows[-1:], list(rows[-1]))


def probit_rows(n, d, rows):
    X, y, _ = make_ordinal_probit(n, d, 5, seed=0)
    X = X * np.geomspace(0.1, 10, d) + 100.0  # raw columns: offsets and mixed scales
    _rows_over_devices(f"probit {n}x{d}", (X, y.astype(np.int32), np.ones(n)),
                       partial(fit_probit.lower, config=ProbitConfig(), n_classes=5), (1.0, 1e-10), rows)


def isbor_rows(n, rows):
    """ISBOR with rows sharded, candidates (every row) replicated: compiled only at ``n``
    (bytes per device, collectives), and run at 2,000 rows for agreement."""
    d = 11
    X, y, _ = make_ordinal_probit(n, d, 5, seed=1)
    config = ISBORConfig(n_classes=5)
    small = ISBORConfig(n_classes=5, capacity=32, max_iter=60)
    m = 2000
    base = None
    for k in DEVICE_COUNTS:
        mesh = distributed.row_mesh(jax.devices()[:k])
        put = lambda a: jax.device_put(a, NamedSharding(mesh, PartitionSpec("rows", *([None] * (a.ndim - 1)))))
        cand = lambda size: (np.arange(size, dtype=np.int32), np.ones(size, bool), jax.random.key(0), 1.0 / d)
        t = time.perf_counter()
        compiled = fit_isbor.lower(put(X), put(y.astype(np.int32)), put(np.ones(n)), *cand(n), config=config).compile()
        compile_s = time.perf_counter() - t
        mem = compiled.memory_analysis()
        res, run_s = _timed(lambda: fit_isbor(put(X[:m]), put(y[:m].astype(np.int32)), put(np.ones(m)), *cand(m),
                                               config=small))
        w = np.asarray(res.w)
        base = (np.asarray(res.relevance_index), w) if base is None else base
        rows.append({"task": f"ISBOR {n}x{d} (runs: {m} rows)", "devices": k,
                     "max_rel_diff": float(np.max(np.abs(w - base[1])) / np.max(np.abs(base[1]))),
                     "same_relevance_set": bool(np.array_equal(np.asarray(res.relevance_index), base[0])),
                     "arg_MB_per_device": mem.argument_size_in_bytes / 1e6,
                     "temp_MB_per_device": mem.temp_size_in_bytes / 1e6,
                     **_comms(compiled), "compile_s": compile_s, "run_s": run_s})
        print_table(rows[-1:], list(rows[-1]))


def rankpairs_rows(n, d, rows):
    X, y, _ = make_ordinal_probit(n, d, 5, seed=2)
    _rows_over_devices(f"swapped pairs {n}x{d}", (X, (y - 1).astype(np.int32), np.ones(n)),
                       partial(fit_rankpairs_linear.lower, config=RankPairsConfig(n_ranks=5)), (1.0, 1e-3), rows)


def npsvor_grid(quick, rows):
    if not TREEBANK.is_dir():
        print(f"NPSVOR grid skipped: no Treebank at {TREEBANK}")
        return
    Xtr, ytr = load_libsvm(TREEBANK / "treebank.train", n_features=8569)
    ytr = ytr.astype(np.int32) - 1
    E = to_padded_rows(Xtr)
    cs = 2.0 ** np.arange(-5, 6)
    cs = cs[4:7] if quick else cs
    train = kfold_masks(ytr, 5, seed=0)  # (5, n): True on a fold's training rows
    C = np.repeat(cs, 5)
    W = np.tile(train.astype(np.float64), (len(cs), 1))
    cfg = NPSVORConfig(n_features=Xtr.shape[1])
    key = jax.random.key(0)

    def grid(c, weights):  # fit_npsvor solves a grid of C values and fold weights itself
        return fit_npsvor(E, ytr, 5, c, c, 0.1, 0.1, key, cfg, sample_weight=weights).coef

    grid(C, W)
    batched, single_s = _timed(lambda: grid(C, W))
    for k in DEVICE_COUNTS:
        mesh = distributed.row_mesh(jax.devices()[:k])
        t = time.perf_counter()
        coef = distributed.map_sharded(grid, C, W, mesh=mesh, vmap=False)
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        distributed.map_sharded(grid, C, W, mesh=mesh, vmap=False)
        run_s = time.perf_counter() - t
        size = -(-len(C) // k) * k
        placed = [jax.device_put(np.concatenate([a, np.repeat(a[-1:], size - len(C), axis=0)]),
                                 NamedSharding(mesh, PartitionSpec("rows", *([None] * (a.ndim - 1)))))
                  for a in (C, W)]
        compiled = jax.jit(grid).lower(*placed).compile()
        rows.append({"task": f"NPSVOR {len(cs)} C x 5 folds", "devices": k,
                     "max_rel_diff": float(np.max(np.abs(coef - np.asarray(batched))) / np.max(np.abs(batched))),
                     "arg_MB_per_device": compiled.memory_analysis().argument_size_in_bytes / 1e6,
                     **_comms(compiled), "compile_s": first_s - run_s, "run_s": run_s,
                     "unsharded_run_s": single_s})
        print_table(rows[-1:], list(rows[-1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None, help="probit rows (default 10^6; --quick 2x10^5)")
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--isbor-rows", type=int, default=None, help="ISBOR rows (default 2x10^5; --quick 5x10^4)")
    parser.add_argument("--rankpairs-rows", type=int, default=None,
                        help="swapped-pairs rows (default 10^5; --quick 2x10^4)")
    parser.add_argument("--only", default="probit,isbor,rankpairs,npsvor", help="comma-separated parts to run")
    args = parser.parse_args()
    n = args.rows or (200_000 if args.quick else 1_000_000)
    parts = set(args.only.split(","))
    rows = []
    if "probit" in parts:
        probit_rows(n, args.features, rows)
    if "isbor" in parts:
        isbor_rows(args.isbor_rows or (50_000 if args.quick else 200_000), rows)
    if "rankpairs" in parts:
        rankpairs_rows(args.rankpairs_rows or (20_000 if args.quick else 100_000), 50, rows)
    if "npsvor" in parts:
        npsvor_grid(args.quick, rows)
    columns = ["task", "devices", "max_rel_diff", "arg_MB_per_device", "temp_MB_per_device", "n_collectives",
               "loop_bytes", "once_bytes", "largest_loop_bytes", "compile_s", "run_s", "unsharded_run_s"]
    print()
    print_table(rows, columns)
    write_json("scaleout", {"machine": machine(), "jax": jax.__version__, "devices": jax.device_count(),
                            "columns": columns, "rows": rows})


if __name__ == "__main__":
    main()
