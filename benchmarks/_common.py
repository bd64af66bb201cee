"""Helpers shared by the benchmark scripts: timing, tables, JSON output, feature scaling."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

# Compile times are part of what the benchmarks report, so they compile from scratch unless
# told otherwise (the library would otherwise reuse programs from its on-disk cache).
os.environ.setdefault("BAYESORD_COMPILE_CACHE", "off")

RESULTS = Path(__file__).resolve().parent / "results"


def time_call(fn, repeats=3):
    """Median wall time of ``fn()`` over ``repeats`` calls (results blocked until ready)."""
    import jax

    times = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def time_alternating(fns, repeats=3):
    """Median wall times of each of ``fns`` over ``repeats`` rounds that call them in turn
    (results blocked until ready): a ratio of two of them is then not tilted by the machine
    warming up or slowing down between one's calls and the other's."""
    import jax

    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, spent in zip(fns, times):
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            spent.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def machine():
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def print_table(rows, columns):
    widths = [max([len(c)] + [len(_fmt(r.get(c))) for r in rows]) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).rjust(w) for c, w in zip(columns, widths)))


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_json(name, payload):
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"\nwrote {path}")
    return path


def rescale(Xtr, Xte, how="standard"):
    """Features scaled with the training part's statistics: ``"standard"`` (mean and sd)
    or ``"minmax"`` (onto [0, 1] over the training range); constant features unchanged in
    spread (a constant column's computed sd can be rounding residue, ~1e-17, not 0)."""
    if how == "standard":
        lo, width = Xtr.mean(0), Xtr.std(0)
    else:
        lo, width = Xtr.min(0), np.ptp(Xtr, axis=0)
    width = np.where(np.ptp(Xtr, axis=0) > 0, width, 1.0)
    return (Xtr - lo) / width, (Xte - lo) / width
