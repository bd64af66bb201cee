"""Nominal and scale effects: ``CumulativeLinkModel`` against R's ``ordinal::clm``.

For each data set (needs ``../shared/datasets``) and link, the model with every column as a
location term is fitted by ``CumulativeLinkModel.from_formula`` and by ``clm`` through
``Rscript`` in the same run, then ``nominal_test()``/``scale_test()`` against
``ordinal::nominal_test``/``scale_test``: each location term refitted as a nominal effect
(one shift per threshold) and as a scale effect.  Reported per data set: the largest
difference in log-likelihood over the model and all its refits, the refits whose
maximum-likelihood estimate does not exist (flagged by either program: not converged, or a
singular Hessian in R), and times: bayesord's first call of the tests in this process
(compilation included: one program per term width and test) and the compiled tests, against R's
time for the same tests (``system.time`` inside R, so R's start-up and CSV reading are
excluded).

Data sets: ``wine`` (``rating ~ temp + contact``) and ``soup`` (``SURENESS ~ PROD + DAY +
SOUPTYPE + COLD``), both with text columns, and the dense ordinal sets ``balance_scale``,
``era``, ``esl``, ``swd``, ``toy`` and ``winequality_red`` (columns as they are in the file,
not standardised).

Run: ``python benchmarks/clm_bench.py`` (R with the ``ordinal`` package: ``apt-get install
r-base-core r-cran-ordinal``).  Prints a table, writes ``benchmarks/results/clm.json``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, print_table, write_json  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from bayesord import CumulativeLinkModel  # noqa: E402
from bayesord.datasets import _default_roots  # noqa: E402

GROUPED = {"wine": "rating ~ temp + contact", "soup": "SURENESS ~ PROD + DAY + SOUPTYPE + COLD"}
DENSE = ("balance_scale", "era", "esl", "swd", "toy", "winequality_red")

R_TESTS = r"""
suppressMessages(library(ordinal))
args <- commandArgs(trailingOnly = TRUE)
d <- read.csv(args[1])
f <- as.formula(args[2])
response <- all.vars(f)[1]
d[[response]] <- factor(d[[response]], ordered = TRUE)
for (col in names(d)) if (is.character(d[[col]])) d[[col]] <- factor(d[[col]])
secs <- system.time({
  m <- clm(f, data = d, link = args[3])
  nt <- suppressWarnings(nominal_test(m))
  st <- suppressWarnings(scale_test(m))
})[["elapsed"]]
cat("seconds", secs, "\n")
cat("base", format(as.numeric(logLik(m)), digits = 12), "\n")
for (i in seq_len(nrow(nt))[-1]) cat("nominal", rownames(nt)[i], format(nt$logLik[i], digits = 12), "\n")
for (i in seq_len(nrow(st))[-1]) cat("scale", rownames(st)[i], format(st$logLik[i], digits = 12), "\n")
"""


def load(root, name):
    frame = pd.read_csv(root / f"{name}.csv.gz")
    if name in GROUPED:
        return frame, GROUPED[name]
    columns = [c for c in frame.columns if c != "y"]
    return frame[columns + ["y"]], "y ~ " + " + ".join(columns)


def run_r(frame, formula, link, workdir):
    csv, script = Path(workdir) / "data.csv", Path(workdir) / "tests.R"
    frame.to_csv(csv, index=False)
    script.write_text(R_TESTS)
    out = subprocess.run(["Rscript", str(script), str(csv), formula, link], capture_output=True, text=True,
                         check=True).stdout
    values = {"nominal": {}, "scale": {}}
    for line in out.splitlines():
        key, *rest = line.split()
        if key in ("seconds", "base"):
            values[key] = float(rest[0])
        else:
            values[key][rest[0]] = float(rest[1]) if rest[1] != "NA" else np.nan
    return values


def ours(frame, formula, link):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # refits without a maximum-likelihood estimate warn
        t0 = time.perf_counter()
        model = CumulativeLinkModel.from_formula(formula, frame, link=link)
        tables = model.nominal_test(), model.scale_test()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        model = CumulativeLinkModel.from_formula(formula, frame, link=link)
        tables = model.nominal_test(), model.scale_test()
        compiled = time.perf_counter() - t0
    return model, tables, first, compiled


def compare(name, frame, formula, link, workdir):
    model, (nominal, scale), first, compiled = ours(frame, formula, link)
    r = run_r(frame, formula, link, workdir)
    diffs = [abs(model.loglik_ - r["base"])]
    unconverged = []
    for kind, table in (("nominal", nominal), ("scale", scale)):
        for term in table.index[1:]:
            if term not in r[kind]:
                raise RuntimeError(f"{name}: R has no {kind} test of {term!r} ({sorted(r[kind])})")
            theirs, mine = r[kind][term], table.loc[term, "loglik"]
            if not table.loc[term, "converged"]:
                unconverged.append(f"{kind}:{term}")
            diffs.append(abs(mine - theirs))
    return {"data": name, "link": link, "n": len(frame), "terms": len(nominal) - 1,
            "loglik": model.loglik_, "max_dloglik": float(np.nanmax(diffs)),
            "refits_no_mle": len(unconverged), "no_mle": ", ".join(unconverged) or "-",
            "ours_first_s": first, "ours_s": compiled, "clm_s": r["seconds"],
            "ratio": r["seconds"] / compiled}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--links", default="logit,probit")
    parser.add_argument("--sets", default=",".join(list(GROUPED) + list(DENSE)))
    args = parser.parse_args(argv)
    if shutil.which("Rscript") is None:
        sys.exit("Rscript not found: apt-get install r-base-core r-cran-ordinal")
    roots = [r for r in _default_roots() if (r / "wine.csv.gz").exists()]
    if not roots:
        sys.exit("../shared/datasets not found")
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.sets.split(","):
            frame, formula = load(roots[0], name)
            for link in args.links.split(","):
                rows.append(compare(name, frame, formula, link, workdir))
                print_table(rows[-1:], list(rows[-1]))
    print()
    print_table(rows, ["data", "link", "n", "terms", "loglik", "max_dloglik", "refits_no_mle", "ours_first_s",
                       "ours_s", "clm_s", "ratio"])
    write_json("clm", {"machine": machine(), "rows": rows, "args": vars(args)})


if __name__ == "__main__":
    main()
