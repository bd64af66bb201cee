"""The runner behind ``bayesord bench``: run benchmark scripts, collect their results.

Each script ``benchmarks/NAME_bench.py`` of the repository is run in its own process (so
one script's JIT caches and x64 setting do not leak into another) with ``--quick`` when
asked, the data folder passed as ``$BAYESORD_DATASETS``.  A script writes
``benchmarks/results/NAME.json`` (a ``rows`` list of flat dicts, optional ``columns``,
``checks`` and ``machine``) and may write ``benchmarks/results/NAME*.png``.  The runner
copies them to the output folder, renders each ``rows`` list as a markdown table, and
writes ``benchmarks.md`` (all tables, plots, the command and the date), which is the
documentation's benchmark page when ``--docs`` is given.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["available", "run_benchmarks", "markdown_table"]


def _bench_dir() -> Path:
    here = Path(__file__).resolve().parents[1] / "benchmarks"
    return here if here.is_dir() else Path.cwd() / "benchmarks"


def available(bench_dir: Path | None = None) -> dict:
    """Benchmark names -> script paths (``benchmarks/NAME_bench.py``)."""
    bench_dir = bench_dir or _bench_dir()
    return {p.name[: -len("_bench.py")]: p for p in sorted(bench_dir.glob("*_bench.py"))}


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def markdown_table(rows: list, columns: list | None = None) -> str:
    """A markdown table of a list of flat dicts (columns: given, else in first-seen order)."""
    if not rows:
        return "(no rows)\n"
    if columns is None:
        columns = []
        for r in rows:
            columns += [k for k in r if k not in columns]
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _default_data_dir() -> Path | None:
    for cand in (Path.cwd().parent / "shared" / "datasets",
                 Path(__file__).resolve().parents[2] / "shared" / "datasets"):
        if cand.is_dir():
            return cand
    return None


def run_benchmarks(names, *, quick: bool, data_dir, out: Path, docs: Path | None = None,
                   timeout: float | None = None) -> int:
    """Run the named benchmarks (``["all"]`` for every one) and write the reports.

    Returns:
        0 when every script succeeded, 1 otherwise.
    """
    scripts = available()
    if not scripts:
        raise FileNotFoundError(f"no benchmarks/*_bench.py found (looked in {_bench_dir()}); "
                                "run `bayesord bench` from a checkout of the repository")
    if not names or "all" in names:
        names = list(scripts)
    unknown = [n for n in names if n not in scripts]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; available: {sorted(scripts)}")
    data_dir = Path(data_dir) if data_dir else _default_data_dir()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results_dir = next(iter(scripts.values())).parent / "results"
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("BAYESORD_COMPILE_CACHE", "off")  # compile times are measured, not reused
    if data_dir is not None:
        env["BAYESORD_DATASETS"] = str(data_dir)
    print(f"bayesord bench: {len(names)} benchmark(s), {'quick' if quick else 'full'} mode, data "
          f"{data_dir if data_dir is not None else '(none: synthetic data only)'}; output {out}")
    summary, failed, sections = [], 0, {}
    for i, name in enumerate(names, 1):
        script = scripts[name]
        cmd = [sys.executable, script.name] + (["--quick"] if quick else [])
        print(f"[{i}/{len(names)}] {name}: running {' '.join(cmd[1:])} ...", flush=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=script.parent, env=env, capture_output=True, text=True,
                                  timeout=timeout)
            code, log = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as err:
            code, log = -1, f"timed out after {timeout} s\n{err.stdout or ''}{err.stderr or ''}"
        elapsed = time.perf_counter() - t0
        (out / f"{name}.log").write_text(log)
        entry = {"benchmark": name, "status": "ok" if code == 0 else f"failed ({code})",
                 "seconds": round(elapsed, 1), "checks": ""}
        if code != 0:
            failed += 1
            print(f"      failed after {elapsed:.0f} s; last lines of {out / (name + '.log')}:")
            print("\n".join("      " + line for line in log.strip().splitlines()[-8:]))
        result_json = results_dir / f"{name}.json"
        if code == 0 and result_json.is_file():
            payload = json.loads(result_json.read_text())
            shutil.copy(result_json, out / f"{name}.json")
            pngs = sorted(results_dir.glob(f"{name}*.png"))
            for png in pngs:
                shutil.copy(png, out / png.name)
            sections[name] = (payload, [p.name for p in pngs])
            (out / f"{name}.md").write_text(_section(name, payload, [p.name for p in pngs]))
            checks = payload.get("checks", {})
            entry["checks"] = f"{sum(checks.values())}/{len(checks)} pass" if checks else "-"
            print(f"      done in {elapsed:.0f} s; {entry['checks']} target checks")
        summary.append(entry)
    (out / "benchmarks.md").write_text(_page(names, summary, sections, quick, data_dir))
    if docs is not None:
        docs = Path(docs)
        img = docs.parent / "img"
        img.mkdir(parents=True, exist_ok=True)
        for png in out.glob("*.png"):
            shutil.copy(png, img / png.name)
        docs.write_text(_page(names, summary, sections, quick, data_dir, img_prefix="img/"))
        print(f"wrote {docs} (plots in {img})")
    print("\n" + markdown_table(summary))
    print(f"wrote {out / 'benchmarks.md'}")
    return 1 if failed else 0


def _section(name, payload, pngs, img_prefix="") -> str:
    lines = [f"## {name}\n"]
    m = payload.get("machine", {})
    if m:
        lines.append(f"Run {m.get('date', '?')} on {m.get('platform', '?')} "
                     f"({m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}).\n")
    if "rows" in payload:
        lines.append(markdown_table(payload["rows"], payload.get("columns")))
    checks = payload.get("checks")
    if checks:
        lines.append("Targets:\n")
        lines += [f"- {'PASS' if ok else 'FAIL'}: {k}" for k, ok in checks.items()]
        lines.append("")
    lines += [f"![{name}]({img_prefix}{p})\n" for p in pngs]
    return "\n".join(lines) + "\n"


def _page(names, summary, sections, quick, data_dir, img_prefix="") -> str:
    cmd = "bayesord bench " + " ".join(names) + (" --quick" if quick else "")
    head = ["# Benchmark results\n",
            f"Generated by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
            f" with data from `{data_dir if data_dir is not None else 'synthetic generators only'}`.",
            "Timings come from a shared machine and are noisy; compare ratios measured in the "
            "same run, not absolute seconds.\n",
            markdown_table(summary)]
    body = [_section(n, *sections[n], img_prefix=img_prefix) for n in names if n in sections]
    return "\n".join(head + body)
